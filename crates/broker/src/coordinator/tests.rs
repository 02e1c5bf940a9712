//! Kafka's GroupCoordinatorTest heartbeat scenarios, on a manual clock.
use super::*;

fn setup(session_ms: u64) -> (ManualClock, GroupCoordinator, GroupId, MemberId) {
    let clock = ManualClock::new();
    let coordinator = GroupCoordinator::with_manual_clock(&clock).unwrap();
    let group = GroupId::new("group");
    let member = MemberId::new("member-1");
    let joined = coordinator
        .join_group(&group, &member, Duration::from_millis(session_ms))
        .unwrap();
    assert_eq!(
        joined,
        JoinResult {
            generation: 1,
            members: 1
        }
    );
    (clock, coordinator, group, member)
}

fn advance(clock: &ManualClock, coordinator: &GroupCoordinator, ms: u64) {
    for _ in 0..ms {
        clock.advance_ms(1);
        while coordinator.advance_clock(Duration::ZERO) {}
    }
}

fn counts(coordinator: &GroupCoordinator) -> (usize, usize, usize) {
    let p = coordinator.purgatory();
    (coordinator.alive_members(), p.watched(), p.delayed())
}

#[test]
fn session_timeout_evicts() {
    // testSessionTimeout: advance session + 100, heartbeat is refused.
    let (clock, coordinator, group, member) = setup(500);
    advance(&clock, &coordinator, 600);
    assert_eq!(
        coordinator.heartbeat(&group, &member),
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(counts(&coordinator), (0, 0, 0));
}

#[test]
fn heartbeat_maintains_session() {
    // testHeartbeatMaintainsSession: session 1000, +500 hb, +600 hb.
    let (clock, coordinator, group, member) = setup(1000);
    advance(&clock, &coordinator, 500);
    assert_eq!(coordinator.heartbeat(&group, &member), Ok(()));
    advance(&clock, &coordinator, 600);
    assert_eq!(coordinator.heartbeat(&group, &member), Ok(()));
    assert_eq!(counts(&coordinator), (1, 1, 1));
    assert_eq!(coordinator.eviction_count(), 0);
    assert_eq!(coordinator.heartbeats_handled(), 2);
}

#[test]
fn leave_completes_the_expectation_without_eviction() {
    // testCompleteHeartbeatWithMemberAlreadyRemoved.
    let (clock, coordinator, group, member) = setup(1000);
    assert_eq!(coordinator.leave_group(&group, &member), Ok(()));
    assert_eq!(counts(&coordinator), (0, 0, 0));
    advance(&clock, &coordinator, 2000);
    assert_eq!(coordinator.eviction_count(), 0);
    assert_eq!(coordinator.group(&group).unwrap().generation(), 2);
    assert_eq!(
        coordinator.leave_group(&group, &member),
        Err(ErrorCode::UnknownMemberId)
    );
}

#[test]
fn heartbeat_in_a_kept_group_is_a_heartbeat() {
    let (clock, coordinator, group, member) = setup(1000);
    let kept = coordinator.group(&group).unwrap();
    advance(&clock, &coordinator, 600);
    assert_eq!(coordinator.heartbeat_in(&kept, &member), Ok(()));
    advance(&clock, &coordinator, 600);
    assert_eq!(
        counts(&coordinator),
        (1, 1, 1),
        "the heartbeat renewed the session"
    );
    assert_eq!(coordinator.eviction_count(), 0);
    assert_eq!(
        coordinator.heartbeat_in(&kept, &"stranger".into()),
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(coordinator.heartbeats_handled(), 2);
    // A group of another coordinator (even with the same id) is refused
    // and arms nothing here.
    let other = GroupCoordinator::with_manual_clock(&clock).unwrap();
    let foreign = other.add_group(group.clone());
    assert_eq!(
        coordinator.heartbeat_in(&foreign, &member),
        Err(ErrorCode::GroupIdNotFound)
    );
    assert_eq!(
        coordinator.heartbeat_in(&Arc::new(Group::new(group)), &member),
        Err(ErrorCode::GroupIdNotFound)
    );
    assert_eq!(counts(&coordinator), (1, 1, 1));
    assert_eq!(other.purgatory().watched(), 0);
}

#[test]
fn unknown_group_and_bad_session() {
    let clock = ManualClock::new();
    let coordinator = GroupCoordinator::with_manual_clock(&clock).unwrap();
    // Kafka's answer for a group it does not know: the client rejoins.
    assert_eq!(
        coordinator.heartbeat(&"nope".into(), &"m".into()),
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        coordinator.leave_group(&"nope".into(), &"m".into()),
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        coordinator.join_group(&"g".into(), &"m".into(), Duration::ZERO),
        Err(ErrorCode::InvalidSessionTimeout)
    );
}

#[test]
fn session_timeouts_outside_the_bounds_are_refused() {
    let clock = ManualClock::new();
    let coordinator = GroupCoordinator::with_manual_clock(&clock).unwrap();
    let (group, member) = (GroupId::new("g"), MemberId::new("m"));
    assert_eq!(
        coordinator.session_timeouts(),
        (Duration::from_millis(1), Duration::from_secs(1800))
    );
    for refused in [
        Duration::from_micros(999),
        Duration::from_secs(1800) + Duration::from_nanos(1),
        Duration::MAX,
    ] {
        assert_eq!(
            coordinator.join_group(&group, &member, refused),
            Err(ErrorCode::InvalidSessionTimeout),
            "{refused:?}"
        );
    }
    assert_eq!(coordinator.alive_members(), 0);
    assert_eq!(coordinator.purgatory().delayed(), 0);
    assert!(coordinator
        .join_group(&group, &member, Duration::from_secs(1800))
        .is_ok());

    let (min, max) = (Duration::from_secs(6), Duration::from_secs(60));
    assert_eq!(
        coordinator.set_session_timeouts(Duration::ZERO, max),
        Err(ErrorCode::InvalidConfig)
    );
    assert_eq!(
        coordinator.set_session_timeouts(max, min),
        Err(ErrorCode::InvalidConfig)
    );
    assert_eq!(
        coordinator.session_timeouts(),
        (Duration::from_millis(1), Duration::from_secs(1800)),
        "a refused setting changes nothing"
    );
    coordinator.set_session_timeouts(min, max).unwrap();
    let late = MemberId::new("late");
    assert_eq!(
        coordinator.join_group(&group, &late, Duration::from_secs(5)),
        Err(ErrorCode::InvalidSessionTimeout)
    );
    assert!(coordinator.join_group(&group, &late, max).is_ok());
    // The member that joined under the old bounds keeps its session.
    assert_eq!(coordinator.heartbeat(&group, &member), Ok(()));
    let evicted_by = |ms| {
        clock.set_ms(ms);
        while coordinator.advance_clock(Duration::ZERO) {}
        let evicted: Vec<_> = coordinator
            .take_evictions()
            .into_iter()
            .map(|e| e.member)
            .collect();
        evicted
    };
    assert_eq!(evicted_by(60_000), [late]);
    assert_eq!(evicted_by(1_799_999), []);
    assert_eq!(evicted_by(1_800_000), [member]);
}

/// A leave that waited for the group's lock while the coordinator shut
/// down is refused, as one made after the shutdown is: the member stays.
#[test]
fn a_leave_waiting_for_the_group_lock_through_a_shutdown_is_refused() {
    let (_clock, coordinator, group, member) = setup(500);
    let kept = coordinator.group(&group).unwrap();
    let held = kept.lock();
    let started = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let leave = s.spawn(|| {
            started.wait();
            coordinator.leave_group(&group, &member)
        });
        started.wait();
        let shutdown = s.spawn(|| coordinator.shutdown());
        // The shutdown marks itself, then waits for the expectation's lock,
        // which is the group's.
        while !coordinator.purgatory().is_shut_down() {
            std::thread::yield_now();
        }
        drop(held);
        assert_eq!(
            leave.join().unwrap(),
            Err(ErrorCode::CoordinatorNotAvailable)
        );
        assert_eq!(shutdown.join().unwrap(), 1, "the expectation was pending");
    });
    assert_eq!((kept.member_count(), kept.generation()), (1, 1));
}

