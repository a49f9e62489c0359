//! The HTTP port's pace for request bodies: a body must arrive within a grace period of its headers plus one
//! second for every [`MIN_RATE`] bytes already received (Apache's mod_reqtimeout `body=20,MinRate=500`, with our
//! grace), or reading it fails with [`TooSlow`] and the request is answered 408 and its connection closed.
//!
//! hyper times the headers (30 s) but not the body: without this, a request that declares a body and sends none,
//! or drips a byte now and then, held its connection, and for a forwarded request a Python handler, forever.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Bytes per second a body's deadline moves out by, past its grace.
pub const MIN_RATE: u64 = 500;

/// A body that did not keep its pace.
#[derive(Debug)]
pub struct TooSlow {
    pub received: u64,
    pub after: Duration,
}

impl fmt::Display for TooSlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the request body did not arrive in time ({} bytes in {:.1} s; a body must come within the grace \
             period of its headers, plus 1 s per {MIN_RATE} bytes received)",
            self.received,
            self.after.as_secs_f64()
        )
    }
}

impl Error for TooSlow {}

/// Whether `error`, or an error it was caused by, is a [`TooSlow`].
pub fn too_slow<'e>(error: &'e (dyn Error + 'static)) -> Option<&'e TooSlow> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(slow) = e.downcast_ref::<TooSlow>() {
            return Some(slow);
        }
        cause = e.source();
    }
    None
}

/// When a body that started at `start` and has `received` bytes so far must have come in full.
pub fn deadline(start: Instant, grace: Duration, received: u64) -> Instant {
    let earned = Duration::from_secs_f64(received as f64 / MIN_RATE as f64);
    let far = Duration::from_secs(100 * 365 * 86_400); // as good as never, and no overflow
    start
        .checked_add(grace.saturating_add(earned).min(far))
        .unwrap_or(start)
}

/// `inner`, failing with [`TooSlow`] once its deadline passes before its end.
pub struct Paced<B> {
    inner: B,
    start: Instant,
    grace: Duration,
    received: u64,
    timer: Pin<Box<Sleep>>,
}

impl<B> Paced<B> {
    pub fn new(inner: B, grace: Duration) -> Self {
        let start = Instant::now();
        Self {
            inner,
            start,
            grace,
            received: 0,
            timer: Box::pin(tokio::time::sleep_until(deadline(start, grace, 0))),
        }
    }
}

impl<B> Body for Paced<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let me = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut me.inner).poll_frame(cx) {
            if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
                me.received += data.map_or(0, |d| d.len() as u64);
                let next = deadline(me.start, me.grace, me.received);
                me.timer.as_mut().reset(next);
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if me.timer.as_mut().poll(cx).is_ready() {
            let slow = TooSlow {
                received: me.received,
                after: me.start.elapsed(),
            };
            return Poll::Ready(Some(Err(Box::new(slow))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;
    use tokio_stream::wrappers::ReceiverStream;

    type Chunks = StreamBody<ReceiverStream<Result<Frame<Bytes>, Infallible>>>;

    fn body() -> (
        tokio::sync::mpsc::Sender<Result<Frame<Bytes>, Infallible>>,
        Chunks,
    ) {
        let (sender, receiver) = tokio::sync::mpsc::channel(8);
        (sender, StreamBody::new(ReceiverStream::new(receiver)))
    }

    #[test]
    fn the_deadline_moves_out_a_second_per_min_rate_bytes() {
        let start = Instant::now();
        let grace = Duration::from_secs(30);
        assert_eq!(deadline(start, grace, 0), start + grace);
        assert_eq!(
            deadline(start, grace, MIN_RATE * 4),
            start + grace + Duration::from_secs(4)
        );
        assert!(deadline(start, Duration::MAX, u64::MAX) > start + grace); // no overflow
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_does_not_come_is_too_slow_at_the_grace() {
        let (_sender, chunks) = body();
        let mut paced = Paced::new(chunks, Duration::from_secs(2));
        let start = Instant::now();
        let error = paced.frame().await.unwrap().unwrap_err();
        let slow = too_slow(error.as_ref()).expect("TooSlow");
        assert_eq!(slow.received, 0);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_drip_is_too_slow_and_a_body_at_pace_is_read_whole() {
        let (sender, chunks) = body();
        let mut paced = Paced::new(chunks, Duration::from_secs(2));
        let drip = tokio::spawn(async move {
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if sender
                    .send(Ok(Frame::data(Bytes::from_static(b"x"))))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        let mut read = 0;
        let error = loop {
            match paced.frame().await.unwrap() {
                Ok(_) => read += 1,
                Err(error) => break error,
            }
        };
        assert!(too_slow(error.as_ref()).is_some());
        assert!(read <= 4, "{read} bytes"); // 2 s and 2 ms per byte
        drop(paced);
        drip.await.unwrap();

        let (sender, chunks) = body();
        let paced = Paced::new(chunks, Duration::from_secs(2));
        tokio::spawn(async move {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(500)).await; // 10 s in all, 500 bytes per step
                let chunk = Bytes::from(vec![0u8; MIN_RATE as usize]);
                sender.send(Ok(Frame::data(chunk))).await.unwrap();
            }
        });
        let whole = paced.collect().await.expect("read at pace").to_bytes();
        assert_eq!(whole.len(), 20 * MIN_RATE as usize);
    }
}
