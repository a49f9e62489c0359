//! The requests a connection is answering, for a connection that gives way to another (crate::fair_share): it
//! goes once they are answered, not in the middle of one (crate::driven). A gRPC stream's requests count one by
//! one ([`StreamRequests`]): from when the core reads each until Python says its last response was handed to the
//! stream.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::idle_policy::{Counted, InFlight};

/// How long the answer of a connection that gave way may take to leave once it is ready.
pub const FLUSH_GRACE: Duration = Duration::from_secs(5);

/// How long a connection that goes still takes new calls: those its client sent before it read the GOAWAY. A client
/// that read it acknowledges the GOAWAY's PING, and hyper's second GOAWAY then names the last call taken; the
/// client sends those after it again on a new connection (grpc core retries only those, not a call refused with
/// REFUSED_STREAM). Bounded, so that a client that never acknowledges cannot keep the connection with new calls.
pub const LATE_CALLS: Duration = FLUSH_GRACE;

#[derive(Default)]
struct State {
    answering: AtomicUsize,
    /// Streams open on the connection (crate::stream: as long as their responses).
    streams: AtomicUsize,
    /// Requests and streams ever entered: whether one came meanwhile.
    entered: AtomicU64,
    /// Notified when the last request being answered, or the last stream, ends.
    idle: Notify,
    leaving: Flag,
    going: OnceLock<Going>,
    left_at: OnceLock<Instant>,
}

/// Why a connection's streams are told to end before their clients end them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Going {
    /// Its place went to a newcomer from another address (crate::fair_share).
    GaveWay,
    /// It reached the port's maximum connection age, and its grace passed (crate::grpc_port).
    Aged,
}

/// Something that happens once (a connection or a stream told to give way), and can be waited for.
#[derive(Default)]
struct Flag {
    set: AtomicBool,
    raised: Notify,
}

impl Flag {
    fn raise(&self) {
        self.set.store(true, Ordering::Release);
        self.raised.notify_waiters();
    }

    fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    async fn wait(&self) {
        until(&self.raised, || self.is_set()).await;
    }
}

/// Once `ready()` holds, checked afresh each time `notify` wakes its waiters.
async fn until(notify: &Notify, ready: impl Fn() -> bool) {
    loop {
        let notified = notify.notified(); // before the check: a wake-up between the two is not missed
        if ready() {
            return;
        }
        notified.await;
    }
}

/// The requests of one connection being answered (from the handler's start to its response's head).
#[derive(Clone, Default)]
pub struct Busy(Arc<State>);

/// One request being answered, until dropped.
pub struct Answering(Busy);

impl Busy {
    pub fn enter(&self) -> Answering {
        self.0.entered.fetch_add(1, Ordering::AcqRel);
        self.0.answering.fetch_add(1, Ordering::AcqRel);
        Answering(self.clone())
    }

    pub fn any(&self) -> bool {
        self.0.answering.load(Ordering::Acquire) > 0
    }

    /// The connection gave way, or aged and its grace passed: its streams read no new request (they end once what
    /// they read is answered), and after LATE_CALLS it takes no new call (gRPC refuses one REFUSED_STREAM,
    /// crate::grpc_port). The first reason given stays.
    pub fn leave(&self, going: Going) {
        let _ = self.0.left_at.set(Instant::now());
        let _ = self.0.going.set(going);
        self.0.leaving.raise();
    }

    /// Why its streams were told to end, once they were.
    pub fn going(&self) -> Option<Going> {
        self.0.going.get().copied()
    }

    /// The connection reached the port's maximum age: after LATE_CALLS it takes no new call, as one that gave way;
    /// its streams go on until their clients end them, or its grace passes (crate::driven: then it leaves).
    pub fn age(&self) {
        let _ = self.0.left_at.set(Instant::now());
    }

    /// Whether a call that arrives now is taken: until the connection goes, then for LATE_CALLS.
    pub fn takes_calls(&self) -> bool {
        self.0
            .left_at
            .get()
            .is_none_or(|left| left.elapsed() < LATE_CALLS)
    }

    /// A stream open on the connection, until dropped.
    pub fn stream(&self) -> Holding {
        self.0.entered.fetch_add(1, Ordering::AcqRel);
        self.0.streams.fetch_add(1, Ordering::AcqRel);
        Holding(self.clone())
    }

    /// Once the connection was told to go.
    pub async fn left(&self) {
        self.0.leaving.wait().await;
    }

