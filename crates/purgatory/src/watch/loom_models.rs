//! The stay a list shows, under loom: a check copies an operation out of a
//! list with the epoch read there, under the shard lock, and acts under the
//! operation lock only if that stay goes on. A cancel frees the stay's
//! slots under the operation lock (or, cancelled by its watch's key
//! iterator, keeps the claim until that watch has freed them), so a new
//! stay (claimed under that lock) is never completed through a slot of the
//! one before. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p purgatory --release --lib loom_models`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::members::Members;
use crate::operation::{DelayedOperation, NoOwner, Operation, OwnerRef, Shared};
use crate::outcome::Outcome;
use crate::sync::Mutex;

/// Completes whenever it is tried.
struct Ready;

impl DelayedOperation for Ready {
    fn timeout(&self) -> Duration {
        Duration::MAX
    }
    fn try_complete(&self) -> bool {
        true
    }
    fn on_complete(&self) {}
}

/// One key's list, of one slot.
type List = Mutex<Option<Weak<Shared<Ready>>>>;

/// Claims `op` under its lock, joins `list` (if any) and attaches it, in a
/// watch's order; its epoch.
fn watch(op: &Operation<Ready>, owner: &OwnerRef<Ready>, list: Option<&List>) -> Option<u32> {
    let _guard = op.lock();
    if !op.0.claim() {
        return None;
    }
    if let Some(list) = list {
        *list.lock() = Some(Arc::downgrade(&op.0));
    }
    Some(op.0.attach(owner.clone(), Members::new()))
}

/// Cancels `op` and frees its slot in `list`, under its lock, as a cancel
/// frees its retired batch; whether it was cancelled.
fn cancel(op: &Operation<Ready>, owner: &OwnerRef<Ready>, list: &List) -> bool {
    let released = {
        let _guard = op.lock();
        let released = op.0.cancel(Arc::as_ptr(&**owner).cast());
        if released.is_some() {
            *list.lock() = None;
        }
        released
    };
    released.is_some()
}

/// A check of `list`: copies its operation with the stay read under the
/// list's lock (as `watch::slab::found` does), then checks it. `None` if the
/// list was empty, else whether the check completed it.
fn check(list: &List) -> Option<bool> {
    let found = list.lock().as_ref().and_then(Weak::upgrade).map(|op| {
        let stay = op.stay();
        (op, stay)
    });
    found.map(|(op, stay)| op.check(None, stay).0)
}

/// An operation, its owner, and a list it is not in.
fn fresh() -> (Operation<Ready>, OwnerRef<Ready>, Arc<List>) {
    let op = Operation::new(Ready);
    let owner: OwnerRef<Ready> = Arc::new(Arc::new(NoOwner::new()));
    (op, owner, Arc::new(List::new(None)))
}

/// A thread making one [`check`] of `list`.
fn checking(list: &Arc<List>) -> loom::thread::JoinHandle<Option<bool>> {
    let list = list.clone();
    loom::thread::spawn(move || check(&list))
}

/// A check of the list races a cancel and a new stay under another key:
/// it completes the first stay (and the cancel finds it completed), or
/// nothing, leaving the new stay on.
#[test]
fn a_check_completes_only_the_stay_whose_slot_it_found() {
    loom::model(|| {
        let (op, owner, list) = fresh();
        watch(&op, &owner, Some(&list)).expect("watched");
        let checker = checking(&list);
        let cancelled = cancel(&op, &owner, &list);
        let again = cancelled.then(|| watch(&op, &owner, None));
        let completed = checker.join().unwrap().unwrap_or(false);
        if cancelled {
            assert!(again.flatten().is_some(), "watched again");
            assert!(!completed, "the new stay completed through the old slot");
            assert!(op.is_watched() && op.outcome().is_none());
            assert!(cancel(&op, &owner, &list));
        } else {
            assert!(completed, "only a completion stops the cancel");
            assert_eq!(op.outcome(), Some(Outcome::Completed));
        }
    });
}

/// A check of the list races a watch whose key iterator cancels its stay
/// after it joined the list (the operation not attached yet), then a new
/// stay: the leaving operation keeps its claim until the watch has freed
/// its slot, so the check completes neither stay, whatever it read.
#[test]
fn a_check_completes_no_stay_through_the_slot_of_one_cancelled_before_its_attach() {
    loom::model(|| {
        let (op, owner, list) = fresh();
        let checker = checking(&list);
        let released = {
            let _guard = op.lock();
            assert!(op.0.claim());
            *list.lock() = Some(Arc::downgrade(&op.0));
            let released = op.0.cancel_unattached().expect("cancelled");
            assert!(!op.0.claim(), "claimed again while its slot is listed");
            *list.lock() = None;
            op.0.state.left();
            released
        };
        drop(released);
        let again = watch(&op, &owner, None);
        let completed = checker.join().unwrap();
        assert_ne!(completed, Some(true), "completed through the old slot");
        assert_eq!(again, Some(2), "watched again");
        assert!(op.is_watched() && op.outcome().is_none());
        assert!(cancel(&op, &owner, &list));
    });
}

/// A check racing the watch itself: once it finds the slot, it completes
/// the stay (nothing else ends it), whatever it read as the stay: the epoch
/// is bumped at the claim, before the operation joins any list.
#[test]
fn a_check_finding_a_slot_as_it_is_filled_completes_that_stay() {
    loom::model(|| {
        let (op, owner, list) = fresh();
        let checker = checking(&list);
        let epoch = watch(&op, &owner, Some(&list)).expect("watched");
        match checker.join().unwrap() {
            Some(completed) => {
                assert!(completed, "found, yet not tried");
                assert_eq!(op.outcome(), Some(Outcome::Completed));
            }
            None => {
                assert!(op.is_watched() && op.outcome().is_none());
                assert!(cancel(&op, &owner, &list));
            }
        }
        assert_eq!(epoch, 1);
    });
}
