//! A decoded `ModelInfer` request as Python sees it: the attributes `grpc_codec.decode_request` reads from a
//! protobuf `ModelInferRequest`, with parameters already plain values and raw contents as [`WireBuffer`]s
//! that numpy reads in place (buffer protocol; the bytes stay owned by this core).

use std::ffi::{c_int, c_void};

use bytes::Bytes;
use pyo3::exceptions::PyBufferError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::grpc_plain::{fixed_size_bytes, is_plain};
use crate::messages::{
    InferInputTensor, InferParameter, InferTensorContents, ModelInferRequest, ParameterChoice,
    Parameters,
};

/// Read-only bytes of the received message, exported through the buffer protocol without a copy.
#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct WireBuffer {
    data: Bytes,
}

impl WireBuffer {
    pub fn new(data: Bytes) -> Self {
        Self { data }
    }
}

#[pymethods]
impl WireBuffer {
    fn __len__(&self) -> usize {
        self.data.len()
    }

    /// # Safety
    /// `view` is the caller's Py_buffer; the exported memory lives as long as `slf`, which the view holds.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if flags & pyo3::ffi::PyBUF_WRITABLE == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("the received bytes are read-only"));
        }
        let data = &slf.get().data;
        let filled = pyo3::ffi::PyBuffer_FillInfo(
            view,
            slf.as_ptr(),
            data.as_ptr() as *mut c_void,
            data.len() as pyo3::ffi::Py_ssize_t,
            1,
            flags,
        );
        if filled == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}
}

/// `InferTensorContents`: each typed field as a list, as protobuf's repeated fields read.
#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct Contents {
    inner: InferTensorContents,
}

#[pymethods]
impl Contents {
    #[getter]
    fn bool_contents(&self) -> Vec<bool> {
        self.inner.bool_contents.clone()
    }
    #[getter]
    fn int_contents(&self) -> Vec<i32> {
        self.inner.int_contents.clone()
    }
    #[getter]
    fn int64_contents(&self) -> Vec<i64> {
        self.inner.int64_contents.clone()
    }
    #[getter]
    fn uint_contents(&self) -> Vec<u32> {
        self.inner.uint_contents.clone()
    }
    #[getter]
    fn uint64_contents(&self) -> Vec<u64> {
        self.inner.uint64_contents.clone()
    }
    #[getter]
    fn fp32_contents(&self) -> Vec<f32> {
        self.inner.fp32_contents.clone()
    }
    #[getter]
    fn fp64_contents(&self) -> Vec<f64> {
        self.inner.fp64_contents.clone()
    }
    #[getter]
    fn bytes_contents<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            self.inner
                .bytes_contents
                .iter()
                .map(|b| PyBytes::new(py, b)),
        )
    }
}

#[pyclass(module = "ensemble_runtime.protocol._native", frozen, get_all)]
pub struct InputTensor {
    name: String,
    datatype: String,
    shape: Py<PyTuple>,
    parameters: Py<PyDict>,
    contents: Py<Contents>,
    has_contents: bool,
}

#[pymethods]
impl InputTensor {
    /// As protobuf's `HasField`: whether typed `contents` were sent.
    #[pyo3(name = "HasField")]
    fn has_field(&self, field: &str) -> bool {
        field == "contents" && self.has_contents
    }
}

#[pyclass(module = "ensemble_runtime.protocol._native", frozen, get_all)]
pub struct OutputTensor {
    name: String,
    parameters: Py<PyDict>,
}

/// A decoded request. What every request needs (names, parameters, the raw contents, a plain request's arrays)
/// is built with it; the protobuf-like `inputs`, `outputs` and `plain` lists only where Python reads them (a
/// request the core did not find plain, or whose arrays it could not build), from the tensors kept here.
#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct InferRequestView {
    #[pyo3(get)]
    model_name: String,
    #[pyo3(get)]
    model_version: String,
    #[pyo3(get)]
    id: String,
    #[pyo3(get)]
    parameters: Py<PyDict>,
    #[pyo3(get)]
    raw_input_contents: Py<PyList>,
    /// Where it is plain and every input a fixed-size datatype whose bytes fit its shape (every check of
    /// `dtypes.tensor_from_raw` passes): name -> the input as a numpy array over the core's bytes.
    #[pyo3(get)]
    arrays: Option<Py<PyDict>>,
    /// With `arrays`: name -> datatype per input.
    #[pyo3(get)]
    declared: Option<Py<PyDict>>,
    /// Requested output name -> its parameters, in the request's order.
    #[pyo3(get)]
    output_parameters: Py<PyDict>,
    /// The request message's size in bytes.
    #[pyo3(get)]
    size: usize,
    /// Whether the request is plain ([`crate::grpc_plain`]).
    is_plain: bool,
    /// The input tensors as decoded, for `inputs` and `plain`.
    tensors: Vec<InferInputTensor>,
    /// Each requested output, in the request's order, repeats too, with its parameters, for `outputs`.
    requested: Vec<(String, Py<PyDict>)>,
    inputs: GILOnceCell<Py<PyList>>,
    outputs: GILOnceCell<Py<PyList>>,
    plain: GILOnceCell<Option<Py<PyList>>>,
}

