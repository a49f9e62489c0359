//! Streaming methods (`ModelStreamInfer`, health `Watch`) forwarded to Python as raw frames. The Python side
//! pulls: each `want` lets the core read one more request frame from the client, so the stream's in-flight
//! limit (applied in Python) still bounds how much of the stream is read; responses go out in the order Python
//! sends them. When the client goes away, Python gets a CANCELLED frame (a `Watch` has nothing else to read).
//!
//! Responses go out through a bounded channel ([`WINDOW`] messages) that HTTP/2 flow control drains: when the
//! client stops reading, `Outbound::offer` answers [`Offer::Full`] and Python waits for a writable notice
//! (sent once the channel drains a message), so a producer waits instead of queueing without bound.
//!
//! When its connection gives way (crate::driven), a stream reads no further request and ends UNAVAILABLE once the
//! ones it read are answered (`StreamCall.answered`, crate::busy::StreamRequests); a health `Watch`, at once. So
//! does one told to give way to a stream from another address (crate::budget), ending RESOURCE_EXHAUSTED; its place
//! goes to the newcomer at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::codegen::tokio_stream::Stream;
use tonic::codegen::BoxFuture;
use tonic::server::StreamingService;
use tonic::{Request, Response, Status, Streaming};

use crate::budget::OpenStream;
use crate::busy::{Busy, Going, Holding, StreamRequests};
use crate::fair_share::Heard;
use crate::service::{as_grpcio_answers, Core, Work, AGED, GAVE_WAY, MODEL_STREAM_INFER};

type Ending = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How many response messages of one stream wait in the core for HTTP/2 to take them.
pub const WINDOW: usize = 16;

/// What became of a message offered to a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    Sent = 0,
    /// The window is full: offer it again after the stream's writable notice.
    Full = 1,
    /// The stream has ended (the client went away).
    Closed = 2,
}

/// What goes out on a stream: response messages, then the end (an error status, or OK when dropped).
pub struct Outbound {
    messages: mpsc::Sender<Bytes>,
    end: oneshot::Sender<Status>,
    blocked: Arc<AtomicBool>,
}

impl Outbound {
    /// Queues one message unless the window is full; a full window asks for a writable notice.
    pub fn offer(&self, message: Bytes) -> Offer {
        let message = match self.messages.try_send(message) {
            Ok(()) => return Offer::Sent,
            Err(mpsc::error::TrySendError::Full(message)) => message,
            Err(mpsc::error::TrySendError::Closed(_)) => return Offer::Closed,
        };
        // Full: ask for a notice, then try once more, so a drain between the two cannot go unnoticed.
        self.blocked.store(true, Ordering::SeqCst);
        match self.messages.try_send(message) {
            Ok(()) => Offer::Sent, // at worst one notice nobody waits for
            Err(mpsc::error::TrySendError::Full(_)) => Offer::Full,
            Err(mpsc::error::TrySendError::Closed(_)) => Offer::Closed,
        }
    }

    /// Ends the stream after the messages already queued: with `status`, or OK.
    pub fn finish(self, status: Option<Status>) {
        if let Some(status) = status {
            let _ = self.end.send(status);
        }
    }
}

/// One stream as the Python side holds it.
pub struct StreamLink {
    pub id: u64,
    pub path: String,
    pub outbound: Outbound,
    pub want: Arc<Semaphore>,
    /// Its requests being answered (counted for a ModelStreamInfer), when its connection is placed.
    pub requests: Option<StreamRequests>,
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
    /// The stream's place in the budget across connections, held by its responses (crate::budget).
    pub open: Option<OpenStream>,
    /// What its connection is answering (crate::busy).
    pub busy: Option<Busy>,
}

/// The responses going out; dropping it (the stream is over, or the client went away) tells the reader task.
pub struct Responses {
    id: u64,
    core: Arc<Core>,
    messages: mpsc::Receiver<Bytes>,
    end: Option<oneshot::Receiver<Status>>,
    blocked: Arc<AtomicBool>,
    _gone: oneshot::Sender<()>,
    /// Noted as each message goes out; told to give way, the stream ends with its status.
    open: Option<OpenStream>,
    /// Ready when it or its connection gave way and nothing it read is being answered: it ends then.
    ending: Option<Ending>,
    /// Its requests being answered, when its connection is placed.
    requests: Option<StreamRequests>,
    /// Told to give way to a stream from another address: the status it ends with once `ending` is ready.
    gave_way: Option<Status>,
    /// Holds its connection open while its responses go on (crate::busy).
    _held: Option<Holding>,
}

impl Stream for Responses {
    type Item = Result<Bytes, Status>;

