//! The group coordinator: joins, heartbeats, leaves, and failure detection.
//!
//! It owns the groups and the `Heartbeat` purgatory of [`DelayedHeartbeat`]s,
//! and follows Kafka's classic `GroupCoordinator`:
//! - `join_group` adds (or replaces) a member, bumps the generation and arms
//!   its first heartbeat expectation;
//! - `heartbeat` is Kafka's `completeAndScheduleNextHeartbeatExpiration`: under
//!   the group lock, record the heartbeat, `try_complete_else_watch` the next
//!   expectation, due a session timeout later, and `check_and_complete` the
//!   member's key (completing the pending one; Kafka completes first, which
//!   under the group lock means the same);
//! - `leave_group` removes the member and completes its expectation;
//! - a failed member is detected **only** when the purgatory expires its
//!   expectation (Kafka's `onExpireHeartbeat`): the member is removed, the
//!   generation bumped, the event logged at info and recorded as an
//!   [`Eviction`].
//!
//! Invariants: every member present in a group has exactly one pending
//! heartbeat expectation (so `watched() == delayed() == alive_members()`
//! whenever no heartbeat is in flight), and a departed member has none. The
//! coordinator never holds its group map's lock across a purgatory call.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use log::{debug, info};
use parking_lot::{Mutex, RwLock};
use purgatory::{Operation, Purgatory, PurgatoryError};
use timer::{Clock, ManualClock};

use crate::counter::StripedCounter;
use crate::error::ErrorCode;
use crate::group::{FailureSink, Group, Member};
use crate::id::{GroupId, IdHasher, MemberId, MemberKey};

pub mod heartbeat;

pub use heartbeat::DelayedHeartbeat;

/// Shards of the group map: enough that request handlers on a few cores
/// seldom take the same shard's lock at once (a power of two, as DashMap
/// requires).
const GROUP_SHARDS: usize = 64;

/// The purgatory type the coordinator uses; its keys hash with
/// [`IdHasher`] (see [`crate::id`]).
pub type HeartbeatPurgatory = Purgatory<MemberKey, DelayedHeartbeat, IdHasher>;

/// One member removed because its heartbeat expectation expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The member's group.
    pub group: GroupId,
    /// The member removed.
    pub member: MemberId,
    /// When the coordinator last heard from the member (ms, coordinator clock).
    pub last_heartbeat_ms: u64,
    /// When the expiration removed it (ms, coordinator clock).
    pub evicted_at_ms: u64,
    /// The group's generation after the removal.
    pub generation: u64,
}

impl Eviction {
    /// Detection delay: eviction time minus the member's last heartbeat.
    pub fn detection_delay_ms(&self) -> u64 {
        self.evicted_at_ms.saturating_sub(self.last_heartbeat_ms)
    }
}

/// The answer to a successful join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinResult {
    /// The group's generation after this join.
    pub generation: u64,
    /// The group's member count after this join.
    pub members: usize,
}

/// The group coordinator (see the module docs). Cheap to share by reference;
/// all methods take `&self` and are thread-safe.
pub struct GroupCoordinator {
    inner: Arc<CoordinatorInner>,
}

/// The coordinator's state, shared with its heartbeat operations through a
/// `Weak` (so pending operations never keep the coordinator alive).
pub(crate) struct CoordinatorInner {
    groups: DashMap<GroupId, Arc<Group>, IdHasher>,
    purgatory: HeartbeatPurgatory,
    clock: Arc<dyn Clock>,
    heartbeats: StripedCounter,
    evictions: Mutex<Vec<Eviction>>,
    eviction_count: AtomicU64,
    /// The session timeouts a join may ask for, both ends included.
    session_timeouts: RwLock<(Duration, Duration)>,
}

impl GroupCoordinator {
    /// The name Kafka gives the heartbeat purgatory.
    pub const PURGATORY_NAME: &'static str = "Heartbeat";

