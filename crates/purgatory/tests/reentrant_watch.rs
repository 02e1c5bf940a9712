//! An operation completed on the watching thread while it is being added to
//! its watch lists: the key iterator runs under the operation's lock, after
//! the operation is marked watched, and the lock is reentrant, so a
//! `force_complete` or a `check_and_complete` on a key already joined
//! completes it there. It must then leave every list, not be counted as
//! watched or delayed, complete once, resolve its waiters and be freed.

mod common;
use common::ready_now;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use purgatory::{DelayedOperation, Operation, Outcome, Purgatory, PurgatoryError};

#[derive(Default)]
struct Flags {
    ready: AtomicBool,
    completed: AtomicUsize,
    dropped: AtomicBool,
}

struct Probe(Arc<Flags>);

impl DelayedOperation for Probe {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        self.0.ready.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {
        self.0.completed.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::SeqCst);
    }
}

fn purgatory() -> Purgatory<u32, Probe> {
    Purgatory::builder("reentrant")
        .reaper(false)
        .build::<u32, Probe>()
        .unwrap()
}

/// Watches `op` under keys 0, 1 and 2, running `complete` from the iterator
/// when it yields key 1 (key 0 is joined by then), and checks that the
/// operation completed once, that the watch took no key after that, and
/// that it left nothing behind.
fn watch_completing_at_key_1(complete: impl Fn(&Purgatory<u32, Probe>, &Operation<Probe>)) {
    let purgatory = purgatory();
    let flags = Arc::new(Flags::default());
    let op = Operation::new(Probe(flags.clone()));
    let completion = op.completion();
    let inner = op.clone();
    let p = &purgatory;
    let taken = AtomicUsize::new(0);
    let keys = (0..3u32).inspect(|&k| {
        taken.fetch_add(1, Ordering::SeqCst);
        if k == 1 {
            complete(p, &inner);
        }
    });
    let result = catch_unwind(AssertUnwindSafe(|| {
        purgatory.try_complete_else_watch(op.clone(), keys)
    }));
    let result = result.expect("try_complete_else_watch panicked");
    assert_eq!(result, Ok(true), "completed during the call");
    assert_eq!(taken.into_inner(), 2, "a key taken after the completion");
    assert!(op.is_completed() && !op.is_watched());
    assert_eq!(op.outcome(), Some(Outcome::Completed));
    assert_eq!(
        flags.completed.load(Ordering::SeqCst),
        1,
        "on_complete once"
    );
    assert_eq!(
        ready_now(completion),
        Some(Outcome::Completed),
        "waiter resolved"
    );
    assert_eq!(
        purgatory.watched(),
        0,
        "a completed operation counted watched"
    );
    assert_eq!(purgatory.delayed(), 0, "a completed operation armed");
    for k in 0..3 {
        assert_eq!(purgatory.watched_on(&k), 0, "left in key {k}'s list");
    }
    let stats = purgatory.stats();
    assert_eq!((stats.completed, stats.expired, stats.cancelled), (1, 0, 0));
    // Nothing fires or completes it again later.
    assert_eq!(purgatory.check_and_complete(&0), 0);
    assert!(!op.force_complete());
    assert_eq!(flags.completed.load(Ordering::SeqCst), 1);
    drop(op);
    drop(inner);
    purgatory.purge();
    assert!(flags.dropped.load(Ordering::SeqCst), "the operation leaked");
    drop(purgatory);
}

#[test]
fn force_completing_from_the_key_iterator_leaves_nothing_behind() {
    watch_completing_at_key_1(|_, op| assert!(op.force_complete()));
}

#[test]
fn checking_a_joined_key_from_the_key_iterator_leaves_nothing_behind() {
    watch_completing_at_key_1(|p, op| {
        op.0.ready.store(true, Ordering::SeqCst);
        assert_eq!(p.check_and_complete(&0), 1);
    });
}

#[test]
fn the_purgatory_watches_again_after_a_reentrant_completion() {
    let purgatory = purgatory();
    let flags = Arc::new(Flags::default());
    let first = Operation::new(Probe(flags.clone()));
    let inner = first.clone();
    let keys = [0u32, 1].into_iter().inspect(|&k| {
        if k == 1 {
            assert!(inner.force_complete());
        }
    });
    assert_eq!(
        purgatory.try_complete_else_watch(first.clone(), keys),
        Ok(true)
    );
    let second = Operation::new(Probe(Arc::new(Flags::default())));
    assert_eq!(
        purgatory.try_complete_else_watch(second.clone(), [0, 1]),
        Ok(false)
    );
    assert_eq!((purgatory.watched(), purgatory.delayed()), (2, 1));
    assert_eq!(purgatory.watched_on(&0), 1);
    assert!(second.force_complete());
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
}

/// Watches a new operation under keys 0 to 3; when the iterator yields key 2
/// (keys 0 and 1 are joined by then), cancels key 0 and then runs `then`.
/// The watch must take no key after that one.
/// Returns the purgatory, the operation, its flags, the waiter taken before
/// the watch and what the watch returned (or its panic).
#[allow(clippy::type_complexity)]
fn watch_cancelling_key_0(
    then: impl Fn(&Purgatory<u32, Probe>, &Operation<Probe>, u32),
) -> (
    Purgatory<u32, Probe>,
    Operation<Probe>,
    Arc<Flags>,
    purgatory::Completion,
    std::thread::Result<Result<bool, purgatory::PurgatoryError>>,
) {
    let purgatory = purgatory();
    let flags = Arc::new(Flags::default());
    let op = Operation::new(Probe(flags.clone()));
    let completion = op.completion();
    let result = {
        let inner = op.clone();
        let p = &purgatory;
        let keys = (0..4u32).inspect(|&k| {
            assert!(k < 3, "a key taken after the operation was cancelled");
            if k == 2 {
                let cancelled = p.cancel_for_key(&0);
                assert_eq!(cancelled.len(), 1, "key 0's operation not cancelled");
                assert!(Operation::ptr_eq(&cancelled[0], &inner));
            }
            then(p, &inner, k);
        });
        catch_unwind(AssertUnwindSafe(|| {
            purgatory.try_complete_else_watch(op.clone(), keys)
        }))
    };
    (purgatory, op, flags, completion, result)
}

