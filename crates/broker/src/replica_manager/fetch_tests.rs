//! The replica manager's fetch path: `DelayedFetch` on a manual clock.
use std::time::Duration;

use crate::error::ErrorCode;
use crate::fetch::{FetchParams, FetchResponse, PartitionFetch};
use crate::partition::PartitionRole;
use crate::partition::{Partition, ReplicaId, TopicPartition};
use crate::produce::Acks;
use crate::records::Records;
use crate::replica_manager::ReplicaManager;
use crate::response::ResponseSlot;
use timer::ManualClock;

const MAX_WAIT_MS: u64 = 500;

struct Fixture {
    clock: ManualClock,
    rm: ReplicaManager,
    tp: TopicPartition,
}

impl Fixture {
    /// One partition with no follower (HW follows the LEO) unless asked.
    fn new(followers: &[ReplicaId]) -> Self {
        let clock = ManualClock::new();
        let rm = ReplicaManager::with_manual_clock(&clock).unwrap();
        let tp = TopicPartition::new("t", 0);
        rm.add_partition(tp.clone(), followers, 1).unwrap();
        Fixture { clock, rm, tp }
    }

    fn append(&self, records: usize, bytes: u32) {
        self.rm.append_records(
            Duration::from_secs(30),
            Acks::Leader,
            vec![(self.tp.clone(), Records::uniform(records, bytes))],
            |_| {},
        );
    }

    fn fetch(
        &self,
        params: FetchParams,
        fetch_offset: u64,
        max_bytes: u64,
    ) -> ResponseSlot<FetchResponse> {
        let slot = ResponseSlot::new();
        let partitions = vec![(
            self.tp.clone(),
            PartitionFetch {
                fetch_offset,
                max_bytes,
            },
        )];
        self.rm.fetch_messages(params, partitions, slot.callback());
        slot
    }

    fn consumer(&self, min_bytes: u64) -> FetchParams {
        FetchParams::consumer(Duration::from_millis(MAX_WAIT_MS), min_bytes)
    }

    fn at(&self, ms: u64) {
        self.clock.set_ms(ms);
        while self.rm.advance_clock(Duration::ZERO) {}
    }

    fn gauges(&self) -> (usize, usize) {
        let p = self.rm.fetch_purgatory();
        (p.watched(), p.delayed())
    }
}

#[test]
fn a_fetch_from_a_replica_the_partition_lacks_reads_nothing() {
    let f = Fixture::new(&[1]);
    f.append(4, 10);
    assert_eq!(f.rm.partition(&f.tp).unwrap().high_watermark(), 0);
    for replica in [99, crate::partition::LEADER_ID] {
        let params = FetchParams::follower(replica, Duration::from_millis(MAX_WAIT_MS), 1);
        let read = f.fetch(params, 0, 1000).take().expect("answered at once")[&f.tp];
        assert_eq!(
            read.error,
            ErrorCode::NotLeaderOrFollower,
            "replica {replica}"
        );
        assert_eq!(read.records.bytes, 0);
    }
    let params = FetchParams::follower(1, Duration::from_millis(MAX_WAIT_MS), 1);
    let read = f.fetch(params, 0, 1000).take().expect("answered at once")[&f.tp];
    assert_eq!((read.error, read.records.bytes), (ErrorCode::None, 40));
    assert_eq!(f.gauges(), (0, 0));
}

#[test]
fn a_partition_named_twice_is_refused_and_counts_no_bytes() {
    let f = Fixture::new(&[]);
    let other = TopicPartition::new("u", 0);
    f.rm.add_partition(other.clone(), &[], 1).unwrap();
    f.append(6, 10);
    let fetch = |fetch_offset| PartitionFetch {
        fetch_offset,
        max_bytes: 1000,
    };
    let slot = ResponseSlot::new();
    let partitions = vec![
        (f.tp.clone(), fetch(0)),
        (other.clone(), fetch(0)),
        (f.tp.clone(), fetch(2)),
    ];
    assert!(f
        .rm
        .fetch_messages(f.consumer(100), partitions, slot.callback()));
    let response = slot.take().expect("answered at once");
    assert_eq!(response.len(), 2);
    assert_eq!(response[&f.tp].error, ErrorCode::InvalidRequest);
    assert_eq!(response[&f.tp].records.bytes, 0);
    assert_eq!(response[&other].error, ErrorCode::None);
    assert_eq!(f.gauges(), (0, 0));
}

