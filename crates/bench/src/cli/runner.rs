//! The driver every workload shares: one implementation here (child mode),
//! or every selected implementation for several interleaved rounds, each in
//! a child process, then the medians printed as a table or JSON lines.

use super::args::Common;
use crate::measure::child;
use crate::report::{self, Record};
use crate::TargetCheck;

/// Runs one implementation (by name) in this process.
pub(crate) type RunHere<'a> = Box<dyn Fn(&str) -> Result<Record, String> + 'a>;
/// The command-line arguments of a child process that runs one implementation.
pub(crate) type ChildArgs<'a> = Box<dyn Fn(&str) -> Vec<String> + 'a>;

/// What differs between workloads, for the shared driver [`run_workload`].
pub(crate) struct WorkloadSpec<'a> {
    /// The workload's name, with the run's parameters where one workload
    /// has several runs (progress lines and error messages).
    pub(crate) name: String,
    pub(crate) impls: &'static [&'static str],
    pub(crate) default_rounds: usize,
    pub(crate) spread: &'static [&'static str],
    pub(crate) columns: &'static [(&'static str, &'static str)],
    /// Runs one implementation in this process.
    pub(crate) run_here: RunHere<'a>,
    /// Arguments for a child process that runs one implementation.
    pub(crate) child_args: ChildArgs<'a>,
    pub(crate) targets: fn(&[Record]) -> Vec<TargetCheck>,
    /// Whether one round's counts are exact (the workload's own test, which
    /// its targets use too): the merged record says in how many rounds
    /// they were (`exact_rounds`).
    pub(crate) exact: fn(&Record) -> bool,
    /// Adds figures that compare rows of one run (after the medians).
    pub(crate) annotate: fn(&mut [Record]),
    /// One line describing the parameters, for the table's heading.
    pub(crate) describe: String,
}

/// The arguments of a child process that runs implementation `name` of
/// `workload` once with `flags` (each flag and its value) and prints its
/// JSON line.
pub(crate) fn child_command(workload: &str, name: &str, flags: &[(&str, String)]) -> Vec<String> {
    let mut args = strings(&[workload, "--json", "--impl", name]);
    for (flag, value) in flags {
        args.push((*flag).to_string());
        args.push(value.clone());
    }
    args
}

/// Owned copies of `args`.
pub(crate) fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Runs a workload: one implementation here (child mode), or every selected
/// implementation for several interleaved rounds, then prints the medians.
pub(crate) fn run_workload(common: &Common, w: WorkloadSpec<'_>) -> Result<(), String> {
    if let Some(name) = &common.child_impl {
        let record = (w.run_here)(name)?;
        outln!("{}", record.to_json_exact());
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

/// Refuses `--only` and `--impl` names that are not among `impls`.
///
/// # Errors
/// A message naming the flag and the valid names.
pub(crate) fn validate_common(common: &Common, impls: &[&str]) -> Result<(), String> {
    let valid = || impls.join(", ");
    for o in &common.only {
        if !impls.contains(&o.as_str()) {
            return Err(format!(
                "--only: unknown implementation {o:?} (valid: {})",
                valid()
            ));
        }
    }
    if let Some(name) = &common.child_impl {
        if !impls.contains(&name.as_str()) {
            return Err(format!(
                "--impl: unknown implementation {name:?} (valid: {})",
                valid()
            ));
        }
    }
    Ok(())
}

/// The number of rounds to run.
pub(crate) fn rounds(common: &Common, w: &WorkloadSpec<'_>) -> usize {
    common.rounds.unwrap_or(w.default_rounds)
}

/// Runs every selected implementation for several interleaved rounds (each
/// in a child process unless `--in-process`) and returns one record per
/// implementation: the medians over rounds.
pub(crate) fn measure(common: &Common, w: &WorkloadSpec<'_>) -> Result<Vec<Record>, String> {
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
            errln!("{} round {}/{}: {name} …", w.name, round + 1, rounds);
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
    let mut merged: Vec<Record> = per_impl
        .iter()
        .filter_map(|rs| {
            let mut merged = report::aggregate(rs, w.spread)?;
            merged.set("exact_rounds", rs.iter().filter(|r| (w.exact)(r)).count());
            Some(merged)
        })
        .collect();
    (w.annotate)(&mut merged);
    Ok(merged)
}

/// Prints the merged records: JSON lines with `--json`, else a heading, the
/// table and the target checks.
pub(crate) fn print_report(
    common: &Common,
    describe: &str,
    columns: &[(&str, &str)],
    targets: fn(&[Record]) -> Vec<TargetCheck>,
    merged: &[Record],
    rounds: usize,
) {
    if common.json {
        for r in merged {
            outln!("{}", r.to_json());
        }
    } else {
        outln!("{describe}");
        outln!(
            "medians of {rounds} interleaved round(s){}",
            if common.in_process {
                ", in one process"
            } else {
                ", one child process per implementation and round"
            }
        );
        outln!();
        out!("{}", report::table(merged, columns));
        outln!();
        outln!("targets:");
        for c in targets(merged) {
            outln!("  [{:>6}] {}", c.verdict(), c.description);
        }
    }
}