#[test]
fn cancelling_a_joined_key_from_the_key_iterator_cancels_the_operation() {
    let (purgatory, op, flags, completion, result) = watch_cancelling_key_0(|_, _, _| {});
    assert_eq!(
        result.expect("no panic"),
        Ok(false),
        "watched, then cancelled"
    );
    assert!(!op.is_watched() && !op.is_completed());
    assert_eq!(op.outcome(), Some(Outcome::Cancelled));
    assert_eq!(ready_now(completion), Some(Outcome::Cancelled));
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    for k in 0..4 {
        assert_eq!(purgatory.watched_on(&k), 0, "left in key {k}'s list");
    }
    let stats = purgatory.stats();
    assert_eq!((stats.completed, stats.expired, stats.cancelled), (0, 0, 1));
    assert_eq!(flags.completed.load(Ordering::SeqCst), 0, "no callback");
    // It may be watched again, and a check of its key finds it.
    assert_eq!(
        purgatory.try_complete_else_watch(op.clone(), [0]),
        Ok(false)
    );
    assert_eq!(purgatory.watched_on(&0), 1);
    flags.ready.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check_and_complete(&0), 1);
    assert_eq!(flags.completed.load(Ordering::SeqCst), 1);
    drop(op);
    purgatory.purge();
    assert!(flags.dropped.load(Ordering::SeqCst), "the operation leaked");
}

/// Until the watch that its keys cancelled returns, the operation still
/// has slots in the lists that watch joined: it is cancelled, and neither
/// watched again (here or elsewhere), nor forced, nor found by a check or
/// a cancel of those keys. Then it may be watched again.
#[test]
fn an_operation_cancelled_from_its_watchs_keys_is_left_alone_until_the_watch_returns() {
    let other = purgatory();
    let (purgatory, op, flags, _, result) = watch_cancelling_key_0(|p, op, k| {
        if k == 2 {
            assert!(!op.is_watched());
            assert_eq!(op.outcome(), Some(Outcome::Cancelled));
            for q in [p, &other] {
                assert_eq!(
                    q.try_complete_else_watch(op.clone(), [7]),
                    Err(PurgatoryError::AlreadyWatched)
                );
            }
            assert!(!op.force_complete());
            assert!(!p.cancel(op));
            assert!(p.cancel_for_key(&1).is_empty());
            op.0.ready.store(true, Ordering::SeqCst);
            assert_eq!(p.check_and_complete(&1), 0);
        }
    });
    assert_eq!(result.expect("no panic"), Ok(false));
    assert_eq!(op.outcome(), Some(Outcome::Cancelled));
    assert_eq!(flags.completed.load(Ordering::SeqCst), 0, "no callback");
    let stats = purgatory.stats();
    assert_eq!((stats.completed, stats.expired, stats.cancelled), (0, 0, 1));
    assert_eq!(other.stats(), purgatory::PurgatoryStats::default());
    for k in 0..4 {
        assert_eq!(purgatory.watched_on(&k), 0, "left in key {k}'s list");
    }
    // Ready now: watched again, it completes at once.
    assert_eq!(other.try_complete_else_watch(op.clone(), [7]), Ok(true));
    assert_eq!(flags.completed.load(Ordering::SeqCst), 1);
    assert_eq!(other.stats().completed, 1);
}

/// A key panicking after the keys cancelled the operation: the watch
/// leaves its lists and ends the cancelled stay's claim before the panic
/// goes on, so the operation may be watched again.
#[test]
fn a_key_panicking_after_its_watch_was_cancelled_leaves_it_cancelled() {
    let (purgatory, op, flags, _, result) = watch_cancelling_key_0(|_, _, k| {
        assert!(k != 2, "the key iterator panics");
    });
    assert!(result.is_err(), "the panic reaches the caller");
    assert!(!op.is_watched());
    assert_eq!(op.outcome(), Some(Outcome::Cancelled));
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    for k in 0..4 {
        assert_eq!(purgatory.watched_on(&k), 0, "left in key {k}'s list");
    }
    assert_eq!(
        purgatory.try_complete_else_watch(op.clone(), [7]),
        Ok(false)
    );
    assert_eq!((purgatory.watched(), purgatory.delayed()), (1, 1));
    flags.ready.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check_and_complete(&7), 1);
    let stats = purgatory.stats();
    assert_eq!((stats.completed, stats.expired, stats.cancelled), (1, 0, 1));
}

#[test]
fn an_own_lock_nests_65535_deep_and_one_more_panics_harmlessly() {
    let op = Operation::new(Probe(Arc::new(Flags::default())));
    let guards: Vec<_> = (0..65_535).map(|_| op.lock()).collect();
    let more = catch_unwind(AssertUnwindSafe(|| drop(op.lock())));
    assert!(more.is_err(), "the 65,536th guard panics");
    drop(guards);
    // Released by the last guard: another thread takes it.
    std::thread::scope(|s| {
        s.spawn(|| drop(op.lock())).join().unwrap();
    });
}
