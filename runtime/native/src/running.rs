//! A server task on the core's runtime and how it stops: shared by the gRPC and the HTTP port.

use tokio::sync::oneshot;

/// A running server: `stop` ends it after the calls in flight finish (or `grace` passes).
pub struct Running<T> {
    shutdown: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<T>,
}

impl<T> Running<T> {
    /// `shutdown` tells the task `done` to stop taking connections and to finish.
    pub fn new(shutdown: oneshot::Sender<()>, done: tokio::task::JoinHandle<T>) -> Self {
        Self {
            shutdown: Some(shutdown),
            done,
        }
    }

    /// Tells the task to stop taking connections and to finish (a port the loop drives: it turns the runtime
    /// until [`Running::finished`]).
    pub fn begin_stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Whether the task has finished (its calls in flight answered).
    pub fn finished(&self) -> bool {
        self.done.is_finished()
    }

    pub fn stop(mut self, runtime: &tokio::runtime::Runtime, grace: std::time::Duration) {
        self.begin_stop();
        let done = self.done;
        let _ = runtime.block_on(async move { tokio::time::timeout(grace, done).await });
    }
}
