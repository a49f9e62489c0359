//! The answers a gRPC connection is sending, and when its peer last took a piece of one: a connection whose
//! peer takes none for the send timeout while pieces wait is closed (crate::placed), and the answers with it.
//!
//! HTTP/2 flow control lets a peer hold answers without stopping its TCP reads (crate::send_bound sees only
//! those): a client whose application stopped reading a call (its library stops granting window), or one that
//! opens with a zero window, is still a live connection that answers PINGs, and every answer it asked for stays
//! in the server. Answers go out in pieces of at most [`PIECE`] bytes, and hyper asks a body for its next piece
//! only once HTTP/2 has room for the one before: a piece handed out waits until the body is asked again, and
//! that ask is the peer taking it. A stream with nothing to send (its body not ready) waits for nothing.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

/// The largest piece of an answer handed to HTTP/2 at once.
pub const PIECE: usize = 1 << 20;

struct State {
    epoch: Instant,
    /// Bodies with a piece handed out and not yet taken.
    waiting: AtomicUsize,
    /// Milliseconds from `epoch` to the last piece taken, or to a piece handed out when none was waiting.
    moved_ms: AtomicU64,
    /// The connection's reader, woken when a piece starts to wait (it then sets the send timeout's timer).
    watcher: Mutex<Option<Waker>>,
}

/// One connection's answers (shared by its calls through tonic's connection info).
#[derive(Clone)]
pub struct Outgoing(Arc<State>);

impl Default for Outgoing {
    fn default() -> Self {
        Self(Arc::new(State {
            epoch: Instant::now(),
            waiting: AtomicUsize::new(0),
            moved_ms: AtomicU64::new(0),
            watcher: Mutex::new(None),
        }))
    }
}

impl Outgoing {
    fn moved(&self) {
        let now = self.0.epoch.elapsed().as_millis() as u64;
        self.0.moved_ms.fetch_max(now, Ordering::AcqRel);
    }

    fn handed(&self) {
        if self.0.waiting.fetch_add(1, Ordering::AcqRel) == 0 {
            self.moved(); // the wait starts now, not at the connection's last answer
                          // the reader may be parked on a quiet socket: it sets its timer now, not at the next bytes in
            if let Some(watcher) = self.watcher().take() {
                watcher.wake();
            }
        }
    }

    fn watcher(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        self.0.watcher.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// While none waits: since when the peer has taken none of the pieces that wait (None: none waits), and
    /// `cx` is woken when one starts to.
    pub fn poll_waiting_since(&self, cx: &mut Context<'_>) -> Option<Instant> {
        if let Some(since) = self.waiting_since() {
            return Some(since);
        }
        {
            let mut watcher = self.watcher();
            if !watcher.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *watcher = Some(cx.waker().clone());
            }
        }
        self.waiting_since() // one handed out meanwhile, before the waker was there to be woken
    }

    fn taken(&self) {
        self.moved();
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }

    /// `body` (a unary answer, or a stream's), its pieces of at most PIECE counted while they wait.
    pub fn track<B>(&self, body: B) -> Tracked<B> {
        Tracked {
            inner: body,
            rest: None,
            outgoing: self.clone(),
            handed: false,
        }
    }

    /// While pieces wait: since when the peer has taken none. None when none waits.
    pub fn waiting_since(&self) -> Option<Instant> {
        if self.0.waiting.load(Ordering::Acquire) == 0 {
            return None;
        }
        let moved = self.0.moved_ms.load(Ordering::Acquire);
        Some(self.0.epoch + Duration::from_millis(moved))
    }
}

/// An answer's body, its pieces counted by its connection's [`Outgoing`].
pub struct Tracked<B> {
    inner: B,
    /// What is left of a data frame larger than PIECE.
    rest: Option<Bytes>,
    outgoing: Outgoing,
    /// A piece was handed out and the body not asked again since.
    handed: bool,
}

