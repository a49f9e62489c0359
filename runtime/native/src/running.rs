//! A server task on the core's runtime and how it stops: shared by the gRPC and the HTTP port.

use tokio::sync::oneshot;

/// A running server: `stop` ends it after the calls in flight finish (or `grace` passes).
pub struct Running<T> {
    shutdown: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<T>,
}

impl<T> Running<T> {
    /// `shutdown` tells the task `done` to stop taking connections and to finish.
    pub fn new(shutdown: oneshot::Sender<()>, done: tokio::task::JoinHandle<T>) -> Self {
        Self { shutdown, done }
    }

    pub fn stop(self, runtime: &tokio::runtime::Runtime, grace: std::time::Duration) {
        let _ = self.shutdown.send(());
        let done = self.done;
        let _ = runtime.block_on(async move { tokio::time::timeout(grace, done).await });
    }
}