#[test]
fn removal_and_shutdown_answer_waiting_fetches() {
    let f = Fixture::new(&[]);
    let slot = f.fetch(f.consumer(1000), 0, 1 << 20);
    assert!(f.rm.remove_partition(&f.tp).is_some());
    let read = slot.take().expect("answered at the removal")[&f.tp];
    assert_eq!(read.error, ErrorCode::UnknownTopicOrPartition);
    f.rm.add_partition(f.tp.clone(), &[], 1).unwrap();
    f.append(2, 10);
    let slot = f.fetch(f.consumer(1000), 0, 1 << 20);
    assert_eq!(f.rm.shutdown(), 1);
    let read = slot.take().expect("answered at shutdown")[&f.tp];
    assert_eq!((read.error, read.records.bytes), (ErrorCode::None, 20));
    let later = f.fetch(f.consumer(1), 0, 1 << 20);
    let read = later.take().expect("answered at once")[&f.tp];
    assert_eq!(
        (read.error, read.records.bytes),
        (ErrorCode::BrokerNotAvailable, 0)
    );
}

#[test]
fn a_delayed_fetch_never_reads_a_log_hosted_after_it_was_made() {
    // Removal and re-hosting straight on the registry, with no check of
    // the waiting fetch in between: the window a concurrent
    // `remove_partition` and `add_partition` leave open.
    let f = Fixture::new(&[]);
    let other = TopicPartition::new("u", 0);
    f.rm.add_partition(other.clone(), &[], 1).unwrap();
    f.append(2, 10);
    let fetch = |fetch_offset| PartitionFetch {
        fetch_offset,
        max_bytes: 1000,
    };
    let slot = ResponseSlot::new();
    let partitions = vec![(f.tp.clone(), fetch(2)), (other.clone(), fetch(0))];
    assert!(!f
        .rm
        .fetch_messages(f.consumer(1000), partitions, slot.callback()));
    let registry = f.rm.partitions();
    let old_log = registry.remove(&f.tp).unwrap().log_id();
    let new = registry
        .insert(Partition::new(f.tp.clone(), &[], 1).unwrap())
        .unwrap();
    assert_ne!(new.log_id(), old_log);
    new.append(&Records::uniform(5, 10), false).unwrap();
    assert!(slot.take().is_none(), "nothing checked the fetch yet");
    // Any check now answers: the log it was made on is gone.
    assert_eq!(f.rm.fetch_purgatory().check_and_complete(&other), 1);
    let response = slot.take().expect("answered at the check");
    assert_eq!(
        (response[&f.tp].error, response[&f.tp].records.bytes),
        (ErrorCode::UnknownTopicOrPartition, 0)
    );
    assert_eq!(response[&other].error, ErrorCode::None);
    assert_eq!(f.gauges(), (0, 0));
    // A fetch made now reads the new log.
    let read = f
        .fetch(f.consumer(1), 2, 1000)
        .take()
        .expect("answered at once")[&f.tp];
    assert_eq!((read.error, read.records.bytes), (ErrorCode::None, 30));
}

#[test]
fn completed_once_appends_reach_min_bytes() {
    let f = Fixture::new(&[]);
    let slot = f.fetch(f.consumer(1000), 0, 1 << 20);
    assert!(!slot.is_ready());
    assert_eq!(f.rm.fetch_purgatory().watched(), 1);
    for t in 1..=3 {
        f.at(t * 100);
        f.append(3, 100);
        assert!(!slot.is_ready(), "{} bytes < 1000", t * 300);
    }
    f.at(400);
    f.append(3, 100);
    let read = slot.take().expect("1200 bytes >= 1000")[&f.tp];
    assert_eq!(read.error, ErrorCode::None);
    assert_eq!(
        (read.records.first_offset, read.records.next_offset),
        (0, 12)
    );
    assert_eq!(read.records.bytes, 1200);
    assert_eq!(read.high_watermark, 12);
    assert_eq!(f.gauges(), (0, 0));
}

