//! W4 — scale: millions of pending operations (`BENCHMARKS.md`).
//!
//! What a broker holding many parked requests pays per request, and whether
//! its costs stay flat as the count grows. One process per implementation
//! and round. Op `i` is watched under one key drawn uniformly from `keys`
//! keys (SplitMix64, seed 42), or under its own key with `keys == 0`
//! (`keys_per_op` keys drawn so, for the purgatory alone, when above 1). The
//! user's operation is 24 bytes and its condition reads one shared flag.
//! Real clock, default configuration. Phases, each with `pending` new
//! operations:
//!
//! - **A, fill**: watch them (timeout 300 s). `ns_per_watch` is the wall
//!   time over the count; `bytes_per_op` the RSS growth over a baseline
//!   taken after `malloc_trim(0)`, over the count.
//! - **B, check**: set the flag, `check_and_complete` every key once.
//!   `ns_per_check_complete` is the wall time until every operation ran
//!   `on_complete`, over the count; `watched_after` / `delayed_after` must
//!   be 0; `rss_after_mb`, then after `purge()` and `malloc_trim`,
//!   `rss_after_trim_mb` (absolute) and `held_after_trim_mb` (over the
//!   baseline: what the implementation still holds).
//! - **C, expiry**: each times out `timeout_ms` (100) after its own watch:
//!   lateness of `on_expiration` against its deadline, p50 / p99 / max.
//! - **D, burst**: all share one absolute deadline, set after the fill
//!   ends (twice phase A's time plus 100 ms from the start of D), so the
//!   timer's slots are reused in scattered order: `burst_first_ms`,
//!   `burst_drain_ms`, `burst_late_p99_ms`.
//! - **E, shutdown**: `pending` more, then `shutdown()`: `shutdown_ms`
//!   (including dropping what it returns).
//!
//! `completed` counts B's completions, `expired` C's and D's expirations;
//! `early` counts expirations before their deadline in C and D.

pub mod ours;
pub mod phase;
pub mod tokio_notify;

use crate::measure::rss;
use crate::progress::{wait_for, Progress};
use crate::report::Record;
use crate::TargetCheck;
use phase::Phase;
use std::time::{Duration, Instant};

/// The fields every W4 JSON line carries (the interface).
pub const REQUIRED_FIELDS: &[&str] = &[
    "workload",
    "impl",
    "pending",
    "keys",
    "ns_per_watch",
    "bytes_per_op",
    "ns_per_check_complete",
    "watched_after",
    "delayed_after",
    "rss_after_trim_mb",
    "expiry_late_p99_ms",
    "early",
    "burst_first_ms",
    "burst_drain_ms",
    "shutdown_ms",
    "completed",
    "expired",
];

/// Implementation names, in the order they are run and reported.
pub const IMPLS: &[&str] = &["purgatory", "tokio_notify"];

/// Fields that get `_min`/`_max` companions when rounds are merged.
pub const SPREAD: &[&str] = &["ns_per_watch", "ns_per_check_complete"];

/// Table columns: `(heading, field)`.
pub const COLUMNS: &[(&str, &str)] = &[
    ("impl", "impl"),
    ("pending", "pending"),
    ("keys", "keys"),
    ("ns/watch", "ns_per_watch"),
    ("B/op", "bytes_per_op"),
    ("ns/check", "ns_per_check_complete"),
    ("watched", "watched_after"),
    ("delayed", "delayed_after"),
    ("held MB", "held_after_trim_mb"),
    ("late p99 ms", "expiry_late_p99_ms"),
    ("early", "early"),
    ("burst first", "burst_first_ms"),
    ("burst drain", "burst_drain_ms"),
    ("shutdown ms", "shutdown_ms"),
    ("completed", "completed"),
    ("expired", "expired"),
    ("rounds", "rounds"),
];

/// How long the run waits for a phase to end: for expiries, past the
/// phase's last deadline; otherwise from when the wait starts. A phase that
/// has not ended by then fails the count checks rather than hang the run.
pub(super) const GIVE_UP: Duration = Duration::from_secs(120);