    pub fn leaving(&self) -> bool {
        self.0.leaving.is_set()
    }

    /// Once nothing holds the connection (no request being answered; no stream open, unless it gave way: its
    /// streams end themselves) and the last answer had FLUSH_GRACE to leave (a late call taken meanwhile,
    /// LATE_CALLS, is answered and its answer given at least as long; at most twice).
    pub async fn flushed(&self) {
        loop {
            until(&self.0.idle, || self.quiet()).await;
            let entered = self.0.entered.load(Ordering::Acquire);
            tokio::time::sleep(FLUSH_GRACE).await;
            if self.0.entered.load(Ordering::Acquire) == entered && self.quiet() {
                return;
            }
        }
    }

    fn quiet(&self) -> bool {
        !self.any() && (self.0.streams.load(Ordering::Acquire) == 0 || self.leaving())
    }
}

/// The requests of one gRPC stream being answered, each counted in its connection's [`Busy`] and in its core's
/// calls in flight ([`InFlight`]: the policy the core's threads park under, crate::idle_policy).
#[derive(Clone)]
pub struct StreamRequests(Arc<StreamState>);

struct StreamState {
    busy: Busy,
    /// Where its requests count (a ModelStreamInfer's; a health Watch's do not: it answers none of them).
    counted: Option<InFlight>,
    answering: Mutex<Vec<(Answering, Counted)>>,
    settled: Notify,
    /// The stream itself gave way (to a stream from another address, crate::budget).
    leaving: Flag,
}

impl StreamRequests {
    /// `counted`: where its requests count in flight, if they hold the connection until they are answered.
    pub fn new(busy: Busy, counted: Option<InFlight>) -> Self {
        Self(Arc::new(StreamState {
            busy,
            counted,
            answering: Mutex::new(Vec::new()),
            settled: Notify::new(),
            leaving: Flag::default(),
        }))
    }

    /// The core read one more request of the stream.
    pub fn taken(&self) {
        let Some(in_flight) = self.0.counted.as_ref() else {
            return;
        };
        let entered = (self.0.busy.enter(), in_flight.enter());
        self.answering().push(entered);
    }

    /// One of the stream's requests is answered (its last response handed to the stream).
    pub fn answered(&self) {
        let mut answering = self.answering();
        answering.pop();
        if answering.is_empty() {
            self.0.settled.notify_waiters();
        }
    }

    /// The stream has ended: none of its requests holds the connection any longer.
    pub fn clear(&self) {
        let taken = std::mem::take(&mut *self.answering());
        drop(taken);
        self.0.settled.notify_waiters();
    }

    /// Why its connection's streams were told to end, once they were.
    pub fn going(&self) -> Option<Going> {
        self.0.busy.going()
    }

    /// The stream gave way itself: it takes no new request.
    pub fn leave(&self) {
        self.0.leaving.raise();
    }

    /// Once the stream or its connection gave way.
    pub async fn left(&self) {
        tokio::select! {
            () = self.0.leaving.wait() => {}
            () = self.0.busy.left() => {}
        }
    }

    /// Once the stream or its connection gave way and none of the stream's requests is being answered: the stream
    /// ends then.
    pub async fn gave_way(&self) {
        self.left().await;
        until(&self.0.settled, || self.answering().is_empty()).await;
    }

    fn answering(&self) -> std::sync::MutexGuard<'_, Vec<(Answering, Counted)>> {
        self.0.answering.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A stream holding its connection open, until dropped.
pub struct Holding(Busy);

impl Drop for Holding {
    fn drop(&mut self) {
        let state = &(self.0).0;
        if state.streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            state.idle.notify_waiters();
        }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        let state = &(self.0).0;
        if state.answering.fetch_sub(1, Ordering::AcqRel) == 1 {
            state.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    fn ready<F: Future>(future: &mut std::pin::Pin<Box<F>>) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        matches!(future.as_mut().poll(&mut cx), Poll::Ready(_))
    }

