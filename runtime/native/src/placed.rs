//! A connection that holds a place among those its port keeps open (crate::fair_share): it notes when bytes
//! arrive on it (how quiet it is), and once told to give way its reads fail, so the server drops it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use crate::fair_share::{Heard, Place};

/// `io` holding `place` until it is dropped (the connection is closed).
pub struct Placed<T> {
    io: T,
    place: Place,
}

impl<T> Placed<T> {
    pub fn new(io: T, place: Place) -> Self {
        Self { io, place }
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
        if me.place.poll_given_way(cx) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the port's connections are all taken, and this one gave way to one from another address",
            )));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut me.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.place.heard();
        }
        polled
    }
}

/// `io` whose reads are noted for a place held elsewhere (an HTTP connection's, which its task holds: it gives way
/// gracefully, crate::http_conn).
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
        let before = buf.filled().len();
        let polled = Pin::new(&mut me.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.heard.now();
        }
        polled
    }
}

/// For a connection wrapper whose field `io` is the connection: writes go straight to it, and tonic's connection
/// info is its.
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

        impl<T: ::tonic::transport::server::Connected> ::tonic::transport::server::Connected
            for $wrapper<T>
        {
            type ConnectInfo = T::ConnectInfo;

            fn connect_info(&self) -> Self::ConnectInfo {
                self.io.connect_info()
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
    async fn reads_pass_until_the_connection_is_told_to_give_way() {
        let places = FairShare::new(2);
        let first = places.admit(Some(IpAddr::from([10, 0, 0, 1]))).unwrap();
        let (near, mut far) = tokio::io::duplex(64);
        let mut placed = Placed::new(near, first);
        far.write_all(b"abc").await.unwrap();
        let mut read = [0u8; 3];
        placed.read_exact(&mut read).await.unwrap();
        assert_eq!(&read, b"abc");
        let _second = places.admit(Some(IpAddr::from([10, 0, 0, 1]))).unwrap(); // heard since: not the quietest
        let waiting = tokio::spawn(async move {
            let mut more = [0u8; 1];
            placed.read(&mut more).await
        });
        tokio::task::yield_now().await;
        let _newcomer = places.admit(Some(IpAddr::from([10, 0, 0, 2]))).unwrap();
        let failed = waiting.await.unwrap().unwrap_err(); // woken, not left waiting for bytes
        assert_eq!(failed.kind(), io::ErrorKind::ConnectionAborted);
        assert_eq!(places.taken(), 2);
    }
}
