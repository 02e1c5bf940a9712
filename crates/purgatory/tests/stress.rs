//! Multi-thread stress: thousands of operations over overlapping keys,
//! watched by several threads while others complete them in random order
//! (checks on their keys, force-completes) and a clock thread expires them.
//! Every operation completes exactly once, callbacks never overlap and always
//! hold the operation lock, and nothing is left watched or armed.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use purgatory::{
    new_operation_lock, Clock, ManualClock, Operation, OperationLock, Purgatory, PurgatoryError,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const OPS: usize = 8_000;
const KEYS: usize = 40;
const KEYS_PER_OP: usize = 3;
const WATCHERS: usize = 3;
const COMPLETERS: usize = 3;
const GROUP_LOCKS: usize = 16;
/// Actions per completer thread once every operation is watched.
const TAIL_ACTIONS: usize = 3_000;

struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

#[test]
fn stress_every_operation_completes_exactly_once() {
    let clock = ManualClock::new();
    let p: Purgatory<Key, MockOp> = Purgatory::builder("stress")
        .clock(clock.clone())
        .reaper(false)
        .shards(16) // few shards: more keys share one, more contention
        .build()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(42);
    let locks: Vec<OperationLock> = (0..GROUP_LOCKS).map(|_| new_operation_lock()).collect();
    let drops = Arc::new(AtomicUsize::new(0));
    // Operations with random timeouts; a quarter share a group lock.
    let ops: Vec<Operation<MockOp>> = (0..OPS)
        .map(|i| {
            let lock = if i % 4 == 0 {
                locks[rng.random_range(0..GROUP_LOCKS)].clone()
            } else {
                new_operation_lock()
            };
            Operation::with_lock(
                MockOp {
                    timeout: Duration::from_millis(rng.random_range(1..300)),
                    lock: Some(lock.clone()),
                    drops: DropCounter(Some(drops.clone())),
                    ..MockOp::default()
                },
                lock,
            )
        })
        .collect();
    let keys: Vec<Vec<Key>> = (0..OPS)
        .map(|_| {
            (0..KEYS_PER_OP)
                .map(|_| format!("key{}", rng.random_range(0..KEYS)))
                .collect()
        })
        .collect();

    let watchers_done = AtomicUsize::new(0);
    // Operations handed to the purgatory so far (approximately the prefix
    // 0..progress, as watchers interleave).
    let progress = AtomicUsize::new(0);
    let completers_done = AtomicUsize::new(0);
    let completed_by_check = AtomicUsize::new(0);
    let completed_by_force = AtomicUsize::new(0);
    let completed_at_watch = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // Watchers: each its own interleaved share of the operations.
        for w in 0..WATCHERS {
            let (p, ops, keys, done, at_watch, progress) = (
                &p,
                &ops,
                &keys,
                &watchers_done,
                &completed_at_watch,
                &progress,
            );
            s.spawn(move || {
                // Counted even if this thread panics, so the clock loop ends.
                let _done = Done(done);
                for i in (w..OPS).step_by(WATCHERS) {
                    match p.try_complete_else_watch(ops[i].clone(), keys[i].clone()) {
                        Ok(true) => {
                            at_watch.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(false) => {}
                        // Force-completed by a completer before being watched.
                        Err(PurgatoryError::AlreadyCompleted) => {}
                        Err(e) => panic!("watch failed: {e}"),
                    }
                    progress.fetch_add(1, Ordering::Release);
                }
            });
        }
        // Completers: random operations, in random order, made completable
        // and checked through a random key of theirs, or force-completed.
        for c in 0..COMPLETERS {
            let watchers_done = &watchers_done;
            let (p, ops, keys, done, by_check, by_force, progress) = (
                &p,
                &ops,
                &keys,
                &completers_done,
                &completed_by_check,
                &completed_by_force,
                &progress,
            );
            s.spawn(move || {
                let _done = Done(done);
                let mut rng = StdRng::seed_from_u64(100 + c as u64);
                let mut tail = 0;
                while tail < TAIL_ACTIONS {
                    if watchers_done.load(Ordering::Acquire) == WATCHERS {
                        tail += 1;
                    }
                    // Mostly recently watched operations (older ones have
                    // mostly expired), sometimes any.
                    let watched = progress.load(Ordering::Acquire).max(1);
                    let i = if rng.random_ratio(9, 10) {
                        rng.random_range(watched.saturating_sub(2_000)..watched)
                    } else {
                        rng.random_range(0..OPS)
                    };
                    match rng.random_range(0..10) {
                        0 => {
                            if ops[i].force_complete() {
                                by_force.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        1..=5 => {
                            ops[i].set_completable();
                            let k = &keys[i][rng.random_range(0..KEYS_PER_OP)];
                            by_check.fetch_add(p.check_and_complete(k), Ordering::Relaxed);
                        }
                        _ => {
                            // A check on an unrelated key: tries operations
                            // made completable but not yet checked.
                            let k = format!("key{}", rng.random_range(0..KEYS));
                            by_check.fetch_add(p.check_and_complete(&k), Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        // The clock: one millisecond per 20 operations watched, so that
        // completions, checks and expiries all happen in good numbers.
        while watchers_done.load(Ordering::Acquire) < WATCHERS
            || completers_done.load(Ordering::Acquire) < COMPLETERS
        {
            let target = progress.load(Ordering::Acquire) as u64 / 20;
            if clock.now_ms() < target {
                clock.advance_ms(1);
                p.advance_clock(Duration::ZERO);
            } else {
                std::thread::yield_now();
            }
        }
    });
    let pending_before = ops.iter().filter(|o| !o.is_completed()).count();
    eprintln!(
        "clock {} ms, {pending_before} pending before the final expiry",
        clock.now_ms()
    );
    // Whatever is left expires.
    clock.advance_ms(1_000);
    p.advance_clock(Duration::ZERO);

    let mut expired = 0;
    for (i, o) in ops.iter().enumerate() {
        assert_eq!(
            o.completions(),
            1,
            "operation {i} completed {} times",
            o.completions()
        );
        assert_eq!(
            o.expirations(),
            usize::from(o.is_expired()),
            "operation {i}"
        );
        assert!(!o.is_watched());
        o.assert_sound();
        expired += usize::from(o.is_expired());
    }
    let by_check = completed_by_check.load(Ordering::Relaxed);
    let by_force = completed_by_force.load(Ordering::Relaxed);
    let at_watch = completed_at_watch.load(Ordering::Relaxed);
    assert_eq!(
        by_check + by_force + at_watch + expired,
        OPS,
        "every completion accounted once"
    );
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    // The purgatory keeps no reference once everything is done and purged:
    // the test's handles are the last ones.
    p.purge();
    assert_eq!(drops.load(Ordering::Relaxed), 0);
    drop(ops);
    assert_eq!(drops.load(Ordering::Relaxed), OPS, "every operation freed");
    eprintln!(
        "stress: {OPS} ops: {by_check} by check, {by_force} forced, {at_watch} at watch, {expired} expired"
    );
}
