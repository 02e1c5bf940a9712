//! Delayed produces awaited from async request handlers (tokio).
//!
//! ```text
//! cargo run --release --example async_produce
//! cargo run --release --example async_produce -- --help
//! ```
//!
//! Each request handler is a tokio task: it appends to one to three
//! partitions, watches a delayed produce (`acks=-1`) in the purgatory under
//! those partitions and `.await`s its completion
//! ([`Purgatory::cancel_on_drop`]). A follower task advances the
//! partitions' high watermarks every few milliseconds and calls
//! `check_and_complete` for each partition that moved. One partition's
//! follower lags behind the produce timeout, so requests touching it time
//! out; some clients disconnect while they wait: their handler stops
//! awaiting, and dropping the completion cancels the request. At the end it prints how
//! many requests ended each way and the latency percentiles, and exits 0
//! only when every request resolved (and the purgatory's counts agree).
//!
//! The purgatory crate depends on no async runtime: the completion is a
//! plain `Future` woken by the purgatory call that ends the operation.
//!
//! It takes no parameters: any argument but `--help` is refused with exit
//! code 2 before anything runs.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use examples::async_produce_args::AsyncProduceArgs;
use examples::{errln, outln};
use purgatory::{DelayedOperation, Operation, Outcome, Purgatory};

/// Partitions of the topic; the last one's follower lags.
const PARTITIONS: usize = 8;
const LAGGING: usize = PARTITIONS - 1;
/// Requests issued, and the time over which they are spread.
const REQUESTS: usize = 4_000;
const ISSUE_OVER: Duration = Duration::from_millis(1_500);
/// The produce timeout.
const TIMEOUT: Duration = Duration::from_millis(200);
/// How often the follower fetches, and how often the lagging one does.
const FETCH_EVERY: Duration = Duration::from_millis(2);
const LAGGING_FETCH_EVERY: Duration = Duration::from_millis(500);
/// One request in this many is from a client that disconnects.
const DISCONNECT_ONE_IN: u64 = 12;
/// How long the whole run may take before it counts as hung.
const DEADLINE: Duration = Duration::from_secs(20);

/// The leader's view of its partitions: log end offsets and high watermarks.
struct Log {
    end: Vec<AtomicU64>,
    high_watermark: Vec<AtomicU64>,
}

