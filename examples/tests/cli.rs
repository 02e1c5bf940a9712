//! The programs run as a user runs them: each refused command line exits
//! with code 2, names the flag and its range on stderr and runs nothing; the
//! defaults still run; a long virtual run prints few status lines.
//!
//! Cargo gives integration tests the path of the package's binaries but not
//! of its examples, so the tests find the example executables next to their
//! own (`target/<profile>/examples/`) after building them once with the
//! `cargo` that runs the tests (a no-op when `cargo test` has just built them,
//! as it does by default).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

fn profile_dir() -> PathBuf {
    // target/<profile>/deps/cli-<hash>
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .to_path_buf()
}

fn build_examples() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = profile_dir();
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "--quiet", "-p", "examples", "--examples"]);
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cargo.arg("--release");
            }
            Some(other) => {
                cargo.args(["--profile", other]);
            }
            None => {}
        }
        if let Some(target) = dir.parent() {
            cargo.arg("--target-dir").arg(target);
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success(), "building the examples failed");
    });
}

fn command(example: &str) -> Command {
    build_examples();
    let path = profile_dir()
        .join("examples")
        .join(format!("{example}{}", std::env::consts::EXE_SUFFIX));
    Command::new(path)
}

fn run(example: &str, args: &[&str]) -> Output {
    let mut command = command(example);
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("{example} does not run: {e}"))
}

