//! Burst — N timer tasks sharing one absolute deadline, after a churn that
//! scatters the timer's arena (W4 phase D's shape, on the timer alone).
//!
//! One `timer::Timer` with the defaults (tick 1 ms, 20 buckets, the real
//! clock) and its `Reaper` running. Phases:
//!
//! 1. **Churn.** `n` tasks with delays uniform in `[1, CHURN_MAX_DELAY_MS]`
//!    ms by default (seeded); then a random half of them, in random order, is
//!    cancelled, and the rest expire. The timer's slots are thus freed in
//!    scattered order, as in a broker that has run for a while, and the
//!    burst's tasks land in scattered slots. One churn task in
//!    [`STANDING_EVERY`] has a *standing* twin due in an hour, which stays
//!    pending until the burst has drained, as a broker's other timeouts do:
//!    without it the arena would empty, give its memory back and hand the
//!    burst fresh slots in order.
//! 2. **Burst.** A deadline `D` is fixed (now plus twice the churn's add
//!    time plus [`DEADLINE_MARGIN_MS`], so that filling ends before it); `n`
//!    tasks are added, each with the delay that puts its deadline at `D`
//!    exactly (the timer rounds a deadline up to its millisecond; the delay
//!    is taken short of `D` by just under a millisecond, so that the clock
//!    moving on between our reading and the timer's cannot push it to
//!    `D + 1`). Each task records when it ran against the instant `D`.
//! 3. **Hand-over rate.** How fast the executor takes expired tasks from the
//!    reaper and runs them, apart from finding them: a gate task blocks the
//!    executor; `max(n, HANDOVER_MIN)` tasks (by default) are added with a 1 ms delay and
//!    left to expire, so the reaper hands them all over while the executor
//!    is blocked; then the gate opens, and the rate is the task count
//!    divided by the time from the opening to the last task's run.
//!
//! Figures: `first_ms` (deadline → first run), `drain_ms` (deadline → last),
//! `late_p50_ms`, `late_p99_ms`, `fired`, `early` (runs before `D`: must be
//! 0), `handover_rate` (tasks/s) and `late_p99_target_ms` =
//! `n / handover_rate + 5 ms`, the lateness the burst would show if the
//! reaper handed tasks over as fast as the executor runs them. Also the CPU
//! time the reaper and the executor threads spent from the deadline to the
//! last task (`reaper_cpu_ms`, `executor_cpu_ms`, from the kernel's
//! per-thread `schedstat`): on a busy machine, where wall times stretch,
//! they still tell which of the two bounds the drain. Their window opens
//! when the measuring thread wakes at the deadline, which a busy machine
//! delays: a small burst may be handed over before, and show the reaper
//! at 0.

use crate::measure::lateness::Recorder;
use crate::measure::rss;
use crate::progress::{wait_for, Progress};
use crate::report::Record;
use crate::rng::SplitMix64;
use crate::{stats, TargetCheck};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use timer::{Clock, Reaper, SystemClock, Timer, TimerBuilder, TimerTask};

/// Implementation names.
pub const IMPLS: &[&str] = &["timer"];

/// Fields that get `_min`/`_max` companions when rounds are merged.
pub const SPREAD: &[&str] = &["first_ms", "late_p99_ms"];

/// Table columns: `(heading, field)`.
pub const COLUMNS: &[(&str, &str)] = &[
    ("impl", "impl"),
    ("n", "n"),
    ("first ms", "first_ms"),
    ("p50 ms", "late_p50_ms"),
    ("p99 ms", "late_p99_ms"),
    ("drain ms", "drain_ms"),
    ("p99 target ms", "late_p99_target_ms"),
    ("reaper CPU ms", "reaper_cpu_ms"),
    ("executor CPU ms", "executor_cpu_ms"),
    ("hand-over/s", "handover_rate"),
    ("fired", "fired"),
    ("early", "early"),
    ("fill ms", "fill_ms"),
    ("slack ms", "slack_ms"),
    ("peak RSS MB", "peak_rss_mb"),
    ("rounds", "rounds"),
];

/// One churn task in this many has a standing twin (see the module docs).
pub const STANDING_EVERY: usize = 1000;
/// How far off a standing task is due: it never fires during a run.
const STANDING_DELAY: Duration = Duration::from_secs(3600);

