//! Waiting for an operation: what a waiter sees while the callbacks run on
//! another thread (nothing yet: an outcome shows once they ran), what one
//! sees from inside them (the outcome at once), that waiters wake after
//! the purgatory let go of the operation, and that a `Completion` keeps one
//! waker per copy, the last it was polled with.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

use purgatory::{
    new_operation_lock, Completion, DelayedOperation, ManualClock, Operation, Outcome, Purgatory,
};

/// Counts its wake-ups.
#[derive(Default)]
struct CountWakes(AtomicUsize);

impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_with(c: &mut Completion, wakes: &Arc<CountWakes>) -> Poll<Outcome> {
    let waker = Waker::from(wakes.clone());
    Pin::new(c).poll(&mut Context::from_waker(&waker))
}

fn purgatory<Op: DelayedOperation>() -> (ManualClock, Purgatory<u32, Op>) {
    let clock = ManualClock::new();
    let p = Purgatory::builder("waiting")
        .clock(clock.clone())
        .reaper(false)
        .build()
        .unwrap();
    (clock, p)
}

/// An operation whose `on_complete` tells the test it started, then waits
/// for the test's go before it finishes.
struct Slow {
    ready: AtomicBool,
    entered: Mutex<Sender<()>>,
    go: Mutex<Receiver<()>>,
    finished: AtomicBool,
}

impl DelayedOperation for Slow {
    fn timeout(&self) -> Duration {
        Duration::from_millis(100)
    }
    fn try_complete(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
    fn on_complete(&self) {
        self.entered.lock().unwrap().send(()).unwrap();
        self.go.lock().unwrap().recv().unwrap();
        self.finished.store(true, Ordering::Relaxed);
    }
}

fn slow() -> (Operation<Slow>, Receiver<()>, Sender<()>) {
    let (entered_tx, entered) = channel();
    let (go, go_rx) = channel();
    let op = Operation::new(Slow {
        ready: AtomicBool::new(false),
        entered: Mutex::new(entered_tx),
        go: Mutex::new(go_rx),
        finished: AtomicBool::new(false),
    });
    (op, entered, go)
}

#[test]
fn an_outcome_shows_only_once_the_callbacks_ran() {
    for expire in [false, true] {
        let (clock, p) = purgatory::<Slow>();
        let p = Arc::new(p);
        let (op, entered, go) = slow();
        let mut early = op.completion();
        assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
        op.ready.store(!expire, Ordering::Release);
        if expire {
            clock.advance(Duration::from_millis(100));
        }
        let completer = {
            let p = p.clone();
            thread::spawn(move || {
                if expire {
                    p.advance_clock(Duration::ZERO);
                } else {
                    assert_eq!(p.check_and_complete(&1), 1);
                }
            })
        };
        entered.recv().unwrap();
        // `on_complete` is running on another thread.
        assert!(op.is_completed(), "decided: nothing else completes it");
        assert_eq!(op.is_expired(), expire);
        assert_eq!(op.outcome(), None, "expire {expire}");
        assert_eq!(op.wait_timeout(Duration::ZERO), None);
        let (early_wakes, late_wakes) = (Arc::default(), Arc::default());
        let mut late = op.completion();
        assert_eq!(poll_with(&mut late, &late_wakes), Poll::Pending);
        assert_eq!(poll_with(&mut early, &early_wakes), Poll::Pending);
        go.send(()).unwrap();
        completer.join().unwrap();
        let outcome = if expire {
            Outcome::Expired
        } else {
            Outcome::Completed
        };
        assert!(op.finished.load(Ordering::Relaxed));
        assert_eq!(op.outcome(), Some(outcome));
        for (c, wakes) in [(&mut late, &late_wakes), (&mut early, &early_wakes)] {
            assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "expire {expire}");
            assert_eq!(poll_with(c, wakes), Poll::Ready(outcome));
        }
        assert_eq!(op.wait_timeout(Duration::ZERO), Some(outcome));
    }
}

/// What an operation saw of itself from inside `on_complete`: whether it
/// is completed, its outcome, what `wait_timeout` and a poll of a fresh
/// completion gave.
type Seen = (bool, Option<Outcome>, Option<Outcome>, Option<Outcome>);

/// An operation that looks at itself from inside its own `on_complete`.
#[derive(Default)]
struct Introspective {
    me: Mutex<Option<Operation<Introspective>>>,
    seen: Mutex<Option<Seen>>,
    /// What `wait_timeout` gave inside `try_complete`, and whether it
    /// returned well before its timeout.
    tried: Mutex<Option<(Option<Outcome>, bool)>>,
}

