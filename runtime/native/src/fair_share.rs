//! Places shared fairly among the addresses that want them: the gRPC port's connections (`--grpc-max-connections`)
//! and open streams (`--grpc-max-open-streams`), the HTTP and metrics ports' connections (`--http-max-connections`,
//! each port its own), and which one gives way to a newcomer when all are taken.
//!
//! Each is bounded for memory: a connection keeps what its busiest moment took, a stream holds its state for its
//! life. A bound that only refused the newcomer would let one peer that takes every place and keeps it (idle, or
//! quiet in a way no measure of "busy" can tell from a slow model's) shut every other client out. So when the
//! places are all taken, the address holding the most gives one up, its quietest (the one nothing has passed on for
//! longest), if it holds at least two more than the newcomer's address does: one address fills the places only
//! while no other asks, and is pushed back toward an equal share when others do. Otherwise (the newcomer's address
//! holds as many as any other, less one) the newcomer is refused.
//!
//! An address is a peer's IP address (an IPv4 one mapped into IPv6 is the same); clients behind one proxy or NAT
//! share its address and its share.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::oneshot;
use tokio::time::Instant;

/// The places of one bound, each taken by an address.
pub struct FairShare {
    limit: usize,
    table: Arc<Mutex<Table>>,
    epoch: Instant,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Open>,
    /// How many each address holds (so a refusal needs no pass over every place).
    counts: HashMap<Option<IpAddr>, usize>,
}

impl Table {
    fn insert(&mut self, id: u64, open: Open) {
        *self.counts.entry(open.peer).or_default() += 1;
        self.open.insert(id, open);
    }

    fn remove(&mut self, id: u64) -> Option<Open> {
        let open = self.open.remove(&id)?;
        if let Some(count) = self.counts.get_mut(&open.peer) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&open.peer);
            }
        }
        Some(open)
    }

    /// [`giving_way`] over the places taken, looking at each place only when one is to give way.
    fn giving_way(&self, peer: Option<IpAddr>) -> Option<u64> {
        let newcomer = self.counts.get(&peer).copied().unwrap_or(0);
        let most = self.counts.values().copied().max().unwrap_or(0);
        if most < newcomer + 2 {
            return None;
        }
        let holding_most: Vec<Option<IpAddr>> = self
            .counts
            .iter()
            .filter(|(_, count)| **count == most)
            .map(|(peer, _)| *peer)
            .collect();
        let held: Vec<Held> = self
            .open
            .iter()
            .filter(|(_, open)| holding_most.contains(&open.peer))
            .map(|(id, open)| Held {
                id: *id,
                order: open.order,
                peer: open.peer,
                heard: open.heard.load(Ordering::Relaxed),
            })
            .collect();
        giving_way(&held, peer)
    }
}

struct Open {
    /// Of equally quiet places, the one first in this order gives way.
    order: u64,
    peer: Option<IpAddr>,
    heard: Arc<AtomicU64>,
    /// Tells the holder to give way.
    close: oneshot::Sender<()>,
}

/// A place taken; dropped (the connection has closed, the stream ended), it is free.
pub struct Place {
    table: Arc<Mutex<Table>>,
    id: u64,
    heard: Heard,
    closed: oneshot::Receiver<()>,
}

/// One place taken, as the choice of which gives way sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub id: u64,
    /// When it came, among the bound's places: of two equally quiet, the one that came first gives way.
    pub order: u64,
    pub peer: Option<IpAddr>,
    /// Milliseconds from the bound's start to the last time something passed on it (or it was taken).
    pub heard: u64,
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    table
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn millis_since(epoch: Instant) -> u64 {
    millis_between(epoch, Instant::now())
}

fn millis_between(epoch: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
}

