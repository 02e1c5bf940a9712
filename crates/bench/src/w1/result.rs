//! The figures of one W1 run and its JSON record.

use super::params::W1Params;
use crate::report::Record;
use std::time::Duration;

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
