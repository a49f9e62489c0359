//! `ModelStreamInfer` forwarded to Python as raw frames. The Python side pulls: each `want` lets the core read
//! one more request frame from the client, so the stream's in-flight limit (applied in Python) still bounds
//! how much of the stream is read; responses go out in the order Python sends them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, Semaphore};
use tonic::codegen::tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codegen::BoxFuture;
use tonic::server::StreamingService;
use tonic::{Request, Response, Status, Streaming};

use crate::service::{Core, Work};

/// What goes out on a stream: response messages, then the end (an error status, or OK when dropped).
pub type Outbound = mpsc::UnboundedSender<Result<Bytes, Status>>;

/// One stream as the Python side holds it.
pub struct StreamLink {
    pub id: u64,
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
}

impl StreamingService<Bytes> for StreamHandler {
    type Response = Bytes;
    type ResponseStream = UnboundedReceiverStream<Result<Bytes, Status>>;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<Streaming<Bytes>>) -> Self::Future {
        let core = self.core.clone();
        Box::pin(async move {
            let id = core.stream_ids.next();
            let (outbound, responses) = mpsc::unbounded_channel();
            let want = Arc::new(Semaphore::new(0));
            core.queue.push(Work::StreamOpen(StreamLink {
                id,
                outbound,
                want: want.clone(),
            }));
            let mut inbound = request.into_inner();
            tokio::spawn(async move {
                // `want` is closed when Python is done with the stream: stop reading then
                while let Ok(permit) = want.acquire().await {
                    permit.forget();
                    let frame = inbound.message().await;
                    let last = !matches!(frame, Ok(Some(_)));
                    core.queue.push(Work::StreamFrame(Frame { id, frame }));
                    if last {
                        break;
                    }
                }
            });
            Ok(Response::new(UnboundedReceiverStream::new(responses)))
        })
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
