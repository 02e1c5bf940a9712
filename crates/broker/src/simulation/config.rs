//! The simulation's parameters, their validation, and why a run cannot start.
//!
//! [`SimConfig`] holds what the `consumer_heartbeat` flags set. Validation
//! turns every bad combination into a [`ConfigError`] with a message that
//! names the flag, so the example can print it and exit non-zero instead of
//! panicking.
//!
//! Invariants of a validated config: at least one consumer and one group, no
//! more groups than consumers, a session timeout longer than the heartbeat
//! interval, rates in `[0, 1]` that add up to at most 1, and (when failures are
//! injected) a run long enough that each one is injected after the first
//! heartbeat interval and no later than one session timeout plus
//! [`DETECTION_MARGIN_MS`] before the end, so that every failure is detected
//! within the run.

use std::fmt;

/// Heartbeats come every interval ± this percentage of it.
pub const JITTER_PERCENT: u64 = 10;

/// Slack kept between the last failure's expected detection and the end of
/// the run, for the real-time reaper's scheduling lag.
pub const DETECTION_MARGIN_MS: u64 = 200;

/// The longest simulated run accepted (7 days).
pub const MAX_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;

/// The most consumers accepted.
pub const MAX_CONSUMERS: usize = 10_000_000;

/// The most heartbeats a run may plan (consumers × duration / interval): a
/// bigger run takes hours even in virtual time.
pub const MAX_PLANNED_HEARTBEATS: u64 = 10_000_000_000;

/// The most request-handler threads a run may use.
pub const MAX_HANDLER_THREADS: usize = 64;

/// Request-handler threads by default: one per core of the 2-core machines
/// the project is measured on. Fixed rather than read from the machine, so
/// that a configuration means the same run everywhere.
pub const DEFAULT_HANDLER_THREADS: usize = 2;

/// Status lines per run, at most (plus the one at the end): the interval
/// between them grows with the duration.
pub const MAX_PROGRESS_LINES: u64 = 30;

/// The consumer-heartbeat simulation's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// How many consumers (group members).
    pub consumers: usize,
    /// How many groups they are spread over (consumer `i` is in group `i % groups`).
    pub groups: usize,
    /// Mean time between a consumer's heartbeats.
    pub heartbeat_interval_ms: u64,
    /// How long the coordinator waits for a heartbeat before evicting.
    pub session_timeout_ms: u64,
    /// Fraction of consumers that crash (stop for good).
    pub crash_rate: f64,
    /// Fraction of consumers that stall (pause past the session timeout, then
    /// resume and rejoin).
    pub stall_rate: f64,
    /// Simulated time the run covers.
    pub duration_ms: u64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Virtual time (manual clock, deterministic, as fast as possible) rather
    /// than real time (system clock and the purgatory's reaper).
    pub virtual_time: bool,
    /// Threads of the coordinator's request-handler pool. The summary of a
    /// virtual run does not depend on it, but for how many of them handled
    /// heartbeats ([`Summary::handler_threads_used`](super::Summary::handler_threads_used)).
    pub handler_threads: usize,
}

impl Default for SimConfig {
    /// The defaults of `consumer_heartbeat`: 10,000 consumers in 100 groups,
    /// heartbeats every 3 s, a 10 s session timeout, 1% crashes, 0.5% stalls,
    /// 15 s, real time, [`DEFAULT_HANDLER_THREADS`] request handlers.
    fn default() -> Self {
        SimConfig {
            consumers: 10_000,
            groups: 100,
            heartbeat_interval_ms: 3_000,
            session_timeout_ms: 10_000,
            crash_rate: 0.01,
            stall_rate: 0.005,
            duration_ms: 15_000,
            seed: 42,
            virtual_time: false,
            handler_threads: DEFAULT_HANDLER_THREADS,
        }
    }
}

/// A configuration that cannot run, with a message naming the flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Why a simulation could not run.
#[derive(Debug)]
pub enum SimError {
    /// The configuration is invalid.
    Config(ConfigError),
    /// The heartbeat purgatory could not be built.
    Purgatory(String),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Config(err) => write!(f, "{err}"),
            SimError::Purgatory(err) => write!(f, "cannot build the heartbeat purgatory: {err}"),
        }
    }
}