    /// The next message (polled only as HTTP/2 has room for it), then the ending status if there is one.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(status) = self.open.as_mut().and_then(|open| open.poll_given_way(cx)) {
            self.open = None;
            // it reads no further request and ends once the ones it read are answered
            if let Some(requests) = self.requests.as_ref() {
                requests.leave();
                self.gave_way = Some(status);
            } else {
                self.end = None;
                self.messages.close();
                return Poll::Ready(Some(Err(status)));
            }
        }
        match self.messages.poll_recv(cx) {
            Poll::Ready(Some(message)) => {
                if self.blocked.swap(false, Ordering::SeqCst) {
                    self.core.queue.push(Work::StreamWritable(self.id));
                }
                if let Some(open) = self.open.as_ref() {
                    open.heard();
                }
                return Poll::Ready(Some(Ok(message)));
            }
            Poll::Pending => {
                if !self
                    .ending
                    .as_mut()
                    .is_some_and(|e| e.as_mut().poll(cx).is_ready())
                {
                    return Poll::Pending;
                }
                self.ending = None;
                self.end = None;
                self.messages.close();
                let going = self.requests.as_ref().and_then(StreamRequests::going);
                let status = self.gave_way.take().unwrap_or_else(|| {
                    Status::unavailable(match going {
                        Some(Going::Aged) => AGED,
                        _ => GAVE_WAY,
                    })
                });
                return Poll::Ready(Some(Err(status)));
            }
            Poll::Ready(None) => {}
        }
        let Some(end) = self.end.as_mut() else {
            return Poll::Ready(None);
        };
        let status = match Pin::new(end).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(status) => status.ok(),
        };
        self.end = None;
        Poll::Ready(status.map(Err))
    }
}

impl StreamingService<Bytes> for StreamHandler {
    type Response = Bytes;
    type ResponseStream = Responses;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<Streaming<Bytes>>) -> Self::Future {
        let core = self.core.clone();
        let path = std::mem::take(&mut self.path);
        let open = self.open.take();
        let busy = self.busy.take();
        Box::pin(async move {
            let id = core.stream_ids.next();
            let (sender, messages) = mpsc::channel(WINDOW);
            let (end_tx, end) = oneshot::channel();
            let blocked = Arc::new(AtomicBool::new(false));
            let outbound = Outbound {
                messages: sender,
                end: end_tx,
                blocked: blocked.clone(),
            };
            let (gone_tx, gone) = oneshot::channel();
            let want = Arc::new(Semaphore::new(0));
            let counted = (path == MODEL_STREAM_INFER).then(|| core.in_flight.clone());
            let held = busy.as_ref().map(Busy::stream);
            let requests = busy.map(|busy| StreamRequests::new(busy, counted));
            let ending = requests
                .clone()
                .map(|requests| Box::pin(async move { requests.gave_way().await }) as Ending);
            let link = StreamLink {
                id,
                path,
                outbound,
                want: want.clone(),
                requests: requests.clone(),
            };
            core.queue.push(Work::StreamOpen(link));
            let hearing = open.as_ref().map(OpenStream::hearing);
            tokio::spawn(read_frames(
                core.clone(),
                id,
                request.into_inner(),
                want,
                gone,
                hearing,
                requests.clone(),
            ));
            Ok(Response::new(Responses {
                id,
                core,
                messages,
                end: Some(end),
                blocked,
                _gone: gone_tx,
                open,
                ending,
                requests,
                gave_way: None,
                _held: held,
            }))
        })
    }
}

/// Reads a frame per permit until the requests end, or until the stream or its connection gives way (it takes no
/// new request then), noting each request read (`hearing`, `requests`); says when the client is gone; stops when
/// `want` closes.
async fn read_frames(
    core: Arc<Core>,
    id: u64,
    mut inbound: Streaming<Bytes>,
    want: Arc<Semaphore>,
    mut gone: oneshot::Receiver<()>,
    hearing: Option<Heard>,
    requests: Option<StreamRequests>,
) {
    let (mut reading, mut wanted) = (true, false);
    loop {
        tokio::select! {
            biased;
            _ = &mut gone => {
                let frame = Err(Status::cancelled("the client went away"));
                core.queue.push(Work::StreamFrame(Frame { id, frame }));
                break;
            }
            _ = left(requests.as_ref()), if reading => reading = false,
            permit = want.acquire(), if reading && !wanted => {
                let Ok(permit) = permit else { break };
                permit.forget();
                wanted = true;
            }
            frame = inbound.message(), if reading && wanted => {
                wanted = false;
                let frame = frame.map_err(|status| as_grpcio_answers(&status).unwrap_or(status));
                reading = matches!(frame, Ok(Some(_)));
                if let Some(hearing) = hearing.as_ref() {
                    hearing.now();
                }
                if let (true, Some(requests)) = (reading, requests.as_ref()) {
                    requests.taken();
                }
                core.queue.push(Work::StreamFrame(Frame { id, frame }));
            }
        }
    }
}

/// Once the stream or its connection gave way (never, for one whose connection is not placed).
async fn left(requests: Option<&StreamRequests>) {
    match requests {
        Some(requests) => requests.left().await,
        None => std::future::pending().await,
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

    #[test]
    fn a_full_window_refuses_until_drained_and_a_gone_reader_closes() {
        let (messages, mut receiver) = mpsc::channel(WINDOW);
        let (end, _end) = oneshot::channel();
        let blocked = Arc::new(AtomicBool::new(false));
        let outbound = Outbound {
            messages,
            end,
            blocked: blocked.clone(),
        };
        for _ in 0..WINDOW {
            assert_eq!(outbound.offer(Bytes::from_static(b"m")), Offer::Sent);
        }
        assert!(!blocked.load(Ordering::SeqCst)); // no notice asked for while there was room
        assert_eq!(outbound.offer(Bytes::from_static(b"m")), Offer::Full);
        assert!(blocked.load(Ordering::SeqCst));
        receiver.try_recv().unwrap();
        assert_eq!(outbound.offer(Bytes::from_static(b"m")), Offer::Sent);
        drop(receiver);
        assert_eq!(outbound.offer(Bytes::from_static(b"m")), Offer::Closed);
    }
}
