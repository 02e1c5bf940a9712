//! What the operations of one W4 phase share, and the run's key draw.

use crate::measure::histogram::LatenessHistogram;
use crate::rng::SplitMix64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Timeout of phases A and E, ns (300 s: nothing expires before it is
/// checked or shut down).
pub const LONG_TIMEOUT_NS: u64 = 300_000_000_000;

/// The shared state of one phase's operations: the flag their condition
/// reads, and what happened to them. Leaked once per phase, so that an
/// operation holds a plain reference.
#[derive(Debug)]
pub struct Phase {
    origin: Instant,
    /// The condition every operation of the phase waits for.
    pub flag: AtomicBool,
    /// Completions (`on_complete`, whatever the cause).
    pub completed: AtomicU64,
    /// Expirations (`on_expiration`).
    pub expired: AtomicU64,
    /// Watches that have taken effect (the tokio peer: its task first ran).
    pub started: AtomicU64,
    /// Lateness of the expirations against each operation's deadline.
    pub lateness: LatenessHistogram,
}

impl Phase {
    /// A phase of the run whose clock starts at `origin`, leaked.
    pub fn leak(origin: Instant) -> &'static Phase {
        Box::leak(Box::new(Phase {
            origin,
            flag: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            started: AtomicU64::new(0),
            lateness: LatenessHistogram::default(),
        }))
    }

    /// Nanoseconds since the run's origin.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `ns` after the run's origin.
    pub fn instant_at(&self, ns: u64) -> Instant {
        self.origin + std::time::Duration::from_nanos(ns)
    }

    /// Whether the phase's condition holds.
    #[inline]
    pub fn ready(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// One operation completed.
    #[inline]
    pub fn complete(&self) {
        self.completed.fetch_add(1, Ordering::Release);
    }

    /// One operation, due `deadline_ns` after the origin, expired now.
    pub fn expire(&self, deadline_ns: u64) {
        let late = self.now_ns() as i64 - deadline_ns as i64;
        self.lateness.record(late);
        self.expired.fetch_add(1, Ordering::Release);
    }

    /// Reads a counter.
    pub fn count(counter: &AtomicU64) -> usize {
        counter.load(Ordering::Acquire) as usize
    }
}

/// Salt for the key stream.
const KEY_STREAM: u64 = 0x6b65_7934_0000_0005;

/// The key of each of `n` operations: uniform over `keys` keys (SplitMix64
/// from `seed`), or, with `keys == 0`, operation `i`'s own key `i`.
pub fn draw_keys(seed: u64, n: usize, keys: usize) -> Vec<u64> {
    if keys == 0 {
        return (0..n as u64).collect();
    }
    let mut rng = SplitMix64::new(seed ^ KEY_STREAM);
    (0..n).map(|_| rng.next_u64() % keys as u64).collect()
}

/// How many distinct keys phase B checks: `keys`, or `n` when every
/// operation has its own.
pub fn key_count(n: usize, keys: usize) -> usize {
    if keys == 0 {
        n
    } else {
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_uniform_or_distinct() {
        let k = draw_keys(42, 10_000, 10);
        assert!(k.iter().all(|&x| x < 10));
        assert!((0..10).all(|x| k.contains(&x)));
        assert_eq!(k, draw_keys(42, 10_000, 10));
        assert_eq!(draw_keys(42, 4, 0), [0, 1, 2, 3]);
        assert_eq!((key_count(5, 0), key_count(5, 3)), (5, 3));
    }
}
