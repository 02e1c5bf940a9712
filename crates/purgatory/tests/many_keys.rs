//! Operations with more keys than an operation keeps in place, with and
//! without waiters, leave every list whichever way they end: a check on
//! their last key, the timeout, `cancel`, `cancel_for_key`. Their waiters
//! learn the outcome, and nothing of them is left watched.

mod common;
use common::ready_now;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use purgatory::{DelayedOperation, ManualClock, Operation, Outcome, Purgatory};

struct Op {
    ready: Arc<AtomicBool>,
}

impl DelayedOperation for Op {
    fn timeout(&self) -> Duration {
        Duration::from_millis(100)
    }
    fn try_complete(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {}
}

/// An operation, and the flag that lets it complete.
fn new_op() -> (Operation<Op>, Arc<AtomicBool>) {
    let ready = Arc::new(AtomicBool::new(false));
    let op = Operation::new(Op {
        ready: ready.clone(),
    });
    (op, ready)
}

#[derive(Clone, Copy, Debug)]
enum End {
    CheckLastKey,
    Expire,
    Cancel,
    CancelFirstKey,
}

fn run(keys: u32, awaited: bool, end: End) {
    let clock = ManualClock::new();
    let purgatory = Purgatory::builder("many")
        .clock(clock.clone())
        .reaper(false)
        .build::<u32, Op>()
        .unwrap();
    let (op, ready) = new_op();
    let waiting = awaited.then(|| op.completion());
    let all: Vec<u32> = (0..keys).collect();
    assert_eq!(
        purgatory.try_complete_else_watch(op.clone(), all),
        Ok(false)
    );
    assert_eq!(purgatory.watched(), keys as usize);
    assert_eq!(purgatory.watched_keys(), keys as usize);
    let want = match end {
        End::CheckLastKey => {
            ready.store(true, Ordering::SeqCst);
            assert_eq!(purgatory.check_and_complete(&(keys - 1)), 1);
            Outcome::Completed
        }
        End::Expire => {
            clock.advance(Duration::from_millis(100));
            purgatory.advance_clock(Duration::ZERO);
            Outcome::Expired
        }
        End::Cancel => {
            assert!(purgatory.cancel(&op));
            Outcome::Cancelled
        }
        End::CancelFirstKey => {
            assert_eq!(purgatory.cancel_for_key(&0).len(), 1);
            Outcome::Cancelled
        }
    };
    let what = format!("{keys} keys, awaited {awaited}, {end:?}");
    assert_eq!(op.outcome(), Some(want), "{what}");
    if let Some(waiting) = waiting {
        assert_eq!(ready_now(waiting), Some(want), "{what}");
    }
    purgatory.purge();
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0), "{what}");
    assert_eq!(purgatory.watched_keys(), 0, "{what}");
}

#[test]
fn every_way_out_leaves_every_list_whatever_the_key_count() {
    for keys in 1..=8 {
        for awaited in [false, true] {
            for end in [
                End::CheckLastKey,
                End::Expire,
                End::Cancel,
                End::CancelFirstKey,
            ] {
                run(keys, awaited, end);
            }
        }
    }
}

/// A cancelled operation with many keys may be watched again, with fewer
/// keys, and then leaves every list of its second stay.
#[test]
fn watched_again_with_fewer_keys_after_a_cancel() {
    let purgatory = Purgatory::builder("again")
        .reaper(false)
        .build::<u32, Op>()
        .unwrap();
    let (op, ready) = new_op();
    assert_eq!(
        purgatory.try_complete_else_watch(op.clone(), 0..6),
        Ok(false)
    );
    assert!(purgatory.cancel(&op));
    assert_eq!(
        purgatory.try_complete_else_watch(op.clone(), [7, 8]),
        Ok(false)
    );
    let waiting = op.completion();
    assert_eq!((purgatory.watched(), purgatory.watched_keys()), (2, 2));
    ready.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check_and_complete(&8), 1);
    assert_eq!(ready_now(waiting), Some(Outcome::Completed));
    purgatory.purge();
    assert_eq!((purgatory.watched(), purgatory.watched_keys()), (0, 0));
}
