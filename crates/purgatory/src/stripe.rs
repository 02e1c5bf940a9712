//! Thread stripes: each thread's index (`timer::internal::thread_index`, assigned
//! round-robin on first use, the one the timer picks its shard by) spreads
//! threads over a fixed number of stripes, so that threads working at the
//! same time rarely write the same cache line. The retire
//! queue and the watched counter are striped this way.
//!
//! Invariant: [`StripedCounter::sum`] is the sum of every `add` less every
//! `sub`, whichever stripes they landed on; a single stripe may go negative
//! (one thread counts an operation in, another counts it out).

use crate::sync::{AtomicIsize, Ordering};

use crossbeam_utils::CachePadded;
use timer::internal::thread_index;

/// The calling thread's stripe of `stripes` (a power of two long, as
/// [`count`] gives).
pub(crate) fn own<T>(stripes: &[T]) -> &T {
    debug_assert!(stripes.len().is_power_of_two());
    &stripes[thread_index() & (stripes.len() - 1)]
}

/// How many stripes a striped structure gets: two per available CPU, at
/// least 4 and at most 64, a power of two.
pub(crate) fn count() -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
    (2 * cpus).clamp(4, 64).next_power_of_two()
}

/// A counter that threads raise and lower on their own stripes (no cache
/// line shared between a thread counting in and one counting out); reading
/// it sums the stripes, O(stripes) whatever the count.
pub(crate) struct StripedCounter {
    cells: Box<[CachePadded<AtomicIsize>]>,
}

impl StripedCounter {
    pub(crate) fn new() -> Self {
        StripedCounter {
            cells: (0..count())
                .map(|_| CachePadded::new(AtomicIsize::new(0)))
                .collect(),
        }
    }

    pub(crate) fn add(&self, n: usize) {
        own(&self.cells).fetch_add(n as isize, Ordering::Relaxed);
    }

    pub(crate) fn sub(&self, n: usize) {
        own(&self.cells).fetch_sub(n as isize, Ordering::Relaxed);
    }

    /// The count (a snapshot while other threads count; never negative).
    pub(crate) fn sum(&self) -> usize {
        let sum: isize = self.cells.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        sum.max(0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_in_on_one_thread_and_out_on_another() {
        let c = Arc::new(StripedCounter::new());
        c.add(5);
        let other = c.clone();
        std::thread::spawn(move || other.sub(3)).join().unwrap();
        assert_eq!(c.sum(), 2);
        std::thread::spawn({
            let c = c.clone();
            move || c.sub(2)
        })
        .join()
        .unwrap();
        assert_eq!(c.sum(), 0);
        assert!(count().is_power_of_two() && (4..=64).contains(&count()));
    }
}
