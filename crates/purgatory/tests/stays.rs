//! An operation's stays: one cancelled may be watched again, here or in
//! another purgatory, at once; each stay has its own deadline, and what
//! acts on an operation it found in a list (a check, `cancel_for_key`) acts
//! only on the stay it found there, however the stays race; a stay refused
//! by a panicking key leaves the last one's outcome in place.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use purgatory::{new_operation_lock, DelayedOperation, ManualClock, Operation, Outcome, Purgatory};

/// Long enough never to pass in a test that waits for an event, short
/// enough that a lost wake-up fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(10);

/// Each stay of an operation watched again after a cancel has its own
/// timeout: an earlier stay's deadline passing does not expire a later
/// stay, which expires at its own deadline, once.
#[test]
fn each_stay_after_a_cancel_expires_at_its_own_deadline() {
    let (p, clock) = manual();
    let o = op(10);
    for _ in 0..2 {
        p.try_complete_else_watch(o.clone(), [key("a")]).unwrap();
        advance(&p, &clock, 4);
        assert!(p.cancel(&o));
    }
    // Watched at 8 (the earlier stays at 0 and 4): due at 18.
    p.try_complete_else_watch(o.clone(), [key("a")]).unwrap();
    advance(&p, &clock, 9);
    assert_eq!(o.outcome(), None, "the earlier stays' deadlines passed");
    assert!(o.is_watched());
    advance(&p, &clock, 1);
    assert_eq!(o.outcome(), Some(Outcome::Expired));
    assert_eq!((o.completions(), o.expirations()), (1, 1));
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

/// Compares equal keys by value; panics in `Eq` when told to.
#[derive(Debug, Clone)]
struct EqPanics {
    id: u32,
    panic_eq: Arc<AtomicBool>,
}

impl std::hash::Hash for EqPanics {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl PartialEq for EqPanics {
    fn eq(&self, other: &Self) -> bool {
        assert!(
            !self.panic_eq.swap(false, Ordering::Relaxed),
            "Eq panics on purpose"
        );
        self.id == other.id
    }
}

impl Eq for EqPanics {}

/// A new stay refused by a key that panics leaves a cancelled operation as
/// it was, its outcome included: still `Cancelled`, and its waiters (even
/// those that come after) told so at once, not when it is dropped.
#[test]
fn a_stay_refused_by_a_panicking_key_leaves_the_cancel_in_place() {
    let panic_eq = Arc::new(AtomicBool::new(false));
    let k = |id| EqPanics {
        id,
        panic_eq: panic_eq.clone(),
    };
    let p: Purgatory<EqPanics, MockOp> = Purgatory::builder("stays")
        .clock(ManualClock::new())
        .reaper(false)
        .build()
        .unwrap();
    let o = op(1_000);
    p.try_complete_else_watch(o.clone(), [k(1)]).unwrap();
    assert!(p.cancel(&o));
    let mut before = o.completion();
    // A list under key 2, so that watching it compares keys.
    p.try_complete_else_watch(op(1_000), [k(2)]).unwrap();
    panic_eq.store(true, Ordering::Relaxed);
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.try_complete_else_watch(o.clone(), [k(3), k(2)])
    }));
    assert!(refused.is_err(), "the panic reaches the caller");
    assert!(!o.is_watched());
    assert_eq!(o.outcome(), Some(Outcome::Cancelled));
    assert_eq!(ready_now(&mut before), Some(Outcome::Cancelled));
    assert_eq!(ready_now(o.completion()), Some(Outcome::Cancelled));
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (1, 1, 1));
    // It may still be watched again.
    assert_eq!(p.try_complete_else_watch(o.clone(), [k(3)]), Ok(false));
    assert_eq!(o.outcome(), None);
}

/// Yields until `done` holds, failing after [`PATIENCE`].
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let since = Instant::now();
    while !done() {
        assert!(since.elapsed() < PATIENCE, "never {what}");
        thread::yield_now();
    }
}

/// An operation cancelled by `cancel_for_key` may be watched again by
/// another thread while the call goes on with the rest of the key's list;
/// the new stay, here or in another purgatory, is then not found through
/// the keys the operation left: a check of one neither tries nor completes
/// it, and a `cancel_for_key` of one does not cancel it.
#[test]
fn an_operation_watched_again_mid_cancel_is_not_found_through_keys_it_left() {
    for elsewhere in [false, true] {
        let (p1, clock) = manual();
        let p2: Purgatory<Key, MockOp> = Purgatory::builder("elsewhere")
            .clock(clock.clone())
            .reaper(false)
            .build()
            .unwrap();
        let target = if elsewhere { &p2 } else { &p1 };
        let left = op(1_000);
        let group = new_operation_lock();
        let blocker = op_under(&group, 1_000);
        let both = [key("both"), key("left")];
        assert_eq!(p1.try_complete_else_watch(left.clone(), both), Ok(false));
        assert_eq!(
            p1.try_complete_else_watch(blocker.clone(), [key("both")]),
            Ok(false)
        );
        thread::scope(|s| {
            // Held here, so the canceller, having cancelled `left` (first
            // in the list), waits for it before `blocker`. Dropped on a
            // failed assertion too, before the scope joins the canceller.
            let held = group.lock();
            let canceller = s.spawn(|| p1.cancel_for_key(&key("both")));
            wait_until("cancelled", || left.outcome() == Some(Outcome::Cancelled));
            let new = [key("new")];
            assert_eq!(target.try_complete_else_watch(left.clone(), new), Ok(false));
            left.set_completable();
            let tries = left.tries.load(Ordering::SeqCst);
            assert_eq!(
                p1.check_and_complete(&key("left")),
                0,
                "found where it left"
            );
            assert_eq!(left.tries.load(Ordering::SeqCst), tries, "not even tried");
            assert!(p1.cancel_for_key(&key("left")).is_empty());
            assert_eq!(left.outcome(), None, "the new stay goes on");
            assert_eq!(target.check_and_complete(&key("new")), 1);
            drop(held);
            assert_eq!(canceller.join().unwrap().len(), 2);
        });
        assert_eq!(left.completions(), 1);
        assert_eq!(target.stats().completed, 1);
        assert_eq!((p1.watched(), p1.delayed(), p1.watched_keys()), (0, 0, 0));
    }
}

