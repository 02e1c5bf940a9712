//! `DelayedFetch`: a long-poll fetch waiting for `min_bytes`.
//!
//! Kafka's semantics (`DelayedFetch.scala`), for consumers and followers:
//! - a fetch that cannot be answered at once (fewer than `min_bytes` read,
//!   counting what a read actually returns: a first record larger than
//!   `max_bytes` whole; `max_wait > 0`; no error) waits in the fetch
//!   purgatory, keyed by every partition it reads, for at most `max_wait`;
//! - `try_complete` adds up, over its partitions, the bytes between the fetch
//!   offset and the end offset its isolation allows (the high watermark for
//!   consumers, the log end for followers), each capped at the partition's
//!   `max_bytes`; it completes once the sum reaches `min_bytes`, and at once if
//!   a partition is gone, offline, no longer led here, truncated below the
//!   fetch offset, or (for a follower's fetch) does not have that follower
//!   among its replicas, which then reads nothing;
//! - appends (and, for consumers, high-watermark advances) call
//!   `check_and_complete` on the partition;
//! - `on_complete` reads the partitions again and answers with what is there;
//!   on `max_wait` that may be less than `min_bytes`, or nothing.
//!
//! A delayed fetch reads the logs that were hosted when it was made
//! ([`Partition::log_id`]): a partition removed and hosted again meanwhile
//! answers `UNKNOWN_TOPIC_OR_PARTITION`, as a produce does, never records of
//! the new log at an offset that meant something in the old one.
//!
//! Invariant: the response is read at completion time, never before, so it
//! holds at least what made `try_complete` true.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use log::debug;
use purgatory::DelayedOperation;

use crate::error::ErrorCode;
use crate::partition::{
    FetchIsolation, Partition, PartitionRead, PartitionRegistry, ReplicaId, TopicPartition,
};
use crate::response::Callback;

/// The request-level parameters of a fetch (Kafka's `FetchParams`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchParams {
    /// `Some(follower)` for a replica fetch, `None` for a consumer.
    pub replica_id: Option<ReplicaId>,
    /// The longest the fetch may wait (`fetch.max.wait.ms`).
    pub max_wait: Duration,
    /// Answer as soon as this many bytes are readable (`fetch.min.bytes`).
    pub min_bytes: u64,
}

impl FetchParams {
    /// A consumer fetch (reads up to the high watermark).
    pub fn consumer(max_wait: Duration, min_bytes: u64) -> Self {
        FetchParams {
            replica_id: None,
            max_wait,
            min_bytes,
        }
    }

    /// A follower's fetch (reads up to the log end).
    pub fn follower(replica: ReplicaId, max_wait: Duration, min_bytes: u64) -> Self {
        FetchParams {
            replica_id: Some(replica),
            max_wait,
            min_bytes,
        }
    }

    /// How far this fetch may read.
    pub fn isolation(&self) -> FetchIsolation {
        match self.replica_id {
            Some(_) => FetchIsolation::LogEnd,
            None => FetchIsolation::HighWatermark,
        }
    }
}

/// What a fetch asks of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFetch {
    /// The first offset wanted.
    pub fetch_offset: u64,
    /// At most this many bytes from this partition, but for the first
    /// record, returned whole even when larger (Kafka's `minOneMessage`),
    /// so that a fetch always makes progress.
    pub max_bytes: u64,
}

/// A fetch response: one read per partition asked for.
pub type FetchResponse = BTreeMap<TopicPartition, PartitionRead>;

/// The log id a delayed fetch binds a partition to when none is hosted:
/// [`Partition::log_id`] is never 0, so such a partition reads nothing.
const NO_LOG: u64 = 0;

/// The partition `tp` if this fetch may read it: hosted, online, the log
/// `log` if the fetch is bound to one, and, for a follower's fetch (which
/// reads past the high watermark), one of its replicas
/// (`NOT_LEADER_OR_FOLLOWER` otherwise, as Kafka answers a fetch from a
/// replica it does not know).
fn readable(
    registry: &PartitionRegistry,
    params: &FetchParams,
    tp: &TopicPartition,
    log: Option<u64>,
) -> Result<Arc<Partition>, ErrorCode> {
    let partition = registry.get_partition_or_error(tp)?;
    if log.is_some_and(|log| log != partition.log_id()) {
        return Err(ErrorCode::UnknownTopicOrPartition);
    }
    match params.replica_id {
        Some(replica) if partition.follower(replica).is_none() => {
            Err(ErrorCode::NotLeaderOrFollower)
        }
        _ => Ok(partition),
    }
}

/// The read of a partition that answers `error`.
pub(crate) fn failed_read(error: ErrorCode, fetch: &PartitionFetch) -> PartitionRead {
    PartitionRead {
        error,
        high_watermark: 0,
        log_end_offset: 0,
        records: crate::records::FetchedRecords::empty(fetch.fetch_offset),
    }
}

