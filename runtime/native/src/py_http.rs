//! The Python face of the HTTP core: `HttpCore` (start, the wake-up descriptor, `take` a batch of infer calls,
//! stop) and `HttpCall` (one waiting infer request and the way to answer it).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyList, PyString};

use crate::http::{
    serve, HttpAnswer, HttpConfig, HttpCore, InferCall, Restriction, BINARY_CONTENT, JSON_CONTENT,
};
use crate::http_body::Limit;
use crate::http_infer::BinaryRequest;
use crate::http_reply::{reply_head, ReplyData};
use crate::py_buffers::Contiguous;
use crate::py_http_binary::{binary_view, head_of, response_answer, BinaryInfer};
use crate::py_request::{Arrays, WireBuffer};
use crate::py_serving::{lock, positive_seconds, taking, Answering, Serving};

#[pyclass(
    name = "HttpCore",
    module = "ensemble_runtime.protocol._native",
    frozen
)]
pub struct PyHttpCore {
    core: Arc<HttpCore>,
    serving: Serving<()>,
    numpy: GILOnceCell<Arc<Arrays>>, // what a request's arrays are built with, from its first request
}

#[pymethods]
impl PyHttpCore {
    /// `body`, `json`: (limit in bytes, the 413 body refusing more); `restriction`: (header, value, the 403
    /// body) of the inference category; `upstream`: the Unix socket of the app that answers everything else;
    /// `body_grace`: seconds a request body has past its headers, before its pace counts (crate::http_pace);
    /// `max_connections`: connections open at once (crate::fair_share); `serves_infer`: false to forward every
    /// request, the infer endpoint's too (the metrics port); `send_timeout`: seconds a write may wait for the
    /// peer to take bytes before the connection is closed (crate::send_bound).
    #[new]
    #[pyo3(signature = (body, json, restriction, upstream, threads, body_grace, max_connections, serves_infer, send_timeout))]
    #[allow(clippy::too_many_arguments)] // Python's keywords name each one
    fn new(
        body: (usize, Vec<u8>),
        json: (usize, Vec<u8>),
        restriction: Option<(String, String, Vec<u8>)>,
        upstream: PathBuf,
        threads: usize,
        body_grace: f64,
        max_connections: usize,
        serves_infer: bool,
        send_timeout: f64,
    ) -> PyResult<Self> {
        let body_grace = positive_seconds("body_grace", body_grace)?;
        let send_timeout = positive_seconds("send_timeout", send_timeout)?;
        let limit = |(size, refusal): (usize, Vec<u8>)| Limit {
            size,
            refusal: Bytes::from(refusal),
        };
        let config = HttpConfig {
            body: limit(body),
            json: limit(json),
            restriction: restriction.map(|(header, value, refusal)| Restriction {
                header: header.to_ascii_lowercase(),
                value: value.into_bytes(),
                refusal: Bytes::from(refusal),
            }),
            upstream,
            body_grace,
            max_connections,
            send_timeout,
            serves_infer,
        };
        Ok(Self {
            core: Arc::new(HttpCore::new(config)?),
            serving: Serving::new("http-core", "HTTP core", threads),
            numpy: GILOnceCell::new(),
        })
    }

    /// The descriptor that turns readable when infer calls wait (for the event loop's `add_reader`).
    fn fileno(&self) -> i32 {
        self.core.queue.fd()
    }

    /// Binds `address:port` and serves; returns the port bound (for port 0).
    fn start(&self, py: Python<'_>, address: &str, port: u16) -> PyResult<u16> {
        let core = self.core.clone();
        let in_flight = core.in_flight.clone();
        self.serving
            .start(py, address, port, in_flight, move |runtime, listener| {
                serve(runtime, core, listener)
            })
    }

    /// The descriptor that turns readable when a core the event loop drives (threads 0) has I/O ready: the loop
    /// calls `turn` then. None for a core with its own threads.
    fn driver_fd(&self) -> Option<i32> {
        self.serving.driver_fd()
    }

    /// Runs what is ready in a core the event loop drives, without waiting and for at most 2 ms, calling `take`
    /// (with no arguments) whenever calls wait, so that what it answers at once is written in the same turn:
    /// (tasks polled, whether nothing was left ready; if not, turn it again soon). For a core with its own
    /// threads, nothing.
    #[pyo3(signature = (take=None))]
    fn turn(&self, py: Python<'_>, take: Option<Py<PyAny>>) -> (u64, bool) {
        self.serving.turn(py, taking(&self.core.queue, take))
    }