/// Phase D's deadline, from the start of its fill: twice phase A's fill
/// time plus 100 ms, so that the fill ends before it.
fn burst_margin_ns(fill: Duration) -> u64 {
    u64::try_from(fill.as_nanos() * 2).unwrap_or(u64::MAX / 2) + 100_000_000
}

/// Phases C and D on an implementation whose `fill(phase, progress,
/// timeout_ns)` watches `pending` operations of `phase`, operation by
/// operation with the timeout `timeout_ns(now_ns)`, and returns how many it
/// refused. Adds the refused to `result.bad`, and counts in
/// `result.burst_filled_late` the operations of D watched at or after its
/// deadline (given a timeout of 1 ns: a burst that did not start whole).
fn expiry_and_burst(
    params: &W4Params,
    [c, d]: [&'static Phase; 2],
    result: &mut W4Result,
    progress: &mut Progress,
    mut fill: impl FnMut(&'static Phase, &mut Progress, &dyn Fn(u64) -> u64) -> u64,
) {
    let n = params.pending;
    progress.phase("C expiry", n as u64);
    let timeout_ns = params.timeout_ms * 1_000_000;
    result.bad += fill(c, progress, &|_| timeout_ns);
    progress.phase("C wait for expirations", n as u64);
    let give_up = Instant::now() + Duration::from_nanos(timeout_ns) + GIVE_UP;
    wait_for(n, give_up, progress, || Phase::count(&c.expired));

    progress.phase("D burst", n as u64);
    let deadline_ns = d.now_ns() + burst_margin_ns(result.watch);
    let late = std::cell::Cell::new(0);
    result.bad += fill(d, progress, &|now| {
        late.set(late.get() + u64::from(now >= deadline_ns));
        deadline_ns.saturating_sub(now).max(1)
    });
    result.burst_filled_late = late.get();
    progress.phase("D wait for expirations", n as u64);
    let give_up = d.instant_at(deadline_ns) + GIVE_UP;
    wait_for(n, give_up, progress, || Phase::count(&d.expired));
}

/// W4's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct W4Params {
    /// Operations per phase.
    pub pending: usize,
    /// Keys the operations are spread over (0: each its own).
    pub keys: usize,
    /// Keys each operation watches, drawn independently (1 by default;
    /// `tokio_notify` runs only 1).
    pub keys_per_op: usize,
    /// Phase C's timeout, ms.
    pub timeout_ms: u64,
    /// PRNG seed.
    pub seed: u64,
}

impl Default for W4Params {
    /// The reported defaults: 1,000,000 operations over 100,000 keys,
    /// phase C timing out after 100 ms, seed 42.
    fn default() -> Self {
        W4Params {
            pending: 1_000_000,
            keys: 100_000,
            keys_per_op: 1,
            timeout_ms: 100,
            seed: 42,
        }
    }
}

/// RSS readings across phases A and B, kB.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Memory {
    /// After `malloc_trim`, before the fill.
    pub baseline_kb: Option<u64>,
    /// After the fill.
    pub filled_kb: Option<u64>,
    /// After every operation completed.
    pub completed_kb: Option<u64>,
    /// After that and `malloc_trim`.
    pub trimmed_kb: Option<u64>,
}

impl Memory {
    /// Trims the allocator and takes the baseline.
    pub fn baseline() -> Self {
        rss::trim();
        Memory {
            baseline_kb: rss::rss_kb(),
            ..Memory::default()
        }
    }
    fn filled(&mut self) {
        self.filled_kb = rss::rss_kb();
    }
    fn completed(&mut self) {
        self.completed_kb = rss::rss_kb();
    }
    fn trimmed(&mut self) {
        rss::trim();
        self.trimmed_kb = rss::rss_kb();
    }
}

