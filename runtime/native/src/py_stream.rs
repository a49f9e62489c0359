//! ModelStreamInfer for Python: a `StreamCall` per stream (ask for the next frame, send responses, end it) and a
//! `StreamFrame` per frame read.

use std::sync::Mutex;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tonic::{Code, Status};

use crate::busy::StreamRequests;
use crate::stream::{Frame, Offer, Outbound, StreamLink};

#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct StreamCall {
    id: u64,
    method: String,
    outbound: Mutex<Option<Outbound>>,
    want: std::sync::Arc<tokio::sync::Semaphore>,
    requests: Option<StreamRequests>,
}

impl StreamCall {
    pub fn new(link: StreamLink) -> Self {
        Self {
            id: link.id,
            method: link.path,
            outbound: Mutex::new(Some(link.outbound)),
            want: link.want,
            requests: link.requests,
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

    /// Offers one serialized response message: 0 sent, 1 the window is full (offer it again after this
    /// stream's `StreamWritable`), 2 the stream has ended (the client went away).
    fn send(&self, message: &[u8]) -> u8 {
        let offer = match self
            .outbound
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(outbound) => outbound.offer(Bytes::copy_from_slice(message)),
            None => Offer::Closed,
        };
        offer as u8
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
}

impl StreamFrame {
    pub fn new(frame: Frame) -> Self {
        let (payload, code, message) = match frame.frame {
            Ok(payload) => (payload, 0, String::new()),
            Err(status) => (None, status.code() as i32, status.message().to_string()),
        };
        Self {
            id: frame.id,
            payload,
            code,
            message,
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
