//! Partitions this broker hosts: the leader's log, its followers and the high
//! watermark.
//!
//! A [`Partition`] is the leader replica's view: its [`Log`], the log end
//! offset (LEO) of each follower as learnt from that follower's fetches, which
//! followers are in sync, and the high watermark (HW). The
//! [`PartitionRegistry`] is the set of partitions the broker hosts; delayed
//! operations look partitions up in it, as Kafka's do through
//! `getPartitionOrError`.
//!
//! Invariants:
//! - the HW is the minimum LEO over the in-sync replicas (the leader always
//!   included) and never goes backwards;
//! - a follower's LEO only moves forward, and never past the leader's;
//! - all state sits behind one short-lived mutex per partition that is never
//!   held across a purgatory call; methods report whether the HW advanced so
//!   that the caller can trigger `check_and_complete` *after* releasing it.

mod registry;
mod topic_partition;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

pub use registry::PartitionRegistry;
pub use topic_partition::{ReplicaId, TopicPartition, LEADER_ID};

use crate::error::ErrorCode;
use crate::records::{FetchedRecords, Log, Records};

/// What this broker is for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionRole {
    /// This broker leads the partition: it takes appends and fetches.
    Leader,
    /// Leadership moved elsewhere.
    Follower,
    /// The partition's log directory failed.
    Offline,
}

/// Which end of the log a fetch may read up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchIsolation {
    /// Up to the log end offset: what followers read.
    LogEnd,
    /// Up to the high watermark: what consumers read.
    HighWatermark,
}

/// A follower as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The follower's LEO: the offset of its last fetch.
    pub log_end_offset: u64,
    /// Whether it is in the in-sync replica set (ISR).
    pub in_sync: bool,
}

/// Where a write landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// The log written to (see [`Partition::log_id`]).
    pub log_id: u64,
    /// Offset of the first record written.
    pub base_offset: u64,
    /// Offset of the last record written; `None` if there were no records
    /// (an empty append, answered at `base_offset`, the log end).
    pub last_offset: Option<u64>,
    /// Whether the append moved the HW (only with no follower in sync).
    pub hw_advanced: bool,
}

/// A read from one partition, the per-partition part of a fetch response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRead {
    /// `NONE`, or why nothing could be read.
    pub error: ErrorCode,
    /// The partition's HW at the time of the read.
    pub high_watermark: u64,
    /// The leader's LEO at the time of the read.
    pub log_end_offset: u64,
    /// What was read.
    pub records: FetchedRecords,
}

#[derive(Debug)]
struct PartitionState {
    role: PartitionRole,
    log: Log,
    high_watermark: u64,
    followers: BTreeMap<ReplicaId, FollowerState>,
    min_insync_replicas: usize,
}

impl PartitionState {
    fn isr_size(&self) -> usize {
        1 + self.followers.values().filter(|f| f.in_sync).count()
    }

    /// Recomputes the HW; returns whether it advanced.
    fn maybe_advance_hw(&mut self) -> bool {
        let candidate = self
            .followers
            .values()
            .filter(|f| f.in_sync)
            .map(|f| f.log_end_offset)
            .fold(self.log.log_end_offset(), u64::min);
        if candidate > self.high_watermark {
            self.high_watermark = candidate;
            true
        } else {
            false
        }
    }

    fn leader_or_error(&self) -> Result<(), ErrorCode> {
        match self.role {
            PartitionRole::Leader => Ok(()),
            PartitionRole::Follower => Err(ErrorCode::NotLeaderOrFollower),
            PartitionRole::Offline => Err(ErrorCode::KafkaStorageError),
        }
    }
}

/// One hosted partition (see the module docs).
#[derive(Debug)]
pub struct Partition {
    tp: TopicPartition,
    log_id: u64,
    state: Mutex<PartitionState>,
}

/// The next [`Partition::log_id`].
static NEXT_LOG_ID: AtomicU64 = AtomicU64::new(1);

