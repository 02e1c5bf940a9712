//! Every subcommand refuses bad input before running anything: exit code 2,
//! a message naming the flag and the valid range, nothing on stdout.

use std::process::Command;

/// Runs the binary with `args` and checks the refusal: exit code 2, every
/// one of `expect` in the message, nothing printed on stdout and no round
/// started.
fn refused(args: &[&str], expect: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_purgatory-bench"))
        .args(args)
        .output()
        .expect("cannot run purgatory-bench");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for e in expect {
        assert!(err.contains(e), "{args:?}: expected {e:?} in {err}");
    }
    assert!(out.stdout.is_empty(), "{args:?} printed on stdout");
    assert!(!err.contains("round 1/"), "{args:?} started a round: {err}");
}

const COUNT: &str = "from 1 to 100000000";

#[test]
fn counts_must_be_positive_and_bounded() {
    refused(&["w1", "--n", "0"], &["--n", COUNT, "got 0"]);
    refused(&["w1", "--n", "-5"], &["--n", COUNT, "got -5"]);
    refused(&["w1", "--n", "1000000000"], &["--n", COUNT]);
    refused(&["w2", "--num", "0"], &["--num", COUNT]);
    refused(&["w3", "--n", "0"], &["--n", COUNT]);
    refused(&["burst", "--n", "0"], &["--n", COUNT]);
    refused(&["burst", "--n", "-1"], &["--n", COUNT]);
    refused(
        &["w4", "--pending", "0"],
        &["--pending", "from 1 to 20000000"],
    );
    refused(
        &["w4", "--pending", "50000000"],
        &["--pending", "from 1 to 20000000"],
    );
    refused(&["w4", "--keys", "-1"], &["--keys", "from 0 to 20000000"]);
    refused(
        &["w4", "--keys-per-op", "0"],
        &["--keys-per-op", "from 1 to"],
    );
    refused(
        &["w4", "--keys-per-op", "3"],
        &["--keys-per-op 3", "--only purgatory"],
    );
    refused(
        &["w3", "--n", "60000000", "--producers", "2"],
        &["--n × --producers", "at most 100000000"],
    );
    refused(
        &[
            "w4",
            "--only",
            "purgatory",
            "--pending",
            "20000000",
            "--keys-per-op",
            "10000",
        ],
        &["--pending × --keys-per-op", "at most 100000000"],
    );
}

#[test]
fn rounds_and_producers_are_never_silently_one() {
    for w in ["w1", "w2", "w3", "w4", "burst"] {
        refused(&[w, "--rounds", "0"], &["--rounds", "from 1 to 1000"]);
    }
    refused(&["w1", "--rounds", "-2"], &["--rounds", "got -2"]);
    refused(
        &["w3", "--producers", "0"],
        &["--producers", "from 1 to 64"],
    );
    refused(
        &["w3", "--producers", "65"],
        &["--producers", "from 1 to 64"],
    );
}

#[test]
fn rates_must_be_positive_and_meaningful() {
    const RATE: &str = "from 1 to 100000000 per second";
    refused(&["w2", "--rate", "-5"], &["--rate", RATE, "got -5"]);
    refused(&["w2", "--rate", "0"], &["--rate", RATE]);
    refused(&["w2", "--rate", "18446744073709551615"], &["--rate", RATE]);
    refused(&["w2", "--rate", "inf"], &["--rate", RATE]);
    refused(&["wakeups", "--rate", "-5"], &["--rate", RATE]);
    // Each in range, but a run that would issue for days: the default
    // 1,000,000 requests at 1/s, and 100,000,000 at 10,000/s.
    const ISSUE: &str = "--num over --rate must be at most 3600 s of issuing";
    refused(&["w2", "--rate", "1"], &[ISSUE, "1000000 requests at 1/s"]);
    refused(&["w2", "--num", "100000000", "--rate", "10000"], &[ISSUE]);
}

#[test]
fn times_sizes_and_names() {
    refused(
        &["w1", "--max-delay-ms", "0"],
        &["--max-delay-ms", "from 1 to 3600000"],
    );
    refused(
        &["w3", "--max-delay-ms", "-1"],
        &["--max-delay-ms", "from 1 to 3600000"],
    );
    refused(
        &["w2", "--timeout", "0"],
        &["--timeout", "from 1 to 3600000"],
    );
    refused(
        &["w2", "--pct50", "0.5"],
        &["--pct50", "from 1 to 3600000 ms"],
    );
    refused(&["w2", "--pct75", "10"], &["--pct75", "from --pct50 (50)"]);
    refused(&["w2", "--keys", "0"], &["--keys", "from 1 to 10000"]);
    refused(&["w2", "--keys", "1000000"], &["--keys", "from 1 to 10000"]);
    refused(
        &["w2", "--key-space-size", "0"],
        &["--key-space-size", "from 1 to"],
    );
    refused(&["w2", "--pace-ms", "0"], &["--pace-ms", "from 1 to 1000"]);
    refused(&["w2", "--hasher", "sip"], &["--hasher", "std or fx"]);
    refused(
        &["wakeups", "--per-batch", "0"],
        &["--per-batch", "from 1 to 10000"],
    );
    refused(&["w1", "--seed", "-1"], &["--seed", "from 0 to"]);
    refused(
        &["w1", "--only", "nope"],
        &["--only", "nope", "timer, binary_heap"],
    );
    // Named as a peer, but not built in: say how to build it.
    if !cfg!(feature = "nexus") {
        refused(
            &["w1", "--only", "timer,nexus_timer"],
            &["nexus_timer", "--features nexus"],
        );
    }
}