#[pymethods]
impl InferRequestView {
    /// `InputTensor` per input, as protobuf's repeated field reads (built on first read).
    #[getter]
    fn inputs(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        self.inputs
            .get_or_try_init(py, || {
                let inputs = PyList::empty(py);
                for tensor in &self.tensors {
                    inputs.append(Py::new(py, input_tensor(py, tensor)?)?)?;
                }
                Ok::<_, PyErr>(inputs.unbind())
            })
            .map(|list| list.clone_ref(py))
    }

    /// `OutputTensor` per requested output, as sent (built on first read).
    #[getter]
    fn outputs(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        self.outputs
            .get_or_try_init(py, || {
                let outputs = PyList::empty(py);
                for (name, params) in &self.requested {
                    let output = OutputTensor {
                        name: name.clone(),
                        parameters: params.clone_ref(py),
                    };
                    outputs.append(Py::new(py, output)?)?;
                }
                Ok::<_, PyErr>(outputs.unbind())
            })
            .map(|list| list.clone_ref(py))
    }

    /// Where the core found the request plain: (name, datatype, shape, raw contents) per input (built on first
    /// read); None otherwise.
    #[getter]
    fn plain(&self, py: Python<'_>) -> PyResult<Option<Py<PyList>>> {
        self.plain
            .get_or_try_init(py, || {
                if !self.is_plain {
                    return Ok::<_, PyErr>(None);
                }
                let raw = self.raw_input_contents.bind(py);
                let plain = PyList::empty(py);
                for (index, tensor) in self.tensors.iter().enumerate() {
                    let shape = PyTuple::new(py, &tensor.shape)?;
                    let entry = (
                        tensor.name.as_str(),
                        tensor.datatype.as_str(),
                        shape,
                        raw.get_item(index)?,
                    );
                    plain.append(entry)?;
                }
                Ok(Some(plain.unbind()))
            })
            .map(|plain| plain.as_ref().map(|list| list.clone_ref(py)))
    }
}

fn input_tensor(py: Python<'_>, tensor: &InferInputTensor) -> PyResult<InputTensor> {
    Ok(InputTensor {
        name: tensor.name.clone(),
        datatype: tensor.datatype.clone(),
        shape: PyTuple::new(py, &tensor.shape)?.unbind(),
        parameters: parameters(py, tensor.parameters.clone())?,
        contents: Py::new(
            py,
            Contents {
                inner: tensor.contents.clone().unwrap_or_default(),
            },
        )?,
        has_contents: tensor.contents.is_some(),
    })
}

/// The wire datatypes of a fixed size: (name, numpy's name for its dtype, bytes per element).
const FIXED: [(&str, &str, usize); 12] = [
    ("BOOL", "bool", 1),
    ("UINT8", "uint8", 1),
    ("UINT16", "uint16", 2),
    ("UINT32", "uint32", 4),
    ("UINT64", "uint64", 8),
    ("INT8", "int8", 1),
    ("INT16", "int16", 2),
    ("INT32", "int32", 4),
    ("INT64", "int64", 8),
    ("FP16", "float16", 2),
    ("FP32", "float32", 4),
    ("FP64", "float64", 8),
];

/// What building a plain request's arrays takes from numpy: `frombuffer` and each fixed-size datatype's dtype.
/// Made once per core, on its first request.
pub struct Arrays {
    frombuffer: Py<PyAny>,
    dtypes: Vec<Py<PyAny>>, // in FIXED's order
}

