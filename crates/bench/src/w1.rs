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
//! - `binary_heap`: [`LazyCancelHeap`], stepping to the top of the heap.
//! - `tokio_delay_queue`: tokio-util's `DelayQueue<u64>` inside a
//!   current-thread runtime started paused; the runtime's paused clock
//!   auto-advances to the queue's next timer whenever the queue is pending.
//!
//! Timing: each phase is timed with `std::time::Instant`. Pre-sizing
//! (`reserve`/`with_capacity`) counts as part of *add*, for every
//! implementation alike. Generating the deadlines does not count anywhere.
//!
//! Memory: `bytes_per_task` is the growth of peak RSS over the add phase
//! divided by N ([`MemWindow`]). It includes the handle `Vec` the harness
//! keeps for cancelling (8 B per task for `timer` and `tokio_delay_queue`;
//! the heap cancels by its dense id and keeps a 1-byte state per task
//! instead), as the reference measurements did. The deadline array is
//! allocated before the window opens.
//!
//! Checks: a task fires *early* when its deadline is after the virtual time
//! at which it fired. A fired task that had been cancelled, a task that fires
//! twice, or a cancel that fails on a pending task counts as *bad*. Exactly
//! `N/2` tasks (the odd indices) must fire, with `early` and `bad` at 0.

use crate::peers::binary_heap::LazyCancelHeap;
use crate::report::Record;
use crate::rng;
use crate::rss::MemWindow;
use crate::TargetCheck;
use std::time::{Duration, Instant};
use timer::{Insertion, TimingWheel};

/// Implementation names, in the order they are run and reported.
pub const IMPLS: &[&str] = &["timer", "binary_heap", "tokio_delay_queue"];

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
    ("min", "total_ms_min"),
    ("max", "total_ms_max"),
    ("B/task", "bytes_per_task"),
    ("fired", "fired"),
    ("early", "early"),
    ("bad", "bad"),
    ("rounds", "rounds"),
];

/// W1's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct W1Params {
    /// Number of tasks.
    pub n: usize,
    /// PRNG seed.
    pub seed: u64,
    /// Largest delay, in ms (delays are uniform in `[1, max_delay_ms]`).
    pub max_delay_ms: u64,
}

impl Default for W1Params {
    /// The reported defaults: 1,000,000 tasks, seed 42, delays up to 60 s.
    fn default() -> Self {
        W1Params {
            n: 1_000_000,
            seed: 42,
            max_delay_ms: 60_000,
        }
    }
}

impl W1Params {
    /// The virtual time the expire phase advances to.
    pub fn horizon_ms(&self) -> u64 {
        self.max_delay_ms + 1
    }

    /// Tasks that must fire: the odd indices.
    pub fn expected_fired(&self) -> usize {
        self.n / 2
    }
}

/// The figures of one W1 run of one implementation.
#[derive(Debug, Clone, PartialEq)]
pub struct W1Result {
    /// Implementation name (one of [`IMPLS`]).
    pub impl_name: &'static str,
    /// The parameters it ran with.
    pub params: W1Params,
    /// Wall time of the add phase.
    pub add: Duration,
    /// Wall time of the cancel phase.
    pub cancel: Duration,
    /// Wall time of the expire phase.
    pub expire: Duration,
    /// Cancels performed (the even indices).
    pub cancels: usize,
    /// Peak-RSS growth during add, per task; `None` without `/proc`.
    pub bytes_per_task: Option<f64>,
    /// Tasks fired.
    pub fired: usize,
    /// Tasks fired before their deadline.
    pub early: usize,
    /// Anomalies: cancelled tasks fired, double fires, failed cancels,
    /// tasks handed back at insertion, or an expire loop that stopped moving.
    pub bad: usize,
    /// Tasks still pending after the expire phase.
    pub pending: usize,
    /// Largest virtual lateness (fire time − deadline), in ms.
    pub late_max_ms: u64,
    /// The virtual time at the end of the expire phase.
    pub end_ms: u64,
}

fn per(d: Duration, count: usize) -> Option<f64> {
    (count > 0).then(|| d.as_nanos() as f64 / count as f64)
}

