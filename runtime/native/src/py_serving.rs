//! Starting and stopping a port of the core from Python: bind, build the core's runtime, serve; stop after the
//! calls in flight. Shared by `GrpcCore` and `HttpCore`.

use std::net::{TcpListener, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::idle_policy::{self, InFlight};
use crate::running::Running;

/// `value` seconds as a duration, or ValueError naming `name` unless it is a positive number of seconds.
pub fn positive_seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "{name} must be a positive number of seconds, not {value}"
            ))
        })
}

/// None for 0 (the setting's "none"), else [`positive_seconds`].
pub fn optional_seconds(name: &str, value: f64) -> PyResult<Option<Duration>> {
    if value == 0.0 {
        return Ok(None);
    }
    positive_seconds(name, value).map(Some)
}

pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// One port's runtime and server, while it serves.
pub struct Serving<T> {
    name: &'static str,
    what: &'static str,
    threads: usize,
    state: Mutex<Option<(tokio::runtime::Runtime, Running<T>)>>,
}

impl<T: Send + 'static> Serving<T> {
    /// `name`: the runtime's thread name ("grpc-core"); `what`: the port in errors ("gRPC core").
    pub fn new(name: &'static str, what: &'static str, threads: usize) -> Self {
        Self {
            name,
            what,
            threads: threads.max(1),
            state: Mutex::new(None),
        }
    }

    /// Binds `address:port` and serves with `serve`; returns the port bound (for port 0). `in_flight`: the calls
    /// the port has taken and not answered, which decide the policy its threads park under (`idle_policy`).
    pub fn start<F>(
        &self,
        py: Python<'_>,
        address: &str,
        port: u16,
        in_flight: InFlight,
        serve: F,
    ) -> PyResult<u16>
    where
        F: FnOnce(&tokio::runtime::Runtime, TcpListener) -> std::io::Result<Running<T>> + Send,
    {
        let mut state = lock(&self.state);
        if state.is_some() {
            return Err(PyRuntimeError::new_err(format!(
                "the {} is already serving",
                self.what
            )));
        }
        let addr = (address, port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| PyValueError::new_err(format!("no address for {address}:{port}")))?;
        let (name, threads) = (self.name, self.threads);
        let (runtime, running, bound) = py.allow_threads(move || -> std::io::Result<_> {
            let listener = TcpListener::bind(addr)?;
            let bound = listener.local_addr()?.port();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name(name)
                .on_thread_start(idle_policy::on_thread_start)
                .on_thread_park(move || idle_policy::on_thread_park(&in_flight))
                .enable_all()
                .build()?;
            let running = serve(&runtime, listener)?;
            Ok((runtime, running, bound))
        })?;
        *state = Some((runtime, running));
        Ok(bound)
    }

    /// Stops taking connections and waits up to `grace` seconds for calls in flight (run it off the event
    /// loop, which answers them meanwhile), then ends the runtime's threads.
    pub fn stop(&self, py: Python<'_>, grace: f64) {
        let taken = lock(&self.state).take();
        if let Some((runtime, running)) = taken {
            py.allow_threads(move || {
                running.stop(&runtime, Duration::from_secs_f64(grace.max(0.0)));
                runtime.shutdown_timeout(Duration::from_millis(100));
            });
        }
    }
}