impl Log {
    fn new() -> Self {
        Log {
            end: (0..PARTITIONS).map(|_| AtomicU64::new(0)).collect(),
            high_watermark: (0..PARTITIONS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Appends one batch to `partition`; returns the offset the followers
    /// must reach.
    fn append(&self, partition: usize) -> u64 {
        self.end[partition].fetch_add(1, Ordering::AcqRel) + 1
    }
}

/// A produce with `acks=-1`: done when every partition's high watermark has
/// reached the offset written there.
struct DelayedProduce {
    log: Arc<Log>,
    required: Vec<(usize, u64)>,
    /// Set by `on_complete` when every partition was replicated (not at
    /// the timeout): the response's error code, in a real broker.
    replicated: AtomicBool,
}

impl DelayedOperation for DelayedProduce {
    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn try_complete(&self) -> bool {
        self.replicated_now()
    }

    fn on_complete(&self) {
        self.replicated
            .store(self.replicated_now(), Ordering::Release);
    }
}

impl DelayedProduce {
    fn replicated_now(&self) -> bool {
        self.required
            .iter()
            .all(|&(p, offset)| self.log.high_watermark[p].load(Ordering::Acquire) >= offset)
    }
}

type ProducePurgatory = Purgatory<usize, DelayedProduce>;

/// A small deterministic generator (xorshift), so runs differ only by timing.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What one request handler saw.
struct Answer {
    outcome: Outcome,
    latency: Duration,
    replicated: bool,
}

/// The request handler: append, watch, await the outcome.
async fn handle_produce(
    purgatory: Arc<ProducePurgatory>,
    log: Arc<Log>,
    partitions: Vec<usize>,
    disconnect_after: Option<Duration>,
) -> Answer {
    let start = Instant::now();
    let required = partitions.iter().map(|&p| (p, log.append(p))).collect();
    let op = Operation::new(DelayedProduce {
        log,
        required,
        replicated: AtomicBool::new(false),
    });
    purgatory
        .try_complete_else_watch(op.clone(), partitions)
        .expect("the purgatory is running");
    let done = purgatory.cancel_on_drop(&op);
    let outcome = match disconnect_after {
        None => done.await,
        // The client goes away after `after` (its connection's read would
        // say so): the handler stops awaiting, and dropping `done` cancels
        // the request unless it had just ended; its outcome says which.
        Some(after) => match tokio::time::timeout(after, done).await {
            Ok(outcome) => outcome,
            Err(_gone) => op.completion().await,
        },
    };
    Answer {
        outcome,
        latency: start.elapsed(),
        replicated: op.replicated.load(Ordering::Acquire),
    }
}

/// The followers: fetch up to the log end every few milliseconds (the
/// lagging one far less often), move the high watermarks and check the
/// partitions that moved.
async fn follow(purgatory: Arc<ProducePurgatory>, log: Arc<Log>, stop: Arc<AtomicBool>) {
    let started = Instant::now();
    let mut lagging_fetched = Duration::ZERO;
    while !stop.load(Ordering::Acquire) {
        tokio::time::sleep(FETCH_EVERY).await;
        let lagging_due = started.elapsed() >= lagging_fetched + LAGGING_FETCH_EVERY;
        if lagging_due {
            lagging_fetched = started.elapsed();
        }
        for p in 0..PARTITIONS {
            if p == LAGGING && !lagging_due {
                continue;
            }
            let end = log.end[p].load(Ordering::Acquire);
            if log.high_watermark[p].swap(end, Ordering::AcqRel) != end {
                purgatory.check_and_complete(&p);
            }
        }
    }
}

fn percentile(sorted: &[Duration], pct: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((pct / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

async fn run() -> Result<(), String> {
    let purgatory: Arc<ProducePurgatory> = Arc::new(
        Purgatory::builder("Produce")
            .reaper_poll_interval(Duration::from_millis(10))
            .build()
            .map_err(|e| format!("cannot start the purgatory: {e}"))?,
    );
    let log = Arc::new(Log::new());
    let stop = Arc::new(AtomicBool::new(false));
    let follower = tokio::spawn(follow(purgatory.clone(), log.clone(), stop.clone()));

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut handlers = Vec::with_capacity(REQUESTS);
    let gap = ISSUE_OVER / REQUESTS as u32;
    let started = Instant::now();
    for i in 0..REQUESTS {
        let count = 1 + rng.below(3) as usize;
        let mut partitions: Vec<usize> = (0..count)
            .map(|_| rng.below(PARTITIONS as u64) as usize)
            .collect();
        partitions.sort_unstable();
        partitions.dedup();
        let disconnect_after = (rng.below(DISCONNECT_ONE_IN) == 0)
            .then(|| Duration::from_millis(1 + rng.below(TIMEOUT.as_millis() as u64)));
        handlers.push(tokio::spawn(handle_produce(
            purgatory.clone(),
            log.clone(),
            partitions,
            disconnect_after,
        )));
        // Spread the arrivals: sleep whenever ahead of the schedule.
        let due = gap * (i as u32 + 1);
        if let Some(ahead) = due.checked_sub(started.elapsed()) {
            if ahead >= Duration::from_millis(1) {
                tokio::time::sleep(ahead).await;
            }
        }
    }

    let mut answers = Vec::with_capacity(REQUESTS);
    for handler in handlers {
        answers.push(
            handler
                .await
                .map_err(|e| format!("a handler failed: {e}"))?,
        );
    }
    stop.store(true, Ordering::Release);
    follower
        .await
        .map_err(|e| format!("the follower failed: {e}"))?;
    report(&purgatory, &answers, started.elapsed())
}

fn report(purgatory: &ProducePurgatory, answers: &[Answer], took: Duration) -> Result<(), String> {
    let ways = [Outcome::Completed, Outcome::Expired, Outcome::Cancelled];
    outln!(
        "{} produce requests over {} partitions in {} ms (timeout {} ms, partition {LAGGING} lagging)",
        answers.len(),
        PARTITIONS,
        took.as_millis(),
        TIMEOUT.as_millis()
    );
    outln!("outcome      requests   p50 ms   p99 ms   max ms");
    let mut all: Vec<Duration> = answers.iter().map(|a| a.latency).collect();
    all.sort_unstable();
    for way in ways {
        let mut latencies: Vec<Duration> = answers
            .iter()
            .filter(|a| a.outcome == way)
            .map(|a| a.latency)
            .collect();
        latencies.sort_unstable();
        outln!(
            "{:<12} {:>8} {:>8} {:>8} {:>8}",
            format!("{way:?}"),
            latencies.len(),
            ms(percentile(&latencies, 50.0)),
            ms(percentile(&latencies, 99.0)),
            ms(latencies.last().copied().unwrap_or_default())
        );
    }
    outln!(
        "{:<12} {:>8} {:>8} {:>8} {:>8}",
        "all",
        all.len(),
        ms(percentile(&all, 50.0)),
        ms(percentile(&all, 99.0)),
        ms(all.last().copied().unwrap_or_default())
    );
    let stats = purgatory.stats();
    outln!("purgatory: {stats:?}");

    let count = |way| answers.iter().filter(|a| a.outcome == way).count();
    let resolved: usize = ways.iter().map(|&w| count(w)).sum();
    if resolved != REQUESTS {
        return Err(format!("{resolved} of {REQUESTS} requests resolved"));
    }
    // A completed produce was replicated, a cancelled one answered nothing.
    // (One that expired just as its followers caught up may say either.)
    if answers.iter().any(|a| match a.outcome {
        Outcome::Completed => !a.replicated,
        Outcome::Cancelled => a.replicated,
        _ => false,
    }) {
        return Err("a response disagrees with its outcome".into());
    }
    let counted = (stats.completed, stats.expired, stats.cancelled);
    let seen = (
        count(Outcome::Completed),
        count(Outcome::Expired),
        count(Outcome::Cancelled),
    );
    if counted != seen || (stats.watched, stats.delayed) != (0, 0) {
        return Err(format!(
            "the purgatory counts {counted:?}, the handlers saw {seen:?}"
        ));
    }
    if ways.iter().any(|&w| count(w) == 0) {
        return Err("some way of ending a request never happened".into());
    }
    Ok(())
}

fn main() -> ExitCode {
    AsyncProduceArgs::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("async_produce: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        tokio::time::timeout(DEADLINE, run())
            .await
            .unwrap_or_else(|_| Err(format!("not every request resolved within {DEADLINE:?}")))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("async_produce: {e}");
            ExitCode::FAILURE
        }
    }
}
