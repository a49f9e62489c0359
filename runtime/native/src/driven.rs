//! A port's connections, each driven to its end by its own task: the HTTP/1.1 port's and the gRPC port's (HTTP/2),
//! both sharing their places (crate::fair_share). Told to give way, a connection with no request being answered is
//! closed at once; one with a request being answered (a slow model) finishes it first, by hyper's graceful shutdown
//! (HTTP/1.1: the answer says `Connection: close`; HTTP/2: a GOAWAY, so a gRPC client sends its next calls on a new
//! connection, and its calls sent before the GOAWAY reached it are served too, crate::grpc_port), and is closed
//! once the answer had `FLUSH_GRACE` to leave, so a client that stops reading its answer
//! cannot keep the place. Closing it abruptly, as the first version did, lost that answer: the connection waiting
//! longest on the server had read nothing for longest, so it was the quietest.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

pub use crate::busy::{Busy, Going, FLUSH_GRACE};
use crate::fair_share::{FairShare, Place};

/// Accepts connections on `listener` until `signal`, each one `places` admits handed to `open` with its place and
/// the port's stop (true once the port stops); `open`'s future, the connection's task, is spawned. Then stops
/// taking connections, tells those open to stop, and returns once all their tasks have ended.
pub async fn accept<F, T>(
    listener: TcpListener,
    places: FairShare,
    mut signal: oneshot::Receiver<()>,
    mut open: F,
) where
    F: FnMut(TcpStream, Place, watch::Receiver<bool>) -> T,
    T: Future<Output = ()> + Send + 'static,
{
    let (stop, stopping) = watch::channel(false);
    // every connection's task holds a sender: all have ended once `recv` finds none left
    let (alive, mut ended) = mpsc::channel::<()>(1);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(20)).await; // out of descriptors: let some close
                    continue;
                };
                // all places taken and this one not owed one: dropped, so closed
                let Some(place) = places.admit(Some(peer.ip())) else { continue };
                let _ = stream.set_nodelay(true);
                let task = open(stream, place, stopping.clone());
                let alive = alive.clone();
                tokio::spawn(async move {
                    task.await;
                    drop(alive);
                });
            }
            _ = &mut signal => break,
        }
    }
    drop(listener);
    stop.send_replace(true);
    drop(alive);
    let _ = ended.recv().await;
}

/// Drives `connection` until it ends, the port stops (`stop` turns true: `graceful`, then to its end, as hyper's
/// graceful shutdown waits), its place gives way (above) or `aged` is ready (the port's maximum connection age:
/// `graceful` whether or not a call is being answered, so the peer learns of it before the connection closes; its
/// calls are answered and its streams go on until their clients end them or `grace` passes, as under grpc core,
/// then as for one that gave way). `busy` is told why it goes (crate::busy). `graceful` begins the connection's
/// graceful shutdown.
pub async fn drive<C: Future>(
    connection: C,
    graceful: fn(Pin<&mut C>),
    mut place: Place,
    aged: impl Future<Output = ()>,
    grace: Option<Duration>,
    busy: Busy,
    mut stop: watch::Receiver<bool>,
) {
    let mut connection = std::pin::pin!(connection);
    let going = tokio::select! {
        _ = connection.as_mut() => return,
        _ = place.given_way() => Some(Going::GaveWay),
        _ = aged => Some(Going::Aged),
        _ = stop.wait_for(|stopping| *stopping) => None,
    };
    match going {
        None => {
            graceful(connection.as_mut());
            connection.await;
            return;
        }
        Some(Going::GaveWay) => {
            busy.leave(Going::GaveWay);
            if !busy.any() {
                return; // dropped: closed
            }
            graceful(connection.as_mut());
        }
        Some(Going::Aged) => {
            busy.age();
            graceful(connection.as_mut());
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = busy.flushed() => return,
                _ = after(grace) => busy.leave(Going::Aged),
            }
        }
    }
    tokio::select! {
        _ = connection => {}
        _ = busy.flushed() => {}
    }
}

