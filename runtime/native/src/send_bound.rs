//! A connection whose peer stops taking its bytes is closed once it has taken none for a while: its writes fail
//! with `TimedOut` when one has waited that long (the send timeout; nginx's `send_timeout` is the same rule).
//!
//! Without it, a peer that sends requests and never reads the answers holds them in the server for as long as its
//! TCP connection lives (hyper has no write timeout; gRPC's keepalive pings come every two hours by default): the
//! answers of every call it has open (up to `max_concurrent_streams` per gRPC connection), each as large as the
//! model makes it, on every connection it holds.
//!
//! A peer that reads slowly is not touched: a write that moves bytes starts the wait afresh, and so does, when the
//! wait is up, a send queue the peer has taken bytes from meanwhile (the kernel wakes a waiting writer only once
//! much of a full send buffer has drained, so a peer reading a few KiB a second would otherwise be cut off while
//! reading).

use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A connection that can say how many bytes written to it its peer has not yet taken.
pub trait Unsent {
    /// The bytes in the send queue (not sent, or not acknowledged); None when it cannot say.
    fn unsent(&self) -> Option<usize>;
}

impl Unsent for tokio::net::TcpStream {
    fn unsent(&self) -> Option<usize> {
        let mut queued: libc::c_int = 0;
        // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int through the pointer, which outlives the call; the
        // descriptor is the stream's own, open while `self` is.
        let done = unsafe { libc::ioctl(self.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
        (done == 0).then_some(queued.max(0) as usize)
    }
}

/// `io` whose writes fail once one has waited `timeout` for the peer to take bytes.
pub struct SendBound<T> {
    io: T,
    timeout: Duration,
    /// Armed while a write waits (the first wait since bytes last went out); disarmed when bytes go.
    waiting: Option<Waiting>,
}

struct Waiting {
    until: Pin<Box<Sleep>>,
    /// The send queue when the wait began (or was last renewed).
    unsent: Option<usize>,
}

impl<T> SendBound<T> {
    pub fn new(io: T, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            waiting: None,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// What became of a write (or flush, or shutdown): progress disarms the wait; waiting arms it, and fails the
    /// write once it has lasted `timeout` with nothing taken from the send queue.
    fn bounded<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>>
    where
        T: Unsent,
    {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let timeout = self.timeout;
        let waiting = self.waiting.get_or_insert_with(|| Waiting {
            until: Box::pin(tokio::time::sleep_until(Instant::now() + timeout)),
            unsent: self.io.unsent(),
        });
        while waiting.until.as_mut().poll(cx).is_ready() {
            let unsent = self.io.unsent();
            match (waiting.unsent, unsent) {
                (Some(before), Some(now)) if now < before => {
                    // the peer is reading, slower than the kernel wakes writers: wait afresh
                    waiting.unsent = unsent;
                    waiting.until.as_mut().reset(Instant::now() + timeout);
                }
                _ => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the peer took none of the answer's bytes for {:?}: the connection is closed",
                            timeout
                        ),
                    )))
                }
            }
        }
        Poll::Pending
    }
}

impl<T: AsyncWrite + Unsent + Unpin> AsyncWrite for SendBound<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let polled = Pin::new(&mut me.io).poll_write(cx, buf);
        me.bounded(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let polled = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        me.bounded(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let polled = Pin::new(&mut me.io).poll_flush(cx);
        me.bounded(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let polled = Pin::new(&mut me.io).poll_shutdown(cx);
        me.bounded(cx, polled)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for SendBound<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for SendBound<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const TIMEOUT: Duration = Duration::from_secs(60);

    impl Unsent for tokio::io::DuplexStream {
        fn unsent(&self) -> Option<usize> {
            None
        }
    }

    /// A connection whose peer's buffer holds 16 bytes: a write of more waits for the peer to read.
    fn pair() -> (SendBound<tokio::io::DuplexStream>, tokio::io::DuplexStream) {
        let (ours, peer) = tokio::io::duplex(16);
        (SendBound::new(ours, TIMEOUT), peer)
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_takes_nothing_fails_the_write_after_the_timeout() {
        let (mut ours, _peer) = pair();
        let started = Instant::now();
        let error = ours.write_all(&[7; 64]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(
            started.elapsed(),
            TIMEOUT,
            "exactly the timeout after the write began to wait"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_kept_each_read_starting_the_wait_afresh() {
        let (mut ours, mut peer) = pair();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = [0u8; 16];
            while got.len() < 64 {
                tokio::time::sleep(TIMEOUT - Duration::from_secs(1)).await;
                let n = peer.read(&mut chunk).await.unwrap();
                got.extend_from_slice(&chunk[..n]);
            }
            got
        });
        let started = Instant::now();
        ours.write_all(&[7; 64]).await.unwrap();
        ours.flush().await.unwrap();
        assert!(
            started.elapsed() > TIMEOUT * 2,
            "it waited longer than one timeout in all"
        );
        assert_eq!(reader.await.unwrap(), vec![7; 64]);
    }

    /// A connection the peer never lets a write through, whose send queue the test sets.
    struct Stuck(Arc<AtomicUsize>);

    impl AsyncWrite for Stuck {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Pending
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl Unsent for Stuck {
        fn unsent(&self) -> Option<usize> {
            Some(self.0.load(Ordering::SeqCst))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_send_queue_the_peer_drains_renews_the_wait_until_it_stops() {
        let queue = Arc::new(AtomicUsize::new(1000));
        let mut ours = SendBound::new(Stuck(queue.clone()), TIMEOUT);
        let drained = queue.clone();
        tokio::spawn(async move {
            // taken at 30, 80 and 130 s: the checks at 60, 120 and 180 s each find less queued than the one before
            tokio::time::sleep(TIMEOUT / 2).await;
            for _ in 0..3 {
                drained.fetch_sub(10, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(50)).await;
            }
        });
        let started = Instant::now();
        let error = ours.write_all(&[0; 8]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(
            started.elapsed(),
            TIMEOUT * 4,
            "the check at 240 s found nothing taken since 180 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn writes_that_go_at_once_never_arm_it() {
        let (mut ours, mut peer) = pair();
        for _ in 0..10 {
            ours.write_all(&[1; 16]).await.unwrap();
            let mut chunk = [0u8; 16];
            peer.read_exact(&mut chunk).await.unwrap();
            tokio::time::advance(TIMEOUT * 2).await;
        }
        assert!(ours.waiting.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn reads_pass_through() {
        let (mut ours, mut peer) = pair();
        peer.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        ours.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
    }
}
