//! `purgatory-bench w2`.

use super::args::W2Args;
use super::runner::{
    measure, print_report, rounds, run_workload, strings, validate_common, WorkloadSpec,
};
use crate::progress::Progress;
use crate::w2;

/// The parameters of the run `a` asks for (the first standard run's, when
/// `--num` and `--rate` are absent).
fn base_params(a: &W2Args) -> w2::W2Params {
    let defaults = w2::W2Params::default();
    w2::W2Params {
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
    }
}

/// Refuses what `run` cannot run meaningfully.
pub(crate) fn validate(a: &W2Args) -> Result<(), String> {
    validate_common(&a.common, w2::IMPLS)?;
    base_params(a).validate()
}

/// W2: one run (`--num`/`--rate` given, or child mode) or the two standard
/// runs, each in both completion modes, reported in one table.
pub(crate) fn run(a: &W2Args) -> Result<(), String> {
    let base = base_params(a);
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
            run_here: Box::new(move |name| {
                w2::run(name, &here, &mut Progress::new(name)).map(|r| r.to_record())
            }),
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
            exact: w2::counts_exact,
            annotate: |_| {},
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
        crate::limits::abbreviate(&w2::choose_keys(base.seed, base.keys, base.key_space_size), 8),
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
        crate::ALLOCATOR,
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