/// The figures of one W4 run of one implementation.
#[derive(Debug, Clone, PartialEq)]
pub struct W4Result {
    /// Implementation name (one of [`IMPLS`]).
    pub impl_name: &'static str,
    /// The parameters it ran with.
    pub params: W4Params,
    /// Phase A's wall time.
    pub watch: Duration,
    /// Phase B's wall time.
    pub check: Duration,
    /// RSS readings.
    pub memory: Memory,
    /// Phase B's completions.
    pub completed: usize,
    /// Watch-list entries left after B.
    pub watched_after: usize,
    /// Armed timeouts left after B.
    pub delayed_after: usize,
    /// Watches refused or completed at once (none expected).
    pub bad: u64,
    /// Phase C's expirations, lateness p50 / p99 / max (ms).
    pub expiry: (usize, [Option<f64>; 3]),
    /// Phase D's expirations, first / p99 / last lateness (ms).
    pub burst: (usize, [Option<f64>; 3]),
    /// Phase D's operations watched at or after its deadline (none
    /// expected: the deadline leaves twice phase A's time for the fill).
    /// For `tokio_notify`, spawned at or after it: a task spawned before
    /// and first run after the deadline is not counted.
    pub burst_filled_late: u64,
    /// Early expirations in C and D.
    pub early: u64,
    /// Phase E's shutdown time.
    pub shutdown: Duration,
    /// Operations still pending at the shutdown.
    pub shutdown_pending: usize,
}

impl W4Result {
    fn new(impl_name: &'static str, params: &W4Params) -> Self {
        W4Result {
            impl_name,
            params: params.clone(),
            watch: Duration::ZERO,
            check: Duration::ZERO,
            memory: Memory::default(),
            completed: 0,
            watched_after: 0,
            delayed_after: 0,
            bad: 0,
            expiry: (0, [None; 3]),
            burst: (0, [None; 3]),
            burst_filled_late: 0,
            early: 0,
            shutdown: Duration::ZERO,
            shutdown_pending: 0,
        }
    }

    /// Reads phases C and D's outcomes.
    fn finish(&mut self, c: &Phase, d: &Phase) {
        let (lc, ld) = (&c.lateness, &d.lateness);
        self.expiry = (
            Phase::count(&c.expired),
            [lc.percentile_ms(50.0), lc.percentile_ms(99.0), lc.max_ms()],
        );
        self.burst = (
            Phase::count(&d.expired),
            [ld.min_ms(), ld.percentile_ms(99.0), ld.max_ms()],
        );
        self.early = lc.early() + ld.early();
    }

    /// The run as a report record (the JSON fields).
    pub fn to_record(&self) -> Record {
        let n = self.params.pending;
        let per = |d: Duration| d.as_nanos() as f64 / n as f64;
        let m = self.memory;
        let mb = |kb: Option<u64>| kb.map(|kb| kb as f64 / 1024.0);
        let growth = |kb: Option<u64>| Some(kb?.saturating_sub(m.baseline_kb?));
        Record::new()
            .with("workload", "w4")
            .with("impl", self.impl_name)
            .with("allocator", crate::ALLOCATOR)
            .with("pending", n)
            .with("keys", self.params.keys)
            .with("keys_per_op", self.params.keys_per_op)
            .with("seed", self.params.seed)
            .with("ns_per_watch", per(self.watch))
            .with(
                "bytes_per_op",
                growth(m.filled_kb).map(|kb| kb as f64 * 1024.0 / n as f64),
            )
            .with("ns_per_check_complete", per(self.check))
            .with("watched_after", self.watched_after)
            .with("delayed_after", self.delayed_after)
            .with("rss_baseline_mb", mb(m.baseline_kb))
            .with("rss_filled_mb", mb(m.filled_kb))
            .with("rss_after_mb", mb(m.completed_kb))
            .with("rss_after_trim_mb", mb(m.trimmed_kb))
            .with("held_after_trim_mb", mb(growth(m.trimmed_kb)))
            .with("expiry_timeout_ms", self.params.timeout_ms)
            .with("expiry_late_p50_ms", self.expiry.1[0])
            .with("expiry_late_p99_ms", self.expiry.1[1])
            .with("expiry_late_max_ms", self.expiry.1[2])
            .with("early", self.early)
            .with("burst_first_ms", self.burst.1[0])
            .with("burst_late_p99_ms", self.burst.1[1])
            .with("burst_drain_ms", self.burst.1[2])
            .with("burst_filled_late", self.burst_filled_late)
            .with("shutdown_ms", self.shutdown.as_secs_f64() * 1e3)
            .with("shutdown_pending", self.shutdown_pending)
            .with("completed", self.completed)
            .with("expired", self.expiry.0 + self.burst.0)
            .with("expired_c", self.expiry.0)
            .with("expired_d", self.burst.0)
            .with("bad", self.bad)
    }
}

