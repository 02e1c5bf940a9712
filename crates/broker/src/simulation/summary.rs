//! What a simulation run reports: progress lines while it runs, and the
//! summary at the end (human-readable and as one JSON object).
//!
//! Invariant: in virtual time every field of [`Summary`] but
//! [`Summary::handler_threads_used`] is a function of the configuration
//! alone (the seed included), so two runs with the same seed give equal
//! summaries. Wall-clock measurements are therefore kept out of it; the
//! example reports them separately. Which request-handler threads take a
//! share of a run is the kernel's scheduling, so that one count may differ
//! between runs whose runs are large enough to share (see
//! `handlers.rs`); a run that never shares counts 1 every time.

use std::fmt;

use super::config::SimConfig;

/// A heartbeat sent more than this after it was due counts as late: the
/// real-time engine fell behind its schedule, and the coordinator saw the
/// consumer later than the consumer spoke (which can turn a detected stall
/// into a false eviction).
pub const LATE_HEARTBEAT_MS: u64 = 50;

/// One status line, emitted every [`SimConfig::progress_interval_ms`] of
/// simulated time and at the end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Simulated time since the start (ms).
    pub elapsed_ms: u64,
    /// Wall time since the start (ms).
    pub wall_ms: u64,
    /// In virtual time, the wall time the rest of the run is expected to take
    /// at the pace so far (ms); `None` in real time.
    pub eta_ms: Option<u64>,
    /// Members in their groups now.
    pub alive: usize,
    /// Heartbeats handled per simulated second since the previous line.
    pub heartbeats_per_s: f64,
    /// The heartbeat purgatory's watched count.
    pub watched: usize,
    /// The heartbeat purgatory's delayed (timer) count.
    pub delayed: usize,
    /// Evictions so far.
    pub evictions: u64,
    /// Rebalances so far.
    pub rebalances: u64,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[t={:>6.1}s wall {:>6.1}s",
            self.elapsed_ms as f64 / 1000.0,
            self.wall_ms as f64 / 1000.0
        )?;
        if let Some(eta_ms) = self.eta_ms {
            write!(f, " eta {:>6.1}s", eta_ms as f64 / 1000.0)?;
        }
        write!(
            f,
            "] alive {:>7}  heartbeats/s {:>9.1}  pending: watched {:>7} delayed {:>7}  evicted {:>5}  rebalances {:>5}",
            self.alive,
            self.heartbeats_per_s,
            self.watched,
            self.delayed,
            self.evictions,
            self.rebalances
        )
    }
}

/// The outcome of a run (see the `simulation` module docs for definitions).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The configuration that ran.
    pub config: SimConfig,
    /// Consumers that crashed.
    pub injected_crashes: usize,
    /// Consumers that stalled.
    pub injected_stalls: usize,
    /// Injected failures the coordinator detected (evicted the member for).
    pub detected_failures: usize,
    /// Injected failures not detected by the end of the run.
    pub undetected_failures: usize,
    /// Evictions of members that had neither crashed nor stalled.
    pub false_evictions: usize,
    /// Detection delay percentiles (ms); `None` when nothing was detected.
    pub detection_delay_p50_ms: Option<u64>,
    /// 99th percentile detection delay (ms).
    pub detection_delay_p99_ms: Option<u64>,
    /// Largest detection delay (ms).
    pub detection_delay_max_ms: Option<u64>,
    /// Generation bumps after the groups formed (evictions plus rejoins).
    pub rebalances: u64,
    /// Members that rejoined after being evicted.
    pub rejoins: u64,
    /// Heartbeat requests the coordinator handled.
    pub heartbeats: u64,
    /// Heartbeats per simulated second.
    pub heartbeats_per_s: f64,
    /// Request-handler threads that handled at least one heartbeat: 1 when
    /// every run of heartbeats was too small to share out, at most
    /// [`SimConfig::handler_threads`].
    pub handler_threads_used: usize,
    /// Heartbeats the engine sent more than [`LATE_HEARTBEAT_MS`] after
    /// they were due (a real-time engine running behind; always 0 in
    /// virtual time).
    pub late_heartbeats: u64,
    /// The most any heartbeat was sent after it was due (ms).
    pub heartbeat_lag_max_ms: u64,
    /// Members in their groups at the end.
    pub alive_at_end: usize,
    /// The heartbeat purgatory's watched count at the end.
    pub watched_at_end: usize,
    /// The heartbeat purgatory's delayed count at the end.
    pub delayed_at_end: usize,
}

/// The `p`-th percentile of sorted `values` by nearest rank.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn json_opt(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_string(), |v| v.to_string())
}

fn opt_ms(value: Option<u64>) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{v} ms"))
}

impl Summary {
    /// Injected failures in all.
    pub fn injected_failures(&self) -> usize {
        self.injected_crashes + self.injected_stalls
    }

