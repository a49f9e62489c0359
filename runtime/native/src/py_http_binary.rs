//! Triton's binary extension for Python, the parts the HTTP core's calls and the Python app share: the view of
//! an infer body the core read (`BinaryInfer`, `binary_infer`), the JSON header of a binary answer
//! (`binary_reply_head`), and the coding an answer takes (`answer_coding`).

use bytes::Bytes;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::http_infer::{binary_request, BinaryRequest, Params, Scalar};
use crate::http_reply::{reply_head, ReplyData, ReplyHead, ReplyOutput, ReplyValue};
use crate::py_arrays::{is_ndarray, ExportedArray};
use crate::py_request::{Arrays, WireBuffer};

/// An infer body of the common binary shape, as the core read it (see `http_infer`): the request's id, its
/// parameters (without `binary_data_output`, which is `binary_default`), each input as (name, datatype,
/// shape, its bytes of the body), and the outputs requested, name -> parameters, in order.
#[pyclass(module = "ensemble_runtime.protocol._native", frozen, get_all)]
pub struct BinaryInfer {
    id: String,
    parameters: Py<PyDict>,
    binary_default: bool,
    inputs: Py<PyList>,
    outputs: Py<PyDict>,
    /// Where every input is a fixed-size datatype whose bytes fit its shape: name -> the input as a numpy
    /// array over the body's bytes (see `InferRequestView.arrays`).
    arrays: Option<Py<PyDict>>,
    /// With `arrays`: name -> datatype per input.
    declared: Option<Py<PyDict>>,
}

fn params_dict(py: Python<'_>, parameters: &Params) -> PyResult<Py<PyDict>> {
    let out = PyDict::new(py);
    for (key, value) in parameters {
        match value {
            Scalar::Bool(v) => out.set_item(key, v)?,
            Scalar::Int(v) => out.set_item(key, v)?,
            Scalar::Uint(v) => out.set_item(key, v)?,
            Scalar::Float(v) => out.set_item(key, v)?,
            Scalar::Str(v) => out.set_item(key, v)?,
        }
    }
    Ok(out.unbind())
}

pub(crate) fn binary_view(
    py: Python<'_>,
    request: &BinaryRequest,
    numpy: &Arrays,
) -> PyResult<Py<BinaryInfer>> {
    let inputs = PyList::empty(py);
    let mut tensors = Vec::with_capacity(request.inputs.len());
    for input in &request.inputs {
        let data = Bound::new(py, WireBuffer::new(input.data.clone()))?.into_any();
        tensors.push((
            input.name.as_str(),
            input.datatype.as_str(),
            &input.shape[..],
            data.clone(),
        ));
        inputs.append((
            &input.name,
            &input.datatype,
            PyTuple::new(py, &input.shape)?,
            data,
        ))?;
    }
    let (arrays, declared) = match numpy.build(py, &tensors) {
        Some((arrays, declared)) => (Some(arrays.unbind()), Some(declared.unbind())),
        None => (None, None),
    };
    let outputs = PyDict::new(py);
    for output in &request.outputs {
        outputs.set_item(&output.name, params_dict(py, &output.parameters)?)?;
    }
    let view = BinaryInfer {
        id: request.id.clone(),
        parameters: params_dict(py, &request.parameters)?,
        binary_default: request.binary_default,
        inputs: inputs.unbind(),
        outputs: outputs.unbind(),
        arrays,
        declared,
    };
    Py::new(py, view)
}

/// What the core reads from an infer body (`header_length`: the `Inference-Header-Content-Length` as sent),
/// or None where it leaves the body to Python; as `HttpCall.binary`.
#[pyfunction]
#[pyo3(signature = (header_length, body))]
pub fn binary_infer(
    py: Python<'_>,
    header_length: Option<&str>,
    body: &[u8],
) -> PyResult<Option<Py<BinaryInfer>>> {
    let body = Bytes::copy_from_slice(body);
    let numpy = Arrays::new(py)?;
    binary_request(header_length, &body)
        .map(|request| binary_view(py, &request, &numpy))
        .transpose()
}

