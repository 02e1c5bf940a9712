//! The `w4` subcommand end to end at a tiny `--pending`: one child process
//! per implementation, one JSON line each with the fields and exact
//! counts.

use purgatory_bench::report::Record;
use std::process::Command;

#[test]
fn json_rows_with_exact_counts_for_both_implementations() {
    let out = Command::new(env!("CARGO_BIN_EXE_purgatory-bench"))
        .args([
            "w4",
            "--pending",
            "2000",
            "--keys",
            "50",
            "--timeout-ms",
            "5",
            "--json",
        ])
        .output()
        .expect("cannot run purgatory-bench");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Progress goes to stderr, naming the implementation and the phase.
    assert!(err.contains("round 1/1: purgatory"), "{err}");
    assert!(err.contains("tokio_notify: D burst"), "{err}");
    let rows: Vec<Record> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| Record::parse(l).expect("a JSON line"))
        .collect();
    let impls: Vec<_> = rows.iter().map(|r| r.str("impl").unwrap()).collect();
    assert_eq!(impls, ["purgatory", "tokio_notify"]);
    for r in &rows {
        for f in purgatory_bench::w4::REQUIRED_FIELDS {
            assert!(r.get(f).is_some(), "missing {f} in {r:?}");
        }
        assert_eq!(r.str("workload"), Some("w4"));
        assert_eq!(r.num("pending"), Some(2000.0));
        assert_eq!(r.num("keys"), Some(50.0));
        assert_eq!(r.num("completed"), Some(2000.0), "{r:?}");
        assert_eq!(r.num("expired"), Some(4000.0), "{r:?}");
        assert_eq!(r.num("early"), Some(0.0), "{r:?}");
        assert_eq!(r.num("watched_after"), Some(0.0), "{r:?}");
        assert_eq!(r.num("delayed_after"), Some(0.0), "{r:?}");
    }
}
