//! Error values of the purgatory.
//!
//! Misuse (no keys, an operation handed over twice), use after shutdown and
//! bad configuration are reported as values, never as panics.

use std::fmt;

/// Why a purgatory call could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PurgatoryError {
    /// [`try_complete_else_watch`](crate::Purgatory::try_complete_else_watch)
    /// was given no keys: an operation must be watched under at least one.
    NoKeys,
    /// The purgatory has been shut down (or shut down while the call ran).
    Shutdown,
    /// The operation is already watched (by this or another purgatory); an
    /// operation is watched at most once at a time. (Also, from the key
    /// iterator of a watch that cancelled it, until that watch returns: see
    /// [`try_complete_else_watch`](crate::Purgatory::try_complete_else_watch).)
    AlreadyWatched,
    /// The operation has already completed; a completed operation is never
    /// watched again.
    AlreadyCompleted,
    /// The reaper poll interval is shorter than the tick: the reaper would
    /// wake that often for nothing (and spin at zero).
    ReaperPollInterval {
        /// The poll interval given.
        poll: std::time::Duration,
        /// The timer's tick.
        tick: std::time::Duration,
    },
    /// The timer configuration is invalid, or its threads could not start.
    Config(timer::ConfigError),
    /// The watch-list shard count given to
    /// [`PurgatoryBuilder::shards`](crate::PurgatoryBuilder::shards) is 0 or
    /// more than [`PurgatoryBuilder::MAX_SHARDS`](crate::PurgatoryBuilder::MAX_SHARDS).
    Shards(usize),
}

impl fmt::Display for PurgatoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PurgatoryError::NoKeys => {
                f.write_str("an operation must be watched under at least one key")
            }
            PurgatoryError::Shutdown => f.write_str("the purgatory has been shut down"),
            PurgatoryError::AlreadyWatched => f.write_str("the operation is already watched"),
            PurgatoryError::AlreadyCompleted => f.write_str("the operation has already completed"),
            PurgatoryError::ReaperPollInterval { poll, tick } => write!(
                f,
                "the reaper poll interval ({poll:?}) must be at least the tick ({tick:?})"
            ),
            PurgatoryError::Config(e) => write!(f, "invalid timer configuration: {e}"),
            PurgatoryError::Shards(n) => write!(
                f,
                "the shard count must be between 1 and {}, not {n}",
                crate::PurgatoryBuilder::MAX_SHARDS
            ),
        }
    }
}

impl std::error::Error for PurgatoryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PurgatoryError::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<timer::ConfigError> for PurgatoryError {
    fn from(e: timer::ConfigError) -> Self {
        PurgatoryError::Config(e)
    }
}
