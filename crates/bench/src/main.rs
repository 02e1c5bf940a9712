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
//! ```
//!
//! By default every implementation runs in its own child process (this same
//! binary, with the hidden `--impl NAME`), round after round, with the order
//! of implementations rotated each round; the figures reported are the
//! medians over rounds (`report::aggregate`). `--in-process` runs everything
//! in this process instead (memory figures are then less clean).
//!
//! W2 without `--num` and `--rate` measures its two standard runs
//! (1,000,000 requests at 1,000,000/s, then 100,000 at 10,000/s), each in
//! both completion modes, and reports them in one table.

use clap::{Args, Parser, Subcommand};
use purgatory_bench::report::{self, Record};
use purgatory_bench::{child, w1, w2, w3, wakeups, TargetCheck};
use std::process::ExitCode;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// The CPU one wake-up costs on this machine, by primitive, and the
    /// floor that puts under W2's CPU per request at a paced rate.
    Wakeups(WakeupsArgs),
}

/// Options every workload has.
#[derive(Debug, Clone, Args)]
struct Common {
    /// Print one JSON object per line and implementation instead of a table.
    #[arg(long)]
    json: bool,
    /// PRNG seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Rounds to run (implementations interleaved); medians are reported.
    /// Default: 5 for W1, 1 for W2, 3 for W3.
    #[arg(long)]
    rounds: Option<usize>,
    /// Run only these implementations (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Run every implementation in this process instead of a child process each.
    #[arg(long)]
    in_process: bool,
    /// Run exactly this implementation once, here, and print its JSON line
    /// (what the parent asks its child processes to do).
    #[arg(long = "impl", hide = true)]
    child_impl: Option<String>,
}

#[derive(Debug, Clone, Args)]
struct W1Args {
    #[command(flatten)]
    common: Common,
    /// Number of tasks.
    #[arg(long, default_value_t = 1_000_000)]
    n: usize,
    /// Largest delay in ms (delays are uniform in [1, max]).
    #[arg(long, default_value_t = 60_000)]
    max_delay_ms: u64,
}

#[derive(Debug, Clone, Args)]
struct W2Args {
    #[command(flatten)]
    common: Common,
    /// Number of requests (default 1,000,000). Without --num and --rate,
    /// both standard runs are measured.
    #[arg(long)]
    num: Option<usize>,
    /// Target rate, requests per second (default 1,000,000).
    #[arg(long)]
    rate: Option<f64>,
    /// Request timeout, ms.
    #[arg(long, default_value_t = 1000)]
    timeout: u64,
    /// Median latency, ms (log-normal).
    #[arg(long, default_value_t = 50.0)]
    pct50: f64,
    /// 75th-percentile latency, ms (log-normal).
    #[arg(long, default_value_t = 75.0)]
    pct75: f64,
    /// Keys per request (drawn once; every request watches the same keys).
    #[arg(long, default_value_t = 3)]
    keys: usize,
    /// Size of the key space the keys are drawn from.
    #[arg(long, default_value_t = 100)]
    key_space_size: u64,
    /// Smallest interval between two timed sleeps of the run's clock
    /// thread, ms: 1 is Kafka's millisecond clock; more lets requests be
    /// issued and completed up to that many ms late, for fewer wake-ups.
    #[arg(long, default_value_t = 1)]
    pace_ms: u64,
    /// The purgatory's key hasher: std (its default, seeded SipHash) or fx
    /// (rustc's FxHasher: fast, not collision resistant).
    #[arg(long, default_value = "std", value_parser = w2::W2Hasher::parse)]
    hasher: w2::W2Hasher,
}

#[derive(Debug, Clone, Args)]
struct W3Args {
    #[command(flatten)]
    common: Common,
    /// Tasks added by each producer.
    #[arg(long, default_value_t = 1_000_000)]
    n: usize,
    /// Producer threads.
    #[arg(long, default_value_t = 2)]
    producers: usize,
    /// Largest delay in ms (delays are uniform in [1, max]).
    #[arg(long, default_value_t = 10_000)]
    max_delay_ms: u64,
}