/// Which of the `open` places gives way to a newcomer from `peer` when all are taken: the quietest of the address
/// holding most (of two holding as many, the one whose quietest is quieter), if that address holds at least two
/// more than `peer` does; None if the newcomer is the one refused. Of equally quiet places, the one that came first
/// (`order`) gives way.
pub fn giving_way(open: &[Held], peer: Option<IpAddr>) -> Option<u64> {
    let mut by_peer: HashMap<Option<IpAddr>, (usize, Held)> = HashMap::new();
    for held in open {
        let entry = by_peer.entry(held.peer).or_insert((0, *held));
        entry.0 += 1;
        if (held.heard, held.order) < (entry.1.heard, entry.1.order) {
            entry.1 = *held;
        }
    }
    let newcomer = by_peer.get(&peer).map_or(0, |(count, _)| *count);
    let (count, quietest) = by_peer.into_values().max_by_key(|(count, quietest)| {
        (*count, std::cmp::Reverse((quietest.heard, quietest.order)))
    })?;
    (count >= newcomer + 2).then_some(quietest.id)
}

impl FairShare {
    pub fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            table: Arc::default(),
            epoch: Instant::now(),
        }
    }

    /// A place for a newcomer from `peer`; when all are taken, one taken from another address's quietest holder
    /// (which is told to give way); None when the newcomer is the one refused. Places come in the order they are
    /// admitted (a connection's, accepted one at a time).
    pub fn admit(&self, peer: Option<IpAddr>) -> Option<Place> {
        self.admit_arrived(peer, None)
    }

    /// [`FairShare::admit`] for a newcomer that came (`order`, `at`) before it was admitted: a stream, whose place
    /// in the order of arrival was taken as its HEADERS were read (crate::budget::Arrival), while the tasks of
    /// streams read together start in another order. It is quiet from when it came. None: from now, in the order
    /// of admission.
    pub fn admit_arrived(
        &self,
        peer: Option<IpAddr>,
        came: Option<(u64, Instant)>,
    ) -> Option<Place> {
        let peer = peer.map(|address| address.to_canonical());
        let (order, now) = match came {
            Some((order, at)) => (Some(order), millis_between(self.epoch, at)),
            None => (None, millis_since(self.epoch)),
        };
        let mut table = lock(&self.table);
        if table.open.len() >= self.limit {
            let id = table.giving_way(peer)?;
            if let Some(open) = table.remove(id) {
                let _ = open.close.send(());
            }
        }
        let id = table.next;
        table.next += 1;
        let heard = Arc::new(AtomicU64::new(now));
        let (close, closed) = oneshot::channel();
        table.insert(
            id,
            Open {
                order: order.unwrap_or(id),
                peer,
                heard: heard.clone(),
                close,
            },
        );
        Some(Place {
            table: self.table.clone(),
            id,
            heard: Heard {
                at: heard,
                epoch: self.epoch,
            },
            closed,
        })
    }

    /// How many places are taken.
    pub fn taken(&self) -> usize {
        lock(&self.table).open.len()
    }
}

/// Notes, for a place, that something has passed on its holder.
#[derive(Clone)]
pub struct Heard {
    at: Arc<AtomicU64>,
    epoch: Instant,
}

impl Heard {
    pub fn now(&self) {
        self.at.store(millis_since(self.epoch), Ordering::Relaxed);
    }
}

impl Place {
    /// Notes that something has passed on the holder (bytes read on a connection, a stream's message).
    pub fn heard(&self) {
        self.heard.now();
    }

    /// What notes it from elsewhere (a stream's reader task).
    pub fn hearing(&self) -> Heard {
        self.heard.clone()
    }

    /// True once the holder must give way to a newcomer (then the waker of `cx` is not kept).
    pub fn poll_given_way(&mut self, cx: &mut Context<'_>) -> bool {
        Pin::new(&mut self.closed).poll(cx).is_ready()
    }