    /// The shortest session timeout a join may ask for unless
    /// [`set_session_timeouts`](Self::set_session_timeouts) says otherwise:
    /// 1 ms, the default timer tick. Kafka's `group.min.session.timeout.ms` defaults to
    /// 6 s, for clients on real networks; the model's tests and simulations
    /// run sessions of milliseconds.
    pub const DEFAULT_MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(1);

    /// The longest session timeout a join may ask for unless
    /// [`set_session_timeouts`](Self::set_session_timeouts) says otherwise:
    /// Kafka's `group.max.session.timeout.ms` default, 30 minutes.
    pub const DEFAULT_MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(30 * 60);

    /// A coordinator on the given heartbeat purgatory; its clock is the
    /// purgatory's clock.
    pub fn new(purgatory: HeartbeatPurgatory) -> Self {
        let clock = Arc::clone(purgatory.clock());
        GroupCoordinator {
            inner: Arc::new(CoordinatorInner {
                groups: DashMap::with_hasher_and_shard_amount(IdHasher, GROUP_SHARDS),
                purgatory,
                clock,
                heartbeats: StripedCounter::default(),
                evictions: Mutex::new(Vec::new()),
                eviction_count: AtomicU64::new(0),
                session_timeouts: RwLock::new((
                    Self::DEFAULT_MIN_SESSION_TIMEOUT,
                    Self::DEFAULT_MAX_SESSION_TIMEOUT,
                )),
            }),
        }
    }

    /// A coordinator in virtual time: a purgatory on `clock` with no reaper,
    /// driven by [`GroupCoordinator::advance_clock`].
    pub fn with_manual_clock(clock: &ManualClock) -> Result<Self, PurgatoryError> {
        let purgatory = Purgatory::builder(Self::PURGATORY_NAME)
            .hasher(IdHasher)
            .clock(clock.clone())
            .reaper(false)
            .build()?;
        Ok(Self::new(purgatory))
    }

    /// A coordinator in real time: system clock, reaper running.
    pub fn with_system_clock() -> Result<Self, PurgatoryError> {
        let purgatory = Purgatory::builder(Self::PURGATORY_NAME)
            .hasher(IdHasher)
            .build()?;
        Ok(Self::new(purgatory))
    }

    /// Sets the session timeouts later joins may ask for, `min` and `max`
    /// included (Kafka's `group.min.session.timeout.ms` and
    /// `group.max.session.timeout.ms`); members already in a group keep
    /// theirs. `INVALID_CONFIG` if `min` is zero or above `max`, and then
    /// nothing changes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use broker::{ErrorCode, GroupCoordinator};
    /// use timer::ManualClock;
    ///
    /// let coordinator = GroupCoordinator::with_manual_clock(&ManualClock::new()).unwrap();
    /// let (min, max) = (Duration::from_secs(6), Duration::from_secs(1800));
    /// coordinator.set_session_timeouts(min, max).unwrap();
    /// assert_eq!(
    ///     coordinator.join_group(&"g".into(), &"m".into(), Duration::from_secs(1)),
    ///     Err(ErrorCode::InvalidSessionTimeout)
    /// );
    /// assert!(coordinator.join_group(&"g".into(), &"m".into(), min).is_ok());
    /// ```
    pub fn set_session_timeouts(&self, min: Duration, max: Duration) -> Result<(), ErrorCode> {
        if min.is_zero() || min > max {
            return Err(ErrorCode::InvalidConfig);
        }
        *self.inner.session_timeouts.write() = (min, max);
        Ok(())
    }

    /// The session timeouts joins may ask for: `(min, max)`, both included.
    pub fn session_timeouts(&self) -> (Duration, Duration) {
        *self.inner.session_timeouts.read()
    }

    /// The heartbeat purgatory (for its gauges).
    pub fn purgatory(&self) -> &HeartbeatPurgatory {
        &self.inner.purgatory
    }

