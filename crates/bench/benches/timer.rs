//! Criterion micro-benchmarks of the timer: `TimingWheel` add, cancel and
//! advance (expire) on batches of 10,000 tasks with W1's delay distribution,
//! and add + cancel on the thread-safe `Timer`.
//!
//! Kept quick on purpose (`common::config`: 20 samples, 2 s each): `cargo
//! bench -p purgatory-bench --bench timer` finishes in under a minute.
//! Throughput is per task, so criterion reports time per element.

mod common;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use purgatory_bench::rng;
use std::time::Duration;
use timer::{Insertion, Timer, TimerHandle, TimingWheel};

/// Tasks per batch.
const N: usize = 10_000;

fn deadlines() -> Vec<u64> {
    rng::delays_ms(42, N, 60_000)
}

/// A wheel holding one task per deadline, and their handles.
fn filled(deadlines: &[u64]) -> (TimingWheel<u64>, Vec<TimerHandle>) {
    let mut wheel = TimingWheel::new(1, 20, 0).expect("valid wheel");
    wheel.reserve(deadlines.len());
    let handles = deadlines
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match wheel.insert(d, i as u64) {
            Insertion::Scheduled(h) => Some(h),
            Insertion::Expired(_) => None,
        })
        .collect();
    (wheel, handles)
}

fn timing_wheel(c: &mut Criterion) {
    let d = deadlines();
    let mut g = c.benchmark_group("timing_wheel");
    g.throughput(Throughput::Elements(N as u64));

    g.bench_function("add", |b| {
        b.iter_batched(
            || {
                let mut w = TimingWheel::<u64>::new(1, 20, 0).expect("valid wheel");
                w.reserve(N);
                w
            },
            |mut w| {
                for (i, &x) in d.iter().enumerate() {
                    black_box(w.insert(x, i as u64));
                }
                w
            },
            BatchSize::LargeInput,
        )
    });

    g.bench_function("cancel", |b| {
        b.iter_batched(
            || filled(&d),
            |(mut w, handles)| {
                for h in &handles {
                    black_box(w.cancel(*h));
                }
                w
            },
            BatchSize::LargeInput,
        )
    });

    g.bench_function("advance", |b| {
        b.iter_batched(
            || filled(&d).0,
            |mut w| {
                let mut fired = 0u64;
                while let Some(now) = w.next_expiration() {
                    w.advance(now, |t| fired += t);
                }
                black_box(fired);
                w
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn threaded_timer(c: &mut Criterion) {
    fn noop() {}
    let timer: Timer<fn()> = Timer::new();
    let mut g = c.benchmark_group("timer");
    g.throughput(Throughput::Elements(1));
    g.bench_function("add_cancel", |b| {
        b.iter(|| {
            let h = timer
                .add(Duration::from_secs(30), noop as fn())
                .expect("timer running");
            black_box(timer.cancel(&h))
        })
    });
    g.finish();
    timer.shutdown();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = timing_wheel, threaded_timer
}
criterion_main!(benches);
