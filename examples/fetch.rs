//! A long-poll fetch waiting in the fetch purgatory for `min_bytes`.
//!
//! ```text
//! cargo run --example fetch
//! ```
//!
//! Runs a scripted timeline on a manual clock (so the output is the same on
//! every run) and prints what happens and when:
//! 1. a consumer fetch with `min_bytes` 1000 waits while a producer appends
//!    300 bytes every 100 ms, and is answered by the append that brings the
//!    readable bytes to 1200;
//! 2. the next fetch never sees 1000 bytes: at `max_wait` (500 ms) it is
//!    answered with the 600 bytes that are there;
//! 3. a fetch waiting when leadership moves away is answered at once with
//!    `NOT_LEADER_OR_FOLLOWER`.

use std::sync::Arc;
use std::time::Duration;

use broker::{
    Acks, FetchParams, FetchResponse, PartitionFetch, PartitionRole, Records, TopicPartition,
};
use examples::Timeline;
use timer::Clock;

const MAX_WAIT: Duration = Duration::from_millis(500);
const MIN_BYTES: u64 = 1000;

struct Script {
    t: Timeline,
    tp: TopicPartition,
}

/// The script reads as a timeline: `s.at(ms)`, `s.say(..)`, `s.rm`.
impl std::ops::Deref for Script {
    type Target = Timeline;
    fn deref(&self) -> &Timeline {
        &self.t
    }
}

impl Script {
    fn fetch(&self, name: &'static str, offset: u64) {
        let clock: Arc<dyn Clock> = Arc::clone(self.rm.clock());
        let asked = clock.now_ms();
        self.say(format!(
            "{name}: consumer fetch of {} from offset {offset}, min_bytes {MIN_BYTES}, max_wait {} ms",
            self.tp,
            MAX_WAIT.as_millis()
        ));
        let answered_at_once = self.rm.fetch_messages(
            FetchParams::consumer(MAX_WAIT, MIN_BYTES),
            vec![(
                self.tp.clone(),
                PartitionFetch {
                    fetch_offset: offset,
                    max_bytes: 1 << 20,
                },
            )],
            move |response: FetchResponse| {
                let now = clock.now_ms();
                for (tp, read) in response {
                    println!(
                        "t={now:>4} ms  {name} answered after {} ms: {tp} {}, records {}..{} ({} bytes), high watermark {}",
                        now - asked,
                        read.error.name(),
                        read.records.first_offset,
                        read.records.next_offset,
                        read.records.bytes,
                        read.high_watermark
                    );
                }
            },
        );
        if !answered_at_once {
            let p = self.rm.fetch_purgatory();
            println!(
                "            -> waiting (fetch purgatory watched {}, delayed {})",
                p.watched(),
                p.delayed()
            );
        }
    }

    fn append(&self, records: usize, bytes: u32) {
        self.say(format!(
            "producer appends {records} x {bytes} B to {} (log end now {})",
            self.tp,
            self.rm
                .partition(&self.tp)
                .expect("hosted")
                .log_end_offset()
                + records as u64
        ));
        self.rm.append_records(
            Duration::from_secs(30),
            Acks::Leader,
            vec![(self.tp.clone(), Records::uniform(records, bytes))],
            |_| {},
        );
    }
}

fn main() {
    examples::init_logging();
    let t = Timeline::new();
    let tp = TopicPartition::new("events", 0);
    // No follower: the high watermark follows the log end at once.
    t.rm.add_partition(tp.clone(), &[], 1);
    let s = Script { t, tp };
    println!("Partition events-0 led here, no followers (high watermark = log end).\n");

    println!("1. Completion by the append that reaches min_bytes");
    s.fetch("fetch #1", 0);
    for t in 1..=4 {
        s.at(t * 100);
        s.append(3, 100);
    }

    println!("\n2. max_wait passes first: the answer holds what is there");
    s.fetch("fetch #2", 12);
    for t in 5..=6 {
        s.at(t * 100);
        s.append(3, 100);
    }
    s.at(900);

    println!("\n3. Leadership moves away while a fetch waits");
    s.fetch("fetch #3", 18);
    s.at(950);
    s.say("events-0's leadership moves to another broker");
    s.rm.set_partition_role(&s.tp, PartitionRole::Follower);

    let p = s.rm.fetch_purgatory();
    println!(
        "\nFetch purgatory at the end: watched {}, delayed {}.",
        p.watched(),
        p.delayed()
    );
}
