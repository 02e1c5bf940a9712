//! The `w2` subcommand end to end: the parent runs each completion mode in a
//! child process and prints one JSON line per row, or a table with the
//! target checks. Tiny runs (2,000 requests, latencies of a few ms and a
//! 20 ms timeout) so that the test takes a fraction of a second.

use purgatory_bench::report::Record;
use std::process::Command;

const TINY: &[&str] = &[
    "w2",
    "--num",
    "2000",
    "--rate",
    "1000000",
    "--timeout",
    "20",
    "--pct50",
    "5",
    "--pct75",
    "8",
    "--seed",
    "7",
];

fn run(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_purgatory-bench"))
        .args(TINY)
        .args(extra)
        .output()
        .expect("cannot run purgatory-bench");
    assert!(
        out.status.success(),
        "purgatory-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("output is UTF-8")
}

#[test]
fn json_rows_for_both_modes_with_the_required_fields() {
    let text = run(&["--json"]);
    let rows: Vec<Record> = text
        .lines()
        .map(|l| Record::parse(l).expect("a JSON line"))
        .collect();
    let modes: Vec<_> = rows.iter().map(|r| r.str("impl").unwrap()).collect();
    assert_eq!(modes, ["purgatory", "purgatory_check"]);
    for r in &rows {
        for f in purgatory_bench::w2::REQUIRED_FIELDS {
            assert!(r.get(f).is_some(), "missing {f} in {r:?}");
        }
        assert_eq!(r.str("workload"), Some("w2"));
        assert_eq!(r.num("requests"), Some(2000.0));
        assert_eq!(r.num("target_rate"), Some(1_000_000.0));
        assert_eq!(
            r.num("completed").unwrap() + r.num("expired").unwrap(),
            2000.0,
            "{r:?}"
        );
        assert_eq!(r.num("watched_after"), Some(0.0), "{r:?}");
        assert_eq!(r.str("keys"), Some(keys_for_seed_7().as_str()));
    }
}

fn keys_for_seed_7() -> String {
    purgatory_bench::w2::choose_keys(7, 3, 100).join(",")
}

#[test]
fn table_with_target_checks() {
    let text = run(&["--only", "purgatory"]);
    assert!(text.contains("W2 purgatory"), "{text}");
    assert!(text.contains("watched after"), "{text}");
    assert!(
        text.contains("[   MET] purgatory (2000 at 1000000/s): completed"),
        "{text}"
    );
    assert!(text.contains("watched_after = 0 (target 0)"), "{text}");
    assert!(!text.contains("purgatory_check"), "{text}");
}

#[test]
fn bad_parameters_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_purgatory-bench"))
        .args(["w2", "--num", "10", "--rate", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--rate") && err.contains("from 1 to"), "{err}");
}