impl Partition {
    /// A partition led by this broker, with the given followers (all in sync,
    /// LEO 0) and `min.insync.replicas`.
    ///
    /// `INVALID_REPLICA_ASSIGNMENT` if a follower is [`LEADER_ID`] (this
    /// broker) or is named twice; `INVALID_CONFIG` if `min_insync_replicas`
    /// is 0 or more than the replicas (the leader and its followers), as no
    /// `acks=-1` produce could then ever succeed.
    pub fn new(
        tp: TopicPartition,
        followers: &[ReplicaId],
        min_insync_replicas: usize,
    ) -> Result<Self, ErrorCode> {
        let mut states = BTreeMap::new();
        for &id in followers {
            let state = FollowerState {
                log_end_offset: 0,
                in_sync: true,
            };
            if id == LEADER_ID || states.insert(id, state).is_some() {
                return Err(ErrorCode::InvalidReplicaAssignment);
            }
        }
        if min_insync_replicas == 0 || min_insync_replicas > followers.len() + 1 {
            return Err(ErrorCode::InvalidConfig);
        }
        Ok(Partition {
            tp,
            log_id: NEXT_LOG_ID.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(PartitionState {
                role: PartitionRole::Leader,
                log: Log::new(),
                high_watermark: 0,
                followers: states,
                min_insync_replicas,
            }),
        })
    }

    /// The partition's name.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    /// Tells this partition's log from every other this process hosts: a
    /// partition removed and hosted again under its name has a new log,
    /// and a new id (Kafka's topic id plays this part), so that a write to
    /// the old log is never acknowledged by the new one.
    pub fn log_id(&self) -> u64 {
        self.log_id
    }

    /// The leader's log end offset.
    pub fn log_end_offset(&self) -> u64 {
        self.state.lock().log.log_end_offset()
    }

    /// The high watermark.
    pub fn high_watermark(&self) -> u64 {
        self.state.lock().high_watermark
    }

    /// This broker's role for the partition.
    pub fn role(&self) -> PartitionRole {
        self.state.lock().role
    }

    /// Size of the in-sync replica set, leader included.
    pub fn isr_size(&self) -> usize {
        self.state.lock().isr_size()
    }

    /// A follower's state, if it is a replica of this partition.
    pub fn follower(&self, id: ReplicaId) -> Option<FollowerState> {
        self.state.lock().followers.get(&id).copied()
    }

    /// Appends on the leader. With `acks_all`, refuses with
    /// `NOT_ENOUGH_REPLICAS` when the ISR is below `min.insync.replicas`.
    pub fn append(&self, records: &Records, acks_all: bool) -> Result<AppendInfo, ErrorCode> {
        let mut state = self.state.lock();
        state.leader_or_error()?;
        if acks_all && state.isr_size() < state.min_insync_replicas {
            return Err(ErrorCode::NotEnoughReplicas);
        }
        // Appending nothing is a no-op the broker answers at the current end,
        // with nothing for the followers to replicate.
        let Some((base_offset, last_offset)) = state.log.append(records) else {
            return Ok(AppendInfo {
                log_id: self.log_id,
                base_offset: state.log.log_end_offset(),
                last_offset: None,
                hw_advanced: false,
            });
        };
        let hw_advanced = state.maybe_advance_hw();
        Ok(AppendInfo {
            log_id: self.log_id,
            base_offset,
            last_offset: Some(last_offset),
            hw_advanced,
        })
    }