    #[tokio::test(start_paused = true)]
    async fn an_aged_connection_is_held_by_its_streams_one_that_gave_way_is_not() {
        let (aged, gave_way) = (Busy::default(), Busy::default());
        let (stream, other) = (aged.stream(), gave_way.stream());
        aged.age();
        gave_way.leave(Going::GaveWay);
        assert!(!aged.leaving() && gave_way.leaving()); // only the one that gave way tells its streams
        let mut aged_flushed = Box::pin(aged.flushed());
        let started = Instant::now();
        gave_way.flushed().await;
        assert_eq!(started.elapsed(), FLUSH_GRACE); // its stream ends itself: not waited for
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(!ready(&mut aged_flushed)); // its stream goes on
        drop(stream);
        let ended = Instant::now();
        aged_flushed.await;
        assert_eq!(ended.elapsed(), FLUSH_GRACE);
        drop(other);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_goes_takes_late_calls_for_a_while() {
        let busy = Busy::default();
        assert!(busy.takes_calls());
        busy.leave(Going::GaveWay);
        tokio::time::advance(LATE_CALLS - Duration::from_millis(1)).await;
        assert!(busy.takes_calls());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!busy.takes_calls());
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_taken_while_the_last_answer_leaves_has_its_answer_leave_too() {
        let busy = Busy::default();
        let started = Instant::now();
        let flushed = tokio::spawn({
            let busy = busy.clone();
            async move { busy.flushed().await }
        });
        tokio::task::yield_now().await; // its grace begins
        tokio::time::advance(Duration::from_secs(3)).await;
        let late = busy.enter();
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(late);
        flushed.await.unwrap();
        // the late call's answer (at 4 s) had its grace; not forever: at most one grace more
        let answered = Duration::from_secs(4);
        assert!(
            started.elapsed() >= answered + FLUSH_GRACE,
            "{:?}",
            started.elapsed()
        );
        assert!(
            started.elapsed() <= answered + 2 * FLUSH_GRACE,
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_stream_gives_way_once_left_and_its_requests_answered() {
        let busy = Busy::default();
        let requests = StreamRequests::new(busy.clone(), Some(InFlight::default()));
        requests.taken();
        requests.taken();
        assert!(busy.any());
        let mut gave_way = Box::pin(requests.gave_way());
        requests.answered();
        assert!(!ready(&mut gave_way)); // not told to give way yet
        busy.leave(Going::GaveWay);
        assert!(!ready(&mut gave_way)); // one request still being answered
        requests.answered();
        assert!(ready(&mut gave_way));
        assert!(!busy.any());
        requests.answered(); // one too many changes nothing
        assert!(!busy.any());
    }

    #[test]
    fn a_stream_request_is_in_flight_from_read_to_answered_and_a_watch_never() {
        let (busy, in_flight) = (Busy::default(), InFlight::default());
        let requests = StreamRequests::new(busy.clone(), Some(in_flight.clone()));
        let unary = in_flight.enter();
        requests.taken();
        requests.taken();
        drop(unary);
        assert!(!in_flight.idle());
        requests.answered();
        assert!(!in_flight.idle()); // one still being answered
        requests.answered();
        assert!(in_flight.idle());
        requests.taken();
        requests.clear(); // the stream ended with a request unanswered
        assert!(in_flight.idle() && !busy.any());
        let watch = StreamRequests::new(busy.clone(), None);
        watch.taken();
        assert!(in_flight.idle() && !busy.any());
    }

    #[test]
    fn a_stream_without_requests_gives_way_at_once_and_an_ended_one_frees_its_connection() {
        let busy = Busy::default();
        let quiet = StreamRequests::new(busy.clone(), Some(InFlight::default()));
        let ended = StreamRequests::new(busy.clone(), Some(InFlight::default()));
        ended.taken();
        let (mut quiet_gone, mut left) = (Box::pin(quiet.gave_way()), Box::pin(busy.left()));
        assert!(!ready(&mut quiet_gone) && !ready(&mut left));
        busy.leave(Going::GaveWay);
        assert!(ready(&mut quiet_gone) && ready(&mut left));
        assert!(busy.any());
        ended.clear();
        assert!(!busy.any());
        assert!(ready(&mut Box::pin(ended.gave_way())));
    }

    #[test]
    fn a_stream_that_gives_way_itself_answers_what_it_read_and_holds_its_connection_meanwhile() {
        let busy = Busy::default();
        let (leaving, staying) = (
            StreamRequests::new(busy.clone(), Some(InFlight::default())),
            StreamRequests::new(busy.clone(), Some(InFlight::default())),
        );
        leaving.taken();
        let (mut left, mut gave_way) = (Box::pin(leaving.left()), Box::pin(leaving.gave_way()));
        let mut other_left = Box::pin(staying.left());
        leaving.leave();
        assert!(ready(&mut left) && !ready(&mut gave_way));
        assert!(!ready(&mut other_left) && !busy.leaving()); // the others and the connection stay
        leaving.answered();
        assert!(ready(&mut gave_way));
    }
}
