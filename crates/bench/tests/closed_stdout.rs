//! A reader that goes away (`purgatory-bench w1 | head -1`) ends the runner
//! quietly: exit code 0 and no panic, instead of exit code 101; one that
//! goes away from stderr costs the progress lines only.

use std::process::{Child, Command, Stdio};

/// A small in-process `w1` run with both its outputs piped.
fn w1(extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_purgatory-bench"))
        .args(["w1", "--n", "1000", "--rounds", "1", "--in-process"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run purgatory-bench")
}

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let mut child = w1(&[]);
    // Closed before the runner prints its first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("purgatory-bench ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("error"), "{err}");
}

/// Progress goes to stderr: one that cannot be written (`2>&1 | head -1`,
/// `2>/dev/full`) is dropped, and the run ends as usual, its results on
/// stdout.
#[test]
fn a_closed_stderr_does_not_end_the_run() {
    let mut child = w1(&["--json"]);
    drop(child.stderr.take());
    let out = child.wait_with_output().expect("purgatory-bench ends");
    let results = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{results}");
    assert!(results.contains("\"workload\":\"w1\""), "{results}");
}
