//! The purgatory's promises beyond Kafka's own tests: exactly-once under
//! races, callbacks never overlapping, misuse as error values, bounded removal
//! (the million-operation residue test), panics at the boundary, reentrant
//! callbacks, the shutdown policies.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, Weak};
use std::time::{Duration, Instant};

use common::*;
use purgatory::{
    new_operation_lock, DelayedOperation, ManualClock, Operation, OperationLock, Purgatory,
    PurgatoryError, ShutdownPolicy,
};

// ---------------------------------------------------------------- misuse

#[test]
fn empty_key_list_is_an_error_and_nothing_is_tried() {
    let (p, _clock) = manual();
    let r = op(100);
    assert_eq!(
        p.try_complete_else_watch(r.clone(), Vec::<Key>::new()),
        Err(PurgatoryError::NoKeys)
    );
    assert_eq!(r.tries.load(Ordering::Relaxed), 0);
    assert!(!r.is_watched());
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

/// Keys are looked up by any borrowed form, as in a `HashMap`: `String`
/// keys by `&str`, so checks allocate no key.
#[test]
fn keys_are_looked_up_by_a_borrowed_form() {
    let (p, _clock) = manual();
    let r = op(100);
    let other = op(100);
    p.try_complete_else_watch(r.clone(), [key("a"), key("b")])
        .unwrap();
    p.try_complete_else_watch(other.clone(), [key("b")])
        .unwrap();
    assert_eq!((p.watched_on("a"), p.watched_on("b")), (1, 2));
    p.prefetch("a");
    assert_eq!(p.check_and_complete("a"), 0);
    r.set_completable();
    assert_eq!(p.check_and_complete("b"), 1);
    assert!(r.is_completed());
    let cancelled = p.cancel_for_key("b");
    assert_eq!(cancelled.len(), 1);
    assert!(Operation::ptr_eq(&cancelled[0], &other));
    assert_eq!(
        (p.watched_on("a"), p.watched_on("b"), p.watched_keys()),
        (0, 0, 0)
    );
}

#[test]
fn watching_twice_or_after_completion_is_an_error() {
    let (p, _clock) = manual();
    let r = op(100);
    assert_eq!(p.try_complete_else_watch(r.clone(), [key("a")]), Ok(false));
    assert_eq!(
        p.try_complete_else_watch(r.clone(), [key("b")]),
        Err(PurgatoryError::AlreadyWatched)
    );
    let (other, _clock2) = manual();
    assert_eq!(
        other.try_complete_else_watch(r.clone(), [key("b")]),
        Err(PurgatoryError::AlreadyWatched),
        "not in another purgatory either"
    );
    assert!(r.force_complete());
    assert_eq!(
        p.try_complete_else_watch(r.clone(), [key("a")]),
        Err(PurgatoryError::AlreadyCompleted)
    );
    assert_eq!((p.watched(), p.delayed()), (0, 0));
    assert_eq!(r.completions(), 1);
}

#[test]
fn bad_configuration_is_an_error_value() {
    let zero_tick = Purgatory::builder("x")
        .tick(Duration::ZERO)
        .reaper(false)
        .build::<Key, MockOp>();
    assert!(matches!(zero_tick, Err(PurgatoryError::Config(_))));
    let zero_wheel = Purgatory::builder("x")
        .wheel_size(0)
        .reaper(false)
        .build::<Key, MockOp>();
    assert!(matches!(zero_wheel, Err(PurgatoryError::Config(_))));
    for poll in [Duration::ZERO, Duration::from_micros(999)] {
        let short_poll = Purgatory::builder("x")
            .reaper_poll_interval(poll)
            .build::<Key, MockOp>();
        assert_eq!(
            short_poll.unwrap_err(),
            PurgatoryError::ReaperPollInterval {
                poll,
                tick: Duration::from_millis(1)
            }
        );
    }
    let e = Purgatory::builder("x")
        .tick(Duration::from_millis(10))
        .reaper_poll_interval(Duration::from_millis(5))
        .build::<Key, MockOp>()
        .unwrap_err();
    assert!(e.to_string().contains("at least the tick (10ms)"), "{e}");
    // The default poll (200 ms) gives way to a longer tick.
    let coarse = Purgatory::builder("x")
        .tick(Duration::from_millis(500))
        .build::<Key, MockOp>();
    assert!(coarse.is_ok(), "{:?}", coarse.err());
    // Display and source.
    let e = zero_tick.unwrap_err();
    assert!(e.to_string().contains("tick"), "{e}");
    assert!(std::error::Error::source(&e).is_some());
}

// ------------------------------------------------------ basic semantics

#[test]
fn duplicate_keys_watch_twice_and_leave_both_entries() {
    let (p, _clock) = manual();
    let r = op(100);
    p.try_complete_else_watch(r.clone(), [key("a"), key("a"), key("b")])
        .unwrap();
    assert_eq!(p.watched(), 3);
    assert_eq!(p.watched_on(&key("a")), 2);
    r.set_completable();
    assert_eq!(p.check_and_complete(&key("b")), 1);
    assert_eq!((p.watched(), p.watched_keys()), (0, 0));
    assert_eq!(r.completions(), 1);
}

/// More keys than the inline membership capacity (four): the memberships
/// spill to the heap and every one is still left on completion and cancel.
#[test]
fn many_keys_per_operation() {
    let (p, _clock) = manual();
    let keys: Vec<Key> = (0..10).map(|i| format!("p{i}")).collect();
    let a = op(1000);
    let b = op(1000);
    p.try_complete_else_watch(a.clone(), keys.clone()).unwrap();
    p.try_complete_else_watch(b.clone(), keys.iter().rev().cloned())
        .unwrap();
    assert_eq!((p.watched(), p.watched_keys()), (20, 10));
    a.set_completable();
    assert_eq!(p.check_and_complete(&keys[7]), 1);
    assert_eq!((p.watched(), p.watched_keys()), (10, 10));
    assert_eq!(p.cancel_for_key(&keys[3]).len(), 1);
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
}

#[test]
fn zero_timeout_expires_at_once_on_the_executor() {
    let (p, _clock) = manual();
    let r = op(0);
    assert_eq!(p.try_complete_else_watch(r.clone(), [key("a")]), Ok(false));
    p.advance_clock(Duration::ZERO); // waits for the executor
    assert!(r.is_expired());
    assert_eq!((r.completions(), r.expirations()), (1, 1));
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    r.assert_sound();
}

#[test]
fn huge_timeout_does_not_overflow() {
    let (p, clock) = manual();
    let r = op_with(|o| o.timeout = Duration::MAX);
    assert_eq!(p.try_complete_else_watch(r.clone(), [key("a")]), Ok(false));
    advance(&p, &clock, 1_000_000_000);
    assert!(!r.is_completed());
    assert!(r.force_complete());
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

#[test]
fn force_complete_disarms_and_unwatches_and_never_expires() {
    let (p, clock) = manual();
    let r = op(50);
    p.try_complete_else_watch(r.clone(), [key("a"), key("b")])
        .unwrap();
    assert!(r.force_complete());
    assert!(!r.force_complete());
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    advance(&p, &clock, 100);
    assert!(!r.is_expired());
    assert_eq!((r.completions(), r.expirations()), (1, 0));
    // An operation never watched can be force-completed too.
    let lone = op(50);
    assert!(lone.force_complete());
    assert_eq!(lone.completions(), 1);
}

#[test]
fn check_and_complete_counts_only_its_own_completions() {
    let (p, _clock) = manual();
    let ops: Vec<_> = (0..10).map(|_| op(1000)).collect();
    for o in &ops {
        p.try_complete_else_watch(o.clone(), [key("k")]).unwrap();
    }
    for o in ops.iter().step_by(2) {
        o.set_completable();
    }
    assert!(ops[0].force_complete(), "completed elsewhere: not counted");
    assert_eq!(p.check_and_complete(&key("k")), 4);
    assert_eq!(p.watched_on(&key("k")), 5);
    assert_eq!(p.check_and_complete(&key("unknown")), 0);
}

/// Many operations on one key, more than one snapshot chunk: all are tried,
/// and those completing leave while the scan goes on.
#[test]
fn check_and_complete_scans_long_lists_in_chunks() {
    let (p, _clock) = manual();
    let ops: Vec<_> = (0..2000).map(|_| op(1000)).collect();
    for o in &ops {
        p.try_complete_else_watch(o.clone(), [key("hot"), key("other")])
            .unwrap();
    }
    for o in ops.iter().filter(|_| true).skip(1).step_by(3) {
        o.set_completable();
    }
    let expected = ops
        .iter()
        .filter(|o| o.completable.load(Ordering::Relaxed))
        .count();
    assert_eq!(p.check_and_complete(&key("hot")), expected);
    assert_eq!(p.watched(), 2 * (2000 - expected));
    for o in &ops {
        assert_eq!(
            o.tries.load(Ordering::Relaxed),
            3,
            "two tries to watch, one check"
        );
    }
}

/// A check resumes its chunked scan after its shard gave its room back:
/// every list of the shard freed between two chunks (here by a cancel from
/// the first operation's `try_complete`; another thread could do the same)
/// ends the scan, with no panic (review 45).
#[test]
fn a_chunked_check_ends_when_its_shard_freed_every_list_between_chunks() {
    /// Cancels every key's operations when first tried, if `trigger`.
    struct CancelAll {
        trigger: bool,
        purgatory: Arc<std::sync::OnceLock<Weak<Purgatory<u32, CancelAll>>>>,
    }
    impl DelayedOperation for CancelAll {
        fn timeout(&self) -> Duration {
            Duration::from_secs(3600)
        }
        fn try_complete(&self) -> bool {
            if let Some(p) = self.purgatory.get().and_then(Weak::upgrade) {
                if self.trigger {
                    for k in 0..=KEYS {
                        p.cancel_for_key(&k);
                    }
                }
            }
            false
        }
        fn on_complete(&self) {}
    }
    // More lists than a shard keeps room for (64) in each of two shards.
    const KEYS: u32 = 300;
    let cell = Arc::new(std::sync::OnceLock::new());
    let p = Arc::new(
        Purgatory::builder("room")
            .clock(ManualClock::new())
            .reaper(false)
            .shards(2)
            .build::<u32, CancelAll>()
            .unwrap(),
    );
    let mk = |trigger| CancelAll {
        trigger,
        purgatory: cell.clone(),
    };
    // Key 0 holds 65 operations, two chunks; the first tried cancels all.
    assert_eq!(p.try_complete_else_watch(mk(true), [0]), Ok(false));
    for k in std::iter::repeat_n(0, 64).chain(1..=KEYS) {
        assert_eq!(p.try_complete_else_watch(mk(false), [k]), Ok(false));
    }
    cell.set(Arc::downgrade(&p)).ok();
    assert_eq!(p.check_and_complete(&0), 0);
    assert_eq!((p.watched(), p.delayed()), (0, 0));
    assert_eq!(p.stats().cancelled, 65 + KEYS as usize);
    // The shard works on.
    assert_eq!(p.try_complete_else_watch(mk(false), [0]), Ok(false));
    assert_eq!(p.watched_on(&0), 1);
}

#[test]
fn shared_lock_is_held_in_every_callback() {
    let (p, clock) = manual();
    let lock = new_operation_lock();
    let mk = |t| {
        Operation::with_lock(
            MockOp {
                timeout: Duration::from_millis(t),
                lock: Some(lock.clone()),
                ..MockOp::default()
            },
            lock.clone(),
        )
    };
    let (a, b, c) = (mk(10), mk(1000), mk(1000));
    for o in [&a, &b, &c] {
        p.try_complete_else_watch(o.clone(), [key("group")])
            .unwrap();
    }
    // Code holding the group lock may check (the lock is reentrant).
    {
        let _g = lock.lock();
        b.set_completable();
        assert_eq!(p.check_and_complete(&key("group")), 1);
    }
    assert!(c.force_complete());
    advance(&p, &clock, 10);
    assert!(a.is_expired());
    for o in [&a, &b, &c] {
        o.assert_sound();
        assert_eq!(o.completions(), 1);
    }
    assert!(a.is_locked_by_current_thread() == lock.is_owned_by_current_thread());
}

/// A hasher under which every key collides (one shard, one bucket), and
/// which counts its hashes.
#[derive(Default)]
struct Colliding;

static COLLIDING_HASHES: AtomicUsize = AtomicUsize::new(0);

impl std::hash::Hasher for Colliding {
    fn write(&mut self, _: &[u8]) {}
    fn finish(&self) -> u64 {
        COLLIDING_HASHES.fetch_add(1, Ordering::Relaxed);
        7
    }
}

type AllCollide = std::hash::BuildHasherDefault<Colliding>;

/// A caller-chosen hasher is the one used (here every key collides), and
/// keys that collide still keep their own lists: checks, cancels and counts
/// see exactly their key's operations.
#[test]
fn a_custom_hasher_is_used_and_colliding_keys_stay_apart() {
    let clock = ManualClock::new();
    let p: Purgatory<Key, MockOp, AllCollide> = Purgatory::builder("colliding")
        .clock(clock.clone())
        .reaper(false)
        .hasher(AllCollide::default())
        .build()
        .unwrap();
    let keys: Vec<Key> = (0..50).map(|i| key(&format!("k{i}"))).collect();
    let ops: Vec<Vec<Operation<MockOp>>> = keys
        .iter()
        .map(|k| {
            (0..4)
                .map(|_| {
                    let o = op(100);
                    p.try_complete_else_watch(o.clone(), [k.clone()]).unwrap();
                    o
                })
                .collect()
        })
        .collect();
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (200, 200, 50));
    assert!(
        COLLIDING_HASHES.load(Ordering::Relaxed) >= 200,
        "the hasher is used"
    );
    for o in ops[7].iter().chain(&ops[8]) {
        o.set_completable();
    }
    assert_eq!(p.check_and_complete(&keys[7]), 4);
    assert!(ops[8].iter().all(|o| !o.is_completed()), "not checked");
    assert_eq!((p.watched_on(&keys[7]), p.watched_on(&keys[8])), (0, 4));
    assert_eq!(p.cancel_for_key(&keys[9]).len(), 4);
    assert_eq!((p.watched(), p.watched_keys()), (192, 48));
    clock.advance_ms(100);
    p.advance_clock(Duration::ZERO);
    let expired: usize = ops.iter().flatten().map(|o| o.expirations()).sum();
    assert_eq!(expired, 192);
    assert!(ops[9].iter().all(|o| o.completions() == 0));
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
}

// ------------------------------------------------ residue: the OOM class

/// Kafka keeps completed operations in the lists of keys never checked
/// again until a purge (its OOM bugs, reference 6.1). A million operations
/// watched on two keys and completed through one key leave nothing behind:
/// `watched()` is 0 after every round, no list is left for the cold keys,
/// and every operation has been freed.
#[test]
fn a_million_operations_completed_through_one_key_leave_no_residue() {
    const ROUNDS: usize = 100;
    const PER_ROUND: usize = 10_000;
    let start = Instant::now();
    let (p, _clock) = manual();
    let hot = key("hot");
    let drops = Arc::new(AtomicUsize::new(0));
    let mut peak_watched = 0;
    for round in 0..ROUNDS {
        let cold = format!("never-checked-{round}");
        for _ in 0..PER_ROUND {
            let o = op_with(|o| {
                o.timeout = Duration::from_secs(30);
                o.drops = DropCounter(Some(drops.clone()));
            });
            p.try_complete_else_watch(o.clone(), [hot.clone(), cold.clone()])
                .unwrap();
            o.set_completable();
        }
        peak_watched = peak_watched.max(p.watched());
        assert_eq!(p.check_and_complete(&hot), PER_ROUND);
        assert_eq!(p.watched(), 0, "residue after round {round}");
        assert_eq!(p.delayed(), 0);
    }
    assert_eq!(peak_watched, 2 * PER_ROUND);
    assert_eq!(
        p.watched_keys(),
        0,
        "no empty list is kept for the cold keys"
    );
    p.purge();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        ROUNDS * PER_ROUND,
        "completed operations are freed, not just uncounted"
    );
    eprintln!(
        "1,000,000 operations watched and completed in {:?}",
        start.elapsed()
    );
}

