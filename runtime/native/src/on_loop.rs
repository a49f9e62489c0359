//! A port driven on the event loop's own thread (`threads` 0): its runtime is a current-thread one, which the loop
//! turns whenever the descriptor of the runtime's I/O driver is readable (and on a short tick, for its timers).
//! A call is then read, decoded, handed over, answered and written by one thread: at one request in flight no
//! thread wakes another on the server's side, where a port with its own thread costs three wake-ups a request
//! (its thread for the request, the loop for the call, its thread again for the answer). An answer given on
//! another thread is written by that thread ([`deliver`]) when no turn is in progress.
//!
//! tokio offers no way to run a current-thread runtime "until nothing is ready", nor the driver's descriptor:
//! [`turn`] runs it with a future that completes once the driver, polled without waiting, woke no task (the
//! run queue's depth: `tokio_unstable` metrics, see `.cargo/config.toml`), and [`driver_fd`] finds the epoll
//! descriptor whose interest list holds a descriptor the runtime registered (the port's listener).

use std::cell::Cell;
use std::fs;
use std::future::Future;
use std::io::{Error, ErrorKind};
use std::os::fd::RawFd;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A runtime for a port the event loop drives.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
}

/// The most threads a port's runtime runs work on beside its own (a large JSON header read, a large answer
/// compressed): more such work waits for one, so a flood of it costs a bounded number of threads, not one each.
pub const BLOCKING_THREADS: usize = 4;

/// Whether this build can drive a port on the loop (it needs tokio's run-queue depth).
pub const AVAILABLE: bool = cfg!(tokio_unstable);

/// The most a turn runs before it hands the thread back to the loop, ready work or not (the loop's other
/// callbacks, a python model's answer, wait meanwhile): the next turn goes on with what is left.
pub const TURN_BUDGET: Duration = Duration::from_millis(2);

/// What a turn did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turned {
    /// Tasks polled.
    pub polls: u64,
    /// Whether it ended with nothing ready; false: it ran out of its budget, turn again soon.
    pub quiet: bool,
}

/// Runs everything ready on `runtime` (tasks woken, I/O and timers due) until a poll of its driver that does not
/// wait wakes no task and `take` finds no call, or `budget` has passed. Never waits for I/O. `take` hands the
/// calls the tasks queued to whoever answers them (true if it took any): called between the scheduler's rounds,
/// so that an answer given there is written in the same turn. Called by the thread that owns the port.
pub fn turn(
    runtime: &tokio::runtime::Runtime,
    budget: Duration,
    take: impl FnMut() -> bool + Unpin,
) -> Turned {
    let before = polls(runtime);
    let was = IN_TURN.replace(true);
    let quiet = runtime.block_on(Quiet {
        driven: false,
        until: Instant::now() + budget,
        take,
    });
    IN_TURN.set(was);
    Turned {
        polls: polls(runtime).wrapping_sub(before),
        quiet,
    }
}

thread_local! {
    /// Whether this thread is in a [`turn`]: calls queued then are taken by the turn itself (crate::queue).
    static IN_TURN: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is turning a port the loop drives (its turn takes the calls queued meanwhile).
pub fn in_turn() -> bool {
    IN_TURN.get()
}

/// Sends an answer (`send` hands it to the call's task) given on a thread that is not turning the port, and
/// runs the port from this thread until the answer is written (at most [`TURN_BUDGET`]), so that no other
/// thread is woken for it: the event loop's thread between its turns, or a model's thread that answered. A
/// call the tasks queue meanwhile signals the loop (crate::queue). `None` (the port is being turned, or stopped):
/// `send` was not called.
pub fn deliver<S: FnOnce()>(runtime: &tokio::runtime::Runtime, send: S) -> Option<S> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Some(send); // within a runtime (another port's turn): the turn in progress writes it
    }
    runtime.block_on(async move {
        send();
        Quiet {
            driven: false,
            until: Instant::now() + TURN_BUDGET,
            take: || false,
        }
        .await
    });
    None
}