impl DelayedOperation for Introspective {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        let me = self.me.lock().unwrap().clone().expect("a handle to itself");
        let start = std::time::Instant::now();
        let outcome = me.wait_timeout(Duration::from_secs(60));
        *self.tried.lock().unwrap() = Some((outcome, start.elapsed() < Duration::from_secs(30)));
        true
    }
    fn on_complete(&self) {
        let me = self.me.lock().unwrap().take().expect("a handle to itself");
        let mut completion = me.completion();
        let ready = match poll_with(&mut completion, &Arc::default()) {
            Poll::Ready(outcome) => Some(outcome),
            Poll::Pending => None,
        };
        let seen = (
            me.is_completed(),
            me.outcome(),
            me.wait_timeout(Duration::from_secs(10)),
            ready,
        );
        *self.seen.lock().unwrap() = Some(seen);
    }
}

#[test]
fn inside_its_callbacks_an_operation_waits_for_nothing() {
    let (_clock, p) = purgatory::<Introspective>();
    let op = Operation::new(Introspective::default());
    *op.me.lock().unwrap() = Some(op.clone());
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(true));
    let done = Some(Outcome::Completed);
    assert_eq!(*op.seen.lock().unwrap(), Some((true, None, done, done)));
    assert_eq!(op.outcome(), done);
    // Undecided, with its lock held on the waiting thread: nothing could
    // decide it meanwhile, so the wait returns at once.
    assert_eq!(*op.tried.lock().unwrap(), Some((None, true)));
    let pending = Operation::new(Introspective::default());
    let guard = pending.lock();
    let start = std::time::Instant::now();
    assert_eq!(pending.wait_timeout(Duration::from_secs(60)), None);
    assert!(start.elapsed() < Duration::from_secs(30));
    drop(guard);
    // The same with a shared lock (a group's) taken directly.
    let group = new_operation_lock();
    let member = Operation::with_lock(Introspective::default(), group.clone());
    let _held = group.lock();
    let start = std::time::Instant::now();
    assert_eq!(member.wait_timeout(Duration::from_secs(60)), None);
    assert!(start.elapsed() < Duration::from_secs(30));
}

/// Sets its flag when dropped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Waits for `ready`; holds `D` for what its drop does.
struct Held<D> {
    ready: AtomicBool,
    _dropped: D,
}

impl<D: Send + Sync + 'static> DelayedOperation for Held<D> {
    fn timeout(&self) -> Duration {
        Duration::from_millis(100)
    }
    fn try_complete(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
    fn on_complete(&self) {}
}

/// Records, when woken, whether the operation had been dropped by then.
struct SeesDrop {
    dropped: Arc<AtomicBool>,
    at_wake: Mutex<Option<bool>>,
}

impl Wake for SeesDrop {
    fn wake(self: Arc<Self>) {
        *self.at_wake.lock().unwrap() = Some(self.dropped.load(Ordering::SeqCst));
    }
}

impl SeesDrop {
    /// Polls `completion` (pending) with a waker that records whether
    /// `dropped` is set when it is woken.
    fn poll_pending(completion: &mut Completion, dropped: &Arc<AtomicBool>) -> Arc<SeesDrop> {
        let sees = Arc::new(SeesDrop {
            dropped: dropped.clone(),
            at_wake: Mutex::new(None),
        });
        let waker = Waker::from(sees.clone());
        let polled = Pin::new(completion).poll(&mut Context::from_waker(&waker));
        assert_eq!(polled, Poll::Pending);
        sees
    }
}

#[test]
fn waiters_wake_after_the_purgatory_let_go_of_the_operation() {
    for expire in [false, true] {
        let (clock, p) = purgatory::<Held<Dropped>>();
        let dropped = Arc::new(AtomicBool::new(false));
        let op = Operation::new(Held {
            ready: AtomicBool::new(false),
            _dropped: Dropped(dropped.clone()),
        });
        let mut completion = op.completion();
        let sees = SeesDrop::poll_pending(&mut completion, &dropped);
        assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
        op.ready.store(!expire, Ordering::Release);
        // The waiter keeps no handle: the purgatory's is the last.
        drop(op);
        if expire {
            clock.advance(Duration::from_millis(100));
            assert!(p.advance_clock(Duration::ZERO));
        } else {
            assert_eq!(p.check_and_complete(&1), 1);
        }
        assert_eq!(*sees.at_wake.lock().unwrap(), Some(true), "expire {expire}");
    }
}