    /// The coordinator's clock.
    pub fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    /// Expires the heartbeat expectations due by now (virtual time: call after
    /// moving the manual clock). Returns after their callbacks have run.
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        self.inner.purgatory.advance_clock(timeout)
    }

    /// The group `id`, created empty if it does not exist.
    pub fn add_group(&self, id: GroupId) -> Arc<Group> {
        if let Some(group) = self.group(&id) {
            return group;
        }
        Arc::clone(
            self.inner
                .groups
                .entry(id.clone())
                .or_insert_with(|| {
                    let sink: Weak<dyn FailureSink> = Arc::downgrade(&self.inner) as _;
                    Arc::new(Group::with_sink(id, sink))
                })
                .value(),
        )
    }

    /// The group `id`, if it exists.
    pub fn group(&self, id: &GroupId) -> Option<Arc<Group>> {
        self.inner.groups.get(id).map(|g| Arc::clone(g.value()))
    }

    /// Adds `member` to `group` (creating the group if needed), or replaces it
    /// if present; bumps the generation and arms its first heartbeat
    /// expectation, due `session_timeout` from now.
    /// `INVALID_SESSION_TIMEOUT` for a session timeout outside
    /// [`session_timeouts`](Self::session_timeouts). After
    /// [`shutdown`](Self::shutdown), `COORDINATOR_NOT_AVAILABLE`, and the
    /// member is not added (a group the join created stays, empty, as
    /// [`add_group`](Self::add_group) leaves it).
    pub fn join_group(
        &self,
        group: &GroupId,
        member: &MemberId,
        session_timeout: Duration,
    ) -> Result<JoinResult, ErrorCode> {
        self.inner.active()?;
        let (min, max) = self.session_timeouts();
        if !(min..=max).contains(&session_timeout) {
            return Err(ErrorCode::InvalidSessionTimeout);
        }
        let group = self.add_group(group.clone());
        let _guard = group.lock();
        let now = self.now_ms();
        let result = group.with_state(|state| {
            let token = state.next_token();
            let replaced = state.members.insert(
                member.clone(),
                Member {
                    id: member.clone(),
                    session_timeout,
                    joined_at_ms: now,
                    last_heartbeat_ms: now,
                    heartbeat_token: token,
                },
            );
            state.generation += 1;
            let joined = JoinResult {
                generation: state.generation,
                members: state.members.len(),
            };
            (joined, token, replaced)
        });
        let (result, token, replaced) = result;
        let key = MemberKey::new(group.id().clone(), member.clone());
        if let Err(error) =
            self.inner
                .complete_and_schedule_next(&group, key, token, session_timeout)
        {
            // Shut down meanwhile: the join did not happen, as no
            // expectation could be armed for the member.
            group.with_state(|state| {
                state.generation -= 1;
                match replaced {
                    Some(previous) => state.members.insert(member.clone(), previous),
                    None => state.members.remove(member),
                }
            });
            return Err(error);
        }
        debug!(
            "Member {member} joined group {}, generation {}",
            group.id(),
            result.generation
        );
        Ok(result)
    }

    /// Handles a heartbeat: `UNKNOWN_MEMBER_ID` if the member is not in the
    /// group (it was evicted, or never joined) or the group is unknown here
    /// (Kafka's answer in both cases: the client rejoins), else resets its
    /// session timer. After [`shutdown`](Self::shutdown),
    /// `COORDINATOR_NOT_AVAILABLE`.
    pub fn heartbeat(&self, group: &GroupId, member: &MemberId) -> Result<(), ErrorCode> {
        let Some(group) = self.group(group) else {
            self.inner.heartbeats.increment();
            self.inner.active()?;
            return Err(ErrorCode::UnknownMemberId);
        };
        self.heartbeat_in(&group, member)
    }

    /// [`GroupCoordinator::heartbeat`] for a caller that keeps the group it
    /// looked up (with [`GroupCoordinator::group`] or
    /// [`GroupCoordinator::add_group`]), as a request handler that caches
    /// the groups of its connections does: the same answer, without the
    /// group map's lookup and its shared lock. A coordinator never drops a
    /// group, so a kept group stays valid; `GROUP_ID_NOT_FOUND` if `group`
    /// is another coordinator's.
    pub fn heartbeat_in(&self, group: &Arc<Group>, member: &MemberId) -> Result<(), ErrorCode> {
        self.inner.heartbeats.increment();
        self.restart_session(group, member)
    }

    /// Restarts `member`'s session timer now, as Kafka does for every
    /// member when a join completes (`onCompleteJoin`), or as a heartbeat
    /// would, but not counted as one. A caller that joins members over a
    /// long stretch (a simulation forming a million members' groups) calls
    /// it for each once they all have, so that the first to join is not
    /// expected to heartbeat before the last has joined. The same answers
    /// as [`heartbeat_in`](Self::heartbeat_in).
    pub fn restart_session(&self, group: &Arc<Group>, member: &MemberId) -> Result<(), ErrorCode> {
        if !group.reports_to(&self.inner) {
            return Err(ErrorCode::GroupIdNotFound);
        }
        self.inner.active()?;
        // The member's watch list is the next cold memory after its entry
        // in the group: start fetching its way in while the group lock and
        // the member table are taken.
        let key = MemberKey::new(group.id().clone(), member.clone());
        self.inner.purgatory.prefetch(&key);
        let _guard = group.lock();
        let now = self.now_ms();
        let renewed = group.with_state(|state| {
            let token = state.last_token + 1;
            let m = state.members.get_mut(member)?;
            m.last_heartbeat_ms = now;
            m.heartbeat_token = token;
            let session_timeout = m.session_timeout;
            state.last_token = token;
            Some((token, session_timeout))
        });
        let (token, session_timeout) = renewed.ok_or(ErrorCode::UnknownMemberId)?;
        self.inner
            .complete_and_schedule_next(group, key, token, session_timeout)
    }

    /// A member leaves on its own: removed (a rebalance) and its heartbeat
    /// expectation completed, so nothing stays watched for it.
    /// `UNKNOWN_MEMBER_ID` if it is not in the group or the group is unknown
    /// here, as in Kafka. After [`shutdown`](Self::shutdown),
    /// `COORDINATOR_NOT_AVAILABLE`, and the member stays.
    pub fn leave_group(&self, group: &GroupId, member: &MemberId) -> Result<(), ErrorCode> {
        self.inner.active()?;
        let group = self.group(group).ok_or(ErrorCode::UnknownMemberId)?;
        let _guard = group.lock();
        // Again under the lock: a shutdown may have run while this call
        // waited for it, and after a shutdown the member stays.
        self.inner.active()?;
        let removed = group.with_state(|state| {
            let removed = state.members.remove(member).is_some();
            if removed {
                state.generation += 1;
            }
            removed
        });
        if !removed {
            return Err(ErrorCode::UnknownMemberId);
        }
        // Kafka's removeHeartbeatForLeavingMember.
        self.inner
            .purgatory
            .check_and_complete(&MemberKey::new(group.id().clone(), member.clone()));
        Ok(())
    }

    /// Heartbeat requests handled so far (including rejected ones).
    pub fn heartbeats_handled(&self) -> u64 {
        self.inner.heartbeats.sum()
    }

    /// Members evicted so far.
    pub fn eviction_count(&self) -> u64 {
        self.inner.eviction_count.load(Ordering::Relaxed)
    }

    /// The evictions recorded since the last call, in the order they happened.
    pub fn take_evictions(&self) -> Vec<Eviction> {
        std::mem::take(&mut *self.inner.evictions.lock())
    }

    /// Members present in all groups.
    pub fn alive_members(&self) -> usize {
        self.groups().iter().map(|g| g.member_count()).sum()
    }

    /// The sum of all groups' generations (each membership change adds one).
    pub fn total_generations(&self) -> u64 {
        self.groups().iter().map(|g| g.generation()).sum()
    }

    /// A snapshot of the groups, in no particular order.
    pub fn groups(&self) -> Vec<Arc<Group>> {
        self.inner
            .groups
            .iter()
            .map(|g| Arc::clone(g.value()))
            .collect()
    }

    /// Shuts the heartbeat purgatory down; returns how many expectations were
    /// still pending (they get no callbacks). Joins, heartbeats and leaves
    /// then answer `COORDINATOR_NOT_AVAILABLE`: no member could be evicted
    /// any more. Call it holding no group's lock (see
    /// [`Purgatory::shutdown`]: the expectations share their group's lock).
    pub fn shutdown(&self) -> usize {
        self.inner.purgatory.shutdown().len()
    }
}

