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
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::RwLock;

/// What a clock calls when it moves by hand; see [`Clock::subscribe`].
pub type OnMove = dyn Fn() + Send + Sync;

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

    /// Asks to have `on_move` called whenever this clock moves otherwise
    /// than with real time (a [`ManualClock`] set or advanced by hand), so
    /// that a thread sleeping until a reading (a timer's `advance_clock`, a
    /// [`DelayQueue`](crate::DelayQueue) poll) looks again at once instead
    /// of when its real-time wait ends. The clock holds `on_move` weakly:
    /// dropping it unsubscribes. `on_move` runs on the thread that moved
    /// the clock; it must be quick and must not subscribe to this clock. A
    /// clock that moves with real time needs nothing (the default), as a
    /// sleeper wakes when the reading it waits for comes; a clock that
    /// reads another by hand (a wrapper around a [`ManualClock`]) forwards
    /// the call to it. Such a clock must not move the clock it forwards to
    /// from inside [`now_nanos`](Self::now_nanos): a sleeper reads the clock
    /// holding the lock that `on_move` takes.
    fn subscribe(&self, on_move: Weak<OnMove>) {
        let _ = on_move;
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
///
/// A thread blocked on a timer or a [`DelayQueue`](crate::DelayQueue) that
/// reads this clock looks again as soon as the clock moves (see
/// [`Clock::subscribe`]): a reaper on a manual clock fires what the move
/// made due at once, not when its poll interval ends (for a simulation that
/// runs on it; a test that asserts what fired drives the timer itself, with
/// no reaper: see [`Timer::wait_for_executor`](crate::Timer::wait_for_executor)).
#[derive(Clone, Default)]
pub struct ManualClock {
    shared: Arc<ManualTime>,
}

#[derive(Default)]
struct ManualTime {
    nanos: AtomicU64,
    /// Whether `subscribers` may hold a live one: moving a clock nobody
    /// subscribed to takes no lock.
    any_subscriber: AtomicBool,
    /// Read-locked by every move (a simulation moves the clock every
    /// millisecond), write-locked only to subscribe.
    subscribers: RwLock<Vec<Weak<OnMove>>>,
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
    /// Subscribers are told only if the reading changed.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // fetch_update never fails here: the closure always returns Some.
        let before = self
            .shared
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_add(by))
            })
            .unwrap_or_else(|now| now);
        if before.saturating_add(by) != before {
            self.moved();
        }
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance_ms(&self, ms: u64) {
        self.advance(Duration::from_millis(ms));
    }

    /// Sets the clock to `to` after its origin. Returns whether it moved:
    /// a clock never goes backwards, so a `to` earlier than the current
    /// reading leaves it unchanged (`false`), and setting the current
    /// reading again moves nothing (`false`, and no subscriber is told).
    pub fn set(&self, to: Duration) -> bool {
        let to = u64::try_from(to.as_nanos()).unwrap_or(u64::MAX);
        let moved = self.shared.nanos.fetch_max(to, Ordering::AcqRel) < to;
        if moved {
            self.moved();
        }
        moved
    }

    /// Sets the clock to `ms` milliseconds after its origin; see [`ManualClock::set`].
    pub fn set_ms(&self, ms: u64) -> bool {
        self.set(Duration::from_millis(ms))
    }

    /// Tells the subscribers that the clock moved (after the move, so that
    /// a sleeper they wake reads the new time). The calls run under the
    /// list's read lock: an `on_move` must not subscribe (see
    /// [`Clock::subscribe`]).
    fn moved(&self) {
        // After the move, before looking: a first subscriber sets the flag,
        // fences, then reads the time (`DelayQueue`'s sleeper count), so
        // either it reads the new time or this finds it subscribed.
        fence(Ordering::SeqCst);
        if !self.shared.any_subscriber.load(Ordering::Acquire) {
            return;
        }
        for on_move in self.shared.subscribers.read().iter() {
            if let Some(on_move) = on_move.upgrade() {
                on_move();
            }
        }
    }
}

impl Clock for ManualClock {
    fn now_nanos(&self) -> u64 {
        self.shared.nanos.load(Ordering::Acquire)
    }

    fn subscribe(&self, on_move: Weak<OnMove>) {
        let mut subscribers = self.shared.subscribers.write();
        // Forget those gone here too: clocks whose timers come and go
        // without the clock moving would keep them all.
        subscribers.retain(|s| s.strong_count() > 0);
        subscribers.push(on_move);
        self.shared.any_subscriber.store(true, Ordering::Release);
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
