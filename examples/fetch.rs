//! A long-poll fetch waiting in the fetch purgatory for `min_bytes`.
//!
//! ```text
//! cargo run --example fetch
//! cargo run --example fetch -- --min-bytes 5000 --max-wait-ms 2000
//! cargo run --example fetch -- --help
//! ```
//!
//! Runs a scripted timeline on a manual clock (so the output is the same on
//! every run) and prints what happens and when (figures for the defaults):
//! 1. a consumer fetch with `min_bytes` 1000 waits while a producer appends
//!    300 bytes every 100 ms, and is answered by the append that brings the
//!    readable bytes to 1200 (flags for which that append would not come
//!    before `max_wait` are refused, exit code 2);
//! 2. the next fetch never sees `min_bytes`: the producer appends half as
//!    much (two appends, 600 bytes), and at `max_wait` (500 ms) the fetch is
//!    answered with what is there;
//! 3. a fetch waiting when leadership moves away is answered at once with
//!    `NOT_LEADER_OR_FOLLOWER`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use broker::{
    Acks, FetchParams, FetchResponse, PartitionFetch, PartitionRole, Records, TopicPartition,
};
use clap::Parser;
use examples::fetch_args::{FetchArgs, FETCH_MAX_BYTES};
use examples::{outln, Timeline};
use timer::Clock;

struct Script {
    t: Timeline,
    tp: TopicPartition,
    args: FetchArgs,
}

/// The script reads as a timeline: `s.at(ms)`, `s.say(..)`, `s.rm`.
impl std::ops::Deref for Script {
    type Target = Timeline;
    fn deref(&self) -> &Timeline {
        &self.t
    }
}

impl Script {
    /// Sends a consumer fetch from `offset`; the returned flag is set when
    /// it is answered.
    fn fetch(&self, name: &'static str, offset: u64) -> Arc<AtomicBool> {
        let clock: Arc<dyn Clock> = Arc::clone(self.rm.clock());
        let asked = clock.now_ms();
        let max_wait = Duration::from_millis(self.args.max_wait_ms);
        self.say(format!(
            "{name}: consumer fetch of {} from offset {offset}, min_bytes {}, max_wait {} ms",
            self.tp,
            self.args.min_bytes,
            max_wait.as_millis()
        ));
        let answered = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&answered);
        let answered_at_once = self.rm.fetch_messages(
            FetchParams::consumer(max_wait, self.args.min_bytes),
            vec![(
                self.tp.clone(),
                PartitionFetch {
                    fetch_offset: offset,
                    max_bytes: FETCH_MAX_BYTES,
                },
            )],
            move |response: FetchResponse| {
                flag.store(true, Ordering::Relaxed);
                let now = clock.now_ms();
                for (tp, read) in response {
                    outln!(
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
            outln!(
                "            -> waiting (fetch purgatory watched {}, delayed {})",
                p.watched(),
                p.delayed()
            );
        }
        answered
    }

    fn log_end_offset(&self) -> u64 {
        self.rm
            .partition(&self.tp)
            .expect("hosted")
            .log_end_offset()
    }

    fn append(&self) {
        let records = self.args.records_per_append;
        let bytes = self.args.record_bytes_u32();
        self.say(format!(
            "producer appends {records} x {bytes} B to {} (log end now {})",
            self.tp,
            self.log_end_offset() + records as u64
        ));
        self.rm.append_records(
            Duration::from_secs(30),
            Acks::Leader,
            vec![(self.tp.clone(), Records::uniform(records, bytes))],
            |_| {},
        );
    }
}

fn main() -> ExitCode {
    let args = FetchArgs::parse();
    if let Err(err) = args.check() {
        return err.report();
    }
    examples::init_logging();
    let (interval, max_wait) = (args.append_interval_ms, args.max_wait_ms);
    // Phase 2 appends about half of what min_bytes needs, so it never
    // reaches it.
    let slow_appends = args.appends_to_min_bytes() / 2;
    let t = Timeline::new();
    let tp = TopicPartition::new("events", 0);
    // No follower: the high watermark follows the log end at once.
    t.rm.add_partition(tp.clone(), &[], 1)
        .expect("a new partition led alone is valid");
    let s = Script { t, tp, args };
    outln!("Partition events-0 led here, no followers (high watermark = log end).\n");

    outln!("1. Completion by the append that reaches min_bytes");
    let answered = s.fetch("fetch #1", 0);
    let mut now = 0;
    while !answered.load(Ordering::Relaxed) {
        now += interval;
        s.at(now);
        if answered.load(Ordering::Relaxed) {
            break;
        }
        s.append();
    }

    outln!("\n2. max_wait passes first: the answer holds what is there");
    let start = now;
    s.fetch("fetch #2", s.log_end_offset());
    for k in 1..=slow_appends {
        if k * interval >= max_wait {
            break;
        }
        s.at(start + k * interval);
        s.append();
    }
    now = start + max_wait;
    s.at(now);

    outln!("\n3. Leadership moves away while a fetch waits");
    s.fetch("fetch #3", s.log_end_offset());
    s.at(now + interval / 2);
    s.say("events-0's leadership moves to another broker");
    s.rm.set_partition_role(&s.tp, PartitionRole::Follower);

    let p = s.rm.fetch_purgatory();
    outln!(
        "\nFetch purgatory at the end: watched {}, delayed {}.",
        p.watched(),
        p.delayed()
    );
    ExitCode::SUCCESS
}