impl std::error::Error for SimError {}

impl From<ConfigError> for SimError {
    fn from(err: ConfigError) -> Self {
        SimError::Config(err)
    }
}

impl SimConfig {
    /// The heartbeat jitter: each gap is the interval ± this much.
    pub fn jitter_ms(&self) -> u64 {
        self.heartbeat_interval_ms * JITTER_PERCENT / 100
    }

    /// How many consumers crash: `round(consumers * crash_rate)`.
    pub fn planned_crashes(&self) -> usize {
        ((self.consumers as f64) * self.crash_rate).round() as usize
    }

    /// How many consumers stall: `round(consumers * stall_rate)`, capped so
    /// that crashes and stalls never exceed the consumers.
    pub fn planned_stalls(&self) -> usize {
        let stalls = ((self.consumers as f64) * self.stall_rate).round() as usize;
        stalls.min(self.consumers - self.planned_crashes().min(self.consumers))
    }

    /// The window `[first, last]` (ms) in which failures are injected.
    pub fn injection_window_ms(&self) -> (u64, u64) {
        let last = self
            .duration_ms
            .saturating_sub(self.session_timeout_ms + DETECTION_MARGIN_MS);
        (self.heartbeat_interval_ms, last)
    }

    /// The shortest run that leaves room to inject and detect failures.
    pub fn min_duration_with_failures_ms(&self) -> u64 {
        self.heartbeat_interval_ms + self.session_timeout_ms + DETECTION_MARGIN_MS
    }

    /// Heartbeats the run sends if nobody fails: consumers × duration /
    /// interval.
    pub fn planned_heartbeats(&self) -> u64 {
        (self.consumers as u64).saturating_mul(self.duration_ms) / self.heartbeat_interval_ms.max(1)
    }

    /// Simulated time between two status lines: the smallest of 1, 2 or 5
    /// times a power of ten seconds that keeps the run within
    /// [`MAX_PROGRESS_LINES`] lines (one second for runs up to 30 s).
    pub fn progress_interval_ms(&self) -> u64 {
        let wanted = self.duration_ms.div_ceil(MAX_PROGRESS_LINES).max(1000);
        let mut decade = 1000u64;
        loop {
            for step in [1, 2, 5] {
                let interval = decade.saturating_mul(step);
                if interval >= wanted {
                    return interval;
                }
            }
            decade = decade.saturating_mul(10);
        }
    }

    /// A small virtual run for the crate's unit tests: 200 consumers in 10
    /// groups, heartbeats every 100 ms, 300 ms sessions, 5% crashes and 5%
    /// stalls, 2 s.
    #[cfg(test)]
    pub(crate) fn small_for_tests(seed: u64) -> Self {
        SimConfig {
            consumers: 200,
            groups: 10,
            heartbeat_interval_ms: 100,
            session_timeout_ms: 300,
            crash_rate: 0.05,
            stall_rate: 0.05,
            duration_ms: 2_000,
            seed,
            virtual_time: true,
            handler_threads: 2,
        }
    }

