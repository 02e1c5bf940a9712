//! W2 — the purgatory under Kafka's own load (its purgatory performance tool).
//!
//! The workload of `BENCHMARKS.md`, after Kafka's `TestPurgatoryPerformance`
//! with the original tool's semantics: a request completes at its sampled
//! latency, not at its timeout. The run's parts, one module each:
//!
//! - [`params`]: what a run is given, and its validation.
//! - [`samples`]: the pre-drawn keys, arrival gaps and latencies (Kafka's
//!   samplers: exponential gaps carried in whole ms, log-normal latencies).
//! - [`op`]: the operation ([`W2Op`], 100 bytes of data inline) and what
//!   every operation of a run shares ([`Ctx`]: the millisecond clock its
//!   `try_complete` reads, the callback counters).
//! - [`hasher`]: the purgatory's key hasher (`--hasher std|fx`).
//! - [`calendar`] and [`completion_queue`]: Kafka's completion queue, the
//!   delay queue the completion thread takes due requests from.
//! - [`clock_thread`]: the run's one timed sleeper, which paces the
//!   generator and wakes the completion thread.
//! - [`completer`]: the completion thread.
//! - [`drive`]: the run itself (load generation on the calling thread),
//!   over an engine: the purgatory, or the `tokio_notify` peer in its
//!   place (a task per request, `Notify` per key, `sleep_until` its
//!   timeout; see [`crate::peers::tokio_notify`]).
//! - [`result`]: the figures of a run and its JSON record.
//!
//! Two completion modes, one row each per engine ([`IMPLS`]; the peer's
//! rows are `tokio_notify` and `tokio_notify_check`):
//!
//! - `purgatory`: the completion thread calls
//!   [`Operation::force_complete`](purgatory::Operation::force_complete), as
//!   Kafka's tool does; the purgatory still removes the completed operation
//!   from its watch lists.
//! - `purgatory_check`: the completion thread calls
//!   [`Purgatory::check_and_complete`](purgatory::Purgatory::check_and_complete)
//!   on each of the request's keys, stopping as soon as the request is
//!   complete. One check completes every request due by then (they all
//!   watch the same keys), so later requests of the same millisecond are
//!   found complete without a check.
//!
//! Figures, per row: `actual_rate` is requests divided by the time from the
//! start until the generator has issued the last one (Kafka's "actual
//! rate"); `cpu_ms` is the process's user + system CPU time from just
//! before the first request until every request has completed or expired,
//! with the generator's, the completion thread's and the main thread's
//! share after the last request (`cpu_tail_ms`) as separate fields;
//! `peak_rss_mb` is the process's peak RSS (`VmHWM`, reset at the start of
//! the run; it includes the 8 bytes of pre-drawn samples per request);
//! `watched_after` is `Purgatory::watched` once every request is done.
//! `completed` counts completions seen by the completer (the generator's
//! `Ok(true)`, `force_complete` returning true, `check_and_complete`'s
//! counts), `expired` counts `on_expiration` calls; they must add up to
//! `requests`, and `on_complete` must have run exactly that many times
//! (`bad` counts the difference, `double` a second `on_complete` on one
//! operation). `completion_lag_max_ms` is the longest a due request waited
//! for the completion thread; `clock_sleeps` and `completer_parks` count
//! the wake-ups, and `cpu_wakeups_ms` prices them at the costs measured just
//! before the run ([`WakeupCost`](crate::measure::WakeupCost)), so that
//! `cpu_us_per_request_excl_wakeups` estimates what the run cost without
//! the harness's own wake-ups.
//!
//! Differences from Kafka's tool, by choice: the samples are drawn in order,
//! one per request, instead of picked at random indices from a pool of a
//! million; completion is at `creation + latency` (the Scala original; the
//! Java port completes at the timeout by mistake); an operation is handed to
//! the completion queue after it is watched (ours rejects watching a
//! completed operation, where Kafka's would watch it anyway).

pub mod calendar;
pub mod clock_thread;
pub mod completer;
pub mod completion_queue;
pub mod drive;
mod engine;
pub mod hasher;
pub mod op;
pub mod params;
pub mod result;
pub mod samples;
mod tokio_engine;

pub use hasher::W2Hasher;
pub use op::{Ctx, W2Op, DATA_BYTES};
pub use params::W2Params;
pub use result::W2Result;
pub use samples::{choose_keys, intervals_ms, latencies_ms, LogNormal, SampleSummary, Z75};

use crate::progress::Progress;
use crate::report::Record;
use crate::TargetCheck;
use engine::PurgatoryEngine;
use tokio_engine::TokioEngine;

