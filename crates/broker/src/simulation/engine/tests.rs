//! The engine's tests: runs in virtual time, and an engine driven behind
//! its schedule by hand.

use super::*;

fn small(seed: u64) -> SimConfig {
    SimConfig::small_for_tests(seed)
}

/// A small run that injects no failures.
fn healthy(seed: u64) -> SimConfig {
    SimConfig {
        crash_rate: 0.0,
        stall_rate: 0.0,
        ..small(seed)
    }
}

/// An engine in virtual time whose groups have formed, and its clock.
fn started(config: &SimConfig) -> (ManualClock, Engine<'_>) {
    let clock = ManualClock::new();
    let coordinator = GroupCoordinator::with_manual_clock(&clock).unwrap();
    let mut engine = Engine::new(config, coordinator, Time::Virtual(clock.clone()));
    engine.start();
    (clock, engine)
}

#[test]
fn a_small_virtual_run_detects_everything() {
    let mut lines = 0;
    let summary = run(&small(7), |_| lines += 1).unwrap();
    assert_eq!(lines, 2, "one progress line per simulated second");
    assert_eq!(summary.detected_failures, 20);
    assert_eq!(summary.false_evictions, 0);
    assert_eq!(summary.alive_at_end, summary.watched_at_end);
    assert_eq!(summary.alive_at_end, summary.delayed_at_end);
}

#[test]
fn an_engine_far_behind_rejoins_each_consumer_once() {
    // Every member expires, then the engine handles 2 s of heartbeats at
    // once (as a real-time engine that fell behind does): each consumer
    // is refused once, rejoins once, and is then a member exactly once.
    let config = healthy(3);
    let (clock, mut engine) = started(&config);
    clock.set_ms(2_000);
    while engine.shared.coordinator.advance_clock(Duration::ZERO) {}
    assert_eq!(engine.shared.coordinator.alive_members(), 0);
    engine.handle_due(2_000);
    assert_eq!(engine.rejoins, config.consumers as u64);
    assert_eq!(engine.shared.coordinator.alive_members(), config.consumers);
}

#[test]
fn an_engine_running_behind_counts_its_late_heartbeats() {
    // At 2 s the engine sends the heartbeats due by 1,949 ms (as a
    // real-time engine that fell behind does): every one is late, the
    // earliest by the most. Those due in the last 50 ms are not late.
    let config = healthy(5);
    let (clock, mut engine) = started(&config);
    let first = engine.events.next_due().unwrap();
    clock.set_ms(2_000);
    engine.handle_due(1_949);
    let sent_behind = engine.shared.coordinator.heartbeats_handled();
    engine.handle_due(2_000);
    assert!(engine.shared.coordinator.heartbeats_handled() > sent_behind);
    let summary = engine.summary();
    assert_eq!(summary.late_heartbeats, sent_behind);
    assert_eq!(summary.heartbeat_lag_max_ms, 2_000 - first);
    assert!(summary.to_string().contains("sent late"), "{summary}");
}

#[test]
fn an_engine_on_time_sends_nothing_late() {
    let summary = run(&small(7), |_| {}).unwrap();
    assert_eq!(
        (summary.late_heartbeats, summary.heartbeat_lag_max_ms),
        (0, 0)
    );
    assert!(!summary.to_string().contains("sent late"), "{summary}");
}

#[test]
fn groups_form_on_the_handlers_alike_for_any_thread_count() {
    // Each group's joins run on one handler in consumer order: every
    // member is in its group with one pending expectation, and each
    // group's generation and tokens are those of the joins in order.
    let tables = |threads: usize| {
        let config = SimConfig {
            handler_threads: threads,
            ..small(9)
        };
        let (_clock, engine) = started(&config);
        let c = &engine.shared.coordinator;
        assert_eq!(c.alive_members(), config.consumers);
        assert_eq!(c.purgatory().watched(), config.consumers);
        assert_eq!(c.purgatory().delayed(), config.consumers);
        assert_eq!(engine.generations_at_start, config.consumers as u64);
        let mut groups: Vec<_> = c
            .groups()
            .iter()
            .map(|g| {
                let mut tokens: Vec<_> = g
                    .member_ids()
                    .iter()
                    .map(|m| (m.to_string(), g.member(m).unwrap().heartbeat_token))
                    .collect();
                tokens.sort();
                (g.id().to_string(), g.generation(), tokens)
            })
            .collect();
        groups.sort();
        groups
    };
    let one = tables(1);
    assert_eq!(one.len(), 10);
    assert_eq!(tables(3), one);
}

#[test]
fn member_ids_lead_back_to_their_consumer() {
    for (index, incarnation) in [(0, 0), (17, 3), (199, 1), (10, 4_000_000_000)] {
        let id = Consumer::member_id(index, incarnation);
        assert_eq!(id.as_str(), format!("consumer-{index}-{incarnation}"));
        assert_eq!(Consumer::index_of(&id, 200), Some(index));
    }
    for other in [
        "consumer-200-0",
        "consumer-1",
        "consumer-x-0",
        "member-1-0",
        "consumer-1-x",
    ] {
        assert_eq!(
            Consumer::index_of(&MemberId::new(other), 200),
            None,
            "{other}"
        );
    }
}

#[test]
fn invalid_configs_are_errors() {
    let config = SimConfig {
        consumers: 0,
        ..small(1)
    };
    assert!(matches!(run(&config, |_| {}), Err(SimError::Config(_))));
}

