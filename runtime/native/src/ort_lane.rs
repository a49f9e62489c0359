//! The in-core ONNX lane: `ModelInfer` requests for a registered ONNX model answered in the core, on ONNX
//! Runtime's C library (loaded from the path the Python side names: the onnxruntime wheel's own
//! `capi/libonnxruntime.so.*`), without a hand-over to the event loop.
//!
//! Which requests it takes is crate::lane_plan's exact match against what the data plane registered; anything
//! else, and anything ONNX Runtime refuses, goes to Python as before. The data plane decides which model version
//! is registered and withdraws it; a request holds its version's session until it is answered.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use bytes::Bytes;
use ort::environment::Environment;
use ort::logging::LogLevel;
use ort::memory::Allocator;
use ort::session::builder::SessionBuilder;
use ort::session::{Session, SessionInputValue, SessionInputs};
use ort::value::{DynTensor, DynTensorValueType, TensorElementType};

use crate::lane_plan::{element_size, Plan, Signature};
use crate::messages::{
    encode_response, InferOutputTensor, ModelInferRequest, ModelInferResponseHead,
};

/// ONNX Runtime allows one environment per process, for good (`ort` keeps it in its own global): the first
/// lane's library and environment serve every later one.
static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();

fn environment(library: &Path) -> Result<&'static Environment, String> {
    ENVIRONMENT
        .get_or_init(|| {
            ort::init_from(library)
                .map_err(|e| format!("cannot load ONNX Runtime from {}: {e}", library.display()))?
                .with_name("ensemble-runtime-lane")
                .build()
                .map_err(|e| format!("ONNX Runtime's environment: {e}"))
        })
        .as_ref()
        .map_err(String::clone)
}

/// What one registered version answered, for the data plane's statistics.
#[derive(Default)]
pub struct LaneCounts {
    pub answered: AtomicU64,
    /// Nanoseconds spent in `Session::run` for those.
    pub compute_ns: AtomicU64,
    /// Requests it handed to Python (no exact match, or refused by ONNX Runtime).
    pub passed: AtomicU64,
    /// Requests it ran on tokio's blocking threads rather than the core's own (`LaneModel::runs_inline`).
    pub pooled: AtomicU64,
}

/// Runs shorter than this, on average, run on the core's thread: cheaper than a hand-off to a blocking thread and
/// back, and short enough not to hold the port's other connections (the data plane's ONNX bound too).
const INLINE_BELOW_NS: u64 = 200_000;

/// The moving average of a version's run times (weight 1/5 for the newest), starting high: its first runs go to a
/// blocking thread until it is measured fast.
pub struct Pace {
    typical_ns: AtomicU64,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            typical_ns: AtomicU64::new(1_000_000_000),
        }
    }
}

impl Pace {
    pub fn record(&self, ns: u64) {
        // concurrent updates may lose one another's step: an estimate, not an account
        let typical = self.typical_ns.load(Ordering::Relaxed);
        let next = (typical.saturating_mul(4) / 5).saturating_add(ns / 5);
        self.typical_ns.store(next, Ordering::Relaxed);
    }

    pub fn inline(&self) -> bool {
        self.typical_ns.load(Ordering::Relaxed) < INLINE_BELOW_NS
    }
}

/// One model version the lane answers for.
pub struct LaneModel {
    version: String,
    signature: Signature,
    element_types: Vec<TensorElementType>,
    session: Mutex<Session>,
    pace: Pace,
    pub counts: LaneCounts,
}

