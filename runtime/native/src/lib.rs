//! The runtime's native protocol core (`ensemble_runtime.protocol._native`): the KServe v2 / Triton gRPC services
//! routed by tonic on hyper's HTTP/2 server, `ModelInfer` decoded here, and the HTTP port on hyper with its infer endpoint; every call is
//! handed to the Python data plane in batches.
//! What a request means stays in Python; this crate parses and writes the wire.

pub mod budget;
pub mod busy;
pub mod codings;
pub mod driven;
pub mod fair_share;
pub mod floor_echo;
pub mod grpc_plain;
pub mod grpc_port;
pub mod grpc_timeout;
pub mod handshake;
pub mod http;
pub mod http_body;
pub mod http_coding;
pub mod http_infer;
pub mod http_pace;
pub mod http_reply;
pub mod idle_policy;
pub mod inflate;
pub mod json_tensors;
pub mod lane_plan;
pub mod messages;
pub mod on_loop;
pub mod ort_lane;
pub mod outgoing;
pub mod placed;
pub mod queue;
pub mod restrict;
pub mod running;
pub mod send_bound;
pub mod service;
pub mod stream;
pub mod tls;
pub mod unanswered;
pub mod wire_format;

#[cfg(feature = "python")]
mod py_arrays;
#[cfg(feature = "python")]
mod py_buffers;
#[cfg(feature = "python")]
mod py_core;
#[cfg(feature = "python")]
mod py_http;
#[cfg(feature = "python")]
mod py_http_binary;
#[cfg(feature = "python")]
mod py_lane;
#[cfg(feature = "python")]
mod py_request;
#[cfg(feature = "python")]
mod py_serving;
#[cfg(feature = "python")]
mod py_stream;

#[cfg(feature = "python")]
#[pyo3::pymodule]
fn _native(module: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    use pyo3::types::PyModuleMethods;
    // whether a port can have no threads, driven by the event loop's thread (a build with tokio_unstable)
    module.add("ON_LOOP", on_loop::AVAILABLE)?;
    module.add_class::<py_core::GrpcCore>()?;
    module.add_class::<py_core::Call>()?;
    module.add_class::<py_lane::OnnxLane>()?;
    module.add_function(pyo3::wrap_pyfunction!(py_core::check_tls, module)?)?;
    module.add_class::<py_http::PyHttpCore>()?;
    module.add_class::<py_http::HttpCall>()?;
    module.add_class::<py_http_binary::BinaryInfer>()?;
    module.add_function(pyo3::wrap_pyfunction!(
        py_http_binary::binary_infer,
        module
    )?)?;
    module.add_function(pyo3::wrap_pyfunction!(
        py_http_binary::binary_reply_head,
        module
    )?)?;
    module.add_function(pyo3::wrap_pyfunction!(
        py_http_binary::infer_reply_head,
        module
    )?)?;
    module.add_function(pyo3::wrap_pyfunction!(
        py_http_binary::answer_coding,
        module
    )?)?;
    module.add_class::<py_stream::StreamCall>()?;
    module.add_class::<py_stream::StreamFrame>()?;
    module.add_class::<py_stream::StreamWritable>()?;
    module.add_class::<py_stream::EncodedMessage>()?;
    module.add(
        "DecodeError",
        module.py().get_type::<py_stream::DecodeError>(),
    )?;
    module.add_class::<py_request::InferRequestView>()?;
    module.add_class::<py_request::InputTensor>()?;
    module.add_class::<py_request::OutputTensor>()?;
    module.add_class::<py_request::Contents>()?;
    module.add_class::<py_request::WireBuffer>()?;
    Ok(())
}