    /// Stops taking connections; calls in flight go on (a core the loop drives: turn it until `finished`).
    fn begin_stop(&self) {
        self.serving.begin_stop();
    }

    /// Whether the core's server has finished (or never served).
    #[getter]
    fn finished(&self) -> bool {
        self.serving.finished()
    }

    /// Every infer call waiting now (one wake-up's batch), the GIL taken once for all of them.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let batch = py.allow_threads(|| self.core.queue.take());
        let out = PyList::empty(py);
        let numpy = self
            .numpy
            .get_or_try_init(py, || Arrays::new(py).map(Arc::new))?;
        for call in batch {
            let InferCall {
                model,
                version,
                header_length,
                body,
                binary,
                reply,
            } = call;
            let size = body.len();
            let item = HttpCall {
                model,
                version,
                header_length,
                size,
                body: Py::new(py, WireBuffer::new(body))?,
                binary,
                numpy: numpy.clone(),
                reply: Mutex::new(Some(reply)),
                answering: self.serving.answering(),
            };
            out.append(Py::new(py, item)?)?;
        }
        Ok(out)
    }

    /// Stops taking connections and waits up to `grace` seconds for requests in flight (answer them
    /// meanwhile: run this off the event loop), then ends the core's threads.
    fn stop(&self, py: Python<'_>, grace: f64) {
        self.serving.stop(py, grace);
    }
}

/// An answer's output as Python hands it: name, datatype, shape, data.
type PyOutput<'py> = (Bound<'py, PyString>, String, Vec<i64>, PyBuffer<u8>);

#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct HttpCall {
    model: String,
    version: String,
    header_length: Option<String>,
    size: usize,
    body: Py<WireBuffer>,
    binary: Option<BinaryRequest>,
    numpy: Arc<Arrays>,
    reply: Mutex<Option<tokio::sync::oneshot::Sender<HttpAnswer>>>,
    answering: Answering<()>,
}

#[pymethods]
impl HttpCall {
    /// The model named by the path.
    #[getter]
    fn model(&self) -> &str {
        &self.model
    }

    /// The version named by the path ("" when none).
    #[getter]
    fn version(&self) -> &str {
        &self.version
    }

    /// The `Inference-Header-Content-Length` header as sent, if it was.
    #[getter]
    fn header_length(&self) -> Option<&str> {
        self.header_length.as_deref()
    }

    /// The body's length in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    /// The body (read-only, through the buffer protocol, without a copy).
    #[getter]
    fn body(&self, py: Python<'_>) -> Py<WireBuffer> {
        self.body.clone_ref(py)
    }

    /// The body as read by the core when it has the common binary shape (`binary_infer`), else None.
    #[getter]
    fn binary(&self, py: Python<'_>) -> PyResult<Option<Py<BinaryInfer>>> {
        self.binary
            .as_ref()
            .map(|request| binary_view(py, request, &self.numpy))
            .transpose()
    }

    /// Answers: the status, the Content-Type, the JSON header's length when binary data follows it, and the
    /// body as parts (C-contiguous buffers of bytes: the JSON header, then each binary output), joined here
    /// with the GIL released.
    #[pyo3(signature = (status, content_type, header_length, parts))]
    fn reply(
        &self,
        py: Python<'_>,
        status: u16,
        content_type: String,
        header_length: Option<usize>,
        parts: Vec<PyBuffer<u8>>,
    ) -> PyResult<()> {
        let parts = Contiguous::new(parts)
            .map_err(|_| PyValueError::new_err("a part of the body is not contiguous"))?;
        let Some(reply) = lock(&self.reply).take() else {
            return Err(PyRuntimeError::new_err("this call was answered already"));
        };
        // Joined and sent with the GIL released: the send wakes the core's thread, which then does not wait
        // on the GIL this thread would still hold.
        py.allow_threads(|| {
            let answer = HttpAnswer {
                status,
                content_type,
                header_length,
                body: parts.joined(&[]),
            };
            self.answering.send(move || {
                let _ = reply.send(answer); // the client may have gone: nothing to tell it
            });
        });
        drop(parts);
        Ok(())
    }