/// The log the `index`th partition of a fetch is bound to: none for an
/// immediate fetch (`logs` is `None`), the one hosted when a delayed fetch
/// was made.
fn bound_log(logs: Option<&[u64]>, index: usize) -> Option<u64> {
    logs.map(|logs| logs[index])
}

/// Reads every partition of a fetch now (the answer of an immediate fetch, or
/// of a delayed one at completion, bound to `logs`).
pub(crate) fn read_partitions(
    registry: &PartitionRegistry,
    params: &FetchParams,
    partitions: &[(TopicPartition, PartitionFetch)],
    logs: Option<&[u64]>,
) -> FetchResponse {
    partitions
        .iter()
        .enumerate()
        .map(|(index, (tp, fetch))| {
            let read = match readable(registry, params, tp, bound_log(logs, index)) {
                Ok(partition) => {
                    partition.read(fetch.fetch_offset, fetch.max_bytes, params.isolation())
                }
                Err(error) => failed_read(error, fetch),
            };
            (tp.clone(), read)
        })
        .collect()
}

/// Whether a fetch (bound to `logs`, as for [`read_partitions`]) can be
/// answered now: Kafka's `tryComplete` cases.
pub(crate) fn can_answer_now(
    registry: &PartitionRegistry,
    params: &FetchParams,
    partitions: &[(TopicPartition, PartitionFetch)],
    logs: Option<&[u64]>,
) -> bool {
    let mut accumulated = 0u64;
    for (index, (tp, fetch)) in partitions.iter().enumerate() {
        let partition = match readable(registry, params, tp, bound_log(logs, index)) {
            Ok(partition) => partition,
            // Cases C and D: unknown partition (or no longer the log the
            // fetch was made on), offline log directory (and a follower the
            // partition does not know).
            Err(_) => return true,
        };
        let (end, log_end) = match (
            partition.end_offset(params.isolation()),
            partition.end_offset(FetchIsolation::LogEnd),
        ) {
            (Ok(end), Ok(log_end)) => (end, log_end),
            // Case A: no longer the leader.
            _ => return true,
        };
        if fetch.fetch_offset > log_end {
            // Case F: the log was truncated below the fetch offset.
            return true;
        }
        // A consumer's offset past the high watermark (but not the log end)
        // waits for the high watermark to pass it.
        if fetch.fetch_offset < end {
            accumulated += partition
                .bytes_between(fetch.fetch_offset, end)
                .min(fetch.max_bytes);
        }
    }
    // Case G.
    accumulated >= params.min_bytes
}

/// A fetch waiting in the fetch purgatory.
pub struct DelayedFetch {
    params: FetchParams,
    partitions: Vec<(TopicPartition, PartitionFetch)>,
    /// The log of each partition when the fetch was made, in the order of
    /// `partitions` ([`NO_LOG`] where none was hosted).
    logs: Vec<u64>,
    registry: Arc<PartitionRegistry>,
    callback: Callback<FetchResponse>,
}

impl DelayedFetch {
    /// A delayed fetch of `partitions`, expiring after `params.max_wait`. It
    /// reads the logs `registry` hosts now (see the module docs).
    pub fn new(
        params: FetchParams,
        partitions: Vec<(TopicPartition, PartitionFetch)>,
        registry: Arc<PartitionRegistry>,
        callback: Callback<FetchResponse>,
    ) -> Self {
        let logs = partitions
            .iter()
            .map(|(tp, _)| registry.get(tp).map_or(NO_LOG, |p| p.log_id()))
            .collect();
        DelayedFetch {
            params,
            partitions,
            logs,
            registry,
            callback,
        }
    }

    /// The partitions read: the keys to watch.
    pub fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions.iter().map(|(tp, _)| tp)
    }

    /// The fetch's parameters.
    pub fn params(&self) -> &FetchParams {
        &self.params
    }
}

impl DelayedOperation for DelayedFetch {
    fn timeout(&self) -> Duration {
        self.params.max_wait
    }

    fn try_complete(&self) -> bool {
        can_answer_now(
            &self.registry,
            &self.params,
            &self.partitions,
            Some(&self.logs),
        )
    }

    fn on_complete(&self) {
        let response = read_partitions(
            &self.registry,
            &self.params,
            &self.partitions,
            Some(&self.logs),
        );
        self.callback.call(response);
    }

    fn on_expiration(&self) {
        // Kafka marks DelayedFetchMetrics ExpiresPerSec here.
        let kind = if self.params.replica_id.is_some() {
            "follower"
        } else {
            "consumer"
        };
        debug!(
            "{kind} fetch of {} partition(s) reached max_wait",
            self.partitions.len()
        );
    }
}

impl fmt::Debug for DelayedFetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedFetch")
            .field("params", &self.params)
            .field("partitions", &self.partitions)
            .finish()
    }
}
