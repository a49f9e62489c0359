//! The HTTP/1.1 port on hyper. The KServe v2 infer endpoint (`POST /v2/models/{m}[/versions/{v}]/infer`) is
//! served here: the inference restriction checked on the headers, the body read within its limit
//! ([`crate::http_body`]), its JSON header read when the body has the common binary shape ([`crate::http_infer`]),
//! then handed to the Python data plane through the [`WakeQueue`], which answers with a finished body. Every other
//! request, and an infer request this core leaves alone (compressed, a percent-encoded name, a query string), is
//! forwarded as it came to the Python (aiohttp) app on a private Unix socket, and its answer streamed back: one set
//! of routes and messages for both paths.

use std::convert::Infallible;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT_ENCODING, CONNECTION, CONTENT_ENCODING, CONTENT_TYPE};
use hyper::server::conn::http1::Connection;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::oneshot;

use crate::driven::{accept, drive, Busy};
use crate::fair_share::FairShare;
use crate::http_body::{read_body, refuse, unread, Limit, Limits};
use crate::http_coding::{answer_coding, compressed_body, encoded};
use crate::http_infer::{self, binary_request, BinaryRequest, INLINE_HEADER};
use crate::http_pace::{too_slow, Paced};
use crate::http_reply::ascii_string;
use crate::idle_policy::InFlight;
use crate::placed::Noted;
use crate::queue::WakeQueue;
use crate::restrict::constant_time_eq;
use crate::running::Running;
use crate::send_bound::SendBound;

pub const HEADER_LENGTH: &str = "inference-header-content-length";
pub const JSON_CONTENT: &str = "application/json";
pub const BINARY_CONTENT: &str = "application/octet-stream";
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

pub type Body = Either<Full<Bytes>, Incoming>;

/// The inference category's restriction (`--http-restricted-api`), with its finished 403 body.
#[derive(Clone, Debug)]
pub struct Restriction {
    /// Lower case.
    pub header: String,
    pub value: Vec<u8>,
    pub refusal: Bytes,
}

#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// Any body with binary tensors (`Inference-Header-Content-Length` given).
    pub body: Limit,
    /// A body that is all JSON, and the JSON header of any body.
    pub json: Limit,
    pub restriction: Option<Restriction>,
    /// The Python app's Unix socket, for everything not served here.
    pub upstream: PathBuf,
    /// A request body's grace period ([`crate::http_pace`]).
    pub body_grace: Duration,
    /// Connections open at once, shared among the addresses that open them ([`crate::fair_share`]).
    pub max_connections: usize,
    /// A write that waits this long for the peer to take bytes closes the connection (crate::send_bound).
    pub send_timeout: Duration,
    /// Whether the infer endpoint is answered here; if not (the metrics port), every request is forwarded.
    pub serves_infer: bool,
}

/// An infer request waiting for the Python side.
pub struct InferCall {
    pub model: String,
    pub version: String,
    pub header_length: Option<String>,
    pub body: Bytes,
    /// The body read here when it has the common binary shape ([`binary_request`]); else Python reads it.
    pub binary: Option<BinaryRequest>,
    pub reply: oneshot::Sender<HttpAnswer>,
}

/// The Python side's answer: a finished body.
pub struct HttpAnswer {
    pub status: u16,
    pub content_type: String,
    pub header_length: Option<usize>,
    pub body: Bytes,
}

pub struct HttpCore {
    pub queue: WakeQueue<InferCall>,
    pub in_flight: InFlight,
    config: HttpConfig,
}

impl HttpCore {
    pub fn new(config: HttpConfig) -> std::io::Result<Self> {
        Ok(Self {
            queue: WakeQueue::new()?,
            in_flight: InFlight::default(),
            config,
        })
    }
}