impl<B> Tracked<B> {
    /// The next piece of `data` (the rest kept for the next ask), counted as waiting until then.
    fn hand(&mut self, mut data: Bytes) -> Frame<Bytes> {
        if data.len() > PIECE {
            self.rest = Some(data.split_off(PIECE));
        }
        self.handed = true;
        self.outgoing.handed();
        Frame::data(data)
    }
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        if self.handed {
            self.outgoing.0.waiting.fetch_sub(1, Ordering::AcqRel);
        }
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
        if std::mem::take(&mut me.handed) {
            me.outgoing.taken(); // asked again: the piece before has gone to HTTP/2
        }
        if let Some(rest) = me.rest.take() {
            return Poll::Ready(Some(Ok(me.hand(rest))));
        }
        match ready!(Pin::new(&mut me.inner).poll_frame(cx)) {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Poll::Ready(Some(Ok(me.hand(data)))),
                Err(frame) => Poll::Ready(Some(Ok(frame))), // trailers
            },
            other => Poll::Ready(other),
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
    use http_body_util::{BodyExt, Full, StreamBody};
    use tokio::sync::mpsc;

    #[tokio::test(start_paused = true)]
    async fn a_large_answer_goes_in_pieces_each_waiting_until_the_next_is_asked_for() {
        let outgoing = Outgoing::default();
        let answer = Bytes::from(vec![7u8; 2 * PIECE + 5]);
        let mut body = outgoing.track(Full::new(answer.clone()));
        assert!(outgoing.waiting_since().is_none(), "nothing handed out yet");
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            assert!(data.len() <= PIECE);
            got.extend_from_slice(&data);
            assert_eq!(
                outgoing.waiting_since(),
                Some(Instant::now()),
                "handed out: waits from now"
            );
            tokio::time::advance(Duration::from_secs(10)).await;
            assert_eq!(
                outgoing.waiting_since(),
                Some(Instant::now() - Duration::from_secs(10))
            );
        }
        assert_eq!(got, answer.to_vec());
        assert!(outgoing.waiting_since().is_none(), "all taken");
    }

    #[tokio::test(start_paused = true)]
    async fn a_piece_starting_to_wait_wakes_the_watcher() {
        let outgoing = Outgoing::default();
        let watched = outgoing.clone();
        let watcher = tokio::spawn(std::future::poll_fn(move |cx| {
            match watched.poll_waiting_since(cx) {
                Some(since) => Poll::Ready(since),
                None => Poll::Pending,
            }
        }));
        tokio::task::yield_now().await;
        assert!(!watcher.is_finished());
        tokio::time::advance(Duration::from_secs(5)).await;
        let mut body = outgoing.track(Full::new(Bytes::from_static(b"x")));
        body.frame().await.unwrap().unwrap();
        assert_eq!(
            watcher.await.unwrap(),
            Instant::now(),
            "woken, it sees the wait"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_answer_no_longer_waits() {
        let outgoing = Outgoing::default();
        let mut body = outgoing.track(Full::new(Bytes::from_static(b"x")));
        body.frame().await.unwrap().unwrap();
        assert!(outgoing.waiting_since().is_some());
        drop(body);
        assert!(outgoing.waiting_since().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_answer_does_not_restart_the_wait_of_one_not_taken() {
        let outgoing = Outgoing::default();
        let mut first = outgoing.track(Full::new(Bytes::from_static(b"x")));
        first.frame().await.unwrap().unwrap();
        let started = Instant::now();
        tokio::time::advance(Duration::from_secs(30)).await;
        let mut second = outgoing.track(Full::new(Bytes::from_static(b"y")));
        second.frame().await.unwrap().unwrap();
        assert_eq!(outgoing.waiting_since(), Some(started));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_with_nothing_to_send_waits_for_nothing() {
        let outgoing = Outgoing::default();
        let (messages, received) =
            mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(4);
        let mut body = outgoing.track(StreamBody::new(
            tokio_stream::wrappers::ReceiverStream::new(received),
        ));
        messages
            .send(Ok(Frame::data(Bytes::from_static(b"one"))))
            .await
            .unwrap();
        body.frame().await.unwrap().unwrap();
        assert!(outgoing.waiting_since().is_some(), "its message handed out");
        let asked = tokio::spawn(async move {
            let next = body.frame().await; // taken: asked again, and nothing to send for an hour
            (body, next)
        });
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(
            outgoing.waiting_since().is_none(),
            "idle, not waiting on the peer"
        );
        messages
            .send(Ok(Frame::data(Bytes::from_static(b"two"))))
            .await
            .unwrap();
        let (_body, next) = asked.await.unwrap();
        assert_eq!(next.unwrap().unwrap().into_data().unwrap(), "two");
        assert_eq!(outgoing.waiting_since(), Some(Instant::now()));
    }
}
