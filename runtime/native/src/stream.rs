//! Streaming methods (`ModelStreamInfer`, health `Watch`) forwarded to Python as raw frames. The Python side
//! pulls: each `want` lets the core read one more request frame from the client, so the stream's in-flight
//! limit (applied in Python) still bounds how much of the stream is read; responses go out in the order Python
//! sends them. When the client goes away, Python gets a CANCELLED frame (a `Watch` has nothing else to read).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::codegen::tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codegen::tokio_stream::Stream;
use tonic::codegen::BoxFuture;
use tonic::server::StreamingService;
use tonic::{Request, Response, Status, Streaming};

use crate::service::{Core, Work};

/// What goes out on a stream: response messages, then the end (an error status, or OK when dropped).
pub type Outbound = mpsc::UnboundedSender<Result<Bytes, Status>>;

/// One stream as the Python side holds it.
pub struct StreamLink {
    pub id: u64,
    pub path: String,
    pub outbound: Outbound,
    pub want: Arc<Semaphore>,
}

/// One frame read from a stream: a request message, the end of the requests (`Ok(None)`), or a failure.
pub struct Frame {
    pub id: u64,
    pub frame: Result<Option<Bytes>, Status>,
}

#[derive(Default)]
pub struct StreamIds(AtomicU64);

impl StreamIds {
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }
}

pub struct StreamHandler {
    pub core: Arc<Core>,
    pub path: String,
}

/// The responses going out; dropping it (the stream is over, or the client went away) tells the reader task.
pub struct Responses {
    messages: UnboundedReceiverStream<Result<Bytes, Status>>,
    _gone: oneshot::Sender<()>,
}

impl Stream for Responses {
    type Item = Result<Bytes, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.messages).poll_next(cx)
    }
}

impl StreamingService<Bytes> for StreamHandler {
    type Response = Bytes;
    type ResponseStream = Responses;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<Streaming<Bytes>>) -> Self::Future {
        let core = self.core.clone();
        let path = std::mem::take(&mut self.path);
        Box::pin(async move {
            let id = core.stream_ids.next();
            let (outbound, messages) = mpsc::unbounded_channel();
            let (gone_tx, gone) = oneshot::channel();
            let want = Arc::new(Semaphore::new(0));
            let link = StreamLink {
                id,
                path,
                outbound,
                want: want.clone(),
            };
            core.queue.push(Work::StreamOpen(link));
            tokio::spawn(read_frames(core, id, request.into_inner(), want, gone));
            let messages = UnboundedReceiverStream::new(messages);
            Ok(Response::new(Responses {
                messages,
                _gone: gone_tx,
            }))
        })
    }
}

/// Reads a frame per permit until the requests end; says when the client is gone; stops when `want` closes.
async fn read_frames(
    core: Arc<Core>,
    id: u64,
    mut inbound: Streaming<Bytes>,
    want: Arc<Semaphore>,
    mut gone: oneshot::Receiver<()>,
) {
    let mut reading = true;
    loop {
        tokio::select! {
            _ = &mut gone => {
                let frame = Err(Status::cancelled("the client went away"));
                core.queue.push(Work::StreamFrame(Frame { id, frame }));
                break;
            }
            permit = want.acquire(), if reading => {
                let Ok(permit) = permit else { break };
                permit.forget();
                let frame = inbound.message().await;
                reading = matches!(frame, Ok(Some(_)));
                core.queue.push(Work::StreamFrame(Frame { id, frame }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_are_distinct_and_nonzero() {
        let ids = StreamIds::default();
        assert_eq!((ids.next(), ids.next()), (1, 2));
    }
}
