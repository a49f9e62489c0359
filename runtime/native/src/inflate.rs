//! Compressed gRPC requests (`grpc-encoding: gzip | deflate`), inflated on the core's thread in steps.
//!
//! tonic would inflate a compressed message whole, in one call, on the thread that serves every connection: a
//! message of 1 MiB that inflates to the 256 MiB limit held the core for a quarter of a second. Here the request
//! body is read through [`Inflating`], which hands tonic each compressed message as the plain message it
//! inflates to (compressed flag 0, its inflated length), inflating at most [`STEP`] bytes per poll and then
//! yielding to the other tasks. The limit is checked as the bytes come out: a message that inflates past it is
//! refused (RESOURCE_EXHAUSTED, grpcio's words) with no more than the limit held. One message inflates at a time
//! per core (the [`Gate`]; a message is inflated only once all its compressed bytes are here, so a slow client
//! does not hold it): many small messages that each inflate to the limit, sent at once, hold one limit's worth
//! of inflating memory, not one per message, as when tonic inflated them on the core's one thread. Plain
//! messages pass through untouched, as they arrive, for tonic to check as it does any message.

use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::codings::Coding;
use bytes::{Buf, Bytes, BytesMut};
use hyper::body::{Body, Frame};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tonic::codegen::http;
use tonic::Status;

/// Lets one message inflate at a time (see the module); shared by every call of a core.
pub type Gate = Arc<Semaphore>;

pub fn gate() -> Gate {
    Arc::new(Semaphore::new(1))
}

/// Inflated bytes per poll before the task yields (about a millisecond of inflating here).
pub const STEP: usize = 1024 * 1024;
const HEADER: usize = 5; // the compressed flag and the length, big-endian
const ENCODING: &str = "grpc-encoding";

/// The coding a `grpc-encoding` value names, of ours (gRPC's names, exactly).
pub fn grpc_encoding(value: &[u8]) -> Option<Coding> {
    match value {
        b"gzip" => Some(Coding::Gzip),
        b"deflate" => Some(Coding::Deflate),
        _ => None,
    }
}

/// A request whose messages are compressed with an encoding of ours: its body read through [`Inflating`] and
/// the `grpc-encoding` header removed, so tonic reads plain messages. Any other request is returned as it is
/// (tonic refuses an encoding it does not know, with UNIMPLEMENTED and the ones it accepts).
pub fn inflated(
    mut request: http::Request<tonic::body::Body>,
    limit: usize,
    gate: &Gate,
) -> http::Request<tonic::body::Body> {
    let Some(encoding) = request
        .headers()
        .get(ENCODING)
        .and_then(|value| grpc_encoding(value.as_bytes()))
    else {
        return request;
    };
    request.headers_mut().remove(ENCODING);
    let gate = gate.clone();
    request.map(|body| tonic::body::Body::new(Inflating::new(body, encoding, limit, gate)))
}

enum State {
    /// Waiting for a message: its 5-byte header, and all of it when it is compressed.
    Header,
    /// Forwarding the rest of a plain message (or of one whose flag is not ours to judge) as it arrives.
    Passing(usize),
    /// A compressed message, all here, waiting for the gate.
    Queued(Bytes),
    /// Inflating a message: what came out so far, after room for its header.
    Inflating(Box<dyn Read + Send>, BytesMut),
    /// The body failed or ended: nothing more.
    Done,
}

/// A gRPC request body whose compressed messages come out inflated (see the module).
pub struct Inflating<B> {
    inner: B,
    inner_ended: bool,
    encoding: Coding,
    limit: usize,
    pending: BytesMut,
    state: State,
    yielding: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    gate: Gate,
    acquiring: Option<Pin<Box<dyn Future<Output = Acquired> + Send>>>,
    permit: Option<OwnedSemaphorePermit>, // held while inflating
}

type Acquired = Result<OwnedSemaphorePermit, AcquireError>;

impl<B> Inflating<B> {
    pub fn new(inner: B, encoding: Coding, limit: usize, gate: Gate) -> Self {
        Self {
            inner,
            inner_ended: false,
            encoding,
            limit,
            pending: BytesMut::new(),
            state: State::Header,
            yielding: None,
            gate,
            acquiring: None,
            permit: None,
        }
    }

