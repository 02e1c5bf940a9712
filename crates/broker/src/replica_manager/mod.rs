//! The replica manager: appends, fetches and replication on the hosted
//! partitions, with the `Produce` and `Fetch` purgatories.
//!
//! It plays Kafka's `ReplicaManager` roles that touch the purgatory:
//! - [`ReplicaManager::append_records`] appends on the leaders; with `acks=-1`
//!   and at least one successful append it parks a [`DelayedProduce`] keyed by
//!   every partition written, otherwise it answers at once;
//! - [`ReplicaManager::fetch_messages`] reads; a fetch that cannot be answered
//!   yet becomes a [`DelayedFetch`] keyed by every partition read. A follower's
//!   fetch first records the follower's position (its acknowledgement), which
//!   may advance the high watermark;
//! - every event that can satisfy a delayed operation triggers
//!   `check_and_complete` on the partition's key, as Kafka's
//!   `tryCompleteDelayedRequests` does: an append checks the fetch purgatory
//!   (followers read up to the log end), a high-watermark advance checks both,
//!   and a role change checks both (waiting operations answer with the error).
//!
//! Invariant: no lock of this module or of a partition is held while calling
//! into a purgatory (Kafka's rule: call `check_and_complete` without holding
//! exclusive locks a `try_complete` may need).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use log::debug;
use purgatory::{DelayedOperation, Operation, Purgatory, PurgatoryError, ShutdownPolicy};
use timer::internal::ShutdownGate;
use timer::{Clock, ManualClock};

use crate::error::ErrorCode;
use crate::fetch::{
    failed_read, read_partitions, DelayedFetch, FetchParams, FetchResponse, PartitionFetch,
};
use crate::partition::{Partition, PartitionRegistry, PartitionRole, ReplicaId, TopicPartition};
use crate::produce::{
    Acks, DelayedProduce, PartitionResponse, ProducePartitionStatus, ProduceResponse,
};
use crate::records::Records;
use crate::response::Callback;

/// The produce purgatory type.
pub type ProducePurgatory = Purgatory<TopicPartition, DelayedProduce>;
/// The fetch purgatory type.
pub type FetchPurgatory = Purgatory<TopicPartition, DelayedFetch>;

/// The replica manager (see the module docs).
pub struct ReplicaManager {
    partitions: Arc<PartitionRegistry>,
    produce: ProducePurgatory,
    fetch: FetchPurgatory,
    /// Lets one `shutdown` answer the pending clients, and has the others
    /// wait until it has.
    shutdown_gate: ShutdownGate,
}

/// Watches `op` under `keys` in `purgatory`; returns whether it was
/// answered. A purgatory shut down meanwhile refuses it: it is then
/// answered now with what it has (a produce's pending partitions as timed
/// out, a fetch's reads), so no client waits for ever.
fn watch_or_answer<Op: DelayedOperation>(
    purgatory: &Purgatory<TopicPartition, Op>,
    op: Operation<Op>,
    keys: Vec<TopicPartition>,
) -> bool {
    match purgatory.try_complete_else_watch(op.clone(), keys) {
        Ok(completed) => completed,
        Err(err) => {
            debug!("{} not delayed: {err}", purgatory.name());
            op.force_complete();
            true
        }
    }
}

impl Drop for ReplicaManager {
    /// Shuts down, so that no client of a pending produce or fetch is left
    /// without an answer.
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for ReplicaManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaManager")
            .field("produce_delayed", &self.produce.delayed())
            .field("fetch_delayed", &self.fetch.delayed())
            .finish()
    }
}

impl ReplicaManager {
    /// Kafka's name for the produce purgatory.
    pub const PRODUCE_PURGATORY: &'static str = "Produce";
    /// Kafka's name for the fetch purgatory.
    pub const FETCH_PURGATORY: &'static str = "Fetch";

    /// A replica manager on the given purgatories (which should share a clock).
    pub fn new(produce: ProducePurgatory, fetch: FetchPurgatory) -> Self {
        ReplicaManager {
            partitions: Arc::new(PartitionRegistry::new()),
            produce,
            fetch,
            shutdown_gate: ShutdownGate::new(),
        }
    }

