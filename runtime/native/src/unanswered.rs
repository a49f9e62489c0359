//! A port's count of the calls it has taken and not answered, one [`Unanswered`] per call: how an answer's
//! thread knows whether it is the only one the port awaits (crate::py_serving's `Answering`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// One call of a port's count of calls taken and not answered: counted from `answering` until its answer is
/// sent, or it is dropped unanswered.
pub struct Unanswered {
    count: Arc<AtomicUsize>,
    answered: AtomicBool,
}

impl Unanswered {
    pub fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self {
            count: count.clone(),
            answered: AtomicBool::new(false),
        }
    }

    /// Counts this call answered (once); the port's other calls still awaiting theirs.
    pub fn answer(&self) -> usize {
        if self.answered.swap(true, Ordering::AcqRel) {
            return self.count.load(Ordering::Acquire);
        }
        self.count.fetch_sub(1, Ordering::AcqRel) - 1
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.answered.swap(true, Ordering::AcqRel) {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_unanswered_until_its_answer_is_sent_or_it_is_dropped() {
        let count = Arc::new(AtomicUsize::new(0));
        let (first, second, third) = (
            Unanswered::new(&count),
            Unanswered::new(&count),
            Unanswered::new(&count),
        );
        assert_eq!(count.load(Ordering::Acquire), 3);
        assert_eq!(first.answer(), 2, "two others await theirs");
        assert_eq!(first.answer(), 2, "an answer counts once");
        drop(second); // cancelled, never answered
        assert_eq!(count.load(Ordering::Acquire), 1);
        assert_eq!(third.answer(), 0, "alone: its thread may write it");
        drop(first);
        drop(third);
        assert_eq!(
            count.load(Ordering::Acquire),
            0,
            "an answered call's drop counts nothing"
        );
    }
}
