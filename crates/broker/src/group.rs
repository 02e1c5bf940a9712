//! Consumer groups and their members, as the group coordinator keeps them.
//!
//! A [`Group`] has an id, a generation and a set of [`Member`]s, each with its
//! session timeout and the time of its last heartbeat. Every membership change
//! (a join, a leave, an eviction) is a rebalance and bumps the generation by
//! one; the model does not play out Kafka's join/sync protocol (DelayedJoin,
//! DelayedSync), the generation bump stands for it.
//!
//! Locking, as in Kafka:
//! - each group has a *reentrant* group lock, [`Group::lock`]; it is also the
//!   operation lock of every `DelayedHeartbeat` of the group's members, so a
//!   heartbeat, a join, a leave and a heartbeat expiration of one group are
//!   serialised, while different groups never contend;
//! - the member table sits behind a second, plain mutex that is only ever held
//!   for the few instructions of one read or update ([`Group::with_state`]) and
//!   never across a purgatory call, so it can never deadlock with the
//!   purgatory's own locks.
//!
//! Invariant: a member's `heartbeat_token` changes on every heartbeat and join,
//! and tokens are never reused within a group (the group hands them out from
//! its own counter, [`GroupState::next_token`], under the group lock). A heartbeat expectation is satisfied exactly when the member is
//! gone or its token is no longer the one the expectation was created with.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::{Mutex, ReentrantMutex, ReentrantMutexGuard};
use purgatory::OperationLock;

pub use crate::id::{GroupId, IdHasher, MemberId, MemberKey};

/// One member of a group, as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's id.
    pub id: MemberId,
    /// How long the coordinator waits for the next heartbeat before evicting.
    pub session_timeout: Duration,
    /// When the member joined (coordinator clock, ms).
    pub joined_at_ms: u64,
    /// When the coordinator last heard from it, by heartbeat or join (ms).
    pub last_heartbeat_ms: u64,
    /// Changes on every heartbeat and join; see the module invariant.
    pub heartbeat_token: u64,
}

/// What a group reports its members' expired heartbeat expectations to: the
/// coordinator that owns it. Declared here, below the coordinator, so that a
/// group (and the operations holding it) never names the coordinator.
pub(crate) trait FailureSink: Send + Sync {
    /// A heartbeat expectation of `member`, created with `token`, expired.
    fn on_expire_heartbeat(&self, group: &Group, member: &MemberId, token: u64);
}

/// The mutable part of a group: its generation and members.
#[derive(Debug, Default)]
pub struct GroupState {
    /// Bumped by one on every membership change (a rebalance).
    pub generation: u64,
    /// The last heartbeat token handed out in this group.
    pub last_token: u64,
    /// The members, by id.
    pub members: HashMap<MemberId, Member, IdHasher>,
}

impl GroupState {
    /// A token no member of the group has had yet.
    pub fn next_token(&mut self) -> u64 {
        self.last_token += 1;
        self.last_token
    }
}

/// A consumer group: id, group lock, generation and members.
pub struct Group {
    id: GroupId,
    lock: OperationLock,
    state: Mutex<GroupState>,
    sink: OnceLock<Weak<dyn FailureSink>>,
}

impl Group {
    /// An empty group at generation 0.
    pub fn new(id: GroupId) -> Self {
        Group {
            id,
            lock: Arc::new(ReentrantMutex::new(())),
            state: Mutex::new(GroupState::default()),
            sink: OnceLock::new(),
        }
    }

    /// A group whose expired heartbeat expectations go to `sink`.
    pub(crate) fn with_sink(id: GroupId, sink: Weak<dyn FailureSink>) -> Self {
        let group = Group::new(id);
        let _ = group.sink.set(sink);
        group
    }

    /// Reports an expired heartbeat expectation to the group's sink, if it
    /// has one that still exists.
    pub(crate) fn report_expired(&self, member: &MemberId, token: u64) {
        if let Some(sink) = self.sink.get().and_then(Weak::upgrade) {
            sink.on_expire_heartbeat(self, member, token);
        }
    }

    /// Whether the group reports its expired expectations to `sink` (the
    /// coordinator that made it).
    pub(crate) fn reports_to<S: FailureSink>(&self, sink: &Arc<S>) -> bool {
        self.sink
            .get()
            .is_some_and(|own| std::ptr::addr_eq(own.as_ptr(), Arc::as_ptr(sink)))
    }

    /// The group's id.
    pub fn id(&self) -> &GroupId {
        &self.id
    }

    /// Takes the (reentrant) group lock.
    pub fn lock(&self) -> ReentrantMutexGuard<'_, ()> {
        self.lock.lock()
    }

    /// The group lock, to share as the operation lock of heartbeat operations.
    pub fn operation_lock(&self) -> OperationLock {
        Arc::clone(&self.lock)
    }

    /// Runs `f` on the member table. Keep `f` short and never call into a
    /// purgatory from it (see the module docs).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut GroupState) -> R) -> R {
        f(&mut self.state.lock())
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// How many members the group has.
    pub fn member_count(&self) -> usize {
        self.state.lock().members.len()
    }

    /// A copy of one member, if present.
    pub fn member(&self, id: &MemberId) -> Option<Member> {
        self.state.lock().members.get(id).cloned()
    }

    /// Whether `id` is a member.
    pub fn contains(&self, id: &MemberId) -> bool {
        self.state.lock().members.contains_key(id)
    }

    /// The members' ids, in order.
    pub fn member_ids(&self) -> Vec<MemberId> {
        let mut ids: Vec<MemberId> = self.state.lock().members.keys().cloned().collect();
        ids.sort_unstable();
        ids
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Group")
            .field("id", &self.id)
            .field("generation", &state.generation)
            .field("members", &state.members.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lock_is_reentrant_and_shared() {
        let group = Group::new("g".into());
        let _outer = group.lock();
        let shared = group.operation_lock();
        let _inner = shared.lock();
        assert_eq!(group.generation(), 0);
        assert_eq!(group.member_count(), 0);
    }
}