#[cfg(tokio_unstable)]
fn polls(runtime: &tokio::runtime::Runtime) -> u64 {
    runtime.metrics().worker_poll_count(0)
}

#[cfg(not(tokio_unstable))]
fn polls(_: &tokio::runtime::Runtime) -> u64 {
    0
}

/// Ready (true) once the scheduler has polled its driver (it does so, without waiting, before it polls this
/// future again) and that woke nothing: both run queues empty. Ready (false) past `until`.
struct Quiet<F> {
    driven: bool,
    until: Instant,
    take: F,
}

impl<F: FnMut() -> bool + Unpin> Future for Quiet<F> {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let took = (self.take)();
        if self.driven && !took {
            if queued() == 0 {
                return Poll::Ready(true);
            }
            if Instant::now() >= self.until {
                return Poll::Ready(false);
            }
        }
        self.driven = true;
        cx.waker().wake_by_ref(); // polled again after the queued tasks ran and the driver was polled
        Poll::Pending
    }
}

#[cfg(tokio_unstable)]
fn queued() -> usize {
    let metrics = tokio::runtime::Handle::current().metrics();
    metrics.worker_local_queue_depth(0) + metrics.global_queue_depth()
}

#[cfg(not(tokio_unstable))]
fn queued() -> usize {
    0
}

/// The epoll descriptor (of this process) whose interest list holds `registered`.
pub fn driver_fd(registered: RawFd) -> std::io::Result<RawFd> {
    for entry in fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        let is_epoll = fs::read_link(entry.path())
            .map(|target| target.as_os_str() == "anon_inode:[eventpoll]")
            .unwrap_or(false);
        if !is_epoll {
            continue;
        }
        if let Ok(info) = fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) {
            if watched(&info).any(|target| target == registered) {
                return Ok(fd);
            }
        }
    }
    Err(Error::new(
        ErrorKind::NotFound,
        format!("no epoll descriptor of this process watches descriptor {registered}"),
    ))
}

