//! W1 — timer churn on a virtual clock (single thread).
//!
//! The workload of `BENCHMARKS.md`: N tasks (default 1,000,000) with delays
//! uniform in `[1, 60,000]` ms drawn by [`crate::rng`] (seed 42) are added at
//! time 0; every task with an even index is cancelled; then the clock is
//! advanced to 60,001 ms, jumping from one due bucket (or deadline) to the
//! next, and the fired tasks are counted and checked against their
//! deadlines. Implementations:
//!
//! - `timer`: this project's `timer::TimingWheel<u64>` (tick 1 ms, wheel 20,
//!   start 0). The expire phase steps `now = next_expiration()` and calls
//!   `advance(now, …)` until the next expiration is past the horizon.
//! - `binary_heap`: [`LazyCancelHeap`](crate::peers::binary_heap::LazyCancelHeap), stepping to the top of the heap.
//! - `nexus_timer` (with the `nexus` feature): nexus-timer's wheel with its
//!   own defaults (module `nexus`).
//! - `tokio_delay_queue`: tokio-util's `DelayQueue<u64>` inside a
//!   current-thread runtime started paused; the runtime's paused clock
//!   auto-advances to the queue's next timer whenever the queue is pending.
//!
//! Timing: each phase is timed with `std::time::Instant`. Pre-sizing
//! (`reserve`/`with_capacity`) counts as part of *add*, for every
//! implementation alike. Generating the deadlines does not count anywhere.
//!
//! Memory: `bytes_per_task` is the growth of peak RSS over the add phase
//! divided by N ([`MemWindow`](crate::measure::rss::MemWindow)). It includes the handle `Vec` the harness
//! keeps for cancelling (12 B per task for `timer`, 8 B for `tokio_delay_queue`;
//! the heap cancels by its dense id and keeps a 1-byte state per task
//! instead), as the reference measurements did. The deadline array is
//! allocated before the window opens.
//!
//! Checks: a task fires *early* when its deadline is after the virtual time
//! at which it fired. A fired task that had been cancelled, a task that fires
//! twice, or a cancel that fails on a pending task counts as *bad*. Exactly
//! `N/2` tasks (the odd indices) must fire, with `early` and `bad` at 0.
//!
//! One module per implementation ([`wheel`], [`peers`], `nexus`), the bookkeeping
//! they share (`tally`), and the parameters and figures ([`params`],
//! [`result`]).

#[cfg(feature = "nexus")]
pub mod nexus;
pub mod params;
pub mod peers;
pub mod result;
mod tally;
pub mod wheel;

pub use params::W1Params;
pub use peers::{run_binary_heap, run_tokio_delay_queue};
pub use result::W1Result;
pub use wheel::run_timer;

use crate::progress::Progress;
use crate::report::Record;
use crate::TargetCheck;

/// Implementation names, in the order they are run and reported
/// (`nexus_timer` with the `nexus` feature only).
pub const IMPLS: &[&str] = if cfg!(feature = "nexus") {
    &["timer", "binary_heap", "tokio_delay_queue", "nexus_timer"]
} else {
    &["timer", "binary_heap", "tokio_delay_queue"]
};

/// Fields that get `_min`/`_max` companions when rounds are merged.
pub const SPREAD: &[&str] = &["total_ms"];

/// Table columns: `(heading, field)`.
pub const COLUMNS: &[(&str, &str)] = &[
    ("impl", "impl"),
    ("n", "n"),
    ("add ns", "add_ns"),
    ("cancel ns", "cancel_ns"),
    ("expire ns", "expire_ns"),
    ("total ms", "total_ms"),
    ("× fastest peer", "total_vs_fastest_peer"),
    ("min", "total_ms_min"),
    ("max", "total_ms_max"),
    ("B/task", "bytes_per_task"),
    ("fired", "fired"),
    ("early", "early"),
    ("bad", "bad"),
    ("rounds", "rounds"),
];

/// Runs implementation `impl_name` once.
pub fn run(
    impl_name: &str,
    params: &W1Params,
    progress: &mut Progress,
) -> Result<W1Result, String> {
    match impl_name {
        "timer" => run_timer(params, progress),
        "binary_heap" => Ok(run_binary_heap(params, progress)),
        "tokio_delay_queue" => run_tokio_delay_queue(params, progress),
        #[cfg(feature = "nexus")]
        "nexus_timer" => nexus::run_nexus_timer(params, progress),
        #[cfg(not(feature = "nexus"))]
        "nexus_timer" => Err("nexus_timer needs the runner built with `--features nexus`".into()),
        other => Err(format!(
            "unknown W1 implementation {other:?} (expected one of {IMPLS:?})"
        )),
    }
}