#[test]
fn force_completed_operations_are_freed_in_bounded_batches() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 1_000;
    const BATCH: usize = 64; // the purgatory's retire batch
    let (p, clock) = manual();
    let drops = Arc::new(AtomicUsize::new(0));
    let ops: Vec<Vec<Operation<MockOp>>> = (0..THREADS)
        .map(|_| {
            (0..PER_THREAD)
                .map(|i| {
                    let o = op_with(|o| {
                        o.timeout = Duration::from_millis(100 + i as u64 % 50);
                        o.drops = DropCounter(Some(drops.clone()));
                    });
                    p.try_complete_else_watch(o.clone(), [key("a"), key(&format!("k{i}"))])
                        .unwrap();
                    o
                })
                .collect()
        })
        .collect();
    assert_eq!(p.watched(), 2 * THREADS * PER_THREAD);
    assert_eq!(p.delayed(), THREADS * PER_THREAD);
    let finished = Arc::new(Barrier::new(THREADS + 1));
    let released = Arc::new(Barrier::new(THREADS + 1));
    std::thread::scope(|s| {
        for mine in ops {
            let (finished, released) = (finished.clone(), released.clone());
            s.spawn(move || {
                // The last few of each thread are still retired (unfreed)
                // when the clock passes their timeouts; kept to check them.
                let last: Vec<_> = mine[PER_THREAD - 10..].to_vec();
                for o in mine {
                    assert!(o.force_complete());
                }
                // Keep the thread (and its stripe) alive while checking.
                finished.wait();
                released.wait();
                for o in last {
                    assert_eq!((o.completions(), o.expirations()), (1, 0));
                }
            });
        }
        finished.wait();
        // Counts drop at once; slots and timer entries follow in batches.
        assert_eq!((p.watched(), p.delayed()), (0, 0));
        let freed = drops.load(Ordering::SeqCst);
        // Each stripe holds fewer than a batch (these threads use at most
        // THREADS stripes), and at most 8 freed batches wait for a watching
        // thread to drop them.
        let lingering = THREADS * PER_THREAD - freed;
        assert!(
            lingering < BATCH * (THREADS + 8),
            "{lingering} completed operations linger"
        );
        // Their timer entries are dead: nothing expires.
        advance(&p, &clock, 1_000);
        released.wait();
    });
    assert_eq!(drops.load(Ordering::SeqCst), THREADS * PER_THREAD);
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    // A batch can also be freed by hand; nothing expired meanwhile.
    let o = op(10);
    p.try_complete_else_watch(o.clone(), [key("a")]).unwrap();
    assert!(o.force_complete());
    assert_eq!(p.watched_on(&key("a")), 0, "watched_on purges first");
    p.purge();
    advance(&p, &clock, 2_000);
    assert_eq!((o.completions(), o.expirations()), (1, 0));
}