/// `object.name`, a str.
fn text_attribute<'py>(
    object: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyString>> {
    Ok(object.getattr(name)?.downcast_into::<PyString>()?)
}

fn text(s: &Bound<'_, PyString>) -> Option<String> {
    s.to_str().ok().map(str::to_owned)
}

/// A parameter value as Python's `json` writes it, when it is one written here exactly.
fn reply_value(value: &Bound<'_, PyAny>) -> Option<ReplyValue> {
    if let Ok(b) = value.downcast_exact::<PyBool>() {
        return Some(ReplyValue::Bool(b.is_true()));
    }
    if value.is_exact_instance_of::<PyInt>() {
        if let Ok(n) = value.extract::<i64>() {
            return Some(ReplyValue::Int(n));
        }
        return value.extract::<u64>().ok().map(ReplyValue::Uint);
    }
    value
        .downcast_exact::<PyString>()
        .ok()
        .and_then(text)
        .map(ReplyValue::Str)
}

pub(crate) fn head_of<'a, 'py: 'a>(
    model_name: &Bound<'py, PyString>,
    model_version: &Bound<'py, PyString>,
    id: &Bound<'py, PyString>,
    parameters: &Bound<'py, PyDict>,
    outputs: impl Iterator<Item = (&'a Bound<'py, PyString>, String, Vec<i64>, ReplyData)>,
) -> Option<ReplyHead> {
    let mut params = Vec::with_capacity(parameters.len());
    for (key, value) in parameters.iter() {
        let key = key.downcast_exact::<PyString>().ok().and_then(text)?;
        params.push((key, reply_value(&value)?));
    }
    let mut tensors = Vec::new();
    for (name, datatype, shape, data) in outputs {
        tensors.push(ReplyOutput {
            name: text(name)?,
            datatype,
            shape,
            data,
        });
    }
    Some(ReplyHead {
        model_name: text(model_name)?,
        model_version: text(model_version)?,
        id: text(id)?,
        parameters: params,
        outputs: tensors,
    })
}

/// The JSON header `HttpCall.reply_binary` writes for these values (`outputs`: name, datatype, shape, size of
/// the data), or None where it leaves the answer to the Python encoder.
#[pyfunction]
#[pyo3(signature = (model_name, model_version, id, parameters, outputs))]
pub fn binary_reply_head<'py>(
    py: Python<'py>,
    model_name: &Bound<'py, PyString>,
    model_version: &Bound<'py, PyString>,
    id: &Bound<'py, PyString>,
    parameters: &Bound<'py, PyDict>,
    outputs: Vec<(Bound<'py, PyString>, String, Vec<i64>, usize)>,
) -> Option<Bound<'py, PyBytes>> {
    let sized = outputs.iter().map(|(name, datatype, shape, size)| {
        (
            name,
            datatype.clone(),
            shape.clone(),
            ReplyData::Binary(*size),
        )
    });
    let head = head_of(model_name, model_version, id, parameters, sized)?;
    Some(PyBytes::new(py, reply_head(&head, |_| &[])?.as_bytes()))
}

