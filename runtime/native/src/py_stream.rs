//! ModelStreamInfer for Python: a `StreamCall` per stream (ask for the next frame, send responses, end it) and a
//! `StreamFrame` per frame read.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tonic::{Code, Status};

use crate::busy::StreamRequests;
use crate::messages::{
    encode_stream_response, ModelInferRequest, ModelInferResponseHead, Parameters,
};
use crate::py_arrays::{answer_head, bool_parameter, ExportedArray};
use crate::py_request::{request_view, Arrays, InferRequestView};
use crate::py_serving::Delivering;
use crate::stream::{Frame, Offer, Outbound, StreamLink};

pyo3::create_exception!(
    _native,
    DecodeError,
    pyo3::exceptions::PyValueError,
    "A frame's bytes are no ModelInferRequest (protobuf's exception has the same name)."
);

/// Where a streamed response says whether it is its request's last (`grpc_stream.FINAL`).
const FINAL: &str = "triton_final_response";

/// A response message encoded by the core, for `StreamCall.send`.
#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct EncodedMessage {
    data: Bytes,
}

#[pymethods]
impl EncodedMessage {
    fn __len__(&self) -> usize {
        self.data.len()
    }
}

#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct StreamCall {
    id: u64,
    method: String,
    outbound: Mutex<Option<Outbound>>,
    want: std::sync::Arc<tokio::sync::Semaphore>,
    requests: Option<StreamRequests>,
    delivering: Delivering<()>,
}

impl StreamCall {
    pub fn new(link: StreamLink, delivering: Delivering<()>) -> Self {
        Self {
            id: link.id,
            method: link.path,
            outbound: Mutex::new(Some(link.outbound)),
            want: link.want,
            requests: link.requests,
            delivering,
        }
    }

    fn end(&self, last: Option<Status>) {
        self.want.close(); // read no further
        if let Some(requests) = self.requests.as_ref() {
            requests.clear();
        }
        let outbound = self
            .outbound
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(outbound) = outbound {
            outbound.finish(last);
        }
    }
}

impl Drop for StreamCall {
    /// A stream Python let go of without ending it ends with OK; the core reads no more of it.
    fn drop(&mut self) {
        self.want.close();
        if let Some(requests) = self.requests.as_ref() {
            requests.clear();
        }
    }
}

#[pymethods]
impl StreamCall {
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    /// The method's full path (ModelStreamInfer or health Watch).
    #[getter]
    fn method(&self) -> &str {
        &self.method
    }

    /// Lets the core read one more frame from the client (it arrives as a `StreamFrame`).
    fn want(&self) {
        self.want.add_permits(1);
    }

    /// Offers one response message (serialized bytes, or an `EncodedMessage`): 0 sent, 1 the window is full
    /// (offer it again after this stream's `StreamWritable`), 2 the stream has ended (the client went away).
    /// From any thread; the GIL is released while it is written (where this thread writes it, `Delivering`).
    fn send(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<u8> {
        let data = match message.downcast::<EncodedMessage>() {
            Ok(encoded) => encoded.get().data.clone(),
            Err(_) => Bytes::copy_from_slice(message.extract::<&[u8]>()?),
        };
        let mut offer = Offer::Closed;
        py.allow_threads(|| {
            self.delivering.send(|| {
                if let Some(outbound) = self
                    .outbound
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                {
                    offer = outbound.offer(data);
                }
            })
        });
        Ok(offer as u8)
    }

    /// A `ModelStreamInferResponse` carrying `response` (an `InferResponse`) with its `triton_final_response`
    /// set to `last`, encoded with the GIL released; None where an output is not a plain numpy array (Python's
    /// conversion then).
    #[staticmethod]
    fn encode_response(
        py: Python<'_>,
        response: &Bound<'_, PyAny>,
        last: bool,
    ) -> PyResult<Option<EncodedMessage>> {
        let Some((head, arrays)) = answer_head(response, &[(FINAL, last)])? else {
            return Ok(None);
        };
        let data = py.allow_threads(|| {
            let slices: Vec<&[u8]> = arrays.iter().map(ExportedArray::bytes).collect();
            encode_stream_response(&head, &slices)
        });
        drop(arrays);
        Ok(Some(EncodedMessage { data }))
    }

    /// A `ModelStreamInferResponse` with no response (a decoupled request's empty final response): only the
    /// request's `id`, `model_name`, `model_version` and the `triton_final_response` flag.
    #[staticmethod]
    fn encode_bare(
        id: String,
        model_name: String,
        model_version: String,
        last: bool,
    ) -> EncodedMessage {
        let mut parameters = Parameters::new();
        parameters.insert(FINAL.to_owned(), bool_parameter(last));
        let head = ModelInferResponseHead {
            model_name,
            model_version,
            id,
            parameters,
            outputs: Vec::new(),
        };
        EncodedMessage {
            data: encode_stream_response(&head, &[]),
        }
    }

    /// One request the stream read is answered: its last response was sent (or it has none). A connection that
    /// gave way ends the stream, and then closes, once the requests it read are answered.
    fn answered(&self) {
        if let Some(requests) = self.requests.as_ref() {
            requests.answered();
        }
    }

    /// Ends the stream with OK.
    fn close(&self) {
        self.end(None);
    }

    /// Ends the stream with a status (a gRPC code number other than OK, and its message).
    fn fail(&self, code: i32, message: String) {
        let code = match Code::from_i32(code) {
            Code::Ok => Code::Unknown,
            other => other,
        };
        self.end(Some(Status::new(code, message)));
    }
}

#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct StreamFrame {
    id: u64,
    payload: Option<Bytes>,
    code: i32,
    message: String,
    numpy: Arc<Arrays>,
}

impl StreamFrame {
    pub fn new(frame: Frame, numpy: Arc<Arrays>) -> Self {
        let (payload, code, message) = match frame.frame {
            Ok(payload) => (payload, 0, String::new()),
            Err(status) => (None, status.code() as i32, status.message().to_string()),
        };
        Self {
            id: frame.id,
            payload,
            code,
            message,
            numpy,
        }
    }
}

#[pymethods]
impl StreamFrame {
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    /// The request message's bytes; None at the end of the requests (`code` 0) or when reading failed.
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.payload.as_ref().map(|p| PyBytes::new(py, p))
    }

    /// The payload decoded as a ModelInfer request (as `Call.request` is); DecodeError where it is none. None
    /// at the end of the requests or when reading failed.
    fn request(&self, py: Python<'_>) -> PyResult<Option<Py<InferRequestView>>> {
        let Some(payload) = self.payload.clone() else {
            return Ok(None);
        };
        let size = payload.len();
        let request = ModelInferRequest::decode(payload)
            .map_err(|_| DecodeError::new_err("the frame is not a ModelInferRequest"))?;
        request_view(py, request, &self.numpy, size).map(Some)
    }

    /// Whether the frame carries a request (not the end of the requests, nor a failure).
    #[getter]
    fn has_payload(&self) -> bool {
        self.payload.is_some()
    }

    #[getter]
    fn code(&self) -> i32 {
        self.code
    }

    #[getter]
    fn message(&self) -> &str {
        &self.message
    }
}

/// A stream's window has room again: a message it refused may be offered again.
#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct StreamWritable {
    id: u64,
}

impl StreamWritable {
    pub fn new(id: u64) -> Self {
        Self { id }
    }
}

#[pymethods]
impl StreamWritable {
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }
}