/// Largest churn delay, ms.
pub const CHURN_MAX_DELAY_MS: u64 = 1000;
/// Time left between the expected end of the burst's fill and its deadline.
pub const DEADLINE_MARGIN_MS: u64 = 100;
/// Fewest tasks the hand-over rate is measured with.
pub const HANDOVER_MIN: usize = 100_000;
/// How long past the deadline the run waits for the last task.
const GIVE_UP: Duration = Duration::from_secs(120);

/// Salt for the churn's random stream.
const CHURN_STREAM: u64 = 0x6368_7572_6e00_0004;

/// The burst's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BurstParams {
    /// Tasks in the burst (and in the churn before it).
    pub n: usize,
    /// PRNG seed (the churn's delays and cancel order).
    pub seed: u64,
    /// Largest churn delay, ms.
    pub churn_max_delay_ms: u64,
    /// Fewest tasks the hand-over rate is measured with.
    pub handover_min: usize,
}

impl Default for BurstParams {
    /// The reported defaults: 1,000,000 tasks, seed 42.
    fn default() -> Self {
        BurstParams {
            n: 1_000_000,
            seed: 42,
            churn_max_delay_ms: CHURN_MAX_DELAY_MS,
            handover_min: HANDOVER_MIN,
        }
    }
}

/// Opens once; blocks the executor thread until then.
#[derive(Debug, Default)]
struct Gate {
    /// (the executor is inside, the gate is open)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Gate {
    fn wait_entered(&self) {
        let mut s = self.state.lock();
        while !s.0 {
            self.cv.wait(&mut s);
        }
    }

    fn open(&self) {
        self.state.lock().1 = true;
        self.cv.notify_all();
    }
}

/// The timer's task: records its lateness, or holds the executor at a gate.
#[derive(Debug)]
enum BurstTask {
    Late {
        rec: &'static Recorder,
        idx: u32,
        due_ns: u64,
    },
    Gate(Arc<Gate>),
}

impl TimerTask for BurstTask {
    fn run(self) {
        match self {
            BurstTask::Late { rec, idx, due_ns } => rec.record(idx, due_ns),
            BurstTask::Gate(gate) => {
                let mut s = gate.state.lock();
                s.0 = true;
                gate.cv.notify_all();
                while !s.1 {
                    gate.cv.wait(&mut s);
                }
            }
        }
    }
}

/// The figures of one burst run.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstResult {
    /// The parameters it ran with.
    pub params: BurstParams,
    /// Wall time of the churn phase (adds, cancels, expiries).
    pub churn: Duration,
    /// Churn tasks cancelled (a task that had already fired is not).
    pub churn_cancelled: usize,
    /// Churn tasks that fired.
    pub churn_fired: usize,
    /// Standing tasks added with the churn (see the module docs).
    pub standing: usize,
    /// Standing tasks still pending, and cancelled, once the burst drained
    /// (all of them, unless a standing task fired early).
    pub standing_cancelled: usize,
    /// Wall time of the burst's adds.
    pub fill: Duration,
    /// Deadline minus the end of the fill, ms (negative: the fill overran).
    pub slack_ms: f64,
    /// Lateness of the burst's tasks, µs, sorted.
    pub lateness_us: Vec<i32>,
    /// Burst tasks that ran before the deadline.
    pub early: usize,
    /// Burst tasks that ran twice.
    pub double: usize,
    /// Tasks the hand-over rate was measured with.
    pub handover_tasks: usize,
    /// Tasks per second the executor ran once handed over (`None` if the
    /// measurement did not finish).
    pub handover_rate: Option<f64>,
    /// Peak RSS of the process, MB.
    pub peak_rss_mb: Option<f64>,
    /// CPU time of the reaper thread from the deadline (as the measuring
    /// thread wakes then) to the last burst task (`None` where the kernel
    /// does not tell).
    pub reaper_cpu: Option<Duration>,
    /// The same for the executor thread.
    pub executor_cpu: Option<Duration>,
}