impl LaneModel {
    /// Loads `model` (an .onnx file) for `signature`, ONNX Runtime's threads as given (1 intra-op thread: the
    /// calling thread alone).
    pub fn load(
        library: &Path,
        model: &Path,
        version: String,
        signature: Signature,
        intra_op_threads: usize,
    ) -> Result<Self, String> {
        signature.carried()?;
        let element_types = signature
            .inputs
            .iter()
            .map(|spec| element_type(&spec.datatype))
            .collect::<Option<Vec<_>>>()
            .ok_or("an input datatype the lane does not carry")?;
        let failed = |e: String| format!("cannot load {} in the lane: {e}", model.display());
        let text = |e: ort::Error<SessionBuilder>| e.to_string();
        let session = Session::builder(environment(library)?)
            .map_err(|e| failed(e.to_string()))?
            .with_intra_threads(intra_op_threads)
            .map_err(text)
            .and_then(|b| b.with_inter_threads(1).map_err(text))
            .and_then(|b| b.with_log_level(LogLevel::Error).map_err(text))
            .map_err(failed)?
            .commit_from_file(model)
            .map_err(|e| failed(e.to_string()))?;
        for (declared, graph, side) in [
            (&signature.inputs, session.inputs(), "input"),
            (&signature.outputs, session.outputs(), "output"),
        ] {
            let names: Vec<&str> = graph.iter().map(|outlet| outlet.name()).collect();
            if let Some(missing) = declared.iter().find(|s| !names.contains(&s.name.as_str())) {
                return Err(format!("'{}' is not an {side} of the graph", missing.name));
            }
        }
        Ok(Self {
            version,
            signature,
            element_types,
            session: Mutex::new(session),
            pace: Pace::default(),
            counts: LaneCounts::default(),
        })
    }

    /// Whether a request runs on the calling thread (the core's), by how long this version's runs take.
    pub fn runs_inline(&self) -> bool {
        self.pace.inline()
    }

    /// `answer` on one of tokio's blocking threads, for a version whose runs are not short: the request comes
    /// back with the answer, for Python where there is none. Err: the run panicked (the request is lost with it).
    pub async fn answer_pooled(
        self: Arc<Self>,
        request: ModelInferRequest,
    ) -> Result<(Option<Bytes>, ModelInferRequest), tokio::task::JoinError> {
        self.counts.pooled.fetch_add(1, Ordering::Relaxed);
        let model = self.clone();
        tokio::task::spawn_blocking(move || (model.answer(&request), request)).await
    }

    /// The serialized response, or None where Python should answer (the reason counted as `passed`).
    pub fn answer(&self, request: &ModelInferRequest) -> Option<Bytes> {
        let version = &request.model_version;
        let answer = (version.is_empty() || *version == self.version)
            .then(|| self.signature.plan(request).ok())
            .flatten()
            .and_then(|plan| self.run(request, &plan));
        if answer.is_none() {
            self.counts.passed.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }

    fn run(&self, request: &ModelInferRequest, plan: &Plan) -> Option<Bytes> {
        let mut feeds: Vec<(&str, SessionInputValue<'_>)> = Vec::with_capacity(plan.feeds.len());
        for (slot, &at) in plan.feeds.iter().enumerate() {
            let input = &request.inputs[at];
            let raw = &request.raw_input_contents[at];
            let mut tensor = DynTensor::new(
                &Allocator::default(),
                self.element_types[slot],
                input.shape.clone(),
            )
            .ok()?;
            if !raw.is_empty() {
                // SAFETY: the tensor holds exactly `raw.len()` bytes: lane_plan checked that the contents are
                // the shape's elements times the datatype's size, the size ONNX Runtime allocated for it.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        raw.as_ptr(),
                        tensor.data_ptr_mut().cast::<u8>(),
                        raw.len(),
                    )
                };
            }
            feeds.push((self.signature.inputs[slot].name.as_str(), tensor.into()));
        }
        let started = Instant::now();
        let mut session = self.session.lock().ok()?;
        let mut outputs = session.run(SessionInputs::from(feeds)).ok()?;
        let took = started.elapsed();
        let took_ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.pace.record(took_ns);
        let mut heads = Vec::with_capacity(plan.outputs.len());
        let mut tensors = Vec::with_capacity(plan.outputs.len());
        for &slot in &plan.outputs {
            let spec = &self.signature.outputs[slot];
            let tensor = outputs
                .remove(spec.name.as_str())?
                .downcast::<DynTensorValueType>()
                .ok()?;
            if element_type(&spec.datatype) != Some(*tensor.data_type()) {
                return None; // the graph's output is not the config's datatype: Python says so
            }
            heads.push(InferOutputTensor {
                name: spec.name.clone(),
                datatype: spec.datatype.clone(),
                shape: tensor.shape().to_vec(),
                parameters: Default::default(),
            });
            tensors.push(tensor);
        }
        drop(outputs);
        drop(session);
        let mut payloads: Vec<&[u8]> = Vec::with_capacity(tensors.len());
        for (tensor, head) in tensors.iter().zip(&heads) {
            let bytes = tensor.shape().num_elements() * element_size(&head.datatype)?;
            payloads.push(if bytes == 0 {
                &[]
            } else {
                // SAFETY: a CPU tensor of this shape and element type holds `bytes` bytes at its data pointer,
                // alive while `tensors` is.
                unsafe { std::slice::from_raw_parts(tensor.data_ptr().cast::<u8>(), bytes) }
            });
        }
        let head = ModelInferResponseHead {
            model_name: request.model_name.clone(),
            model_version: self.version.clone(),
            id: request.id.clone(),
            parameters: Default::default(),
            outputs: heads,
        };
        let encoded = encode_response(&head, &payloads);
        self.counts.answered.fetch_add(1, Ordering::Relaxed);
        self.counts.compute_ns.fetch_add(took_ns, Ordering::Relaxed);
        Some(encoded)
    }
}