    /// One step on the bytes already here: `Some` when it has something to say, `None` when it needs more
    /// bytes or (inflating) a yield.
    fn step(&mut self) -> Option<Result<Bytes, Status>> {
        loop {
            match &mut self.state {
                State::Header if self.pending.len() >= HEADER => {
                    let flag = self.pending[0];
                    let length = u32::from_be_bytes([
                        self.pending[1],
                        self.pending[2],
                        self.pending[3],
                        self.pending[4],
                    ]) as usize;
                    if flag != 1 {
                        self.state = State::Passing(length);
                        return Some(Ok(self.pending.split_to(HEADER).freeze()));
                    }
                    if length > self.limit {
                        self.state = State::Done;
                        return Some(Err(Status::resource_exhausted(format!(
                            "Received message larger than max ({length} vs. {})",
                            self.limit
                        ))));
                    }
                    if self.pending.len() < HEADER + length {
                        return None;
                    }
                    self.pending.advance(HEADER);
                    self.state = State::Queued(self.pending.split_to(length).freeze());
                    return None;
                }
                State::Passing(0) => self.state = State::Header,
                State::Passing(left) if !self.pending.is_empty() => {
                    let take = (*left).min(self.pending.len());
                    *left -= take;
                    return Some(Ok(self.pending.split_to(take).freeze()));
                }
                State::Inflating(decoder, out) => {
                    return match inflate_step(decoder, out, self.limit) {
                        Err(status) => {
                            self.state = State::Done;
                            self.permit = None;
                            Some(Err(status))
                        }
                        Ok(false) => None, // more to inflate: the caller yields first
                        Ok(true) => {
                            let mut message = std::mem::take(out);
                            self.state = State::Header;
                            self.permit = None;
                            // the plain message's header: flag 0 and the inflated length (<= u32::MAX)
                            let length = (message.len() - HEADER) as u32;
                            message[1..HEADER].copy_from_slice(&length.to_be_bytes());
                            Some(Ok(message.freeze()))
                        }
                    };
                }
                _ => return None,
            }
        }
    }

    /// The body ended with these bytes left over: a message cut short.
    fn cut_short(&mut self) -> Option<Result<Bytes, Status>> {
        self.state = State::Done;
        if self.pending.is_empty() {
            return None;
        }
        if self.pending[0] == 1 {
            // tonic would read the header as a compressed flag without an encoding (the header is gone)
            return Some(Err(Status::internal("Unexpected EOF decoding stream.")));
        }
        Some(Ok(self.pending.split().freeze())) // tonic reports it, as it does any
    }
}

type Polled = Poll<Option<Result<Frame<Bytes>, Status>>>;

/// Inflates up to [`STEP`] more bytes into `out` (after the [`HEADER`] bytes kept at its start for the plain
/// message's header): `Ok(true)` when the message has ended.
fn inflate_step(
    decoder: &mut Box<dyn Read + Send>,
    out: &mut BytesMut,
    limit: usize,
) -> Result<bool, Status> {
    let ceiling = HEADER + limit.min(u32::MAX as usize);
    let mut produced = 0;
    while produced < STEP {
        let start = out.len();
        // room for one byte past the ceiling, so that passing it shows
        let room = (STEP - produced).min(ceiling + 1 - start);
        out.resize(start + room, 0);
        let read = decoder.read(&mut out[start..]);
        let n = match read {
            Ok(n) => n,
            Err(err) => return Err(Status::internal(format!("Error decompressing: {err}"))),
        };
        out.truncate(start + n);
        if out.len() > ceiling {
            return Err(Status::resource_exhausted(
                "Decompressed message larger than max",
            ));
        }
        if n == 0 {
            return Ok(true);
        }
        produced += n;
    }
    Ok(false)
}

impl<B> Body for Inflating<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = self.get_mut();
        loop {
            if let Some(yielding) = this.yielding.as_mut() {
                if yielding.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.yielding = None;
            }
            if matches!(this.state, State::Done) {
                return Poll::Ready(None);
            }
            if let Some(outcome) = this.step() {
                return Poll::Ready(Some(outcome.map(Frame::data)));
            }
            if let State::Queued(message) = &mut this.state {
                let gate = this.gate.clone();
                let acquiring = this
                    .acquiring
                    .get_or_insert_with(|| Box::pin(gate.acquire_owned()));
                let Poll::Ready(acquired) = acquiring.as_mut().poll(cx) else {
                    return Poll::Pending;
                };
                this.acquiring = None;
                let Ok(permit) = acquired else {
                    this.state = State::Done; // the gate is never closed
                    return Poll::Ready(Some(Err(Status::internal("the core is stopping"))));
                };
                this.permit = Some(permit);
                let decoder = this.encoding.decoder(std::mem::take(message));
                this.state = State::Inflating(decoder, BytesMut::zeroed(HEADER));
                continue;
            }
            if matches!(this.state, State::Inflating(..)) {
                // a step inflated STEP bytes: let the core's other tasks run before the next
                this.yielding = Some(Box::pin(tokio::task::yield_now()));
                continue;
            }
            if this.inner_ended {
                return Poll::Ready(this.cut_short().map(|outcome| outcome.map(Frame::data)));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.inner_ended = true,
                Poll::Ready(Some(Err(err))) => {
                    this.state = State::Done;
                    return Poll::Ready(Some(Err(Status::from_error(err.into()))));
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.pending.extend_from_slice(&data),
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
            }
        }
    }
}

#[cfg(test)]
#[path = "inflate_tests.rs"]
mod tests;