/// The fields every W2 JSON line carries (the interface).
pub const REQUIRED_FIELDS: &[&str] = &[
    "workload",
    "impl",
    "requests",
    "target_rate",
    "actual_rate",
    "cpu_ms",
    "cpu_us_per_request",
    "completed",
    "expired",
    "peak_rss_mb",
    "watched_after",
];

/// Implementation (completion mode) names, in the order they are run and
/// reported.
pub const IMPLS: &[&str] = &[
    "purgatory",
    "purgatory_check",
    "tokio_notify",
    "tokio_notify_check",
];

/// Fields that get `_min`/`_max` companions when rounds are merged.
pub const SPREAD: &[&str] = &["actual_rate", "cpu_us_per_request"];

/// Table columns: `(heading, field)`.
pub const COLUMNS: &[(&str, &str)] = &[
    ("impl", "impl"),
    ("requests", "requests"),
    ("target/s", "target_rate"),
    ("actual/s", "actual_rate"),
    ("cpu ms", "cpu_ms"),
    ("cpu µs/req", "cpu_us_per_request"),
    ("excl. wake-ups", "cpu_us_per_request_excl_wakeups"),
    ("completed", "completed"),
    ("expired", "expired"),
    ("peak RSS MB", "peak_rss_mb"),
    ("watched after", "watched_after"),
    ("lag max ms", "completion_lag_max_ms"),
    ("checks", "checks"),
    ("rounds", "rounds"),
];

/// Runs completion mode `impl_name` once.
///
/// # Errors
/// An unknown mode or bad parameters.
pub fn run(
    impl_name: &str,
    params: &W2Params,
    progress: &mut Progress,
) -> Result<W2Result, String> {
    params.validate()?;
    match impl_name {
        "purgatory" => drive::drive("purgatory", params, false, progress, |ctx, keys| {
            purgatory_engine(params, ctx, keys)
        }),
        "purgatory_check" => {
            drive::drive("purgatory_check", params, true, progress, |ctx, keys| {
                purgatory_engine(params, ctx, keys)
            })
        }
        "tokio_notify" => drive::drive("tokio_notify", params, false, progress, TokioEngine::new),
        "tokio_notify_check" => drive::drive(
            "tokio_notify_check",
            params,
            true,
            progress,
            TokioEngine::new,
        ),
        other => Err(format!(
            "unknown W2 implementation {other:?} (expected one of {IMPLS:?})"
        )),
    }
}

