//! Thread stripes: each thread's index (`timer::internal::thread_index`, assigned
//! round-robin on first use, the one the timer picks its shard by) spreads
//! threads over a fixed number of stripes, so that threads working at the
//! same time rarely write the same cache line. The retire
//! queue and the purgatory's counters are striped this way.
//!
//! Invariant: [`StripedCounter::sum`] is the sum of every `add` less every
//! `sub`, whichever stripes they landed on, and every `sub` happens after
//! the `add` it counts out (the callers order them with a lock). A stripe
//! keeps what it counted in and what it counted out apart, both only
//! growing: one thread counts an operation in, another counts it out, so a
//! stripe's net count drifts without bound, and a read that summed net
//! counts while preempted halfway would be off by everything counted
//! meanwhile. `sum` reads the outs, then the ins, then the outs again, and
//! trusts the read only if no out came in between (see there).

use crate::sync::{AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use timer::internal::thread_index;

/// The calling thread's stripe of `stripes` (a power of two long, as
/// [`count`] gives).
pub(crate) fn own<T>(stripes: &[T]) -> &T {
    own_at(stripes, thread_index())
}

/// The stripe of `stripes` for thread index `index`.
fn own_at<T>(stripes: &[T], index: usize) -> &T {
    debug_assert!(stripes.len().is_power_of_two());
    &stripes[index & (stripes.len() - 1)]
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
    cells: Box<[CachePadded<Cell>]>,
}

/// One stripe: what it counted in and out, each only growing (wrapping).
struct Cell {
    ins: AtomicUsize,
    outs: AtomicUsize,
}

impl StripedCounter {
    pub(crate) fn new() -> Self {
        Self::with_stripes(count())
    }

    /// A counter of `stripes` stripes (a power of two).
    fn with_stripes(stripes: usize) -> Self {
        StripedCounter {
            cells: (0..stripes)
                .map(|_| {
                    CachePadded::new(Cell {
                        ins: AtomicUsize::new(0),
                        outs: AtomicUsize::new(0),
                    })
                })
                .collect(),
        }
    }

    /// Counts `n` in. `Release`, like `sub`, so that a reader that sees a
    /// count also sees what happened before it (see `sum_with`).
    pub(crate) fn add(&self, n: usize) {
        self.add_at(thread_index(), n);
    }

    /// Counts `n` out, of what an `add` that happened before counted in.
    pub(crate) fn sub(&self, n: usize) {
        self.sub_at(thread_index(), n);
    }

    fn add_at(&self, stripe: usize, n: usize) {
        own_at(&self.cells, stripe)
            .ins
            .fetch_add(n, Ordering::Release);
    }

    fn sub_at(&self, stripe: usize, n: usize) {
        own_at(&self.cells, stripe)
            .outs
            .fetch_add(n, Ordering::Release);
    }

    /// The count, read while other threads may count. When nothing is
    /// counted out during the call, it lies between the counts at the
    /// call's start and end. Otherwise it is never below the count at some
    /// moment of the call, and above it by at most what was counted out
    /// during the least disturbed of a few tries.
    pub(crate) fn sum(&self) -> usize {
        self.sum_with(|_| {})
    }

    /// `sum`, calling `between(try)` between each try's first two passes
    /// (tests use it to count in and out there).
    ///
    /// Why a try can be trusted, both by `Release` counting and `Acquire`
    /// reading: each `sub` happens after its `add`, so an out the first
    /// pass sees has its in seen by the second, and the result is never
    /// below the count when the first pass ended. An in the second pass sees
    /// carries with it every out that happened before it (a thread that
    /// counted an operation out and then another in, or one that took the
    /// lock after such a thread), so the third pass sees those outs too. If
    /// the third pass finds the outs unchanged, nothing left while the ins
    /// were read, and the ins only grew. If they changed, the try may count
    /// what left meanwhile: try again, keeping the smallest result (each is
    /// at least a true count).
    fn sum_with(&self, mut between: impl FnMut(usize)) -> usize {
        const TRIES: usize = 3;
        let outs = |cells: &[CachePadded<Cell>]| {
            cells.iter().fold(0usize, |sum, c| {
                sum.wrapping_add(c.outs.load(Ordering::Acquire))
            })
        };
        let mut best = usize::MAX;
        let mut first = outs(&self.cells);
        for attempt in 0..TRIES {
            between(attempt);
            let ins = self.cells.iter().fold(0usize, |sum, c| {
                sum.wrapping_add(c.ins.load(Ordering::Acquire))
            });
            let count = ins.wrapping_sub(first);
            debug_assert!(
                count <= isize::MAX as usize,
                "more counted out than in: a sub without its add"
            );
            let again = outs(&self.cells);
            if again == first {
                return count;
            }
            best = best.min(count);
            first = again;
        }
        best
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

    /// One thread watches an operation, another completes it: the count is
    /// always 0 or 1. A read preempted after the outs while that goes on
    /// a hundred times does not report the hundred.
    #[test]
    fn a_read_disturbed_by_traffic_retries_rather_than_report_it() {
        let c = Arc::new(StripedCounter::new());
        let cycle = |c: &Arc<StripedCounter>, times: usize| {
            for _ in 0..times {
                c.add(1);
                let other = c.clone();
                std::thread::spawn(move || other.sub(1)).join().unwrap();
            }
        };
        // Traffic during the first try only: the second is undisturbed.
        let seen = c.sum_with(|attempt| {
            if attempt == 0 {
                cycle(&c, 100);
            }
        });
        assert_eq!(seen, 0);
        // Traffic during every try: the least disturbed one counts.
        c.add(1);
        let seen = c.sum_with(|attempt| cycle(&c, 10 * (attempt + 1)));
        assert_eq!(seen, 1 + 10);
        assert_eq!(c.sum(), 1);
    }
}

/// `RUSTFLAGS="--cfg loom" cargo test -p purgatory --release --lib loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::AtomicBool;
    use loom::sync::Arc;
    use loom::thread;

    /// One thread counts an operation in and hands it over (as the
    /// operation lock does); the other counts it out and a new one in on its
    /// own stripe. The count is 0 or 1 throughout, and so is every read,
    /// however it interleaves (with `add` counting `Relaxed`, a trusted try
    /// could miss the out before the second in and read 2).
    #[test]
    fn a_read_is_never_below_zero_nor_above_what_was_pending() {
        loom::model(|| {
            let c = Arc::new(StripedCounter::with_stripes(2));
            let handed = Arc::new(AtomicBool::new(false));
            let watcher = {
                let (c, handed) = (c.clone(), handed.clone());
                thread::spawn(move || {
                    c.add_at(0, 1);
                    handed.store(true, Ordering::Release);
                })
            };
            let completer = {
                let (c, handed) = (c.clone(), handed.clone());
                thread::spawn(move || {
                    while !handed.load(Ordering::Acquire) {
                        thread::yield_now();
                    }
                    c.sub_at(1, 1);
                    c.add_at(1, 1);
                })
            };
            let seen = c.sum();
            assert!(seen <= 1, "read {seen} of at most 1 pending");
            watcher.join().unwrap();
            completer.join().unwrap();
            assert_eq!(c.sum(), 1);
        });
    }
}