    /// Once the holder must give way to a newcomer.
    pub async fn given_way(&mut self) {
        std::future::poll_fn(|cx| {
            if self.poll_given_way(cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        lock(&self.table).remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::task::Waker;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
    }

    fn held(id: u64, peer: u8, heard: u64) -> Held {
        Held {
            id,
            order: id,
            peer: ip(peer),
            heard,
        }
    }

    fn given_way(place: &mut Place) -> bool {
        place.poll_given_way(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn the_address_holding_most_gives_up_its_quietest() {
        let open = [
            held(0, 1, 50),
            held(1, 1, 10),
            held(2, 1, 30),
            held(3, 2, 0),
        ];
        assert_eq!(giving_way(&open, ip(3)), Some(1)); // 3 against 0
        assert_eq!(giving_way(&open, ip(2)), Some(1)); // 3 against 1
        assert_eq!(giving_way(&open, ip(1)), None); // its own address holds most
    }

    #[test]
    fn an_equal_share_keeps_its_places() {
        let open = [held(0, 1, 0), held(1, 1, 0), held(2, 2, 0), held(3, 2, 0)];
        assert_eq!(giving_way(&open, ip(1)), None);
        assert_eq!(giving_way(&open, ip(2)), None);
        // a third address is owed a place: of two holding as many, the one whose quietest is quieter gives it up
        let open = [
            held(0, 1, 20),
            held(1, 1, 40),
            held(2, 2, 5),
            held(3, 2, 90),
        ];
        assert_eq!(giving_way(&open, ip(3)), Some(2));
        // one more than the newcomer: a swap would not be fairer
        assert_eq!(
            giving_way(&[held(0, 1, 0), held(1, 1, 0), held(2, 2, 0)], ip(2)),
            None
        );
        assert_eq!(giving_way(&[], ip(1)), None);
    }

    #[test]
    fn of_equally_quiet_connections_the_oldest_gives_way() {
        let open = [held(7, 1, 3), held(4, 1, 3), held(9, 1, 3)];
        assert_eq!(giving_way(&open, ip(2)), Some(4));
    }

    #[tokio::test(start_paused = true)]
    async fn all_taken_the_newcomer_is_refused_or_another_addresses_quietest_told() {
        let places = FairShare::new(3);
        let mut first = places.admit(ip(1)).unwrap();
        tokio::time::advance(std::time::Duration::from_millis(5)).await;
        let mut second = places.admit(ip(1)).unwrap();
        let mut third = places.admit(ip(1)).unwrap();
        tokio::time::advance(std::time::Duration::from_millis(5)).await;
        first.heard(); // now the second is the quietest
        assert!(places.admit(ip(1)).is_none());
        let _other = places.admit(ip(2)).unwrap();
        assert!(given_way(&mut second));
        assert!(!given_way(&mut first) && !given_way(&mut third));
        assert_eq!(places.taken(), 3);
        drop(second); // its close: nothing more to free
        assert_eq!(places.taken(), 3);
        assert!(places.admit(ip(2)).is_none()); // 2 against 1: a swap would not be fairer
        drop(third);
        let _again = places.admit(ip(1)).unwrap(); // a place came back
        assert_eq!(places.taken(), 3);
    }

    #[test]
    fn the_counts_follow_places_given_way_and_freed() {
        let places = FairShare::new(3);
        let first: Vec<Place> = (0..3).map(|_| places.admit(ip(1)).unwrap()).collect();
        let second = places.admit(ip(2)).unwrap(); // 3 against 0: one of the first gives way
        drop(first); // the one that gave way is not counted twice
        assert_eq!(places.taken(), 1);
        let again: Vec<Place> = (0..2).map(|_| places.admit(ip(1)).unwrap()).collect();
        let third = places.admit(ip(3)).unwrap(); // 2 against 0
        assert!(places.admit(ip(4)).is_none()); // one each now
        assert!(places.admit(ip(1)).is_none());
        assert_eq!(places.taken(), 3);
        drop((second, third, again));
        assert_eq!(places.taken(), 0);
        let refilled: Vec<Place> = (0..3).map(|_| places.admit(ip(4)).unwrap()).collect();
        assert_eq!(refilled.len(), 3);
    }

    #[test]
    fn an_ipv4_address_mapped_into_ipv6_is_the_same_address() {
        let places = FairShare::new(2);
        let v4 = ip(1);
        let mapped = v4.map(|address| match address {
            IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
            v6 => v6,
        });
        let _a = places.admit(v4).unwrap();
        let _b = places.admit(mapped).unwrap();
        assert!(places.admit(mapped).is_none());
    }
}
