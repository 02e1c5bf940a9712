//! `DelayedHeartbeat`: the coordinator's expectation of a member's next heartbeat.
//!
//! Kafka's session timer. Every heartbeat (and every join) of a member
//! completes the member's pending expectation and watches a new one under the
//! member's [`MemberKey`](crate::MemberKey), due one session timeout later.
//! If the next heartbeat comes in time, it completes that expectation through
//! `check_and_complete`; if not, the purgatory expires it and the coordinator
//! removes the member from its group (a rebalance), logging at info
//! `Member <member> in group <group> has failed, removing it from the group`.
//!
//! Invariants:
//! - the operation lock is the group lock (as in Kafka), so `try_complete`, the
//!   expiration and the coordinator's heartbeat handling of one group are
//!   serialised;
//! - `try_complete` is true once the expectation no longer matters: the member
//!   left or was removed, or sent a newer heartbeat (its token changed);
//! - the expiration evicts the member only if it is still in the group with the
//!   very token this expectation was created for, so a heartbeat that wins the
//!   race against the timer (even at the deadline's millisecond) keeps the
//!   member alive, and a member is never evicted twice.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use purgatory::DelayedOperation;

use super::CoordinatorInner;
use crate::group::{Group, MemberId};

/// A pending heartbeat expectation for one member, keyed by its `MemberKey`.
///
/// Built by the [`GroupCoordinator`](crate::GroupCoordinator); user code only
/// sees it through the purgatory's counts and [`DelayedHeartbeat::member`].
pub struct DelayedHeartbeat {
    coordinator: Weak<CoordinatorInner>,
    group: Arc<Group>,
    member: MemberId,
    token: u64,
    session_timeout: Duration,
}

impl DelayedHeartbeat {
    pub(crate) fn new(
        coordinator: Weak<CoordinatorInner>,
        group: Arc<Group>,
        member: MemberId,
        token: u64,
        session_timeout: Duration,
    ) -> Self {
        DelayedHeartbeat {
            coordinator,
            group,
            member,
            token,
            session_timeout,
        }
    }

    /// The member this expectation is for.
    pub fn member(&self) -> &MemberId {
        &self.member
    }

    /// The member's group.
    pub fn group(&self) -> &Arc<Group> {
        &self.group
    }
}

impl DelayedOperation for DelayedHeartbeat {
    fn timeout(&self) -> Duration {
        self.session_timeout
    }

    fn try_complete(&self) -> bool {
        // Kafka's tryCompleteHeartbeat: nothing left to wait for once the
        // member is gone or has heartbeated since this expectation was made.
        self.group
            .with_state(|state| match state.members.get(&self.member) {
                None => true,
                Some(member) => member.heartbeat_token != self.token,
            })
    }

    fn on_complete(&self) {
        // Kafka's onCompleteHeartbeat does nothing either.
    }

    fn on_expiration(&self) {
        // If the coordinator is gone, so is everything it would update.
        if let Some(coordinator) = self.coordinator.upgrade() {
            coordinator.on_expire_heartbeat(&self.group, &self.member, self.token);
        }
    }
}

