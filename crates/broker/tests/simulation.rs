//! The consumer-heartbeat simulation, run through the library as the example
//! runs it, checked against the summary's invariants: every injected failure
//! detected, no false eviction, detection delay within the session timeout
//! plus one tick and the heartbeat jitter, one pending expectation per alive
//! member, and (in virtual time) the same summary for the same seed.

use broker::simulation::{run, run_recorded, SimConfig, Summary};

/// The purgatory's tick: expiry may land up to one tick after the deadline.
const TICK_MS: u64 = 1;

fn small(seed: u64) -> SimConfig {
    SimConfig {
        consumers: 300,
        groups: 12,
        heartbeat_interval_ms: 100,
        session_timeout_ms: 300,
        crash_rate: 0.05,
        stall_rate: 0.05,
        duration_ms: 1_500,
        seed,
        virtual_time: true,
        handler_threads: 2,
    }
}

fn run_quietly(config: &SimConfig) -> Summary {
    run(config, |_| {}).expect("a valid configuration runs")
}

fn assert_invariants(s: &Summary) {
    let c = &s.config;
    assert_eq!(s.injected_crashes, c.planned_crashes(), "{s:?}");
    assert_eq!(s.injected_stalls, c.planned_stalls(), "{s:?}");
    assert_eq!(
        s.detected_failures,
        s.injected_failures(),
        "every failure detected: {s:?}"
    );
    assert_eq!(s.undetected_failures, 0, "{s:?}");
    assert_eq!(s.false_evictions, 0, "{s:?}");
    assert_eq!(s.watched_at_end, s.alive_at_end, "{s:?}");
    assert_eq!(s.delayed_at_end, s.alive_at_end, "{s:?}");
    // Crashed members are gone; stalled ones are gone or back.
    assert!(s.alive_at_end <= c.consumers - s.injected_crashes, "{s:?}");
    assert!(
        s.alive_at_end >= c.consumers - s.injected_failures(),
        "{s:?}"
    );
    // Each eviction and each rejoin is one rebalance.
    assert_eq!(
        s.rebalances,
        (s.detected_failures + s.false_evictions) as u64 + s.rejoins,
        "{s:?}"
    );
    if s.detected_failures > 0 {
        let (p50, p99, max) = (
            s.detection_delay_p50_ms.unwrap(),
            s.detection_delay_p99_ms.unwrap(),
            s.detection_delay_max_ms.unwrap(),
        );
        assert!(
            c.session_timeout_ms <= p50 && p50 <= p99 && p99 <= max,
            "{s:?}"
        );
    }
}

#[test]
fn virtual_runs_detect_every_failure_within_the_bound() {
    for seed in [1, 2, 3, 4] {
        let s = run_quietly(&small(seed));
        assert_invariants(&s);
        assert_eq!(s.injected_failures(), 30);
        let bound = s.config.session_timeout_ms + TICK_MS + s.config.jitter_ms();
        assert!(
            s.detection_delay_max_ms.unwrap() <= bound,
            "seed {seed}: {s:?}"
        );
        assert!(s.rejoins > 0, "seed {seed}: stalled members come back");
    }
}

#[test]
fn no_false_eviction_without_stalls() {
    for seed in [5, 6, 7] {
        let config = SimConfig {
            stall_rate: 0.0,
            crash_rate: 0.1,
            ..small(seed)
        };
        let s = run_quietly(&config);
        assert_invariants(&s);
        assert_eq!(s.injected_stalls, 0);
        assert_eq!(s.false_evictions, 0, "seed {seed}");
        assert_eq!(s.rejoins, 0, "nobody was evicted who could come back");
        assert_eq!(s.alive_at_end, config.consumers - s.injected_crashes);
    }
}

#[test]
fn no_failures_means_no_evictions() {
    let config = SimConfig {
        crash_rate: 0.0,
        stall_rate: 0.0,
        duration_ms: 1_000,
        ..small(8)
    };
    let s = run_quietly(&config);
    assert_invariants(&s);
    assert_eq!((s.rebalances, s.alive_at_end), (0, config.consumers));
    assert_eq!(s.detection_delay_p50_ms, None);
    assert!(s.to_json().contains("\"detection_delay_p50_ms\":null"));
}

#[test]
fn the_same_seed_gives_the_same_summary() {
    let a = run_quietly(&small(11));
    let b = run_quietly(&small(11));
    assert_eq!(a, b);
    assert_eq!(a.to_json(), b.to_json());
    assert_eq!(a.to_string(), b.to_string());
    let c = run_quietly(&small(12));
    assert_ne!(a.to_json(), c.to_json(), "another seed, another run");
}

#[test]
fn progress_comes_once_per_simulated_second() {
    let mut lines = Vec::new();
    let s = run(
        &SimConfig {
            duration_ms: 3_000,
            ..small(13)
        },
        |p| lines.push(*p),
    )
    .unwrap();
    let times: Vec<u64> = lines.iter().map(|p| p.elapsed_ms).collect();
    assert_eq!(times, [1_000, 2_000, 3_000]);
    let last = lines.last().unwrap();
    assert_eq!(
        (last.alive, last.watched, last.delayed),
        (s.alive_at_end, s.watched_at_end, s.delayed_at_end)
    );
    assert!(lines.iter().all(|p| p.heartbeats_per_s > 0.0));
}