impl Arrays {
    pub fn new(py: Python<'_>) -> PyResult<Self> {
        let numpy = py.import("numpy")?;
        let dtype = numpy.getattr("dtype")?;
        let dtypes = FIXED
            .iter()
            .map(|(_, name, _)| dtype.call1((*name,)).map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        Ok(Self {
            frombuffer: numpy.getattr("frombuffer")?.unbind(),
            dtypes,
        })
    }

    /// The inputs, (name, datatype, shape, bytes), as arrays (name -> array) and their datatypes (name ->
    /// datatype), where each input's datatype has a fixed size and its bytes are what its shape asks for; `None`
    /// otherwise, and where numpy refuses (it cannot, for bytes that fit): Python's checks then run.
    pub fn build<'py>(
        &self,
        py: Python<'py>,
        inputs: &[(&str, &str, &[i64], Bound<'py, PyAny>)],
    ) -> Option<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let mut slots = Vec::with_capacity(inputs.len());
        for (_, datatype, shape, data) in inputs {
            let slot = FIXED.iter().position(|(wire, _, _)| wire == datatype)?;
            if fixed_size_bytes(shape, FIXED[slot].2) != Some(data.len().ok()?) {
                return None;
            }
            slots.push(slot);
        }
        let arrays = PyDict::new(py);
        let declared = PyDict::new(py);
        let frombuffer = self.frombuffer.bind(py);
        for ((name, datatype, shape, data), slot) in inputs.iter().zip(slots) {
            let flat = frombuffer.call1((data, self.dtypes[slot].bind(py))).ok()?;
            let shape = PyTuple::new(py, *shape).ok()?;
            let array = flat.call_method1(intern!(py, "reshape"), (shape,)).ok()?;
            arrays.set_item(name, array).ok()?;
            declared.set_item(name, datatype).ok()?;
        }
        Some((arrays, declared))
    }
}

fn parameters(py: Python<'_>, source: Parameters) -> PyResult<Py<PyDict>> {
    let out = PyDict::new(py);
    for (key, InferParameter { choice }) in source {
        match choice {
            Some(ParameterChoice::Bool(v)) => out.set_item(key, v)?,
            Some(ParameterChoice::Int64(v)) => out.set_item(key, v)?,
            Some(ParameterChoice::String(v)) => out.set_item(key, v)?,
            Some(ParameterChoice::Double(v)) => out.set_item(key, v)?,
            Some(ParameterChoice::Uint64(v)) => out.set_item(key, v)?,
            None => out.set_item(key, "")?, // as grpc_codec reads a parameter with no value set
        }
    }
    Ok(out.unbind())
}

/// Builds the Python view of one decoded request (with the GIL held, once per request of a batch).
pub fn request_view(
    py: Python<'_>,
    request: ModelInferRequest,
    numpy: &Arrays,
    size: usize,
) -> PyResult<Py<InferRequestView>> {
    let is_plain = is_plain(&request);
    let raw = PyList::empty(py);
    for data in request.raw_input_contents {
        raw.append(Py::new(py, WireBuffer { data })?)?;
    }
    // a plain request's arrays, over the bytes just wrapped (one per input: `is_plain`)
    let built = if is_plain {
        let mut tensors = Vec::with_capacity(request.inputs.len());
        for (index, tensor) in request.inputs.iter().enumerate() {
            let data = raw.get_item(index)?;
            tensors.push((
                tensor.name.as_str(),
                tensor.datatype.as_str(),
                &tensor.shape[..],
                data,
            ));
        }
        numpy.build(py, &tensors)
    } else {
        None
    };
    let (arrays, declared) = match built {
        Some((arrays, declared)) => (Some(arrays.unbind()), Some(declared.unbind())),
        None => (None, None),
    };
    let output_parameters = PyDict::new(py);
    let mut requested = Vec::with_capacity(request.outputs.len());
    for output in request.outputs {
        let params = parameters(py, output.parameters)?;
        output_parameters.set_item(&output.name, params.clone_ref(py))?;
        requested.push((output.name, params));
    }
    let view = InferRequestView {
        model_name: request.model_name,
        model_version: request.model_version,
        id: request.id,
        parameters: parameters(py, request.parameters)?,
        raw_input_contents: raw.unbind(),
        arrays,
        declared,
        output_parameters: output_parameters.unbind(),
        size,
        is_plain,
        tensors: request.inputs,
        requested,
        inputs: GILOnceCell::new(),
        outputs: GILOnceCell::new(),
        plain: GILOnceCell::new(),
    };
    Py::new(py, view)
}

/// A Python parameter value (bool, int, float, str) as an `InferParameter`.
pub fn parameter(value: &Bound<'_, PyAny>) -> PyResult<InferParameter> {
    let choice = if let Ok(v) = value.downcast::<pyo3::types::PyBool>() {
        ParameterChoice::Bool(v.is_true())
    } else if let Ok(v) = value.extract::<i64>() {
        ParameterChoice::Int64(v)
    } else if let Ok(v) = value.extract::<u64>() {
        ParameterChoice::Uint64(v)
    } else if let Ok(v) = value.downcast::<pyo3::types::PyFloat>() {
        ParameterChoice::Double(v.value())
    } else {
        ParameterChoice::String(value.str()?.to_string())
    };
    Ok(InferParameter {
        choice: Some(choice),
    })
}
