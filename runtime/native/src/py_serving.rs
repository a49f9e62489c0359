//! Starting and stopping a port of the core from Python: bind, build the core's runtime, serve; stop after the
//! calls in flight. Shared by `GrpcCore` and `HttpCore`.

use std::net::{TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::idle_policy::{self, InFlight};
use crate::on_loop;
use crate::queue::WakeQueue;
use crate::running::Running;
use crate::unanswered::Unanswered;

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

/// A turn's `take` (see `on_loop::turn`) for a port whose calls wait in `queue`: calls Python's `take` with no
/// arguments, the GIL taken, whenever calls wait (an exception it raises is reported as unraisable).
pub fn taking<T: Send>(
    queue: &WakeQueue<T>,
    take: Option<Py<PyAny>>,
) -> impl FnMut() -> bool + Unpin + Send + '_ {
    move || {
        let Some(take) = take.as_ref().filter(|_| queue.waiting()) else {
            return false;
        };
        Python::with_gil(|py| {
            if let Err(error) = take.call0(py) {
                error.write_unraisable(py, Some(take.bind(py)));
            }
        });
        true
    }
}

/// One port's runtime and server, while it serves.
pub struct Serving<T> {
    name: &'static str,
    what: &'static str,
    threads: usize, // 0: the event loop's thread drives the port (crate::on_loop)
    state: SharedPort<T>,
    unanswered: Arc<AtomicUsize>, // a port the loop drives: its calls taken and not answered (Answering)
}

/// How a call's answer is sent: for a port the loop drives, written by the thread that gives it when the port
/// is not being turned and no other of the port's calls awaits its answer (`on_loop::deliver`); else handed to
/// the port's runtime, whose turn on the loop writes it (with the others' answers) or to the port's threads.
/// (With others in flight the loop turns the port soon anyway; a model's thread that wrote each answer itself
/// would take the port from the loop, one write per answer, and leave its next request waiting.)
pub struct Answering<T> {
    port: Option<(SharedPort<T>, Unanswered)>,
}

impl<T> Answering<T> {
    /// Runs `send` (which hands the answer to the call's task) and sees the answer written.
    pub fn send(&self, send: impl FnOnce()) {
        let Some((port, unanswered)) = self.port.as_ref() else {
            return send();
        };
        if unanswered.answer() > 0 {
            return send(); // others await answers: the loop's next turn writes this one with theirs
        }
        write_here(port, send);
    }
}

/// How a stream's messages are sent: as [`Answering`] sends an answer, written by the thread that offers one
/// where the loop drives the port and the message's request is the only call the core has in flight (its
/// requests count until their last message, crate::busy::StreamRequests); else handed to the stream's task,
/// which the loop's next turn (or the port's threads) runs.
pub struct Delivering<T> {
    port: Option<SharedPort<T>>,
    in_flight: InFlight,
}

impl<T> Delivering<T> {
    /// Runs `send` (which offers a message to the stream) and sees the message written.
    pub fn send(&self, send: impl FnOnce()) {
        match self.port.as_ref() {
            Some(port) if self.in_flight.count() <= 1 => write_here(port, send),
            _ => send(),
        }
    }
}

/// Runs `send` and the port the loop drives from this thread until what it handed over is written, unless the
/// port is being turned (or stopped): that turn writes it.
fn write_here<T>(port: &SharedPort<T>, send: impl FnOnce()) {
    let unsent = match port.try_lock() {
        Ok(state) => match state.as_ref() {
            Some(port) => on_loop::deliver(&port.runtime, send),
            None => Some(send),
        },
        Err(_) => Some(send), // being turned (or stopped): the turn writes it
    };
    if let Some(send) = unsent {
        send();
    }
}

/// A port while it serves (None before and after), shared by its calls' answers.
type SharedPort<T> = Arc<Mutex<Option<Port<T>>>>;

struct Port<T> {
    runtime: tokio::runtime::Runtime,
    running: Running<T>,
    driver: Option<RawFd>, // the runtime's epoll descriptor, for a port the loop drives
}