    /// Both purgatories on `clock`, with no reaper: drive them with
    /// [`ReplicaManager::advance_clock`]. At [`shutdown`](Self::shutdown)
    /// they expire what is pending ([`ShutdownPolicy::Expire`]), so their
    /// stats count what shutdown answered as expired.
    pub fn with_manual_clock(clock: &ManualClock) -> Result<Self, PurgatoryError> {
        let produce = Purgatory::builder(Self::PRODUCE_PURGATORY)
            .clock(clock.clone())
            .reaper(false)
            .shutdown_policy(ShutdownPolicy::Expire)
            .build()?;
        let fetch = Purgatory::builder(Self::FETCH_PURGATORY)
            .clock(clock.clone())
            .reaper(false)
            .shutdown_policy(ShutdownPolicy::Expire)
            .build()?;
        Ok(Self::new(produce, fetch))
    }

    /// The hosted partitions.
    pub fn partitions(&self) -> &Arc<PartitionRegistry> {
        &self.partitions
    }

    /// Hosts a new partition led here, with `followers` (all in sync). The
    /// errors of [`Partition::new`], and `TOPIC_ALREADY_EXISTS` if `tp` is
    /// hosted already ([`remove_partition`](Self::remove_partition) it
    /// first).
    pub fn add_partition(
        &self,
        tp: TopicPartition,
        followers: &[ReplicaId],
        min_insync_replicas: usize,
    ) -> Result<Arc<Partition>, ErrorCode> {
        self.partitions
            .insert(Partition::new(tp, followers, min_insync_replicas)?)
    }

    /// Stops hosting `tp` (Kafka's `stopReplica` with deletion): the
    /// produces and fetches waiting on it are answered at once, their `tp`
    /// with `UNKNOWN_TOPIC_OR_PARTITION`. Returns the partition, if hosted.
    pub fn remove_partition(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        let removed = self.partitions.remove(tp);
        if removed.is_some() {
            self.produce.check_and_complete(tp);
            self.fetch.check_and_complete(tp);
        }
        removed
    }

    /// The partition `tp`, or why it cannot be used.
    pub fn partition(&self, tp: &TopicPartition) -> Result<Arc<Partition>, ErrorCode> {
        self.partitions.get_partition_or_error(tp)
    }

    /// The produce purgatory (for its gauges).
    pub fn produce_purgatory(&self) -> &ProducePurgatory {
        &self.produce
    }

    /// The fetch purgatory (for its gauges).
    pub fn fetch_purgatory(&self) -> &FetchPurgatory {
        &self.fetch
    }

