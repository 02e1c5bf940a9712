//! Error values of the timer crate.
//!
//! Bad configuration and use after shutdown are reported as values, never as
//! panics; where a call hands over a task, the error gives it back.

use std::fmt;

/// A timer or timing-wheel configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The tick is zero: the wheel could never advance.
    ZeroTick,
    /// The tick is not a whole number of milliseconds (the wheel counts in ms).
    TickNotWholeMillis,
    /// The tick is longer than [`MAX_TICK_MS`](crate::MAX_TICK_MS) (about
    /// 584 years, the range of a [`Clock`](crate::Clock)): no clock could
    /// reach the end of a tick, so nothing would ever fire.
    TickTooLarge {
        /// The tick asked for, ms.
        requested_ms: u64,
        /// The largest tick accepted, ms.
        max_ms: u64,
    },
    /// The wheel size is outside the accepted range: fewer than 2 buckets
    /// (a level could never cover more than one tick, so overflow levels would
    /// never end), or more than a bucket index can address.
    WheelSizeOutOfRange {
        /// The size asked for.
        requested: usize,
        /// The smallest size accepted.
        min: usize,
        /// The largest size accepted.
        max: usize,
    },
    /// The number of shards is outside the accepted range.
    ShardsOutOfRange {
        /// The number asked for.
        requested: usize,
        /// The smallest number accepted.
        min: usize,
        /// The largest number accepted.
        max: usize,
    },
    /// A thread the timer needs (its executor) could not be spawned.
    Spawn(String),
    /// The name holds a NUL byte, which no thread name (the executor's and
    /// the reaper's carry it) may hold.
    NameHasNul,
    /// A wheel's start time is at or past the last tick it can schedule in
    /// (deadlines are clamped to [`MAX_DEADLINE_MS`](crate::MAX_DEADLINE_MS)):
    /// every task would be clamped to a deadline already passed and handed
    /// back as due, early.
    StartTooLate {
        /// The start asked for, ms.
        requested_ms: u64,
        /// The latest start accepted with this tick, ms.
        max_ms: u64,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroTick => f.write_str("timer tick must be at least 1 ms"),
            ConfigError::TickNotWholeMillis => {
                f.write_str("timer tick must be a whole number of milliseconds")
            }
            ConfigError::TickTooLarge {
                requested_ms,
                max_ms,
            } => write!(
                f,
                "timer tick {requested_ms} ms is longer than the maximum {max_ms} ms"
            ),
            ConfigError::WheelSizeOutOfRange {
                requested,
                min,
                max,
            } => write!(f, "wheel size {requested} is outside {min}..={max}"),
            ConfigError::ShardsOutOfRange {
                requested,
                min,
                max,
            } => write!(f, "shard count {requested} is outside {min}..={max}"),
            ConfigError::Spawn(e) => write!(f, "cannot spawn the timer's thread: {e}"),
            ConfigError::NameHasNul => f.write_str("timer name must not contain a NUL byte"),
            ConfigError::StartTooLate {
                requested_ms,
                max_ms,
            } => write!(
                f,
                "timing wheel start {requested_ms} ms is later than the latest accepted, {max_ms} ms"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The timer has been shut down; the task that could not be scheduled is
/// given back.
#[derive(PartialEq, Eq)]
pub struct ShutdownError<T>(pub T);

impl<T> ShutdownError<T> {
    /// The task that was not scheduled.
    pub fn into_inner(self) -> T {
        self.0
    }

    /// The same error with the task dropped: `Send + Sync + 'static`
    /// whatever the task, so that `?` can pass it on as
    /// `Box<dyn Error + Send + Sync>` (or `anyhow::Error`), which a boxed
    /// closure (not `Sync`) prevents.
    ///
    /// ```
    /// use std::time::Duration;
    /// use timer::Timer;
    ///
    /// fn arm(timer: &Timer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    ///     timer
    ///         .add(Duration::from_secs(1), Box::new(|| {}))
    ///         .map_err(|e| e.without_task())?;
    ///     Ok(())
    /// }
    ///
    /// let timer: Timer = Timer::new();
    /// timer.shutdown();
    /// assert!(arm(&timer).is_err());
    /// ```
    pub fn without_task(self) -> ShutdownError<()> {
        ShutdownError(())
    }
}

impl<T> fmt::Debug for ShutdownError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ShutdownError(..)")
    }
}

impl<T> fmt::Display for ShutdownError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the timer has been shut down")
    }
}

impl<T> std::error::Error for ShutdownError<T> {}
