//! The Python face of the core: `GrpcCore` (start, the wake-up descriptor, `take` a batch of calls, stop) and
//! `Call` (one waiting call and the ways to answer it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyList};
use tonic::{Code, Status};

use crate::budget::CallLimits;
use crate::grpc_port::serve;
use crate::handshake::ConnectionLimits;
use crate::messages::{encode_response, InferOutputTensor, ModelInferResponseHead, Parameters};
use crate::py_arrays::{answer_head, ExportedArray};
use crate::py_buffers::Contiguous;
use crate::py_lane::OnnxLane;
use crate::py_request::{parameter, request_view, Arrays, InferRequestView};
use crate::py_serving::{lock, optional_seconds, positive_seconds, taking, Answering, Serving};
use crate::py_stream::{StreamCall, StreamFrame, StreamWritable};
use crate::restrict::{Restrictions, Rule};
use crate::service::{Core, Reply, Work, MODEL_INFER};
use crate::tls::{server_config, TlsFiles, TlsSwitch};

/// A TLS port's (certificate chain, private key, client roots for mutual TLS), in PEM.
type TlsPem = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

fn tls_files(pem: &TlsPem) -> TlsFiles<'_> {
    TlsFiles {
        certificate_chain: &pem.0,
        private_key: &pem.1,
        client_roots: pem.2.as_deref(),
    }
}

/// What is wrong with TLS files, (certificate chain, private key, client roots or None) in PEM, as the core would
/// serve them (ValueError naming it; None: nothing): the same rules for a front end that checks no files itself.
#[pyfunction]
pub fn check_tls(py: Python<'_>, tls: TlsPem) -> PyResult<()> {
    py.allow_threads(|| server_config(&tls_files(&tls)))
        .map(|_| ())
        .map_err(PyValueError::new_err)
}

#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct GrpcCore {
    core: Arc<Core>,
    limits: ConnectionLimits,
    tls: Option<Arc<TlsSwitch>>,
    serving: Serving<()>,
    numpy: GILOnceCell<Arc<Arrays>>, // what a request's arrays are built with, from its first request
}

