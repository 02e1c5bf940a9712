//! W3 — concurrent adds on the real clock, with a reaper running.
//!
//! The workload of `BENCHMARKS.md`: 2 producer threads each add 1,000,000
//! tasks with delays uniform in `[1, 10,000]` ms to one shared timer whose
//! reaper runs; then the harness waits until every task has fired.
//! Implementations:
//!
//! - `timer`: `Arc<timer::Timer<LateTask>>` with the defaults (tick 1 ms,
//!   wheel 20, `SystemClock`) driven by `timer::Reaper`; tasks run on the
//!   timer's executor thread.
//! - `mutex_binary_heap`: [`MutexHeapTimer`], tasks run on its reaper thread.
//!
//! Delays come from one SplitMix64 stream seeded with the seed: producer `p`
//! takes draws `p·n .. (p+1)·n`. They are drawn before the producers start.
//!
//! Each producer reads `Instant::now()`, computes the task's deadline as that
//! instant plus its delay, and calls the timer's `add(delay, task)` (which
//! reads its own clock after ours, so its deadline is never earlier). When
//! the task runs it records its lateness — fire instant minus that deadline,
//! signed, in whole microseconds rounded down — into a preallocated array
//! ([`Recorder`]); a negative lateness is an *early* fire.
//!
//! Figures: `adds_per_s` is all tasks divided by the wall time from the
//! first producer's start (read by the producer itself as the barrier
//! releases it, before its first add) until the last producer finishes, so
//! the window holds every add however the threads are scheduled; lateness
//! percentiles are nearest-rank over all fired tasks; `peak_rss_mb` is the process's peak
//! RSS (`VmHWM`, reset at the start of the run), which includes the 4-byte
//! lateness slot per task and the delay arrays.
//!
//! The recorder is leaked (`Box::leak`) so that each task can carry a plain
//! `&'static` reference instead of an `Arc` (whose reference count the two
//! producers would contend on); that is one allocation per run.

use crate::measure::lateness::Recorder;
use crate::measure::rss;
use crate::peers::mutex_binary_heap::MutexHeapTimer;
use crate::progress::Progress;
use crate::report::Record;
use crate::rng::SplitMix64;
use crate::{stats, TargetCheck};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};
use timer::{Reaper, Timer, TimerTask};

/// Implementation names, in the order they are run and reported.
pub const IMPLS: &[&str] = &["timer", "mutex_binary_heap"];

/// Fields that get `_min`/`_max` companions when rounds are merged.
pub const SPREAD: &[&str] = &["adds_per_s", "late_p99_ms"];

/// Table columns: `(heading, field)`.
pub const COLUMNS: &[(&str, &str)] = &[
    ("impl", "impl"),
    ("tasks", "n"),
    ("adds/s", "adds_per_s"),
    ("min", "adds_per_s_min"),
    ("max", "adds_per_s_max"),
    ("late p50 ms", "late_p50_ms"),
    ("p99 ms", "late_p99_ms"),
    ("max ms", "late_max_ms"),
    ("early", "early"),
    ("fired", "fired"),
    ("missing", "missing"),
    ("peak RSS MB", "peak_rss_mb"),
    ("rounds", "rounds"),
];

/// W3's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct W3Params {
    /// Tasks added by each producer.
    pub n: usize,
    /// Producer threads.
    pub producers: usize,
    /// PRNG seed.
    pub seed: u64,
    /// Largest delay, in ms (delays are uniform in `[1, max_delay_ms]`).
    pub max_delay_ms: u64,
}

impl Default for W3Params {
    /// The reported defaults: 2 producers × 1,000,000 tasks, seed 42, delays
    /// up to 10 s.
    fn default() -> Self {
        W3Params {
            n: 1_000_000,
            producers: 2,
            seed: 42,
            max_delay_ms: 10_000,
        }
    }
}

impl W3Params {
    /// All tasks, across producers.
    pub fn total(&self) -> usize {
        self.n * self.producers
    }
}