/// Runs implementation `impl_name` once.
///
/// # Errors
/// An unknown implementation, or one that cannot start.
pub fn run(
    impl_name: &str,
    params: &W4Params,
    progress: &mut Progress,
) -> Result<W4Result, String> {
    match impl_name {
        "purgatory" => ours::run(params, progress),
        "tokio_notify" => tokio_notify::run(params, progress),
        other => Err(format!(
            "unknown W4 implementation {other:?} (expected one of {IMPLS:?})"
        )),
    }
}

/// Whether one W4 record's counts are exact: every operation completed
/// once in B and expired once in C and once in D, none early, nothing
/// watched or armed after B, none of D watched after its deadline, every
/// one pending at the shutdown in E.
pub fn counts_exact(r: &Record) -> bool {
    let f = |k: &str| r.num(k).unwrap_or(f64::NAN);
    let n = f("pending");
    f("completed") == n
        && f("expired") == 2.0 * n
        && f("expired_c") == n
        && f("expired_d") == n
        && f("shutdown_pending") == n
        && f("early") == 0.0
        && f("watched_after") == 0.0
        && f("delayed_after") == 0.0
        && f("bad") == 0.0
        && f("burst_filled_late") == 0.0
}

/// W4's targets (issue 14): exact counts in every row (every operation
/// completes once in B and expires once in C and D, none early, nothing
/// watched or armed after B); the purgatory at most 128 bytes per pending
/// operation, and its watch and check-and-complete at most half of
/// `tokio_notify`'s in the same run.
pub fn targets(records: &[Record]) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    for r in records {
        let name = r.str("impl").unwrap_or("?");
        let f = |k: &str| r.num(k).unwrap_or(f64::NAN);
        let n = f("pending");
        let (completed, expired, early) = (f("completed"), f("expired"), f("early"));
        let (watched, delayed, bad) = (f("watched_after"), f("delayed_after"), f("bad"));
        let late_fill = f("burst_filled_late");
        let (c, d, e) = (f("expired_c"), f("expired_d"), f("shutdown_pending"));
        let (every, note) = crate::exact_in_every_round(r);
        checks.push(TargetCheck::new(
            format!(
                "{name}: completed {completed} of {n}, expired {expired} of {} ({c} in C, {d} in D), \
                 early {early}, watched {watched} and delayed {delayed} after B, bad {bad}, \
                 D watched after its deadline {late_fill}, pending at shutdown {e}{note}",
                2.0 * n
            ),
            counts_exact(r) && every,
        ));
    }
    let get = |name: &str, field: &str| {
        records
            .iter()
            .find(|r| r.str("impl") == Some(name))
            .and_then(|r| r.num(field))
    };
    // Issue 14: 128 bytes with one key per operation, 192 with three.
    let limit = match get("purgatory", "keys_per_op") {
        Some(3.0) => Some(192.0),
        Some(1.0) => Some(128.0),
        None => Some(128.0),
        Some(_) => None,
    };
    match (get("purgatory", "bytes_per_op"), limit) {
        (Some(b), Some(limit)) => checks.push(TargetCheck::new(
            format!("purgatory bytes_per_op = {b:.1} (target ≤ {limit})"),
            b <= limit,
        )),
        _ => checks.push(TargetCheck::unknown("purgatory bytes_per_op")),
    }
    for field in ["ns_per_watch", "ns_per_check_complete"] {
        match (get("purgatory", field), get("tokio_notify", field)) {
            (Some(ours), Some(theirs)) if theirs > 0.0 => checks.push(TargetCheck::new(
                format!(
                    "purgatory {field} {ours:.0} = {:.2} × tokio_notify's {theirs:.0} (target ≤ 0.50)",
                    ours / theirs
                ),
                ours <= 0.5 * theirs,
            )),
            _ => checks.push(TargetCheck::unknown(format!(
                "purgatory {field} vs tokio_notify"
            ))),
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> W4Params {
        W4Params {
            pending: 2_000,
            keys: 50,
            keys_per_op: 1,
            timeout_ms: 5,
            seed: 42,
        }
    }

    fn assert_exact(r: &W4Result) {
        let rec = r.to_record();
        for f in REQUIRED_FIELDS {
            assert!(rec.get(f).is_some(), "missing {f}");
        }
        assert_eq!(r.completed, 2_000, "{rec:?}");
        assert_eq!((r.expiry.0, r.burst.0), (2_000, 2_000), "{rec:?}");
        assert_eq!((r.early, r.bad), (0, 0), "{rec:?}");
        assert_eq!((r.watched_after, r.delayed_after), (0, 0), "{rec:?}");
        assert_eq!(targets(&[rec])[0].met, Some(true));
    }

    #[test]
    fn purgatory_counts_are_exact() {
        assert_exact(&run("purgatory", &tiny(), &mut Progress::quiet()).unwrap());
    }

    #[test]
    fn purgatory_counts_are_exact_with_three_keys_per_operation() {
        let params = W4Params {
            keys_per_op: 3,
            ..tiny()
        };
        assert_exact(&run("purgatory", &params, &mut Progress::quiet()).unwrap());
        let own = W4Params { keys: 0, ..params };
        assert_exact(&run("purgatory", &own, &mut Progress::quiet()).unwrap());
        assert!(run("tokio_notify", &own, &mut Progress::quiet()).is_err());
    }

    /// Each phase's count is checked, not only their sum, and a round with
    /// inexact counts fails the check even when the medians are exact.
    #[test]
    fn counts_are_exact_in_each_phase_and_every_round() {
        let rec = run("purgatory", &tiny(), &mut Progress::quiet())
            .unwrap()
            .to_record();
        assert!(counts_exact(&rec));
        for (field, value) in [
            ("expired_c", 1_999u64),
            ("expired_d", 2_001),
            ("shutdown_pending", 1_999),
            ("burst_filled_late", 1),
        ] {
            let off = rec.clone().with(field, value);
            assert!(!counts_exact(&off), "{field}");
            assert_eq!(targets(&[off])[0].met, Some(false), "{field}");
        }
        let merged = rec.with("rounds", 3u64).with("exact_rounds", 2u64);
        let check = &targets(&[merged])[0];
        assert_eq!(check.met, Some(false));
        assert!(check.description.ends_with(" (exact in 2 of 3 rounds)"));
    }

    /// A burst whose fill runs past its deadline is counted: its figures
    /// would measure tasks given 1 ns, not one shared deadline.
    #[test]
    fn operations_of_d_watched_after_its_deadline_are_counted() {
        let params = W4Params {
            pending: 3,
            ..tiny()
        };
        let origin = Instant::now();
        let phases = [Phase::leak(origin), Phase::leak(origin)];
        let mut result = W4Result::new("fake", &params);
        let mut fills = 0;
        // Expires each operation at once, as if filled at `now`: C's on
        // time, then D's first at its start and the other two past its
        // deadline.
        expiry_and_burst(
            &params,
            phases,
            &mut result,
            &mut Progress::quiet(),
            |p, _, t| {
                fills += 1;
                for i in 0..3u64 {
                    let now = match (fills, i) {
                        (2, 1..) => u64::MAX / 2 + i,
                        _ => p.now_ns(),
                    };
                    assert!(t(now) >= 1);
                    p.complete();
                    p.expire(p.now_ns());
                }
                0
            },
        );
        assert_eq!(fills, 2);
        assert_eq!(result.burst_filled_late, 2);
        // Every other count exact, so that only the late fill fails it.
        result.completed = 3;
        result.shutdown_pending = 3;
        result.finish(phases[0], phases[1]);
        let rec = result.to_record();
        assert_eq!(rec.num("burst_filled_late"), Some(2.0));
        assert!(!counts_exact(&rec));
        assert!(counts_exact(&rec.with("burst_filled_late", 0u64)));
    }

    #[test]
    fn tokio_notify_counts_are_exact_with_a_key_per_operation() {
        let params = W4Params { keys: 0, ..tiny() };
        assert_exact(&run("tokio_notify", &params, &mut Progress::quiet()).unwrap());
        assert!(run("nope", &params, &mut Progress::quiet()).is_err());
    }
}