#[test]
fn after_shutdown_joins_and_heartbeats_are_refused() {
    let (clock, coordinator, group, member) = setup(500);
    assert_eq!(coordinator.shutdown(), 1);
    let late = MemberId::new("late");
    let session = Duration::from_millis(500);
    assert_eq!(
        coordinator.join_group(&group, &late, session),
        Err(ErrorCode::CoordinatorNotAvailable)
    );
    assert_eq!(
        coordinator.join_group(&GroupId::new("new"), &late, session),
        Err(ErrorCode::CoordinatorNotAvailable)
    );
    assert_eq!(
        coordinator.heartbeat(&group, &member),
        Err(ErrorCode::CoordinatorNotAvailable)
    );
    assert_eq!(
        coordinator.leave_group(&group, &member),
        Err(ErrorCode::CoordinatorNotAvailable)
    );
    let g = coordinator.group(&group).unwrap();
    assert_eq!(
        (g.member_count(), g.generation()),
        (1, 1),
        "nothing changed"
    );
    advance(&clock, &coordinator, 1_000);
    assert_eq!(coordinator.eviction_count(), 0);
}

/// `restart_session` restarts a member's session timer from now, as
/// Kafka's `onCompleteJoin` does for each member, without counting a
/// heartbeat: a member that joined early is not evicted for the time the
/// others took to join.
#[test]
fn restarting_a_session_moves_its_deadline_without_a_heartbeat() {
    let (clock, coordinator, group, first) = setup(100);
    advance(&clock, &coordinator, 80);
    let last = MemberId::new("member-2");
    coordinator
        .join_group(&group, &last, Duration::from_millis(100))
        .unwrap();
    let formed = coordinator.group(&group).unwrap();
    for member in [&first, &last] {
        assert_eq!(coordinator.restart_session(&formed, member), Ok(()));
    }
    assert_eq!(counts(&coordinator), (2, 2, 2), "one expectation each");
    advance(&clock, &coordinator, 99);
    assert_eq!(coordinator.eviction_count(), 0, "evicted from its join");
    assert_eq!(coordinator.heartbeat(&group, &first), Ok(()));
    advance(&clock, &coordinator, 1);
    assert_eq!(coordinator.eviction_count(), 1, "the other's session");
    assert_eq!(coordinator.heartbeats_handled(), 1);
    assert_eq!(
        coordinator.restart_session(&formed, &last),
        Err(ErrorCode::UnknownMemberId)
    );
    let other = GroupCoordinator::with_manual_clock(&clock).unwrap();
    assert_eq!(
        other.restart_session(&formed, &first),
        Err(ErrorCode::GroupIdNotFound)
    );
    coordinator.shutdown();
    assert_eq!(
        coordinator.restart_session(&formed, &first),
        Err(ErrorCode::CoordinatorNotAvailable)
    );
}