#[test]
fn max_wait_answers_with_what_is_there() {
    let f = Fixture::new(&[]);
    let slot = f.fetch(f.consumer(1000), 0, 1 << 20);
    f.at(100);
    f.append(2, 100);
    f.at(MAX_WAIT_MS - 1);
    assert!(!slot.is_ready());
    f.at(MAX_WAIT_MS + 1);
    let read = slot.take().expect("expired")[&f.tp];
    assert_eq!(
        (read.error, read.records.bytes, read.records.count()),
        (ErrorCode::None, 200, 2)
    );
    // An empty partition answers empty on max_wait.
    let slot = f.fetch(f.consumer(1), 2, 1 << 20);
    f.at(2 * MAX_WAIT_MS + 2);
    let read = slot.take().expect("expired")[&f.tp];
    assert_eq!(read.records, crate::records::FetchedRecords::empty(2));
    assert_eq!(f.gauges(), (0, 0));
}

#[test]
fn enough_bytes_or_no_wait_answer_at_once() {
    let f = Fixture::new(&[]);
    f.append(1, 100);
    assert!(f.fetch(f.consumer(100), 0, 1 << 20).is_ready());
    assert!(f
        .fetch(FetchParams::consumer(Duration::ZERO, 1000), 0, 1 << 20)
        .is_ready());
    // A waiting fetch's check caps what a partition contributes to
    // min_bytes at max_bytes (Kafka's `tryComplete`): 200 new bytes count
    // as 50 here.
    let capped = f.fetch(f.consumer(150), 1, 50);
    assert!(!capped.is_ready());
    f.append(2, 100);
    assert!(!capped.is_ready(), "max_bytes does not cap the check");
    f.at(MAX_WAIT_MS);
    let read = capped.take().expect("answered at max_wait")[&f.tp];
    assert_eq!(read.records.bytes, 100, "the first record, whole");
}

#[test]
fn consumers_wait_for_the_high_watermark_followers_for_the_log_end() {
    let f = Fixture::new(&[1]);
    let consumer = f.fetch(f.consumer(1), 0, 1 << 20);
    let follower = f.fetch(
        FetchParams::follower(1, Duration::from_millis(MAX_WAIT_MS), 1),
        0,
        1 << 20,
    );
    f.append(1, 10);
    assert!(follower.is_ready(), "the append moved the log end");
    assert!(!consumer.is_ready(), "the HW has not moved");
    // The follower's next fetch acknowledges offset 1: the HW moves.
    let next = f.fetch(
        FetchParams::follower(1, Duration::from_millis(MAX_WAIT_MS), 1),
        1,
        1 << 20,
    );
    assert!(!next.is_ready());
    let read = consumer.take().expect("HW advance completes the consumer")[&f.tp];
    assert_eq!((read.records.next_offset, read.high_watermark), (1, 1));
}

#[test]
fn a_consumer_past_the_high_watermark_waits_for_it_instead_of_resetting() {
    // Kafka: an offset between the HW and the log end is in range (a new
    // leader's HW may lag its consumers); the fetch long-polls.
    let f = Fixture::new(&[1]);
    f.append(4, 10);
    f.rm.follower_fetch_ack(1, &f.tp, 2).unwrap();
    assert_eq!(f.rm.partition(&f.tp).unwrap().high_watermark(), 2);
    let waiting = f.fetch(f.consumer(1), 3, 1 << 20);
    assert!(!waiting.is_ready(), "waits, as min_bytes is not there yet");
    f.rm.follower_fetch_ack(1, &f.tp, 3).unwrap();
    assert!(
        !waiting.is_ready(),
        "the HW reached the offset, no bytes yet"
    );
    f.rm.follower_fetch_ack(1, &f.tp, 4).unwrap();
    let read = waiting.take().expect("the HW passed the offset")[&f.tp];
    assert_eq!(
        (read.error, read.records.bytes, read.records.next_offset),
        (ErrorCode::None, 10, 4)
    );
    // Expiring there answers nothing, without an error.
    f.append(2, 10);
    let expiring = f.fetch(f.consumer(1), 5, 1 << 20);
    f.at(MAX_WAIT_MS);
    let read = expiring.take().expect("max_wait")[&f.tp];
    assert_eq!(
        (read.error, read.records.bytes, read.high_watermark),
        (ErrorCode::None, 0, 4)
    );
    assert_eq!(f.gauges(), (0, 0));
}