impl BurstResult {
    /// The run as a report record.
    pub fn to_record(&self) -> Record {
        let n = self.params.n;
        let ms = |us: i32| f64::from(us) / 1e3;
        let pct = |p: f64| stats::percentile(&self.lateness_us, p).map(ms);
        let target = self
            .handover_rate
            .filter(|r| *r > 0.0)
            .map(|r| n as f64 / r * 1e3 + 5.0);
        Record::new()
            .with("workload", "burst")
            .with("impl", "timer")
            .with("allocator", crate::ALLOCATOR)
            .with("n", n)
            .with("seed", self.params.seed)
            .with("first_ms", self.lateness_us.first().copied().map(ms))
            .with("drain_ms", self.lateness_us.last().copied().map(ms))
            .with("late_p50_ms", pct(50.0))
            .with("late_p99_ms", pct(99.0))
            .with("fired", self.lateness_us.len())
            .with("early", self.early)
            .with("double", self.double)
            .with("missing", n.saturating_sub(self.lateness_us.len()))
            .with(
                "handover_rate",
                self.handover_rate.map(|r| r.round() as u64),
            )
            .with("handover_tasks", self.handover_tasks)
            .with("late_p99_target_ms", target)
            .with("churn_ms", self.churn.as_secs_f64() * 1e3)
            .with("churn_cancelled", self.churn_cancelled)
            .with("churn_fired", self.churn_fired)
            .with("standing", self.standing)
            .with("standing_cancelled", self.standing_cancelled)
            .with("fill_ms", self.fill.as_secs_f64() * 1e3)
            .with("slack_ms", self.slack_ms)
            .with("peak_rss_mb", self.peak_rss_mb)
            .with(
                "reaper_cpu_ms",
                self.reaper_cpu.map(|d| d.as_secs_f64() * 1e3),
            )
            .with(
                "executor_cpu_ms",
                self.executor_cpu.map(|d| d.as_secs_f64() * 1e3),
            )
    }
}

/// Runs implementation `impl_name` once.
///
/// # Errors
/// An unknown implementation, or a timer that cannot start.
pub fn run(
    impl_name: &str,
    params: &BurstParams,
    progress: &mut Progress,
) -> Result<BurstResult, String> {
    match impl_name {
        "timer" => run_timer(params, progress),
        other => Err(format!(
            "unknown burst implementation {other:?} (expected one of {IMPLS:?})"
        )),
    }
}