impl W1Result {
    /// The run as a report record (the JSON fields).
    pub fn to_record(&self) -> Record {
        let total = self.add + self.cancel + self.expire;
        Record::new()
            .with("workload", "w1")
            .with("impl", self.impl_name)
            .with("n", self.params.n)
            .with("seed", self.params.seed)
            .with("add_ns", per(self.add, self.params.n))
            .with("cancel_ns", per(self.cancel, self.cancels))
            .with("expire_ns", per(self.expire, self.fired))
            .with("total_ms", total.as_secs_f64() * 1e3)
            .with("add_ms", self.add.as_secs_f64() * 1e3)
            .with("cancel_ms", self.cancel.as_secs_f64() * 1e3)
            .with("expire_ms", self.expire.as_secs_f64() * 1e3)
            .with("bytes_per_task", self.bytes_per_task)
            .with("fired", self.fired)
            .with("expected_fired", self.params.expected_fired())
            .with("early", self.early)
            .with("bad", self.bad)
            .with("pending", self.pending)
            .with("late_max_ms", self.late_max_ms)
            .with("end_ms", self.end_ms)
    }
}

/// Runs implementation `impl_name` once.
pub fn run(impl_name: &str, params: &W1Params) -> Result<W1Result, String> {
    match impl_name {
        "timer" => run_timer(params),
        "binary_heap" => Ok(run_binary_heap(params)),
        "tokio_delay_queue" => run_tokio_delay_queue(params),
        other => Err(format!(
            "unknown W1 implementation {other:?} (expected one of {IMPLS:?})"
        )),
    }
}

/// A deadline slot of a task that was cancelled.
const CANCELLED: u64 = u64::MAX;
/// A deadline slot of a task that fired.
const FIRED: u64 = u64::MAX - 1;

/// Per-task bookkeeping shared by every implementation: the deadlines, and
/// the fire checks. A task's deadline slot becomes [`CANCELLED`] or
/// [`FIRED`], so a second event on it is caught with a single memory access.
#[derive(Debug)]
struct Tally {
    deadlines: Vec<u64>,
    fired: usize,
    early: usize,
    bad: usize,
    late_max_ms: u64,
}

impl Tally {
    fn new(params: &W1Params) -> Self {
        Tally {
            deadlines: rng::delays_ms(params.seed, params.n, params.max_delay_ms),
            fired: 0,
            early: 0,
            bad: 0,
            late_max_ms: 0,
        }
    }

    /// Task `id` fired at virtual time `now`.
    #[inline]
    fn fire(&mut self, id: u64, now: u64) {
        let Some(slot) = self.deadlines.get_mut(id as usize) else {
            self.bad += 1;
            return;
        };
        let deadline = *slot;
        if deadline >= FIRED {
            self.bad += 1; // fired after a cancel, or twice
            return;
        }
        if deadline > now {
            self.early += 1;
        } else {
            self.late_max_ms = self.late_max_ms.max(now - deadline);
        }
        *slot = FIRED;
        self.fired += 1;
    }

    /// Marks the even indices cancelled (outside the timed phase).
    fn mark_cancelled(&mut self) {
        for d in self.deadlines.iter_mut().step_by(2) {
            *d = CANCELLED;
        }
    }

    fn into_result(
        self,
        impl_name: &'static str,
        params: &W1Params,
        phases: [Duration; 3],
        bytes_per_task: Option<f64>,
        pending: usize,
        end_ms: u64,
    ) -> W1Result {
        W1Result {
            impl_name,
            params: params.clone(),
            add: phases[0],
            cancel: phases[1],
            expire: phases[2],
            cancels: params.n.div_ceil(2),
            bytes_per_task,
            fired: self.fired,
            early: self.early,
            bad: self.bad,
            pending,
            late_max_ms: self.late_max_ms,
            end_ms,
        }
    }
}

