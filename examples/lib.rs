//! What the runnable programs share: logging set up the same way, their
//! command lines (parsed and checked here, so that tests can check them
//! without running a program), and a scripted timeline on a manual clock for
//! the `produce` and `fetch` walkthroughs, so their output is the same on
//! every run.

pub mod async_produce_args;
pub mod cli;
pub mod fetch_args;
pub mod heartbeat_args;
pub mod plot;
pub mod produce_args;

use std::time::Duration;

use broker::ReplicaManager;
use timer::{Clock, ManualClock};

/// Logs through `env_logger` to stderr, at `warn` unless `RUST_LOG` says
/// otherwise, so that a program's own output stays legible.
pub fn init_logging() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
}

/// A broker on a manual clock, moved through a script by hand.
#[derive(Debug)]
pub struct Timeline {
    /// The clock the broker's purgatories run on.
    pub clock: ManualClock,
    /// The broker: its partitions and its produce and fetch purgatories.
    pub rm: ReplicaManager,
}

impl Timeline {
    /// A broker with no partitions, at virtual time 0.
    pub fn new() -> Self {
        let clock = ManualClock::new();
        let rm = ReplicaManager::with_manual_clock(&clock).expect("purgatories build");
        Timeline { clock, rm }
    }

    /// Moves virtual time to `ms`, expiring what is due.
    pub fn at(&self, ms: u64) {
        self.clock.set_ms(ms);
        while self.rm.advance_clock(Duration::ZERO) {}
    }

    /// Prints `what`, stamped with the virtual time.
    pub fn say(&self, what: impl AsRef<str>) {
        crate::outln!("t={:>4} ms  {}", self.clock.now_ms(), what.as_ref());
    }
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

/// The README's code blocks, compiled and run as doc tests so that they stay
/// true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