/// The burst on this project's timer.
fn run_timer(params: &BurstParams, progress: &mut Progress) -> Result<BurstResult, String> {
    let n = params.n;
    if u32::try_from(n.max(params.handover_min)).is_err() {
        return Err(format!("--n must be at most {}", u32::MAX));
    }
    rss::reset_peak();
    let system = SystemClock::new();
    let origin = system.origin();
    let clock: Arc<dyn Clock> = Arc::new(system);
    let timer: Arc<Timer<BurstTask>> = Arc::new(
        TimerBuilder::new()
            .shared_clock(clock.clone())
            .build()
            .map_err(|e| format!("cannot build the timer: {e}"))?,
    );
    let reaper = Reaper::start(timer.clone());

    // 1. Churn.
    progress.phase("churn", n as u64);
    let churn_start = Instant::now();
    let churn_rec: &'static Recorder = Box::leak(Box::new(Recorder::with_origin(n, origin)));
    let mut rng = SplitMix64::new(params.seed ^ CHURN_STREAM);
    let mut handles = Vec::with_capacity(n);
    let standing_rec: &'static Recorder = Box::leak(Box::new(Recorder::with_origin(
        n.div_ceil(STANDING_EVERY),
        origin,
    )));
    let mut standing = Vec::with_capacity(n.div_ceil(STANDING_EVERY));
    for i in 0..n {
        if i % STANDING_EVERY == 0 {
            let task = BurstTask::Late {
                rec: standing_rec,
                idx: standing.len() as u32,
                due_ns: u64::MAX,
            };
            standing.extend(timer.add(STANDING_DELAY, task).ok());
        }
        let d = rng.delay_ms(params.churn_max_delay_ms);
        let due_ns = clock.now_nanos() + d * 1_000_000;
        let task = BurstTask::Late {
            rec: churn_rec,
            idx: i as u32,
            due_ns,
        };
        handles.push(timer.add(Duration::from_millis(d), task).ok());
    }
    let churn_add = churn_start.elapsed();
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let mut churn_cancelled = 0;
    for &i in &order[..n / 2] {
        if let Some(h) = &handles[i as usize] {
            churn_cancelled += usize::from(timer.cancel(h));
        }
    }
    drop((handles, order));
    let give_up = Instant::now() + Duration::from_millis(params.churn_max_delay_ms) + GIVE_UP;
    wait_for(n - churn_cancelled, give_up, progress, || churn_rec.fired());
    let churn = churn_start.elapsed();

    // 2. Burst.
    let margin_ms = 2 * churn_add.as_millis() as u64 + DEADLINE_MARGIN_MS;
    let deadline_ms = clock.now_ms() + margin_ms;
    let deadline_ns = deadline_ms * 1_000_000;
    progress.phase("burst fill", n as u64);
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::with_origin(n, origin)));
    let fill_start = Instant::now();
    for i in 0..n {
        let now = clock.now_nanos();
        let delay = deadline_ns.saturating_sub(now + 999_999).max(1);
        let task = BurstTask::Late {
            rec,
            idx: i as u32,
            due_ns: deadline_ns,
        };
        let _ = timer.add(Duration::from_nanos(delay), task);
    }
    let fill = fill_start.elapsed();
    let slack_ms = (deadline_ns as f64 - clock.now_nanos() as f64) / 1e6;
    progress.phase("burst expiry", n as u64);
    let deadline = origin + Duration::from_millis(deadline_ms);
    thread::sleep(deadline.saturating_duration_since(Instant::now()));
    let threads_before = [REAPER_THREAD, EXECUTOR_THREAD].map(threads_cpu);
    let give_up = deadline + GIVE_UP;
    wait_for(n, give_up, progress, || rec.fired());
    let cpu_since =
        |thread, before: Option<Duration>| Some(threads_cpu(thread)?.saturating_sub(before?));
    let reaper_cpu = cpu_since(REAPER_THREAD, threads_before[0]);
    let executor_cpu = cpu_since(EXECUTOR_THREAD, threads_before[1]);
    let standing_cancelled = standing.iter().filter(|h| timer.cancel(h)).count();

    // 3. Hand-over rate.
    let m = n.max(params.handover_min);
    progress.phase("hand-over rate", m as u64);
    let handover_rate = measure_handover(&timer, &*clock, origin, m, progress);

    reaper.stop();
    timer.shutdown();
    Ok(BurstResult {
        params: params.clone(),
        churn,
        churn_cancelled,
        churn_fired: churn_rec.fired(),
        standing: standing.len(),
        standing_cancelled,
        fill,
        slack_ms,
        lateness_us: rec.sorted_lateness_us(),
        early: rec.early(),
        double: rec.double(),
        handover_tasks: m,
        handover_rate,
        peak_rss_mb: rss::peak_rss_kb().map(|kb| kb as f64 / 1024.0),
        reaper_cpu,
        executor_cpu,
    })
}

/// How the names of the timer's reaper and executor threads start, as the
/// kernel keeps them (15 bytes at most).
const REAPER_THREAD: &str = "ExpirationReape";
const EXECUTOR_THREAD: &str = "executor-";

/// CPU time of this process's threads whose name starts with `prefix`,
/// summed, from `/proc/self/task/*/schedstat` (nanoseconds on a CPU). `None`
/// where there is no such file, or no such thread.
fn threads_cpu(prefix: &str) -> Option<Duration> {
    let mut total = None;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let path = task.path();
        let named = std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.starts_with(prefix));
        let ns = std::fs::read_to_string(path.join("schedstat")).ok();
        let ns = ns.and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
        if let (true, Some(ns)) = (named, ns) {
            total = Some(total.unwrap_or(Duration::ZERO) + Duration::from_nanos(ns));
        }
    }
    total
}