/// The KServe datatype's ONNX element type, for those the lane carries.
fn element_type(datatype: &str) -> Option<TensorElementType> {
    Some(match datatype {
        "BOOL" => TensorElementType::Bool,
        "UINT8" => TensorElementType::Uint8,
        "INT8" => TensorElementType::Int8,
        "UINT16" => TensorElementType::Uint16,
        "INT16" => TensorElementType::Int16,
        "FP16" => TensorElementType::Float16,
        "UINT32" => TensorElementType::Uint32,
        "INT32" => TensorElementType::Int32,
        "FP32" => TensorElementType::Float32,
        "UINT64" => TensorElementType::Uint64,
        "INT64" => TensorElementType::Int64,
        "FP64" => TensorElementType::Float64,
        _ => return None,
    })
}

/// The models the lane answers for, by name: one version each.
#[derive(Default)]
pub struct OrtLane {
    models: RwLock<HashMap<String, Arc<LaneModel>>>,
    /// How many models are served: a request to a port with none pays one atomic load.
    served: AtomicUsize,
}

impl OrtLane {
    /// From now on `name`'s requests (for no version, or for `model`'s) are `model`'s; the one it replaces, if
    /// any, is returned (it answers what it has started).
    pub fn serve(&self, name: String, model: Arc<LaneModel>) -> Option<Arc<LaneModel>> {
        let mut models = self.models.write().ok()?;
        let replaced = models.insert(name, model);
        self.served.store(models.len(), Ordering::Relaxed);
        replaced
    }

    /// `name`'s requests go to Python again.
    pub fn withdraw(&self, name: &str) -> Option<Arc<LaneModel>> {
        let mut models = self.models.write().ok()?;
        let withdrawn = models.remove(name);
        self.served.store(models.len(), Ordering::Relaxed);
        withdrawn
    }

    /// The version served for `name`, if any.
    pub fn model(&self, name: &str) -> Option<Arc<LaneModel>> {
        if self.served.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.models.read().ok()?.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_runs_on_a_blocking_thread_until_its_runs_are_measured_short() {
        let pace = Pace::default();
        assert!(!pace.inline());
        let mut runs = 0;
        while !pace.inline() {
            pace.record(20_000);
            runs += 1;
            assert!(runs < 100, "20 us runs never made it inline");
        }
        assert!(runs > 10, "the first runs stay on a blocking thread");
        for _ in 0..10 {
            pace.record(5_000_000); // a version that slows down leaves the core's thread
        }
        assert!(!pace.inline());
    }
}
