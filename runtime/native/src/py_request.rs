//! A decoded `ModelInfer` request as Python sees it: the attributes `grpc_codec.decode_request` reads from a
//! protobuf `ModelInferRequest`, with parameters already plain values and raw contents as [`WireBuffer`]s
//! that numpy reads in place (buffer protocol; the bytes stay owned by this core).

use std::ffi::{c_int, c_void};

use bytes::Bytes;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::grpc_plain::is_plain;
use crate::messages::{
    InferParameter, InferTensorContents, ModelInferRequest, ParameterChoice, Parameters,
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

#[pyclass(module = "ensemble_runtime.protocol._native", frozen, get_all)]
pub struct InferRequestView {
    model_name: String,
    model_version: String,
    id: String,
    parameters: Py<PyDict>,
    inputs: Py<PyList>,
    outputs: Py<PyList>,
    raw_input_contents: Py<PyList>,
    /// Where the request is plain ([`crate::grpc_plain`]): (name, datatype, shape, raw contents) per input.
    plain: Option<Py<PyList>>,
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
pub fn request_view(py: Python<'_>, request: ModelInferRequest) -> PyResult<Py<InferRequestView>> {
    let plain = is_plain(&request).then(|| PyList::empty(py));
    let raw = PyList::empty(py);
    for data in request.raw_input_contents {
        raw.append(Py::new(py, WireBuffer { data })?)?;
    }
    let inputs = PyList::empty(py);
    for (index, tensor) in request.inputs.into_iter().enumerate() {
        let has_contents = tensor.contents.is_some();
        let shape = PyTuple::new(py, tensor.shape)?;
        if let Some(plain) = &plain {
            let entry = (
                tensor.name.as_str(),
                tensor.datatype.as_str(),
                &shape,
                raw.get_item(index)?,
            );
            plain.append(entry)?;
        }
        let input = InputTensor {
            name: tensor.name,
            datatype: tensor.datatype,
            shape: shape.unbind(),
            parameters: parameters(py, tensor.parameters)?,
            contents: Py::new(
                py,
                Contents {
                    inner: tensor.contents.unwrap_or_default(),
                },
            )?,
            has_contents,
        };
        inputs.append(Py::new(py, input)?)?;
    }
    let outputs = PyList::empty(py);
    for output in request.outputs {
        outputs.append(Py::new(
            py,
            OutputTensor {
                name: output.name,
                parameters: parameters(py, output.parameters)?,
            },
        )?)?;
    }
    let view = InferRequestView {
        model_name: request.model_name,
        model_version: request.model_version,
        id: request.id,
        parameters: parameters(py, request.parameters)?,
        inputs: inputs.unbind(),
        outputs: outputs.unbind(),
        raw_input_contents: raw.unbind(),
        plain: plain.map(Bound::unbind),
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
