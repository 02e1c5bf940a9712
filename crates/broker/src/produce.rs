//! `DelayedProduce`: a produce with `acks=-1` waiting for the followers.
//!
//! Kafka's semantics (`DelayedProduce.scala`):
//! - one status per partition written, set at construction: a partition whose
//!   local append succeeded waits for
//!   `required_offset = last appended offset + 1`, with its response error
//!   **preset to `REQUEST_TIMED_OUT`** (what the producer gets if the
//!   operation expires); a partition whose append failed is not pending and
//!   keeps its error;
//! - keys: one per partition of the request; follower fetches that advance a
//!   partition's high watermark call `check_and_complete` on it;
//! - `try_complete`: for each pending partition, look it up; if it is gone
//!   (also: removed and hosted again, a new log) or offline, or this broker
//!   lost leadership, the partition is done with that error; if its HW reached the required offset it is done with `NONE` (or
//!   `NOT_ENOUGH_REPLICAS_AFTER_APPEND` if the ISR shrank below
//!   `min.insync.replicas`); the operation completes when no partition is
//!   pending;
//! - `on_complete` answers every partition at once; on timeout the partitions
//!   still pending answer `REQUEST_TIMED_OUT`.
//!
//! Invariant: a partition's status only goes from pending to done, never
//! back, and the callback is called exactly once.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use log::debug;
use parking_lot::Mutex;
use purgatory::DelayedOperation;

use crate::error::ErrorCode;
use crate::partition::{AppendInfo, PartitionRegistry, TopicPartition};
use crate::response::Callback;

/// How many acknowledgements a produce waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: no answer awaited (the model still answers at once).
    None,
    /// `acks=1`: the leader's append is enough.
    Leader,
    /// `acks=-1` (all): wait until the in-sync replicas have the records.
    All,
}

/// One partition's answer to a produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionResponse {
    /// `NONE` on success.
    pub error: ErrorCode,
    /// Offset of the first record written, if the append succeeded.
    pub base_offset: Option<u64>,
}

/// A produce response: one answer per partition written.
pub type ProduceResponse = BTreeMap<TopicPartition, PartitionResponse>;

/// Kafka's `ProducePartitionStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducePartitionStatus {
    /// The log written to ([`Partition::log_id`](crate::Partition::log_id)):
    /// only that log's HW acknowledges the write.
    pub log_id: u64,
    /// The HW the partition must reach: last appended offset + 1.
    pub required_offset: u64,
    /// Whether the partition still waits for its followers.
    pub acks_pending: bool,
    /// The answer so far (preset to `REQUEST_TIMED_OUT` while pending).
    pub response: PartitionResponse,
}

impl ProducePartitionStatus {
    /// The initial status after the local append's `result`.
    pub fn after_append(result: Result<AppendInfo, ErrorCode>) -> Self {
        match result {
            Ok(AppendInfo {
                log_id,
                base_offset,
                last_offset: Some(last_offset),
                ..
            }) => ProducePartitionStatus {
                log_id,
                required_offset: last_offset + 1,
                acks_pending: true,
                response: PartitionResponse {
                    error: ErrorCode::RequestTimedOut,
                    base_offset: Some(base_offset),
                },
            },
            // Nothing written, so nothing to wait for (Kafka's required
            // offset is then 0, reached at once).
            Ok(AppendInfo {
                log_id,
                base_offset,
                last_offset: None,
                ..
            }) => ProducePartitionStatus {
                log_id,
                required_offset: 0,
                acks_pending: false,
                response: PartitionResponse {
                    error: ErrorCode::None,
                    base_offset: Some(base_offset),
                },
            },
            Err(error) => ProducePartitionStatus {
                log_id: 0,
                required_offset: 0,
                acks_pending: false,
                response: PartitionResponse {
                    error,
                    base_offset: None,
                },
            },
        }
    }
}

/// A produce with `acks=-1` waiting in the produce purgatory.
pub struct DelayedProduce {
    timeout: Duration,
    partitions: Arc<PartitionRegistry>,
    status: Mutex<BTreeMap<TopicPartition, ProducePartitionStatus>>,
    callback: Callback<ProduceResponse>,
}

