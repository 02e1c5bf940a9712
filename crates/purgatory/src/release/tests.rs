//! The expiry task's tests: its size, and that it acts only in the stay
//! it was armed for.

use std::mem::size_of;
use std::sync::Arc;

use timer::TimerTask;

use super::ExpiryTask;
use crate::members::Members;
use crate::operation::{Idle, NoOwner, Operation, OwnerRef};
use crate::outcome::Outcome;

/// An expiry task is one word (a timer slot of 24 bytes, not 32), and a
/// task armed for an earlier stay (cancelled, then watched again) does
/// nothing in a later one, whether it was a first stay's (the weak pointer
/// alone) or a later one's (boxed with its epoch).
#[test]
fn an_expiry_task_is_one_word_and_acts_only_in_its_own_stay() {
    assert_eq!(size_of::<ExpiryTask<Idle>>(), 8);
    let op = Operation::new(Idle);
    let owner: OwnerRef<Idle> = Arc::new(Arc::new(NoOwner));
    let owner_addr = Arc::as_ptr(&*owner).cast::<()>();
    let mut stale = Vec::new();
    for stay in 1..=3 {
        assert!(op.0.claim());
        assert_eq!(op.0.attach(owner.clone(), Members::new()), stay);
        let task = ExpiryTask::new(&op.0, stay);
        for old in stale.drain(..) {
            TimerTask::run(old);
        }
        assert!(
            op.is_watched() && op.outcome().is_none(),
            "stay {stay} still on"
        );
        if stay < 3 {
            let released = {
                let _guard = op.lock();
                op.0.cancel(owner_addr).expect("cancelled")
            };
            drop(released);
            stale.push(task);
        } else {
            TimerTask::run(task);
            assert_eq!(op.outcome(), Some(Outcome::Expired), "its own stay's");
        }
    }
    drop(ExpiryTask::new(&op.0, 1));
    drop(ExpiryTask::new(&op.0, 7));
    assert_eq!(
        Arc::weak_count(&op.0),
        0,
        "dropped unrun: weak references given back"
    );
    assert_eq!(Arc::strong_count(&op.0), 1);
}
