//! Criterion micro-benchmarks of the purgatory on one thread, with virtual
//! time and no reaper, so that they measure the purgatory's own work and no
//! wake-ups or contention:
//!
//! * `purgatory/check_scan`: `check_and_complete` on a key watched by 1,000
//!   operations none of which can complete (time per operation visited:
//!   what W2's `purgatory_check` mode pays for every pending request at
//!   every check).
//! * `purgatory/watch_force_complete`: `try_complete_else_watch` on W2's 3
//!   keys, then `force_complete` (time per operation, freeing its watch-list
//!   slots and timer entry included: W2's `purgatory` mode on one thread).
//! * `purgatory/watch_check_complete`: 1,000 operations watched on the 3
//!   keys, then one `check_and_complete` completes them all (time per
//!   operation).
//!
//! Kept quick like the timer's (`common::config`: 20 samples, 2 s each).

mod common;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use purgatory::{DelayedOperation, ManualClock, Operation, Purgatory};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Operations per batch.
const N: usize = 1_000;

/// W2's keys for seed 42.
const KEYS: [&str; 3] = ["fakeKey49", "fakeKey3", "fakeKey75"];

/// Completes once its flag is set; holds 100 bytes like a W2 request.
struct Flagged {
    ready: Arc<AtomicBool>,
    _data: [u8; 100],
}

impl Flagged {
    fn new(ready: &Arc<AtomicBool>) -> Operation<Flagged> {
        Operation::new(Flagged {
            ready: ready.clone(),
            _data: [0; 100],
        })
    }
}

impl DelayedOperation for Flagged {
    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn try_complete(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
    fn on_complete(&self) {}
}

fn purgatory() -> Purgatory<&'static str, Flagged> {
    Purgatory::builder("bench")
        .clock(ManualClock::new())
        .reaper(false)
        .build()
        .expect("valid configuration")
}

fn benches_on_one_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("purgatory");
    g.throughput(Throughput::Elements(N as u64));

    g.bench_function("check_scan", |b| {
        let p = purgatory();
        let never = Arc::new(AtomicBool::new(false));
        for _ in 0..N {
            let op = Flagged::new(&never);
            assert_eq!(p.try_complete_else_watch(op, KEYS), Ok(false));
        }
        b.iter(|| black_box(p.check_and_complete(&KEYS[0])));
        assert_eq!(p.watched_on(&KEYS[0]), N);
    });

    g.bench_function("watch_force_complete", |b| {
        let p = purgatory();
        let never = Arc::new(AtomicBool::new(false));
        b.iter(|| {
            for _ in 0..N {
                let op = Flagged::new(&never);
                black_box(p.try_complete_else_watch(op.clone(), KEYS)).ok();
                black_box(op.force_complete());
            }
        });
        p.purge();
        assert_eq!(p.watched(), 0);
    });

    g.bench_function("watch_check_complete", |b| {
        let p = purgatory();
        b.iter_batched(
            || Arc::new(AtomicBool::new(false)),
            |ready| {
                for _ in 0..N {
                    black_box(p.try_complete_else_watch(Flagged::new(&ready), KEYS)).ok();
                }
                ready.store(true, Ordering::Release);
                assert_eq!(p.check_and_complete(&KEYS[0]), N);
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = benches_on_one_thread
}
criterion_main!(benches);