/// W1 on this project's `timer::TimingWheel<u64>`.
pub fn run_timer(params: &W1Params) -> Result<W1Result, String> {
    let n = params.n;
    let mut tally = Tally::new(params);
    let mut wheel = TimingWheel::<u64>::new(1, 20, 0).map_err(|e| e.to_string())?;

    // Add.
    let mem = MemWindow::open();
    let t = Instant::now();
    wheel.reserve(n);
    let mut handles = Vec::with_capacity(n);
    // Tasks handed back at insertion (none in W1: every delay is ≥ 1 tick).
    let mut expired_at_add: Vec<u64> = Vec::new();
    for (i, &d) in tally.deadlines.iter().enumerate() {
        match wheel.insert(d, i as u64) {
            Insertion::Scheduled(h) => handles.push(h),
            Insertion::Expired(task) => expired_at_add.push(task),
        }
    }
    let add = t.elapsed();
    let bytes_per_task = mem.bytes_per(n);

    // Cancel. `handles` holds the scheduled tasks in index order; when none
    // was handed back, task i's handle is handles[i].
    let mut failed_cancels = 0;
    let t = Instant::now();
    if expired_at_add.is_empty() {
        for h in handles.iter().step_by(2) {
            if wheel.cancel(*h).is_none() {
                failed_cancels += 1;
            }
        }
    } else {
        for i in (0..n as u64).step_by(2) {
            if let Err(skipped) = expired_at_add.binary_search(&i) {
                if wheel.cancel(handles[i as usize - skipped]).is_none() {
                    failed_cancels += 1;
                }
            }
        }
    }
    let cancel = t.elapsed();
    drop(handles);
    // A task handed back at insertion runs at time 0: early, since every
    // W1 deadline is ≥ 1, and counted as bad too.
    for &task in &expired_at_add {
        tally.fire(task, 0);
    }
    tally.mark_cancelled();
    tally.bad += failed_cancels + expired_at_add.len();

    // Expire: jump from due bucket to due bucket.
    let horizon = params.horizon_ms();
    let mut now = 0;
    let mut stalled = 0;
    let t = Instant::now();
    while let Some(next) = wheel.next_expiration() {
        if next > horizon {
            break;
        }
        now = now.max(next);
        let fired = wheel.advance(now, |task| tally.fire(task, now));
        // A bucket emptied by cancels fires nothing but leaves the queue;
        // the same head three times in a row means the loop is stuck.
        if fired == 0 && wheel.next_expiration() == Some(next) {
            stalled += 1;
            if stalled == 3 {
                tally.bad += 1;
                break;
            }
        } else {
            stalled = 0;
        }
    }
    if stalled < 3 {
        now = horizon;
        wheel.advance(horizon, |task| tally.fire(task, horizon));
    }
    let expire = t.elapsed();

    Ok(tally.into_result(
        "timer",
        params,
        [add, cancel, expire],
        bytes_per_task,
        wheel.len(),
        now,
    ))
}

/// W1 on the `BinaryHeap` + lazy cancellation peer.
pub fn run_binary_heap(params: &W1Params) -> W1Result {
    let n = params.n;
    let mut tally = Tally::new(params);

    let mem = MemWindow::open();
    let t = Instant::now();
    let mut heap = LazyCancelHeap::with_capacity(n);
    for &d in &tally.deadlines {
        heap.add(d);
    }
    let add = t.elapsed();
    let bytes_per_task = mem.bytes_per(n);

    let mut failed_cancels = 0;
    let t = Instant::now();
    for id in (0..n as u64).step_by(2) {
        if !heap.cancel(id) {
            failed_cancels += 1;
        }
    }
    let cancel = t.elapsed();
    tally.mark_cancelled();
    tally.bad += failed_cancels;

    let horizon = params.horizon_ms();
    let mut now = 0;
    let t = Instant::now();
    while let Some(next) = heap.next_deadline() {
        if next > horizon {
            break;
        }
        now = now.max(next);
        heap.expire(now, |id| tally.fire(id, now));
    }
    now = horizon;
    heap.expire(horizon, |id| tally.fire(id, horizon));
    let expire = t.elapsed();

    tally.into_result(
        "binary_heap",
        params,
        [add, cancel, expire],
        bytes_per_task,
        heap.len(),
        now,
    )
}

/// W1 on tokio-util's `DelayQueue<u64>` in a paused current-thread runtime.
pub fn run_tokio_delay_queue(params: &W1Params) -> Result<W1Result, String> {
    use tokio_util::time::DelayQueue;

    let n = params.n;
    let mut tally = Tally::new(params);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;

    rt.block_on(async move {
        let start = tokio::time::Instant::now();

        let mem = MemWindow::open();
        let t = Instant::now();
        let mut queue = DelayQueue::with_capacity(n);
        let mut keys = Vec::with_capacity(n);
        for (i, &d) in tally.deadlines.iter().enumerate() {
            keys.push(queue.insert_at(i as u64, start + Duration::from_millis(d)));
        }
        let add = t.elapsed();
        let bytes_per_task = mem.bytes_per(n);

        let mut failed_cancels = 0;
        let t = Instant::now();
        for key in keys.iter().step_by(2) {
            if queue.try_remove(key).is_none() {
                failed_cancels += 1;
            }
        }
        let cancel = t.elapsed();
        drop(keys);
        tally.mark_cancelled();
        tally.bad += failed_cancels;

        // When nothing is due, `poll_expired` is pending and the paused
        // runtime jumps its clock to the queue's next timer.
        let t = Instant::now();
        while let Some(expired) = std::future::poll_fn(|cx| queue.poll_expired(cx)).await {
            let now = (tokio::time::Instant::now() - start).as_millis() as u64;
            tally.fire(expired.into_inner(), now);
        }
        let expire = t.elapsed();
        let end_ms = (tokio::time::Instant::now() - start).as_millis() as u64;

        Ok(tally.into_result(
            "tokio_delay_queue",
            params,
            [add, cancel, expire],
            bytes_per_task,
            queue.len(),
            end_ms,
        ))
    })
}