#[test]
fn only_the_waker_of_each_waiters_latest_poll_is_woken() {
    let (_clock, p) = purgatory::<Held<Dropped>>();
    let op = Operation::new(Held {
        ready: AtomicBool::new(false),
        _dropped: Dropped(Arc::default()),
    });
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
    let [moved_from, moved_to, gone, copy] = [(); 4].map(|_| Arc::new(CountWakes::default()));
    // A completion moved to another task, polled there.
    let mut c = op.completion();
    assert_eq!(poll_with(&mut c, &moved_from), Poll::Pending);
    assert_eq!(poll_with(&mut c, &moved_to), Poll::Pending);
    // A waiter that gave up.
    let mut dropped = op.completion();
    assert_eq!(poll_with(&mut dropped, &gone), Poll::Pending);
    drop(dropped);
    // A copy waits on its own.
    let mut c2 = c.clone();
    assert_eq!(poll_with(&mut c2, &copy), Poll::Pending);
    // Waits that timed out leave nothing behind.
    for _ in 0..100 {
        assert_eq!(op.wait_timeout(Duration::ZERO), None);
    }
    op.ready.store(true, Ordering::Release);
    assert_eq!(p.check_and_complete(&1), 1);
    let woken = [&moved_from, &moved_to, &gone, &copy].map(|w| w.0.load(Ordering::SeqCst));
    assert_eq!(woken, [0, 1, 0, 1]);
    assert_eq!(Arc::strong_count(&moved_from), 1, "its waker was let go");
    assert_eq!(Arc::strong_count(&gone), 1);
    assert_eq!(
        poll_with(&mut c, &moved_to),
        Poll::Ready(Outcome::Completed)
    );
}

/// Panics when dropped.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("an operation's drop panics");
    }
}

#[test]
fn waiters_wake_even_when_the_operations_drop_panics() {
    let (_clock, p) = purgatory::<Held<PanicsOnDrop>>();
    let op = Operation::new(Held {
        ready: AtomicBool::new(false),
        _dropped: PanicsOnDrop,
    });
    let ready = op.clone();
    let mut c = op.completion();
    let wakes = Arc::default();
    assert_eq!(poll_with(&mut c, &wakes), Poll::Pending);
    assert_eq!(p.try_complete_else_watch(op, [1]), Ok(false));
    ready.ready.store(true, Ordering::Release);
    drop(ready);
    // The purgatory's reference is the last: the drop panics as it lets
    // go, before the waiters are woken (the panic is logged).
    assert_eq!(p.check_and_complete(&1), 1);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(poll_with(&mut c, &wakes), Poll::Ready(Outcome::Completed));
}

/// Completes, and from its `on_complete` checks key 2 (when it has a
/// purgatory to check).
struct Chained {
    check: Option<std::sync::Weak<Purgatory<u32, Chained>>>,
    ready: Arc<AtomicBool>,
    _dropped: Option<Dropped>,
}

impl DelayedOperation for Chained {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
    fn on_complete(&self) {
        if let Some(p) = self.check.as_ref().and_then(std::sync::Weak::upgrade) {
            assert_eq!(p.check_and_complete(&2), 1);
        }
    }
}

/// A check made from inside a callback holds back what it releases until
/// the outermost call returns; then too the operation goes before its
/// waiters are woken.
#[test]
fn waiters_of_an_operation_completed_from_a_callback_wake_after_it_is_dropped() {
    let (_clock, p) = purgatory::<Chained>();
    let p = Arc::new(p);
    let dropped = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let inner = Operation::new(Chained {
        check: None,
        ready: ready.clone(),
        _dropped: Some(Dropped(dropped.clone())),
    });
    let mut completion = inner.completion();
    let sees = SeesDrop::poll_pending(&mut completion, &dropped);
    assert_eq!(p.try_complete_else_watch(inner, [2]), Ok(false));
    ready.store(true, Ordering::Release);
    let outer = Operation::new(Chained {
        check: Some(Arc::downgrade(&p)),
        ready: Arc::new(AtomicBool::new(true)),
        _dropped: None,
    });
    assert_eq!(p.try_complete_else_watch(outer, [1]), Ok(true));
    assert_eq!(*sees.at_wake.lock().unwrap(), Some(true));
}

// ---- CancelOnDrop: a handler's completion that cancels when dropped unresolved.

/// Never completes on its own; counts its completions.
#[derive(Default)]
struct Parked {
    ready: AtomicBool,
    completions: AtomicUsize,
}

impl DelayedOperation for Parked {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::Relaxed);
    }
}

fn poll_guard(g: &mut purgatory::CancelOnDrop<Parked>) -> Poll<Outcome> {
    let waker = Waker::from(Arc::new(CountWakes::default()));
    Pin::new(g).poll(&mut Context::from_waker(&waker))
}

