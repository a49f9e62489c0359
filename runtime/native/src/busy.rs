//! The requests a connection is answering, for a connection that gives way to another (crate::fair_share): it
//! goes once they are answered, not in the middle of one (crate::http_conn for HTTP, crate::placed for gRPC).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// How long the answer of a connection that gave way may take to leave once it is ready.
pub const FLUSH_GRACE: Duration = Duration::from_secs(5);

#[derive(Default)]
struct State {
    answering: AtomicUsize,
    leaving: AtomicBool,
    idle: Notify,
}

/// The requests of one connection being answered (from the handler's start to its response's head).
#[derive(Clone, Default)]
pub struct Busy(Arc<State>);

/// One request being answered, until dropped.
pub struct Answering(Busy);

impl Busy {
    pub fn enter(&self) -> Answering {
        self.0.answering.fetch_add(1, Ordering::AcqRel);
        Answering(self.clone())
    }

    pub fn any(&self) -> bool {
        self.0.answering.load(Ordering::Acquire) > 0
    }

    /// The connection gave way: it takes no new request (gRPC answers one UNAVAILABLE).
    pub fn leave(&self) {
        self.0.leaving.store(true, Ordering::Release);
    }

    pub fn leaving(&self) -> bool {
        self.0.leaving.load(Ordering::Acquire)
    }

    /// Once no request is being answered and the last answer had FLUSH_GRACE to leave.
    pub async fn flushed(&self) {
        self.idle().await;
        tokio::time::sleep(FLUSH_GRACE).await;
    }

    /// Once no request is being answered.
    async fn idle(&self) {
        loop {
            let notified = self.0.idle.notified();
            if !self.any() {
                return;
            }
            notified.await;
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