impl DelayedProduce {
    /// A delayed produce over `status` (one entry per partition written),
    /// expiring after `timeout` (the request's `timeoutMs`).
    pub fn new(
        timeout: Duration,
        partitions: Arc<PartitionRegistry>,
        status: BTreeMap<TopicPartition, ProducePartitionStatus>,
        callback: Callback<ProduceResponse>,
    ) -> Self {
        DelayedProduce {
            timeout,
            partitions,
            status: Mutex::new(status),
            callback,
        }
    }

    /// The partitions written: the keys to watch.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.status.lock().keys().cloned().collect()
    }

    /// The per-partition status now.
    pub fn status(&self) -> BTreeMap<TopicPartition, ProducePartitionStatus> {
        self.status.lock().clone()
    }

    /// The partitions still waiting for their followers.
    pub fn pending_partitions(&self) -> Vec<TopicPartition> {
        self.status
            .lock()
            .iter()
            .filter(|(_, s)| s.acks_pending)
            .map(|(tp, _)| tp.clone())
            .collect()
    }
}

impl DelayedOperation for DelayedProduce {
    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn try_complete(&self) -> bool {
        let mut status = self.status.lock();
        for (tp, status) in status.iter_mut().filter(|(_, s)| s.acks_pending) {
            let (done, error) = match self.partitions.get_partition_or_error(tp) {
                Err(error) => (true, error),
                // Removed and hosted again: the log written to is gone.
                Ok(partition) if partition.log_id() != status.log_id => {
                    (true, ErrorCode::UnknownTopicOrPartition)
                }
                Ok(partition) => {
                    let (enough, error) =
                        partition.check_enough_replicas_reach_offset(status.required_offset);
                    (enough || !error.is_none(), error)
                }
            };
            if done {
                status.acks_pending = false;
                status.response.error = error;
            }
        }
        !status.values().any(|s| s.acks_pending)
    }

    fn on_complete(&self) {
        let response = self
            .status
            .lock()
            .iter()
            .map(|(tp, s)| (tp.clone(), s.response))
            .collect();
        self.callback.call(response);
    }

    fn on_expiration(&self) {
        // Kafka marks its ExpiresPerSec meters here, per pending partition.
        let pending = self.pending_partitions();
        debug!(
            "produce expired with {} partition(s) pending: {pending:?}",
            pending.len()
        );
    }
}