#[test]
fn a_dropped_unresolved_guard_cancels_its_operation_and_wakes_its_other_waiters() {
    fn send_static<T: Send + 'static>(_: &T) {}
    let (_clock, p) = purgatory::<Parked>();
    let op = Operation::new(Parked::default());
    let mut guard = p.cancel_on_drop(&op);
    send_static(&guard);
    let mut other = op.completion();
    let wakes = Arc::new(CountWakes::default());
    assert_eq!(p.try_complete_else_watch(op.clone(), [1, 2]), Ok(false));
    assert!(poll_guard(&mut guard).is_pending());
    assert!(poll_with(&mut other, &wakes).is_pending());
    drop(guard);
    assert_eq!(op.outcome(), Some(Outcome::Cancelled));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(
        poll_with(&mut other, &wakes),
        Poll::Ready(Outcome::Cancelled)
    );
    assert_eq!((p.watched(), p.delayed(), p.stats().cancelled), (0, 0, 1));
    assert_eq!(op.completions.load(Ordering::Relaxed), 0);
    // It may be watched again, and a new guard is needed for that stay.
    assert_eq!(p.try_complete_else_watch(op.clone(), [3]), Ok(false));
    assert!(op.is_watched());
}

#[test]
fn a_resolved_or_disarmed_guard_cancels_nothing() {
    let (_clock, p) = purgatory::<Parked>();
    // Resolved: the completion is kept, and dropping changes nothing.
    let op = Operation::new(Parked::default());
    let mut guard = p.cancel_on_drop(&op);
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
    assert!(op.force_complete());
    assert_eq!(poll_guard(&mut guard), Poll::Ready(Outcome::Completed));
    drop(guard);
    assert_eq!(op.outcome(), Some(Outcome::Completed));
    assert_eq!(p.stats().cancelled, 0);

    // Resolved by another's cancel: the next stay is not its to cancel.
    let op = Operation::new(Parked::default());
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
    let mut guard = p.cancel_on_drop(&op);
    assert!(p.cancel(&op));
    assert_eq!(poll_guard(&mut guard), Poll::Ready(Outcome::Cancelled));
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
    drop(guard);
    assert!(op.is_watched());
    assert_eq!(p.stats().cancelled, 1);
    assert!(p.cancel(&op));

    // Its stay ended unobserved (never polled since): the next stay is
    // not its to cancel either (review 45).
    let op = Operation::new(Parked::default());
    let guard = p.cancel_on_drop(&op);
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
    assert_eq!(p.cancel_for_key(&1).len(), 1);
    assert_eq!(p.try_complete_else_watch(op.clone(), [2]), Ok(false));
    drop(guard);
    assert!(op.is_watched());
    assert!(p.cancel(&op));
    assert_eq!(p.stats().cancelled, 4);

    // Disarmed: the plain completion waits on, and the operation stays.
    let op = Operation::new(Parked::default());
    let guard = p.cancel_on_drop(&op);
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
    let mut done = guard.disarm();
    let wakes = Arc::new(CountWakes::default());
    assert!(poll_with(&mut done, &wakes).is_pending());
    assert!(op.is_watched());
    op.ready.store(true, Ordering::Release);
    assert_eq!(p.check_and_complete(&1), 1);
    assert_eq!(
        poll_with(&mut done, &wakes),
        Poll::Ready(Outcome::Completed)
    );
    assert_eq!((p.stats().completed, p.stats().cancelled), (2, 4));
}

#[test]
fn a_guard_leaves_alone_what_is_not_watched_by_its_purgatory() {
    let (_clock, p) = purgatory::<Parked>();
    let (_clock2, q) = purgatory::<Parked>();
    // Watched by another purgatory: stays there.
    let op = Operation::new(Parked::default());
    drop(p.cancel_on_drop(&op));
    assert_eq!(q.try_complete_else_watch(op.clone(), [1]), Ok(false));
    drop(p.cancel_on_drop(&op));
    assert!(op.is_watched());
    assert_eq!((q.watched(), q.stats().cancelled), (1, 0));
    // Its watch refused: nothing to cancel, no panic.
    let refused = Operation::new(Parked::default());
    let guard = p.cancel_on_drop(&refused);
    assert!(p
        .try_complete_else_watch(refused.clone(), [1u32; 0])
        .is_err());
    drop(guard);
    assert_eq!(p.stats().cancelled, 0);
    // Outliving its purgatory: the shutdown ended the stay; it resolves
    // to that, and dropping it finds nothing.
    let op = Operation::new(Parked::default());
    let mut guard = q.cancel_on_drop(&op);
    assert_eq!(q.try_complete_else_watch(op.clone(), [1]), Ok(false));
    drop(q);
    assert_eq!(poll_guard(&mut guard), Poll::Ready(Outcome::Cancelled));
    let unresolved = p.cancel_on_drop(&Operation::new(Parked::default()));
    drop(p);
    drop(unresolved);
}