#[test]
fn the_summary_does_not_depend_on_the_handler_threads() {
    // About 100 heartbeats per millisecond: enough for the handlers to share.
    let busy = SimConfig {
        consumers: 2_000,
        groups: 40,
        heartbeat_interval_ms: 20,
        session_timeout_ms: 60,
        duration_ms: 300,
        ..small(17)
    };
    let one = run_quietly(&SimConfig {
        handler_threads: 1,
        ..busy.clone()
    });
    assert_invariants(&one);
    assert!(one.detected_failures > 0 && one.rejoins > 0, "{one:?}");
    for threads in [2, 3, 8] {
        let many = run_quietly(&SimConfig {
            handler_threads: threads,
            ..busy.clone()
        });
        let config = SimConfig {
            handler_threads: 1,
            ..many.config.clone()
        };
        let handler_threads_used = one.handler_threads_used;
        assert_eq!(
            Summary {
                config,
                handler_threads_used,
                ..many
            },
            one,
            "{threads} threads"
        );
    }
}

#[test]
fn progress_thins_out_on_long_runs() {
    let mut times = Vec::new();
    let config = SimConfig {
        consumers: 20,
        groups: 2,
        duration_ms: 100_000,
        ..small(16)
    };
    run(&config, |p| times.push(p.elapsed_ms)).unwrap();
    let expected: Vec<u64> = (1..=20).map(|i| i * 5_000).collect();
    assert_eq!(times, expected, "one line every 5 s for a 100 s run");
}

#[test]
fn the_recording_adds_up_to_the_summary() {
    let config = SimConfig {
        duration_ms: 2_500,
        ..small(15)
    };
    let (s, r) = run_recorded(&config, |_| {}).unwrap();
    assert_eq!(s, run_quietly(&config), "recording changes nothing");
    let times: Vec<u64> = r.samples.iter().map(|x| x.t_ms).collect();
    assert_eq!(times, [0, 1_000, 2_000, 2_500]);
    assert_eq!(r.samples[0].alive, config.consumers);
    assert_eq!(r.samples.last().unwrap().alive, s.alive_at_end);
    let heartbeats: u64 = r.samples.iter().map(|x| x.heartbeats).sum();
    assert_eq!(heartbeats, s.heartbeats);
    let evictions: u64 = r.samples.iter().map(|x| x.evictions).sum();
    assert_eq!(evictions, (s.detected_failures + s.false_evictions) as u64);
    assert_eq!(r.detection_delays_ms.len(), s.detected_failures);
    assert!(r.detection_delays_ms.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(
        r.detection_delays_ms.last().copied(),
        s.detection_delay_max_ms
    );
    assert_eq!(r.heartbeats_per_s().len(), 3);
}

#[test]
fn json_has_every_field_the_issue_asks_for() {
    let json = run_quietly(&small(14)).to_json();
    assert!(json.starts_with('{') && json.ends_with('}') && !json.contains('\n'));
    for field in [
        "consumers",
        "injected_crashes",
        "injected_stalls",
        "detected_failures",
        "false_evictions",
        "detection_delay_p50_ms",
        "detection_delay_p99_ms",
        "detection_delay_max_ms",
        "rebalances",
        "heartbeats",
        "heartbeats_per_s",
        "late_heartbeats",
        "heartbeat_lag_max_ms",
        "alive_at_end",
        "watched_at_end",
        "delayed_at_end",
    ] {
        assert!(
            json.contains(&format!("\"{field}\":")),
            "{field} missing from {json}"
        );
    }
}

#[test]
fn invalid_configurations_are_errors_not_panics() {
    for config in [
        SimConfig {
            consumers: 0,
            ..small(1)
        },
        SimConfig {
            groups: 0,
            ..small(1)
        },
        SimConfig {
            session_timeout_ms: 100,
            ..small(1)
        },
        SimConfig {
            crash_rate: -0.1,
            ..small(1)
        },
        SimConfig {
            stall_rate: 2.0,
            ..small(1)
        },
        SimConfig {
            duration_ms: 500,
            ..small(1)
        },
    ] {
        let err = run(&config, |_| {}).unwrap_err();
        assert!(err.to_string().starts_with("--"), "{err}");
    }
}

#[test]
fn a_short_real_time_run_detects_through_the_reaper() {
    // Real clock and reaper; a wide slack between heartbeat gaps and the
    // session timeout keeps a loaded machine from causing false evictions.
    let config = SimConfig {
        consumers: 200,
        groups: 8,
        heartbeat_interval_ms: 50,
        session_timeout_ms: 400,
        crash_rate: 0.05,
        stall_rate: 0.05,
        duration_ms: 1_000,
        seed: 15,
        virtual_time: false,
        handler_threads: 2,
    };
    let s = run_quietly(&config);
    assert_invariants(&s);
}