/// The W3 task: records its lateness when run.
#[derive(Debug)]
pub struct LateTask {
    rec: &'static Recorder,
    due_ns: u64,
    idx: u32,
}

impl TimerTask for LateTask {
    fn run(self) {
        self.rec.record(self.idx, self.due_ns);
    }
}

/// The figures of one W3 run of one implementation.
#[derive(Debug, Clone, PartialEq)]
pub struct W3Result {
    /// Implementation name (one of [`IMPLS`]).
    pub impl_name: &'static str,
    /// The parameters it ran with.
    pub params: W3Params,
    /// From the first producer's start until the last producer finished.
    pub add_wall: Duration,
    /// Lateness percentiles p50, p99 and the maximum, in µs.
    pub late_us: Option<[i32; 3]>,
    /// Smallest lateness in µs (negative: fired early).
    pub late_min_us: Option<i32>,
    /// Tasks fired (once).
    pub fired: usize,
    /// Tasks fired before their deadline.
    pub early: usize,
    /// Tasks that fired more than once.
    pub double: usize,
    /// Tasks that had not fired when the harness gave up waiting.
    pub missing: usize,
    /// Peak RSS of the process, in MB (`None` without `/proc`).
    pub peak_rss_mb: Option<f64>,
}

impl W3Result {
    /// The run as a report record (the JSON fields).
    pub fn to_record(&self) -> Record {
        let total = self.params.total();
        let secs = self.add_wall.as_secs_f64();
        let rate = (secs > 0.0).then(|| (total as f64 / secs).round() as u64);
        let ms = |us: i32| f64::from(us) / 1e3;
        Record::new()
            .with("workload", "w3")
            .with("impl", self.impl_name)
            .with("n", total)
            .with("producers", self.params.producers)
            .with("seed", self.params.seed)
            .with("adds_per_s", rate)
            .with("add_ms", secs * 1e3)
            .with("late_p50_ms", self.late_us.map(|l| ms(l[0])))
            .with("late_p99_ms", self.late_us.map(|l| ms(l[1])))
            .with("late_max_ms", self.late_us.map(|l| ms(l[2])))
            .with("late_min_ms", self.late_min_us.map(ms))
            .with("early", self.early)
            .with("fired", self.fired)
            .with("missing", self.missing)
            .with("double", self.double)
            .with("peak_rss_mb", self.peak_rss_mb)
    }
}

/// Runs implementation `impl_name` once.
pub fn run(
    impl_name: &str,
    params: &W3Params,
    progress: &mut Progress,
) -> Result<W3Result, String> {
    match impl_name {
        "timer" => Ok(run_timer(params, progress)),
        "mutex_binary_heap" => Ok(run_mutex_binary_heap(params, progress)),
        other => Err(format!(
            "unknown W3 implementation {other:?} (expected one of {IMPLS:?})"
        )),
    }
}

/// W3 on this project's `timer::Timer` with its `Reaper`.
pub fn run_timer(params: &W3Params, progress: &mut Progress) -> W3Result {
    rss::reset_peak();
    let timer: Arc<Timer<LateTask>> = Arc::new(Timer::new());
    let reaper = Reaper::start(timer.clone());
    let result = drive("timer", params, progress, |delay, task| {
        // A shut-down timer hands the task back; it then shows as missing.
        let _ = timer.add(delay, task);
    });
    reaper.stop();
    timer.shutdown();
    result
}

/// W3 on the `Mutex<BinaryHeap>` + condvar reaper peer.
pub fn run_mutex_binary_heap(params: &W3Params, progress: &mut Progress) -> W3Result {
    rss::reset_peak();
    let heap = MutexHeapTimer::start(Instant::now());
    let result = drive("mutex_binary_heap", params, progress, |delay, task| {
        heap.add(delay, task);
    });
    heap.shutdown();
    result
}

