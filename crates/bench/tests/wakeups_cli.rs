//! The `wakeups` subcommand end to end: one JSON line per primitive and one
//! for the floor, or a table; bad parameters are refused. One wake-up per
//! batch, so that the test takes a few tens of milliseconds.

use purgatory_bench::report::Record;
use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_purgatory-bench"))
        .args(args)
        .output()
        .expect("cannot run purgatory-bench")
}

#[test]
fn json_lines_for_each_primitive_and_the_floor() {
    let out = bench(&["wakeups", "--json", "--per-batch", "1", "--rate", "5000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Record> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| Record::parse(l).expect("a JSON line"))
        .collect();
    let (floor, primitives) = rows.split_last().expect("some lines");
    assert_eq!(primitives.len(), 7);
    for r in primitives {
        assert_eq!(r.str("workload"), Some("wakeups"));
        assert!(r.str("primitive").is_some());
        assert!(matches!(r.str("kind"), Some("timed" | "untimed")), "{r:?}");
    }
    assert_eq!(floor.str("workload"), Some("wakeups_floor"));
    assert_eq!(floor.num("rate"), Some(5000.0));
    if cfg!(target_os = "linux") {
        assert!(floor.num("floor_us_per_request").is_some_and(|f| f > 0.0));
    }
}

#[test]
fn table_names_the_floor() {
    let out = bench(&["wakeups", "--per-batch", "1"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("timerfd_periodic_1ms"), "{text}");
    assert!(text.contains("floor at 10000 requests/s"), "{text}");
}

#[test]
fn bad_parameters_are_refused() {
    for args in [
        &["wakeups", "--rate", "0"][..],
        &["wakeups", "--rate", "NaN"],
        &["wakeups", "--per-batch", "0"],
    ] {
        let out = bench(args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("must be"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
