//! `purgatory-bench`: runs the standard workloads of `BENCHMARKS.md` against
//! this project's timer and its peers, and prints a table (or JSON lines).
//!
//! ```text
//! purgatory-bench w1 [--n N] [--seed S] [--rounds R] [--json] [--only a,b]
//! purgatory-bench w2 [--num N --rate R] [--timeout MS] [--pct50 MS] [--pct75 MS]
//!                    [--keys K] [--key-space-size S] [--seed S] [--pace-ms P]
//!                    [--hasher std|fx]
//!                    [--rounds R] [--json]
//! purgatory-bench w3 [--n N] [--producers P] [--seed S] [--rounds R] [--json]
//! purgatory-bench wakeups [--per-batch N] [--rate R] [--json]
//! purgatory-bench burst [--n N] [--seed S] [--rounds R] [--json]
//! purgatory-bench w4 [--pending N] [--keys K] [--timeout-ms MS] [--seed S]
//!                    [--rounds R] [--json]
//! ```
//!
//! By default every implementation runs in its own child process (this same
//! binary, with the hidden `--impl NAME`), round after round, with the order
//! of implementations rotated each round; the figures reported are the
//! medians over rounds (`report::aggregate`). `--in-process` runs everything
//! in this process instead (memory figures are then less clean).
//!
//! W2 without `--num` and `--rate` measures its two standard runs
//! (1,000,000 requests at a target of 3,000,000/s, then 100,000 at
//! 10,000/s), each in both completion modes, and reports them in one table.

/// `print!` through [`write_stdout`]; defined before the workload modules
/// so that they can use it.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` through [`write_stdout`].
macro_rules! outln {
    () => {
        $crate::cli::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` through [`write_stderr`](crate::progress::write_stderr).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::progress::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod args;
mod burst;
mod runner;
mod w1;
mod w2;
mod w3;
mod w4;
mod wakeups;

use args::{BurstArgs, W1Args, W2Args, W3Args, W4Args, WakeupsArgs};
use clap::{Parser, Subcommand};
use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

/// Writes `args` to stdout. A reader that has gone away (`| head -4`) wants
/// no more output: the program then ends quietly with exit code 0, as a
/// shell tool does, rather than panicking. Any other write error ends it
/// with a message and exit code 1.
pub(crate) fn write_stdout(args: fmt::Arguments<'_>) {
    if let Err(err) = io::stdout().lock().write_fmt(args) {
        if err.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        errln!("error: cannot write to stdout: {err}");
        std::process::exit(1);
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "purgatory-bench",
    version,
    about = "Runs the standard workloads (BENCHMARKS.md) against the timer and its peers"
)]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Debug, Subcommand)]
enum Workload {
    /// W1: timer churn on a virtual clock (add N, cancel N/2, expire).
    W1(W1Args),
    /// W2: the purgatory under Kafka's purgatory performance tool's load
    /// (real clock, reaper running), completing by force or by checks.
    W2(W2Args),
    /// W3: concurrent adds on the real clock with a reaper running.
    W3(W3Args),
    /// N timer tasks sharing one deadline, after a churn that scatters the
    /// timer's arena: how late the burst fires.
    Burst(BurstArgs),
    /// W4: millions of pending operations, phases A–E (fill, check,
    /// expiry, burst, shutdown), the purgatory against a tokio task per
    /// operation.
    W4(W4Args),
    /// The CPU one wake-up costs on this machine, by primitive, and the
    /// floor that puts under W2's CPU per request at a paced rate.
    Wakeups(WakeupsArgs),
}

/// Parses the command line, runs the workload it names, and returns the
/// process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Bad input is refused before anything runs, with clap's exit code.
    let checked = match &cli.workload {
        Workload::W1(a) => w1::validate(a),
        Workload::W2(a) => w2::validate(a),
        Workload::Wakeups(_) => Ok(()),
        Workload::W3(a) => w3::validate(a),
        Workload::Burst(a) => burst::validate(a),
        Workload::W4(a) => w4::validate(a),
    };
    if let Err(e) = checked {
        errln!("error: {e}");
        return ExitCode::from(2);
    }
    let result = match &cli.workload {
        Workload::W1(a) => w1::run(a),
        Workload::W2(a) => w2::run(a),
        Workload::Wakeups(a) => wakeups::run(a),
        Workload::W3(a) => w3::run(a),
        Workload::Burst(a) => burst::run(a),
        Workload::W4(a) => w4::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("purgatory-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