    /// The clock both purgatories run on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        self.produce.clock()
    }

    /// Expires what is due in both purgatories; true if either did anything.
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        let produce = self.produce.advance_clock(timeout);
        let fetch = self.fetch.advance_clock(timeout);
        produce || fetch
    }

    /// Appends `entries` on their leaders and answers through `callback`: at
    /// once for `acks` 0 or 1 or when every append failed, else when the
    /// followers have the records or `timeout` passes. Returns whether it
    /// answered at once.
    ///
    /// A partition named more than once is not written and answers
    /// `INVALID_REQUEST` (its response has one entry per partition); once
    /// [`shutdown`](Self::shutdown) has returned, nothing is written and
    /// every partition answers `BROKER_NOT_AVAILABLE`.
    pub fn append_records(
        &self,
        timeout: Duration,
        acks: Acks,
        entries: Vec<(TopicPartition, Records)>,
        callback: impl FnOnce(ProduceResponse) + Send + 'static,
    ) -> bool {
        let mut results = BTreeMap::new();
        let refused = self.refusals(entries.iter().map(|(tp, _)| tp));
        for (tp, records) in entries {
            if let Some(&error) = refused.get(&tp) {
                results.insert(tp, Err(error));
                continue;
            }
            let result = self
                .partitions
                .get_partition_or_error(&tp)
                .and_then(|p| p.append(&records, acks == Acks::All));
            if let Ok(info) = &result {
                self.after_append(&tp, info.hw_advanced);
            }
            results.insert(tp, result);
        }
        let any_appended = results.values().any(Result::is_ok);
        if acks != Acks::All || !any_appended {
            let response = results
                .into_iter()
                .map(|(tp, result)| {
                    let response = match result {
                        Ok(info) => PartitionResponse {
                            error: ErrorCode::None,
                            base_offset: Some(info.base_offset),
                        },
                        Err(error) => PartitionResponse {
                            error,
                            base_offset: None,
                        },
                    };
                    (tp, response)
                })
                .collect();
            callback(response);
            return true;
        }
        let status: BTreeMap<_, _> = results
            .into_iter()
            .map(|(tp, result)| (tp, ProducePartitionStatus::after_append(result)))
            .collect();
        let keys: Vec<_> = status.keys().cloned().collect();
        let op = Operation::new(DelayedProduce::new(
            timeout,
            Arc::clone(&self.partitions),
            status,
            Callback::new(callback),
        ));
        watch_or_answer(&self.produce, op, keys)
    }

    /// Serves a fetch through `callback`: at once if it can be answered now
    /// (`max_wait` zero, an error, or at least `min_bytes` read: the bytes
    /// actually read, so a first record larger than `max_bytes` counts
    /// whole, as in Kafka's `fetchMessages`), else when it can or
    /// `max_wait` passes. A follower's fetch first records its position; a
    /// fetch from a replica a partition does not have reads nothing there
    /// and answers `NOT_LEADER_OR_FOLLOWER` for it. Returns whether it
    /// answered at once.
    ///
    /// A partition named more than once answers `INVALID_REQUEST`, and the
    /// fetch is answered at once; once [`shutdown`](Self::shutdown) has
    /// returned, every partition answers `BROKER_NOT_AVAILABLE`.
    pub fn fetch_messages(
        &self,
        params: FetchParams,
        partitions: Vec<(TopicPartition, PartitionFetch)>,
        callback: impl FnOnce(FetchResponse) + Send + 'static,
    ) -> bool {
        let refused = self.refusals(partitions.iter().map(|(tp, _)| tp));
        if !refused.is_empty() {
            let (refused_parts, readable): (Vec<_>, Vec<_>) = partitions
                .into_iter()
                .partition(|(tp, _)| refused.contains_key(tp));
            let mut response = read_partitions(&self.partitions, &params, &readable, None);
            for (tp, fetch) in refused_parts {
                let read = failed_read(refused[&tp], &fetch);
                response.insert(tp, read);
            }
            callback(response);
            return true;
        }
        if let Some(replica) = params.replica_id {
            for (tp, fetch) in &partitions {
                // An unknown partition or replica, or a bad offset, shows in
                // the read (at once or at completion).
                let _ = self.follower_fetch_ack(replica, tp, fetch.fetch_offset);
            }
        }
        // Read now, and answer with that read if it can be the answer. The
        // delayed fetch reads again when it completes.
        let read = read_partitions(&self.partitions, &params, &partitions, None);
        let failed = read.values().any(|r| !r.error.is_none());
        let bytes: u64 = read.values().map(|r| r.records.bytes).sum();
        if params.max_wait.is_zero() || partitions.is_empty() || failed || bytes >= params.min_bytes
        {
            callback(read);
            return true;
        }
        let keys: Vec<_> = partitions.iter().map(|(tp, _)| tp.clone()).collect();
        let op = Operation::new(DelayedFetch::new(
            params,
            partitions,
            Arc::clone(&self.partitions),
            Callback::new(callback),
        ));
        watch_or_answer(&self.fetch, op, keys)
    }

    /// Records that follower `replica` fetched `tp` from `fetch_offset` (so it
    /// has everything before it), and completes what an HW advance satisfies.
    /// Returns whether the HW advanced.
    pub fn follower_fetch_ack(
        &self,
        replica: ReplicaId,
        tp: &TopicPartition,
        fetch_offset: u64,
    ) -> Result<bool, ErrorCode> {
        let advanced = self.partition(tp)?.update_follower(replica, fetch_offset)?;
        if advanced {
            self.on_hw_advanced(tp);
        }
        Ok(advanced)
    }

    /// Puts a follower in or out of the ISR; a shrink may advance the HW and
    /// complete waiting produces. Returns whether the HW advanced. A
    /// follower behind the HW cannot join (`INELIGIBLE_REPLICA`, see
    /// [`Partition::set_in_sync`]).
    pub fn set_in_sync(
        &self,
        tp: &TopicPartition,
        replica: ReplicaId,
        in_sync: bool,
    ) -> Result<bool, ErrorCode> {
        let advanced = self.partition(tp)?.set_in_sync(replica, in_sync)?;
        if advanced {
            self.on_hw_advanced(tp);
        }
        Ok(advanced)
    }

    /// Changes this broker's role for `tp`; operations waiting on it complete
    /// (with `NOT_LEADER_OR_FOLLOWER` or `KAFKA_STORAGE_ERROR`).
    pub fn set_partition_role(&self, tp: &TopicPartition, role: PartitionRole) {
        // Look the partition up even when offline: this may bring it back.
        if let Some(partition) = self.partitions.get(tp) {
            partition.set_role(role);
        }
        self.produce.check_and_complete(tp);
        self.fetch.check_and_complete(tp);
    }

    /// Shuts both purgatories down and answers every operation still
    /// pending, so that no client waits for ever: a produce with its
    /// partitions still waiting at `REQUEST_TIMED_OUT` (written here, not
    /// known to be replicated), a fetch with what it can read now. Returns
    /// how many were pending. Under [`ShutdownPolicy::Expire`] they expire
    /// (and count so); under [`ShutdownPolicy::Drop`] they are cancelled,
    /// then completed by force to answer their clients (the purgatory's
    /// stats count them cancelled). Later produces and fetches answer
    /// `BROKER_NOT_AVAILABLE`. A call made while another is under way waits
    /// until that one has answered every client, and returns 0; as for
    /// [`Purgatory::shutdown`], call it holding no lock a response
    /// callback may need. Dropping the replica manager shuts it down.
    pub fn shutdown(&self) -> usize {
        let Some(_finishing) = self.shutdown_gate.enter() else {
            self.shutdown_gate.wait_finished();
            return 0;
        };
        let produces = self.produce.shutdown();
        let fetches = self.fetch.shutdown();
        // Under the `Expire` policy they have been answered already.
        for op in &produces {
            op.force_complete();
        }
        for op in &fetches {
            op.force_complete();
        }
        produces.len() + fetches.len()
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    pub fn is_shut_down(&self) -> bool {
        self.produce.is_shut_down() || self.fetch.is_shut_down()
    }

    /// The partitions of a request that it refuses, and why: every one once
    /// shut down (`BROKER_NOT_AVAILABLE`), else those named more than once
    /// (`INVALID_REQUEST`: their entries disagree on what to do).
    fn refusals<'a>(
        &self,
        names: impl Iterator<Item = &'a TopicPartition>,
    ) -> BTreeMap<TopicPartition, ErrorCode> {
        if self.is_shut_down() {
            return names
                .map(|tp| (tp.clone(), ErrorCode::BrokerNotAvailable))
                .collect();
        }
        let mut seen = BTreeSet::new();
        names
            .filter(|tp| !seen.insert(*tp))
            .map(|tp| (tp.clone(), ErrorCode::InvalidRequest))
            .collect()
    }

    fn after_append(&self, tp: &TopicPartition, hw_advanced: bool) {
        // Followers long-poll up to the log end, which just moved.
        self.fetch.check_and_complete(tp);
        if hw_advanced {
            self.produce.check_and_complete(tp);
        }
    }

    fn on_hw_advanced(&self, tp: &TopicPartition) {
        self.produce.check_and_complete(tp);
        self.fetch.check_and_complete(tp);
    }
}

#[cfg(test)]
mod fetch_tests;