impl fmt::Debug for GroupCoordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCoordinator")
            .field("groups", &self.inner.groups.len())
            .field("watched", &self.inner.purgatory.watched())
            .field("delayed", &self.inner.purgatory.delayed())
            .field("evictions", &self.eviction_count())
            .finish()
    }
}

impl CoordinatorInner {
    /// `COORDINATOR_NOT_AVAILABLE` once shut down (Kafka's `isActive`).
    fn active(&self) -> Result<(), ErrorCode> {
        if self.purgatory.is_shut_down() {
            Err(ErrorCode::CoordinatorNotAvailable)
        } else {
            Ok(())
        }
    }

    /// Kafka's `completeAndScheduleNextHeartbeatExpiration`; the caller holds
    /// the group lock and has just given the member of `key` the new `token`.
    /// `COORDINATOR_NOT_AVAILABLE` if the purgatory is shut down, so that no
    /// member stays without an expectation unknown to its caller.
    fn complete_and_schedule_next(
        &self,
        group: &Arc<Group>,
        key: MemberKey,
        token: u64,
        session_timeout: Duration,
    ) -> Result<(), ErrorCode> {
        let member = &key.member;
        let op = DelayedHeartbeat::new(Arc::clone(group), member.clone(), token, session_timeout);
        let op = Operation::with_lock(op, group.operation_lock());
        // The next expectation is watched before the pending one completes
        // (Kafka does it the other way round; under the group lock the two
        // orders mean the same), so the member's watch list never empties
        // in between and is not dropped and rebuilt on every heartbeat.
        if let Err(err) = self.purgatory.try_complete_else_watch(op, [key.clone()]) {
            // Only after shutdown, which dropped every expectation.
            debug!("heartbeat expectation for {member} not armed: {err}");
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        // The new token satisfies the pending expectation: complete it (the
        // new one, made with that token, stays).
        self.purgatory.check_and_complete(&key);
        Ok(())
    }
}

impl FailureSink for CoordinatorInner {
    /// Kafka's `onExpireHeartbeat`: runs on the purgatory's executor thread,
    /// holding the group lock (the operation lock).
    fn on_expire_heartbeat(&self, group: &Group, member: &MemberId, token: u64) {
        let _guard = group.lock();
        let now = self.clock.now_ms();
        let eviction = group.with_state(|state| {
            let still_silent = state
                .members
                .get(member)
                .is_some_and(|m| m.heartbeat_token == token);
            if !still_silent {
                return None;
            }
            let removed = state.members.remove(member)?;
            state.generation += 1;
            Some(Eviction {
                group: group.id().clone(),
                member: member.clone(),
                last_heartbeat_ms: removed.last_heartbeat_ms,
                evicted_at_ms: now,
                generation: state.generation,
            })
        });
        let Some(eviction) = eviction else {
            debug!("Heartbeat expectation of {member} in group {} expired after it was satisfied or the member left", group.id());
            return;
        };
        info!(
            "Member {} in group {} has failed, removing it from the group",
            member,
            group.id()
        );
        self.evictions.lock().push(eviction);
        self.eviction_count.fetch_add(1, Ordering::Relaxed);
        // Nothing stays watched for the departed member: the purgatory drops
        // a completed (here: expired) operation from its watch lists at once,
        // where Kafka would leave it for the next purge.
    }
}

#[cfg(test)]
mod tests;