#[test]
fn the_summary_counts_the_threads_that_handled_heartbeats() {
    // A few heartbeats per millisecond: every run is too small to share,
    // so the engine's thread handles them all, whatever the pool's size.
    let config = SimConfig {
        handler_threads: 64,
        ..healthy(4)
    };
    let summary = run(&config, |_| {}).unwrap();
    assert!(summary.heartbeats > 0);
    assert_eq!(summary.handler_threads_used, 1);
    assert!(
        summary
            .to_string()
            .contains("), handled by 1 request-handler thread\n"),
        "{summary}"
    );
    assert!(summary.to_json().contains("\"handler_threads\":64,"));
    assert!(summary.to_json().ends_with(",\"handler_threads_used\":1}"));
}

/// Runs `config` in virtual time, stepping through every millisecond or
/// jumping over idle ones: its summary, recording and status lines (without
/// their wall times).
fn run_engine(config: &SimConfig, step_every_ms: bool) -> (Summary, Recording, Vec<Progress>) {
    let (_clock, mut engine) = started(config);
    engine.step_every_ms = step_every_ms;
    let mut lines = Vec::new();
    engine.run_loop(|p| {
        lines.push(Progress {
            wall_ms: 0,
            eta_ms: None,
            ..*p
        })
    });
    let summary = engine.summary();
    (summary, engine.recording, lines)
}

#[test]
fn jumping_over_idle_milliseconds_changes_nothing() {
    let sparse = |seed| SimConfig {
        consumers: 3,
        groups: 1,
        heartbeat_interval_ms: 1_000,
        session_timeout_ms: 3_000,
        crash_rate: 0.34,
        stall_rate: 0.34,
        duration_ms: 60_000,
        ..small(seed)
    };
    // A session barely longer than the interval: members expire between
    // heartbeats (false evictions), the timing a jump must not move.
    let tight = |seed| SimConfig {
        consumers: 4,
        groups: 2,
        heartbeat_interval_ms: 100,
        session_timeout_ms: 105,
        crash_rate: 0.0,
        stall_rate: 0.0,
        duration_ms: 5_000,
        ..small(seed)
    };
    let mut configs: Vec<SimConfig> = (1..=3).map(small).collect();
    configs.extend((1..=4).map(sparse));
    configs.extend((1..=2).map(tight));
    for config in &configs {
        let jumped = run_engine(config, false);
        let stepped = run_engine(config, true);
        assert_eq!(jumped, stepped, "{config:?}");
    }
    // The checks above see failures, detections and false evictions.
    let (s, ..) = run_engine(&sparse(1), false);
    assert!(s.detected_failures > 0, "{s:?}");
    let (s, ..) = run_engine(&tight(1), false);
    assert!(s.false_evictions > 0, "{s:?}");
}

/// A manual clock whose every reading also moves it on by `step_ns` (set
/// while the groups form, so that the joins take time as in a real run).
#[derive(Debug)]
struct Busy {
    time: ManualClock,
    step_ns: std::sync::atomic::AtomicU64,
    spent_ns: std::sync::atomic::AtomicU64,
}

impl timer::Clock for Busy {
    fn now_nanos(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let step = self.step_ns.load(Relaxed);
        self.time.now_nanos() + self.spent_ns.fetch_add(step, Relaxed) + step
    }

    fn subscribe(&self, on_move: std::sync::Weak<timer::OnMove>) {
        self.time.subscribe(on_move);
    }
}

/// In real time the groups take a while to form, and simulated time starts
/// once they have: a healthy run must still evict no one, though the first
/// members joined longer before the start than the session timeout leaves
/// beyond the heartbeat interval.
#[test]
fn members_that_joined_long_before_a_real_time_start_are_not_evicted() {
    use std::sync::atomic::Ordering::Relaxed;
    let config = SimConfig {
        consumers: 2_000,
        groups: 20,
        heartbeat_interval_ms: 200,
        session_timeout_ms: 260,
        duration_ms: 1_000,
        virtual_time: false,
        ..healthy(3)
    };
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
    let busy = Arc::new(Busy {
        time: ManualClock::new(),
        step_ns: 20_000.into(),
        spent_ns: 0.into(),
    });
    let clock: Arc<dyn timer::Clock> = busy.clone();
    let purgatory = purgatory::Purgatory::builder("busy")
        .hasher(crate::id::IdHasher)
        .shared_clock(clock)
        .reaper(false)
        .build()
        .unwrap();
    let coordinator = GroupCoordinator::new(purgatory);
    let mut engine = Engine::new(&config, coordinator, Time::Real { start_ms: 0 });
    engine.start();
    busy.step_ns.store(0, Relaxed);
    // As `run_recorded` does: the run starts once the groups have formed.
    let start_ms = engine.shared.coordinator.now_ms();
    assert!(
        start_ms > 2 * (config.session_timeout_ms - config.heartbeat_interval_ms),
        "the groups formed in {start_ms} ms"
    );
    engine.time = Time::Real { start_ms };
    for t in 0..=config.duration_ms {
        busy.time.set_ms(t);
        while engine.shared.coordinator.advance_clock(Duration::ZERO) {}
        engine.handle_due(t);
    }
    let summary = engine.summary();
    assert_eq!(summary.false_evictions, 0);
    assert_eq!(summary.alive_at_end, config.consumers);
}