    /// The summary as one line of JSON (fields in a fixed order).
    pub fn to_json(&self) -> String {
        let c = &self.config;
        format!(
            concat!(
                "{{\"consumers\":{},\"groups\":{},\"heartbeat_interval_ms\":{},\"session_timeout_ms\":{},",
                "\"crash_rate\":{},\"stall_rate\":{},\"duration_s\":{},\"seed\":{},\"virtual_time\":{},\"handler_threads\":{},",
                "\"injected_crashes\":{},\"injected_stalls\":{},\"detected_failures\":{},",
                "\"undetected_failures\":{},\"false_evictions\":{},",
                "\"detection_delay_p50_ms\":{},\"detection_delay_p99_ms\":{},\"detection_delay_max_ms\":{},",
                "\"rebalances\":{},\"rejoins\":{},\"heartbeats\":{},\"heartbeats_per_s\":{:.1},",
                "\"late_heartbeats\":{},\"heartbeat_lag_max_ms\":{},",
                "\"alive_at_end\":{},\"watched_at_end\":{},\"delayed_at_end\":{},",
                "\"handler_threads_used\":{}}}"
            ),
            c.consumers,
            c.groups,
            c.heartbeat_interval_ms,
            c.session_timeout_ms,
            c.crash_rate,
            c.stall_rate,
            c.duration_ms as f64 / 1000.0,
            c.seed,
            c.virtual_time,
            c.handler_threads,
            self.injected_crashes,
            self.injected_stalls,
            self.detected_failures,
            self.undetected_failures,
            self.false_evictions,
            json_opt(self.detection_delay_p50_ms),
            json_opt(self.detection_delay_p99_ms),
            json_opt(self.detection_delay_max_ms),
            self.rebalances,
            self.rejoins,
            self.heartbeats,
            self.heartbeats_per_s,
            self.late_heartbeats,
            self.heartbeat_lag_max_ms,
            self.alive_at_end,
            self.watched_at_end,
            self.delayed_at_end,
            self.handler_threads_used,
        )
    }
}

impl fmt::Display for Summary {
    /// The human-readable summary block.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        let mode = if c.virtual_time {
            "virtual time"
        } else {
            "real time"
        };
        let check = |ok: bool| if ok { "ok" } else { "CHECK" };
        writeln!(f, "== summary ({mode}, seed {}) ==", c.seed)?;
        writeln!(
            f,
            "consumers          {} in {} groups; heartbeat every {} ms ± {} ms; session timeout {} ms; {} s simulated",
            c.consumers,
            c.groups,
            c.heartbeat_interval_ms,
            c.jitter_ms(),
            c.session_timeout_ms,
            c.duration_ms as f64 / 1000.0
        )?;
        writeln!(
            f,
            "failures injected  {} ({} crashes, {} stalls)",
            self.injected_failures(),
            self.injected_crashes,
            self.injected_stalls
        )?;
        writeln!(
            f,
            "failures detected  {} of {}, {} undetected  [{}]",
            self.detected_failures,
            self.injected_failures(),
            self.undetected_failures,
            check(self.undetected_failures == 0)
        )?;
        writeln!(
            f,
            "false evictions    {}  [{}]",
            self.false_evictions,
            check(self.false_evictions == 0)
        )?;
        writeln!(
            f,
            "detection delay    p50 {}  p99 {}  max {}  (after the last heartbeat; session timeout {} ms)",
            opt_ms(self.detection_delay_p50_ms),
            opt_ms(self.detection_delay_p99_ms),
            opt_ms(self.detection_delay_max_ms),
            c.session_timeout_ms
        )?;
        writeln!(
            f,
            "rebalances         {} ({} evictions, {} rejoins)",
            self.rebalances,
            self.detected_failures + self.false_evictions,
            self.rejoins
        )?;
        writeln!(
            f,
            "heartbeats         {} ({:.1}/s), handled by {} request-handler thread{}",
            self.heartbeats,
            self.heartbeats_per_s,
            self.handler_threads_used,
            if self.handler_threads_used == 1 {
                ""
            } else {
                "s"
            }
        )?;
        if !c.virtual_time || self.late_heartbeats > 0 {
            // Only a real-time engine runs behind by itself; a virtual run's
            // summary keeps its lines.
            writeln!(
                f,
                "sent late          {} heartbeats more than {} ms after due, max lag {} ms  [{}]",
                self.late_heartbeats,
                LATE_HEARTBEAT_MS,
                self.heartbeat_lag_max_ms,
                check(self.late_heartbeats == 0)
            )?;
        }
        let consistent =
            self.watched_at_end == self.alive_at_end && self.delayed_at_end == self.alive_at_end;
        write!(
            f,
            "at end             alive {}, purgatory watched {}, delayed {} (one pending heartbeat expectation per alive member)  [{}]",
            self.alive_at_end,
            self.watched_at_end,
            self.delayed_at_end,
            check(consistent)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
