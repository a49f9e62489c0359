//! The gRPC port's bounds across all its connections, on what a peer can make the server hold for a few bytes:
//! unary calls whose request message has not arrived in full (each ~5 KiB of stream state for ~15 bytes of
//! HEADERS), and open streaming calls (each ~20 KiB with its Python side, held for the stream's life).
//!
//! `--grpc-max-concurrent-streams` bounds one connection's share; without these, connections times that share
//! was still open (40 connections of 256 bodiless calls: +55 MiB; of 256 streams: +220 MiB). A call past a bound
//! is answered at once, RESOURCE_EXHAUSTED with the limit and the flag that sets it, and the server goes on.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// What the calls may hold at once, and the flags that set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallLimits {
    /// Unary calls whose request message has not arrived in full (`--grpc-max-incomplete-calls`).
    pub incomplete_calls: usize,
    /// Streaming calls open at once (`--grpc-max-open-streams`).
    pub open_streams: usize,
}

/// One permit per incomplete call and per open stream; a permit goes back when it is dropped.
pub struct CallBudget {
    limits: CallLimits,
    incomplete: Arc<Semaphore>,
    streams: Arc<Semaphore>,
}

impl CallBudget {
    pub fn new(limits: CallLimits) -> Self {
        let permits = |n: usize| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS)));
        Self {
            limits,
            incomplete: permits(limits.incomplete_calls),
            streams: permits(limits.open_streams),
        }
    }

    /// A permit held by a unary call until its message has arrived.
    pub fn incomplete_call(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.incomplete.clone().try_acquire_owned().map_err(|_| {
            refusal(
                "calls waiting for their request message",
                self.limits.incomplete_calls,
                "--grpc-max-incomplete-calls",
            )
        })
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

    #[test]
    fn permits_run_out_at_the_limit_and_come_back_when_dropped() {
        let budget = CallBudget::new(CallLimits {
            incomplete_calls: 2,
            open_streams: 1,
        });
        let first = budget.incomplete_call().unwrap();
        let _second = budget.incomplete_call().unwrap();
        let refused = budget.incomplete_call().unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains(
            "too many calls waiting for their request message: the server holds at most 2 "
        ));
        assert!(refused.message().contains("--grpc-max-incomplete-calls"));
        drop(first);
        let _third = budget.incomplete_call().unwrap();

        // the two budgets are apart: streams have their own
        let stream = budget.open_stream().unwrap();
        let refused = budget.open_stream().unwrap_err();
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
        assert!(budget.incomplete_call().is_ok());
        assert!(budget.open_stream().is_ok());
    }
}
