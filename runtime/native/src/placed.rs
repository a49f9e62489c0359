//! A gRPC connection that holds a place among those its port keeps open (crate::fair_share; its task holds the
//! place and gives way, crate::driven): it notes when bytes arrive on it (how quiet it is), and its reads fail when
//! answers wait and the peer has taken none of them for the send timeout (crate::outgoing), so the server drops it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::busy::Busy;
use crate::fair_share::Heard;
use crate::outgoing::Outgoing;

/// `io`, its reads noted for its place and failing once its answers stall.
pub struct Placed<T> {
    io: T,
    heard: Heard,
    outgoing: Outgoing,
    send_timeout: Duration,
    /// Set to the send timeout's deadline while answers wait; when it passes, checked afresh.
    stalled: Option<Pin<Box<Sleep>>>,
}

/// A placed connection's info for the calls on it: the inner connection's, what it is answering, and its answers'
/// pieces waiting to be sent.
#[derive(Clone)]
pub struct PlacedInfo<I> {
    pub inner: I,
    pub busy: Busy,
    pub outgoing: Outgoing,
}

impl<T> Placed<T> {
    /// `heard`: its place's; `send_timeout`: how long answers may wait with none of them taken.
    pub fn new(io: T, heard: Heard, send_timeout: Duration) -> Self {
        Self {
            io,
            heard,
            outgoing: Outgoing::default(),
            send_timeout,
            stalled: None,
        }
    }

    /// Where its answers' pieces are counted while they wait.
    pub fn outgoing(&self) -> &Outgoing {
        &self.outgoing
    }

    /// Whether answers have waited the send timeout with none taken (the timer set to wake it when they would).
    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            let Some(since) = self.outgoing.poll_waiting_since(cx) else {
                return false;
            };
            let deadline = since + self.send_timeout;
            if Instant::now() >= deadline {
                return true;
            }
            // the deadline only moves later: a timer set for an earlier one is set afresh once it has passed
            match self.stalled.as_mut() {
                Some(timer) if timer.is_elapsed() => timer.as_mut().reset(deadline),
                Some(_) => {}
                None => self.stalled = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            let timer = self.stalled.as_mut().expect("set above");
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.io
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Placed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.poll_stalled(cx) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the peer took none of the answers waiting for it for {:?}",
                    me.send_timeout
                ),
            )));
        }
        read_noting(&mut me.io, &me.heard, cx, buf)
    }
}

/// A read of `io`, noted in `heard` when bytes came.
fn read_noting<T: AsyncRead + Unpin>(
    io: &mut T,
    heard: &Heard,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    let before = buf.filled().len();
    let polled = Pin::new(io).poll_read(cx, buf);
    if buf.filled().len() > before {
        heard.now();
    }
    polled
}

/// `io` whose reads are noted for a place held elsewhere (an HTTP connection's, which its task holds: it gives way
/// gracefully, crate::driven).
pub struct Noted<T> {
    io: T,
    heard: Heard,
}

impl<T> Noted<T> {
    pub fn new(io: T, heard: Heard) -> Self {
        Self { io, heard }
    }

    pub fn get_ref(&self) -> &T {
        &self.io
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Noted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        read_noting(&mut me.io, &me.heard, cx, buf)
    }
}

/// For a connection wrapper whose field `io` is the connection: writes go straight to it.
macro_rules! writes_through {
    ($wrapper:ident) => {
        impl<T: ::tokio::io::AsyncWrite + Unpin> ::tokio::io::AsyncWrite for $wrapper<T> {
            fn poll_write(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                bufs: &[::std::io::IoSlice<'_>],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }

            fn poll_flush(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_flush(cx)
            }

            fn poll_shutdown(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
            }
        }
    };
}
pub(crate) use writes_through;

writes_through!(Placed);
writes_through!(Noted);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fair_share::FairShare;
    use std::net::IpAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_are_noted_for_the_place() {
        let places = FairShare::new(2);
        let mut first = places.admit(Some(IpAddr::from([10, 0, 0, 1]))).unwrap();
        let (near, mut far) = tokio::io::duplex(64);
        let mut placed = Placed::new(near, first.hearing(), Duration::from_secs(3600));
        let _second = places.admit(Some(IpAddr::from([10, 0, 0, 1]))).unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        far.write_all(b"abc").await.unwrap();
        let mut read = [0u8; 3];
        placed.read_exact(&mut read).await.unwrap();
        assert_eq!(&read, b"abc");
        // heard since the second was taken: the second is the quietest, and gives way to another address
        let _newcomer = places.admit(Some(IpAddr::from([10, 0, 0, 2]))).unwrap();
        let noop = &mut Context::from_waker(std::task::Waker::noop());
        assert!(!first.poll_given_way(noop));
    }

    #[tokio::test(start_paused = true)]
    async fn answers_the_peer_takes_none_of_close_it_after_the_send_timeout() {
        use crate::outgoing::PIECE;
        use http_body_util::{BodyExt, Full};

        let timeout = Duration::from_secs(60);
        let places = FairShare::new(2);
        let place = places.admit(Some(IpAddr::from([10, 0, 0, 1]))).unwrap();
        let (near, mut far) = tokio::io::duplex(64);
        let mut placed = Placed::new(near, place.hearing(), timeout);
        let outgoing = placed.outgoing().clone();
        let idle = tokio::spawn(async move {
            let mut byte = [0u8; 1];
            let read = placed.read(&mut byte).await;
            (placed, read)
        });
        tokio::time::sleep(timeout * 2).await;
        assert!(!idle.is_finished(), "quiet with nothing to send: kept");
        far.write_all(b"x").await.unwrap();
        let (mut placed, read) = idle.await.unwrap();
        assert_eq!(read.unwrap(), 1);
        let mut answer = outgoing.track(Full::new(bytes::Bytes::from(vec![0u8; 3 * PIECE])));
        let reading = tokio::spawn(async move {
            let mut more = [0u8; 1];
            placed.read(&mut more).await // parked: no bytes come
        });
        tokio::task::yield_now().await;
        answer.frame().await.unwrap().unwrap(); // its first piece handed to HTTP/2, which has no room for it
        let began = Instant::now();
        // 50 s later the peer takes it (hyper asks for the next piece, which waits in turn)...
        tokio::time::sleep(Duration::from_secs(50)).await;
        answer.frame().await.unwrap().unwrap();
        // ...and then nothing: the reads fail one send timeout after that
        let failed = reading.await.unwrap().unwrap_err();
        assert_eq!(failed.kind(), io::ErrorKind::TimedOut);
        assert_eq!(began.elapsed(), Duration::from_secs(50) + timeout);
    }
}
