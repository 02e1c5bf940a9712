//! A produce with `acks=-1` waiting in the produce purgatory for the followers.
//!
//! ```text
//! cargo run --example produce
//! cargo run --example produce -- --timeout-ms 200 --records 4 --record-bytes 512
//! cargo run --example produce -- --help
//! ```
//!
//! Runs a scripted timeline on a manual clock (so the output is the same on
//! every run) and prints what happens and when:
//! 1. a produce to three partitions waits until the followers have fetched
//!    past the written records; one follower never catches up on one
//!    partition, so at the timeout (`--timeout-ms`, 100 ms) that partition
//!    answers `REQUEST_TIMED_OUT` while the other two answer `NONE`;
//! 2. the leader drops the lagging follower from the ISR, and the next produce
//!    completes as soon as the remaining follower has the records;
//! 3. a produce waiting when leadership moves away completes at once with
//!    `NOT_LEADER_OR_FOLLOWER`.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broker::{
    Acks, FetchParams, PartitionFetch, PartitionRole, ProduceResponse, Records, TopicPartition,
};
use clap::Parser;
use examples::produce_args::{ProduceArgs, FOLLOWER_FETCH_MAX_BYTES, LAST_FOLLOWER_FETCH_MS};
use examples::{outln, Timeline};
use timer::Clock;

struct Script {
    t: Timeline,
    timeout: Duration,
    record_bytes: u32,
    /// Produce answers given inside a step, printed once the step's own
    /// narration is (an answer comes from inside the follower fetch or
    /// the clock move that completes the produce).
    answers: Arc<Mutex<Vec<String>>>,
}

/// The script reads as a timeline: `s.at(ms)`, `s.say(..)`, `s.rm`.
impl std::ops::Deref for Script {
    type Target = Timeline;
    fn deref(&self) -> &Timeline {
        &self.t
    }
}

impl Script {
    /// Moves virtual time to `ms`, expiring what is due, and prints the
    /// answers that gave.
    fn at(&self, ms: u64) {
        self.t.at(ms);
        self.print_answers();
    }

    fn print_answers(&self) {
        for line in self.answers.lock().expect("no panic holds it").drain(..) {
            outln!("{line}");
        }
    }

    fn produce(&self, name: &'static str, tps: &[&TopicPartition], records: usize) {
        let clock: Arc<dyn Clock> = Arc::clone(self.rm.clock());
        let answers = Arc::clone(&self.answers);
        let entries = tps
            .iter()
            .map(|tp| ((*tp).clone(), Records::uniform(records, self.record_bytes)))
            .collect();
        let answered_at_once = self.rm.append_records(
            self.timeout,
            Acks::All,
            entries,
            move |response: ProduceResponse| {
                let mut lines = answers.lock().expect("no panic holds it");
                lines.push(format!("t={:>4} ms  {name} answered:", clock.now_ms()));
                for (tp, r) in response {
                    let base = r.base_offset.map_or("-".to_string(), |o| o.to_string());
                    lines.push(format!(
                        "            {tp:<9} {:<24} base offset {base}",
                        r.error.name()
                    ));
                }
            },
        );
        self.print_answers();
        if !answered_at_once {
            let p = self.rm.produce_purgatory();
            self.say(format!(
                "{name}: acks=-1, {records} records to {} partition(s), timeout {} ms -> waiting (purgatory watched {}, delayed {})",
                tps.len(),
                self.timeout.as_millis(),
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
                    max_bytes: FOLLOWER_FETCH_MAX_BYTES,
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
        outln!(
            "            -> {records}; {tp} high watermark {}",
            read.high_watermark
        );
        self.print_answers();
        read.records.next_offset
    }
}

fn main() -> ExitCode {
    let args = ProduceArgs::parse();
    if let Err(err) = args.check() {
        return err.report();
    }
    examples::init_logging();
    let timeout = args.timeout_ms;
    let records = args.records;
    let t = Timeline::new();
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("orders", p)).collect();
    for tp in &tps {
        t.rm.add_partition(tp.clone(), &[1, 2], 2)
            .expect("a new partition with two followers is valid");
    }
    let s = Script {
        t,
        timeout: Duration::from_millis(timeout),
        record_bytes: args.record_bytes_u32(),
        answers: Arc::default(),
    };
    let [o0, o1, o2] = [&tps[0], &tps[1], &tps[2]];
    outln!("Partitions orders-0..2 led here, followers 1 and 2 in sync, min.insync.replicas 2.\n");

    outln!(
        "1. Completion by the followers, and a timeout on the partition one of them never fetches"
    );
    s.produce("produce #1", &[o0, o1, o2], records);
    s.at(10);
    for tp in [o0, o1, o2] {
        s.follower_fetch(1, tp, 0);
    }
    for tp in [o0, o1] {
        s.follower_fetch(2, tp, 0);
    }
    s.at(20);
    for tp in [o0, o1, o2] {
        s.follower_fetch(1, tp, records as u64);
    }
    s.at(LAST_FOLLOWER_FETCH_MS);
    for tp in [o0, o1] {
        s.follower_fetch(2, tp, records as u64);
    }
    s.say("orders-0 and orders-1 are replicated; orders-2 still waits for replica 2");
    s.at(timeout);

    outln!("\n2. The leader drops the lagging replica 2 from orders-2's ISR; the next produce needs replica 1 only");
    s.at(timeout + 10);
    s.rm.set_in_sync(o2, 2, false)
        .expect("replica 2 is a follower");
    s.say(format!(
        "ISR of orders-2 shrinks to {{0, 1}}: high watermark {}",
        s.rm.partition(o2).expect("hosted").high_watermark()
    ));
    s.at(timeout + 20);
    s.produce("produce #2", &[o2], (records / 2).max(1));
    s.at(timeout + 30);
    let next = s.follower_fetch(1, o2, records as u64);
    s.at(timeout + 40);
    s.follower_fetch(1, o2, next);

    outln!("\n3. Leadership moves away while a produce waits");
    s.at(timeout + 50);
    s.produce("produce #3", &[o1], 1);
    s.at(timeout + 60);
    s.say("orders-1's leadership moves to another broker");
    s.rm.set_partition_role(o1, PartitionRole::Follower);
    s.print_answers();

    let p = s.rm.produce_purgatory();
    outln!(
        "\nProduce purgatory at the end: watched {}, delayed {}.",
        p.watched(),
        p.delayed()
    );
    ExitCode::SUCCESS
}
