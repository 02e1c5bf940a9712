//! Many consumers in many groups heartbeat a group coordinator; a seeded few
//! crash or stall, and the coordinator detects them through the heartbeat
//! purgatory alone.
//!
//! ```text
//! cargo run --release --example consumer_heartbeat                    # real time, ~15 s
//! cargo run --release --example consumer_heartbeat -- --virtual-time  # deterministic, fast
//! cargo run --release --example consumer_heartbeat -- --virtual-time --plot run.svg
//! cargo run --release --example consumer_heartbeat -- --virtual-time --consumers 1000000 --groups 10000 --duration-s 30
//! cargo run --release --example consumer_heartbeat -- --help
//! ```
//!
//! Prints a status line every second of simulated time (the interval grows
//! with the duration, so that a run prints at most about 30; in virtual time
//! each line says how long the rest will take), then a summary, and with
//! `--json` the summary as one JSON object on the last line. The coordinator
//! answers on `--handler-threads` request-handler threads (default 2); a
//! virtual run's summary is the same for any number. A bad flag is refused
//! with a message naming it and its valid range (exit code 2). Logging goes
//! through `env_logger` to stderr and defaults to `warn`, so the progress
//! stays legible; `RUST_LOG=info` shows every eviction as
//! `Member <member> in group <group> has failed, removing it from the group`.

use std::process::ExitCode;
use std::time::Instant;

use broker::simulation;
use clap::Parser;
use examples::heartbeat_args::HeartbeatArgs;
use examples::{errln, outln};

fn main() -> ExitCode {
    let args = HeartbeatArgs::parse();
    let config = match args.config() {
        Ok(config) => config,
        Err(err) => return err.report(),
    };
    let mut chart = match args.plot.as_deref().map(examples::plot::create_svg) {
        None => None,
        Some(Ok(file)) => Some(file),
        Some(Err(err)) => return err.report(),
    };
    examples::init_logging();
    for warning in config.warnings() {
        errln!("warning: {warning}");
    }
    outln!(
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
    let (summary, recording) =
        match simulation::run_recorded(&config, |progress| outln!("{progress}")) {
            Ok(run) => run,
            Err(err) => {
                errln!("error: {err}");
                return ExitCode::from(2);
            }
        };
    outln!(
        "wall time          {:.2} s",
        started.elapsed().as_secs_f64()
    );
    outln!("{summary}");
    if let (Some(path), Some(file)) = (&args.plot, &mut chart) {
        if let Err(err) = examples::plot::write_svg(file, &summary, &recording) {
            errln!("error: cannot write the chart to {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
        errln!("chart written to {}", path.display());
    }
    if args.json {
        outln!("{}", summary.to_json());
    }
    ExitCode::SUCCESS
}