    /// Records a follower's fetch at `fetch_offset`: it has everything before
    /// it. Returns whether the HW advanced.
    pub fn update_follower(
        &self,
        replica: ReplicaId,
        fetch_offset: u64,
    ) -> Result<bool, ErrorCode> {
        let mut state = self.state.lock();
        state.leader_or_error()?;
        if fetch_offset > state.log.log_end_offset() {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        let follower = state
            .followers
            .get_mut(&replica)
            .ok_or(ErrorCode::NotLeaderOrFollower)?;
        follower.log_end_offset = follower.log_end_offset.max(fetch_offset);
        Ok(state.maybe_advance_hw())
    }

    /// Puts a follower in or out of the ISR (Kafka's ISR expand and shrink),
    /// on the leader only. Shrinking can advance the HW; returns whether it
    /// did. As in Kafka, a follower joins the ISR only once caught up: its
    /// LEO at least the HW (`INELIGIBLE_REPLICA` otherwise, and the ISR
    /// stays as it was); otherwise the HW it already passed would no longer
    /// be held by every in-sync replica.
    pub fn set_in_sync(&self, replica: ReplicaId, in_sync: bool) -> Result<bool, ErrorCode> {
        let mut state = self.state.lock();
        state.leader_or_error()?;
        let high_watermark = state.high_watermark;
        let follower = state
            .followers
            .get_mut(&replica)
            .ok_or(ErrorCode::NotLeaderOrFollower)?;
        if in_sync && !follower.in_sync && follower.log_end_offset < high_watermark {
            return Err(ErrorCode::IneligibleReplica);
        }
        follower.in_sync = in_sync;
        Ok(state.maybe_advance_hw())
    }

    /// Changes this broker's role (leadership moved away, or the disk failed).
    pub fn set_role(&self, role: PartitionRole) {
        self.state.lock().role = role;
    }

    /// Kafka's `checkEnoughReplicasReachOffset`: `(true, NONE)` once the HW
    /// reached `required_offset` with a large enough ISR, `(true,
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND)` if the ISR shrank too far, `(false,
    /// NONE)` while waiting, `(false, <error>)` when no longer leader.
    pub fn check_enough_replicas_reach_offset(&self, required_offset: u64) -> (bool, ErrorCode) {
        let state = self.state.lock();
        if let Err(error) = state.leader_or_error() {
            return (false, error);
        }
        if state.high_watermark < required_offset {
            return (false, ErrorCode::None);
        }
        if state.isr_size() >= state.min_insync_replicas {
            (true, ErrorCode::None)
        } else {
            (true, ErrorCode::NotEnoughReplicasAfterAppend)
        }
    }

    /// The offset a fetch with `isolation` may read up to, or why it cannot.
    pub fn end_offset(&self, isolation: FetchIsolation) -> Result<u64, ErrorCode> {
        let state = self.state.lock();
        state.leader_or_error()?;
        Ok(match isolation {
            FetchIsolation::LogEnd => state.log.log_end_offset(),
            FetchIsolation::HighWatermark => state.high_watermark,
        })
    }

    /// Bytes between two offsets of the leader's log.
    pub fn bytes_between(&self, from: u64, to: u64) -> u64 {
        self.state.lock().log.bytes_between(from, to)
    }

    /// Reads from `fetch_offset` up to the isolation's end offset, at most
    /// `max_bytes` (but one record at least). As in Kafka, only a fetch
    /// offset beyond the log end answers `OFFSET_OUT_OF_RANGE` (the log was
    /// truncated below it); a consumer's offset between the high watermark
    /// and the log end is valid and reads nothing yet (a consumer told
    /// otherwise would reset its position).
    pub fn read(
        &self,
        fetch_offset: u64,
        max_bytes: u64,
        isolation: FetchIsolation,
    ) -> PartitionRead {
        let state = self.state.lock();
        let high_watermark = state.high_watermark;
        let log_end_offset = state.log.log_end_offset();
        let answer = |error, records| PartitionRead {
            error,
            high_watermark,
            log_end_offset,
            records,
        };
        if let Err(error) = state.leader_or_error() {
            return answer(error, FetchedRecords::empty(fetch_offset));
        }
        let end = match isolation {
            FetchIsolation::LogEnd => log_end_offset,
            FetchIsolation::HighWatermark => high_watermark,
        };
        if fetch_offset > log_end_offset {
            return answer(
                ErrorCode::OffsetOutOfRange,
                FetchedRecords::empty(fetch_offset),
            );
        }
        if fetch_offset >= end {
            return answer(ErrorCode::None, FetchedRecords::empty(fetch_offset));
        }
        answer(
            ErrorCode::None,
            state.log.read(fetch_offset, end, max_bytes),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition() -> Partition {
        Partition::new(TopicPartition::new("t", 0), &[1, 2], 2).unwrap()
    }

    #[test]
    fn hw_is_min_leo_of_the_isr_and_never_moves_back() {
        let p = partition();
        let info = p.append(&Records::uniform(10, 10), true).unwrap();
        assert_eq!((info.base_offset, info.last_offset), (0, Some(9)));
        assert!(!info.hw_advanced);
        assert_eq!(p.update_follower(1, 10), Ok(false));
        assert_eq!(p.high_watermark(), 0);
        assert_eq!(p.update_follower(2, 4), Ok(true));
        assert_eq!(p.high_watermark(), 4);
        assert_eq!(p.update_follower(2, 2), Ok(false), "a LEO never goes back");
        assert_eq!(p.set_in_sync(2, false), Ok(true), "shrinking the ISR");
        assert_eq!(p.high_watermark(), 10);
        assert_eq!(p.update_follower(1, 11), Err(ErrorCode::OffsetOutOfRange));
        assert_eq!(p.update_follower(7, 1), Err(ErrorCode::NotLeaderOrFollower));
    }

    #[test]
    fn a_follower_rejoins_the_isr_only_once_caught_up_to_the_hw() {
        let p = partition();
        p.append(&Records::uniform(10, 10), true).unwrap();
        p.update_follower(1, 3).unwrap();
        assert_eq!(p.set_in_sync(1, false), Ok(false));
        p.update_follower(2, 10).unwrap();
        assert_eq!(p.high_watermark(), 10, "follower 2 alone holds the HW");
        assert_eq!(p.set_in_sync(1, true), Err(ErrorCode::IneligibleReplica));
        assert!(!p.follower(1).unwrap().in_sync, "the ISR stays as it was");
        assert_eq!(p.set_in_sync(2, true), Ok(false), "already in sync");
        p.update_follower(1, 10).unwrap();
        assert_eq!(p.set_in_sync(1, true), Ok(false));
        assert!(p.follower(1).unwrap().in_sync);
        assert_eq!(
            p.set_in_sync(1, false),
            Ok(false),
            "leaving is always allowed"
        );
    }

    #[test]
    fn enough_replicas_follows_kafka() {
        let p = partition();
        p.append(&Records::uniform(5, 10), true).unwrap();
        assert_eq!(
            p.check_enough_replicas_reach_offset(5),
            (false, ErrorCode::None)
        );
        p.update_follower(1, 5).unwrap();
        p.update_follower(2, 5).unwrap();
        assert_eq!(
            p.check_enough_replicas_reach_offset(5),
            (true, ErrorCode::None)
        );
        p.set_in_sync(1, false).unwrap();
        p.set_in_sync(2, false).unwrap();
        assert_eq!(
            p.check_enough_replicas_reach_offset(5),
            (true, ErrorCode::NotEnoughReplicasAfterAppend)
        );
        assert_eq!(
            p.append(&Records::uniform(1, 1), true),
            Err(ErrorCode::NotEnoughReplicas)
        );
        assert!(
            p.append(&Records::uniform(1, 1), false).is_ok(),
            "acks=1 is fine"
        );
        p.set_role(PartitionRole::Follower);
        assert_eq!(
            p.check_enough_replicas_reach_offset(5),
            (false, ErrorCode::NotLeaderOrFollower)
        );
    }

    #[test]
    fn reads_stop_at_the_isolation_end() {
        let p = partition();
        p.append(&Records::uniform(4, 100), true).unwrap();
        p.update_follower(1, 2).unwrap();
        p.update_follower(2, 2).unwrap();
        let consumer = p.read(0, 1000, FetchIsolation::HighWatermark);
        assert_eq!(
            (consumer.records.next_offset, consumer.records.bytes),
            (2, 200)
        );
        let follower = p.read(0, 1000, FetchIsolation::LogEnd);
        assert_eq!(follower.records.next_offset, 4);
        // Between the HW and the log end: valid, nothing to read yet.
        for offset in [3, 4] {
            let read = p.read(offset, 1000, FetchIsolation::HighWatermark);
            assert_eq!(
                (read.error, read.records.bytes, read.records.next_offset),
                (ErrorCode::None, 0, offset)
            );
        }
        for isolation in [FetchIsolation::HighWatermark, FetchIsolation::LogEnd] {
            assert_eq!(
                p.read(5, 1000, isolation).error,
                ErrorCode::OffsetOutOfRange
            );
        }
    }

    #[test]
    fn invalid_replica_sets_are_refused() {
        let tp = || TopicPartition::new("t", 0);
        let refused = |followers: &[ReplicaId], min_isr| {
            Partition::new(tp(), followers, min_isr)
                .map(|_| ())
                .unwrap_err()
        };
        assert_eq!(
            refused(&[LEADER_ID], 1),
            ErrorCode::InvalidReplicaAssignment
        );
        assert_eq!(refused(&[1, 2, 1], 1), ErrorCode::InvalidReplicaAssignment);
        assert_eq!(refused(&[1, 2], 0), ErrorCode::InvalidConfig);
        assert_eq!(refused(&[1, 2], 4), ErrorCode::InvalidConfig);
        assert_eq!(refused(&[], 2), ErrorCode::InvalidConfig);
        assert!(Partition::new(tp(), &[1, 2], 3).is_ok());
        assert!(Partition::new(tp(), &[], 1).is_ok());
    }

    #[test]
    fn an_empty_append_writes_nothing_and_leaves_nothing_to_replicate() {
        let p = partition();
        let empty = p.append(&Records::default(), true).unwrap();
        assert_eq!((empty.base_offset, empty.last_offset), (0, None));
        p.append(&Records::uniform(3, 10), true).unwrap();
        let empty = p.append(&Records::default(), true).unwrap();
        assert_eq!((empty.base_offset, empty.last_offset), (3, None));
        assert_eq!(p.log_end_offset(), 3);
    }

    #[test]
    fn only_the_leader_changes_the_isr() {
        let p = partition();
        p.set_role(PartitionRole::Follower);
        assert_eq!(p.set_in_sync(1, false), Err(ErrorCode::NotLeaderOrFollower));
        assert_eq!(p.isr_size(), 3);
    }
}