/// The purgatory a run drives: Kafka's defaults, the run's key hasher.
fn purgatory_engine(
    params: &W2Params,
    ctx: &'static Ctx,
    keys: &[&'static str],
) -> Result<PurgatoryEngine, String> {
    let purgatory = purgatory::Purgatory::builder("fake purgatory")
        .hasher(params.hasher.build())
        .build()
        .map_err(|e| format!("cannot start the purgatory: {e}"))?;
    Ok(PurgatoryEngine {
        purgatory,
        ctx,
        keys: keys.to_vec(),
    })
}

/// Whether one W2 record's counts are exact: every request completed or
/// expired exactly once, and none refused. (What is left watched has a
/// check of its own.)
pub fn counts_exact(r: &Record) -> bool {
    let field = |f: &str| r.num(f).unwrap_or(f64::NAN);
    field("completed") + field("expired") == field("requests")
        && field("bad") == 0.0
        && field("double") == 0.0
        && field("rejected") == 0.0
}

/// The targets of issue 3 for W2, evaluated on one run's records: every
/// request completed or expired exactly once and nothing left watched, in
/// every row; at saturation (target rate ≥ 1,000,000/s) an achieved rate of
/// at least 900,000/s; at 10,000/s at most 2 µs of CPU per request in
/// `purgatory` mode and 4 µs in `purgatory_check` mode (the rate and CPU
/// targets for the purgatory's rows only).
pub fn targets(records: &[Record]) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    for r in records {
        let name = r.str("impl").unwrap_or("?");
        let field = |f: &str| r.num(f).unwrap_or(f64::NAN);
        let (n, rate) = (field("requests"), field("target_rate"));
        let row = format!("{name} ({n:.0} at {rate:.0}/s)");
        let (completed, expired) = (field("completed"), field("expired"));
        let (bad, double, rejected) = (field("bad"), field("double"), field("rejected"));
        let (every, note) = crate::exact_in_every_round(r);
        checks.push(TargetCheck::new(
            format!(
                "{row}: completed {completed} + expired {expired} = {} of {n} requests \
                 (bad {bad}, double {double}, rejected {rejected}){note}",
                completed + expired
            ),
            counts_exact(r) && every,
        ));
        match r.num("watched_after") {
            Some(w) => checks.push(TargetCheck::new(
                format!("{row}: watched_after = {w} (target 0)"),
                w == 0.0,
            )),
            None => checks.push(TargetCheck::unknown(format!("{row}: watched_after"))),
        }
        // The rate and CPU targets are the purgatory's; peers are measured
        // against them, not held to them.
        let ours = name.starts_with("purgatory");
        if ours && rate >= 1_000_000.0 {
            match r.num("actual_rate") {
                Some(a) => checks.push(TargetCheck::new(
                    format!("{row}: actual rate {a:.0}/s (target ≥ 900000)"),
                    a >= 900_000.0,
                )),
                None => checks.push(TargetCheck::unknown(format!("{row}: actual rate"))),
            }
        }
        if ours && rate == 10_000.0 {
            let limit = if name == "purgatory_check" { 4.0 } else { 2.0 };
            // How much of it the run's wake-ups (the pacing) account for.
            let split = match (
                r.num("cpu_wakeups_ms"),
                r.num("cpu_us_per_request_excl_wakeups"),
            ) {
                (Some(w), Some(rest)) if n > 0.0 => {
                    format!("; wake-ups {:.3} of it, the rest {rest:.3}", w * 1000.0 / n)
                }
                (Some(w), None) if n > 0.0 => format!(
                    "; wake-ups not split out: priced at {:.3}, more than the whole",
                    w * 1000.0 / n
                ),
                _ => String::new(),
            };
            match r.num("cpu_us_per_request") {
                Some(c) => checks.push(TargetCheck::new(
                    format!("{row}: CPU {c:.3} µs/request (target ≤ {limit}{split})"),
                    c <= limit,
                )),
                None => checks.push(TargetCheck::unknown(format!(
                    "{row}: CPU per request (no getrusage)"
                ))),
            }
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_checks_flag_misses() {
        let row = |name: &str, rate: i64, actual: i64, cpu: f64, watched: i64| {
            Record::new()
                .with("impl", name)
                .with("requests", 10i64)
                .with("target_rate", rate)
                .with("actual_rate", actual)
                .with("cpu_us_per_request", cpu)
                .with("completed", 9i64)
                .with("expired", 1i64)
                .with("bad", 0i64)
                .with("double", 0i64)
                .with("rejected", 0i64)
                .with("watched_after", watched)
        };
        let met = |c: &[TargetCheck]| c.iter().map(|c| c.met).collect::<Vec<_>>();
        let ok = Some(true);
        let miss = Some(false);
        assert_eq!(
            met(&targets(&[row("purgatory", 1_000_000, 950_000, 9.0, 0)])),
            [ok, ok, ok]
        );
        assert_eq!(
            met(&targets(&[row("purgatory", 1_000_000, 850_000, 1.0, 2)])),
            [ok, miss, miss]
        );
        assert_eq!(
            met(&targets(&[row("purgatory", 10_000, 10_000, 3.0, 0)])),
            [ok, ok, miss]
        );
        assert_eq!(
            met(&targets(&[row("purgatory_check", 10_000, 10_000, 3.0, 0)])),
            [ok, ok, ok]
        );
        // The CPU line says how much of it the wake-ups account for.
        let paced = row("purgatory", 10_000, 10_000, 7.0, 0)
            .with("cpu_wakeups_ms", 0.05)
            .with("cpu_us_per_request_excl_wakeups", 2.0);
        let checks = targets(&[paced]);
        assert_eq!(
            checks[2].description,
            "purgatory (10 at 10000/s): CPU 7.000 µs/request \
             (target ≤ 2; wake-ups 5.000 of it, the rest 2.000)"
        );
        assert_eq!(checks[2].met, miss);
        // A peer's row is checked for soundness only.
        assert_eq!(
            met(&targets(&[row("tokio_notify", 10_000, 10_000, 30.0, 0)])),
            [ok, ok]
        );
        // A wake-up estimate above the whole is not split out.
        let over = row("purgatory", 10_000, 10_000, 5.3, 0).with("cpu_wakeups_ms", 0.071);
        let checks = targets(&[over]);
        assert_eq!(
            checks[2].description,
            "purgatory (10 at 10000/s): CPU 5.300 µs/request \
             (target ≤ 2; wake-ups not split out: priced at 7.100, more than the whole)"
        );
    }
}
