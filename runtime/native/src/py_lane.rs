//! The Python face of the in-core ONNX lane (crate::ort_lane): `OnnxLane`, got from `GrpcCore.onnx_lane()`,
//! registers a model version's session and signature, withdraws it, and reports what it answered.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::lane_plan::{Signature, TensorSpec};
use crate::ort_lane::LaneModel;
use crate::service::Core;

/// (name, KServe datatype, dims) of one input or output, dims as the model's config has them.
type Spec = (String, String, Vec<i64>);

fn specs(tensors: Vec<Spec>) -> Vec<TensorSpec> {
    tensors
        .into_iter()
        .map(|(name, datatype, dims)| TensorSpec {
            name,
            datatype,
            dims,
        })
        .collect()
}

#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct OnnxLane {
    core: Arc<Core>,
}

impl OnnxLane {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

#[pymethods]
impl OnnxLane {
    /// Loads `path` (an .onnx file) on ONNX Runtime's library at `library` and, from now on, answers `model`'s
    /// ModelInfer requests (for no version, or for `version`) in the core where they match the signature exactly;
    /// any other request still reaches Python. Replaces what `model` had. ValueError: it cannot load.
    #[pyo3(signature = (model, version, path, library, inputs, outputs, max_batch_size, intra_op_threads = 1))]
    #[allow(clippy::too_many_arguments)]
    fn serve(
        &self,
        py: Python<'_>,
        model: String,
        version: String,
        path: PathBuf,
        library: PathBuf,
        inputs: Vec<Spec>,
        outputs: Vec<Spec>,
        max_batch_size: i64,
        intra_op_threads: usize,
    ) -> PyResult<()> {
        let signature = Signature {
            inputs: specs(inputs),
            outputs: specs(outputs),
            max_batch_size,
        };
        let loaded = py
            .allow_threads(|| {
                LaneModel::load(&library, &path, version, signature, intra_op_threads)
            })
            .map_err(PyValueError::new_err)?;
        self.core.lane.serve(model, Arc::new(loaded));
        Ok(())
    }

    /// `model`'s requests all reach Python again; whether it was served here.
    fn withdraw(&self, model: &str) -> bool {
        self.core.lane.withdraw(model).is_some()
    }

    /// (answered, nanoseconds in ONNX Runtime's run for those, handed to Python) for `model`'s registered
    /// version; None where none is.
    fn counts(&self, model: &str) -> Option<(u64, u64, u64)> {
        let counts = &self.core.lane.model(model)?.counts;
        Some((
            counts.answered.load(Ordering::Relaxed),
            counts.compute_ns.load(Ordering::Relaxed),
            counts.passed.load(Ordering::Relaxed),
        ))
    }

    /// How many of `model`'s requests ran on a blocking thread, not the core's own: its first, until its runs are
    /// measured short (200 us on average), and all of them for a version that runs longer. None: not served.
    fn pooled(&self, model: &str) -> Option<u64> {
        Some(
            self.core
                .lane
                .model(model)?
                .counts
                .pooled
                .load(Ordering::Relaxed),
        )
    }
}
