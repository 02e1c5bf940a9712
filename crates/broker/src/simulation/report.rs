//! What the engine reports: the evictions classified against the plan,
//! the progress lines and the summary.

use super::engine::{Consumer, Engine, Time};
use super::plan::Fate;
use super::summary::{percentile, Progress, Summary};
use crate::coordinator::Eviction;

impl Engine<'_> {
    /// Classifies the evictions recorded since the last call.
    pub(super) fn collect_evictions(&mut self) {
        let start_ms = match self.time {
            Time::Virtual(_) => 0,
            Time::Real { start_ms } => start_ms,
        };
        for eviction in self.shared.coordinator.take_evictions() {
            self.evictions += 1;
            self.classify(&eviction, start_ms);
        }
    }

    fn classify(&mut self, eviction: &Eviction, start_ms: u64) {
        let Some(index) = Consumer::index_of(&eviction.member, self.consumers.len()) else {
            self.false_evictions += 1;
            return;
        };
        let consumer = &mut self.consumers[index];
        let evicted_at = eviction.evicted_at_ms.saturating_sub(start_ms);
        if consumer.fate.is_down_at(evicted_at) && !consumer.detected {
            consumer.detected = true;
            self.delays.push(eviction.detection_delay_ms());
        } else {
            self.false_evictions += 1;
        }
    }

    pub(super) fn rebalances(&self) -> u64 {
        self.shared.coordinator.total_generations() - self.generations_at_start
    }

    pub(super) fn progress(&mut self, t: u64) -> Progress {
        self.collect_evictions();
        let heartbeats = self.shared.coordinator.heartbeats_handled();
        let (last_t, last_heartbeats) = self.last_progress;
        self.last_progress = (t, heartbeats);
        let span_s = (t.saturating_sub(last_t)).max(1) as f64 / 1000.0;
        let purgatory = self.shared.coordinator.purgatory();
        let wall_ms = self.started.elapsed().as_millis() as u64;
        let eta_ms = match self.time {
            Time::Virtual(_) if t > 0 => {
                let left = self.config.duration_ms.saturating_sub(t);
                Some((wall_ms as u128 * left as u128 / t as u128) as u64)
            }
            _ => None,
        };
        Progress {
            elapsed_ms: t,
            wall_ms,
            eta_ms,
            alive: self.shared.coordinator.alive_members(),
            heartbeats_per_s: (heartbeats - last_heartbeats) as f64 / span_s,
            watched: purgatory.watched(),
            delayed: purgatory.delayed(),
            evictions: self.evictions,
            rebalances: self.rebalances(),
        }
    }

    pub(super) fn summary(&mut self) -> Summary {
        self.collect_evictions();
        let crashes = self
            .consumers
            .iter()
            .filter(|c| matches!(c.fate, Fate::Crash { .. }))
            .count();
        let stalls = self
            .consumers
            .iter()
            .filter(|c| matches!(c.fate, Fate::Stall { .. }))
            .count();
        let detected = self.consumers.iter().filter(|c| c.detected).count();
        let mut delays = std::mem::take(&mut self.delays);
        delays.sort_unstable();
        self.recording.detection_delays_ms.clone_from(&delays);
        let heartbeats = self.shared.coordinator.heartbeats_handled();
        let purgatory = self.shared.coordinator.purgatory();
        Summary {
            config: self.config.clone(),
            injected_crashes: crashes,
            injected_stalls: stalls,
            detected_failures: detected,
            undetected_failures: crashes + stalls - detected,
            false_evictions: self.false_evictions,
            detection_delay_p50_ms: percentile(&delays, 50.0),
            detection_delay_p99_ms: percentile(&delays, 99.0),
            detection_delay_max_ms: delays.last().copied(),
            rebalances: self.rebalances(),
            rejoins: self.rejoins,
            heartbeats,
            heartbeats_per_s: heartbeats as f64 * 1000.0 / self.config.duration_ms as f64,
            handler_threads_used: self.handlers.heartbeat_threads(),
            late_heartbeats: self.late_heartbeats,
            heartbeat_lag_max_ms: self.heartbeat_lag_max_ms,
            alive_at_end: self.shared.coordinator.alive_members(),
            watched_at_end: purgatory.watched(),
            delayed_at_end: purgatory.delayed(),
        }
    }
}
