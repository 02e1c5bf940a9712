//! `purgatory-bench w4`.

use super::args::W4Args;
use super::runner::{child_command, run_workload, validate_common, WorkloadSpec};
use crate::progress::Progress;
use crate::w4;

/// Refuses what `run` cannot run meaningfully.
pub(crate) fn validate(a: &W4Args) -> Result<(), String> {
    validate_common(&a.common, w4::IMPLS)?;
    // Every operation's keys are drawn up front: bound them all together.
    let memberships = a.pending as u64 * a.keys_per_op as u64;
    if memberships > crate::limits::MAX_COUNT {
        return Err(format!(
            "--pending × --keys-per-op must be at most {}, got {} × {} = {memberships}",
            crate::limits::MAX_COUNT,
            a.pending,
            a.keys_per_op
        ));
    }
    let runs = |name: &str| {
        let only = &a.common.only;
        a.common
            .child_impl
            .as_deref()
            .map_or(only.is_empty() || only.iter().any(|o| o == name), |c| {
                c == name
            })
    };
    if a.keys_per_op > 1 && runs("tokio_notify") {
        return Err(format!(
            "--keys-per-op {}: tokio_notify watches one key per operation; add --only purgatory",
            a.keys_per_op
        ));
    }
    Ok(())
}

/// Runs W4 (or, in a child process, one implementation of it).
pub(crate) fn run(a: &W4Args) -> Result<(), String> {
    let params = w4::W4Params {
        pending: a.pending,
        keys: a.keys,
        keys_per_op: a.keys_per_op,
        timeout_ms: a.timeout_ms,
        seed: a.common.seed,
    };
    let p = params.clone();
    let args = a.clone();
    let keys = if params.keys == 0 {
        "every key its own".to_string()
    } else {
        format!("keys drawn from {}", params.keys)
    };
    let per_op = match params.keys_per_op {
        1 => "one key each".to_string(),
        k => format!("{k} keys each"),
    };
    run_workload(
        &a.common,
        WorkloadSpec {
            name: "w4".into(),
            impls: w4::IMPLS,
            default_rounds: 1,
            spread: w4::SPREAD,
            columns: w4::COLUMNS,
            run_here: Box::new(move |name| {
                w4::run(name, &p, &mut Progress::new(name)).map(|r| r.to_record())
            }),
            child_args: Box::new(move |name| {
                child_command(
                    "w4",
                    name,
                    &[
                        ("--pending", args.pending.to_string()),
                        ("--keys", args.keys.to_string()),
                        ("--keys-per-op", args.keys_per_op.to_string()),
                        ("--timeout-ms", args.timeout_ms.to_string()),
                        ("--seed", args.common.seed.to_string()),
                    ],
                )
            }),
            targets: w4::targets,
            exact: w4::counts_exact,
            annotate: |_| {},
            describe: format!(
                "W4 scale: {} operations per phase, {per_op} ({keys}, seed {}), a 24-byte operation; A fill and E shutdown with 300 s timeouts, B check, C expiry after {} ms, D burst on one deadline (real clock, reaper running, {} allocator)",
                params.pending,
                params.seed,
                params.timeout_ms,
                crate::ALLOCATOR
            ),
        },
    )
}