/// An `InferResponse` as `HttpCall.reply_response` answers it: the header (the outputs named in `as_json`
/// written in it as JSON `data`) and each output's array, in order (none for a BYTES output written as JSON: its
/// elements are in the header's output). `None` where an output is not a plain numpy array (a BYTES output
/// only as JSON, of bytes that are UTF-8 or of text), or a value is not one written here exactly.
pub(crate) fn response_answer(
    response: &Bound<'_, PyAny>,
    as_json: &Bound<'_, PyAny>,
) -> PyResult<Option<(ReplyHead, Vec<Option<ExportedArray>>)>> {
    let py = response.py();
    let outputs = response.getattr(intern!(py, "outputs"))?;
    let outputs = outputs.downcast::<PyDict>()?;
    let mut names = Vec::with_capacity(outputs.len());
    let mut described = Vec::with_capacity(outputs.len());
    let mut arrays = Vec::with_capacity(outputs.len());
    for (name, array) in outputs.iter() {
        let name = name.downcast_into::<PyString>()?;
        let json = as_json.contains(&name)?;
        if let Some(exported) = ExportedArray::of(&array) {
            let data = if json {
                ReplyData::Values
            } else {
                ReplyData::Binary(exported.bytes().len())
            };
            described.push((exported.datatype().to_owned(), exported.shape(), data));
            arrays.push(Some(exported));
        } else {
            let Some((shape, texts)) = json.then(|| texts(&array)).flatten() else {
                return Ok(None);
            };
            described.push(("BYTES".to_owned(), shape, ReplyData::Texts(texts)));
            arrays.push(None);
        }
        names.push(name);
    }
    let (model_name, model_version, id) = (
        text_attribute(response, intern!(py, "model_name"))?,
        text_attribute(response, intern!(py, "model_version"))?,
        text_attribute(response, intern!(py, "id"))?,
    );
    let parameters = response.getattr(intern!(py, "parameters"))?;
    let sized = (names.iter().zip(described))
        .map(|(name, (datatype, shape, data))| (name, datatype, shape, data));
    let Some(head) = head_of(
        &model_name,
        &model_version,
        &id,
        parameters.downcast::<PyDict>()?,
        sized,
    ) else {
        return Ok(None);
    };
    Ok(Some((head, arrays)))
}

/// A numpy array of BYTES elements (object, or fixed bytes or text) as its shape and its elements as text, as
/// `http_codec.json_data` takes them: each element `str`, or `bytes` that are UTF-8. None otherwise.
fn texts(array: &Bound<'_, PyAny>) -> Option<(Vec<i64>, Vec<String>)> {
    let py = array.py();
    if !is_ndarray(array) {
        return None;
    }
    let dtype_kind: String = array
        .getattr(intern!(py, "dtype"))
        .ok()?
        .getattr(intern!(py, "kind"))
        .ok()?
        .extract()
        .ok()?;
    if !matches!(dtype_kind.as_str(), "O" | "S" | "U") {
        return None;
    }
    let shape: Vec<i64> = array.getattr(intern!(py, "shape")).ok()?.extract().ok()?;
    let flat = array.call_method1(intern!(py, "reshape"), (-1,)).ok()?;
    let mut out = Vec::new();
    for item in flat.try_iter().ok()? {
        let item = item.ok()?;
        if let Ok(bytes) = item.downcast::<PyBytes>() {
            out.push(std::str::from_utf8(bytes.as_bytes()).ok()?.to_owned());
        } else {
            out.push(item.downcast::<PyString>().ok()?.to_str().ok()?.to_owned());
        }
    }
    Some((shape, out))
}

/// The JSON header `HttpCall.reply_response` writes for `response` (see [`response_answer`]), or None where it
/// leaves the answer to the Python encoder.
#[pyfunction]
pub fn infer_reply_head<'py>(
    response: &Bound<'py, PyAny>,
    as_json: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let Some((head, arrays)) = response_answer(response, as_json)? else {
        return Ok(None);
    };
    let text = reply_head(&head, |i| arrays[i].as_ref().map_or(&[], |a| a.bytes()));
    Ok(text.map(|text| PyBytes::new(response.py(), text.as_bytes())))
}

/// The coding (`"gzip"` or `"deflate"`) for an infer answer to a request with this `Accept-Encoding`, or None:
/// the core's rule (`http_coding::answer_coding`), for the Python app's answers too.
#[pyfunction]
pub fn answer_coding(accept_encoding: &str) -> Option<&'static str> {
    crate::http_coding::answer_coding([accept_encoding.as_bytes()]).map(|coding| coding.name())
}