/// Runs `example` with `args` and checks it refuses them: exit code 2,
/// `expected` on stderr, nothing on stdout (nothing ran).
fn assert_refused(example: &str, args: &[&str], expected: &str) {
    let out = run(example, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{example} {args:?}: {stderr}");
    assert!(stderr.contains(expected), "{example} {args:?}: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{example} {args:?} ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn consumer_heartbeat_refuses_bad_input() {
    let cases: &[(&[&str], &str)] = &[
        (&["--consumers", "0"], "'--consumers <CONSUMERS>': must be a whole number from 1 to 10000000"),
        (&["--consumers", "-5"], "'--consumers <CONSUMERS>': must be a whole number from 1 to 10000000"),
        (&["--groups", "0"], "'--groups <GROUPS>': must be a whole number from 1 to 10000000"),
        (&["--consumers", "5", "--groups", "6"], "--groups (6) must not exceed --consumers (5)"),
        (&["--heartbeat-interval-ms", "0"], "'--heartbeat-interval-ms <HEARTBEAT_INTERVAL_MS>': must be a whole number from 1"),
        (&["--session-timeout-ms", "3000"], "--session-timeout-ms (3000) must be greater than --heartbeat-interval-ms (3000)"),
        (&["--crash-rate", "-0.5"], "'--crash-rate <CRASH_RATE>': must be a number from 0 to 1"),
        (&["--crash-rate", "0.7", "--stall-rate", "0.7"], "--crash-rate + --stall-rate (0.7 + 0.7) must not exceed 1"),
        (&["--duration-s", "0"], "'--duration-s <SECONDS>': must be a number of seconds from 0.001 to 604800, in whole milliseconds"),
        (&["--duration-s", "0.0001"], "'--duration-s <SECONDS>': must be a number of seconds from 0.001 to 604800, in whole milliseconds"),
        (&["--duration-s", "1000000"], "'--duration-s <SECONDS>': must be a number of seconds from 0.001 to 604800"),
        (&["--duration-s", "5"], "--duration-s (5 s) is too short"),
        (&["--handler-threads", "0"], "'--handler-threads <HANDLER_THREADS>': must be a whole number from 1 to 64"),
        (&["--seed", "-1"], "'--seed <SEED>': must be a whole number from 0 to 18446744073709551615"),
        (&["--plot", "run.png"], "'--plot <FILE.svg>': must be a file name ending in .svg, in an existing directory"),
        (&["--plot", "/no/such/dir/run.svg"], "'--plot <FILE.svg>': must be a file name ending in .svg"),
        (
            &["--consumers", "10000000", "--heartbeat-interval-ms", "1", "--session-timeout-ms", "2", "--duration-s", "3600"],
            "heartbeats; it must be at most 10000000000",
        ),
    ];
    for (args, expected) in cases {
        assert_refused("consumer_heartbeat", args, expected);
    }
}

#[test]
fn consumer_heartbeat_refuses_a_plot_file_it_cannot_write_before_running() {
    let dir = std::env::temp_dir().join(format!("cli-test-{}.svg", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.to_str().unwrap();
    let expected = format!("error: --plot {path}: cannot write to this file: ");
    assert_refused(
        "consumer_heartbeat",
        &["--virtual-time", "--plot", path],
        &expected,
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn async_produce_refuses_any_argument_but_help() {
    assert_refused(
        "async_produce",
        &["--bogus-flag", "7"],
        "unexpected argument '--bogus-flag'",
    );
    assert_refused("async_produce", &["7"], "unexpected argument '7'");
    let out = run("async_produce", &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: async_produce"), "{help}");
}

#[test]
fn a_closed_stdout_ends_each_program_quietly() {
    // The reader goes away before the program prints its first line (as
    // `| head -1` does after it): the program ends with exit code 0 and
    // says nothing on stderr, instead of panicking with exit code 101.
    let cases: &[(&str, &[&str])] = &[
        (
            "consumer_heartbeat",
            &["--virtual-time", "--consumers", "200", "--groups", "2"],
        ),
        ("produce", &[]),
        ("fetch", &[]),
    ];
    for (example, args) in cases {
        let mut child = command(example)
            .args(*args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{example} does not run: {e}"));
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{example}: {stderr}");
        assert!(stderr.is_empty(), "{example}: {stderr}");
    }
}

#[test]
fn a_closed_stderr_does_not_end_a_program() {
    // A warning (a session timeout that leaves no room for the jitter)
    // goes to a stderr whose reader has gone: it is dropped, and the run
    // ends as usual, its summary on stdout.
    let mut child = command("consumer_heartbeat")
        .args([
            "--virtual-time",
            "--consumers",
            "20",
            "--groups",
            "2",
            "--session-timeout-ms",
            "3100",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("consumer_heartbeat runs");
    drop(child.stderr.take());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("failures injected"), "{stdout}");
}

#[test]
fn produce_refuses_bad_input() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--timeout-ms", "0"],
            "'--timeout-ms <TIMEOUT_MS>': must be a whole number from 30 to 60000",
        ),
        (
            &["--records", "-1"],
            "'--records <RECORDS>': must be a whole number from 1 to 10000",
        ),
        (
            &["--record-bytes", "0"],
            "'--record-bytes <RECORD_BYTES>': must be a whole number from 1 to 1048576",
        ),
        (
            &["--records", "10000", "--record-bytes", "1000"],
            "--records × --record-bytes (10000 × 1000 = 10000000) must be at most 1048576",
        ),
        (&["--seed", "1"], "unexpected argument '--seed'"),
    ];
    for (args, expected) in cases {
        assert_refused("produce", args, expected);
    }
}

#[test]
fn fetch_refuses_bad_input() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--min-bytes", "0"],
            "'--min-bytes <MIN_BYTES>': must be a whole number from 1 to 1048576",
        ),
        (
            &["--min-bytes", "99999999999"],
            "'--min-bytes <MIN_BYTES>': must be a whole number from 1 to 1048576",
        ),
        (
            &["--max-wait-ms", "0"],
            "'--max-wait-ms <MAX_WAIT_MS>': must be a whole number from 1 to 60000",
        ),
        (
            &["--append-interval-ms", "-100"],
            "'--append-interval-ms <APPEND_INTERVAL_MS>': must be a whole number from 1 to 60000",
        ),
        (
            &["--records-per-append", "0"],
            "'--records-per-append <RECORDS_PER_APPEND>': must be a whole number from 1 to 10000",
        ),
        (
            &["--record-bytes", "2000000"],
            "'--record-bytes <RECORD_BYTES>': must be a whole number from 1 to 1048576",
        ),
        (
            &["--max-wait-ms", "60000", "--append-interval-ms", "1"],
            "appends per wait) must be at most 1000",
        ),
        (
            &["--append-interval-ms", "60000", "--max-wait-ms", "1"],
            "--append-interval-ms × the appends that reach --min-bytes (60000 × 4 = 240000 ms, \
             at 300 bytes per append of --records-per-append × --record-bytes) must be less than \
             --max-wait-ms (1)",
        ),
    ];
    for (args, expected) in cases {
        assert_refused("fetch", args, expected);
    }
}

#[test]
fn produce_and_fetch_take_help_and_their_parameters() {
    for (example, flags) in [
        (
            "produce",
            &["--timeout-ms", "--records", "--record-bytes"][..],
        ),
        (
            "fetch",
            &[
                "--min-bytes",
                "--max-wait-ms",
                "--append-interval-ms",
                "--records-per-append",
                "--record-bytes",
            ][..],
        ),
    ] {
        let out = run(example, &["--help"]);
        assert_eq!(out.status.code(), Some(0), "{example} --help");
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in flags {
            assert!(help.contains(flag), "{example} --help lacks {flag}: {help}");
        }
    }
}

#[test]
fn produce_and_fetch_scripts_follow_their_parameters() {
    let out = run("produce", &["--timeout-ms", "200"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("t= 200 ms  produce #1 answered:"),
        "{stdout}"
    );
    assert!(stdout.contains("REQUEST_TIMED_OUT"), "{stdout}");
    // An answer given inside a follower's fetch comes after that fetch's
    // own result line.
    assert!(
        stdout.contains(
            "            -> no new records; orders-2 high watermark 15\n\
             t= 240 ms  produce #2 answered:\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("Produce purgatory at the end: watched 0, delayed 0."),
        "{stdout}"
    );

    let out = run("fetch", &["--min-bytes", "600"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "t= 200 ms  fetch #1 answered after 200 ms: events-0 NONE, records 0..6 (600 bytes)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("Fetch purgatory at the end: watched 0, delayed 0."),
        "{stdout}"
    );
}

#[test]
fn a_long_virtual_run_prints_few_status_lines() {
    // 100 s simulated: one status line every 5 s, not every second.
    let out = run(
        "consumer_heartbeat",
        &[
            "--virtual-time",
            "--consumers",
            "20",
            "--groups",
            "2",
            "--duration-s",
            "100",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("[t=")).collect();
    assert_eq!(lines.len(), 20, "{stdout}");
    assert!(lines[0].starts_with("[t=   5.0s wall"), "{}", lines[0]);
    assert!(lines.iter().all(|l| l.contains(" eta ")), "{stdout}");
    assert!(lines[19].starts_with("[t= 100.0s wall"), "{}", lines[19]);
    assert!(
        stdout.contains("== summary (virtual time, seed 42) =="),
        "{stdout}"
    );
}

#[test]
fn plot_writes_one_svg_chart_of_the_run() {
    let path = std::env::temp_dir().join(format!("consumer_heartbeat-{}.svg", std::process::id()));
    let out = run(
        "consumer_heartbeat",
        &[
            "--virtual-time",
            "--consumers",
            "200",
            "--groups",
            "4",
            "--duration-s",
            "14",
            "--plot",
            path.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&path).expect("the chart is written");
    std::fs::remove_file(&path).ok();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
    for caption in [
        "alive members",
        "heartbeats per second",
        "evictions per second (3 detected failures, 0 false)",
        "detection delay (p50 10000 ms, max 10000 ms)",
        "session timeout 10000 ms",
    ] {
        assert!(svg.contains(caption), "the chart lacks {caption:?}");
    }
}
