//! The gRPC port's bounds across all its connections, on what a peer can make the server hold for a few bytes:
//! unary calls whose request message has not arrived in full (each ~5 KiB of stream state for ~15 bytes of
//! HEADERS), and open streaming calls (each ~20 KiB with its Python side, held for the stream's life).
//!
//! `--grpc-max-concurrent-streams` bounds one connection's share; without these, connections times that share
//! was still open (40 connections of 256 bodiless calls: +55 MiB; of 256 streams: +220 MiB).
//!
//! When the unary calls waiting for their message are at the limit, the one that has waited longest gives way to
//! the new one (answered RESOURCE_EXHAUSTED): a peer that fills the budget with calls that never send their
//! message does not keep others' calls out, whose messages follow their HEADERS at once. Streams are shared among
//! the addresses that open them (crate::fair_share): at the limit, the quietest stream of an address holding more
//! than its share gives way to a stream from another address (RESOURCE_EXHAUSTED), and a newcomer whose address
//! holds its share is refused (RESOURCE_EXHAUSTED). Not by age: a stream between a sequence's requests is quiet,
//! and one that sends a message now and then is cheap to keep, so the age of a stream says nothing of its holder.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Context;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::Status;

use crate::fair_share::{FairShare, Heard, Place};

/// What the calls may hold at once, and the flags that set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallLimits {
    /// Unary calls whose request message has not arrived in full (`--grpc-max-incomplete-calls`).
    pub incomplete_calls: usize,
    /// Streaming calls open at once (`--grpc-max-open-streams`).
    pub open_streams: usize,
}

/// The calls waiting for their message, oldest first, and the open streams' places.
pub struct CallBudget {
    limits: CallLimits,
    arrivals: AtomicU64,
    waiting: Arc<Mutex<Waiting>>,
    streams: FairShare,
}

/// When a call came to the port, taken as its connection reads its HEADERS (crate::grpc_port), before the call
/// has a task: hyper takes a connection's new calls in order but runs each in a task of its own, and tokio runs
/// the task spawned last first, so the order in which calls' tasks start is not the order they came in.
/// Ordered by `order` (each is another): `at` follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Arrival {
    order: u64,
    at: Instant,
}

#[derive(Default)]
struct Waiting {
    /// By arrival: each call's sender, which tells it to give way.
    calls: BTreeMap<Arrival, oneshot::Sender<()>>,
}

/// A unary call's place among those waiting for their message; dropped (its message has arrived, or the call has
/// ended), the place is free.
pub struct WaitingCall {
    waiting: Arc<Mutex<Waiting>>,
    arrived: Arrival,
}

impl Drop for WaitingCall {
    fn drop(&mut self) {
        lock(&self.waiting).calls.remove(&self.arrived);
    }
}

/// Resolves when the call must give way to a newer one; never while it keeps its place.
pub struct GiveWay {
    told: oneshot::Receiver<()>,
    limit: usize,
}

impl GiveWay {
    pub async fn status(self) -> Status {
        if self.told.await.is_err() {
            std::future::pending::<()>().await; // its place was freed: nothing to give way
        }
        Status::resource_exhausted(format!(
            "too many calls waiting for their request message: the server holds at most {} \
             (--grpc-max-incomplete-calls), and this one, the longest waiting, gave way to a newer one",
            self.limit
        ))
    }
}