/// `(model, version)` when this core serves the request itself: a POST to an infer path whose names need no
/// decoding, without a query string; `None` sends it to the Python app (which also answers 404 and 405).
pub fn infer_target(method: &Method, path: &str, query: Option<&str>) -> Option<(String, String)> {
    if method != Method::POST || query.is_some() {
        return None;
    }
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    let plain = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains(['%', '{', '}']);
    let mut parts = rest.split('/');
    let (model, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), None, None, None) => (m, ""),
        (Some(m), Some("versions"), Some(v), None) if plain(v) => (m, v),
        _ => return None,
    };
    plain(model).then(|| (model.to_string(), version.to_string()))
}

pub fn respond(status: StatusCode, content_type: &str, body: Bytes, close: bool) -> Response<Body> {
    let mut response = Response::new(Either::Left(Full::new(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static(JSON_CONTENT)),
    );
    if close {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// `{"error": message}` as Python's `json.dumps` writes it (ASCII, \u escapes).
pub fn error_body(message: &str) -> Bytes {
    let mut out = String::with_capacity(message.len() + 12);
    out.push_str("{\"error\":");
    ascii_string(&mut out, message);
    out.push('}');
    Bytes::from(out)
}

async fn infer(
    core: &HttpCore,
    model: String,
    version: String,
    request: Request<Incoming>,
) -> Response<Body> {
    let config = &core.config;
    let (parts, body) = request.into_parts();
    let coding = answer_coding(
        parts
            .headers
            .get_all(ACCEPT_ENCODING)
            .iter()
            .map(|v| v.as_bytes()),
    );
    if let Some(restriction) = &config.restriction {
        let presented = parts
            .headers
            .get(restriction.header.as_str())
            .map(|v| v.as_bytes());
        if !presented.is_some_and(|p| constant_time_eq(p, &restriction.value)) {
            return refuse(
                &parts.headers,
                body,
                StatusCode::FORBIDDEN,
                restriction.refusal.clone(),
            )
            .await;
        }
    }
    let header_length = parts
        .headers
        .get(HEADER_LENGTH)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let limits = Limits {
        body: &config.body,
        json: &config.json,
        grace: config.body_grace,
    };
    let body = match read_body(&parts.headers, header_length.as_deref(), body, limits).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let (reply, answer) = oneshot::channel();
    let inline = http_infer::header_length(header_length.as_deref(), body.len())
        .is_none_or(|n| n <= INLINE_HEADER);
    let binary = if inline {
        binary_request(header_length.as_deref(), &body)
    } else {
        // a large JSON header (JSON tensors): read beside the connections this task's thread serves
        let (length, all) = (header_length.clone(), body.clone());
        tokio::task::spawn_blocking(move || binary_request(length.as_deref(), &all))
            .await
            .ok()
            .flatten()
    };
    let _counted = core.in_flight.enter(); // until this call is answered (or dropped)
    core.queue.push(InferCall {
        model,
        version,
        header_length,
        body,
        binary,
        reply,
    });
    match answer.await {
        Ok(answer) => {
            let status =
                StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let coding = coding.filter(|_| status == StatusCode::OK); // as Triton: answers, not errors
            let body = match coding {
                Some(coding) => encoded(coding, answer.body).await,
                None => answer.body,
            };
            let mut response = respond(status, &answer.content_type, body, false);
            let headers = response.headers_mut();
            if let Some(length) = answer.header_length {
                headers.insert(HEADER_LENGTH, HeaderValue::from(length));
            }
            if let Some(coding) = coding {
                headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.name()));
            }
            response
        }
        Err(_) => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            JSON_CONTENT,
            error_body("the server is stopping"),
            true,
        ),
    }
}

async fn forward(config: &HttpConfig, request: Request<Incoming>) -> Response<Body> {
    let request = request.map(|body| Paced::new(body, config.body_grace));
    let sent = async {
        let stream = tokio::net::UnixStream::connect(&config.upstream).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await; // ends with the exchange; an error reached the response already
        });
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(sender.send_request(request).await?)
    };
    match sent.await {
        Ok(response) => response.map(Either::Right),
        Err(err) if too_slow(err.as_ref()).is_some() => unread(err.as_ref()),
        Err(err) => respond(
            StatusCode::BAD_GATEWAY,
            JSON_CONTENT,
            error_body(&format!("the server could not answer this request: {err}")),
            true,
        ),
    }
}