/// The threads that dropped operations, in order.
type DroppedOn = Arc<Mutex<Vec<std::thread::ThreadId>>>;

/// Records the thread that drops it, and panics in `Drop` when asked.
struct DropTracked {
    dropped_on: DroppedOn,
    panic_on_drop: bool,
}

impl DelayedOperation for DropTracked {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {}
}

impl Drop for DropTracked {
    fn drop(&mut self) {
        self.dropped_on
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        if self.panic_on_drop {
            panic!("DropTracked panics in drop");
        }
    }
}

/// A purgatory of `DropTracked` on a manual clock, `n` operations watched
/// under one key by this thread, and their only handles.
fn watched_tracked(
    n: usize,
    panic_on_drop: bool,
) -> (
    Purgatory<Key, DropTracked>,
    DroppedOn,
    Vec<Operation<DropTracked>>,
) {
    let p = Purgatory::builder("drops")
        .clock(ManualClock::new())
        .reaper(false)
        .build()
        .unwrap();
    let dropped_on = Arc::new(Mutex::new(Vec::new()));
    let ops = (0..n)
        .map(|_| {
            let o = Operation::new(DropTracked {
                dropped_on: dropped_on.clone(),
                panic_on_drop,
            });
            assert!(!p.try_complete_else_watch(o.clone(), [key("k")]).unwrap());
            o
        })
        .collect();
    (p, dropped_on, ops)
}

/// Force-completes `ops` on a thread of its own, which drops the handles.
fn complete_elsewhere(ops: Vec<Operation<DropTracked>>) -> std::thread::ThreadId {
    std::thread::spawn(move || {
        for o in ops {
            assert!(o.force_complete());
        }
        std::thread::current().id()
    })
    .join()
    .unwrap()
}