impl fmt::Debug for DelayedHeartbeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedHeartbeat")
            .field("group", self.group.id())
            .field("member", &self.member)
            .field("token", &self.token)
            .field("session_timeout", &self.session_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! DelayedHeartbeat on a manual clock: completion by heartbeat, by
    //! timeout, the race of the two, and what the eviction records.
    use std::time::Duration;

    use timer::ManualClock;

    use crate::coordinator::{Eviction, GroupCoordinator};
    use crate::error::ErrorCode;
    use crate::group::{GroupId, MemberId};

    const SESSION_MS: u64 = 100;

    struct Fixture {
        clock: ManualClock,
        coordinator: GroupCoordinator,
        group: GroupId,
        member: MemberId,
    }

    impl Fixture {
        fn new() -> Self {
            let clock = ManualClock::new();
            let coordinator = GroupCoordinator::with_manual_clock(&clock).unwrap();
            let group = GroupId::new("g");
            let member = MemberId::new("m");
            coordinator
                .join_group(&group, &member, Duration::from_millis(SESSION_MS))
                .unwrap();
            Fixture {
                clock,
                coordinator,
                group,
                member,
            }
        }

        /// Moves virtual time to `ms` and expires what is due.
        fn at(&self, ms: u64) {
            self.clock.set_ms(ms);
            while self.coordinator.advance_clock(Duration::ZERO) {}
        }

        fn heartbeat(&self) -> Result<(), ErrorCode> {
            self.coordinator.heartbeat(&self.group, &self.member)
        }

        fn gauges(&self) -> (usize, usize, usize) {
            let p = self.coordinator.purgatory();
            (self.coordinator.alive_members(), p.watched(), p.delayed())
        }
    }

    #[test]
    fn completed_by_heartbeat_and_rearmed() {
        let f = Fixture::new();
        assert_eq!(f.gauges(), (1, 1, 1));
        for t in [40, 80, 120, 160] {
            f.at(t);
            assert_eq!(f.heartbeat(), Ok(()));
            // The old expectation completed, exactly one new one is pending.
            assert_eq!(f.gauges(), (1, 1, 1));
        }
        // Well past the first deadlines (100, 140, ...): still alive.
        f.at(259);
        assert_eq!(f.coordinator.eviction_count(), 0);
        let member = f.coordinator.group(&f.group).unwrap().member(&f.member);
        assert_eq!(member.unwrap().last_heartbeat_ms, 160);
    }

    #[test]
    fn completed_by_timeout_evicts_and_rebalances() {
        let f = Fixture::new();
        f.at(30);
        f.heartbeat().unwrap();
        f.at(30 + SESSION_MS - 1);
        assert_eq!(f.gauges(), (1, 1, 1), "not yet due");
        f.at(30 + SESSION_MS + 1);
        assert_eq!(f.gauges(), (0, 0, 0), "evicted, nothing left watched");
        let evictions = f.coordinator.take_evictions();
        assert_eq!(evictions.len(), 1);
        let e: &Eviction = &evictions[0];
        assert_eq!(e.group, f.group);
        assert_eq!(e.member, f.member);
        assert_eq!(e.last_heartbeat_ms, 30);
        assert!(
            (30 + SESSION_MS..=30 + SESSION_MS + 1).contains(&e.evicted_at_ms),
            "{e:?}"
        );
        assert!(e.detection_delay_ms() >= SESSION_MS);
        assert_eq!(e.generation, 2, "join made 1, the eviction 2");
        assert_eq!(f.heartbeat(), Err(ErrorCode::UnknownMemberId));
        // The member rejoins (under a new id, as a dynamic member would).
        let rejoined = MemberId::new("m-2");
        let joined = f
            .coordinator
            .join_group(&f.group, &rejoined, Duration::from_millis(SESSION_MS))
            .unwrap();
        assert_eq!((joined.generation, joined.members), (3, 1));
        assert_eq!(f.gauges(), (1, 1, 1));
    }

    #[test]
    fn race_heartbeat_first_at_the_deadline_keeps_the_member() {
        let f = Fixture::new();
        // The heartbeat lands in the deadline's millisecond before the timer
        // runs: the expiration finds a newer token and does nothing.
        f.clock.set_ms(SESSION_MS);
        assert_eq!(f.heartbeat(), Ok(()));
        f.at(SESSION_MS + 1);
        assert_eq!(f.coordinator.eviction_count(), 0);
        assert_eq!(f.gauges(), (1, 1, 1));
    }

    #[test]
    fn race_timer_first_at_the_deadline_evicts_once() {
        let f = Fixture::new();
        f.at(SESSION_MS + 1);
        assert_eq!(f.coordinator.eviction_count(), 1);
        // The late heartbeat is refused and does not arm anything.
        assert_eq!(f.heartbeat(), Err(ErrorCode::UnknownMemberId));
        assert_eq!(f.gauges(), (0, 0, 0));
        f.at(10 * SESSION_MS);
        assert_eq!(f.coordinator.eviction_count(), 1, "never evicted twice");
    }

    #[test]
    fn race_on_two_threads_is_consistent() {
        for round in 0..200 {
            let f = Fixture::new();
            f.clock.set_ms(SESSION_MS + 1);
            let (hb, ()) = std::thread::scope(|s| {
                let hb = s.spawn(|| f.heartbeat());
                let expire = s.spawn(|| while f.coordinator.advance_clock(Duration::ZERO) {});
                (hb.join().unwrap(), expire.join().unwrap())
            });
            let evicted = f.coordinator.eviction_count();
            match hb {
                Ok(()) => {
                    assert_eq!(evicted, 0, "round {round}");
                    assert_eq!(f.gauges(), (1, 1, 1), "round {round}");
                }
                Err(code) => {
                    assert_eq!(code, ErrorCode::UnknownMemberId, "round {round}");
                    assert_eq!(evicted, 1, "round {round}");
                    assert_eq!(f.gauges(), (0, 0, 0), "round {round}");
                }
            }
        }
    }
}