async fn handle(
    core: Arc<HttpCore>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let uri = request.uri();
    let target = infer_target(request.method(), uri.path(), uri.query());
    Ok(match target {
        Some((model, version))
            if core.config.serves_infer && !compressed_body(request.headers()) =>
        {
            infer(&core, model, version, request).await
        }
        _ => forward(&core.config, request).await,
    })
}

/// Serves `listener` (already bound) from `runtime` until stopped.
pub fn serve(
    runtime: &tokio::runtime::Runtime,
    core: Arc<HttpCore>,
    listener: TcpListener,
) -> std::io::Result<Running<()>> {
    let _entered = runtime.enter();
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let (shutdown, signal) = oneshot::channel::<()>();
    let places = FairShare::new(core.config.max_connections);
    let done = runtime.spawn(accept(
        listener,
        places,
        signal,
        move |stream, place, stopping| {
            let stream = Noted::new(
                SendBound::new(stream, core.config.send_timeout),
                place.hearing(),
            );
            let core = core.clone();
            let busy = Busy::default();
            let answering = busy.clone();
            let service = hyper::service::service_fn(move |request| {
                let working = answering.enter();
                let core = core.clone();
                async move {
                    let response = handle(core, request).await;
                    drop(working);
                    response
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let aged = std::future::pending(); // the HTTP port's connections do not age
            drive(
                connection,
                Connection::graceful_shutdown,
                place,
                aged,
                None,
                busy,
                stopping,
            )
        },
    ));
    Ok(Running::new(shutdown, done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infer_paths_are_served_here() {
        let post = Method::POST;
        assert_eq!(
            infer_target(&post, "/v2/models/simple/infer", None),
            Some(("simple".into(), "".into()))
        );
        assert_eq!(
            infer_target(&post, "/v2/models/simple/versions/3/infer", None),
            Some(("simple".into(), "3".into()))
        );
    }

    #[test]
    fn everything_else_goes_to_the_python_app() {
        let post = Method::POST;
        assert_eq!(
            infer_target(&Method::GET, "/v2/models/simple/infer", None),
            None
        );
        assert_eq!(
            infer_target(&post, "/v2/models/simple/infer", Some("a=1")),
            None
        );
        assert_eq!(
            infer_target(&post, "/v2/models/si%20mple/infer", None),
            None
        );
        assert_eq!(infer_target(&post, "/v2/models//infer", None), None);
        assert_eq!(infer_target(&post, "/v2/models/../infer", None), None);
        assert_eq!(infer_target(&post, "/v2/models/a/b/infer", None), None);
        assert_eq!(
            infer_target(&post, "/v2/models/a/versions//infer", None),
            None
        );
        assert_eq!(
            infer_target(&post, "/v2/models/a/versions/1/2/infer", None),
            None
        );
        assert_eq!(infer_target(&post, "/v2/models/a/infer/", None), None);
        assert_eq!(infer_target(&post, "/v2/models/a/ready", None), None);
        assert_eq!(infer_target(&post, "/v2/models/{a}/infer", None), None);
    }

    #[test]
    fn error_bodies_are_ascii_json() {
        assert_eq!(
            &error_body("a \"b\"\\\n")[..],
            br#"{"error":"a \"b\"\\\n"}"#
        );
        assert_eq!(&error_body("é😀")[..], br#"{"error":"\u00e9\ud83d\ude00"}"#);
        assert_eq!(
            &error_body("\u{8}\u{c}\u{1}\u{7f}")[..],
            br#"{"error":"\b\f\u0001\u007f"}"#
        );
    }
}