/// The targets of issue 2 for W1, evaluated on one run's records (one per
/// implementation): no early fire anywhere, every implementation fired
/// exactly `N/2` with nothing bad, `timer`'s total ≤ 0.8 × the fastest
/// peer's, and `timer`'s memory ≤ 48 B per task.
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
        checks.push(TargetCheck::new(
            format!("{name}: fired = {fired} of {expected} expected, bad = {bad}"),
            fired == expected && bad == 0.0,
        ));
    }
    let timer = records.iter().find(|r| r.str("impl") == Some("timer"));
    let best_peer = records
        .iter()
        .filter(|r| r.str("impl") != Some("timer"))
        .filter_map(|r| Some((r.str("impl")?, r.num("total_ms")?)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match (timer.and_then(|t| t.num("total_ms")), best_peer) {
        (Some(ours), Some((peer, theirs))) => checks.push(TargetCheck::new(
            format!(
                "timer total {ours:.1} ms = {:.2} × fastest peer {peer} ({theirs:.1} ms) (target ≤ 0.80)",
                ours / theirs
            ),
            ours <= 0.8 * theirs,
        )),
        _ => checks.push(TargetCheck::unknown("timer total vs fastest peer")),
    }
    match timer.and_then(|t| t.num("bytes_per_task")) {
        Some(b) => checks.push(TargetCheck::new(
            format!("timer bytes_per_task = {b:.1} (target ≤ 48)"),
            b <= 48.0,
        )),
        None => checks.push(TargetCheck::unknown("timer bytes_per_task (no /proc)")),
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> W1Params {
        W1Params {
            n: 5_001,
            seed: 7,
            max_delay_ms: 3_000,
        }
    }

    fn assert_correct(r: &W1Result) {
        assert_eq!(r.fired, 2_500, "{r:?}");
        assert_eq!(r.early, 0, "{r:?}");
        assert_eq!(r.bad, 0, "{r:?}");
        assert_eq!(r.pending, 0, "{r:?}");
        assert_eq!(r.late_max_ms, 0, "{r:?}");
        assert_eq!(r.cancels, 2_501);
    }

    #[test]
    fn our_timing_wheel_is_correct() {
        let r = run_timer(&small()).unwrap();
        assert_correct(&r);
        assert_eq!(r.end_ms, 3_001);
    }

    #[test]
    fn binary_heap_peer_is_correct() {
        let r = run_binary_heap(&small());
        assert_correct(&r);
        assert_eq!(r.end_ms, 3_001);
    }

    #[test]
    fn tokio_delay_queue_peer_is_correct() {
        let r = run_tokio_delay_queue(&small()).unwrap();
        assert_correct(&r);
        assert!(r.end_ms <= 3_000);
    }

    #[test]
    fn tally_catches_early_double_and_cancelled_fires() {
        let p = W1Params {
            n: 4,
            seed: 1,
            max_delay_ms: 10,
        };
        let mut t = Tally::new(&p);
        t.deadlines = vec![5, 6, 7, 8];
        t.mark_cancelled();
        t.fire(1, 5); // early
        t.fire(1, 6); // double
        t.fire(0, 9); // cancelled
        t.fire(3, 10); // late by 2
        t.fire(9, 10); // unknown id
        assert_eq!((t.fired, t.early, t.bad, t.late_max_ms), (2, 1, 3, 2));
    }

    #[test]
    fn records_carry_the_required_fields() {
        let rec = run_binary_heap(&W1Params {
            n: 100,
            seed: 42,
            max_delay_ms: 100,
        })
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