impl<T: Send + 'static> Serving<T> {
    /// `name`: the runtime's thread name ("grpc-core"); `what`: the port in errors ("gRPC core"); `threads`: the
    /// runtime's worker threads, or 0 for a port the event loop's thread drives ([`Serving::turn`]).
    pub fn new(name: &'static str, what: &'static str, threads: usize) -> Self {
        Self {
            name,
            what,
            threads,
            state: Arc::new(Mutex::new(None)),
            unanswered: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How the answers of the calls taken now are sent (see [`Answering`]).
    pub fn answering(&self) -> Answering<T> {
        Answering {
            port: self
                .on_loop()
                .then(|| (self.state.clone(), Unanswered::new(&self.unanswered))),
        }
    }

    /// How the messages of a stream opened now are sent (see [`Delivering`]); `in_flight`: the core's calls.
    pub fn delivering(&self, in_flight: InFlight) -> Delivering<T> {
        Delivering {
            port: self.on_loop().then(|| self.state.clone()),
            in_flight,
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
        if self.threads == 0 && !on_loop::AVAILABLE {
            return Err(PyRuntimeError::new_err(format!(
                "the {} cannot run on the event loop's thread: this build lacks tokio's run-queue metrics \
                 (tokio_unstable, see .cargo/config.toml); give it threads",
                self.what
            )));
        }
        let addr = (address, port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| PyValueError::new_err(format!("no address for {address}:{port}")))?;
        let (name, threads) = (self.name, self.threads);
        let (port, bound) = py.allow_threads(move || -> std::io::Result<_> {
            let listener = TcpListener::bind(addr)?;
            let bound = listener.local_addr()?.port();
            if threads == 0 {
                let registered = listener.as_raw_fd(); // the runtime's driver watches it once it serves
                let runtime = on_loop::runtime()?;
                let running = serve(&runtime, listener)?;
                let driver = Some(on_loop::driver_fd(registered)?);
                return Ok((
                    Port {
                        runtime,
                        running,
                        driver,
                    },
                    bound,
                ));
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name(name)
                .max_blocking_threads(on_loop::BLOCKING_THREADS)
                .on_thread_start(idle_policy::on_thread_start)
                .on_thread_park(move || idle_policy::on_thread_park(&in_flight))
                .enable_all()
                .build()?;
            let running = serve(&runtime, listener)?;
            Ok((
                Port {
                    runtime,
                    running,
                    driver: None,
                },
                bound,
            ))
        })?;
        *state = Some(port);
        Ok(bound)
    }

    /// The descriptor that turns readable when a port the loop drives has I/O ready (None: the port has its own
    /// threads, or does not serve).
    pub fn driver_fd(&self) -> Option<RawFd> {
        lock(&self.state).as_ref().and_then(|port| port.driver)
    }

    /// Runs what is ready on a port the loop drives, without waiting, for at most `on_loop::TURN_BUDGET` (see
    /// `on_loop::turn`; `take` hands over the calls the port queued): (tasks polled, whether nothing was left
    /// ready). Nothing to do for a port with its own threads.
    pub fn turn<F>(&self, py: Python<'_>, take: F) -> (u64, bool)
    where
        F: FnMut() -> bool + Unpin + Send,
    {
        // The lock is taken with the GIL released: a thread delivering an answer may hold it for a moment.
        py.allow_threads(|| {
            let state = lock(&self.state);
            match state.as_ref() {
                Some(port) if port.driver.is_some() => {
                    let turned = on_loop::turn(&port.runtime, on_loop::TURN_BUDGET, take);
                    (turned.polls, turned.quiet)
                }
                _ => (0, true),
            }
        })
    }

    /// Whether the event loop's thread drives this port (it was made with no threads).
    pub fn on_loop(&self) -> bool {
        self.threads == 0
    }

    /// Stops taking connections; the calls in flight go on (a port the loop drives: turn it until
    /// [`Serving::finished`], then [`Serving::stop`]).
    pub fn begin_stop(&self) {
        if let Some(port) = lock(&self.state).as_mut() {
            port.running.begin_stop();
        }
    }

    /// Whether the server has finished (or never served).
    pub fn finished(&self) -> bool {
        lock(&self.state)
            .as_ref()
            .is_none_or(|port| port.running.finished())
    }

    /// Stops taking connections and waits up to `grace` seconds for calls in flight (run it off the event
    /// loop, which answers them meanwhile; for a port the loop drives, on the loop with 0 after
    /// [`Serving::finished`]), then ends the runtime's threads.
    pub fn stop(&self, py: Python<'_>, grace: f64) {
        let taken = lock(&self.state).take();
        if let Some(Port {
            runtime, running, ..
        }) = taken
        {
            py.allow_threads(move || {
                running.stop(&runtime, Duration::from_secs_f64(grace.max(0.0)));
                runtime.shutdown_timeout(Duration::from_millis(100));
            });
        }
    }
}
