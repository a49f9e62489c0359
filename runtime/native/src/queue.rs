//! Arrived calls wait here for the Python side, which drains them all per wake-up. The queue signals through an
//! eventfd the asyncio loop watches (`add_reader`): it is written when the queue goes from empty to non-empty, so
//! a burst of calls wakes the loop once. (An eventfd, not a socket pair: its write and read move a counter, where
//! a socket's allocate, account and free a buffer on every wake-up, on both sides.)
//! A port the loop's own thread drives (crate::on_loop) takes the calls queued during its turn from inside the
//! turn: a push on a thread in a turn does not signal, and the turn asks [`WakeQueue::waiting`] instead.

use std::fs::File;
use std::io::{Error, ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

pub struct WakeQueue<T> {
    items: Mutex<Vec<T>>,
    signal: File, // the eventfd (closed with the queue)
    waiting: AtomicBool,
    signalled: AtomicBool, // the eventfd was written since the last take (set after the write)
}

impl<T> WakeQueue<T> {
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a descriptor it returns is owned by the File from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os_error());
        }
        Ok(Self {
            items: Mutex::new(Vec::new()),
            // SAFETY: `fd` is a fresh descriptor nothing else owns.
            signal: unsafe { File::from_raw_fd(fd) },
            waiting: AtomicBool::new(false),
            signalled: AtomicBool::new(false),
        })
    }

    /// Whether calls wait (a push since the last take).
    pub fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// The descriptor that turns readable when calls are waiting.
    pub fn fd(&self) -> RawFd {
        self.signal.as_raw_fd()
    }

    pub fn push(&self, item: T) {
        let first = {
            let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
            items.push(item);
            self.waiting.store(true, Ordering::Release);
            items.len() == 1
        };
        if first && !crate::on_loop::in_turn() {
            // Fails only when the counter is at its maximum: a wake-up is pending, nothing is lost.
            let _ = (&self.signal).write(&1u64.to_ne_bytes());
            self.signalled.store(true, Ordering::Release);
        }
    }

    /// Everything waiting. The wake-up is consumed first (the counter read resets it), so a call pushed meanwhile
    /// either comes with this batch or signals afresh (at worst one spurious, empty wake-up). The counter is read
    /// where a push wrote it or where nothing waits: a turn's take, which no write preceded, makes no system call
    /// for it. A write whose flag this take missed (its thread between the two) leaves the descriptor readable;
    /// the take that wake-up brings finds nothing waiting and reads it, so the loop is not woken again and again
    /// until that thread runs.
    pub fn take(&self) -> Vec<T> {
        if self.signalled.swap(false, Ordering::AcqRel) || !self.waiting() {
            self.consume_signal();
        }
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        self.waiting.store(false, Ordering::Release);
        std::mem::take(&mut *items)
    }

    fn consume_signal(&self) {
        let mut count = [0u8; 8];
        loop {
            match (&self.signal).read(&mut count) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                _ => break, // read (reset), or WouldBlock: nothing was signalled
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Signals waiting on the eventfd (consumed).
    fn wakeups(queue: &WakeQueue<u32>) -> u64 {
        let mut count = [0u8; 8];
        match (&queue.signal).read(&mut count) {
            Ok(8) => u64::from_ne_bytes(count),
            _ => 0,
        }
    }

    #[test]
    fn a_burst_wakes_once_and_drains_in_order() {
        let queue = WakeQueue::new().unwrap();
        assert_eq!(wakeups(&queue), 0);
        for i in 0..5 {
            queue.push(i);
        }
        assert_eq!(wakeups(&queue), 1, "one wake-up for five calls");
        assert_eq!(queue.take(), vec![0, 1, 2, 3, 4]);
        assert!(queue.take().is_empty());
        queue.push(9);
        queue.take();
        assert_eq!(wakeups(&queue), 0, "take consumes the wake-up");
    }

    #[test]
    fn a_push_in_a_turn_does_not_signal() {
        let queue = std::sync::Arc::new(WakeQueue::new().unwrap());
        let rt = crate::on_loop::runtime().unwrap();
        rt.spawn({
            let queue = queue.clone();
            async move {
                queue.push(1);
                queue.push(2);
            }
        });
        assert!(!queue.waiting());
        crate::on_loop::turn(&rt, crate::on_loop::TURN_BUDGET, || false);
        assert!(queue.waiting());
        assert_eq!(wakeups(&queue), 0, "no wake-up written");
        assert_eq!(queue.take(), vec![1, 2]);
        assert!(!queue.waiting());
        queue.push(3); // not in a turn
        assert_eq!(wakeups(&queue), 1);
    }

    #[test]
    fn a_wake_up_whose_flag_is_late_is_consumed_by_the_empty_take_it_brings() {
        let queue = WakeQueue::new().unwrap();
        // a push's write, its thread not yet at the flag; a take then drains the call without reading the counter
        queue.items.lock().unwrap().push(1);
        queue.waiting.store(true, Ordering::Release);
        let _ = (&queue.signal).write(&1u64.to_ne_bytes());
        assert_eq!(queue.take(), vec![1]);
        // the descriptor is still readable: the loop wakes, and that take finds nothing and reads the counter
        assert!(queue.take().is_empty());
        assert_eq!(
            wakeups(&queue),
            0,
            "the loop is not woken again while the pusher is away"
        );
        queue.signalled.store(true, Ordering::Release); // the pusher's flag, late
        queue.push(2);
        assert_eq!(queue.take(), vec![2]);
        assert_eq!(wakeups(&queue), 0, "a signalled take consumes it");
    }

    #[test]
    fn a_take_with_calls_waiting_and_no_write_reads_nothing() {
        let queue = WakeQueue::new().unwrap();
        queue.items.lock().unwrap().push(1); // as a push in a turn: no write
        queue.waiting.store(true, Ordering::Release);
        let _ = (&queue.signal).write(&1u64.to_ne_bytes()); // a write this take cannot know of
        assert_eq!(queue.take(), vec![1]);
        assert_eq!(wakeups(&queue), 1, "no read: the counter is as it was");
    }

    #[test]
    fn pushes_from_threads_all_arrive() {
        let queue = std::sync::Arc::new(WakeQueue::new().unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let q = queue.clone();
                std::thread::spawn(move || (0..100).for_each(|i| q.push(t * 100 + i)))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let mut got = queue.take();
        got.sort();
        assert_eq!(got, (0..400).collect::<Vec<_>>());
    }
}
