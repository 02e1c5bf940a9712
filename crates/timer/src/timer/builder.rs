//! Configuring a [`Timer`]: tick, wheel size, shards, clock and name.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use super::shard::{Shard, ShardState};
use super::{Timer, TimerTask};
use crate::clock::NANOS_PER_MS;
use crate::delay_queue::DelayQueue;
use crate::entries::MAX_SHARDS;
use crate::executor::Executor;
use crate::shutdown_gate::ShutdownGate;
use crate::wheel::TimingWheel;
use crate::{Clock, ConfigError, SystemClock};

/// Configures and builds a [`Timer`]. Defaults follow Kafka: tick 1 ms,
/// wheel size 20, real time ([`SystemClock`]).
///
/// ```
/// use std::time::Duration;
/// use timer::{ManualClock, Timer, TimerBuilder};
///
/// let timer: Timer = TimerBuilder::new()
///     .tick(Duration::from_millis(10))
///     .wheel_size(64)
///     .clock(ManualClock::new())
///     .name("session-timeouts")
///     .build()
///     .unwrap();
/// assert_eq!(timer.name(), "session-timeouts");
/// assert!(TimerBuilder::new().wheel_size(0).build::<Box<dyn FnOnce() + Send>>().is_err());
/// ```
#[derive(Debug, Clone)]
pub struct TimerBuilder {
    tick: Duration,
    wheel_size: usize,
    shards: Option<usize>,
    clock: Option<Arc<dyn Clock>>,
    name: String,
}

impl TimerBuilder {
    /// A builder with Kafka's defaults (the same as [`Timer::builder`], which
    /// needs the task type named: `Timer::<MyTask>::builder()`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Width of a level-0 bucket: a whole number of milliseconds, at least 1.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// Buckets per wheel level, 2 to [`MAX_WHEEL_SIZE`](crate::MAX_WHEEL_SIZE)
    /// (65,536). Each bucket takes about 72 bytes in every level of every
    /// shard's wheel, whether or not it holds a task: with Kafka's 20, under
    /// 2 KiB a level; with 65,536 buckets and 64 shards, about 300 MB before
    /// the first task, and as much again for each overflow level a far
    /// deadline creates.
    pub fn wheel_size(mut self, wheel_size: usize) -> Self {
        self.wheel_size = wheel_size;
        self
    }

    /// Number of independently locked wheels, 1 to 64 (default: the number
    /// of CPUs the process may use). Threads that add at the same time
    /// contend only when they share a shard.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// The clock to read (default: a new [`SystemClock`]).
    pub fn clock(self, clock: impl Clock) -> Self {
        self.shared_clock(Arc::new(clock))
    }

    /// A clock shared with other components.
    pub fn shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The timer's name, used for its threads (`executor-<name>`, and the
    /// reaper's `ExpirationReaper-<name>`) and logs. Linux shows the first
    /// 15 bytes of a thread's name in `top`, `perf` and `/proc`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Builds the timer and starts its executor thread.
    pub fn build<T: TimerTask>(self) -> Result<Timer<T>, ConfigError> {
        if self.tick.is_zero() {
            return Err(ConfigError::ZeroTick);
        }
        if self.tick.subsec_nanos() % NANOS_PER_MS as u32 != 0 {
            return Err(ConfigError::TickNotWholeMillis);
        }
        let tick_ms = u64::try_from(self.tick.as_millis()).unwrap_or(u64::MAX);
        let shards = self.shards.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_SHARDS))
        });
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(ConfigError::ShardsOutOfRange {
                requested: shards,
                min: 1,
                max: MAX_SHARDS,
            });
        }
        if self.name.contains('\0') {
            return Err(ConfigError::NameHasNul);
        }
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(SystemClock::new()) as Arc<dyn Clock>);
        let start = clock.now_ms();
        let shards = (0..shards)
            .map(|i| {
                let queue = Arc::new(DelayQueue::with_shared_clock(clock.clone()));
                let mut wheel = TimingWheel::with_queue(tick_ms, self.wheel_size, start, queue)?;
                wheel.set_shard(i);
                wheel.defer_freeing();
                Ok(CachePadded::new(Shard {
                    state: Mutex::new(ShardState {
                        wheel,
                        armed: u64::MAX,
                        queued: Vec::new(),
                        share: None,
                    }),
                    size: AtomicUsize::new(0),
                    advancer_waiting: AtomicBool::new(false),
                }))
            })
            .collect::<Result<Box<[_]>, ConfigError>>()?;
        let executor =
            Executor::start(&self.name).map_err(|e| ConfigError::Spawn(e.to_string()))?;
        Ok(Timer {
            shards,
            queue: DelayQueue::with_shared_clock(clock.clone()),
            clock,
            executor,
            shut_down: AtomicBool::new(false),
            shutdown_gate: ShutdownGate::new(),
            handing_over: AtomicUsize::new(0),
            stops: AtomicUsize::new(0),
            name: self.name,
            tick_ms,
        })
    }
}

impl Default for TimerBuilder {
    fn default() -> Self {
        TimerBuilder {
            tick: Duration::from_millis(1),
            wheel_size: 20,
            shards: None,
            clock: None,
            name: "timer".to_owned(),
        }
    }
}
