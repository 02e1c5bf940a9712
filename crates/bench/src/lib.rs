//! Workload runner for the standard workloads of `BENCHMARKS.md`.
//!
//! The binary `purgatory-bench` (see `main.rs`) parses the command line and
//! prints tables; everything it measures lives in this library so that the
//! unit tests and the criterion benches can reach it:
//!
//! - [`w1`]: W1, timer churn on a virtual clock (single thread): this crate's
//!   `timer::TimingWheel` against [`peers::binary_heap`] and tokio-util's
//!   `DelayQueue` on a paused runtime.
//! - [`w2`]: W2, the purgatory under Kafka's purgatory performance tool's
//!   load: `purgatory::Purgatory` with completion by force-complete
//!   (`purgatory`) or through `check_and_complete` (`purgatory_check`), and
//!   the `tokio_notify` peer in both modes.
//! - [`w3`]: W3, concurrent adds on the real clock with a reaper running:
//!   `timer::Timer` + `timer::Reaper` against [`peers::mutex_binary_heap`].
//! - [`w4`]: W4, millions of pending operations (fill, check, expiry,
//!   burst, shutdown): the purgatory against [`peers::tokio_notify`].
//! - [`burst`]: N timer tasks sharing one deadline after a churn that
//!   scatters the timer's arena (W4 phase D on the timer alone).
//! - [`limits`]: the ranges the command line accepts.
//! - [`cli`]: the command line of `purgatory-bench`.
//! - [`progress`]: progress lines on standard error while a run goes on.
//! - [`wakeups`]: the CPU one wake-up costs, by primitive: the floor under
//!   W2's CPU per request at paced rates.
//! - [`rng`]: the seeded SplitMix64 every workload draws its delays from.
//! - [`measure`]: what every workload measures with: CPU time, resident
//!   memory (Linux `/proc`, degrading to `None` elsewhere), the cost of a
//!   wake-up, and running one implementation in a child process of the
//!   runner, so that each gets a clean address space for its memory figures.
//! - [`stats`]: percentiles and medians.
//! - [`report`]: flat JSON records (written and read back by hand), the
//!   aggregation of rounds into medians, and plain-text tables.
//!
//! Each workload module has the same shape: a parameter struct, a `run`
//! function per implementation returning a result that converts to a
//! [`report::Record`], and a list of target checks.
#![warn(missing_docs, missing_debug_implementations)]

pub mod burst;
pub mod cli;
pub mod limits;
pub mod measure;
pub mod peers;
pub mod progress;
pub mod report;
pub mod rng;
pub mod stats;
pub mod w1;
pub mod w2;
pub mod w3;
pub mod w4;
pub mod wakeups;

/// The global allocator the runner was built with: `"mimalloc"` with the
/// `mimalloc` feature, else `"system"` (glibc's malloc on Linux).
pub const ALLOCATOR: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "system"
};

/// Whether every round merged into `record` had exact counts (the runner
/// counts those in `exact_rounds`, with the workload's own test; a record
/// of one run has no such field), and a note for a check's description
/// when some did not: a median would otherwise hide a bad round.
pub fn exact_in_every_round(record: &report::Record) -> (bool, String) {
    match (record.num("exact_rounds"), record.num("rounds")) {
        (Some(k), Some(n)) if k < n => (false, format!(" (exact in {k} of {n} rounds)")),
        _ => (true, String::new()),
    }
}

/// One check of a published target ("timer total ≤ 0.8 × fastest peer"),
/// evaluated on the figures of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetCheck {
    /// What is checked, with the figures involved.
    pub description: String,
    /// Whether the target is met; `None` when a figure is missing.
    pub met: Option<bool>,
}

impl TargetCheck {
    /// A check whose outcome is known.
    pub fn new(description: impl Into<String>, met: bool) -> Self {
        TargetCheck {
            description: description.into(),
            met: Some(met),
        }
    }

    /// A check that could not be evaluated (a figure was missing).
    pub fn unknown(description: impl Into<String>) -> Self {
        TargetCheck {
            description: description.into(),
            met: None,
        }
    }

    /// `MET`, `MISSED` or `n/a`, for printing.
    pub fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "MET",
            Some(false) => "MISSED",
            None => "n/a",
        }
    }
}