/// Ready once `wait` has passed; never without one.
pub async fn after(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fair_share::FairShare;
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::Duration;

    /// How long an aged connection's streams go on here.
    const AGE_GRACE: Duration = Duration::from_secs(60);

    /// A connection that ends when told to shut down gracefully and then `open` is cleared.
    struct Fake {
        graceful: Arc<AtomicBool>,
        open: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<std::task::Waker>>>,
    }

    impl Future for Fake {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            if self.open.load(Ordering::Acquire) {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        }
    }

    fn graceful(fake: Pin<&mut Fake>) {
        fake.graceful.store(true, Ordering::Release);
    }

    struct Setup {
        places: FairShare,
        _other: Place, // the same address's second place: it holds two, so one gives way to another address
        graceful: Arc<AtomicBool>,
        open: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<std::task::Waker>>>,
        busy: Busy,
        stop: watch::Sender<bool>,
        age: Option<tokio::sync::oneshot::Sender<()>>,
        driven: tokio::task::JoinHandle<()>,
    }

    fn setup() -> Setup {
        let places = FairShare::new(2);
        let peer = Some(IpAddr::from([10, 0, 0, 1]));
        let place = places.admit(peer).unwrap();
        let other = places.admit(peer).unwrap(); // taken later: the first is the quietest
        let (graceful_flag, open) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(true)),
        );
        let waker = Arc::new(std::sync::Mutex::new(None));
        let fake = Fake {
            graceful: graceful_flag.clone(),
            open: open.clone(),
            waker: waker.clone(),
        };
        let busy = Busy::default();
        let (stop, stopping) = watch::channel(false);
        let (age, aging) = tokio::sync::oneshot::channel::<()>();
        let aged = async move {
            if aging.await.is_err() {
                std::future::pending::<()>().await; // the test ended without ageing it
            }
        };
        let driven = tokio::spawn(drive(
            fake,
            graceful,
            place,
            aged,
            Some(AGE_GRACE),
            busy.clone(),
            stopping,
        ));
        Setup {
            places,
            _other: other,
            graceful: graceful_flag,
            open,
            waker,
            busy,
            stop,
            age: Some(age),
            driven,
        }
    }

    fn close(setup: &Setup) {
        setup.open.store(false, Ordering::Release);
        if let Some(waker) = setup.waker.lock().unwrap().take() {
            waker.wake();
        }
    }

    fn newcomer(setup: &Setup) -> Place {
        setup
            .places
            .admit(Some(IpAddr::from([10, 0, 0, 2])))
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_that_gives_way_is_closed_at_once() {
        let setup = setup();
        tokio::task::yield_now().await;
        let _newcomer = newcomer(&setup);
        setup.driven.await.unwrap();
        assert!(
            !setup.graceful.load(Ordering::Acquire),
            "dropped, not shut down gracefully"
        );
        assert!(setup.busy.leaving());
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_answering_finishes_its_answer_first() {
        let setup = setup();
        let answering = setup.busy.enter();
        tokio::task::yield_now().await;
        let _newcomer = newcomer(&setup);
        tokio::time::sleep(Duration::from_secs(3600)).await; // a slow model: still waited for
        assert!(setup.graceful.load(Ordering::Acquire));
        assert!(setup.busy.leaving(), "its calls told to give way too");
        assert!(!setup.driven.is_finished());
        drop(answering);
        tokio::task::yield_now().await;
        close(&setup); // the answer left, hyper closed it
        setup.driven.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_nobody_reads_holds_it_only_for_the_flush_grace() {
        let setup = setup();
        let answering = setup.busy.enter();
        tokio::task::yield_now().await;
        let _newcomer = newcomer(&setup);
        tokio::task::yield_now().await;
        drop(answering); // the answer is ready; the client does not read it, so the connection does not end
        let started = tokio::time::Instant::now();
        setup.driven.await.unwrap();
        assert_eq!(started.elapsed(), FLUSH_GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_that_ages_is_shut_down_gracefully() {
        let mut setup = setup();
        tokio::task::yield_now().await;
        let _ = setup.age.take().unwrap().send(());
        tokio::task::yield_now().await;
        assert!(
            setup.graceful.load(Ordering::Acquire),
            "told (a GOAWAY), not dropped"
        );
        assert!(!setup.busy.leaving(), "its streams go on");
        assert!(!setup.driven.is_finished());
        close(&setup); // the peer saw it and closed
        setup.driven.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_aged_connection_whose_peer_stays_closes_after_the_flush_grace() {
        let mut setup = setup();
        tokio::task::yield_now().await;
        let started = tokio::time::Instant::now();
        let _ = setup.age.take().unwrap().send(());
        setup.driven.await.unwrap();
        assert!(setup.graceful.load(Ordering::Acquire));
        assert_eq!(started.elapsed(), FLUSH_GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn an_aged_connections_streams_go_on_for_the_grace_then_end() {
        let mut setup = setup();
        let stream = setup.busy.stream();
        tokio::task::yield_now().await;
        let aged_at = tokio::time::Instant::now();
        let _ = setup.age.take().unwrap().send(());
        tokio::time::sleep(AGE_GRACE - Duration::from_secs(1)).await;
        assert!(setup.graceful.load(Ordering::Acquire));
        assert!(!setup.busy.leaving(), "its stream goes on");
        assert!(!setup.driven.is_finished());
        tokio::time::sleep(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(
            setup.busy.going(),
            Some(Going::Aged),
            "its stream told to end"
        );
        drop(stream); // it ended once what it read was answered
        setup.driven.await.unwrap();
        assert_eq!(aged_at.elapsed(), AGE_GRACE + FLUSH_GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_the_port_shuts_it_down_gracefully_and_waits() {
        let setup = setup();
        tokio::task::yield_now().await;
        setup.stop.send_replace(true);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(setup.graceful.load(Ordering::Acquire));
        assert!(!setup.busy.leaving(), "its calls finish as they would");
        assert!(!setup.driven.is_finished());
        close(&setup);
        setup.driven.await.unwrap();
    }
}
