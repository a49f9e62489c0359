//! The gRPC port: each connection admitted to its places (crate::fair_share) is served by hyper's HTTP/2 server
//! within the port's limits (crate::handshake), its calls routed by tonic to the services (crate::service), and
//! driven by its own task (crate::driven), so that one that gives way says so with a GOAWAY.

use std::hash::{BuildHasher, RandomState};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{oneshot, watch};
use tokio_rustls::TlsAcceptor;
use tonic::body::Body;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::service::Routes;
use tonic::transport::server::TcpConnectInfo;
use tonic::Status;

use crate::busy::Busy;
use crate::driven::{accept, after, drive};
use crate::fair_share::{FairShare, Place};
use crate::grpc_timeout;
use crate::handshake::{ConnectionLimits, Deadlined};
use crate::placed::{Placed, PlacedInfo};
use crate::running::Running;
use crate::send_bound::SendBound;
use crate::service::{Core, HealthService, InferenceService};
use crate::tls::TlsSwitch;

/// Serves both services on `listener` (already bound: a bad address fails in the caller) from `runtime`, its
/// connections within `limits`, over TLS where `tls` is given (crate::tls; each connection with the configuration
/// current when it is accepted): each driven by its own task (crate::driven), so that one that gives way or ages
/// says so with a GOAWAY.
pub fn serve(
    runtime: &tokio::runtime::Runtime,
    core: Arc<Core>,
    listener: TcpListener,
    limits: ConnectionLimits,
    tls: Option<Arc<TlsSwitch>>,
) -> std::io::Result<Running<()>> {
    let _entered = runtime.enter();
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let (shutdown, signal) = oneshot::channel::<()>();
    let places = FairShare::new(limits.max_connections);
    let routes =
        Routes::new(InferenceService(core.clone())).add_service(HealthService(core.clone()));
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.keepalive_time))
        .keep_alive_timeout(limits.keepalive_timeout)
        .max_concurrent_streams(limits.max_concurrent_streams);
    let done = runtime.spawn(accept(
        listener,
        places,
        signal,
        move |tcp, mut place, mut stopping| {
            let inner = TcpConnectInfo {
                local_addr: tcp.local_addr().ok(),
                remote_addr: tcp.peer_addr().ok(),
            };
            let io = Placed::new(
                SendBound::new(tcp, limits.send_timeout),
                place.hearing(),
                limits.send_timeout,
            );
            let busy = Busy::default();
            let info = PlacedInfo {
                inner,
                busy: busy.clone(),
                outgoing: io.outgoing().clone(),
            };
            let service = Connection {
                routes: routes.clone(),
                core: core.clone(),
                info,
            };
            let builder = builder.clone();
            let acceptor = tls.as_ref().map(|tls| TlsAcceptor::from(tls.current()));
            async move {
                let Some(acceptor) = acceptor else {
                    let io = Deadlined::new(io, limits.handshake);
                    let connection = builder.serve_connection(TokioIo::new(io), service);
                    return served(connection, place, limits, busy, stopping).await;
                };
                // the handshake deadline holds from the accept: TLS's handshake, then HTTP/2's
                let began = Instant::now();
                let handshake = tokio::time::timeout(limits.handshake, acceptor.accept(io));
                let tls = tokio::select! {
                    shaken = handshake => match shaken {
                        Ok(Ok(tls)) => tls,
                        _ => return, // not TLS, refused or too slow: closed
                    },
                    () = place.given_way() => return,
                    _ = stopping.wait_for(|stopping| *stopping) => return,
                };
                let io = Deadlined::new(tls, limits.handshake.saturating_sub(began.elapsed()));
                let connection = builder.serve_connection(TokioIo::new(io), service);
                served(connection, place, limits, busy, stopping).await
            }
        },
    ));
    Ok(Running::new(shutdown, done))
}

/// Drives one HTTP/2 connection of the port to its end (crate::driven::drive).
async fn served<I>(
    connection: http2::Connection<TokioIo<I>, Connection, TokioExecutor>,
    place: Place,
    limits: ConnectionLimits,
    busy: Busy,
    stopping: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    drive(
        connection,
        http2::Connection::graceful_shutdown,
        place,
        aged(limits.max_age),
        limits.max_age_grace,
        busy,
        stopping,
    )
    .await
}

/// The calls of one connection: each told where it came from (its [`PlacedInfo`]), then routed to its service.
/// Once the connection goes (gave way or aged) its GOAWAY is sent, but calls the client sent before it read it still
/// arrive: they are served (crate::busy::LATE_CALLS), as grpc core's server serves them, because grpc core's client
/// sends again only a call the server's second GOAWAY left out, not one refused with REFUSED_STREAM. Past
/// LATE_CALLS a client that never acknowledged the GOAWAY has its new calls refused with REFUSED_STREAM.
#[derive(Clone)]
struct Connection {
    routes: Routes,
    core: Arc<Core>,
    info: PlacedInfo<TcpConnectInfo>,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Connection {
    type Response = http::Response<Body>;
    type Error = h2::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn call(&self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        if !self.info.busy.takes_calls() {
            return Box::pin(std::future::ready(Err(h2::Reason::REFUSED_STREAM.into())));
        }
        let deadline = request
            .headers()
            .get(grpc_timeout::HEADER)
            .and_then(|value| grpc_timeout::parse(value.as_bytes()));
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(self.info.clone());
        // here, as hyper takes the connection's calls in order: each then runs in its own task (crate::budget)
        request.extensions_mut().insert(self.core.arrival());
        let answered = self.routes.clone().call(request);
        Box::pin(async move {
            let answered = match deadline {
                Some(within) => match tokio::time::timeout(within, answered).await {
                    Ok(answered) => answered,
                    Err(_) => return Ok(Status::deadline_exceeded("Deadline Exceeded").into_http()),
                },
                None => answered.await,
            };
            match answered {
                Ok(response) => Ok(response),
                Err(never) => match never {},
            }
        })
    }
}

/// Ready once a connection opened now reaches `max_age` (+-10%, drawn afresh for each); never without one.
async fn aged(max_age: Option<Duration>) {
    after(max_age.map(|age| jittered(age, RandomState::new().hash_one(0u8)))).await
}

/// `age` moved by up to 10% either way, by `draw` (any u64: its spread over the range).
fn jittered(age: Duration, draw: u64) -> Duration {
    let fraction = draw as f64 / u64::MAX as f64; // 0..=1
    age.mul_f64(0.9 + 0.2 * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_spread_over_ten_percent_either_way() {
        let age = Duration::from_secs(100);
        assert_eq!(jittered(age, 0), Duration::from_secs(90));
        assert_eq!(jittered(age, u64::MAX), Duration::from_secs(110));
        assert_eq!(jittered(age, u64::MAX / 2).as_secs(), 100);
        let draws: Vec<Duration> = (0..64)
            .map(|_| jittered(age, RandomState::new().hash_one(0u8)))
            .collect();
        assert!(draws.iter().all(|d| (90..=110).contains(&d.as_secs())));
        assert!(draws.iter().any(|d| *d != draws[0]), "drawn afresh");
    }
}