/// Completes when its flag is set.
struct Flag(Arc<AtomicBool>);

impl DelayedOperation for Flag {
    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn try_complete(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {}
}

/// Once open, each try says it has begun and waits to be let go.
#[derive(Default)]
struct GateState {
    open: AtomicBool,
    begun: Mutex<Option<Sender<()>>>,
    go: Mutex<Option<Receiver<()>>>,
}

struct Gate(Arc<GateState>);

impl DelayedOperation for Gate {
    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn try_complete(&self) -> bool {
        if self.0.open.load(Ordering::SeqCst) {
            let _ = self.0.begun.lock().unwrap().as_ref().unwrap().send(());
            let go = self.0.go.lock().unwrap();
            let _ = go.as_ref().unwrap().recv_timeout(PATIENCE);
        }
        false
    }
    fn on_complete(&self) {}
}

/// A check copies a chunk of its key's list and tries the copies; an
/// operation among them that is cancelled and watched again (here or in
/// another purgatory, under other keys) before its turn is not tried for
/// the new stay: the check found it under a key the new stay is not
/// watched under.
#[test]
fn a_check_does_not_try_a_stay_begun_after_it_copied_the_list() {
    type Any = Box<dyn DelayedOperation>;
    for elsewhere in [false, true] {
        let clock = ManualClock::new();
        let build = |name: &str| {
            Purgatory::builder(name)
                .clock(clock.clone())
                .reaper(false)
                .build::<Key, Any>()
                .unwrap()
        };
        let (p1, p2) = (build("checked"), build("elsewhere"));
        let target = if elsewhere { &p2 } else { &p1 };
        let (begun_tx, begun) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let state = Arc::new(GateState::default());
        *state.begun.lock().unwrap() = Some(begun_tx);
        *state.go.lock().unwrap() = Some(go_rx);
        let gate = Operation::new(Box::new(Gate(state.clone())) as Any);
        let ready = Arc::new(AtomicBool::new(false));
        let moved = Operation::new(Box::new(Flag(ready.clone())) as Any);
        assert_eq!(
            p1.try_complete_else_watch(gate.clone(), [key("k")]),
            Ok(false)
        );
        assert_eq!(
            p1.try_complete_else_watch(moved.clone(), [key("k")]),
            Ok(false)
        );
        state.open.store(true, Ordering::SeqCst);
        thread::scope(|s| {
            let checker = s.spawn(|| p1.check_and_complete(&key("k")));
            begun
                .recv_timeout(PATIENCE)
                .expect("the check tries the gate");
            // The check holds a copy of `moved`, to try after the gate.
            assert!(p1.cancel(&moved));
            assert_eq!(
                target.try_complete_else_watch(moved.clone(), [key("new")]),
                Ok(false)
            );
            ready.store(true, Ordering::SeqCst);
            go.send(()).unwrap();
            assert_eq!(
                checker.join().unwrap(),
                0,
                "completed through a key it left"
            );
        });
        assert_eq!(moved.outcome(), None, "the new stay goes on");
        assert_eq!(target.check_and_complete(&key("new")), 1);
        assert_eq!(target.stats().completed, 1);
        assert_eq!(p1.cancel_for_key(&key("k")).len(), 1, "the gate");
    }
}

/// `cancel_for_key` takes its key's list out and then cancels each
/// operation under its lock; one cancelled and watched again (under other
/// keys) before its turn keeps its new stay.
#[test]
fn cancel_for_key_leaves_a_stay_begun_after_it_took_the_list() {
    let (p, _clock) = manual();
    let group = new_operation_lock();
    let blocker = op_under(&group, 1_000);
    let moved = op(1_000);
    assert_eq!(
        p.try_complete_else_watch(blocker.clone(), [key("k")]),
        Ok(false)
    );
    assert_eq!(
        p.try_complete_else_watch(moved.clone(), [key("k")]),
        Ok(false)
    );
    thread::scope(|s| {
        // The canceller waits for this lock at the blocker, first in the
        // list, holding its copy of `moved`.
        let held = group.lock();
        let canceller = s.spawn(|| p.cancel_for_key(&key("k")));
        wait_until("the list taken", || p.watched_on(&key("k")) == 0);
        assert!(p.cancel(&moved));
        assert_eq!(
            p.try_complete_else_watch(moved.clone(), [key("new")]),
            Ok(false)
        );
        drop(held);
        let cancelled = canceller.join().unwrap();
        assert_eq!(cancelled.len(), 1, "the blocker only");
        assert!(Operation::ptr_eq(&cancelled[0], &blocker));
    });
    assert!(
        moved.is_watched() && moved.outcome().is_none(),
        "the new stay goes on"
    );
    moved.set_completable();
    assert_eq!(p.check_and_complete(&key("new")), 1);
    assert_eq!(p.stats().cancelled, 2, "the blocker and the first stay");
}
