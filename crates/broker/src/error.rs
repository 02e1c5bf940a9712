//! Error codes carried in the model's responses.
//!
//! These are the few Kafka protocol errors the heartbeat, produce and fetch
//! paths, and the hosting of partitions, can answer with. They are *response values*, not Rust failures: a
//! produce response holds one per partition, exactly as Kafka's does, and a
//! heartbeat answers with one. [`ErrorCode::None`] means success.
//!
//! Invariant: [`ErrorCode::name`] is the upper-case name Kafka uses on the
//! wire and in its logs, so output can be compared with a real broker's.

use std::fmt;

/// A Kafka protocol error code, as carried in a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// `NONE`: success.
    None,
    /// `REQUEST_TIMED_OUT`: a delayed operation expired before its condition
    /// held (preset on every pending produce partition).
    RequestTimedOut,
    /// `NOT_LEADER_OR_FOLLOWER`: this broker no longer leads the partition.
    NotLeaderOrFollower,
    /// `UNKNOWN_TOPIC_OR_PARTITION`: the partition is not hosted here.
    UnknownTopicOrPartition,
    /// `KAFKA_STORAGE_ERROR`: the partition's log directory is offline.
    KafkaStorageError,
    /// `NOT_ENOUGH_REPLICAS`: an `acks=-1` append was refused because the
    /// in-sync replica set is smaller than `min.insync.replicas`.
    NotEnoughReplicas,
    /// `NOT_ENOUGH_REPLICAS_AFTER_APPEND`: the write was replicated, but the
    /// in-sync replica set shrank below `min.insync.replicas` meanwhile.
    NotEnoughReplicasAfterAppend,
    /// `OFFSET_OUT_OF_RANGE`: a fetch offset beyond the log end (truncation).
    OffsetOutOfRange,
    /// `UNKNOWN_MEMBER_ID`: the member is not (or no longer) in the group,
    /// or the coordinator does not know the group (as Kafka answers a
    /// heartbeat or a leave then).
    UnknownMemberId,
    /// `GROUP_ID_NOT_FOUND`: a group handed to
    /// [`heartbeat_in`](crate::GroupCoordinator::heartbeat_in) that is
    /// another coordinator's.
    GroupIdNotFound,
    /// `INVALID_SESSION_TIMEOUT`: a join asked for a session timeout outside
    /// the coordinator's bounds.
    InvalidSessionTimeout,
    /// `COORDINATOR_NOT_AVAILABLE`: the group coordinator is shut down.
    CoordinatorNotAvailable,
    /// `BROKER_NOT_AVAILABLE`: the replica manager is shut down.
    BrokerNotAvailable,
    /// `INVALID_REQUEST`: the request names a partition more than once.
    InvalidRequest,
    /// `INVALID_REPLICA_ASSIGNMENT`: a partition's replicas include the
    /// leader's own id or name a follower twice.
    InvalidReplicaAssignment,
    /// `INVALID_CONFIG`: `min.insync.replicas` is 0 or more than the
    /// partition's replicas, or session timeout bounds that admit nothing.
    InvalidConfig,
    /// `TOPIC_ALREADY_EXISTS`: the partition is already hosted here.
    TopicAlreadyExists,
    /// `INELIGIBLE_REPLICA`: a follower cannot join the in-sync replica set
    /// before it has caught up to the high watermark.
    IneligibleReplica,
}

impl ErrorCode {
    /// Kafka's name for the error, e.g. `REQUEST_TIMED_OUT`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::None => "NONE",
            ErrorCode::RequestTimedOut => "REQUEST_TIMED_OUT",
            ErrorCode::NotLeaderOrFollower => "NOT_LEADER_OR_FOLLOWER",
            ErrorCode::UnknownTopicOrPartition => "UNKNOWN_TOPIC_OR_PARTITION",
            ErrorCode::KafkaStorageError => "KAFKA_STORAGE_ERROR",
            ErrorCode::NotEnoughReplicas => "NOT_ENOUGH_REPLICAS",
            ErrorCode::NotEnoughReplicasAfterAppend => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            ErrorCode::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            ErrorCode::UnknownMemberId => "UNKNOWN_MEMBER_ID",
            ErrorCode::GroupIdNotFound => "GROUP_ID_NOT_FOUND",
            ErrorCode::InvalidSessionTimeout => "INVALID_SESSION_TIMEOUT",
            ErrorCode::CoordinatorNotAvailable => "COORDINATOR_NOT_AVAILABLE",
            ErrorCode::BrokerNotAvailable => "BROKER_NOT_AVAILABLE",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::InvalidReplicaAssignment => "INVALID_REPLICA_ASSIGNMENT",
            ErrorCode::InvalidConfig => "INVALID_CONFIG",
            ErrorCode::TopicAlreadyExists => "TOPIC_ALREADY_EXISTS",
            ErrorCode::IneligibleReplica => "INELIGIBLE_REPLICA",
        }
    }

    /// `true` for [`ErrorCode::None`].
    pub fn is_none(self) -> bool {
        self == ErrorCode::None
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_kafka() {
        assert_eq!(ErrorCode::RequestTimedOut.to_string(), "REQUEST_TIMED_OUT");
        assert_eq!(
            ErrorCode::NotLeaderOrFollower.to_string(),
            "NOT_LEADER_OR_FOLLOWER"
        );
        assert!(ErrorCode::None.is_none());
        assert!(!ErrorCode::UnknownMemberId.is_none());
    }
}
