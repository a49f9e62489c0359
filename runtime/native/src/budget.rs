//! The gRPC port's bounds across all its connections, on what a peer can make the server hold for a few bytes:
//! unary calls whose request message has not arrived in full (each ~5 KiB of stream state for ~15 bytes of
//! HEADERS), and open streaming calls (each ~20 KiB with its Python side, held for the stream's life).
//!
//! `--grpc-max-concurrent-streams` bounds one connection's share; without these, connections times that share
//! was still open (40 connections of 256 bodiless calls: +55 MiB; of 256 streams: +220 MiB).
//!
//! When the unary calls waiting for their message are at the limit, the one that has waited longest gives way to
//! the new one (answered RESOURCE_EXHAUSTED): a peer that fills the budget with calls that never send their
//! message does not keep others' calls out, whose messages follow their HEADERS at once. A stream past its limit
//! is refused (RESOURCE_EXHAUSTED); a stream that has sent messages is not one to end for a newcomer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// What the calls may hold at once, and the flags that set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallLimits {
    /// Unary calls whose request message has not arrived in full (`--grpc-max-incomplete-calls`).
    pub incomplete_calls: usize,
    /// Streaming calls open at once (`--grpc-max-open-streams`).
    pub open_streams: usize,
}

/// The calls waiting for their message, oldest first, and one permit per open stream.
pub struct CallBudget {
    limits: CallLimits,
    waiting: Arc<Mutex<Waiting>>,
    streams: Arc<Semaphore>,
}

#[derive(Default)]
struct Waiting {
    next: u64,
    /// By arrival: each call's sender, which tells it to give way.
    calls: BTreeMap<u64, oneshot::Sender<()>>,
}

/// A unary call's place among those waiting for their message; dropped (its message has arrived, or the call has
/// ended), the place is free.
pub struct WaitingCall {
    waiting: Arc<Mutex<Waiting>>,
    id: u64,
}

impl Drop for WaitingCall {
    fn drop(&mut self) {
        lock(&self.waiting).calls.remove(&self.id);
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
            waiting: Arc::default(),
            streams: Arc::new(Semaphore::new(
                limits.open_streams.min(Semaphore::MAX_PERMITS),
            )),
        }
    }

    /// A place for a unary call until its message has arrived; at the limit, the call that has waited longest is
    /// told to give way.
    pub fn incomplete_call(&self) -> (WaitingCall, GiveWay) {
        let (tell, told) = oneshot::channel();
        let mut waiting = lock(&self.waiting);
        while waiting.calls.len() >= self.limits.incomplete_calls.max(1) {
            if let Some((_, oldest)) = waiting.calls.pop_first() {
                let _ = oldest.send(());
            }
        }
        let id = waiting.next;
        waiting.next += 1;
        waiting.calls.insert(id, tell);
        let call = WaitingCall {
            waiting: self.waiting.clone(),
            id,
        };
        let give_way = GiveWay {
            told,
            limit: self.limits.incomplete_calls,
        };
        (call, give_way)
    }

    /// A permit held by a streaming call for as long as it is open.
    pub fn open_stream(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.streams.clone().try_acquire_owned().map_err(|_| {
            refusal(
                "open streams",
                self.limits.open_streams,
                "--grpc-max-open-streams",
            )
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
        let (_a, mut a_told) = budget.incomplete_call();
        let (b, mut b_told) = budget.incomplete_call();
        let (_c, mut c_told) = budget.incomplete_call(); // a gives way
        assert!(told(&mut a_told));
        assert!(!told(&mut b_told) && !told(&mut c_told));
        drop(b); // b's message arrived: its place is free, and d takes it without anyone giving way
        let (_d, mut d_told) = budget.incomplete_call();
        assert!(!told(&mut c_told) && !told(&mut d_told));
        let (_e, _) = budget.incomplete_call(); // c, now the longest waiting
        assert!(told(&mut c_told) && !told(&mut d_told));
    }

    #[tokio::test]
    async fn a_call_told_to_give_way_is_resource_exhausted_naming_the_flag() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 1,
            open_streams: 1,
        });
        let (_a, a_told) = budget.incomplete_call();
        let (b, b_told) = budget.incomplete_call();
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

    #[test]
    fn streams_past_the_limit_are_refused_until_one_ends() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 1,
            open_streams: 1,
        });
        let stream = budget.open_stream().unwrap();
        let refused = budget.open_stream().unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused
            .message()
            .contains("too many open streams: the server holds at most 1 "));
        assert!(refused.message().contains("--grpc-max-open-streams"));
        drop(stream);
        assert!(budget.open_stream().is_ok());
    }

    #[test]
    fn a_limit_past_what_a_semaphore_holds_is_its_most() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: usize::MAX,
            open_streams: usize::MAX,
        });
        let _ = budget.incomplete_call();
        assert!(budget.open_stream().is_ok());
    }
}
