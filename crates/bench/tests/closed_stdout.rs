//! A reader that goes away (`purgatory-bench w1 | head -1`) ends the runner
//! quietly: exit code 0 and no panic, instead of exit code 101.

use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_purgatory-bench"))
        .args(["w1", "--n", "1000", "--rounds", "1", "--in-process"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run purgatory-bench");
    // Closed before the runner prints its first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("purgatory-bench ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("error"), "{err}");
}
