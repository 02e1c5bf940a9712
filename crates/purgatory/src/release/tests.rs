//! The expiry task's tests: its size, that it acts only in the stay it
//! was armed for, and that a watch disarms it if the operation completed
//! as it was armed.

use std::fmt;
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use timer::{Clock, ManualClock, TimerTask};

use super::ExpiryTask;
use crate::members::Members;
use crate::operation::{Idle, NoOwner, Operation, OwnerRef};
use crate::outcome::Outcome;
use crate::Purgatory;

/// An expiry task is one word (a timer slot of 24 bytes, not 32), and a
/// task armed for an earlier stay (cancelled, then watched again) does
/// nothing in a later one, whether it was a first stay's (the weak pointer
/// alone) or a later one's (boxed with its epoch).
#[test]
fn an_expiry_task_is_one_word_and_acts_only_in_its_own_stay() {
    assert_eq!(size_of::<ExpiryTask<Idle>>(), 8);
    let op = Operation::new(Idle);
    let owner: OwnerRef<Idle> = Arc::new(Arc::new(NoOwner::new()));
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

type Hook = Box<dyn FnOnce() + Send>;

/// Runs a hook at its next reading: a watch reads the clock only as it
/// arms the timeout, after releasing the operation's lock.
struct HookClock {
    clock: ManualClock,
    hook: Arc<Mutex<Option<Hook>>>,
}

impl fmt::Debug for HookClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookClock").finish_non_exhaustive()
    }
}

impl Clock for HookClock {
    fn now_nanos(&self) -> u64 {
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.clock.now_nanos()
    }
}

/// Kafka's third step of a watch: the timer is armed outside the
/// operation's lock, and disarmed if the operation completed meanwhile.
/// Completed exactly there (by the clock's hook), it leaves no timer entry
/// and is not counted.
#[test]
fn an_operation_completed_as_its_timer_is_armed_is_disarmed() {
    let hook = Arc::new(Mutex::new(None));
    let p: Purgatory<u8, Idle> = Purgatory::builder("arming")
        .clock(HookClock {
            clock: ManualClock::new(),
            hook: hook.clone(),
        })
        .reaper(false)
        .build()
        .unwrap();
    let op = Operation::new(Idle);
    // (whether the hook ran under the operation's lock, whether it forced)
    let seen = Arc::new(Mutex::new(None));
    *hook.lock().unwrap() = Some(Box::new({
        let (op, seen) = (op.clone(), seen.clone());
        move || {
            let locked = op.is_locked_by_current_thread();
            *seen.lock().unwrap() = Some((locked, op.force_complete()));
        }
    }) as Hook);
    assert_eq!(p.try_complete_else_watch(op.clone(), [1, 2]), Ok(false));
    assert_eq!(
        *seen.lock().unwrap(),
        Some((false, true)),
        "forced while arming, outside the lock"
    );
    assert_eq!(p.home.timer.len(), 0, "disarmed");
    assert_eq!((p.watched(), p.delayed(), p.stats().completed), (0, 0, 1));
    assert_eq!(op.outcome(), Some(Outcome::Completed));
}
