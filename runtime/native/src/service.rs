//! The gRPC services, routed by tonic on hyper's HTTP/2 server (each connection driven by its own task,
//! crate::driven): `inference.GRPCInferenceService` and `grpc.health.v1.Health`.
//!
//! Every call is checked against the restrictions on its headers first. `ModelInfer` is decoded here into
//! [`ModelInferRequest`]; the other unary methods cross as raw bytes. Either way the call waits in the
//! [`WakeQueue`] for the Python data plane, which answers through the call's [`Reply`].

use std::convert::Infallible;
use std::sync::Arc;

use bytes::{BufMut, Bytes};
use prost::Message;
use tokio::sync::oneshot;
use tonic::body::Body;
use tonic::codec::{
    BufferSettings, Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder,
};
use tonic::codegen::{http, BoxFuture, Context, Poll, Service};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::server::TcpConnectInfo;
use tonic::{Response, Status};

use crate::budget::{Arrival, CallBudget, CallLimits, WaitingCall};
use crate::busy::Busy;
use crate::floor_echo::Echo;
use crate::idle_policy::InFlight;
use crate::inflate::{gate, inflated, Gate};
use crate::messages::ModelInferRequest;
use crate::ort_lane::OrtLane;
use crate::placed::PlacedInfo;
use crate::queue::WakeQueue;
use crate::restrict::Restrictions;
use crate::stream::{Frame, StreamHandler, StreamIds, StreamLink};

pub const INFERENCE: &str = "inference.GRPCInferenceService";
pub const HEALTH: &str = "grpc.health.v1.Health";
pub const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
pub const MODEL_STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";
pub const HEALTH_WATCH: &str = "/grpc.health.v1.Health/Watch";
/// How a stream on a connection that gave way ends, once the answers of what it read are sent: a new connection
/// takes its next requests.
pub const GAVE_WAY: &str =
    "this connection gave way to one from another address (the port's connections are all \
taken); open a new connection";
/// How a stream on a connection that reached the port's maximum age ends once the age's grace passed, as
/// [`GAVE_WAY`] does.
pub const AGED: &str = "this connection reached the server's maximum connection age and its grace \
(--grpc-max-connection-age-secs, --grpc-max-connection-age-grace-secs); open a new connection";

/// The unary methods of the inference service that cross to Python as raw bytes.
const FORWARDED: &[&str] = &[
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelConfig",
    "ModelStatistics",
    "RepositoryIndex",
    "RepositoryModelLoad",
    "RepositoryModelUnload",
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
    "TraceSetting",
    "LogSettings",
];

/// Where the answer to one call goes: the serialized response message, or a status.
pub type Reply = oneshot::Sender<Result<Bytes, Status>>;

/// A call waiting for the Python side.
pub enum Work {
    Infer {
        request: ModelInferRequest,
        size: usize,
        reply: Reply,
    },
    Forward {
        path: String,
        payload: Bytes,
        reply: Reply,
    },
    StreamOpen(StreamLink),
    StreamFrame(Frame),
    /// A stream's response window has room again.
    StreamWritable(u64),
}

pub struct Core {
    pub queue: WakeQueue<Work>,
    pub in_flight: InFlight,
    pub stream_ids: StreamIds,
    /// The benchmark floor's answer made here (crate::floor_echo); off in the runtime.
    pub echo: Echo,
    /// The ONNX models whose plain requests are answered here (crate::ort_lane); empty unless registered.
    pub lane: OrtLane,
    restrictions: Restrictions,
    max_message_bytes: usize,
    inflating: Gate,
    budget: CallBudget,
}

impl Core {
    pub fn new(
        restrictions: Restrictions,
        max_message_bytes: usize,
        calls: CallLimits,
    ) -> std::io::Result<Self> {
        Ok(Self {
            queue: WakeQueue::new()?,
            in_flight: InFlight::default(),
            stream_ids: StreamIds::default(),
            echo: Echo::default(),
            lane: OrtLane::default(),
            restrictions,
            max_message_bytes,
            inflating: gate(),
            budget: CallBudget::new(calls),
        })
    }

    /// The response to a unary call, or RESOURCE_EXHAUSTED where it is larger than the port sends.
    fn sized(&self, message: Bytes) -> Result<Response<Bytes>, Status> {
        if message.len() > self.max_message_bytes {
            return Err(Status::resource_exhausted(format!(
                "Sent message larger than max ({} vs. {})",
                message.len(),
                self.max_message_bytes
            )));
        }
        Ok(Response::new(message))
    }

