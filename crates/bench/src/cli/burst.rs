//! `purgatory-bench burst`.

use super::args::BurstArgs;
use super::runner::{child_command, run_workload, validate_common, WorkloadSpec};
use crate::burst;
use crate::progress::Progress;

/// Refuses what `run` cannot run meaningfully.
pub(crate) fn validate(a: &BurstArgs) -> Result<(), String> {
    validate_common(&a.common, burst::IMPLS)?;
    Ok(())
}

/// Runs the burst (or, in a child process, one implementation of it).
pub(crate) fn run(a: &BurstArgs) -> Result<(), String> {
    let params = burst::BurstParams {
        n: a.n,
        seed: a.common.seed,
        ..burst::BurstParams::default()
    };
    let p = params.clone();
    let args = a.clone();
    run_workload(
        &a.common,
        WorkloadSpec {
            name: "burst".into(),
            impls: burst::IMPLS,
            default_rounds: 1,
            spread: burst::SPREAD,
            columns: burst::COLUMNS,
            run_here: Box::new(move |name| {
                burst::run(name, &p, &mut Progress::new(name)).map(|r| r.to_record())
            }),
            child_args: Box::new(move |name| {
                child_command(
                    "burst",
                    name,
                    &[
                        ("--n", args.n.to_string()),
                        ("--seed", args.common.seed.to_string()),
                    ],
                )
            }),
            targets: burst::targets,
            exact: burst::counts_exact,
            annotate: |_| {},
            describe: format!(
                "Burst: {} timer tasks sharing one deadline after a churn of as many (delays 1..={} ms, a random half cancelled in random order), seed {} (real clock, reaper running, tick 1 ms, 20 buckets); hand-over rate: the executor held at a gate while max(n, {}) expired tasks are handed to it, then tasks run per second once it opens",
                params.n,
                params.churn_max_delay_ms,
                params.seed,
                params.handover_min
            ),
        },
    )
}