/// The target descriptors of an epoll descriptor's `/proc/self/fdinfo` text (its `tfd:` lines).
fn watched(fdinfo: &str) -> impl Iterator<Item = RawFd> + '_ {
    fdinfo.lines().filter_map(|line| {
        let rest = line.strip_prefix("tfd:")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn fdinfo_lines_name_their_targets() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        7 events:       19 data:                7  pos:0 ino:6a1 sdev:8\n\
                    tfd:       12 events: 80000019 data:             ffff  pos:0 ino:6a4 sdev:8\n";
        assert_eq!(watched(info).collect::<Vec<_>>(), vec![7, 12]);
    }

    #[test]
    fn the_driver_is_found_by_a_descriptor_it_watches() {
        let rt = runtime().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let fd = listener.as_raw_fd();
        let _entered = rt.enter();
        let _registered = tokio::net::TcpListener::from_std(listener).unwrap();
        let epoll = driver_fd(fd).unwrap();
        assert_ne!(epoll, fd);
        assert!(driver_fd(-5).is_err());
    }

    /// Each task wakes the next, and the last one's wake-up comes from a timer already due: one turn runs them
    /// all, without waiting and without another turn.
    #[cfg(tokio_unstable)]
    #[test]
    fn a_turn_runs_until_nothing_is_ready() {
        let rt = runtime().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        {
            let ran = ran.clone();
            rt.spawn(async move {
                while rx.recv().await.is_some() {
                    ran.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        for _ in 0..200 {
            let tx = tx.clone();
            rt.spawn(async move {
                tokio::task::yield_now().await;
                let _ = tx.send(());
            });
        }
        let started = Instant::now();
        let turned = turn(&rt, Duration::from_secs(60), || false);
        assert_eq!(ran.load(Ordering::SeqCst), 200);
        assert!(turned.quiet && turned.polls >= 200, "{turned:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let again = turn(&rt, Duration::from_secs(60), || false);
        assert_eq!(
            (again.polls, again.quiet),
            (0, true),
            "nothing was left ready"
        );
    }

    /// What `take` answers inside a turn is carried through in the same turn: a task waiting for that answer runs
    /// and its reply comes back before the turn returns.
    #[cfg(tokio_unstable)]
    #[test]
    fn an_answer_given_by_take_is_carried_in_the_same_turn() {
        let rt = runtime().unwrap();
        let asked = Arc::new(std::sync::Mutex::new(Vec::<
            tokio::sync::oneshot::Sender<u32>,
        >::new()));
        let replied = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let (asked, replied) = (asked.clone(), replied.clone());
            rt.spawn(async move {
                let (tx, rx) = tokio::sync::oneshot::channel();
                asked.lock().unwrap().push(tx);
                if rx.await == Ok(7) {
                    replied.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let mut takes = 0;
        let turned = turn(&rt, Duration::from_secs(60), || {
            takes += 1;
            let waiting: Vec<_> = asked.lock().unwrap().drain(..).collect();
            let took = !waiting.is_empty();
            waiting.into_iter().for_each(|tx| {
                let _ = tx.send(7);
            });
            took
        });
        assert!(turned.quiet);
        assert_eq!(
            replied.load(Ordering::SeqCst),
            3,
            "answered within the turn ({takes} takes)"
        );
    }

    /// An answer delivered from another thread is carried through there: the task waiting for it runs on that
    /// thread before `deliver` returns; a turn in progress elsewhere (a runtime context) is left to write it.
    #[cfg(tokio_unstable)]
    #[test]
    fn a_delivered_answer_is_carried_by_the_thread_that_gave_it() {
        let rt = Arc::new(runtime().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let got = Arc::new(std::sync::Mutex::new(None));
        {
            let got = got.clone();
            rt.spawn(async move {
                *got.lock().unwrap() = Some((rx.await.ok(), std::thread::current().id()));
            });
        }
        turn(&rt, TURN_BUDGET, || false); // the task waits for its answer
        let answering = std::thread::spawn({
            let rt = rt.clone();
            move || {
                assert!(deliver(&rt, move || {
                    let _ = tx.send(5);
                })
                .is_none());
                std::thread::current().id()
            }
        })
        .join()
        .unwrap();
        assert_eq!(*got.lock().unwrap(), Some((Some(5), answering)));
        let inside = rt.block_on(async { deliver(&rt, || ()).is_some() });
        assert!(
            inside,
            "within a runtime, the answer is left to the turn in progress"
        );
    }

    /// A task that is always ready does not keep a turn past its budget; the next turn goes on with it.
    #[cfg(tokio_unstable)]
    #[test]
    fn a_turn_ends_at_its_budget() {
        let rt = runtime().unwrap();
        let spins = Arc::new(AtomicUsize::new(0));
        {
            let spins = spins.clone();
            rt.spawn(async move {
                loop {
                    spins.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            });
        }
        let started = Instant::now();
        let turned = turn(&rt, Duration::from_millis(20), || false);
        assert!(!turned.quiet, "{turned:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let before = spins.load(Ordering::SeqCst);
        assert!(!turn(&rt, Duration::from_millis(5), || false).quiet);
        assert!(
            spins.load(Ordering::SeqCst) > before,
            "the next turn went on with it"
        );
    }

    /// A turn does not wait for what is not ready: a socket with nothing to read.
    #[test]
    fn a_turn_does_not_wait() {
        let rt = runtime().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        {
            let accepted = accepted.clone();
            let _entered = rt.enter();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            rt.spawn(async move {
                let _ = listener.accept().await;
                accepted.fetch_add(1, Ordering::SeqCst);
            });
        }
        let started = Instant::now();
        turn(&rt, TURN_BUDGET, || false);
        turn(&rt, TURN_BUDGET, || false);
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(accepted.load(Ordering::SeqCst), 0);
        // A loopback connect is in the listener's queue when it returns: the next turn takes it.
        let _client = std::net::TcpStream::connect(address).unwrap();
        turn(&rt, TURN_BUDGET, || false);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }
}
