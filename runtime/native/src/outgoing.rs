//! The answers of unary calls a gRPC connection is sending, and when its peer last took a piece of one: a
//! connection whose peer takes none for the send timeout while answers wait is closed (crate::placed), and the
//! answers with it.
//!
//! HTTP/2 flow control lets a peer hold answers without stopping its TCP reads (crate::send_bound sees only
//! those): a client whose application stopped reading a call (its library stops granting window), or one that
//! opens with a zero window, is still a live connection that answers PINGs, and every answer it asked for stays
//! in the server. Each answer goes out in pieces of at most [`PIECE`] bytes, and hyper takes the next piece
//! of a body only once HTTP/2 has room for the one before, so a piece taken is the peer reading.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

/// The largest piece of an answer handed to HTTP/2 at once.
pub const PIECE: usize = 1 << 20;

struct State {
    epoch: Instant,
    /// Answers whose bodies have not ended.
    pending: AtomicUsize,
    /// Milliseconds from `epoch` to the last piece taken, or to the start of an answer when none was pending.
    moved_ms: AtomicU64,
}

/// One connection's answers (shared by its calls through tonic's connection info).
#[derive(Clone)]
pub struct Outgoing(Arc<State>);

impl Default for Outgoing {
    fn default() -> Self {
        Self(Arc::new(State {
            epoch: Instant::now(),
            pending: AtomicUsize::new(0),
            moved_ms: AtomicU64::new(0),
        }))
    }
}

impl Outgoing {
    fn moved(&self) {
        let now = self.0.epoch.elapsed().as_millis() as u64;
        self.0.moved_ms.fetch_max(now, Ordering::AcqRel);
    }

    /// `body`, counted among the answers being sent until it ends or is dropped, in pieces of at most PIECE.
    pub fn track<B>(&self, body: B) -> Tracked<B> {
        if self.0.pending.fetch_add(1, Ordering::AcqRel) == 0 {
            self.moved(); // the wait starts now, not at the connection's last answer
        }
        Tracked {
            inner: body,
            rest: None,
            outgoing: Some(self.clone()),
        }
    }

    /// While answers wait: since when the peer has taken none of them. None when none is being sent.
    pub fn waiting_since(&self) -> Option<Instant> {
        if self.0.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let moved = self.0.moved_ms.load(Ordering::Acquire);
        Some(self.0.epoch + Duration::from_millis(moved))
    }
}

/// An answer's body, counted by its connection's [`Outgoing`].
pub struct Tracked<B> {
    inner: B,
    /// What is left of a data frame larger than PIECE.
    rest: Option<Bytes>,
    outgoing: Option<Outgoing>,
}

impl<B> Tracked<B> {
    fn end(&mut self) {
        if let Some(outgoing) = self.outgoing.take() {
            outgoing.0.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The next piece of `data` (the rest kept for the next poll), noted as taken.
    fn piece(&mut self, mut data: Bytes) -> Frame<Bytes> {
        if data.len() > PIECE {
            self.rest = Some(data.split_off(PIECE));
        }
        if let Some(outgoing) = self.outgoing.as_ref() {
            outgoing.moved();
        }
        Frame::data(data)
    }
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        self.end();
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let me = self.get_mut();
        if let Some(rest) = me.rest.take() {
            return Poll::Ready(Some(Ok(me.piece(rest))));
        }
        match ready!(Pin::new(&mut me.inner).poll_frame(cx)) {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Poll::Ready(Some(Ok(me.piece(data)))),
                Err(frame) => Poll::Ready(Some(Ok(frame))), // trailers
            },
            other => {
                me.end();
                Poll::Ready(other)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.as_ref().map_or(0, |rest| rest.len() as u64);
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test(start_paused = true)]
    async fn a_large_answer_goes_in_pieces_each_noted_as_taken() {
        let outgoing = Outgoing::default();
        let answer = Bytes::from(vec![7u8; 2 * PIECE + 5]);
        let mut body = outgoing.track(Full::new(answer.clone()));
        let started = outgoing.waiting_since().expect("an answer is being sent");
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            assert!(data.len() <= PIECE);
            got.extend_from_slice(&data);
            if got.len() < answer.len() {
                assert_eq!(
                    outgoing.waiting_since().unwrap() - started,
                    Duration::from_secs(10) * (got.len() / PIECE - 1) as u32,
                    "each piece taken (one every 10 s) moves the wait on to when it was taken"
                );
            }
            tokio::time::advance(Duration::from_secs(10)).await;
        }
        assert_eq!(got, answer.to_vec());
        assert!(
            outgoing.waiting_since().is_none(),
            "ended, it is no longer counted"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_answer_is_no_longer_counted_and_a_new_one_starts_the_wait_afresh() {
        let outgoing = Outgoing::default();
        let body = outgoing.track(Full::new(Bytes::from_static(b"x")));
        tokio::time::advance(Duration::from_secs(100)).await;
        drop(body);
        assert!(outgoing.waiting_since().is_none());
        tokio::time::advance(Duration::from_secs(100)).await;
        let _body = outgoing.track(Full::new(Bytes::from_static(b"y")));
        assert_eq!(outgoing.waiting_since(), Some(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_answer_does_not_restart_the_wait_of_one_not_taken() {
        let outgoing = Outgoing::default();
        let _first = outgoing.track(Full::new(Bytes::from_static(b"x")));
        let started = Instant::now();
        tokio::time::advance(Duration::from_secs(30)).await;
        let _second = outgoing.track(Full::new(Bytes::from_static(b"y")));
        assert_eq!(outgoing.waiting_since(), Some(started));
    }
}
