//! The gRPC port's connection limits: a connection must open HTTP/2 (the client's connection preface and its first
//! SETTINGS frame) within a deadline, as grpc core's server handshake timeout asks of it (Triton's: 120 s), or it
//! is closed; and, through hyper, a connection that stops answering keepalive PINGs is closed (Triton's
//! `--grpc-keepalive-time` and `--grpc-keepalive-timeout`); and a connection carries a bounded number of calls at
//! once, and the port a bounded number of connections.
//!
//! Without the deadline, a peer that connects and sends nothing (or a few bytes, slowly) holds a descriptor and a
//! connection's buffers for as long as it likes: hyper waits for the preface without a timer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Sleep;

/// The client's connection preface (RFC 9113 3.4), then the 9-byte header of its first frame (SETTINGS).
const PREFACE: usize = 24;
const HEAD: usize = PREFACE + 9;

/// How the gRPC port treats its connections.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnectionLimits {
    /// From accept to the end of the client's first SETTINGS frame.
    pub handshake: Duration,
    /// A PING is sent after this long without a frame from the client (idle connections included).
    pub keepalive_time: Duration,
    /// A PING not acknowledged this long after it was sent closes the connection.
    pub keepalive_timeout: Duration,
    /// Calls open at once on one connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS): gRPC clients queue the
    /// others; a stream past it is refused (REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// Connections open at once: past it, one is closed (crate::fair_share says which: the newcomer, or the
    /// quietest of an address holding more than its share). A connection keeps what its busiest moment took
    /// (~0.7 KiB per call it had open at once, up to `max_concurrent_streams`), so this bounds what connections
    /// alone can hold.
    pub max_connections: usize,
    /// A write that waits this long for the peer to take bytes closes the connection (crate::send_bound).
    pub send_timeout: Duration,
    /// A connection about this old (+-10%, so that connections opened together do not go together) goes: a
    /// GOAWAY, its calls answered, its streams going on for `max_age_grace` (crate::driven), so a client's next
    /// calls go on a new connection, which a Service may send to another replica (grpc core's
    /// GRPC_ARG_MAX_CONNECTION_AGE_MS). None: never.
    pub max_age: Option<Duration>,
    /// How long the streams of a connection that reached `max_age` go on before they end (UNAVAILABLE, once what
    /// they read is answered; grpc core's GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS). None: until their clients end
    /// them.
    pub max_age_grace: Option<Duration>,
}

/// The bytes of the handshake still to come, given the first `head` bytes received (at most `HEAD`).
fn handshake_left(head: &[u8]) -> usize {
    if head.len() < HEAD {
        return HEAD - head.len();
    }
    let length = u32::from_be_bytes([0, head[PREFACE], head[PREFACE + 1], head[PREFACE + 2]]);
    length as usize
}

/// A connection that fails its reads with `TimedOut` once its deadline passes before the handshake's bytes have
/// all arrived; after them it is the connection itself.
pub struct Deadlined<T> {
    io: T,
    deadline: Option<Pin<Box<Sleep>>>,
    head: Vec<u8>,
    /// Bytes of the first frame's payload still to come, once `head` is whole.
    payload_left: usize,
}

impl<T> Deadlined<T> {
    pub fn new(io: T, within: Duration) -> Self {
        Self {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
            head: Vec::with_capacity(HEAD),
            payload_left: 0,
        }
    }

    /// Counts `read` (bytes just received) against the handshake; true once it is complete.
    fn received(&mut self, mut read: &[u8]) -> bool {
        if self.head.len() < HEAD {
            let take = read.len().min(HEAD - self.head.len());
            self.head.extend_from_slice(&read[..take]);
            read = &read[take..];
            if self.head.len() < HEAD {
                return false;
            }
            self.payload_left = handshake_left(&self.head);
        }
        self.payload_left = self.payload_left.saturating_sub(read.len());
        self.payload_left == 0
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Deadlined<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let Some(deadline) = me.deadline.as_mut() else {
            return Pin::new(&mut me.io).poll_read(cx, buf);
        };
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no HTTP/2 connection preface and SETTINGS within the handshake timeout",
            )));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut me.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let filled = buf.filled();
            let read = &filled[before..];
            if me.received(read) {
                me.deadline = None;
                me.head = Vec::new();
            }
        }
        polled
    }
}

crate::placed::writes_through!(Deadlined);

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