/// The prompt-release rule: an operation completed on one thread (its
/// handle dropped there) is dropped by that thread's call, before it
/// returns, with no later call to the purgatory; counting and purging run
/// no `Drop` code, as there is none left to run.
#[test]
fn completed_operations_are_dropped_by_the_call_that_completed_them() {
    const BATCH: usize = 64; // the purgatory's retire batch
    let (p, dropped_on, ops) = watched_tracked(2 * BATCH + 10, false);
    let completer = complete_elsewhere(ops);
    {
        let dropped = dropped_on.lock().unwrap();
        assert_eq!(dropped.len(), 2 * BATCH + 10);
        assert!(dropped.iter().all(|&t| t == completer));
    }
    assert_eq!((p.watched(), p.delayed()), (0, 0));
    assert_eq!((p.watched_on(&key("k")), p.watched_keys()), (0, 0));
    p.purge();
    assert_eq!(dropped_on.lock().unwrap().len(), 2 * BATCH + 10);
}

/// Completes when `ready`; `gated` ones stop in their next try until the
/// test lets them go. Marks its drop.
struct Gated {
    ready: AtomicBool,
    tries: AtomicUsize,
    gate: Option<(AtomicBool, Arc<Barrier>)>,
    dropped: Arc<AtomicBool>,
}

impl Gated {
    fn new(gated: bool) -> (Operation<Gated>, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        let gate = gated.then(|| (AtomicBool::new(false), Arc::new(Barrier::new(2))));
        let op = Gated {
            ready: AtomicBool::new(false),
            tries: AtomicUsize::new(0),
            gate,
            dropped: dropped.clone(),
        };
        (Operation::new(op), dropped)
    }
}

impl DelayedOperation for Gated {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        self.tries.fetch_add(1, Ordering::AcqRel);
        if let Some((armed, barrier)) = &self.gate {
            if armed.swap(false, Ordering::AcqRel) {
                barrier.wait(); // in the try
                barrier.wait(); // let go
            }
        }
        self.ready.load(Ordering::Acquire)
    }
    fn on_complete(&self) {}
}

impl Drop for Gated {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::Release);
    }
}

/// The prompt-release rule with a check of another key running: that
/// check holds its copy of an operation only while it tries it, not
/// through the slow tries of the operations after it in its chunk. So
/// when the call that completed the operation returns, nobody holds it.
#[test]
fn a_concurrent_check_of_another_key_does_not_hold_a_completed_operation() {
    let p: Arc<Purgatory<Key, Gated>> = Arc::new(
        Purgatory::builder("release-check")
            .clock(ManualClock::new())
            .reaper(false)
            .build()
            .unwrap(),
    );
    let (x, x_dropped) = Gated::new(false);
    let (slow, _) = Gated::new(true);
    assert_eq!(
        p.try_complete_else_watch(x.clone(), [key("a"), key("b")]),
        Ok(false)
    );
    assert_eq!(
        p.try_complete_else_watch(slow.clone(), [key("b")]),
        Ok(false)
    );
    let (armed, barrier) = slow.gate.as_ref().map(|(a, b)| (a, b.clone())).unwrap();
    armed.store(true, Ordering::Release);
    let checker = {
        let p = p.clone();
        std::thread::spawn(move || p.check_and_complete(&key("b")))
    };
    // The checker tried `x` (not ready) and now waits in `slow`'s try: a
    // list keeps its watch order while nothing leaves it. (Operations after
    // a slow one in a check's chunk are held through its try: see
    // `DelayedOperation`.)
    barrier.wait();
    assert_eq!(
        x.tries.load(Ordering::Acquire),
        3,
        "two by the watch, one by the check"
    );
    x.ready.store(true, Ordering::Release);
    let done = x.completion();
    drop(x);
    assert_eq!(p.check_and_complete(&key("a")), 1);
    assert!(
        x_dropped.load(Ordering::Acquire),
        "dropped before the completing call returned, with the checker still busy"
    );
    assert_eq!(ready_now(done), Some(purgatory::Outcome::Completed));
    barrier.wait();
    assert_eq!(checker.join().unwrap(), 0);
    assert!(p.cancel(&slow));
}

/// Operations the purgatory alone holds are dropped by the reaper pass
/// that expires them (on the timer's thread, before `advance_clock`
/// returns), and a panicking `Drop` there is caught and logged: the other
/// operations are still dropped and expiry goes on working.
#[test]
fn expired_operations_are_dropped_by_the_pass_and_a_panicking_drop_is_contained() {
    init_log();
    let clock = ManualClock::new();
    let p: Purgatory<Key, DropTracked> = Purgatory::builder("expiry-drops")
        .clock(clock.clone())
        .reaper(false)
        .build()
        .unwrap();
    let dropped_on = Arc::new(Mutex::new(Vec::new()));
    for i in 0..100 {
        let o = DropTracked {
            dropped_on: dropped_on.clone(),
            panic_on_drop: i % 10 == 0,
        };
        assert_eq!(p.try_complete_else_watch(o, [key("k")]), Ok(false));
    }
    assert!(dropped_on.lock().unwrap().is_empty());
    clock.advance(Duration::from_secs(30));
    p.advance_clock(Duration::ZERO);
    let me = std::thread::current().id();
    {
        let dropped = dropped_on.lock().unwrap();
        assert_eq!(dropped.len(), 100);
        assert!(
            dropped.iter().all(|&t| t != me),
            "dropped on the timer's thread"
        );
    }
    assert_eq!(p.stats().expired, 100);
    let late = Operation::new(DropTracked {
        dropped_on: Arc::new(Mutex::new(Vec::new())),
        panic_on_drop: false,
    });
    p.try_complete_else_watch(late.clone(), [key("k")]).unwrap();
    clock.advance(Duration::from_secs(30));
    p.advance_clock(Duration::ZERO);
    assert!(late.is_expired());
}

/// A cancel lets go of operations whose `Drop` panics without unwinding
/// into the caller; the handles it returns are the caller's to drop.
#[test]
fn panicking_drop_of_a_cancelled_operation_is_contained() {
    init_log();
    let (p, dropped_on, ops) = watched_tracked(64, true);
    let o = ops[0].clone();
    drop(ops);
    // Cancelled alone: the purgatory lets go, `o` still holds it.
    assert!(p.cancel(&o));
    assert!(dropped_on.lock().unwrap().is_empty());
    // A check tries none (none is pending under `k` but 63, which it
    // copies and lets go of: not the last references).
    assert_eq!(p.check_and_complete(&key("k")), 0);
    assert!(dropped_on.lock().unwrap().is_empty());
    let cancelled = p.cancel_for_key(&key("k"));
    assert_eq!(cancelled.len(), 63);
    assert!(
        dropped_on.lock().unwrap().is_empty(),
        "the caller holds them"
    );
    assert_eq!((p.watched(), p.delayed()), (0, 0));
    for o in cancelled.into_iter().chain([o]) {
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(o)));
        assert!(unwound.is_err());
    }
    assert_eq!(dropped_on.lock().unwrap().len(), 64);
}

/// Shares one lock with its siblings, completes once `ready` (by forcing
/// itself, Kafka's pattern, when it holds its own handle in `me`), and
/// counts its drops and those that ran while the dropping thread held that
/// lock.
struct Grouped {
    group: OperationLock,
    ready: Arc<AtomicBool>,
    me: Mutex<Option<Operation<Grouped>>>,
    dropped: Arc<AtomicUsize>,
    dropped_under_lock: Arc<AtomicUsize>,
}

