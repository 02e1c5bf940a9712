//! Cancel racing expiry with the real executor, while the clock is stepped
//! through paused passes over crowded coarse buckets (a `ManualClock`
//! moved by the advancing thread; no sleeps): every task either ran once,
//! not before its deadline, or was cancelled by a call that returned `true`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use timer::{Clock, ManualClock, Timer, TimerBuilder, TimerHandle};

type Task = Box<dyn FnOnce() + Send>;

const UNRUN: u64 = u64::MAX;

fn race(tick: u64, wheel_size: usize, shards: usize) {
    const N: usize = 6_000;
    const SPAN: u64 = 3_000;
    let clock = ManualClock::new();
    let timer: Arc<Timer> = Arc::new(
        TimerBuilder::new()
            .clock(clock.clone())
            .tick(Duration::from_millis(tick))
            .wheel_size(wheel_size)
            .shards(shards)
            .build()
            .unwrap(),
    );
    let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
    let ran_at: Arc<Vec<AtomicU64>> = Arc::new((0..N).map(|_| AtomicU64::new(UNRUN)).collect());
    let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ (tick << 8) ^ wheel_size as u64;
    let mut deadlines = Vec::with_capacity(N);
    let handles: Vec<TimerHandle> = (0..N)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Bursts sharing a deadline, and spread deadlines, in one range.
            let delay = if i % 3 == 0 { SPAN / 2 } else { 1 + x % SPAN };
            deadlines.push(delay.div_ceil(tick) * tick);
            let (runs, ran_at, clock) = (runs.clone(), ran_at.clone(), clock.clone());
            let task: Task = Box::new(move || {
                runs[i].fetch_add(1, Ordering::SeqCst);
                ran_at[i].store(clock.now_ms(), Ordering::SeqCst);
            });
            timer.add(Duration::from_millis(delay), task).unwrap()
        })
        .collect();
    let start = Arc::new(Barrier::new(2));
    let advancer = {
        let (timer, clock, start) = (timer.clone(), clock.clone(), start.clone());
        thread::spawn(move || {
            start.wait();
            // Uneven steps: some land inside passes' slack, some jump over it.
            let mut ms = 0;
            while ms < SPAN + 2 * tick {
                ms += 1 + ms % 17;
                clock.set_ms(ms);
                timer.advance_clock(Duration::ZERO);
            }
        })
    };
    start.wait();
    // Cancel every other task, in an order unrelated to the deadlines.
    let cancelled: Vec<(usize, bool)> = (0..N)
        .map(|k| (k * 7_919) % N)
        .filter(|i| i % 2 == 1)
        .map(|i| (i, timer.cancel(&handles[i])))
        .collect();
    advancer.join().unwrap();
    timer.wait_for_executor();
    let mut stopped = vec![false; N];
    for (i, c) in cancelled {
        stopped[i] = c;
    }
    for i in 0..N {
        let r = runs[i].load(Ordering::SeqCst);
        assert_eq!(
            r + stopped[i] as usize,
            1,
            "tick {tick}, size {wheel_size}: task {i} ran {r} times, cancelled {}",
            stopped[i]
        );
        if r == 1 {
            let at = ran_at[i].load(Ordering::SeqCst);
            assert!(
                at >= deadlines[i],
                "task {i} due at {} ran at {at}",
                deadlines[i]
            );
        }
        assert!(
            !timer.cancel(&handles[i]),
            "a second cancel of task {i} acted"
        );
    }
    assert_eq!(timer.len(), 0);
    assert!(timer.shutdown().is_empty());
}

#[test]
fn cancel_racing_a_stepped_clock_kafka_wheel() {
    race(1, 20, 2);
}

#[test]
fn cancel_racing_a_stepped_clock_small_wheel_odd_tick() {
    race(7, 3, 3);
}

#[test]
fn cancel_racing_a_stepped_clock_two_bucket_wheel() {
    race(10, 2, 1);
}