    /// A call's place in the order of arrival at the port, for the budget of calls waiting for their message
    /// (crate::budget): taken as the connection reads the call's HEADERS, before the call's task starts.
    pub fn arrival(&self) -> Arrival {
        self.budget.arrival()
    }

    async fn route(self: Arc<Self>, request: http::Request<Body>) -> http::Response<Body> {
        let path = request.uri().path().to_owned();
        let headers = request.headers();
        if let Some(refusal) = self
            .restrictions
            .refusal(&path, |name| headers.get(name).map(|v| v.as_bytes()))
        {
            return Status::unavailable(refusal).into_http();
        }
        let limit = self.max_message_bytes;
        // Compressed messages reach tonic inflated (crate::inflate: in steps, within the limit). Answers go out
        // uncompressed, as Triton's do by default.
        let request = inflated(request, limit, &self.inflating);
        let mut grpc = Grpc::new(RawCodec)
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Deflate)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
        let placed = request
            .extensions()
            .get::<PlacedInfo<TcpConnectInfo>>()
            .cloned();
        // answered before its connection closes, when the connection gives way (crate::driven)
        let busy = placed.as_ref().map(|placed| placed.busy.clone());
        // Each call holds a place in the budget across connections (crate::budget): a stream for its life, a
        // unary call until its message has arrived (or it is told to give way to a newer one). Its place in the
        // order the calls came in was taken by crate::grpc_port as its HEADERS were read.
        let arrived = request
            .extensions()
            .get::<Arrival>()
            .copied()
            .unwrap_or_else(|| self.budget.arrival());
        let response = if path == MODEL_STREAM_INFER || path == HEALTH_WATCH {
            let peer = placed
                .as_ref()
                .and_then(|placed| placed.inner.remote_addr())
                .map(|address| address.ip());
            let open = match self.budget.open_stream(peer, arrived) {
                Ok(permit) => permit,
                Err(status) => return status.into_http(),
            };
            let handler = StreamHandler {
                core: self,
                path,
                open: Some(open),
                busy,
            };
            grpc.streaming(handler, request).await
        } else if is_unary(&path) {
            let _answering = busy.as_ref().map(Busy::enter);
            let (waiting, give_way) = self.budget.incomplete_call(arrived);
            let unary = Unary {
                core: self,
                path,
                waiting: Some(waiting),
            };
            tokio::select! {
                biased;
                response = grpc.unary(unary, request) => response,
                status = give_way.status() => return status.into_http(),
            }
        } else {
            return Status::unimplemented("Method not found!").into_http();
        };
        // its pieces counted while they wait, so a peer that takes none does not keep them (crate::outgoing)
        let response = match placed {
            Some(placed) => response.map(|body| Body::new(placed.outgoing.track(body))),
            None => response,
        };
        // a refusal before the handler ran carries its status in the extensions (tonic's Status::into_http)
        match response
            .extensions()
            .get::<Status>()
            .and_then(as_grpcio_answers)
        {
            Some(status) => status.into_http(),
            None => response,
        }
    }
}

fn is_unary(path: &str) -> bool {
    if let Some(method) = path.strip_prefix("/inference.GRPCInferenceService/") {
        return method == "ModelInfer" || FORWARDED.contains(&method);
    }
    path == "/grpc.health.v1.Health/Check"
}

/// tonic's refusals of a message over the size limit, in grpcio's words (and so Triton's, whose clients show
/// them): RESOURCE_EXHAUSTED "Received message larger than max (N vs. LIMIT)" for a message over it as sent (tonic
/// says OUT_OF_RANGE), "Decompressed message larger than max" for one that inflates past it. Other statuses: None.
pub fn as_grpcio_answers(status: &Status) -> Option<Status> {
    let message = status.message();
    if status.code() == tonic::Code::ResourceExhausted
        && message.contains("exceeded while decompressing")
    {
        return Some(Status::resource_exhausted(
            "Decompressed message larger than max",
        ));
    }
    if status.code() != tonic::Code::OutOfRange || !message.contains("message length too large") {
        return None;
    }
    let numbers: Vec<&str> = message
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .collect();
    let message = match numbers.as_slice() {
        [found, limit, ..] => format!("Received message larger than max ({found} vs. {limit})"),
        _ => "Received message larger than max".to_string(),
    };
    Some(Status::resource_exhausted(message))
}

/// Decodes `ModelInfer` (INVALID_ARGUMENT when the bytes are no such message), as the grpcio path answers.
pub fn decode_infer(payload: Bytes) -> Result<ModelInferRequest, Status> {
    ModelInferRequest::decode(payload).map_err(|_| {
        Status::invalid_argument(
            "the ModelInfer request is not a valid protobuf message (DecodeError)",
        )
    })
}

