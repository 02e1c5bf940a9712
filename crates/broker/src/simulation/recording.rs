//! The run as time series, for a picture of it: alive members, heartbeats
//! and evictions per sample interval, and every detection delay.
//!
//! The engine records one [`Sample`] per [`Recording::sample_interval_ms`]
//! of simulated time (one second, or coarser for long runs so that a run
//! keeps at most [`MAX_SAMPLES`]): a few counter reads and one sum over the
//! groups, nothing per heartbeat.

/// The most samples a run keeps; longer runs sample less often.
pub const MAX_SAMPLES: u64 = 2_000;

/// What happened in one sample interval, ending at `t_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Simulated time at the end of the interval (ms since the start).
    pub t_ms: u64,
    /// Members in their groups at `t_ms`.
    pub alive: usize,
    /// Heartbeats handled in the interval.
    pub heartbeats: u64,
    /// Members evicted in the interval.
    pub evictions: u64,
}

/// The time series of one run (see the module docs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recording {
    /// Simulated time between two samples (ms); the last sample may close a
    /// shorter interval, at the end of the run.
    pub sample_interval_ms: u64,
    /// The samples, in time order; the first is at time 0 (after the joins).
    pub samples: Vec<Sample>,
    /// Every detected failure's detection delay (ms), sorted.
    pub detection_delays_ms: Vec<u64>,
}

impl Recording {
    /// An empty recording for a run of `duration_ms`.
    pub fn for_duration(duration_ms: u64) -> Self {
        let interval = duration_ms.div_ceil(MAX_SAMPLES).div_ceil(1000).max(1) * 1000;
        Recording {
            sample_interval_ms: interval,
            samples: Vec::new(),
            detection_delays_ms: Vec::new(),
        }
    }

    /// Whether a sample is due at `t_ms`, the end being `end_ms`.
    pub(crate) fn due(&self, t_ms: u64, end_ms: u64) -> bool {
        let last = self.samples.last().map_or(0, |s| s.t_ms);
        self.samples.is_empty()
            || t_ms >= last + self.sample_interval_ms
            || (t_ms >= end_ms && last < end_ms)
    }

    /// When the next sample is due (ms).
    pub(crate) fn next_sample_ms(&self) -> u64 {
        self.samples
            .last()
            .map_or(0, |s| s.t_ms + self.sample_interval_ms)
    }

    /// Records the state at `t_ms`, given the running totals of heartbeats
    /// and evictions.
    pub(crate) fn record(
        &mut self,
        t_ms: u64,
        alive: usize,
        heartbeats_total: u64,
        evictions_total: u64,
    ) {
        let (heartbeats_before, evictions_before) = self.totals();
        self.samples.push(Sample {
            t_ms,
            alive,
            heartbeats: heartbeats_total - heartbeats_before,
            evictions: evictions_total - evictions_before,
        });
    }

    fn totals(&self) -> (u64, u64) {
        self.samples
            .iter()
            .fold((0, 0), |(h, e), s| (h + s.heartbeats, e + s.evictions))
    }

    /// Heartbeats per second in each sample's interval, as `(t_s, rate)`.
    pub fn heartbeats_per_s(&self) -> Vec<(f64, f64)> {
        self.rates(|s| s.heartbeats)
    }

    /// Evictions per second in each sample's interval, as `(t_s, rate)`.
    pub fn evictions_per_s(&self) -> Vec<(f64, f64)> {
        self.rates(|s| s.evictions)
    }

    fn rates(&self, count: impl Fn(&Sample) -> u64) -> Vec<(f64, f64)> {
        self.samples
            .windows(2)
            .map(|pair| {
                let span_s = (pair[1].t_ms - pair[0].t_ms).max(1) as f64 / 1000.0;
                (
                    pair[1].t_ms as f64 / 1000.0,
                    count(&pair[1]) as f64 / span_s,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_keep_long_runs_within_max_samples() {
        assert_eq!(Recording::for_duration(15_000).sample_interval_ms, 1_000);
        assert_eq!(Recording::for_duration(2_000_000).sample_interval_ms, 1_000);
        assert_eq!(Recording::for_duration(2_000_001).sample_interval_ms, 2_000);
        let week = 7 * 24 * 3600 * 1000;
        let r = Recording::for_duration(week);
        assert!(week / r.sample_interval_ms <= MAX_SAMPLES);
    }

    #[test]
    fn samples_hold_the_counts_of_their_interval() {
        let mut r = Recording::for_duration(2_500);
        assert!(r.due(0, 2_500));
        r.record(0, 10, 0, 0);
        assert!(!r.due(999, 2_500));
        assert!(r.due(1_000, 2_500));
        r.record(1_000, 9, 40, 1);
        r.record(2_000, 9, 70, 1);
        assert!(!r.due(2_499, 2_500));
        assert!(r.due(2_500, 2_500));
        r.record(2_500, 8, 80, 2);
        assert!(!r.due(2_500, 2_500));
        assert_eq!(
            r.heartbeats_per_s(),
            vec![(1.0, 40.0), (2.0, 30.0), (2.5, 20.0)]
        );
        assert_eq!(
            r.evictions_per_s(),
            vec![(1.0, 1.0), (2.0, 0.0), (2.5, 2.0)]
        );
    }
}