/// The common part: draw the delays, run the producers against `add`, wait
/// for every task to fire (or for the longest delay plus 30 s), and gather
/// the figures.
fn drive(
    impl_name: &'static str,
    params: &W3Params,
    progress: &mut Progress,
    add: impl Fn(Duration, LateTask) + Sync,
) -> W3Result {
    let total = params.total();
    assert!(
        u32::try_from(total).is_ok(),
        "W3 supports at most 2^32 tasks"
    );
    let mut rng = SplitMix64::new(params.seed);
    let delays: Vec<Vec<u32>> = (0..params.producers)
        .map(|_| {
            (0..params.n)
                .map(|_| rng.delay_ms(params.max_delay_ms) as u32)
                .collect()
        })
        .collect();
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(total)));
    let barrier = Barrier::new(params.producers + 1);
    progress.phase("add", total as u64);

    let (start, end) = thread::scope(|s| {
        let producers: Vec<_> = delays
            .iter()
            .enumerate()
            .map(|(p, delays)| {
                let (add, barrier) = (&add, &barrier);
                let base = p * params.n;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for (k, &d) in delays.iter().enumerate() {
                        let delay = Duration::from_millis(u64::from(d));
                        let due_ns = rec.now_ns() + u64::from(d) * 1_000_000;
                        add(
                            delay,
                            LateTask {
                                rec,
                                due_ns,
                                idx: (base + k) as u32,
                            },
                        );
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        barrier.wait();
        let spans: Vec<(Instant, Instant)> = producers
            .into_iter()
            .map(|h| h.join().expect("producer panicked"))
            .collect();
        let released = Instant::now();
        add_window(&spans).unwrap_or((released, released))
    });
    drop(delays);

    let give_up = end + Duration::from_millis(params.max_delay_ms) + Duration::from_secs(30);
    progress.phase("fire", total as u64);
    while rec.fired() < total && Instant::now() < give_up {
        progress.update(rec.fired() as u64);
        thread::sleep(Duration::from_millis(5));
    }

    let lateness = rec.sorted_lateness_us();
    let late_us = match (
        stats::percentile(&lateness, 50.0),
        stats::percentile(&lateness, 99.0),
        lateness.last(),
    ) {
        (Some(a), Some(b), Some(&c)) => Some([a, b, c]),
        _ => None,
    };
    let fired = rec.fired();
    W3Result {
        impl_name,
        params: params.clone(),
        add_wall: end.saturating_duration_since(start),
        late_us,
        late_min_us: lateness.first().copied(),
        fired,
        early: rec.early(),
        double: rec.double(),
        missing: total.saturating_sub(fired),
        peak_rss_mb: rss::peak_rss_kb().map(|kb| kb as f64 / 1024.0),
    }
}

/// The wall-time window of the adds, from the earliest producer's start to
/// the latest producer's end, given each producer's `(start, end)`; `None`
/// without producers. Each producer reads its own start: a start read by
/// another thread after the barrier may come after some adds (the reading
/// thread was descheduled), which shrinks the window and overstates adds/s.
fn add_window(spans: &[(Instant, Instant)]) -> Option<(Instant, Instant)> {
    let start = spans.iter().map(|s| s.0).min()?;
    let end = spans.iter().map(|s| s.1).max()?;
    Some((start, end))
}

/// Whether one W3 record's counts are exact: no task fired early, none
/// missing, none twice.
pub fn counts_exact(r: &Record) -> bool {
    let field = |f: &str| r.num(f).unwrap_or(f64::NAN);
    field("early") == 0.0 && field("missing") == 0.0 && field("double") == 0.0
}

/// The targets of issue 2 for W3, evaluated on one run's records: no early
/// fire and nothing missing anywhere, `timer`'s adds/s at least
/// `mutex_binary_heap`'s, and `timer`'s p99 lateness ≤ 2 ms.
pub fn targets(records: &[Record]) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    for r in records {
        let name = r.str("impl").unwrap_or("?");
        let early = r.num("early").unwrap_or(f64::NAN);
        let missing = r.num("missing").unwrap_or(f64::NAN);
        let double = r.num("double").unwrap_or(f64::NAN);
        let (every, note) = crate::exact_in_every_round(r);
        checks.push(TargetCheck::new(
            format!(
                "{name}: early = {early} (target 0), missing = {missing}, fired twice = {double}{note}"
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
    match (
        get("timer", "adds_per_s"),
        get("mutex_binary_heap", "adds_per_s"),
    ) {
        (Some(ours), Some(theirs)) => checks.push(TargetCheck::new(
            format!(
                "timer adds/s {ours:.0} = {:.2} × mutex_binary_heap's {theirs:.0} (target ≥ 1.00)",
                ours / theirs
            ),
            ours >= theirs,
        )),
        _ => checks.push(TargetCheck::unknown("timer adds/s vs mutex_binary_heap")),
    }
    match get("timer", "late_p99_ms") {
        Some(p99) => checks.push(TargetCheck::new(
            format!("timer late_p99_ms = {p99:.3} (target ≤ 2)"),
            p99 <= 2.0,
        )),
        None => checks.push(TargetCheck::unknown("timer late_p99_ms")),
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_counts_early_double_and_lateness() {
        let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(3)));
        let far = rec.now_ns() + 3_600_000_000_000;
        LateTask {
            rec,
            due_ns: far,
            idx: 0,
        }
        .run();
        LateTask {
            rec,
            due_ns: 0,
            idx: 1,
        }
        .run();
        LateTask {
            rec,
            due_ns: 0,
            idx: 1,
        }
        .run();
        assert_eq!(rec.fired(), 2);
        assert_eq!(rec.early(), 1);
        assert_eq!(rec.double(), 1);
        let l = rec.sorted_lateness_us();
        assert_eq!(l.len(), 2);
        assert!(l[0] < 0, "fired an hour early: {l:?}");
        assert!(l[1] >= 0);
    }

    #[test]
    fn the_add_window_spans_every_producer() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // The second producer starts first and the first ends last: the
        // window runs from the one's start to the other's end.
        let spans = [(at(5), at(40)), (at(2), at(30)), (at(7), at(20))];
        assert_eq!(add_window(&spans), Some((at(2), at(40))));
        assert_eq!(add_window(&[]), None);
    }

    #[test]
    fn a_run_times_its_adds_from_before_the_first_one() {
        // One producer with few tasks: the adds take microseconds, and the
        // window must hold them all (never zero, never ending before it
        // starts), so adds/s is a number.
        let params = W3Params {
            n: 10,
            producers: 1,
            seed: 1,
            max_delay_ms: 2,
        };
        let r = run_timer(&params, &mut Progress::quiet());
        assert!(r.add_wall > Duration::ZERO, "{r:?}");
        assert!(r.to_record().num("adds_per_s").is_some(), "{r:?}");
    }

    /// A W3 small enough for a unit test.
    fn small() -> W3Params {
        W3Params {
            n: 2_000,
            producers: 2,
            seed: 3,
            max_delay_ms: 20,
        }
    }

    #[test]
    fn our_timer_is_correct() {
        let r = run_timer(&small(), &mut Progress::quiet());
        assert_eq!(r.fired, 4_000);
        assert_eq!((r.early, r.double, r.missing), (0, 0, 0));
    }

    #[test]
    fn mutex_binary_heap_peer_is_correct() {
        let r = run_mutex_binary_heap(&small(), &mut Progress::quiet());
        assert_eq!(r.fired, 4_000);
        assert_eq!((r.early, r.double, r.missing), (0, 0, 0));
        let rec = r.to_record();
        for f in [
            "workload",
            "impl",
            "adds_per_s",
            "late_p50_ms",
            "late_p99_ms",
            "late_max_ms",
            "early",
            "fired",
            "peak_rss_mb",
        ] {
            assert!(rec.get(f).is_some(), "missing {f}");
        }
        assert!(rec.num("late_p50_ms").unwrap() >= 0.0);
    }
}
