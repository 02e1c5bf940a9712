//! A counter that many threads add to without sharing a cache line.
//!
//! Each thread adds to one of [`STRIPES`] cache-line-sized stripes (chosen
//! once per thread, round robin); reading sums them. For counts bumped on
//! every request by every handler thread, where one shared atomic would move
//! its cache line between cores on each bump.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter: more than the threads a broker runs on a few cores.
pub(crate) const STRIPES: usize = 16;

/// One stripe, alone on its cache line (128 bytes: two lines on CPUs that
/// fetch lines in pairs).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe(AtomicU64);

/// The striped counter (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct StripedCounter {
    stripes: [Stripe; STRIPES],
}

/// This thread's stripe.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

impl StripedCounter {
    /// Adds one.
    pub(crate) fn increment(&self) {
        self.stripes[stripe()].0.fetch_add(1, Ordering::Relaxed);
    }

    /// The sum of all additions so far (exact once the adders are quiet).
    pub(crate) fn sum(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_what_every_thread_added() {
        let counter = StripedCounter::default();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        counter.increment();
                    }
                });
            }
        });
        counter.increment();
        assert_eq!(counter.sum(), 4001);
    }
}
