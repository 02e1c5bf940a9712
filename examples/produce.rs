//! A produce with `acks=-1` waiting in the produce purgatory for the followers.
//!
//! ```text
//! cargo run --example produce
//! ```
//!
//! Runs a scripted timeline on a manual clock (so the output is the same on
//! every run) and prints what happens and when:
//! 1. a produce to three partitions waits until the followers have fetched
//!    past the written records; one follower never catches up on one
//!    partition, so at the 100 ms timeout that partition answers
//!    `REQUEST_TIMED_OUT` while the other two answer `NONE`;
//! 2. the leader drops the lagging follower from the ISR, and the next produce
//!    completes as soon as the remaining follower has the records;
//! 3. a produce waiting when leadership moves away completes at once with
//!    `NOT_LEADER_OR_FOLLOWER`.

use std::sync::Arc;
use std::time::Duration;

use broker::{
    Acks, FetchParams, PartitionFetch, PartitionRole, ProduceResponse, Records, TopicPartition,
};
use examples::Timeline;
use timer::Clock;

const TIMEOUT: Duration = Duration::from_millis(100);

struct Script {
    t: Timeline,
}

/// The script reads as a timeline: `s.at(ms)`, `s.say(..)`, `s.rm`.
impl std::ops::Deref for Script {
    type Target = Timeline;
    fn deref(&self) -> &Timeline {
        &self.t
    }
}

impl Script {
    fn produce(&self, name: &'static str, tps: &[&TopicPartition], records: usize) {
        let clock: Arc<dyn Clock> = Arc::clone(self.rm.clock());
        let entries = tps
            .iter()
            .map(|tp| ((*tp).clone(), Records::uniform(records, 100)))
            .collect();
        let answered_at_once = self.rm.append_records(
            TIMEOUT,
            Acks::All,
            entries,
            move |response: ProduceResponse| {
                println!("t={:>4} ms  {name} answered:", clock.now_ms());
                for (tp, r) in response {
                    let base = r.base_offset.map_or("-".to_string(), |o| o.to_string());
                    println!(
                        "            {tp:<9} {:<24} base offset {base}",
                        r.error.name()
                    );
                }
            },
        );
        if !answered_at_once {
            let p = self.rm.produce_purgatory();
            self.say(format!(
                "{name}: acks=-1, {records} records to {} partition(s), timeout {} ms -> waiting (purgatory watched {}, delayed {})",
                tps.len(),
                TIMEOUT.as_millis(),
                p.watched(),
                p.delayed()
            ));
        }
    }

    /// Follower `replica` fetches `tp` from `offset` (acknowledging what is
    /// before it) and gets what lies beyond.
    fn follower_fetch(&self, replica: u32, tp: &TopicPartition, offset: u64) -> u64 {
        self.say(format!(
            "replica {replica} fetches {tp} from offset {offset}"
        ));
        let got = broker::ResponseSlot::new();
        self.rm.fetch_messages(
            FetchParams::follower(replica, Duration::ZERO, 1),
            vec![(
                tp.clone(),
                PartitionFetch {
                    fetch_offset: offset,
                    max_bytes: 1 << 20,
                },
            )],
            got.callback(),
        );
        let read = got.take().expect("a fetch with max_wait 0 answers at once")[tp];
        let records = if read.records.count() == 0 {
            "no new records".to_string()
        } else {
            format!(
                "records {}..{}",
                read.records.first_offset, read.records.next_offset
            )
        };
        println!(
            "            -> {records}; {tp} high watermark {}",
            read.high_watermark
        );
        read.records.next_offset
    }
}

fn main() {
    examples::init_logging();
    let t = Timeline::new();
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("orders", p)).collect();
    for tp in &tps {
        t.rm.add_partition(tp.clone(), &[1, 2], 2);
    }
    let s = Script { t };
    let [o0, o1, o2] = [&tps[0], &tps[1], &tps[2]];
    println!(
        "Partitions orders-0..2 led here, followers 1 and 2 in sync, min.insync.replicas 2.\n"
    );

    println!(
        "1. Completion by the followers, and a timeout on the partition one of them never fetches"
    );
    s.produce("produce #1", &[o0, o1, o2], 10);
    s.at(10);
    for tp in [o0, o1, o2] {
        s.follower_fetch(1, tp, 0);
    }
    for tp in [o0, o1] {
        s.follower_fetch(2, tp, 0);
    }
    s.at(20);
    for tp in [o0, o1, o2] {
        s.follower_fetch(1, tp, 10);
    }
    s.at(25);
    for tp in [o0, o1] {
        s.follower_fetch(2, tp, 10);
    }
    s.say("orders-0 and orders-1 are replicated; orders-2 still waits for replica 2");
    s.at(100);

    println!("\n2. The leader drops the lagging replica 2 from orders-2's ISR; the next produce needs replica 1 only");
    s.at(110);
    s.rm.set_in_sync(o2, 2, false)
        .expect("replica 2 is a follower");
    s.say(format!(
        "ISR of orders-2 shrinks to {{0, 1}}: high watermark {}",
        s.rm.partition(o2).expect("hosted").high_watermark()
    ));
    s.at(120);
    s.produce("produce #2", &[o2], 5);
    s.at(130);
    let next = s.follower_fetch(1, o2, 10);
    s.at(140);
    s.follower_fetch(1, o2, next);

    println!("\n3. Leadership moves away while a produce waits");
    s.at(150);
    s.produce("produce #3", &[o1], 1);
    s.at(160);
    s.say("orders-1's leadership moves to another broker");
    s.rm.set_partition_role(o1, PartitionRole::Follower);

    let p = s.rm.produce_purgatory();
    println!(
        "\nProduce purgatory at the end: watched {}, delayed {}.",
        p.watched(),
        p.delayed()
    );
}
