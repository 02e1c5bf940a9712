//! A quick W2-shaped check of the purgatory's hot path (the full W2 runner,
//! with rate control and the report format of BENCHMARKS.md, is in the bench
//! crate). One generator thread watches requests on the same 3 keys as fast
//! as it can; a completion thread completes each at its sampled latency
//! (log-normal, pct50 50 ms, pct75 75 ms), by force-complete or through
//! `check_and_complete` on its keys; the rest expire after 1 s.
//!
//! `cargo run --release -p purgatory --example w2_smoke -- [force|check|single] [N] [RATE]`

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use purgatory::{DelayedOperation, Operation, Purgatory};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct FakeOp {
    start: Instant,
    due: Duration,
    done: Arc<AtomicUsize>,
    _data: [u8; 100],
}

impl DelayedOperation for FakeOp {
    fn timeout(&self) -> Duration {
        Duration::from_millis(1000)
    }
    fn try_complete(&self) -> bool {
        self.start.elapsed() >= self.due
    }
    fn on_complete(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// The uncontended cost: watch then force-complete on one thread, with
/// 50,000 operations pending (as in W2's steady state).
fn single_thread(p: &Purgatory<String, FakeOp>, keys: &[String], n: usize) {
    let start = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let mk = || {
        Operation::new(FakeOp {
            start,
            due: Duration::from_secs(3600),
            done: done.clone(),
            _data: [0; 100],
        })
    };
    let mut window = std::collections::VecDeque::new();
    for _ in 0..50_000 {
        let op = mk();
        p.try_complete_else_watch(op.clone(), keys.iter().cloned())
            .unwrap();
        window.push_back(op);
    }
    let (mut watch, mut force) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..n {
        let t = Instant::now();
        let op = mk();
        p.try_complete_else_watch(op.clone(), keys.iter().cloned())
            .unwrap();
        let t2 = Instant::now();
        window.push_back(op);
        let old = window.pop_front().unwrap();
        old.force_complete();
        drop(old);
        force += t2.elapsed();
        watch += t2 - t;
    }
    println!(
        "single thread: watch {:.0} ns, force-complete {:.0} ns per operation; watched {}",
        watch.as_nanos() as f64 / n as f64,
        force.as_nanos() as f64 / n as f64,
        p.watched()
    );
}

/// User + system CPU time of the process (from /proc, 10 ms resolution).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After the command name: state is field 0, utime 11, stime 12.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let check = mode == "check";
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    // Optional target rate (requests/s): the generator then sleeps until each
    // request's arrival time (evenly spaced; W2 proper uses exponential gaps).
    let rate: Option<f64> = args.next().and_then(|s| s.parse().ok());

    let mut rng = StdRng::seed_from_u64(42);
    let keys: Vec<String> = (0..3)
        .map(|_| format!("fakeKey{}", rng.gen_range(0..100)))
        .collect();
    let mu = 50f64.ln();
    let sigma = (75f64.ln() - mu) / 0.674_490;
    let latencies: Vec<u64> = (0..n)
        .map(|_| {
            // Box-Muller.
            let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            (z * sigma + mu).exp() as u64
        })
        .collect();

    let p: Arc<Purgatory<String, FakeOp>> = Arc::new(Purgatory::new("fake purgatory"));
    if mode == "single" {
        single_thread(&p, &keys, n);
        return;
    }
    let done = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel::<(Duration, Operation<FakeOp>)>();
    let start = Instant::now();
    let cpu0 = cpu_time();

    let completer = {
        let (p, keys) = (p.clone(), keys.clone());
        std::thread::Builder::new()
            .name("completion".into())
            .spawn(move || {
                let mut heap = BinaryHeap::new();
                let mut seq = 0u64;
                let mut ops = std::collections::HashMap::new();
                let mut open = true;
                while open || !heap.is_empty() {
                    loop {
                        match rx.try_recv() {
                            Ok((due, op)) => {
                                heap.push(Reverse((due, seq)));
                                ops.insert(seq, op);
                                seq += 1;
                            }
                            Err(mpsc::TryRecvError::Empty) => break,
                            Err(mpsc::TryRecvError::Disconnected) => {
                                open = false;
                                break;
                            }
                        }
                    }
                    let now = start.elapsed();
                    let mut any = false;
                    while let Some(&Reverse((due, s))) = heap.peek() {
                        if due > now {
                            break;
                        }
                        heap.pop();
                        any = true;
                        let op: Operation<FakeOp> = ops.remove(&s).unwrap();
                        if check {
                            for k in &keys {
                                if op.is_completed() {
                                    break;
                                }
                                p.check_and_complete(k);
                            }
                        } else {
                            op.force_complete();
                        }
                    }
                    if !any {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            })
            .expect("spawn")
    };

    for (i, &latency) in latencies.iter().enumerate() {
        if let Some(rate) = rate {
            let arrival = Duration::from_secs_f64(i as f64 / rate);
            let now = start.elapsed();
            if arrival > now {
                std::thread::sleep(arrival - now);
            }
        }
        let created = start.elapsed();
        let op = Operation::new(FakeOp {
            start,
            due: created + Duration::from_millis(latency),
            done: done.clone(),
            _data: [0; 100],
        });
        if latency < 1000 {
            tx.send((created + Duration::from_millis(latency), op.clone()))
                .unwrap();
        }
        p.try_complete_else_watch(op, keys.iter().cloned()).unwrap();
    }
    let enqueued = start.elapsed();
    drop(tx);
    completer.join().unwrap();
    while done.load(Ordering::Relaxed) < n {
        std::thread::sleep(Duration::from_millis(5));
    }
    let cpu = cpu_time() - cpu0;
    println!(
        "mode {} n {n}: enqueue rate {:.0}/s, all done in {:?}, cpu {:?} ({:.2} us/request), watched after {}, delayed after {}",
        if check { "check" } else { "force" },
        n as f64 / enqueued.as_secs_f64(),
        start.elapsed(),
        cpu,
        cpu.as_secs_f64() * 1e6 / n as f64,
        p.watched(),
        p.delayed()
    );
}