    /// Answers 200 for an `InferResponse` whose outputs are all plain numpy arrays (`Call.reply_response`):
    /// each one's datatype, shape and bytes read from the array in place, the outputs named in `as_json` written
    /// in the header as JSON `data` (as `http_codec.encode_infer_parts` writes them), the others as binary data
    /// after it; all of it with the GIL released. False, and nothing sent, where an output is not such an array,
    /// or a value is not one written here exactly: the caller encodes it.
    fn reply_response(
        &self,
        py: Python<'_>,
        response: &Bound<'_, PyAny>,
        as_json: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let Some((head, arrays)) = response_answer(response, as_json)? else {
            return Ok(false);
        };
        let values = |i: usize| arrays[i].as_ref().map_or(&[][..], |a| a.bytes());
        let Some(text) = py.allow_threads(|| reply_head(&head, values)) else {
            return Ok(false);
        };
        let Some(reply) = lock(&self.reply).take() else {
            return Err(PyRuntimeError::new_err("this call was answered already"));
        };
        py.allow_threads(|| {
            let binary = (head.outputs.iter().zip(&arrays))
                .filter(|(output, _)| matches!(output.data, ReplyData::Binary(_)))
                .filter_map(|(_, array)| array.as_ref());
            let size = text.len() + binary.clone().map(|a| a.bytes().len()).sum::<usize>();
            // as Python's encoder: JSON alone where no output goes as binary data (one of no bytes still does)
            let answer = if binary.clone().next().is_none() {
                HttpAnswer {
                    status: 200,
                    content_type: JSON_CONTENT.to_string(),
                    header_length: None,
                    body: Bytes::from(text),
                }
            } else {
                let mut body = Vec::with_capacity(size);
                body.extend_from_slice(text.as_bytes());
                for array in binary {
                    body.extend_from_slice(array.bytes());
                }
                HttpAnswer {
                    status: 200,
                    content_type: BINARY_CONTENT.to_string(),
                    header_length: Some(text.len()),
                    body: Bytes::from(body),
                }
            };
            self.answering.send(move || {
                let _ = reply.send(answer); // the client may have gone: nothing to tell it
            });
        });
        drop(arrays);
        Ok(true)
    }

    /// Answers 200 with every output as binary data after a JSON header written here, byte for byte as
    /// `http_codec.encode_infer_parts` writes it, with the GIL released. `outputs`: (name, datatype, shape,
    /// data) as `reply_infer` of the gRPC core takes them. False, and nothing sent, when a value is not one
    /// written here exactly (a float parameter, a string that is not Unicode): the caller encodes it.
    #[pyo3(signature = (model_name, model_version, id, parameters, outputs))]
    fn reply_binary(
        &self,
        py: Python<'_>,
        model_name: &Bound<'_, PyString>,
        model_version: &Bound<'_, PyString>,
        id: &Bound<'_, PyString>,
        parameters: &Bound<'_, PyDict>,
        outputs: Vec<PyOutput<'_>>,
    ) -> PyResult<bool> {
        let (described, data): (Vec<_>, Vec<_>) = outputs
            .into_iter()
            .map(|(name, datatype, shape, data)| ((name, datatype, shape, data.len_bytes()), data))
            .unzip();
        let buffers = Contiguous::new(data)
            .map_err(|_| PyValueError::new_err("an output's data is not contiguous"))?;
        let sized = described.iter().map(|(name, datatype, shape, size)| {
            (
                name,
                datatype.clone(),
                shape.clone(),
                ReplyData::Binary(*size),
            )
        });
        let Some(head) = head_of(model_name, model_version, id, parameters, sized) else {
            return Ok(false);
        };
        let Some(head) = reply_head(&head, |_| &[]) else {
            return Ok(false);
        };
        let Some(reply) = lock(&self.reply).take() else {
            return Err(PyRuntimeError::new_err("this call was answered already"));
        };
        py.allow_threads(|| {
            let answer = HttpAnswer {
                status: 200,
                content_type: "application/octet-stream".to_string(),
                header_length: Some(head.len()),
                body: buffers.joined(head.as_bytes()),
            };
            self.answering.send(move || {
                let _ = reply.send(answer); // the client may have gone: nothing to tell it
            });
        });
        drop(buffers);
        Ok(true)
    }
}
