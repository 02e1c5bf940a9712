//! Monotonic time sources.
//!
//! Everything in this crate reads time through the [`Clock`] trait, never from
//! the wall clock, so that tests and simulations can run in virtual time
//! ([`ManualClock`]) and production code in real time ([`SystemClock`]).
//!
//! Invariant: a clock never goes backwards. [`ManualClock::set`] refuses to
//! move it back (see its docs), and [`SystemClock`] is built on
//! [`std::time::Instant`], which is monotonic.
//!
//! Clocks report nanoseconds so that deadlines can be rounded *up* to the next
//! millisecond: a task added at 10.3 ms with a delay of 5 ms is due at 15.3 ms
//! and therefore fires when the millisecond clock reads 16, never at 15.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Nanoseconds in one millisecond.
pub(crate) const NANOS_PER_MS: u64 = 1_000_000;

/// A monotonic clock measured from an arbitrary origin.
///
/// Implementations must be cheap to read (the timer reads the clock once per
/// `add`) and must never go backwards. One that does anyway makes timers
/// late, never early: a delay counts from the time a timer has reached.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Nanoseconds elapsed since this clock's origin.
    fn now_nanos(&self) -> u64;

    /// Whole milliseconds elapsed since this clock's origin (rounded down).
    fn now_ms(&self) -> u64 {
        self.now_nanos() / NANOS_PER_MS
    }
}

/// Real monotonic time, from [`std::time::Instant`]; the origin is the moment
/// the clock was created.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }

    /// The instant this clock counts from.
    pub fn origin(&self) -> Instant {
        self.origin
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_nanos(&self) -> u64 {
        // `as_nanos` is a u128; 2^64 ns is 584 years of uptime, so saturating
        // is only a formality.
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Virtual time, moved only by hand.
///
/// Cloning a `ManualClock` gives another handle to the *same* time, so a test
/// can keep one handle and give another to a timer or a purgatory:
///
/// ```
/// use std::time::Duration;
/// use timer::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(shared.now_ms(), 250);
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock reading `ms` milliseconds.
    pub fn starting_at_ms(ms: u64) -> Self {
        let clock = Self::new();
        clock.set_ms(ms);
        clock
    }

    /// Moves the clock forward by `by` (saturating at the end of time).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // fetch_update never fails here: the closure always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance_ms(&self, ms: u64) {
        self.advance(Duration::from_millis(ms));
    }

    /// Sets the clock to `to` after its origin. A clock never goes backwards:
    /// a `to` earlier than the current reading leaves the clock unchanged,
    /// and the call returns `false`.
    pub fn set(&self, to: Duration) -> bool {
        let to = u64::try_from(to.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_max(to, Ordering::AcqRel) <= to
    }

    /// Sets the clock to `ms` milliseconds after its origin; see [`ManualClock::set`].
    pub fn set_ms(&self, ms: u64) -> bool {
        self.set(Duration::from_millis(ms))
    }
}

impl Clock for ManualClock {
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_nanos", &self.now_nanos())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let mut last = clock.now_nanos();
        for _ in 0..1000 {
            let now = clock.now_nanos();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn manual_clock_moves_only_by_hand_and_never_back() {
        let clock = ManualClock::starting_at_ms(5);
        assert_eq!(clock.now_ms(), 5);
        clock.advance(Duration::from_micros(1500));
        assert_eq!(clock.now_nanos(), 6_500_000);
        assert_eq!(clock.now_ms(), 6);
        assert!(!clock.set_ms(3), "setting the clock back is refused");
        assert_eq!(clock.now_ms(), 6);
        assert!(clock.set_ms(10));
        assert_eq!(clock.now_ms(), 10);
    }

    #[test]
    fn manual_clock_saturates() {
        let clock = ManualClock::new();
        clock.advance(Duration::MAX);
        assert_eq!(clock.now_nanos(), u64::MAX);
        clock.advance_ms(1);
        assert_eq!(clock.now_nanos(), u64::MAX);
    }
}
