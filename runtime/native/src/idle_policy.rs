//! A core's thread started under SCHED_BATCH (the runtime's `--thread-policy=batch`) leaves it while no call is in
//! flight. Under SCHED_BATCH a thread that wakes never preempts the one running, another process's included: a
//! request arriving on a core whose CPU another workload keeps busy would wait for that workload's slice to end.
//! So the thread parks under the default policy when nothing is in flight (the next wake-up is most likely a new
//! request: it preempts), and under SCHED_BATCH while calls are in flight (the wake-ups are the runtime's own
//! answers: the thread handing them over goes on until it blocks). A thread started under another policy is left
//! as it is.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The calls a core has taken and not answered yet: unary calls, and the requests of its ModelStreamInfer
/// streams (crate::busy::StreamRequests) from when the core reads each until its last response is handed over.
#[derive(Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

/// One call counted in flight until it is dropped (answered, failed or cancelled).
pub struct Counted(Arc<AtomicUsize>);

impl InFlight {
    pub fn enter(&self) -> Counted {
        self.0.fetch_add(1, Ordering::Relaxed);
        Counted(self.0.clone())
    }

    pub fn idle(&self) -> bool {
        self.count() == 0
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The policy a batch-started core thread parks under: the default one while idle, SCHED_BATCH otherwise.
pub fn parking_policy(idle: bool) -> libc::c_int {
    if idle {
        libc::SCHED_OTHER
    } else {
        libc::SCHED_BATCH
    }
}

thread_local! {
    /// The policy this thread runs under, where it switches (started under SCHED_BATCH); None: left alone.
    static SWITCHING: Cell<Option<libc::c_int>> = const { Cell::new(None) };
}

/// On a core thread's start: it switches only if it starts under SCHED_BATCH.
pub fn on_thread_start() {
    // SAFETY: sched_getscheduler(0) reads the calling thread's policy; no memory is passed.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy == libc::SCHED_BATCH {
        SWITCHING.with(|s| s.set(Some(policy)));
    }
}

/// Before a core thread parks: the policy for `in_flight` (one system call, only when it changes). A refusal
/// (a sandbox) leaves the thread as it is from then on.
pub fn on_thread_park(in_flight: &InFlight) {
    SWITCHING.with(|s| {
        let Some(current) = s.get() else { return };
        let wanted = parking_policy(in_flight.idle());
        if wanted == current {
            return;
        }
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` outlives the call; pid 0 is the calling thread.
        let done = unsafe { libc::sched_setscheduler(0, wanted, &param) } == 0;
        s.set(done.then_some(wanted));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_calls_until_dropped() {
        let in_flight = InFlight::default();
        assert!(in_flight.idle());
        let first = in_flight.enter();
        let second = in_flight.enter();
        assert!(!in_flight.idle());
        drop(first);
        assert!(!in_flight.idle());
        drop(second);
        assert!(in_flight.idle());
    }

    #[test]
    fn parks_preemptible_only_while_idle() {
        assert_eq!(parking_policy(true), libc::SCHED_OTHER);
        assert_eq!(parking_policy(false), libc::SCHED_BATCH);
    }

    #[test]
    fn a_thread_not_started_under_batch_is_left_alone() {
        std::thread::spawn(|| {
            // SAFETY: reads the calling thread's policy.
            let before = unsafe { libc::sched_getscheduler(0) };
            assert_ne!(
                before,
                libc::SCHED_BATCH,
                "run the tests from a process that is not SCHED_BATCH"
            );
            on_thread_start();
            on_thread_park(&InFlight::default());
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, before);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_batch_thread_switches_with_what_is_in_flight() {
        std::thread::spawn(|| {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `param` outlives the call; pid 0 is the calling thread.
            assert_eq!(
                unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) },
                0
            );
            on_thread_start();
            let in_flight = InFlight::default();
            let policy = || unsafe { libc::sched_getscheduler(0) };
            on_thread_park(&in_flight);
            assert_eq!(policy(), libc::SCHED_OTHER);
            let call = in_flight.enter();
            on_thread_park(&in_flight);
            assert_eq!(policy(), libc::SCHED_BATCH);
            drop(call);
            on_thread_park(&in_flight);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
