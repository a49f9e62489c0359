//! The in-core ONNX lane: `ModelInfer` requests for a registered ONNX model answered in the core, on ONNX
//! Runtime's C library (loaded from the path the Python side names: the onnxruntime wheel's own
//! `capi/libonnxruntime.so.*`), without a hand-over to the event loop.
//!
//! Which requests it takes is crate::lane_plan's exact match against what the data plane registered; anything
//! else, and anything ONNX Runtime refuses, goes to Python as before. The data plane decides which model version
//! is registered and withdraws it; a request holds its version's session until it is answered.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
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
}

/// One model version the lane answers for.
pub struct LaneModel {
    version: String,
    signature: Signature,
    element_types: Vec<TensorElementType>,
    session: Mutex<Session>,
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
            counts: LaneCounts::default(),
        })
    }

    /// The serialized response, or None where Python should answer (the reason counted as `passed`).
    fn answer(&self, request: &ModelInferRequest) -> Option<Bytes> {
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
        self.counts.compute_ns.fetch_add(
            u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
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
}

impl OrtLane {
    /// From now on `name`'s requests (for no version, or for `model`'s) are `model`'s; the one it replaces, if
    /// any, is returned (it answers what it has started).
    pub fn serve(&self, name: String, model: Arc<LaneModel>) -> Option<Arc<LaneModel>> {
        self.models.write().ok()?.insert(name, model)
    }

    /// `name`'s requests go to Python again.
    pub fn withdraw(&self, name: &str) -> Option<Arc<LaneModel>> {
        self.models.write().ok()?.remove(name)
    }

    pub fn model(&self, name: &str) -> Option<Arc<LaneModel>> {
        self.models.read().ok()?.get(name).cloned()
    }

    /// Whether any model is registered: the one check a request pays when the lane is unused.
    pub fn is_empty(&self) -> bool {
        self.models.read().map(|m| m.is_empty()).unwrap_or(true)
    }

    /// The answer to `request` made here, or None: Python answers it.
    pub fn answer(&self, request: &ModelInferRequest) -> Option<Bytes> {
        self.model(&request.model_name)?.answer(request)
    }
}