/// The fastest peer's name and total, ms, among `records`.
fn fastest_peer(records: &[Record]) -> Option<(&str, f64)> {
    records
        .iter()
        .filter(|r| r.str("impl") != Some("timer"))
        .filter_map(|r| Some((r.str("impl")?, r.num("total_ms")?)))
        .filter(|(_, total)| *total > 0.0)
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Adds `total_vs_fastest_peer` (our total over the fastest peer's, in the
/// same run) to the `timer` row.
pub fn annotate(records: &mut [Record]) {
    let Some((_, theirs)) = fastest_peer(records) else {
        return;
    };
    for r in records.iter_mut() {
        if r.str("impl") == Some("timer") {
            if let Some(ours) = r.num("total_ms") {
                r.set("total_vs_fastest_peer", ours / theirs);
            }
        }
    }
}

/// Whether one W1 record's counts are exact: the expected number fired,
/// and nothing fired twice, after a cancel, or failed to cancel. (Early
/// fires have a check of their own, on the worst round.)
pub fn counts_exact(r: &Record) -> bool {
    let field = |f: &str| r.num(f).unwrap_or(f64::NAN);
    field("fired") == field("expected_fired") && field("bad") == 0.0
}

/// The targets for W1 (issues 2 and 15), evaluated on one run's records
/// (one per implementation): no early fire anywhere, every implementation
/// fired exactly `N/2` with nothing bad, `timer`'s total ≤ 0.7 × the
/// fastest peer's, `timer`'s expiry ≤ 250 ns per fired task, and `timer`'s
/// memory ≤ 48 B per task.
pub fn targets(records: &[Record]) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    for r in records {
        let name = r.str("impl").unwrap_or("?");
        let early = r.num("early").unwrap_or(f64::NAN);
        checks.push(TargetCheck::new(
            format!("{name}: early = {early} (target 0)"),
            early == 0.0,
        ));
        let (fired, expected, bad) = (
            r.num("fired").unwrap_or(f64::NAN),
            r.num("expected_fired").unwrap_or(f64::NAN),
            r.num("bad").unwrap_or(f64::NAN),
        );
        let (every, note) = crate::exact_in_every_round(r);
        checks.push(TargetCheck::new(
            format!("{name}: fired = {fired} of {expected} expected, bad = {bad}{note}"),
            counts_exact(r) && every,
        ));
    }
    let timer = records.iter().find(|r| r.str("impl") == Some("timer"));
    let best_peer = fastest_peer(records);
    match (timer.and_then(|t| t.num("total_ms")), best_peer) {
        (Some(ours), Some((peer, theirs))) => checks.push(TargetCheck::new(
            format!(
                "timer total {ours:.1} ms = {:.2} × fastest peer {peer} ({theirs:.1} ms) (target ≤ 0.70)",
                ours / theirs
            ),
            ours <= 0.7 * theirs,
        )),
        _ => checks.push(TargetCheck::unknown("timer total vs fastest peer")),
    }
    match timer.and_then(|t| t.num("expire_ns")) {
        Some(e) => checks.push(TargetCheck::new(
            format!("timer expire_ns = {e:.1} per fired task (target ≤ 250)"),
            e <= 250.0,
        )),
        None => checks.push(TargetCheck::unknown("timer expire_ns (nothing fired)")),
    }
    match timer.and_then(|t| t.num("bytes_per_task")) {
        Some(b) => checks.push(TargetCheck::new(
            format!("timer bytes_per_task = {b:.1} (target ≤ 48)"),
            b <= 48.0,
        )),
        None => checks.push(TargetCheck::unknown("timer bytes_per_task (not measured)")),
    }
    checks
}

/// Small runs and the checks every implementation's test makes.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub(crate) fn small() -> W1Params {
        W1Params {
            n: 5_001,
            seed: 7,
            max_delay_ms: 3_000,
        }
    }

    pub(crate) fn assert_correct(r: &W1Result) {
        assert_eq!(r.fired, 2_500, "{r:?}");
        assert_eq!(r.early, 0, "{r:?}");
        assert_eq!(r.bad, 0, "{r:?}");
        assert_eq!(r.pending, 0, "{r:?}");
        assert_eq!(r.late_max_ms, 0, "{r:?}");
        assert_eq!(r.cancels, 2_501);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_the_required_fields() {
        let rec = run_binary_heap(
            &W1Params {
                n: 100,
                seed: 42,
                max_delay_ms: 100,
            },
            &mut Progress::quiet(),
        )
        .to_record();
        for f in [
            "workload",
            "impl",
            "n",
            "add_ns",
            "cancel_ns",
            "expire_ns",
            "total_ms",
            "bytes_per_task",
            "fired",
            "early",
        ] {
            assert!(rec.get(f).is_some(), "missing {f}");
        }
        assert_eq!(rec.str("impl"), Some("binary_heap"));
        assert_eq!(rec.num("fired"), Some(50.0));
        let checks = targets(&[rec]);
        let ours: Vec<_> = checks
            .iter()
            .filter(|c| c.description.starts_with("binary_heap"))
            .collect();
        assert_eq!(ours.len(), 2);
        assert!(ours.iter().all(|c| c.met == Some(true)), "{ours:?}");
    }
}
