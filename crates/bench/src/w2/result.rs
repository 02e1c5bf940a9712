//! The figures of one W2 run and its JSON record.

use super::params::W2Params;
use super::samples::SampleSummary;
use crate::measure::WakeupCost;
use crate::report::{Record, Value};
use std::time::Duration;

/// The figures of one W2 run of one completion mode.
#[derive(Debug, Clone, PartialEq)]
pub struct W2Result {
    /// Mode name (one of [`IMPLS`]).
    pub impl_name: &'static str,
    /// The parameters it ran with.
    pub params: W2Params,
    /// The keys every request watched.
    pub keys: Vec<String>,
    /// What the pre-drawn samples amount to.
    pub samples: SampleSummary,
    /// From the start until the generator issued the last request.
    pub enqueue: Duration,
    /// From the start until every request completed or expired.
    pub elapsed: Duration,
    /// Process CPU time over the run (`None` if unavailable).
    pub cpu: Option<Duration>,
    /// The generator thread's CPU time while issuing requests.
    pub cpu_generator: Option<Duration>,
    /// The completion thread's CPU time.
    pub cpu_completer: Option<Duration>,
    /// The main thread's CPU time after the last request (clock for the
    /// completion thread, waiting for expirations).
    pub cpu_tail: Option<Duration>,
    /// What a wake-up costs on this machine, measured before the run.
    pub wakeup_cost: WakeupCost,
    /// Requests completed (by the generator's first try or the completer).
    pub completed: u64,
    /// Requests expired (`on_expiration` calls).
    pub expired: u64,
    /// `|on_complete calls − (completed + expired)|`.
    pub bad: u64,
    /// Second `on_complete` calls on one operation.
    pub double: u64,
    /// Requests `try_complete_else_watch` refused (never expected).
    pub rejected: u64,
    /// `check_and_complete` calls (0 in `purgatory` mode).
    pub checks: u64,
    /// Largest delay between a request's due time and the completion thread
    /// taking it, ms.
    pub completion_lag_max_ms: u64,
    /// Timed sleeps of the run's clock thread (generator, then main).
    pub clock_sleeps: u64,
    /// Times the completion thread parked waiting for a due request.
    pub completer_parks: u64,
    /// Watch-list entries left once every request was done.
    pub watched_after: usize,
    /// Armed timer entries left once every request was done.
    pub delayed_after: usize,
    /// Peak RSS of the process, MB (`None` without `/proc`).
    pub peak_rss_mb: Option<f64>,
}

impl W2Result {
    /// The run as a report record (the JSON fields).
    pub fn to_record(&self) -> Record {
        let n = self.params.num;
        let secs = self.enqueue.as_secs_f64();
        let actual_rate = (secs > 0.0).then(|| (n as f64 / secs).round() as u64);
        let target_rate = if self.params.rate.fract() == 0.0 && self.params.rate < 9e15 {
            Value::Int(self.params.rate as i64)
        } else {
            Value::Float(self.params.rate)
        };
        let ms = |d: Option<Duration>| d.map(|c| c.as_secs_f64() * 1e3);
        let us = |d: Option<Duration>| d.map(|c| c.as_secs_f64() * 1e6);
        let cpu_ms = ms(self.cpu);
        let wakeups_ms = ms(self.wakeup_cost.of(self.clock_sleeps, self.completer_parks));
        Record::new()
            .with("workload", "w2")
            .with("impl", self.impl_name)
            .with("allocator", crate::ALLOCATOR)
            .with("requests", n)
            .with("target_rate", target_rate)
            .with("actual_rate", actual_rate)
            .with("enqueue_ms", secs * 1e3)
            .with("elapsed_ms", self.elapsed.as_secs_f64() * 1e3)
            .with("cpu_ms", cpu_ms)
            .with("cpu_us_per_request", cpu_ms.map(|ms| ms * 1e3 / n as f64))
            .with("cpu_generator_ms", ms(self.cpu_generator))
            .with("cpu_completer_ms", ms(self.cpu_completer))
            .with("cpu_tail_ms", ms(self.cpu_tail))
            .with("wakeup_sleep_cpu_us", us(self.wakeup_cost.timed_sleep))
            .with("wakeup_park_cpu_us", us(self.wakeup_cost.park))
            .with("cpu_wakeups_ms", wakeups_ms)
            .with(
                "cpu_us_per_request_excl_wakeups",
                // The wake-ups are priced at costs measured before the run;
                // an estimate above the whole says those costs did not hold
                // during the run, and no split is given.
                cpu_ms
                    .zip(wakeups_ms)
                    .filter(|(all, w)| w <= all)
                    .map(|(all, w)| (all - w) * 1e3 / n as f64),
            )
            .with("clock_sleeps", self.clock_sleeps)
            .with("completer_parks", self.completer_parks)
            .with("completed", self.completed)
            .with("expired", self.expired)
            .with("bad", self.bad)
            .with("double", self.double)
            .with("rejected", self.rejected)
            .with("peak_rss_mb", self.peak_rss_mb)
            .with("watched_after", self.watched_after)
            .with("delayed_after", self.delayed_after)
            .with("checks", self.checks)
            .with("completion_lag_max_ms", self.completion_lag_max_ms)
            .with("pace_ms", self.params.pace_ms)
            .with("hasher", self.params.hasher.name())
            .with("timeout_ms", self.params.timeout_ms)
            .with("pct50", self.params.pct50)
            .with("pct75", self.params.pct75)
            .with("keys", self.keys.join(","))
            .with("key_space_size", self.params.key_space_size)
            .with("seed", self.params.seed)
            .with("sample_pct50", u64::from(self.samples.latency_p50))
            .with("sample_pct75", u64::from(self.samples.latency_p75))
            .with("sample_rate", self.samples.rate)
    }
}
