//! The W2 operation, Kafka's `FakeOperation`, and what every operation of a
//! run shares.
//!
//! [`W2Op`] holds 100 bytes of data inline (no second allocation: the
//! operation's one allocation is `Operation::new`'s), its due time
//! `creation + latency` in whole ms since the run's origin, and a
//! `&'static` reference to the run's [`Ctx`] (leaked once per run, so that
//! no per-request reference count is shared between threads).
//! `try_complete` is true once the clock, in whole ms as Kafka's
//! `currentTimeMillis`, has reached the due time; it reads the reading the
//! calling thread published just before acting ([`Ctx::publish_ms`]), so
//! that a `check_and_complete` scan over thousands of requests costs a load
//! per request rather than a clock read.

use parking_lot::{Condvar, Mutex};
use purgatory::DelayedOperation;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes of data each request holds (Kafka's 2015 benchmark).
pub const DATA_BYTES: usize = 100;

/// A value on a cache line of its own (two lines, for adjacent-line
/// prefetching), so that counters written by one thread do not slow down
/// reads of neighbouring fields by others.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// What every operation of a run shares: the clock origin, the timeout, the
/// millisecond clock `try_complete` reads, and the callback counters.
/// Leaked once per run (see the module docs).
#[derive(Debug)]
pub struct Ctx {
    origin: Instant,
    timeout: Duration,
    /// The clock in whole ms, as last read by the generator or the
    /// completion thread (each publishes its reading before it acts).
    now_ms: Padded<AtomicU64>,
    /// `on_complete` calls.
    pub(crate) on_complete: Padded<AtomicU64>,
    /// `on_expiration` calls.
    expired: Padded<AtomicU64>,
    /// Second `on_complete` calls on one operation.
    pub(crate) double: Padded<AtomicU64>,
    /// How many expirations the run waits for ([`u64::MAX`] until known).
    expire_goal: AtomicU64,
    /// Signalled when `expired` reaches `expire_goal`.
    all_expired: (Mutex<()>, Condvar),
}

impl Ctx {
    /// Counters at zero, the clock starting now.
    pub fn new(timeout: Duration) -> Self {
        Ctx {
            origin: Instant::now(),
            timeout,
            now_ms: Padded::default(),
            on_complete: Padded::default(),
            expired: Padded::default(),
            double: Padded::default(),
            expire_goal: AtomicU64::new(u64::MAX),
            all_expired: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Reads the clock: whole milliseconds since the origin (truncated, as
    /// Kafka's `currentTimeMillis` is).
    #[inline]
    pub fn read_clock_ms(&self) -> u64 {
        let d = self.origin.elapsed();
        d.as_secs() * 1000 + u64::from(d.subsec_millis())
    }

    /// Publishes a clock reading for `try_complete` (the clock only moves
    /// forward).
    #[inline]
    pub fn publish_ms(&self, now_ms: u64) {
        if self.now_ms.0.load(Ordering::Relaxed) < now_ms {
            self.now_ms.0.fetch_max(now_ms, Ordering::Relaxed);
        }
    }

    /// The last published clock reading.
    #[inline]
    pub fn published_ms(&self) -> u64 {
        self.now_ms.0.load(Ordering::Relaxed)
    }

    /// The instant `ms` whole milliseconds after the origin.
    pub fn instant_at(&self, ms: u64) -> Instant {
        self.origin + Duration::from_millis(ms)
    }

    /// `on_expiration` calls so far.
    pub fn expired(&self) -> u64 {
        self.expired.0.load(Ordering::SeqCst)
    }

    /// Waits until `goal` operations have expired, or until `give_up`.
    pub(crate) fn wait_for_expirations(&self, goal: u64, give_up: Instant) {
        self.expire_goal.store(goal, Ordering::SeqCst);
        let (lock, cv) = &self.all_expired;
        let mut guard = lock.lock();
        while self.expired() < goal {
            let now = Instant::now();
            if now >= give_up {
                break;
            }
            // Woken by the expiration that reaches the goal; the timeout
            // is only a safety net.
            cv.wait_for(&mut guard, (give_up - now).min(Duration::from_millis(200)));
        }
    }
}

/// Kafka's `FakeOperation`: completes once the clock reaches its due time.
#[derive(Debug)]
pub struct W2Op {
    ctx: &'static Ctx,
    /// `creation + latency`, whole ms since the origin.
    due_ms: u64,
    /// Set by the first `on_complete`.
    done: AtomicBool,
    /// The request's payload (never read).
    _data: [u8; DATA_BYTES],
}

impl W2Op {
    /// An operation of `ctx`'s run, due at `due_ms`.
    pub fn new(ctx: &'static Ctx, due_ms: u64) -> Self {
        W2Op {
            ctx,
            due_ms,
            done: AtomicBool::new(false),
            _data: [0; DATA_BYTES],
        }
    }
}

impl DelayedOperation for W2Op {
    fn timeout(&self) -> Duration {
        self.ctx.timeout
    }

    /// Whether the clock has reached the due time. The clock is the reading
    /// published by the thread calling (the generator publishes its reading
    /// before it creates and watches a request, the completion thread before
    /// it completes due ones), so this is a load, not a clock read: a
    /// `check_and_complete` scan tries every watched request.
    fn try_complete(&self) -> bool {
        self.ctx.published_ms() >= self.due_ms
    }

    fn on_complete(&self) {
        if self.done.swap(true, Ordering::Relaxed) {
            self.ctx.double.0.fetch_add(1, Ordering::Relaxed);
        }
        self.ctx.on_complete.0.fetch_add(1, Ordering::Release);
    }

    fn on_expiration(&self) {
        let ctx = self.ctx;
        let expired = ctx.expired.0.fetch_add(1, Ordering::SeqCst) + 1;
        if expired >= ctx.expire_goal.load(Ordering::SeqCst) {
            let _guard = ctx.all_expired.0.lock();
            ctx.all_expired.1.notify_all();
        }
    }
}
