//! The `consumer_heartbeat` command line.

use std::path::PathBuf;

use broker::simulation::{SimConfig, MAX_CONSUMERS, MAX_DURATION_MS};
use clap::Parser;

use crate::cli::{count_in, fraction, int_in, secs_as_ms, UsageError};
use crate::plot::svg_path;

/// Consumer-heartbeat simulation: failure detection through the heartbeat
/// purgatory (Kafka's DelayedHeartbeat).
#[derive(Debug, Parser)]
#[command(
    name = "consumer_heartbeat",
    allow_negative_numbers = true,
    after_help = "Logging: RUST_LOG (default `warn`); RUST_LOG=info logs each eviction."
)]
pub struct HeartbeatArgs {
    /// Number of consumers (group members), 1 to 10,000,000.
    #[arg(long, default_value = "10000", value_parser = count_in::<1, { MAX_CONSUMERS as u64 }>)]
    pub consumers: usize,
    /// Number of groups the consumers are spread over, 1 to --consumers.
    #[arg(long, default_value = "100", value_parser = count_in::<1, { MAX_CONSUMERS as u64 }>)]
    pub groups: usize,
    /// Mean time between a consumer's heartbeats (each gap is ± 10%).
    #[arg(long, default_value = "3000", value_parser = int_in::<1, MAX_DURATION_MS>)]
    pub heartbeat_interval_ms: u64,
    /// Session timeout: a member silent this long is evicted; more than
    /// --heartbeat-interval-ms.
    #[arg(long, default_value = "10000", value_parser = int_in::<2, MAX_DURATION_MS>)]
    pub session_timeout_ms: u64,
    /// Fraction of consumers that crash (stop for good), in [0, 1].
    #[arg(long, default_value = "0.01", value_parser = fraction)]
    pub crash_rate: f64,
    /// Fraction of consumers that stall past the session timeout, then resume
    /// and rejoin, in [0, 1].
    #[arg(long, default_value = "0.005", value_parser = fraction)]
    pub stall_rate: f64,
    /// Simulated duration in seconds (whole milliseconds, up to 7 days).
    #[arg(long = "duration-s", value_name = "SECONDS", default_value = "15",
          value_parser = secs_as_ms::<1, MAX_DURATION_MS>)]
    pub duration_ms: u64,
    /// Seed of every random choice.
    #[arg(long, default_value = "42", value_parser = int_in::<0, { u64::MAX }>)]
    pub seed: u64,
    /// Print the summary as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
    /// Run on a manual clock: deterministic for a seed, as fast as possible.
    #[arg(long)]
    pub virtual_time: bool,
    /// Write a chart of the run (alive members, heartbeats and evictions per
    /// second, detection delays) to this SVG file.
    #[arg(long, value_name = "FILE.svg", value_parser = svg_path)]
    pub plot: Option<PathBuf>,
}

impl HeartbeatArgs {
    /// The simulation these flags describe, or why they cannot run (checks
    /// across flags: groups versus consumers, session versus interval, a run
    /// long enough to detect the failures it injects, a run small enough to
    /// finish).
    pub fn config(&self) -> Result<SimConfig, UsageError> {
        let config = SimConfig {
            consumers: self.consumers,
            groups: self.groups,
            heartbeat_interval_ms: self.heartbeat_interval_ms,
            session_timeout_ms: self.session_timeout_ms,
            crash_rate: self.crash_rate,
            stall_rate: self.stall_rate,
            duration_ms: self.duration_ms,
            seed: self.seed,
            virtual_time: self.virtual_time,
        };
        config.validate().map_err(|e| UsageError(e.to_string()))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HeartbeatArgs, String> {
        HeartbeatArgs::try_parse_from(
            std::iter::once("consumer_heartbeat").chain(args.iter().copied()),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_the_documented_run() {
        let config = parse(&[]).unwrap().config().unwrap();
        assert_eq!(config, SimConfig::default());
    }

    #[test]
    fn each_bad_value_names_its_flag_and_range() {
        let cases: &[(&[&str], &str)] = &[
            (&["--consumers", "0"], "'--consumers <CONSUMERS>': must be a whole number from 1 to 10000000"),
            (&["--consumers", "-5"], "'--consumers <CONSUMERS>': must be a whole number from 1 to 10000000"),
            (&["--consumers", "10000001"], "from 1 to 10000000"),
            (&["--groups", "0"], "'--groups <GROUPS>': must be a whole number from 1"),
            (&["--heartbeat-interval-ms", "0"], "'--heartbeat-interval-ms <HEARTBEAT_INTERVAL_MS>': must be a whole number from 1"),
            (&["--session-timeout-ms", "-1"], "'--session-timeout-ms <SESSION_TIMEOUT_MS>': must be a whole number from 2"),
            (&["--crash-rate", "1.5"], "'--crash-rate <CRASH_RATE>': must be a number from 0 to 1"),
            (&["--stall-rate", "NaN"], "'--stall-rate <STALL_RATE>': must be a number from 0 to 1"),
            (&["--duration-s", "0"], "'--duration-s <SECONDS>': must be a number of seconds from 0.001 to 604800, in whole milliseconds"),
            (&["--duration-s", "0.0001"], "'--duration-s <SECONDS>': must be a number of seconds from 0.001 to 604800"),
            (&["--duration-s", "-3"], "from 0.001 to 604800"),
            (&["--seed", "-1"], "'--seed <SEED>': must be a whole number from 0 to 18446744073709551615"),
            (&["--plot", "run.png"], "'--plot <FILE.svg>': must be a file name ending in .svg"),
        ];
        for (args, expected) in cases {
            let err = parse(args).unwrap_err();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
    }

    #[test]
    fn bad_combinations_name_their_flags() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--consumers", "5", "--groups", "6"],
                "--groups (6) must not exceed --consumers (5)",
            ),
            (
                &["--session-timeout-ms", "3000"],
                "--session-timeout-ms (3000) must be greater than --heartbeat-interval-ms (3000)",
            ),
            (
                &["--crash-rate", "0.6", "--stall-rate", "0.6"],
                "--crash-rate + --stall-rate",
            ),
            (&["--duration-s", "5"], "--duration-s (5 s) is too short"),
            (
                &[
                    "--consumers",
                    "10000000",
                    "--heartbeat-interval-ms",
                    "1",
                    "--session-timeout-ms",
                    "2",
                    "--duration-s",
                    "3600",
                ],
                "must be at most 10000000000",
            ),
        ];
        for (args, expected) in cases {
            let err = parse(args).unwrap().config().unwrap_err();
            assert!(err.to_string().contains(expected), "{args:?}: {err}");
        }
    }
}