/// A guard taken before a watch that is refused keeps nothing alive: once
/// the caller drops the operation, it resolves, as a plain completion does
/// (review 47).
#[test]
fn a_guard_taken_before_a_refused_watch_resolves_when_the_operation_goes() {
    let (_clock, p) = purgatory::<Parked>();
    let op = Operation::new(Parked::default());
    let mut plain = op.completion();
    let mut guard = p.cancel_on_drop(&op);
    assert!(poll_guard(&mut guard).is_pending());
    assert!(p.try_complete_else_watch(op, [0u32; 0]).is_err());
    assert_eq!(poll_guard(&mut guard), Poll::Ready(Outcome::Cancelled));
    let wakes = Arc::new(CountWakes::default());
    assert_eq!(
        poll_with(&mut plain, &wakes),
        Poll::Ready(Outcome::Cancelled)
    );
}

/// A guard made between two stays is ready at once with the first's
/// outcome, and leaves the next stay alone (review 47).
#[test]
fn a_guard_made_between_stays_leaves_the_next_alone() {
    let (_clock, p) = purgatory::<Parked>();
    let op = Operation::new(Parked::default());
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
    assert!(p.cancel(&op));
    let guard = p.cancel_on_drop(&op);
    assert_eq!(p.try_complete_else_watch(op.clone(), [1]), Ok(false));
    drop(guard);
    assert!(op.is_watched());
}

/// A guard dropped inside a key's `Eq` (which runs under a watch-list lock,
/// where no purgatory call may be made) does not panic: it leaves its stay
/// to end its own way (review 47).
#[test]
fn a_guard_dropped_inside_a_keys_eq_leaves_its_stay_and_does_not_panic() {
    static SLOT: Mutex<Option<purgatory::CancelOnDrop<Parked>>> = Mutex::new(None);
    #[derive(Clone, Debug)]
    struct Key(u32);
    impl std::hash::Hash for Key {
        fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
            self.0.hash(state);
        }
    }
    impl PartialEq for Key {
        fn eq(&self, other: &Key) -> bool {
            if let Ok(mut slot) = SLOT.try_lock() {
                drop(slot.take());
            }
            self.0 == other.0
        }
    }
    impl Eq for Key {}
    let p = Purgatory::builder("eq")
        .clock(ManualClock::new())
        .reaper(false)
        .build::<Key, Parked>()
        .unwrap();
    let victim = Operation::new(Parked::default());
    assert_eq!(
        p.try_complete_else_watch(victim.clone(), [Key(1)]),
        Ok(false)
    );
    *SLOT.lock().unwrap() = Some(p.cancel_on_drop(&victim));
    // A second watch of the key compares keys: the guard goes in `Eq`.
    assert_eq!(
        p.try_complete_else_watch(Parked::default(), [Key(1)]),
        Ok(false)
    );
    assert!(SLOT.lock().unwrap().is_none(), "Eq ran");
    assert!(victim.is_watched());
    assert_eq!(p.watched_on(&Key(1)), 2);
}

/// A guard dropped while other threads check the operation's key: the
/// operation ends exactly once, either completed (its callback ran once) or
/// cancelled (no callback).
#[test]
fn a_guard_dropped_while_checks_race_ends_its_operation_once() {
    let (_clock, p) = purgatory::<Parked>();
    let p = Arc::new(p);
    let mut ended = [0usize; 2];
    for round in 0..200u32 {
        let op = Operation::new(Parked::default());
        let guard = p.cancel_on_drop(&op);
        assert_eq!(p.try_complete_else_watch(op.clone(), [round]), Ok(false));
        op.ready.store(true, Ordering::Release);
        let start = Arc::new(std::sync::Barrier::new(2));
        let checker = {
            let (p, start) = (p.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                p.check_and_complete(&round)
            })
        };
        start.wait();
        drop(guard);
        let checked = checker.join().unwrap();
        let completions = op.completions.load(Ordering::Relaxed);
        match op.outcome() {
            Some(Outcome::Completed) => assert_eq!((checked, completions), (1, 1)),
            Some(Outcome::Cancelled) => assert_eq!((checked, completions), (0, 0)),
            other => panic!("round {round}: {other:?}"),
        }
        ended[usize::from(op.outcome() == Some(Outcome::Cancelled))] += 1;
    }
    let stats = p.stats();
    assert_eq!(stats.completed + stats.cancelled, 200, "{ended:?}");
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}