impl fmt::Debug for DelayedProduce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedProduce")
            .field("timeout", &self.timeout)
            .field("status", &*self.status.lock())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! DelayedProduce on a manual clock, through the replica manager.
    use super::*;
    use crate::partition::PartitionRole;
    use crate::records::Records;
    use crate::replica_manager::ReplicaManager;
    use crate::response::ResponseSlot;
    use timer::ManualClock;

    const TIMEOUT_MS: u64 = 100;

    struct Fixture {
        clock: ManualClock,
        rm: ReplicaManager,
        tps: Vec<TopicPartition>,
    }

    impl Fixture {
        /// Two partitions, each with followers 1 and 2, min ISR 2.
        fn new() -> Self {
            let clock = ManualClock::new();
            let rm = ReplicaManager::with_manual_clock(&clock).unwrap();
            let tps: Vec<_> = (0..2).map(|p| TopicPartition::new("t", p)).collect();
            for tp in &tps {
                rm.add_partition(tp.clone(), &[1, 2], 2).unwrap();
            }
            Fixture { clock, rm, tps }
        }

        fn produce(&self, tps: &[TopicPartition], records: usize) -> ResponseSlot<ProduceResponse> {
            let slot = ResponseSlot::new();
            let entries = tps
                .iter()
                .map(|tp| (tp.clone(), Records::uniform(records, 10)))
                .collect();
            self.rm.append_records(
                Duration::from_millis(TIMEOUT_MS),
                Acks::All,
                entries,
                slot.callback(),
            );
            slot
        }

        fn at(&self, ms: u64) {
            self.clock.set_ms(ms);
            while self.rm.advance_clock(Duration::ZERO) {}
        }

        fn replicate(&self, tp: &TopicPartition, replica: u32, offset: u64) {
            self.rm.follower_fetch_ack(replica, tp, offset).unwrap();
        }

        /// The produce purgatory's (watched, delayed) gauges; a completed
        /// operation leaves the watch lists of all its keys at once.
        fn gauges(&self) -> (usize, usize) {
            let p = self.rm.produce_purgatory();
            (p.watched(), p.delayed())
        }
    }

    fn answer(error: ErrorCode, base_offset: Option<u64>) -> PartitionResponse {
        PartitionResponse { error, base_offset }
    }

    #[test]
    fn completed_when_every_partition_is_replicated() {
        let f = Fixture::new();
        let slot = f.produce(&f.tps, 5);
        assert!(!slot.is_ready());
        assert_eq!(f.gauges(), (2, 1), "watched under both partitions");
        for replica in [1, 2] {
            f.replicate(&f.tps[0], replica, 5);
        }
        f.replicate(&f.tps[1], 1, 5);
        assert!(!slot.is_ready(), "partition 1 still waits for replica 2");
        f.replicate(&f.tps[1], 2, 3);
        assert!(!slot.is_ready(), "HW 3 < required offset 5");
        f.replicate(&f.tps[1], 2, 5);
        let response = slot.take().expect("completed by the follower fetch");
        assert_eq!(response[&f.tps[0]], answer(ErrorCode::None, Some(0)));
        assert_eq!(response[&f.tps[1]], answer(ErrorCode::None, Some(0)));
        assert_eq!(f.gauges(), (0, 0));
        f.at(TIMEOUT_MS * 2);
        assert_eq!(slot.deliveries(), 1);
    }

    #[test]
    fn timeout_answers_request_timed_out_for_pending_partitions() {
        let f = Fixture::new();
        // A first write so the second one's offsets start at 3.
        let first = f.produce(&f.tps[..1], 3);
        f.replicate(&f.tps[0], 1, 3);
        f.replicate(&f.tps[0], 2, 3);
        assert!(first.is_ready());
        let slot = f.produce(&f.tps, 2);
        f.replicate(&f.tps[0], 1, 5);
        f.replicate(&f.tps[0], 2, 5);
        f.at(TIMEOUT_MS - 1);
        assert!(!slot.is_ready());
        f.at(TIMEOUT_MS + 1);
        let response = slot.take().expect("expired");
        assert_eq!(response[&f.tps[0]], answer(ErrorCode::None, Some(3)));
        assert_eq!(
            response[&f.tps[1]],
            answer(ErrorCode::RequestTimedOut, Some(0))
        );
        assert_eq!(f.gauges(), (0, 0));
    }

    #[test]
    fn append_errors_and_leadership_loss_complete_with_errors() {
        let f = Fixture::new();
        let unknown = TopicPartition::new("nope", 0);
        let slot = f.produce(&[f.tps[0].clone(), unknown.clone()], 1);
        assert!(!slot.is_ready(), "one partition appended, so it waits");
        f.rm.set_partition_role(&f.tps[0], PartitionRole::Follower);
        let response = slot.take().expect("completed by the leadership change");
        assert_eq!(response[&f.tps[0]].error, ErrorCode::NotLeaderOrFollower);
        assert_eq!(
            response[&unknown],
            answer(ErrorCode::UnknownTopicOrPartition, None)
        );
        assert_eq!(f.gauges(), (0, 0));
    }

    #[test]
    fn all_appends_failing_or_acks_1_answer_at_once() {
        let f = Fixture::new();
        let slot = f.produce(&[TopicPartition::new("nope", 0)], 1);
        assert_eq!(
            slot.take().unwrap().values().next().unwrap().error,
            ErrorCode::UnknownTopicOrPartition
        );
        let slot = ResponseSlot::new();
        f.rm.append_records(
            Duration::from_millis(TIMEOUT_MS),
            Acks::Leader,
            vec![(f.tps[0].clone(), Records::uniform(1, 1))],
            slot.callback(),
        );
        assert_eq!(
            slot.take().unwrap()[&f.tps[0]],
            answer(ErrorCode::None, Some(0))
        );
        assert_eq!(f.gauges(), (0, 0));
    }

    #[test]
    fn an_empty_produce_answers_at_once_at_the_log_end() {
        let f = Fixture::new();
        let slot = f.produce(&f.tps[..1], 0);
        assert_eq!(
            slot.take().expect("nothing to replicate")[&f.tps[0]],
            answer(ErrorCode::None, Some(0))
        );
        // On a log with unreplicated records, it waits for none of them.
        let waiting = f.produce(&f.tps[..1], 3);
        let slot = f.produce(&f.tps, 0);
        let response = slot.take().expect("nothing to replicate");
        assert_eq!(response[&f.tps[0]], answer(ErrorCode::None, Some(3)));
        assert_eq!(response[&f.tps[1]], answer(ErrorCode::None, Some(0)));
        assert!(!waiting.is_ready());
        assert_eq!(f.gauges(), (1, 1));
    }

    #[test]
    fn a_partition_named_twice_is_refused_and_not_written() {
        let f = Fixture::new();
        let slot = ResponseSlot::new();
        let entries = vec![
            (f.tps[0].clone(), Records::uniform(3, 10)),
            (f.tps[1].clone(), Records::uniform(1, 10)),
            (f.tps[0].clone(), Records::uniform(2, 10)),
        ];
        let timeout = Duration::from_millis(TIMEOUT_MS);
        f.rm.append_records(timeout, Acks::Leader, entries, slot.callback());
        let response = slot.take().expect("acks=1 answers at once");
        assert_eq!(response[&f.tps[0]], answer(ErrorCode::InvalidRequest, None));
        assert_eq!(response[&f.tps[1]], answer(ErrorCode::None, Some(0)));
        assert_eq!(f.rm.partition(&f.tps[0]).unwrap().log_end_offset(), 0);
    }

    #[test]
    fn removing_a_partition_answers_the_produces_waiting_on_it() {
        let f = Fixture::new();
        let slot = f.produce(&f.tps, 2);
        assert!(f.rm.remove_partition(&f.tps[1]).is_some());
        f.replicate(&f.tps[0], 1, 2);
        f.replicate(&f.tps[0], 2, 2);
        let response = slot.take().expect("nothing left to wait for");
        assert_eq!(response[&f.tps[0]], answer(ErrorCode::None, Some(0)));
        assert_eq!(
            response[&f.tps[1]].error,
            ErrorCode::UnknownTopicOrPartition
        );
        assert_eq!(f.gauges(), (0, 0));
        assert!(f.rm.remove_partition(&f.tps[1]).is_none());
        // Hosted again: a new, empty log.
        let again = f.rm.add_partition(f.tps[1].clone(), &[1, 2], 2).unwrap();
        assert_eq!(again.log_end_offset(), 0);
        assert_eq!(
            f.rm.add_partition(f.tps[1].clone(), &[1], 1).map(|_| ()),
            Err(ErrorCode::TopicAlreadyExists)
        );
    }

    #[test]
    fn a_write_to_a_removed_log_is_never_acknowledged_by_its_successor() {
        let f = Fixture::new();
        // Written to the first log; its produce is not watched yet when the
        // partition is removed and hosted again.
        let old = f.rm.partition(&f.tps[0]).unwrap();
        let status =
            ProducePartitionStatus::after_append(old.append(&Records::uniform(3, 10), true));
        f.rm.remove_partition(&f.tps[0]).unwrap();
        f.rm.add_partition(f.tps[0].clone(), &[1, 2], 2).unwrap();
        f.produce(&f.tps[..1], 3);
        f.replicate(&f.tps[0], 1, 3);
        f.replicate(&f.tps[0], 2, 3);
        let slot = ResponseSlot::new();
        let op = DelayedProduce::new(
            Duration::from_millis(TIMEOUT_MS),
            Arc::clone(f.rm.partitions()),
            [(f.tps[0].clone(), status)].into(),
            Callback::new(slot.callback()),
        );
        assert!(op.try_complete(), "its log is gone");
        op.on_complete();
        assert_eq!(
            slot.take().unwrap()[&f.tps[0]].error,
            ErrorCode::UnknownTopicOrPartition
        );
    }

    #[test]
    fn shutdown_answers_pending_produces_and_refuses_later_ones() {
        let f = Fixture::new();
        let slot = f.produce(&f.tps[..1], 2);
        assert_eq!(f.rm.shutdown(), 1);
        assert_eq!(
            slot.take().expect("answered at shutdown")[&f.tps[0]],
            answer(ErrorCode::RequestTimedOut, Some(0))
        );
        assert_eq!(slot.deliveries(), 1);
        let stats = f.rm.produce_purgatory().stats();
        assert_eq!(
            (stats.expired, stats.cancelled, stats.completed),
            (1, 0, 0),
            "counted as what it was: timed out by the shutdown"
        );
        let later = f.produce(&f.tps[..1], 2);
        assert_eq!(
            later.take().expect("answered at once")[&f.tps[0]],
            answer(ErrorCode::BrokerNotAvailable, None)
        );
        assert_eq!(f.rm.partition(&f.tps[0]).unwrap().log_end_offset(), 2);
        assert_eq!(f.rm.shutdown(), 0);
    }

    #[test]
    fn dropping_the_replica_manager_answers_pending_produces() {
        let f = Fixture::new();
        let slot = f.produce(&f.tps[..1], 2);
        let tp = f.tps[0].clone();
        drop(f);
        assert_eq!(
            slot.take().expect("answered at the drop")[&tp],
            answer(ErrorCode::RequestTimedOut, Some(0))
        );
        assert_eq!(slot.deliveries(), 1);
    }

    #[test]
    fn isr_shrink_completes_with_not_enough_replicas_after_append() {
        let f = Fixture::new();
        let slot = f.produce(&f.tps[..1], 1);
        f.rm.set_in_sync(&f.tps[0], 1, false).unwrap();
        assert!(!slot.is_ready(), "replica 2 still holds the HW back");
        f.rm.set_in_sync(&f.tps[0], 2, false).unwrap();
        let response = slot.take().expect("HW advanced on the ISR shrink");
        assert_eq!(
            response[&f.tps[0]].error,
            ErrorCode::NotEnoughReplicasAfterAppend
        );
    }

    #[test]
    fn race_replication_and_timeout_in_the_same_millisecond() {
        // Replication first, then the timer: completed by the trigger.
        let f = Fixture::new();
        let slot = f.produce(&f.tps[..1], 1);
        f.clock.set_ms(TIMEOUT_MS);
        f.replicate(&f.tps[0], 1, 1);
        f.replicate(&f.tps[0], 2, 1);
        f.at(TIMEOUT_MS + 1);
        assert_eq!(slot.take().unwrap()[&f.tps[0]].error, ErrorCode::None);
        assert_eq!(slot.deliveries(), 1);

        // The timer first, then replication: timed out, answered once.
        let f = Fixture::new();
        let slot = f.produce(&f.tps[..1], 1);
        f.at(TIMEOUT_MS + 1);
        f.replicate(&f.tps[0], 1, 1);
        f.replicate(&f.tps[0], 2, 1);
        assert_eq!(
            slot.take().unwrap()[&f.tps[0]].error,
            ErrorCode::RequestTimedOut
        );
        assert_eq!(slot.deliveries(), 1);
        assert_eq!(f.gauges(), (0, 0));
    }

    #[test]
    fn race_on_two_threads_answers_exactly_once() {
        for round in 0..200 {
            let f = Fixture::new();
            let slot = f.produce(&f.tps[..1], 1);
            f.replicate(&f.tps[0], 1, 1);
            f.clock.set_ms(TIMEOUT_MS + 1);
            std::thread::scope(|s| {
                s.spawn(|| f.replicate(&f.tps[0], 2, 1));
                s.spawn(|| while f.rm.advance_clock(Duration::ZERO) {});
            });
            assert_eq!(slot.deliveries(), 1, "round {round}");
            let error = slot.take().unwrap()[&f.tps[0]].error;
            assert!(
                matches!(error, ErrorCode::None | ErrorCode::RequestTimedOut),
                "round {round}: {error}"
            );
            assert_eq!(f.gauges(), (0, 0), "round {round}");
        }
    }
}