impl DelayedOperation for Grouped {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        if !self.ready.load(Ordering::SeqCst) {
            return false;
        }
        let me = self.me.lock().unwrap().take();
        me.is_none_or(|me| me.force_complete())
    }
    fn on_complete(&self) {}
}

impl Drop for Grouped {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
        if self.group.is_owned_by_current_thread() {
            self.dropped_under_lock.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A purgatory of [`Grouped`] operations sharing one lock and counters.
struct GroupedFixture {
    p: Purgatory<Key, Grouped>,
    group: OperationLock,
    ready: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
    dropped_under_lock: Arc<AtomicUsize>,
}

impl GroupedFixture {
    fn new() -> Self {
        GroupedFixture {
            p: Purgatory::builder("grouped")
                .clock(ManualClock::new())
                .reaper(false)
                .build()
                .unwrap(),
            group: new_operation_lock(),
            ready: Arc::new(AtomicBool::new(false)),
            dropped: Arc::new(AtomicUsize::new(0)),
            dropped_under_lock: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn op(&self) -> Operation<Grouped> {
        Operation::with_lock(
            Grouped {
                group: self.group.clone(),
                ready: self.ready.clone(),
                me: Mutex::new(None),
                dropped: self.dropped.clone(),
                dropped_under_lock: self.dropped_under_lock.clone(),
            },
            self.group.clone(),
        )
    }

    /// Watches `n` operations under `key` and returns their handles.
    fn watched(&self, n: usize, key_name: &str) -> Vec<Operation<Grouped>> {
        (0..n)
            .map(|_| {
                let o = self.op();
                self.p
                    .try_complete_else_watch(o.clone(), [key(key_name)])
                    .unwrap();
                o
            })
            .collect()
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.dropped.load(Ordering::SeqCst),
            self.dropped_under_lock.load(Ordering::SeqCst),
        )
    }
}

/// Force-completes `ops` on a thread of its own, which drops the handles.
fn force_elsewhere(ops: Vec<Operation<Grouped>>) {
    std::thread::spawn(move || {
        for o in ops {
            assert!(o.force_complete());
        }
    })
    .join()
    .unwrap();
}

/// Operations are dropped by the call that completed them once it has
/// released the operation's lock, never under it: by `force_complete` and
/// by `check_and_complete` alike, however many there are.
#[test]
fn drops_never_run_under_an_operation_lock() {
    const N: usize = 1000;
    let f = GroupedFixture::new();
    // Force-completed on another thread, which then drops its handles.
    force_elsewhere(f.watched(N, "k"));
    assert_eq!(f.counts(), (N, 0));
    // Completed by one check, the purgatory holding the only references.
    drop(f.watched(N, "k"));
    f.ready.store(true, Ordering::SeqCst);
    assert_eq!(f.p.check_and_complete(&key("k")), N);
    assert_eq!(f.counts(), (2 * N, 0), "dropped by the check");
}

/// Kafka's pattern: `try_complete` force-completes its own operation. Each
/// such operation counts in `check_and_complete`'s result, and no operation
/// is dropped while the check holds the (shared) group lock, although the
/// nested `force_complete` releases its own guard while the check's outer
/// one still holds the lock.
#[test]
fn a_try_complete_that_forces_itself_counts_and_nothing_drops_under_the_lock() {
    const QUEUED: usize = 512; // the purgatory's unlinked queue
    let f = GroupedFixture::new();
    // 128 operations that complete themselves once ready, each holding
    // its own handle until then (the purgatory holds the rest).
    for o in f.watched(128, "k") {
        *o.me.lock().unwrap() = Some(o.clone());
    }
    // Fill the unlinked queue, so that what the check frees overflows.
    force_elsewhere(f.watched(QUEUED + 64, "f"));
    f.ready.store(true, Ordering::SeqCst);
    assert_eq!(f.p.check_and_complete(&key("k")), 128);
    assert_eq!((f.p.watched(), f.p.delayed()), (0, 0));
    f.p.purge();
    assert_eq!(f.counts(), (128 + QUEUED + 64, 0));
}

/// Runs a closure when it completes.
struct Then(Box<dyn Fn() + Send + Sync>);

impl DelayedOperation for Then {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {
        (self.0)()
    }
}

/// A callback in one purgatory that checks a key of another: what the inner
/// check completes (it runs under the outer operation's lock) is dropped
/// when the outer call returns, with no later call to the inner purgatory,
/// and never under the lock.
#[test]
fn drops_held_back_in_another_purgatory_are_dropped_when_the_outer_call_ends() {
    let inner = Arc::new(GroupedFixture::new());
    drop(inner.watched(128, "k"));
    inner.ready.store(true, Ordering::SeqCst);
    let outer: Purgatory<Key, Then> = Purgatory::builder("outer")
        .clock(ManualClock::new())
        .reaper(false)
        .build()
        .unwrap();
    let checker = inner.clone();
    // The outer operation shares the inner operations' lock, so that their
    // `Drop` sees whether it ran under the outer call's lock.
    let o = Operation::with_lock(
        Then(Box::new(move || {
            assert_eq!(checker.p.check_and_complete(&key("k")), 128);
            assert_eq!(checker.counts(), (0, 0), "held back inside the callback");
        })),
        inner.group.clone(),
    );
    outer
        .try_complete_else_watch(o.clone(), [key("a")])
        .unwrap();
    assert!(o.force_complete());
    assert_eq!(inner.counts(), (128, 0));
}

/// `delayed()` counts armed operations exactly, even when a completed
/// operation's timer entry (retired, not yet cancelled) fires before its
/// batch is freed: the reaper runs here and nothing purges.
#[test]
fn delayed_stays_exact_when_a_retired_timer_entry_fires() {
    let clock = ManualClock::new();
    let p: Purgatory<Key, MockOp> = Purgatory::builder("armed")
        .clock(clock.clone())
        .reaper_poll_interval(Duration::from_millis(1))
        .build()
        .unwrap();
    let (a, b, c) = (op(10), op(10), op(1_000));
    for o in [&a, &b, &c] {
        p.try_complete_else_watch(o.clone(), [key("k")]).unwrap();
    }
    assert!(a.force_complete());
    assert_eq!(p.delayed(), 2);
    clock.advance_ms(10);
    // The reaper expires b; a's dead entry, in the same bucket, fires too.
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.expirations() == 0 {
        assert!(Instant::now() < deadline, "the reaper did not expire b");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(p.delayed(), 1, "only c is armed");
    assert_eq!((a.completions(), a.expirations()), (1, 0));
    assert_eq!(p.watched(), 1);
}

// ------------------------------------------------------------- panics

#[test]
fn panicking_try_complete_counts_as_not_complete() {
    init_log();
    let (p, _clock) = manual();
    let bad = op(1000);
    let good = op(1000);
    bad.panic_in_try.store(true, Ordering::Relaxed);
    assert_eq!(
        p.try_complete_else_watch(bad.clone(), [key("k")]),
        Ok(false)
    );
    p.try_complete_else_watch(good.clone(), [key("k")]).unwrap();
    good.set_completable();
    bad.set_completable();
    assert_eq!(p.check_and_complete(&key("k")), 1, "the good one completes");
    assert!(!bad.is_completed() && bad.is_watched());
    bad.panic_in_try.store(false, Ordering::Relaxed);
    assert_eq!(p.check_and_complete(&key("k")), 1, "and the bad one later");
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

#[test]
fn panicking_on_complete_still_completes_and_unwatches() {
    init_log();
    let (p, _clock) = manual();
    let bad = op_with(|o| {
        o.timeout = Duration::from_millis(1000);
        o.panic_in_complete = true;
    });
    let good = op(1000);
    p.try_complete_else_watch(bad.clone(), [key("k"), key("j")])
        .unwrap();
    p.try_complete_else_watch(good.clone(), [key("k")]).unwrap();
    bad.set_completable();
    good.set_completable();
    assert_eq!(p.check_and_complete(&key("k")), 2);
    assert!(bad.is_completed() && good.is_completed());
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    // The locks are not poisoned: the operation can still be locked.
    drop(bad.lock());
    assert!(!bad.force_complete());
}

/// A callback panicking with a payload that panics again when dropped:
/// the purgatory drops the payload without that second panic escaping.
#[test]
fn a_panic_payload_that_panics_on_drop_stays_contained() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("payload dropped");
        }
    }
    struct Bad;
    impl DelayedOperation for Bad {
        fn timeout(&self) -> Duration {
            Duration::from_secs(30)
        }
        fn try_complete(&self) -> bool {
            std::panic::panic_any(PanicsOnDrop)
        }
        fn on_complete(&self) {
            std::panic::panic_any(PanicsOnDrop)
        }
    }
    let p: Purgatory<u8, Bad> = Purgatory::builder("payloads")
        .clock(ManualClock::new())
        .reaper(false)
        .build()
        .unwrap();
    let o = Operation::new(Bad);
    assert_eq!(p.try_complete_else_watch(o.clone(), [1]), Ok(false));
    assert_eq!(p.check_and_complete(&1), 0);
    assert!(o.force_complete());
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

/// A panicking expiration neither stops the real reaper nor loses the
/// other operations (the second test that really waits).
#[test]
fn panicking_expiration_does_not_kill_the_reaper() {
    init_log();
    let p: Purgatory<Key, MockOp> = Purgatory::builder("panics")
        .reaper_poll_interval(Duration::from_millis(5))
        .build()
        .unwrap();
    let bad = op_with(|o| {
        o.timeout = Duration::from_millis(1);
        o.panic_in_complete = true;
        o.panic_in_expiration = true;
    });
    let good: Vec<_> = (0..10).map(|i| op(5 + i)).collect();
    p.try_complete_else_watch(bad.clone(), [key("k")]).unwrap();
    for o in &good {
        p.try_complete_else_watch(o.clone(), [key("k")]).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while good.iter().any(|o| !o.is_completed()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(bad.is_expired());
    assert_eq!(
        bad.expirations(),
        1,
        "on_expiration ran though on_complete panicked"
    );
    for o in &good {
        assert!(o.is_expired(), "the reaper survived the panic");
    }
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

// ---------------------------------------------------------- reentrancy

/// Callbacks may call back into the purgatory: `on_complete` watches a
/// follow-up operation and checks another key (like a heartbeat scheduling
/// the next expectation), and `try_complete` may force-complete itself.
#[test]
fn callbacks_may_call_back_into_the_purgatory() {
    /// Where a callback finds the purgatory it runs in.
    type PurgatorySlot = Arc<Mutex<Option<Weak<Purgatory<Key, Chain>>>>>;
    struct Chain {
        purgatory: PurgatorySlot,
        remaining: usize,
        /// Force-completed from `try_complete` (taken, to break the cycle
        /// when it is the operation itself).
        force: Mutex<Option<Operation<Chain>>>,
        log: Arc<AtomicUsize>,
    }
    impl DelayedOperation for Chain {
        fn timeout(&self) -> Duration {
            Duration::from_millis(10)
        }
        fn try_complete(&self) -> bool {
            let force = self.force.lock().unwrap().take();
            match force {
                // Kafka's `return forceComplete()` idiom.
                Some(op) => op.force_complete(),
                None => true,
            }
        }
        fn on_complete(&self) {
            self.log.fetch_add(1, Ordering::SeqCst);
            if self.remaining == 0 {
                return;
            }
            let p = self
                .purgatory
                .lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .upgrade()
                .unwrap();
            // Watch a follow-up that cannot complete yet, then check its key:
            // both from inside a callback.
            let next = Chain {
                purgatory: self.purgatory.clone(),
                remaining: self.remaining - 1,
                force: Mutex::new(None),
                log: self.log.clone(),
            };
            let key = format!("chain{}", self.remaining);
            assert_eq!(p.try_complete_else_watch(next, [key.clone()]), Ok(true));
            assert_eq!(p.check_and_complete(&key), 0);
            assert_eq!(p.check_and_complete(&"other".to_owned()), 0);
        }
    }
    let clock = ManualClock::new();
    let p: Arc<Purgatory<Key, Chain>> = Arc::new(
        Purgatory::builder("reentrant")
            .clock(clock)
            .reaper(false)
            .build()
            .unwrap(),
    );
    let slot = Arc::new(Mutex::new(Some(Arc::downgrade(&p))));
    let log = Arc::new(AtomicUsize::new(0));
    let first = Chain {
        purgatory: slot.clone(),
        remaining: 5,
        force: Mutex::new(None),
        log: log.clone(),
    };
    assert_eq!(p.try_complete_else_watch(first, [key("start")]), Ok(true));
    assert_eq!(log.load(Ordering::SeqCst), 6, "the whole chain completed");

    let leaf = || Chain {
        purgatory: slot.clone(),
        remaining: 0,
        force: Mutex::new(None),
        log: log.clone(),
    };
    // try_complete force-completing another operation: lock nesting across
    // operations is fine.
    let other = Operation::new(leaf());
    let nesting = Operation::new(leaf());
    *nesting.force.lock().unwrap() = Some(other.clone());
    assert_eq!(
        p.try_complete_else_watch(nesting.clone(), [key("s")]),
        Ok(true)
    );
    assert!(other.is_completed() && nesting.is_completed());
    assert_eq!(log.load(Ordering::SeqCst), 8);
    // try_complete force-completing itself: completes once.
    let selfish = Operation::new(leaf());
    *selfish.force.lock().unwrap() = Some(selfish.clone());
    assert_eq!(
        p.try_complete_else_watch(selfish.clone(), [key("s")]),
        Ok(true)
    );
    assert!(selfish.is_completed() && !selfish.is_expired());
    assert_eq!(log.load(Ordering::SeqCst), 9, "on_complete ran once");
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

/// Completes itself from inside `try_complete` on its `force_on`-th try
/// (Kafka's `tryComplete` calls `forceComplete()`), then answers `answer`.
struct SelfForcing {
    me: Mutex<Option<Operation<SelfForcing>>>,
    force_on: usize,
    answer: bool,
    tries: AtomicUsize,
    completions: AtomicUsize,
}

impl DelayedOperation for SelfForcing {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        if self.tries.fetch_add(1, Ordering::SeqCst) + 1 != self.force_on {
            return false;
        }
        let me = self.me.lock().unwrap().take().expect("forced once");
        assert!(me.force_complete());
        self.answer
    }
    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
    }
}

/// A try that forces its own completion completes the operation in the
/// call that tried it, whatever it answers: `try_complete_else_watch`
/// returns `Ok(true)` (first or second try), `check_and_complete` counts
/// it, and the purgatory counts one completion, watching nothing after.
#[test]
fn a_try_that_forces_its_own_completion_completes_in_that_call() {
    for force_on in 1..=3 {
        for answer in [false, true] {
            let case = format!("forced on try {force_on}, answering {answer}");
            let p: Purgatory<u8, SelfForcing> = Purgatory::builder("self-forcing")
                .clock(ManualClock::new())
                .reaper(false)
                .build()
                .unwrap();
            let o = Operation::new(SelfForcing {
                me: Mutex::new(None),
                force_on,
                answer,
                tries: AtomicUsize::new(0),
                completions: AtomicUsize::new(0),
            });
            *o.me.lock().unwrap() = Some(o.clone());
            let watched = p.try_complete_else_watch(o.clone(), [1, 2]);
            if force_on <= 2 {
                assert_eq!(watched, Ok(true), "{case}");
            } else {
                assert_eq!(watched, Ok(false), "{case}");
                assert_eq!(p.check_and_complete(&2), 1, "{case}");
            }
            assert!(o.is_completed(), "{case}");
            assert_eq!(o.completions.load(Ordering::SeqCst), 1, "{case}");
            assert_eq!(p.stats().completed, 1, "{case}");
            assert_eq!((p.watched(), p.delayed()), (0, 0), "{case}");
            p.purge();
            assert_eq!(p.watched_keys(), 0, "{case}");
        }
    }
}

// ------------------------------------------------------------ races

/// One operation per round, raced by threads checking each of its keys,
/// a force-complete, and an expiry: exactly one completion, callbacks never
/// overlap, on_expiration only when expired.
#[test]
fn exactly_once_under_racing_checks_force_and_expiry() {
    const ROUNDS: usize = 300;
    let (p, clock) = manual();
    let p = &p;
    for round in 0..ROUNDS {
        let o = locked_op(5);
        let keys = [
            format!("a{round}"),
            format!("b{round}"),
            format!("c{round}"),
        ];
        assert_eq!(
            p.try_complete_else_watch(o.clone(), keys.clone()),
            Ok(false)
        );
        o.set_completable();
        let barrier = Barrier::new(5);
        let counted = AtomicUsize::new(0);
        let forced = AtomicBool::new(false);
        std::thread::scope(|s| {
            for k in &keys {
                let (barrier, counted) = (&barrier, &counted);
                s.spawn(move || {
                    barrier.wait();
                    counted.fetch_add(p.check_and_complete(k), Ordering::Relaxed);
                });
            }
            s.spawn(|| {
                barrier.wait();
                forced.store(o.force_complete(), Ordering::Relaxed);
            });
            barrier.wait();
            clock.advance_ms(5);
            p.advance_clock(Duration::ZERO);
        });
        assert_eq!(o.completions(), 1, "round {round}");
        let by_check = counted.load(Ordering::Relaxed);
        let by_force = usize::from(forced.load(Ordering::Relaxed));
        let by_expiry = usize::from(o.is_expired());
        assert_eq!(
            by_check + by_force + by_expiry,
            1,
            "round {round}: one winner"
        );
        assert_eq!(o.expirations(), by_expiry);
        o.assert_sound();
    }
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
}

/// `try_complete_else_watch` racing `check_and_complete` on the same key
/// with the condition becoming true in between: never a lost wake-up.
#[test]
fn no_lost_wakeup_between_watch_and_check() {
    const ROUNDS: usize = 500;
    let (p, _clock) = manual();
    for round in 0..ROUNDS {
        let o = op_with(|o| {
            o.timeout = Duration::from_secs(60);
            o.spin = round % 3;
        });
        let k = format!("k{round}");
        let barrier = Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                p.try_complete_else_watch(o.clone(), [k.clone()]).unwrap();
            });
            barrier.wait();
            o.set_completable();
            p.check_and_complete(&k);
        });
        // Either the watcher's second try or the check saw the condition.
        assert!(o.is_completed(), "round {round}: wake-up lost");
        o.assert_sound();
    }
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

// ------------------------------------------------------------ shutdown

#[test]
fn shutdown_drop_policy_returns_pending_without_callbacks() {
    let (p, _clock) = manual();
    let pending: Vec<_> = (0..5).map(|_| op(1000)).collect();
    for (i, o) in pending.iter().enumerate() {
        p.try_complete_else_watch(o.clone(), [key("a"), format!("k{i}")])
            .unwrap();
    }
    let done = op(1000);
    p.try_complete_else_watch(done.clone(), [key("a")]).unwrap();
    assert!(done.force_complete());
    assert_eq!(p.shutdown_policy(), ShutdownPolicy::Drop);
    let returned = p.shutdown();
    assert_eq!(returned.len(), 5, "each pending operation once");
    for o in &pending {
        assert!(returned.iter().any(|r| Operation::ptr_eq(r, o)));
        assert!(!o.is_completed() && !o.is_watched());
        assert_eq!(o.completions(), 0);
    }
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    assert!(p.is_shut_down());
    assert!(p.shutdown().is_empty(), "idempotent");
    let late = op(10);
    assert_eq!(
        p.try_complete_else_watch(late.clone(), [key("a")]),
        Err(PurgatoryError::Shutdown)
    );
    assert_eq!(late.tries.load(Ordering::Relaxed), 0);
    assert_eq!(p.check_and_complete(&key("a")), 0);
    // A dropped operation can still be force-completed by its owner.
    assert!(pending[0].force_complete());
}

#[test]
fn shutdown_expire_policy_expires_pending() {
    let clock = ManualClock::new();
    let p: Purgatory<Key, MockOp> = Purgatory::builder("expire")
        .clock(clock)
        .reaper(false)
        .shutdown_policy(ShutdownPolicy::Expire)
        .build()
        .unwrap();
    let pending: Vec<_> = (0..5).map(|_| locked_op(1000)).collect();
    for o in &pending {
        p.try_complete_else_watch(o.clone(), [key("a"), key("b")])
            .unwrap();
    }
    let returned = p.shutdown();
    assert_eq!(returned.len(), 5);
    for o in &pending {
        assert!(o.is_completed() && o.is_expired());
        assert_eq!((o.completions(), o.expirations()), (1, 1));
        o.assert_sound();
    }
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

/// Dropping a purgatory with pending operations and a running reaper
/// neither hangs nor runs callbacks (Drop policy), and frees the operations.
#[test]
fn drop_with_pending_operations_does_not_hang() {
    let p: Purgatory<Key, MockOp> = Purgatory::new("dropped");
    let pending: Vec<_> = (0..100).map(|i| op(60_000 + i)).collect();
    for (i, o) in pending.iter().enumerate() {
        p.try_complete_else_watch(o.clone(), [format!("k{}", i % 7)])
            .unwrap();
    }
    let t = Instant::now();
    drop(p);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
    for o in &pending {
        assert_eq!(o.completions(), 0);
        assert!(!o.is_watched());
    }
}

/// Watchers racing a shutdown that starts while they run. The contract,
/// per outcome of `try_complete_else_watch`:
/// * `Ok(false)`: the operation was pending at shutdown, so it is in the
///   returned list, not completed (Drop) or expired (Expire);
/// * `Err(Shutdown)`: it is not watched; not completed (Drop), or expired
///   only if it had started being watched (Expire).
///
/// Nothing is left watched or armed, nothing completes twice, no hang.
#[test]
fn shutdown_racing_watchers() {
    const OPS: usize = 600;
    for round in 0..20 {
        let expire = round % 2 == 1;
        let clock = ManualClock::new();
        let p: Purgatory<Key, MockOp> = Purgatory::builder("race")
            .clock(clock)
            .reaper(false)
            .shutdown_policy(if expire {
                ShutdownPolicy::Expire
            } else {
                ShutdownPolicy::Drop
            })
            .build()
            .unwrap();
        let ops: Vec<_> = (0..OPS).map(|_| op(1000)).collect();
        let results: Vec<Mutex<Option<Result<bool, PurgatoryError>>>> =
            (0..OPS).map(|_| Mutex::new(None)).collect();
        let progress = AtomicUsize::new(0);
        let returned = std::thread::scope(|s| {
            for half in 0..2 {
                let (p, ops, results, progress) = (&p, &ops, &results, &progress);
                s.spawn(move || {
                    for i in (half..OPS).step_by(2) {
                        let r = p.try_complete_else_watch(ops[i].clone(), [format!("k{}", i % 5)]);
                        *results[i].lock().unwrap() = Some(r);
                        progress.fetch_add(1, Ordering::Release);
                    }
                });
            }
            // Shut down once the watchers are well under way.
            while progress.load(Ordering::Acquire) < OPS / 4 {
                std::thread::yield_now();
            }
            p.shutdown()
        });
        let mut pending_at_shutdown = 0;
        for (i, o) in ops.iter().enumerate() {
            let r = results[i]
                .lock()
                .unwrap()
                .clone()
                .expect("every call returned");
            let in_returned = returned.iter().any(|x| Operation::ptr_eq(x, o));
            assert!(!o.is_watched(), "round {round}: left watched");
            assert!(o.completions() <= 1);
            o.assert_sound();
            match r {
                Ok(false) => {
                    pending_at_shutdown += 1;
                    assert!(
                        in_returned,
                        "round {round}: op {i} pending but not returned"
                    );
                    assert_eq!(o.is_completed(), expire);
                    assert_eq!(o.is_expired(), expire);
                }
                Err(PurgatoryError::Shutdown) => {
                    if expire {
                        assert_eq!(o.is_completed(), o.is_expired());
                        if o.tries.load(Ordering::Relaxed) == 0 {
                            assert!(!o.is_completed(), "untouched after shutdown");
                        }
                    } else {
                        assert!(!o.is_completed());
                    }
                }
                other => panic!("round {round}: unexpected {other:?}"),
            }
        }
        assert!(
            pending_at_shutdown >= OPS / 4 - 2,
            "the race happened mid-way"
        );
        assert!(returned.len() >= pending_at_shutdown);
        assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    }
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Operation<MockOp>>();
    check::<Purgatory<Key, MockOp>>();
    check::<PurgatoryError>();
}

/// A panicking `timeout()` is caught and treated as a zero timeout: the
/// operation expires at once instead of being lost.
#[test]
fn panicking_timeout_expires_at_once() {
    struct BadTimeout(AtomicUsize);
    impl DelayedOperation for BadTimeout {
        fn timeout(&self) -> Duration {
            panic!("timeout panics on purpose")
        }
        fn try_complete(&self) -> bool {
            false
        }
        fn on_complete(&self) {}
        fn on_expiration(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    init_log();
    let p: Purgatory<Key, BadTimeout> = Purgatory::builder("bad-timeout")
        .clock(ManualClock::new())
        .reaper(false)
        .build()
        .unwrap();
    let o = Operation::new(BadTimeout(AtomicUsize::new(0)));
    assert_eq!(p.try_complete_else_watch(o.clone(), [key("k")]), Ok(false));
    p.advance_clock(Duration::ZERO);
    assert!(o.is_expired());
    assert_eq!(o.0.load(Ordering::SeqCst), 1);
}

/// An operation cancelled through one key leaves its other keys' lists
/// before `cancel_for_key` returns (the calling thread frees its retired
/// batch), so once it is watched again under other keys, a check or a
/// cancel through its old keys does not see it.
#[test]
fn stale_entries_of_an_operation_watched_again_are_not_seen() {
    let (p, _clock) = manual();
    let o = op(10_000);
    p.try_complete_else_watch(o.clone(), [key("a"), key("b")])
        .unwrap();
    assert_eq!(p.cancel_for_key(&key("a")).len(), 1);
    // Watched again, under "c" only.
    p.try_complete_else_watch(o.clone(), [key("c")]).unwrap();
    o.set_completable();
    assert_eq!(p.check_and_complete(&key("b")), 0, "not watched under b");
    assert!(!o.is_completed());
    assert!(
        p.cancel_for_key(&key("b")).is_empty(),
        "not watched under b"
    );
    assert!(o.is_watched());
    assert_eq!(p.check_and_complete(&key("c")), 1);
    assert_eq!(o.completions(), 1);
    p.purge();
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
}

/// The same from more threads than the purgatory has retire stripes, so
/// that threads share one: another thread may be freeing the batch that
/// holds this thread's cancelled operation when `cancel` frees its own
/// stripe, and `cancel` must wait for it rather than return with the old
/// slots still in place.
#[test]
fn stale_entries_stay_unseen_when_threads_share_a_retire_stripe() {
    const THREADS: usize = 16;
    const ROUNDS: usize = 1_500;
    let (p, _clock) = manual();
    let seen = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (p, seen) = (&p, &seen);
            s.spawn(move || {
                let [old, gone, new] = ["old", "gone", "new"].map(|k| key(&format!("{k}{t}")));
                for i in 0..ROUNDS {
                    let o = op(10_000);
                    p.try_complete_else_watch(o.clone(), [old.clone(), gone.clone()])
                        .unwrap();
                    assert!(p.cancel(&o));
                    p.try_complete_else_watch(o.clone(), [new.clone()]).unwrap();
                    o.set_completable();
                    let stale = if i % 2 == 0 {
                        p.check_and_complete(&gone)
                    } else {
                        p.cancel_for_key(&gone).len()
                    };
                    seen.fetch_add(stale, Ordering::Relaxed);
                    assert_eq!(p.check_and_complete(&new), 1);
                }
            });
        }
    });
    assert_eq!(
        seen.load(Ordering::Relaxed),
        0,
        "found through a key it left"
    );
    p.purge();
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
}