fn lock(waiting: &Mutex<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    waiting
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CallBudget {
    pub fn new(limits: CallLimits) -> Self {
        Self {
            limits,
            arrivals: AtomicU64::new(0),
            waiting: Arc::default(),
            streams: FairShare::new(limits.open_streams),
        }
    }

    /// The next call's place in the order of arrival.
    pub fn arrival(&self) -> Arrival {
        Arrival {
            order: self.arrivals.fetch_add(1, Ordering::Relaxed),
            at: Instant::now(),
        }
    }

    /// A place for a unary call that `arrived` until its message has arrived; past the limit, the call that has
    /// waited longest is told to give way (this one, where every other waiting call came after it).
    pub fn incomplete_call(&self, arrived: Arrival) -> (WaitingCall, GiveWay) {
        let (tell, told) = oneshot::channel();
        let mut waiting = lock(&self.waiting);
        waiting.calls.insert(arrived, tell);
        while waiting.calls.len() > self.limits.incomplete_calls.max(1) {
            if let Some((_, oldest)) = waiting.calls.pop_first() {
                let _ = oldest.send(());
            }
        }
        let call = WaitingCall {
            waiting: self.waiting.clone(),
            arrived,
        };
        let give_way = GiveWay {
            told,
            limit: self.limits.incomplete_calls,
        };
        (call, give_way)
    }

    /// A place held by a streaming call from `peer` that `arrived` for as long as it is open, or until it is told to
    /// give way (of equally quiet streams, the one that came first).
    pub fn open_stream(
        &self,
        peer: Option<IpAddr>,
        arrived: Arrival,
    ) -> Result<OpenStream, Status> {
        match self
            .streams
            .admit_arrived(peer, Some((arrived.order, arrived.at)))
        {
            Some(place) => Ok(OpenStream {
                place,
                limit: self.limits.open_streams,
            }),
            None => Err(refusal(
                "open streams",
                self.limits.open_streams,
                "--grpc-max-open-streams",
            )),
        }
    }
}

/// An open stream's place in the budget.
pub struct OpenStream {
    place: Place,
    limit: usize,
}

impl OpenStream {
    /// Notes that a message has passed on the stream (it is not quiet).
    pub fn heard(&self) {
        self.place.heard();
    }

    /// What notes it from the stream's reader task.
    pub fn hearing(&self) -> Heard {
        self.place.hearing()
    }

    /// The status that ends the stream, once it must give way to a stream from another address.
    pub fn poll_given_way(&mut self, cx: &mut Context<'_>) -> Option<Status> {
        self.place.poll_given_way(cx).then(|| {
            Status::resource_exhausted(format!(
                "too many open streams: the server holds at most {} (--grpc-max-open-streams), and this one, the \
                 quietest of the address holding the most, gave way to a stream from another address",
                self.limit
            ))
        })
    }
}

fn refusal(what: &str, limit: usize, flag: &str) -> Status {
    Status::resource_exhausted(format!(
        "too many {what}: the server holds at most {limit} ({flag}); try again later"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(give_way: &mut GiveWay) -> bool {
        give_way.told.try_recv().is_ok()
    }

    #[test]
    fn at_the_limit_the_longest_waiting_call_gives_way() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 2,
            open_streams: 1,
        });
        let (_a, mut a_told) = budget.incomplete_call(budget.arrival());
        let (b, mut b_told) = budget.incomplete_call(budget.arrival());
        let (_c, mut c_told) = budget.incomplete_call(budget.arrival()); // a gives way
        assert!(told(&mut a_told));
        assert!(!told(&mut b_told) && !told(&mut c_told));
        drop(b); // b's message arrived: its place is free, and d takes it without anyone giving way
        let (_d, mut d_told) = budget.incomplete_call(budget.arrival());
        assert!(!told(&mut c_told) && !told(&mut d_told));
        let (_e, _) = budget.incomplete_call(budget.arrival()); // c, now the longest waiting
        assert!(told(&mut c_told) && !told(&mut d_told));
    }

    #[test]
    fn calls_that_take_their_places_out_of_order_give_way_in_the_order_they_came() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 2,
            open_streams: 1,
        });
        let arrivals: Vec<Arrival> = (0..4).map(|_| budget.arrival()).collect();
        // their tasks start last first, as tokio runs a burst of spawned tasks
        let (_d, mut d_told) = budget.incomplete_call(arrivals[3]);
        let (_a, mut a_told) = budget.incomplete_call(arrivals[0]);
        let (_b, mut b_told) = budget.incomplete_call(arrivals[1]); // a, the first to come, gives way
        assert!(told(&mut a_told));
        assert!(!told(&mut b_told) && !told(&mut d_told));
        let (_c, mut c_told) = budget.incomplete_call(arrivals[2]); // then b
        assert!(told(&mut b_told));
        assert!(!told(&mut c_told) && !told(&mut d_told));
    }

    #[test]
    fn a_call_older_than_every_waiting_one_gives_way_itself() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 1,
            open_streams: 1,
        });
        let first = budget.arrival();
        let (_later, mut later_told) = budget.incomplete_call(budget.arrival());
        let (_first, mut first_told) = budget.incomplete_call(first);
        assert!(told(&mut first_told));
        assert!(!told(&mut later_told));
    }

    #[tokio::test]
    async fn a_call_told_to_give_way_is_resource_exhausted_naming_the_flag() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 1,
            open_streams: 1,
        });
        let (_a, a_told) = budget.incomplete_call(budget.arrival());
        let (b, b_told) = budget.incomplete_call(budget.arrival());
        let status = a_told.status().await;
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains(
            "too many calls waiting for their request message: the server holds at most 1 "
        ));
        assert!(status.message().contains("--grpc-max-incomplete-calls"));
        assert!(status.message().contains("gave way"));
        drop(b); // freed, not told: its GiveWay never resolves
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), b_told.status());
        assert!(waited.await.is_err());
    }

    fn address(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn streams_past_the_limit_are_refused_until_one_ends() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 1,
            open_streams: 1,
        });
        let stream = budget.open_stream(address(1), budget.arrival()).unwrap();
        let refused = budget
            .open_stream(address(1), budget.arrival())
            .err()
            .unwrap();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused
            .message()
            .contains("too many open streams: the server holds at most 1 "));
        assert!(refused.message().contains("--grpc-max-open-streams"));
        drop(stream);
        assert!(budget.open_stream(address(1), budget.arrival()).is_ok());
    }

    #[test]
    fn at_the_limit_an_address_holding_more_than_its_share_gives_up_a_stream() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 1,
            open_streams: 2,
        });
        let mut first = budget.open_stream(address(1), budget.arrival()).unwrap();
        let mut second = budget.open_stream(address(1), budget.arrival()).unwrap();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut other = budget.open_stream(address(2), budget.arrival()).unwrap();
        let status = first.poll_given_way(&mut cx).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains(
            "at most 2 (--grpc-max-open-streams), and this one, the quietest of the address holding the most, \
             gave way to a stream from another address"
        ));
        assert!(second.poll_given_way(&mut cx).is_none());
        assert!(other.poll_given_way(&mut cx).is_none());
        assert!(budget.open_stream(address(2), budget.arrival()).is_err()); // one each
    }

    #[tokio::test(start_paused = true)]
    async fn equally_quiet_streams_give_way_in_the_order_they_came() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 1,
            open_streams: 2,
        });
        let (came_first, came_second) = (budget.arrival(), budget.arrival());
        // the tasks of streams read together start in another order (crate::budget::Arrival)
        let mut second = budget.open_stream(address(1), came_second).unwrap();
        let mut first = budget.open_stream(address(1), came_first).unwrap();
        let _other = budget.open_stream(address(2), budget.arrival()).unwrap();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(first.poll_given_way(&mut cx).is_some());
        assert!(second.poll_given_way(&mut cx).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_is_quiet_from_when_it_came_not_from_when_its_task_took_its_place() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 1,
            open_streams: 2,
        });
        let came_first = budget.arrival();
        tokio::time::advance(std::time::Duration::from_millis(3)).await;
        let mut second = budget.open_stream(address(1), budget.arrival()).unwrap();
        tokio::time::advance(std::time::Duration::from_millis(3)).await;
        let mut first = budget.open_stream(address(1), came_first).unwrap(); // quiet for 6 ms, not 0
        let _other = budget.open_stream(address(2), budget.arrival()).unwrap();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(first.poll_given_way(&mut cx).is_some());
        assert!(second.poll_given_way(&mut cx).is_none());
    }

    #[test]
    fn a_limit_of_any_size_is_taken() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: usize::MAX,
            open_streams: usize::MAX,
        });
        let _ = budget.incomplete_call(budget.arrival());
        assert!(budget.open_stream(None, budget.arrival()).is_ok());
    }
}
