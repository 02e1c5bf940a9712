//! `purgatory-bench w3`.

use super::args::W3Args;
use super::runner::{child_command, run_workload, validate_common, WorkloadSpec};
use crate::progress::Progress;
use crate::{limits, w3};

/// Refuses what `run` cannot run meaningfully.
pub(crate) fn validate(a: &W3Args) -> Result<(), String> {
    validate_common(&a.common, w3::IMPLS)?;
    let total = a.n as u64 * a.producers as u64;
    if total > limits::MAX_COUNT {
        return Err(format!(
            "--n × --producers must be at most {}, got {} × {} = {total}",
            limits::MAX_COUNT,
            a.n,
            a.producers
        ));
    }
    Ok(())
}

/// Runs W3 (or, in a child process, one implementation of it).
pub(crate) fn run(a: &W3Args) -> Result<(), String> {
    let params = w3::W3Params {
        n: a.n,
        producers: a.producers,
        seed: a.common.seed,
        max_delay_ms: a.max_delay_ms,
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
            run_here: Box::new(move |name| {
                w3::run(name, &p, &mut Progress::new(name)).map(|r| r.to_record())
            }),
            child_args: Box::new(move |name| {
                child_command(
                    "w3",
                    name,
                    &[
                        ("--n", args.n.to_string()),
                        ("--producers", args.producers.to_string()),
                        ("--seed", args.common.seed.to_string()),
                        ("--max-delay-ms", args.max_delay_ms.to_string()),
                    ],
                )
            }),
            targets: w3::targets,
            exact: w3::counts_exact,
            annotate: |_| {},
            describe: format!(
                "W3 concurrent adds: {} producers × {} tasks, delays 1..={} ms, seed {} (real clock, reaper running)",
                params.producers, params.n, params.max_delay_ms, params.seed
            ),
        },
    )
}