#[test]
fn errors_and_truncation_complete_at_once() {
    let f = Fixture::new(&[]);
    let waiting = f.fetch(f.consumer(1), 0, 1 << 20);
    f.rm.set_partition_role(&f.tp, PartitionRole::Follower);
    let read = waiting.take().expect("leadership change completes it")[&f.tp];
    assert_eq!(read.error, ErrorCode::NotLeaderOrFollower);
    f.rm.set_partition_role(&f.tp, PartitionRole::Leader);
    let beyond = f.fetch(f.consumer(1), 7, 1 << 20);
    assert_eq!(
        beyond.take().unwrap()[&f.tp].error,
        ErrorCode::OffsetOutOfRange
    );
    let unknown = ResponseSlot::new();
    let other = TopicPartition::new("other", 0);
    f.rm.fetch_messages(
        f.consumer(1),
        vec![(
            other.clone(),
            PartitionFetch {
                fetch_offset: 0,
                max_bytes: 1,
            },
        )],
        unknown.callback(),
    );
    assert_eq!(
        unknown.take().unwrap()[&other].error,
        ErrorCode::UnknownTopicOrPartition
    );
}

#[test]
fn race_append_and_max_wait_in_the_same_millisecond() {
    let f = Fixture::new(&[]);
    let slot = f.fetch(f.consumer(100), 0, 1 << 20);
    f.clock.set_ms(MAX_WAIT_MS);
    f.append(1, 100);
    f.at(MAX_WAIT_MS + 1);
    assert_eq!(slot.take().unwrap()[&f.tp].records.bytes, 100);
    assert_eq!(slot.deliveries(), 1);

    let f = Fixture::new(&[]);
    let slot = f.fetch(f.consumer(100), 0, 1 << 20);
    f.at(MAX_WAIT_MS + 1);
    f.append(1, 100);
    assert_eq!(
        slot.take().unwrap()[&f.tp].records.bytes,
        0,
        "expired first"
    );
    assert_eq!(slot.deliveries(), 1);
}

#[test]
fn race_on_two_threads_answers_exactly_once() {
    for round in 0..200 {
        let f = Fixture::new(&[]);
        let slot = f.fetch(f.consumer(100), 0, 1 << 20);
        f.clock.set_ms(MAX_WAIT_MS + 1);
        std::thread::scope(|s| {
            s.spawn(|| f.append(1, 100));
            s.spawn(|| while f.rm.advance_clock(Duration::ZERO) {});
        });
        assert_eq!(slot.deliveries(), 1, "round {round}");
        let bytes = slot.take().unwrap()[&f.tp].records.bytes;
        assert!(bytes == 0 || bytes == 100, "round {round}: {bytes}");
        assert_eq!(f.gauges(), (0, 0), "round {round}");
    }
}

/// The immediate answer counts the bytes actually read, as Kafka's
/// `fetchMessages` does: a first record larger than `max_bytes` is read
/// whole, and if that reaches `min_bytes` the fetch does not wait. (A
/// delayed fetch's check caps each partition at `max_bytes`, as Kafka's
/// `tryComplete` does.)
#[test]
fn a_first_record_larger_than_max_bytes_answers_at_once() {
    let f = Fixture::new(&[]);
    f.append(1, 100);
    let read = f
        .fetch(f.consumer(50), 0, 10)
        .take()
        .expect("answered at once")[&f.tp];
    assert_eq!((read.error, read.records.bytes), (ErrorCode::None, 100));
    f.append(3, 10);
    let read = f
        .fetch(f.consumer(1), 1, 0)
        .take()
        .expect("answered at once")[&f.tp];
    assert_eq!((read.records.count(), read.records.bytes), (1, 10));
    // Fewer bytes than asked for: it waits, and reads again when it ends.
    let slot = f.fetch(f.consumer(1_000), 0, 1_000);
    assert!(slot.take().is_none(), "answered at once");
    assert_eq!(f.gauges(), (1, 1));
    f.at(MAX_WAIT_MS);
    let read = slot.take().expect("answered at max_wait")[&f.tp];
    assert_eq!(read.records.bytes, 130);
    assert_eq!(f.gauges(), (0, 0));
}
