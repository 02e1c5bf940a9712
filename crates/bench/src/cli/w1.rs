//! `purgatory-bench w1`.

use super::args::W1Args;
use super::runner::{child_command, run_workload, validate_common, WorkloadSpec};
use crate::progress::Progress;
use crate::w1;

/// Refuses what `run` cannot run meaningfully.
pub(crate) fn validate(a: &W1Args) -> Result<(), String> {
    let named = a.common.only.iter().chain(&a.common.child_impl);
    if !cfg!(feature = "nexus") && named.into_iter().any(|name| name == "nexus_timer") {
        return Err(
            "nexus_timer needs the runner built with `--features nexus` (Rust 1.94 or later)"
                .to_string(),
        );
    }
    validate_common(&a.common, w1::IMPLS)?;
    Ok(())
}

/// Runs W1 (or, in a child process, one implementation of it).
pub(crate) fn run(a: &W1Args) -> Result<(), String> {
    let params = w1::W1Params {
        n: a.n,
        seed: a.common.seed,
        max_delay_ms: a.max_delay_ms,
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
            run_here: Box::new(move |name| {
                w1::run(name, &p, &mut Progress::new(name)).map(|r| r.to_record())
            }),
            child_args: Box::new(move |name| {
                child_command(
                    "w1",
                    name,
                    &[
                        ("--n", args.n.to_string()),
                        ("--seed", args.common.seed.to_string()),
                        ("--max-delay-ms", args.max_delay_ms.to_string()),
                    ],
                )
            }),
            targets: w1::targets,
            exact: w1::counts_exact,
            annotate: w1::annotate,
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
