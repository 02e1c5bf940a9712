//! Configuring a purgatory: [`PurgatoryBuilder`] and [`ShutdownPolicy`].
//! (`PurgatoryBuilder::build` lives beside the purgatory it builds.)

use std::collections::hash_map::RandomState;
use std::sync::Arc;
use std::time::Duration;

use timer::{Clock, TimerBuilder};

use crate::watch::KeyHasher;

/// What [`Purgatory::shutdown`](crate::Purgatory::shutdown) (and dropping a purgatory) does with the
/// operations still pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShutdownPolicy {
    /// Kafka's behaviour: pending operations get no callback. They are
    /// unwatched, disarmed, left not completed, and returned by `shutdown()`.
    #[default]
    Drop,
    /// Each pending operation is expired as if its timeout had passed:
    /// `on_complete` then `on_expiration` run (on the thread calling
    /// `shutdown()`), and it is returned by `shutdown()`, completed.
    Expire,
}

/// Configures and builds a [`Purgatory`](crate::Purgatory); see [`Purgatory::builder`](crate::Purgatory::builder). `S`
/// is the key hasher (see [`hasher`](Self::hasher)).
#[derive(Debug, Clone)]
pub struct PurgatoryBuilder<S = RandomState> {
    pub(crate) name: String,
    /// Tick, wheel size and clock of the purgatory's timer.
    pub(crate) timer: TimerBuilder,
    pub(crate) reaper: bool,
    /// `None`: `Reaper::default_poll_interval` for the tick.
    pub(crate) reaper_poll_interval: Option<Duration>,
    pub(crate) shutdown_policy: ShutdownPolicy,
    pub(crate) shards: usize,
    pub(crate) hasher: S,
}

impl PurgatoryBuilder {
    /// The default number of watch-list shards (Kafka's).
    pub const DEFAULT_SHARDS: usize = 512;

    /// The most watch-list shards a purgatory may have (each is a lock, a
    /// key table and a cache line, allocated up front).
    pub const MAX_SHARDS: usize = 1 << 16;

    pub(crate) fn new(name: String) -> Self {
        PurgatoryBuilder {
            timer: TimerBuilder::new().name(name.clone()),
            name,
            reaper: true,
            reaper_poll_interval: None,
            shutdown_policy: ShutdownPolicy::Drop,
            shards: Self::DEFAULT_SHARDS,
            hasher: RandomState::new(),
        }
    }
}

impl<S> PurgatoryBuilder<S> {
    /// The hasher of watch keys (default: std's [`RandomState`], SipHash
    /// with a random seed, which resists keys chosen to collide). Every
    /// watch and check hashes its key once; with short keys SipHash is a
    /// noticeable part of a watch's cost (docs/PERFORMANCE.md has W2's
    /// figures with rustc's FxHasher), so a faster hasher pays where keys
    /// are not chosen by untrusted clients.
    /// Kafka's keys include client-chosen strings (group and transactional
    /// ids); keep a seeded, collision-resistant hasher for those.
    pub fn hasher<S2: KeyHasher>(self, hasher: S2) -> PurgatoryBuilder<S2> {
        PurgatoryBuilder {
            name: self.name,
            timer: self.timer,
            reaper: self.reaper,
            reaper_poll_interval: self.reaper_poll_interval,
            shutdown_policy: self.shutdown_policy,
            shards: self.shards,
            hasher,
        }
    }

    /// The clock timeouts are measured with (default: a new
    /// [`SystemClock`](timer::SystemClock)).
    pub fn clock(self, clock: impl Clock) -> Self {
        self.shared_clock(Arc::new(clock))
    }

    /// A clock shared with other components (e.g. several purgatories and a
    /// simulation driving one [`ManualClock`](timer::ManualClock)).
    pub fn shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.timer = self.timer.shared_clock(clock);
        self
    }

    /// The timer's tick (default 1 ms; a whole number of milliseconds). The
    /// reaper's poll interval must be at least the tick (its default, 200
    /// ms, becomes the tick when the tick is longer).
    pub fn tick(mut self, tick: Duration) -> Self {
        self.timer = self.timer.tick(tick);
        self
    }

    /// The number of buckets per timing-wheel level (default 20).
    pub fn wheel_size(mut self, wheel_size: usize) -> Self {
        self.timer = self.timer.wheel_size(wheel_size);
        self
    }

    /// The number of the timer's independently locked wheels, 1 to 64
    /// (default: the number of CPUs the process may use, at most 64). Each
    /// watch arms its timeout in one of them, chosen by the watching
    /// thread, so threads watching at once contend only when they share
    /// one; each costs a lock, a wheel and its buckets.
    /// [`build`](Self::build) refuses a count out of range with
    /// [`PurgatoryError::Config`](crate::PurgatoryError::Config).
    pub fn timer_shards(mut self, shards: usize) -> Self {
        self.timer = self.timer.shards(shards);
        self
    }

    /// Whether a reaper thread drives expiry (default `true`). Without it,
    /// operations expire only when [`Purgatory::advance_clock`](crate::Purgatory::advance_clock) is called:
    /// the setting for tests and virtual-time simulations. Except one
    /// watched with a zero timeout (or a `timeout` that panicked), which is
    /// due at once: the timer hands it to its executor thread as it is
    /// watched, whatever the clock, and `advance_clock(Duration::ZERO)`
    /// waits for such expirations too. Without a reaper, the `metrics`
    /// feature's gauges move only on `stats`, `advance_clock` and
    /// `shutdown`.
    pub fn reaper(mut self, enabled: bool) -> Self {
        self.reaper = enabled;
        self
    }

    /// How long the reaper waits for the next bucket per loop (default
    /// 200 ms, as Kafka, or the tick if longer). It wakes early when an
    /// earlier bucket is added and on shutdown, so this only bounds idle
    /// wake-ups. At least the tick: [`build`](Self::build) refuses a
    /// shorter one. With the `metrics`
    /// feature it is also how often the reaper sets the published gauges.
    pub fn reaper_poll_interval(mut self, poll: Duration) -> Self {
        self.reaper_poll_interval = Some(poll);
        self
    }

    /// What shutdown does with pending operations (default
    /// [`ShutdownPolicy::Drop`]).
    pub fn shutdown_policy(mut self, policy: ShutdownPolicy) -> Self {
        self.shutdown_policy = policy;
        self
    }

    /// The number of watch-list shards (default 512), rounded up to a power
    /// of two, at least 2. [`build`](Self::build) refuses 0 and more than
    /// [`MAX_SHARDS`](PurgatoryBuilder::MAX_SHARDS).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }
}