/// The executor's hand-over rate, tasks/s (see the module docs).
fn measure_handover(
    timer: &Timer<BurstTask>,
    clock: &dyn Clock,
    origin: Instant,
    m: usize,
    progress: &mut Progress,
) -> Option<f64> {
    let gate = Arc::new(Gate::default());
    timer
        .add(Duration::ZERO, BurstTask::Gate(gate.clone()))
        .ok()?;
    gate.wait_entered();
    // Each task's lateness against the clock's origin is when it ran.
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::with_origin(m, origin)));
    for i in 0..m {
        let task = BurstTask::Late {
            rec,
            idx: i as u32,
            due_ns: 0,
        };
        let _ = timer.add(Duration::from_millis(1), task);
    }
    let give_up = Instant::now() + GIVE_UP;
    let handed_over = wait_for(m, give_up, progress, || m - timer.len().min(m));
    // The reaper submits a batch just after taking it off the wheel.
    thread::sleep(Duration::from_millis(20));
    let opened_ns = clock.now_nanos();
    gate.open();
    let ran = wait_for(m, Instant::now() + GIVE_UP, progress, || rec.fired());
    let last_us = rec.sorted_lateness_us().last().copied()?;
    let drain_s = (f64::from(last_us) * 1e3 - opened_ns as f64) / 1e9;
    (handed_over && ran && drain_s > 0.0).then(|| m as f64 / drain_s)
}

/// Whether one burst record's counts are exact: every task fired once,
/// none early, and every standing task was still pending after the burst.
pub fn counts_exact(r: &Record) -> bool {
    let field = |f: &str| r.num(f).unwrap_or(f64::NAN);
    field("fired") == field("n")
        && field("early") == 0.0
        && field("double") == 0.0
        && field("standing_cancelled") == field("standing")
}

/// The burst's targets (issue 15): none early and every task fired once;
/// `first_ms` ≤ 5 (≤ 20 from 10,000,000 tasks); `late_p99_ms` ≤ the
/// hand-over target.
pub fn targets(records: &[Record]) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    for r in records {
        let field = |f: &str| r.num(f).unwrap_or(f64::NAN);
        let (n, fired, early, double) =
            (field("n"), field("fired"), field("early"), field("double"));
        let (standing, kept) = (field("standing"), field("standing_cancelled"));
        let (every, note) = crate::exact_in_every_round(r);
        checks.push(TargetCheck::new(
            format!(
                "fired {fired} of {n}, early {early} (target 0), double {double}, \
                 standing tasks pending after the burst {kept} of {standing}{note}"
            ),
            counts_exact(r) && every,
        ));
        let first_limit = if n >= 10_000_000.0 { 20.0 } else { 5.0 };
        match r.num("first_ms") {
            Some(f) => checks.push(TargetCheck::new(
                format!("first_ms = {f:.3} (target ≤ {first_limit})"),
                f <= first_limit,
            )),
            None => checks.push(TargetCheck::unknown("first_ms (nothing fired)")),
        }
        match (r.num("late_p99_ms"), r.num("late_p99_target_ms")) {
            (Some(p99), Some(t)) => checks.push(TargetCheck::new(
                format!("late_p99_ms = {p99:.3} (target ≤ n / hand-over rate + 5 = {t:.3})"),
                p99 <= t,
            )),
            _ => checks.push(TargetCheck::unknown("late_p99_ms vs the hand-over rate")),
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_burst_fires_every_task_once_and_none_early() {
        let params = BurstParams {
            n: 2_000,
            seed: 3,
            churn_max_delay_ms: 20,
            handover_min: 2_000,
        };
        let r = run("timer", &params, &mut Progress::quiet()).unwrap();
        assert_eq!(r.lateness_us.len(), 2_000, "{:?}", r.to_record());
        assert_eq!((r.early, r.double), (0, 0));
        assert!(r.churn_cancelled > 0 && r.churn_cancelled <= 1_000);
        assert_eq!(r.churn_fired + r.churn_cancelled, 2_000);
        assert_eq!((r.standing, r.standing_cancelled), (2, 2));
        assert!(r.handover_rate.is_some_and(|x| x > 0.0));
        let rec = r.to_record();
        for f in [
            "workload",
            "impl",
            "first_ms",
            "drain_ms",
            "late_p99_ms",
            "fired",
            "early",
        ] {
            assert!(rec.get(f).is_some(), "missing {f}");
        }
        assert_eq!(rec.str("workload"), Some("burst"));
        assert_eq!(targets(&[rec])[0].met, Some(true));
        assert!(run("nope", &params, &mut Progress::quiet()).is_err());
    }
}