    /// Checks every parameter; the error names the offending flag.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |msg: String| Err(ConfigError(msg));
        if self.consumers == 0 {
            return fail("--consumers must be at least 1".into());
        }
        if self.consumers > MAX_CONSUMERS {
            return fail(format!("--consumers must be at most {MAX_CONSUMERS}"));
        }
        if !(1..=MAX_HANDLER_THREADS).contains(&self.handler_threads) {
            return fail(format!(
                "--handler-threads ({}) must be from 1 to {MAX_HANDLER_THREADS}",
                self.handler_threads
            ));
        }
        if self.groups == 0 {
            return fail("--groups must be at least 1".into());
        }
        if self.groups > self.consumers {
            return fail(format!(
                "--groups ({}) must not exceed --consumers ({}): every group needs a member",
                self.groups, self.consumers
            ));
        }
        if self.heartbeat_interval_ms == 0 {
            return fail("--heartbeat-interval-ms must be at least 1".into());
        }
        if self.session_timeout_ms <= self.heartbeat_interval_ms {
            return fail(format!(
                "--session-timeout-ms ({}) must be greater than --heartbeat-interval-ms ({})",
                self.session_timeout_ms, self.heartbeat_interval_ms
            ));
        }
        if self.session_timeout_ms > MAX_DURATION_MS {
            return fail(format!(
                "--session-timeout-ms must be at most {MAX_DURATION_MS}"
            ));
        }
        for (flag, rate) in [
            ("--crash-rate", self.crash_rate),
            ("--stall-rate", self.stall_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return fail(format!("{flag} ({rate}) must be between 0 and 1"));
            }
        }
        if self.crash_rate + self.stall_rate > 1.0 {
            return fail(format!(
                "--crash-rate + --stall-rate ({} + {}) must not exceed 1",
                self.crash_rate, self.stall_rate
            ));
        }
        if self.duration_ms == 0 {
            return fail("--duration-s must be greater than 0".into());
        }
        if self.duration_ms > MAX_DURATION_MS {
            return fail(format!(
                "--duration-s must be at most {} (7 days)",
                MAX_DURATION_MS / 1000
            ));
        }
        if self.planned_heartbeats() > MAX_PLANNED_HEARTBEATS {
            return fail(format!(
                "--consumers × --duration-s / --heartbeat-interval-ms plans {} heartbeats; \
                 it must be at most {MAX_PLANNED_HEARTBEATS}",
                self.planned_heartbeats()
            ));
        }
        let failures = self.planned_crashes() + self.planned_stalls() > 0;
        if failures && self.duration_ms < self.min_duration_with_failures_ms() {
            return fail(format!(
                "--duration-s ({} s) is too short to inject failures and detect them within the run: \
                 it must be at least heartbeat interval + session timeout + {} ms = {} s \
                 (or set --crash-rate and --stall-rate to 0)",
                self.duration_ms as f64 / 1000.0,
                DETECTION_MARGIN_MS,
                self.min_duration_with_failures_ms() as f64 / 1000.0
            ));
        }
        Ok(())
    }

    /// Valid but questionable settings, as human-readable warnings.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.session_timeout_ms <= self.heartbeat_interval_ms + self.jitter_ms() {
            warnings.push(format!(
                "session timeout {} ms leaves no room for the heartbeat jitter (interval {} ms ± {} ms): \
                 healthy members whose heartbeat comes late will be evicted (false evictions)",
                self.session_timeout_ms,
                self.heartbeat_interval_ms,
                self.jitter_ms()
            ));
        }
        // Failures are whole consumers: say so when a rate does not come to
        // a whole number of them, most of all when it comes to none.
        let kinds = [
            ("crash", self.crash_rate, self.planned_crashes()),
            ("stall", self.stall_rate, self.planned_stalls()),
        ];
        for (kind, rate, planned) in kinds {
            let exact = self.consumers as f64 * rate;
            if (exact - planned as f64).abs() > 1e-6 * exact.max(1.0) {
                warnings.push(format!(
                    "{kind} rate {rate} of {} consumers is {exact} consumers: {planned} will {kind} \
                     (failures are whole consumers)",
                    self.consumers
                ));
            }
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut SimConfig)) -> Result<(), ConfigError> {
        let mut config = SimConfig::default();
        f(&mut config);
        config.validate()
    }

    #[test]
    fn rates_that_are_not_whole_consumers_are_warned_of() {
        let config = SimConfig {
            consumers: 10,
            groups: 1,
            crash_rate: 0.01,
            stall_rate: 0.05,
            ..SimConfig::default()
        };
        assert_eq!(config.validate(), Ok(()));
        assert_eq!((config.planned_crashes(), config.planned_stalls()), (0, 1));
        assert_eq!(
            config.warnings(),
            [
                "crash rate 0.01 of 10 consumers is 0.1 consumers: 0 will crash (failures are whole consumers)",
                "stall rate 0.05 of 10 consumers is 0.5 consumers: 1 will stall (failures are whole consumers)",
            ]
        );
        let whole = SimConfig {
            consumers: 1_000_000,
            crash_rate: 0.01,
            stall_rate: 0.005,
            ..SimConfig::default()
        };
        assert!(whole.warnings().is_empty(), "{:?}", whole.warnings());
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(SimConfig::default().validate(), Ok(()));
        assert!(SimConfig::default().warnings().is_empty());
        assert_eq!(SimConfig::default().planned_crashes(), 100);
        assert_eq!(SimConfig::default().planned_stalls(), 50);
        assert_eq!(SimConfig::default().injection_window_ms(), (3_000, 4_800));
    }

    #[test]
    fn bad_values_name_their_flag() {
        type Edit = fn(&mut SimConfig);
        let cases: [(Edit, &str); 10] = [
            (|c| c.consumers = 0, "--consumers"),
            (|c| c.groups = 0, "--groups"),
            (|c| c.groups = c.consumers + 1, "--groups"),
            (|c| c.heartbeat_interval_ms = 0, "--heartbeat-interval-ms"),
            (
                |c| c.session_timeout_ms = c.heartbeat_interval_ms,
                "--session-timeout-ms",
            ),
            (|c| c.crash_rate = 1.5, "--crash-rate"),
            (|c| c.stall_rate = f64::NAN, "--stall-rate"),
            (
                |c| {
                    c.crash_rate = 0.6;
                    c.stall_rate = 0.6
                },
                "must not exceed 1",
            ),
            (|c| c.duration_ms = 0, "--duration-s"),
            (|c| c.duration_ms = 5_000, "too short"),
        ];
        for (edit, expected) in cases {
            let err = with(edit).unwrap_err();
            assert!(err.to_string().contains(expected), "{err} lacks {expected}");
        }
    }

    #[test]
    fn progress_lines_stay_few_whatever_the_duration() {
        let interval = |duration_ms| {
            SimConfig {
                duration_ms,
                ..SimConfig::default()
            }
            .progress_interval_ms()
        };
        assert_eq!(interval(1), 1_000);
        assert_eq!(interval(15_000), 1_000);
        assert_eq!(interval(30_000), 1_000);
        assert_eq!(interval(30_001), 2_000);
        assert_eq!(interval(100_000_000), 5_000_000);
        assert_eq!(interval(MAX_DURATION_MS), 50_000_000);
        for duration_ms in [
            1,
            999,
            1_000,
            29_999,
            31_000,
            59_999,
            60_001,
            123_456_789,
            MAX_DURATION_MS,
        ] {
            let lines = duration_ms / interval(duration_ms);
            assert!(lines <= MAX_PROGRESS_LINES, "{duration_ms}: {lines}");
        }
    }

    #[test]
    fn runs_too_big_to_finish_are_refused() {
        let err = with(|c| {
            c.consumers = MAX_CONSUMERS;
            c.groups = 1;
            c.heartbeat_interval_ms = 1;
            c.session_timeout_ms = 2;
            c.duration_ms = 3_600_000;
        })
        .unwrap_err();
        assert!(err.to_string().contains("--heartbeat-interval-ms"), "{err}");
    }

    #[test]
    fn short_runs_are_fine_without_failures() {
        assert_eq!(
            with(|c| {
                c.duration_ms = 1_000;
                c.crash_rate = 0.0;
                c.stall_rate = 0.0;
            }),
            Ok(())
        );
    }

    #[test]
    fn tight_sessions_warn() {
        let config = SimConfig {
            session_timeout_ms: 3_100,
            ..SimConfig::default()
        };
        assert_eq!(config.warnings().len(), 1);
    }

    #[test]
    fn rates_summing_to_one_never_plan_too_many() {
        let config = SimConfig {
            consumers: 3,
            groups: 1,
            crash_rate: 0.5,
            stall_rate: 0.5,
            ..SimConfig::default()
        };
        assert_eq!(config.planned_crashes() + config.planned_stalls(), 3);
    }
}