struct Unary {
    core: Arc<Core>,
    path: String,
    /// Freed when the message has arrived (tonic calls `call` with it), or the call ends without it.
    waiting: Option<WaitingCall>,
}

impl UnaryService<Bytes> for Unary {
    type Response = Bytes;
    type Future = BoxFuture<Response<Bytes>, Status>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let core = self.core.clone();
        let path = std::mem::take(&mut self.path);
        drop(self.waiting.take());
        Box::pin(async move {
            let payload = request.into_inner();
            let (reply, answer) = oneshot::channel();
            let work = if path == MODEL_INFER {
                let size = payload.len();
                let mut request = decode_infer(payload)?;
                if core.echo.is_on() {
                    return core.echo.answer(&request).map(Response::new);
                }
                if let Some(model) = core.lane.model(&request.model_name) {
                    let _counted = core.in_flight.enter(); // until answered here
                    let answer = if model.runs_inline() {
                        model.answer(&request)
                    } else {
                        let Ok((answer, back)) = model.answer_pooled(request).await else {
                            return Err(Status::internal("the ONNX lane's run failed"));
                        };
                        request = back;
                        answer
                    };
                    if let Some(message) = answer {
                        return core.sized(message);
                    }
                }
                Work::Infer {
                    request,
                    size,
                    reply,
                }
            } else {
                Work::Forward {
                    path,
                    payload,
                    reply,
                }
            };
            let _counted = core.in_flight.enter(); // until this call is answered (or dropped)
            core.queue.push(work);
            match answer.await {
                Ok(Ok(message)) => core.sized(message),
                Ok(Err(status)) => Err(status),
                Err(_) => Err(Status::internal("the call was dropped without an answer")),
            }
        })
    }
}

/// Messages pass through as bytes; the methods decode what they need themselves.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        *self
    }

    fn decoder(&mut self) -> Self::Decoder {
        *self
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()))) // a slice of the received frame, not a copy
    }

    /// No buffer before the message's bytes arrive (tonic's default allocates 8 KiB per call up front, which a
    /// call that never sends its message held for nothing); the buffer is sized to the message from its
    /// length prefix.
    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(0, 32 * 1024)
    }
}

macro_rules! named_service {
    ($name:ident, $service:expr) => {
        #[derive(Clone)]
        pub struct $name(pub Arc<Core>);

        impl NamedService for $name {
            const NAME: &'static str = $service;
        }

        impl Service<http::Request<Body>> for $name {
            type Response = http::Response<Body>;
            type Error = Infallible;
            type Future = BoxFuture<Self::Response, Self::Error>;

            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, request: http::Request<Body>) -> Self::Future {
                let core = self.0.clone();
                Box::pin(async move { Ok(core.route(request).await) })
            }
        }
    };
}

named_service!(InferenceService, INFERENCE);
named_service!(HealthService, HEALTH);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unary_methods_are_routed() {
        assert!(is_unary(MODEL_INFER));
        assert!(is_unary("/inference.GRPCInferenceService/ModelMetadata"));
        assert!(is_unary("/grpc.health.v1.Health/Check"));
        assert!(!is_unary(
            "/inference.GRPCInferenceService/ModelStreamInfer"
        ));
        assert!(!is_unary("/inference.GRPCInferenceService/Nope"));
    }

    #[test]
    fn oversized_requests_are_resource_exhausted() {
        let tonic_says = Status::out_of_range("Error, decoded message length too large: found 200118 bytes, the limit is: 65536 bytes");
        let status = as_grpcio_answers(&tonic_says).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "Received message larger than max (200118 vs. 65536)"
        );
        assert!(as_grpcio_answers(&Status::out_of_range("something else")).is_none());
        assert!(as_grpcio_answers(&Status::invalid_argument("message length too large")).is_none());
    }

    #[test]
    fn inflating_past_the_limit_is_resource_exhausted_as_grpcio_says() {
        let tonic_says = Status::resource_exhausted(
            "Error decompressing: size limit, of 1048576 bytes, exceeded while decompressing message",
        );
        let status = as_grpcio_answers(&tonic_says).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(status.message(), "Decompressed message larger than max");
        let corrupt =
            Status::internal("Error decompressing: invalid gzip header, while sending request");
        assert!(as_grpcio_answers(&corrupt).is_none());
    }

    #[test]
    fn undecodable_infer_is_invalid_argument() {
        let status = decode_infer(Bytes::from_static(&[0x0a, 0xff, 0xff])).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("not a valid protobuf message"));
    }
}