#[pymethods]
impl GrpcCore {
    /// `restricted`: (method path, header, value, refusal message) per restricted method; `handshake_timeout`,
    /// `keepalive_time`, `keepalive_timeout`, `send_timeout`, `max_connection_age` and `max_connection_age_grace`
    /// (0: none) in seconds,
    /// `max_concurrent_streams` per connection and `max_connections` (see `handshake::ConnectionLimits`);
    /// `max_incomplete_calls` and `max_open_streams` across all connections (see `budget::CallLimits`); `tls`:
    /// (certificate chain, private key, client roots or None) in PEM for a TLS port, mutual with roots
    /// (see `tls::TlsFiles`; ValueError naming the one that is wrong). The defaults are the runtime's settings' alone.
    #[new]
    #[pyo3(signature = (max_message_bytes, restricted, threads, *, handshake_timeout, keepalive_time, keepalive_timeout, max_concurrent_streams, max_connections, max_incomplete_calls, max_open_streams, send_timeout, max_connection_age, max_connection_age_grace, tls=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_message_bytes: usize,
        restricted: Vec<(String, String, String, String)>,
        threads: usize,
        handshake_timeout: f64,
        keepalive_time: f64,
        keepalive_timeout: f64,
        max_concurrent_streams: u32,
        max_connections: usize,
        max_incomplete_calls: usize,
        max_open_streams: usize,
        send_timeout: f64,
        max_connection_age: f64,
        max_connection_age_grace: f64,
        tls: Option<TlsPem>,
    ) -> PyResult<Self> {
        let limits = ConnectionLimits {
            handshake: positive_seconds("handshake_timeout", handshake_timeout)?,
            keepalive_time: positive_seconds("keepalive_time", keepalive_time)?,
            keepalive_timeout: positive_seconds("keepalive_timeout", keepalive_timeout)?,
            max_concurrent_streams,
            max_connections,
            send_timeout: positive_seconds("send_timeout", send_timeout)?,
            max_age: optional_seconds("max_connection_age", max_connection_age)?,
            max_age_grace: optional_seconds("max_connection_age_grace", max_connection_age_grace)?,
        };
        let rules: HashMap<String, Rule> = restricted
            .into_iter()
            .map(|(path, header, value, refusal)| {
                (
                    path,
                    Rule {
                        header,
                        value: value.into_bytes(),
                        refusal,
                    },
                )
            })
            .collect();
        let calls = CallLimits {
            incomplete_calls: max_incomplete_calls,
            open_streams: max_open_streams,
        };
        let tls = tls
            .map(|pem| TlsSwitch::new(&tls_files(&pem)).map(Arc::new))
            .transpose()
            .map_err(PyValueError::new_err)?;
        let core = Core::new(Restrictions::new(rules), max_message_bytes, calls)?;
        Ok(Self {
            core: Arc::new(core),
            limits,
            tls,
            serving: Serving::new("grpc-core", "gRPC core", threads),
            numpy: GILOnceCell::new(),
        })
    }

    /// Serves the TLS connections accepted from now on with renewed files, (certificate chain, private key, client
    /// roots or None) in PEM as at `new`; those open keep theirs. ValueError naming what is wrong with them (the
    /// current files stay), RuntimeError for a plaintext port.
    fn renew_tls(&self, py: Python<'_>, tls: TlsPem) -> PyResult<()> {
        let Some(switch) = &self.tls else {
            return Err(PyRuntimeError::new_err(
                "the gRPC port serves plaintext: no TLS to renew",
            ));
        };
        py.allow_threads(|| switch.renew(&tls_files(&tls)))
            .map_err(PyValueError::new_err)
    }

    /// The in-core ONNX lane of this port (crate::py_lane): empty until a model is served on it.
    fn onnx_lane(&self) -> OnnxLane {
        OnnxLane::new(self.core.clone())
    }

    /// For the benchmark's floor (`bench/pa/floor.py --in-core`) only: from now on the core answers each
    /// ModelInfer itself, echoing its first input (crate::floor_echo), and nothing reaches Python for it.
    fn answer_infer_in_core(&self) {
        self.core.echo.turn_on();
    }

    /// How many ModelInfer requests the core answered itself (`answer_infer_in_core`).
    #[getter]
    fn answered_in_core(&self) -> u64 {
        self.core.echo.answered()
    }

    /// The descriptor that turns readable when calls wait (for the event loop's `add_reader`).
    fn fileno(&self) -> i32 {
        self.core.queue.fd()
    }

    /// Binds `address:port` and serves; returns the port bound (for port 0).
    fn start(&self, py: Python<'_>, address: &str, port: u16) -> PyResult<u16> {
        let core = self.core.clone();
        let in_flight = core.in_flight.clone();
        let (limits, tls) = (self.limits, self.tls.clone());
        self.serving
            .start(py, address, port, in_flight, move |runtime, listener| {
                serve(runtime, core, listener, limits, tls)
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

    /// Every call waiting now (one wake-up's batch), the GIL taken once for all of them: `Call`s, and for
    /// ModelStreamInfer a `StreamCall` when a stream opens and a `StreamFrame` per frame read from it.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let batch = py.allow_threads(|| self.core.queue.take());
        let out = PyList::empty(py);
        let numpy = self
            .numpy
            .get_or_try_init(py, || Arrays::new(py).map(Arc::new))?;
        for work in batch {
            let item = match work {
                Work::Infer {
                    request,
                    size,
                    reply,
                } => Py::new(
                    py,
                    Call {
                        method: MODEL_INFER.to_string(),
                        request: Some(request_view(py, request, numpy, size)?),
                        payload: Bytes::new(),
                        size,
                        reply: Mutex::new(Some(reply)),
                        answering: self.serving.answering(),
                    },
                )?
                .into_any(),
                Work::Forward {
                    path,
                    payload,
                    reply,
                } => Py::new(
                    py,
                    Call {
                        method: path,
                        request: None,
                        size: payload.len(),
                        payload,
                        reply: Mutex::new(Some(reply)),
                        answering: self.serving.answering(),
                    },
                )?
                .into_any(),
                Work::StreamOpen(link) => Py::new(
                    py,
                    StreamCall::new(link, self.serving.delivering(self.core.in_flight.clone())),
                )?
                .into_any(),
                Work::StreamFrame(frame) => {
                    Py::new(py, StreamFrame::new(frame, numpy.clone()))?.into_any()
                }
                Work::StreamWritable(id) => Py::new(py, StreamWritable::new(id))?.into_any(),
            };
            out.append(item)?;
        }
        Ok(out)
    }

    /// Stops taking connections and waits up to `grace` seconds for calls in flight (answer them meanwhile:
    /// run this off the event loop), then ends the core's threads.
    fn stop(&self, py: Python<'_>, grace: f64) {
        self.serving.stop(py, grace);
    }
}

#[pyclass(module = "ensemble_runtime.protocol._native", frozen)]
pub struct Call {
    method: String,
    request: Option<Py<InferRequestView>>,
    payload: Bytes,
    size: usize,
    reply: Mutex<Option<Reply>>,
    answering: Answering<()>,
}

impl Call {
    fn answer(&self, result: Result<Bytes, Status>) -> PyResult<()> {
        match lock(&self.reply).take() {
            Some(reply) => {
                self.answering.send(move || {
                    let _ = reply.send(result); // the client may have gone: nothing to tell it
                });
                Ok(())
            }
            None => Err(PyRuntimeError::new_err("this call was answered already")),
        }
    }
}

#[pymethods]
impl Call {
    /// The method's full path, e.g. `/inference.GRPCInferenceService/ModelInfer`.
    #[getter]
    fn method(&self) -> &str {
        &self.method
    }

    /// The size of the request message in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    /// The decoded request (ModelInfer only).
    #[getter]
    fn request(&self, py: Python<'_>) -> PyResult<Py<InferRequestView>> {
        self.request
            .as_ref()
            .map(|r| r.clone_ref(py))
            .ok_or_else(|| PyValueError::new_err("not a ModelInfer call"))
    }

    /// The raw request message (forwarded methods).
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.payload)
    }

    /// Answers with a serialized response message.
    fn reply(&self, message: &[u8]) -> PyResult<()> {
        self.answer(Ok(Bytes::copy_from_slice(message)))
    }

    /// Answers with a status (a gRPC code number other than OK, and its message).
    fn fail(&self, code: i32, message: String) -> PyResult<()> {
        let code = match Code::from_i32(code) {
            Code::Ok => Code::Unknown,
            other => other,
        };
        self.answer(Err(Status::new(code, message)))
    }

    /// Answers ModelInfer with an `InferResponse` (its `model_name`, `model_version`, `id`, `parameters` and
    /// `outputs`) where every output is a numpy array this core writes as it is ([`ExportedArray::of`]): read in
    /// place, encoded with the GIL released. False, with nothing done: some output is not (BYTES, another
    /// order, not contiguous), for `reply_infer` after Python's conversion.
    fn reply_response(&self, py: Python<'_>, response: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Some((head, arrays)) = answer_head(response, &[])? else {
            return Ok(false);
        };
        let Some(reply) = lock(&self.reply).take() else {
            return Err(PyRuntimeError::new_err("this call was answered already"));
        };
        py.allow_threads(|| {
            let slices: Vec<&[u8]> = arrays.iter().map(ExportedArray::bytes).collect();
            let answer = encode_response(&head, &slices);
            self.answering.send(move || {
                let _ = reply.send(Ok(answer)); // the client may have gone
            });
        });
        drop(arrays);
        Ok(true)
    }

    /// Answers ModelInfer: `outputs` are (name, datatype, shape, data) with data any C-contiguous buffer of
    /// bytes (a uint8 view of the array, or serialized BYTES); encoded with the GIL released.
    #[pyo3(signature = (model_name, model_version, id, parameters, outputs))]
    fn reply_infer(
        &self,
        py: Python<'_>,
        model_name: String,
        model_version: String,
        id: String,
        parameters: &Bound<'_, PyDict>,
        outputs: Vec<(String, String, Vec<i64>, PyBuffer<u8>)>,
    ) -> PyResult<()> {
        let mut params = Parameters::new();
        for (key, value) in parameters.iter() {
            params.insert(key.extract()?, parameter(&value)?);
        }
        let mut tensors = Vec::with_capacity(outputs.len());
        let mut buffers = Vec::with_capacity(outputs.len());
        for (name, datatype, shape, buffer) in outputs {
            tensors.push(InferOutputTensor {
                name,
                datatype,
                shape,
                parameters: Parameters::new(),
            });
            buffers.push(buffer);
        }
        let buffers = Contiguous::new(buffers).map_err(|index| {
            PyValueError::new_err(format!(
                "output '{}': the data is not contiguous",
                tensors[index].name
            ))
        })?;
        let head = ModelInferResponseHead {
            model_name,
            model_version,
            id,
            parameters: params,
            outputs: tensors,
        };
        let Some(reply) = lock(&self.reply).take() else {
            return Err(PyRuntimeError::new_err("this call was answered already"));
        };
        // Encoded and sent with the GIL released: the send wakes the core's thread, which then does not wait
        // on the GIL this thread would still hold.
        py.allow_threads(|| {
            let answer = encode_response(&head, &buffers.slices());
            self.answering.send(move || {
                let _ = reply.send(Ok(answer)); // the client may have gone
            });
        });
        drop(buffers);
        Ok(())
    }
}