#[derive(Debug, Clone, Args)]
struct WakeupsArgs {
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Wake-ups per batch (5 batches per primitive; the median is kept).
    #[arg(long, default_value_t = 100)]
    per_batch: u32,
    /// The rate, requests per second, to give the floor for (requests
    /// issued at whole milliseconds, as in W2).
    #[arg(long, default_value_t = 10_000.0)]
    rate: f64,
}

/// Runs one implementation (by name) in this process.
type RunHere<'a> = Box<dyn Fn(&str) -> Result<Record, String> + 'a>;
/// The command-line arguments of a child process that runs one implementation.
type ChildArgs<'a> = Box<dyn Fn(&str) -> Vec<String> + 'a>;

/// What differs between workloads, for the shared driver [`run_workload`].
struct WorkloadSpec<'a> {
    /// The workload's name, with the run's parameters where one workload
    /// has several runs (progress lines and error messages).
    name: String,
    impls: &'static [&'static str],
    default_rounds: usize,
    spread: &'static [&'static str],
    columns: &'static [(&'static str, &'static str)],
    /// Runs one implementation in this process.
    run_here: RunHere<'a>,
    /// Arguments for a child process that runs one implementation.
    child_args: ChildArgs<'a>,
    targets: fn(&[Record]) -> Vec<TargetCheck>,
    /// One line describing the parameters, for the table's heading.
    describe: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.workload {
        Workload::W1(a) => {
            let params = w1::W1Params {
                n: a.n,
                seed: a.common.seed,
                max_delay_ms: a.max_delay_ms.max(1),
            };
            let p = params.clone();
            let args = a.clone();
            run_workload(
                &a.common,
                WorkloadSpec {
                    name: "w1".into(),
                    impls: w1::IMPLS,
                    default_rounds: 5,
                    spread: w1::SPREAD,
                    columns: w1::COLUMNS,
                    run_here: Box::new(move |name| w1::run(name, &p).map(|r| r.to_record())),
                    child_args: Box::new(move |name| {
                        strings(&[
                            "w1",
                            "--json",
                            "--impl",
                            name,
                            "--n",
                            &args.n.to_string(),
                            "--seed",
                            &args.common.seed.to_string(),
                            "--max-delay-ms",
                            &args.max_delay_ms.to_string(),
                        ])
                    }),
                    targets: w1::targets,
                    describe: format!(
                        "W1 timer churn: n = {}, delays 1..={} ms, seed {}, cancel even indices, expire to {} ms (virtual clock)",
                        params.n,
                        params.max_delay_ms,
                        params.seed,
                        params.horizon_ms()
                    ),
                },
            )
        }
        Workload::W2(a) => run_w2(a),
        Workload::Wakeups(a) => run_wakeups(a),
        Workload::W3(a) => {
            let params = w3::W3Params {
                n: a.n,
                producers: a.producers.max(1),
                seed: a.common.seed,
                max_delay_ms: a.max_delay_ms.max(1),
            };
            let p = params.clone();
            let args = a.clone();
            run_workload(
                &a.common,
                WorkloadSpec {
                    name: "w3".into(),
                    impls: w3::IMPLS,
                    default_rounds: 3,
                    spread: w3::SPREAD,
                    columns: w3::COLUMNS,
                    run_here: Box::new(move |name| w3::run(name, &p).map(|r| r.to_record())),
                    child_args: Box::new(move |name| {
                        strings(&[
                            "w3",
                            "--json",
                            "--impl",
                            name,
                            "--n",
                            &args.n.to_string(),
                            "--producers",
                            &args.producers.to_string(),
                            "--seed",
                            &args.common.seed.to_string(),
                            "--max-delay-ms",
                            &args.max_delay_ms.to_string(),
                        ])
                    }),
                    targets: w3::targets,
                    describe: format!(
                        "W3 concurrent adds: {} producers × {} tasks, delays 1..={} ms, seed {} (real clock, reaper running)",
                        params.producers, params.n, params.max_delay_ms, params.seed
                    ),
                },
            )
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("purgatory-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Runs a workload: one implementation here (child mode), or every selected
/// implementation for several interleaved rounds, then prints the medians.
/// Measures and prints the wake-up costs (`wakeups`).
fn run_wakeups(a: &WakeupsArgs) -> Result<(), String> {
    if !(a.rate.is_finite() && a.rate > 0.0) {
        return Err(format!("--rate must be a positive number, not {}", a.rate));
    }
    if a.per_batch == 0 {
        return Err("--per-batch must be at least 1".into());
    }
    let figures = wakeups::run(a.per_batch);
    let floor = wakeups::floor_us_per_request(&figures, a.rate);
    let us = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    if a.json {
        for f in &figures {
            println!("{}", f.to_record().to_json());
        }
        let mut r = report::Record::new()
            .with("workload", "wakeups_floor")
            .with("rate", a.rate);
        if let Some(floor) = floor {
            r = r.with("floor_us_per_request", (floor * 1000.0).round() / 1000.0);
        }
        println!("{}", r.to_json());
    } else {
        println!(
            "CPU charged per wake-up ({} per batch, median of 5 batches)",
            a.per_batch
        );
        println!(
            "{:<24} {:>6} {:>10} {:>10}",
            "primitive", "timed", "cpu µs", "wall µs"
        );
        for f in &figures {
            println!(
                "{:<24} {:>6} {:>10} {:>10}",
                f.primitive,
                if f.timed { "yes" } else { "no" },
                us(f.cpu_us),
                us(f.wall_us)
            );
        }
        println!(
            "floor at {} requests/s issued at whole milliseconds (cheapest timed wake-up + one park per ms): {} µs/request",
            a.rate,
            us(floor)
        );
    }
    Ok(())
}

fn run_workload(common: &Common, w: WorkloadSpec<'_>) -> Result<(), String> {
    if let Some(name) = &common.child_impl {
        let record = (w.run_here)(name)?;
        println!("{}", record.to_json());
        return Ok(());
    }
    let merged = measure(common, &w)?;
    print_report(
        common,
        &w.describe,
        w.columns,
        w.targets,
        &merged,
        rounds(common, &w),
    );
    Ok(())
}

/// The number of rounds to run.
fn rounds(common: &Common, w: &WorkloadSpec<'_>) -> usize {
    common.rounds.unwrap_or(w.default_rounds).max(1)
}

/// Runs every selected implementation for several interleaved rounds (each
/// in a child process unless `--in-process`) and returns one record per
/// implementation: the medians over rounds.
fn measure(common: &Common, w: &WorkloadSpec<'_>) -> Result<Vec<Record>, String> {
    let impls: Vec<&str> = if common.only.is_empty() {
        w.impls.to_vec()
    } else {
        for o in &common.only {
            if !w.impls.contains(&o.as_str()) {
                return Err(format!(
                    "unknown {} implementation {o:?} (expected one of {:?})",
                    w.name, w.impls
                ));
            }
        }
        w.impls
            .iter()
            .copied()
            .filter(|i| common.only.iter().any(|o| o == i))
            .collect()
    };
    let rounds = rounds(common, w);
    let mut per_impl: Vec<Vec<Record>> = vec![Vec::new(); impls.len()];
    for round in 0..rounds {
        // Rotate the order each round so no implementation always runs first.
        for k in 0..impls.len() {
            let slot = (k + round) % impls.len();
            let name = impls[slot];
            eprintln!("{} round {}/{}: {name} …", w.name, round + 1, rounds);
            let record = if common.in_process {
                (w.run_here)(name)?
            } else {
                child::run_self(&(w.child_args)(name))?
                    .into_iter()
                    .next()
                    .ok_or_else(|| format!("child for {name} printed no record"))?
            };
            per_impl[slot].push(record);
        }
    }
    Ok(per_impl
        .iter()
        .filter_map(|rs| report::aggregate(rs, w.spread))
        .collect())
}

/// Prints the merged records: JSON lines with `--json`, else a heading, the
/// table and the target checks.
fn print_report(
    common: &Common,
    describe: &str,
    columns: &[(&str, &str)],
    targets: fn(&[Record]) -> Vec<TargetCheck>,
    merged: &[Record],
    rounds: usize,
) {
    if common.json {
        for r in merged {
            println!("{}", r.to_json());
        }
    } else {
        println!("{describe}");
        println!(
            "medians of {rounds} interleaved round(s){}",
            if common.in_process {
                ", in one process"
            } else {
                ", one child process per implementation and round"
            }
        );
        println!();
        print!("{}", report::table(merged, columns));
        println!();
        println!("targets:");
        for c in targets(merged) {
            println!("  [{:>6}] {}", c.verdict(), c.description);
        }
    }
}

/// W2: one run (`--num`/`--rate` given, or child mode) or the two standard
/// runs, each in both completion modes, reported in one table.
fn run_w2(a: &W2Args) -> Result<(), String> {
    let defaults = w2::W2Params::default();
    let base = w2::W2Params {
        num: a.num.unwrap_or(defaults.num),
        rate: a.rate.unwrap_or(defaults.rate),
        timeout_ms: a.timeout,
        pct50: a.pct50,
        pct75: a.pct75,
        keys: a.keys,
        key_space_size: a.key_space_size,
        seed: a.common.seed,
        pace_ms: a.pace_ms,
        hasher: a.hasher,
    };
    base.validate()?;
    let runs: Vec<w2::W2Params> = if a.num.is_none() && a.rate.is_none() {
        base.standard_runs().to_vec()
    } else {
        vec![base.clone()]
    };
    let spec = |p: w2::W2Params| {
        let here = p.clone();
        WorkloadSpec {
            name: format!("w2 {} at {}/s", p.num, p.rate),
            impls: w2::IMPLS,
            default_rounds: 1,
            spread: w2::SPREAD,
            columns: w2::COLUMNS,
            run_here: Box::new(move |name| w2::run(name, &here).map(|r| r.to_record())),
            child_args: Box::new(move |name| {
                strings(&[
                    "w2",
                    "--json",
                    "--impl",
                    name,
                    "--num",
                    &p.num.to_string(),
                    "--rate",
                    &p.rate.to_string(),
                    "--timeout",
                    &p.timeout_ms.to_string(),
                    "--pct50",
                    &p.pct50.to_string(),
                    "--pct75",
                    &p.pct75.to_string(),
                    "--keys",
                    &p.keys.to_string(),
                    "--key-space-size",
                    &p.key_space_size.to_string(),
                    "--seed",
                    &p.seed.to_string(),
                    "--pace-ms",
                    &p.pace_ms.to_string(),
                    "--hasher",
                    p.hasher.name(),
                ])
            }),
            targets: w2::targets,
            describe: String::new(),
        }
    };
    if a.common.child_impl.is_some() {
        return run_workload(&a.common, spec(base));
    }
    let mut merged = Vec::new();
    let mut rounds_run = 1;
    for p in &runs {
        let w = spec(p.clone());
        rounds_run = rounds(&a.common, &w);
        merged.extend(measure(&a.common, &w)?);
    }
    let describe = format!(
        "W2 purgatory (Kafka's TestPurgatoryPerformance): keys {} (seed {}, {} of {}), latency log-normal pct50 {} ms pct75 {} ms, timeout {} ms, {} B per request, pace {} ms, {} key hasher; runs: {} (real clock, reaper running, {} allocator)",
        w2::choose_keys(base.seed, base.keys, base.key_space_size).join(","),
        base.seed,
        base.keys,
        base.key_space_size,
        base.pct50,
        base.pct75,
        base.timeout_ms,
        w2::DATA_BYTES,
        base.pace_ms,
        base.hasher.name(),
        runs.iter()
            .map(|p| format!("{} at {}/s", p.num, p.rate))
            .collect::<Vec<_>>()
            .join(", "),
        purgatory_bench::ALLOCATOR,
    );
    print_report(
        &a.common,
        &describe,
        w2::COLUMNS,
        w2::targets,
        &merged,
        rounds_run,
    );
    Ok(())
}
