//! An answer's numpy arrays read as wire tensors: each array's datatype ([`crate::wire_format`]), shape and bytes
//! from its buffer, in place, so that Python hands the whole response over in one call.

use std::ffi::CStr;
use std::mem::MaybeUninit;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::messages::{InferOutputTensor, ModelInferResponseHead, Parameters};
use crate::py_request::parameter;

/// Whether `object` is a numpy ndarray itself, not a subclass.
pub fn is_ndarray(object: &Bound<'_, PyAny>) -> bool {
    let kind = object.get_type();
    kind.name().is_ok_and(|n| n == "ndarray") && kind.module().is_ok_and(|m| m == "numpy")
}

/// An answer's outputs, (name, array) in order.
pub type ExportedOutputs<'py> = Vec<(Bound<'py, PyString>, ExportedArray)>;

/// An `InferResponse`'s outputs, (name, array) in order, where every one is an array [`ExportedArray::of`]
/// takes; `None` otherwise (BYTES, another byte order, not contiguous), for Python's conversion.
pub fn exported_outputs<'py>(
    response: &Bound<'py, PyAny>,
) -> PyResult<Option<ExportedOutputs<'py>>> {
    let outputs = response.getattr(intern!(response.py(), "outputs"))?;
    let outputs = outputs.downcast::<PyDict>()?;
    let mut exported = Vec::with_capacity(outputs.len());
    for (name, array) in outputs.iter() {
        let Some(array) = ExportedArray::of(&array) else {
            return Ok(None);
        };
        exported.push((name.downcast_into::<PyString>()?, array));
    }
    Ok(Some(exported))
}

/// An `InferResponse` (its `model_name`, `model_version`, `id`, `parameters` and `outputs`) as the head of a
/// `ModelInferResponse` and its outputs' arrays, with `extra` parameters added after its own; `None` where some
/// output is not an array [`ExportedArray::of`] takes (BYTES, another byte order, not contiguous), for Python's
/// conversion.
pub fn answer_head(
    response: &Bound<'_, PyAny>,
    extra: &[(&str, bool)],
) -> PyResult<Option<(ModelInferResponseHead, Vec<ExportedArray>)>> {
    let py = response.py();
    let Some(outputs) = exported_outputs(response)? else {
        return Ok(None);
    };
    let mut tensors = Vec::with_capacity(outputs.len());
    let mut arrays = Vec::with_capacity(outputs.len());
    for (name, exported) in outputs {
        tensors.push(InferOutputTensor {
            name: name.to_str()?.to_owned(),
            datatype: exported.datatype().to_owned(),
            shape: exported.shape(),
            parameters: Parameters::new(),
        });
        arrays.push(exported);
    }
    let mut params = Parameters::new();
    let own = response.getattr(intern!(py, "parameters"))?;
    for (key, value) in own.downcast::<PyDict>()?.iter() {
        params.insert(key.extract()?, parameter(&value)?);
    }
    for (key, value) in extra {
        params.insert((*key).to_owned(), bool_parameter(*value));
    }
    let head = ModelInferResponseHead {
        model_name: response.getattr(intern!(py, "model_name"))?.extract()?,
        model_version: response.getattr(intern!(py, "model_version"))?.extract()?,
        id: response.getattr(intern!(py, "id"))?.extract()?,
        parameters: params,
        outputs: tensors,
    };
    Ok(Some((head, arrays)))
}

/// A boolean `InferParameter`.
pub fn bool_parameter(value: bool) -> crate::messages::InferParameter {
    crate::messages::InferParameter {
        choice: Some(crate::messages::ParameterChoice::Bool(value)),
    }
}

/// One exported array: its buffer stays exported (the array alive, its memory in place) until this is dropped.
/// Dropping it takes the GIL: drop it where the GIL is held.
pub struct ExportedArray {
    view: Box<ffi::Py_buffer>,
    datatype: &'static str,
}

// SAFETY: the view's shape and memory stay as they are while it is exported; only the bytes are read off the
// GIL, and releasing it takes the GIL (Drop).
unsafe impl Send for ExportedArray {}
unsafe impl Sync for ExportedArray {}

impl ExportedArray {
    /// The array's export, where `object` is a numpy ndarray (not a subclass), C-contiguous, of a datatype
    /// [`crate::wire_format::wire_datatype`] names; otherwise `None` (and no Python error is left set).
    pub fn of(object: &Bound<'_, PyAny>) -> Option<Self> {
        if !is_ndarray(object) {
            return None;
        }
        let mut view = Box::new(MaybeUninit::<ffi::Py_buffer>::uninit());
        // SAFETY: `view` is writable storage for one Py_buffer, filled on success
        let got = unsafe {
            ffi::PyObject_GetBuffer(object.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_RECORDS_RO)
        };
        if got == -1 {
            drop(PyErr::take(object.py())); // not exportable this way: Python's path says why
            return None;
        }
        // SAFETY: filled by PyObject_GetBuffer; from here on Drop releases it
        let view: Box<ffi::Py_buffer> = unsafe { Box::from_raw(Box::into_raw(view).cast()) };
        let mut exported = Self { view, datatype: "" };
        // SAFETY: an exported view
        let contiguous = unsafe { ffi::PyBuffer_IsContiguous(&*exported.view, b'C' as _) } == 1;
        if !contiguous || exported.view.format.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated format string owned by the exporter, alive while exported
        let format = unsafe { CStr::from_ptr(exported.view.format) }
            .to_str()
            .ok()?;
        exported.datatype =
            crate::wire_format::wire_datatype(format, exported.view.itemsize as usize)?;
        Some(exported)
    }

    /// The wire datatype, e.g. `FP32`.
    pub fn datatype(&self) -> &'static str {
        self.datatype
    }

    /// The array's shape.
    pub fn shape(&self) -> Vec<i64> {
        let ndim = self.view.ndim as usize;
        if ndim == 0 || self.view.shape.is_null() {
            return Vec::new();
        }
        // SAFETY: `ndim` dimensions, set by the exporter (PyBUF_ND is part of PyBUF_RECORDS_RO)
        unsafe { std::slice::from_raw_parts(self.view.shape, ndim) }
            .iter()
            .map(|&d| d as i64)
            .collect()
    }

    /// The array's bytes, in C order.
    pub fn bytes(&self) -> &[u8] {
        if self.view.len == 0 {
            return &[];
        }
        // SAFETY: C-contiguous (checked in `of`): `len` bytes from `buf`, in place while exported
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.view.len as usize) }
    }
}

impl Drop for ExportedArray {
    fn drop(&mut self) {
        // SAFETY: exported by PyObject_GetBuffer in `of`, released once
        Python::with_gil(|_| unsafe { ffi::PyBuffer_Release(&mut *self.view) });
    }
}
