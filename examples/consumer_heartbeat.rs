//! Many consumers in many groups heartbeat a group coordinator; a seeded few
//! crash or stall, and the coordinator detects them through the heartbeat
//! purgatory alone.
//!
//! ```text
//! cargo run --release --example consumer_heartbeat                    # real time, ~15 s
//! cargo run --release --example consumer_heartbeat -- --virtual-time  # deterministic, fast
//! cargo run --release --example consumer_heartbeat -- --help
//! ```
//!
//! Prints one progress line per simulated second, then a summary, and with
//! `--json` the summary as one JSON object on the last line. Logging goes
//! through `env_logger` to stderr and defaults to `warn`, so the progress
//! stays legible; `RUST_LOG=info` shows every eviction as
//! `Member <member> in group <group> has failed, removing it from the group`.

use std::process::ExitCode;
use std::time::Instant;

use broker::simulation::{self, SimConfig, MAX_DURATION_MS};
use clap::Parser;

/// Consumer-heartbeat simulation: failure detection through the heartbeat
/// purgatory (Kafka's DelayedHeartbeat).
#[derive(Debug, Parser)]
#[command(
    name = "consumer_heartbeat",
    allow_negative_numbers = true,
    after_help = "Logging: RUST_LOG (default `warn`); RUST_LOG=info logs each eviction."
)]
struct Args {
    /// Number of consumers (group members).
    #[arg(long, default_value_t = 10_000)]
    consumers: usize,
    /// Number of groups the consumers are spread over.
    #[arg(long, default_value_t = 100)]
    groups: usize,
    /// Mean time between a consumer's heartbeats (each gap is ± 10%).
    #[arg(long, default_value_t = 3_000)]
    heartbeat_interval_ms: u64,
    /// Session timeout: a member silent this long is evicted.
    #[arg(long, default_value_t = 10_000)]
    session_timeout_ms: u64,
    /// Fraction of consumers that crash (stop for good), in [0, 1].
    #[arg(long, default_value_t = 0.01)]
    crash_rate: f64,
    /// Fraction of consumers that stall past the session timeout, then resume
    /// and rejoin, in [0, 1].
    #[arg(long, default_value_t = 0.005)]
    stall_rate: f64,
    /// Simulated duration in seconds.
    #[arg(long, default_value_t = 15.0)]
    duration_s: f64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print the summary as one JSON object on the last line.
    #[arg(long)]
    json: bool,
    /// Run on a manual clock: deterministic for a seed, as fast as possible.
    #[arg(long)]
    virtual_time: bool,
}

impl Args {
    fn config(&self) -> Result<SimConfig, String> {
        let max_s = MAX_DURATION_MS / 1000;
        if !self.duration_s.is_finite() || self.duration_s <= 0.0 {
            return Err(format!(
                "--duration-s ({}) must be greater than 0",
                self.duration_s
            ));
        }
        if self.duration_s > max_s as f64 {
            return Err(format!("--duration-s must be at most {max_s} (7 days)"));
        }
        let config = SimConfig {
            consumers: self.consumers,
            groups: self.groups,
            heartbeat_interval_ms: self.heartbeat_interval_ms,
            session_timeout_ms: self.session_timeout_ms,
            crash_rate: self.crash_rate,
            stall_rate: self.stall_rate,
            duration_ms: (self.duration_s * 1000.0).round() as u64,
            seed: self.seed,
            virtual_time: self.virtual_time,
        };
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

fn main() -> ExitCode {
    examples::init_logging();
    let args = Args::parse();
    let config = match args.config() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    for warning in config.warnings() {
        eprintln!("warning: {warning}");
    }
    println!(
        "consumer_heartbeat: {} consumers in {} groups, heartbeat {} ms ± {} ms, session timeout {} ms, \
         crash rate {}, stall rate {}, {} s {} (seed {})",
        config.consumers,
        config.groups,
        config.heartbeat_interval_ms,
        config.jitter_ms(),
        config.session_timeout_ms,
        config.crash_rate,
        config.stall_rate,
        config.duration_ms as f64 / 1000.0,
        if config.virtual_time {
            "in virtual time"
        } else {
            "in real time"
        },
        config.seed
    );
    let started = Instant::now();
    let summary = match simulation::run(&config, |progress| println!("{progress}")) {
        Ok(summary) => summary,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    println!(
        "wall time          {:.2} s",
        started.elapsed().as_secs_f64()
    );
    println!("{summary}");
    if args.json {
        println!("{}", summary.to_json());
    }
    ExitCode::SUCCESS
}
