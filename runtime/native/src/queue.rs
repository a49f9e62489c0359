//! Arrived calls wait here for the Python side, which drains them all per wake-up. The queue signals through a
//! socket pair whose read end the asyncio loop watches (`add_reader`): one byte is written when the queue goes
//! from empty to non-empty, so a burst of calls wakes the loop once.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

pub struct WakeQueue<T> {
    items: Mutex<Vec<T>>,
    reader: UnixStream,
    writer: UnixStream,
}

impl<T> WakeQueue<T> {
    pub fn new() -> std::io::Result<Self> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        Ok(Self {
            items: Mutex::new(Vec::new()),
            reader,
            writer,
        })
    }

    /// The descriptor that turns readable when calls are waiting.
    pub fn fd(&self) -> RawFd {
        self.reader.as_raw_fd()
    }

    pub fn push(&self, item: T) {
        let first = {
            let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
            items.push(item);
            items.len() == 1
        };
        if first {
            // A full socket buffer means a wake-up is already pending: nothing is lost by not writing.
            let _ = (&self.writer).write(&[1]);
        }
    }

    /// Everything waiting. The wake-up bytes are consumed first, so a call pushed meanwhile either comes with
    /// this batch or writes a fresh byte (at worst one spurious, empty wake-up).
    pub fn take(&self) -> Vec<T> {
        let mut sink = [0u8; 64];
        loop {
            match (&self.reader).read(&mut sink) {
                Ok(n) if n == sink.len() => continue,
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break, // WouldBlock: drained
            }
        }
        std::mem::take(&mut *self.items.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes waiting on the wake-up socket (consumed).
    fn wakeups(queue: &WakeQueue<u32>) -> usize {
        let mut sink = [0u8; 64];
        (&queue.reader).read(&mut sink).unwrap_or(0)
    }

    #[test]
    fn a_burst_wakes_once_and_drains_in_order() {
        let queue = WakeQueue::new().unwrap();
        assert_eq!(wakeups(&queue), 0);
        for i in 0..5 {
            queue.push(i);
        }
        assert_eq!(wakeups(&queue), 1, "one wake-up byte for five calls");
        assert_eq!(queue.take(), vec![0, 1, 2, 3, 4]);
        assert!(queue.take().is_empty());
        queue.push(9);
        queue.take();
        assert_eq!(wakeups(&queue), 0, "take consumes the wake-up");
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
