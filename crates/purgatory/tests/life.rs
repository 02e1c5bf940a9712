//! The life of an operation (DESIGN.md): every way of leaving resolves
//! `outcome()`, `completion()` and `wait_timeout` with the right `Outcome`,
//! exactly once, also under races and at shutdown; `Purgatory::cancel`;
//! the prompt-release rule; the gauges; a panicking key; bad shard counts.
//! (Stays after a cancel: `stays.rs`.)

mod common;

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread, ThreadId};
use std::time::Duration;

use common::*;
use purgatory::{
    new_operation_lock, Clock, Completion, ConfigError, DelayedOperation, ManualClock, Operation,
    OperationLock, Outcome, Purgatory, PurgatoryBuilder, PurgatoryError, ShutdownPolicy, WatchKey,
};

/// Long enough never to pass in a test that waits for an event, short
/// enough that a lost wake-up fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(10);

// ------------------------------------------------------- a tiny executor

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread, parking between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

/// Polls once with a waker that counts its wake-ups.
fn poll_counting(c: &mut Completion, wakes: &Arc<CountWakes>) -> Poll<Outcome> {
    let waker = Waker::from(wakes.clone());
    std::pin::Pin::new(c).poll(&mut Context::from_waker(&waker))
}

#[derive(Default)]
struct CountWakes(AtomicUsize);

impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn assert_send_static<T: Send + 'static>(_: &T) {}

/// A new operation watched under `keys`, and its completion asked for
/// before the watch.
fn watched(
    p: &Purgatory<Key, MockOp>,
    timeout_ms: u64,
    keys: &[&str],
) -> (Operation<MockOp>, Completion) {
    let o = op(timeout_ms);
    let c = o.completion();
    assert_eq!(
        p.try_complete_else_watch(o.clone(), keys.iter().map(|k| key(k))),
        Ok(false)
    );
    (o, c)
}

/// `c` resolves to `outcome`, and so does every view of `o`.
fn assert_resolved(o: &Operation<MockOp>, c: Completion, outcome: Outcome) {
    assert_eq!(block_on(c), outcome);
    assert_left(o, outcome);
}

/// Every view of `o` says `outcome`.
fn assert_left(o: &Operation<MockOp>, outcome: Outcome) {
    assert_eq!(o.outcome(), Some(outcome));
    assert_eq!(o.wait_timeout(Duration::ZERO), Some(outcome));
    assert_eq!(block_on(o.completion()), outcome);
    assert!(!o.is_watched());
}

// ------------------------------------------------------- each way out

#[test]
fn each_way_of_leaving_resolves_with_its_outcome() {
    let (p, clock) = manual();
    let wakes = Arc::new(CountWakes::default());

    // A check.
    let checked = op(1_000);
    let mut c_checked = checked.completion();
    assert_send_static(&c_checked);
    p.try_complete_else_watch(checked.clone(), [key("a")])
        .unwrap();
    assert_eq!(checked.outcome(), None);
    assert_eq!(checked.wait_timeout(Duration::ZERO), None);
    assert!(poll_counting(&mut c_checked, &wakes).is_pending());
    checked.set_completable();
    assert_eq!(p.check_and_complete(&key("a")), 1);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "woken once by the check");
    assert_eq!(
        poll_counting(&mut c_checked, &wakes),
        Poll::Ready(Outcome::Completed)
    );
    assert_left(&checked, Outcome::Completed);

    // The first try.
    let at_once = op(1_000);
    at_once.set_completable();
    let c_at_once = at_once.completion();
    assert_eq!(
        p.try_complete_else_watch(at_once.clone(), [key("a")]),
        Ok(true)
    );
    assert_eq!(block_on(c_at_once), Outcome::Completed);
    assert_left(&at_once, Outcome::Completed);

    // A force.
    let (forced, c_forced) = watched(&p, 1_000, &["a"]);
    assert!(forced.force_complete());
    assert_resolved(&forced, c_forced, Outcome::Completed);

    // The timeout.
    let (expired, c_expired) = watched(&p, 10, &["a"]);
    advance(&p, &clock, 10);
    assert_resolved(&expired, c_expired, Outcome::Expired);
    assert!(expired.is_completed() && expired.is_expired());

    // `cancel_for_key`.
    let (by_key, c_by_key) = watched(&p, 1_000, &["b", "c"]);
    assert_eq!(p.cancel_for_key(&key("c")).len(), 1);
    assert_resolved(&by_key, c_by_key, Outcome::Cancelled);
    assert!(!by_key.is_completed());

    // `Purgatory::cancel`.
    let (one, c_one) = watched(&p, 1_000, &["b"]);
    assert!(p.cancel(&one));
    assert!(!p.cancel(&one), "true only for the call that cancelled it");
    assert_resolved(&one, c_one, Outcome::Cancelled);
    assert_eq!(one.completions(), 0, "no callback");

    // Nothing left; counts by outcome.
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    let stats = p.stats();
    assert_eq!((stats.completed, stats.expired, stats.cancelled), (3, 1, 2));
    for o in [&checked, &at_once, &forced, &expired, &by_key, &one] {
        o.assert_sound();
    }
}

#[test]
fn cancel_refuses_what_it_does_not_hold() {
    let (p, _clock) = manual();
    let (q, _clock2) = manual();
    let never_watched = op(1_000);
    assert!(!p.cancel(&never_watched));
    assert_eq!(never_watched.outcome(), None);
    let elsewhere = op(1_000);
    q.try_complete_else_watch(elsewhere.clone(), [key("a")])
        .unwrap();
    assert!(!p.cancel(&elsewhere), "watched by another purgatory");
    assert!(elsewhere.is_watched());
    let done = op(1_000);
    p.try_complete_else_watch(done.clone(), [key("a")]).unwrap();
    assert!(done.force_complete());
    assert!(!p.cancel(&done));
    assert_eq!(done.outcome(), Some(Outcome::Completed));
    assert_eq!(p.stats().cancelled, 0);
}

/// A cancelled operation may be watched again; its outcome is then that of
/// the new stay. A completion asked for between the stays belongs to the
/// first: ready with its `Cancelled`, also once the second has begun; one
/// asked for after the new watch waits for the second.
#[test]
fn a_cancelled_operation_watched_again_starts_a_new_stay() {
    let (p, _clock) = manual();
    let o = op(1_000);
    let first = o.completion();
    p.try_complete_else_watch(o.clone(), [key("a")]).unwrap();
    assert!(p.cancel(&o));
    assert_eq!(block_on(first.clone()), Outcome::Cancelled);
    assert_eq!(o.completion_ready(), Some(Outcome::Cancelled));
    let between = o.completion();
    p.try_complete_else_watch(o.clone(), [key("a")]).unwrap();
    assert_eq!(o.outcome(), None);
    assert_eq!(ready_now(between), Some(Outcome::Cancelled));
    let second = o.completion();
    assert_eq!(o.wait_timeout(Duration::ZERO), None);
    assert!(o.force_complete());
    assert_eq!(block_on(second), Outcome::Completed);
    assert_eq!(block_on(first), Outcome::Cancelled, "the first stay's");
    assert_eq!(o.completions(), 1);
}

/// Waiters of an operation dropped outside a stay (its watch refused, or
/// never watched) are told it ended: `Cancelled`, no callback ran. Those of
/// an operation still held keep waiting, since it may yet be watched.
#[test]
fn a_completion_resolves_when_its_operation_is_dropped_unwatched() {
    let (p, _clock) = manual();
    let never = op(1_000);
    let never_c = never.completion();
    let refused = op(1_000);
    let refused_c = refused.completion();
    assert_eq!(
        p.try_complete_else_watch(refused.clone(), Vec::<Key>::new()),
        Err(PurgatoryError::NoKeys)
    );
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn({
        let c = refused_c.clone();
        move || tx.send(block_on(c))
    });
    assert_eq!(
        ready_now(refused_c.clone()),
        None,
        "still held: may be watched"
    );
    drop(refused);
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(Outcome::Cancelled), "woken");
    assert_eq!(ready_now(refused_c), Some(Outcome::Cancelled));
    drop(never);
    assert_eq!(ready_now(never_c), Some(Outcome::Cancelled));
    assert_eq!(p.stats().cancelled, 0, "not counted: it never was in here");
}

trait ReadyOutcome {
    fn completion_ready(&self) -> Option<Outcome>;
}

impl ReadyOutcome for Operation<MockOp> {
    /// The completion's outcome if it is ready without waiting.
    fn completion_ready(&self) -> Option<Outcome> {
        let mut c = self.completion();
        match poll_counting(&mut c, &Arc::new(CountWakes::default())) {
            Poll::Ready(o) => Some(o),
            Poll::Pending => None,
        }
    }
}

#[test]
fn shutdown_resolves_every_waiter_under_either_policy() {
    for (policy, outcome) in [
        (ShutdownPolicy::Drop, Outcome::Cancelled),
        (ShutdownPolicy::Expire, Outcome::Expired),
    ] {
        let p: Purgatory<Key, MockOp> = on_manual_clock("shutdown", policy);
        let ops: Vec<_> = (0..10).map(|_| op(1_000)).collect();
        let waiters: Vec<_> = ops
            .iter()
            .map(|o| {
                let c = o.completion();
                thread::spawn(move || block_on(c))
            })
            .collect();
        for (i, o) in ops.iter().enumerate() {
            p.try_complete_else_watch(o.clone(), [key(&format!("k{}", i % 3))])
                .unwrap();
        }
        assert_eq!(p.shutdown().len(), 10);
        for w in waiters {
            assert_eq!(w.join().unwrap(), outcome, "{policy:?}");
        }
        for o in &ops {
            assert_left(o, outcome);
            o.assert_sound();
        }
        let stats = p.stats();
        assert_eq!((stats.watched, stats.delayed), (0, 0));
        assert_eq!(stats.cancelled + stats.expired, 10);
    }
}

/// Expires under a shutdown's `Expire` policy only when let go: its
/// `on_complete` waits for `release`, then calls `shutdown` again.
struct SlowToExpire {
    purgatory: Mutex<Option<Arc<Purgatory<Key, SlowToExpire>>>>,
    started: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl DelayedOperation for SlowToExpire {
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn try_complete(&self) -> bool {
        false
    }

    fn on_complete(&self) {
        if let Some(started) = self.started.lock().unwrap().take() {
            started.send(()).unwrap();
        }
        let _ = self.release.lock().unwrap().recv_timeout(PATIENCE);
        // Re-entered from the first shutdown's own callback: returns at once.
        let p = self.purgatory.lock().unwrap().take();
        assert!(p.expect("set before the shutdown").shutdown().is_empty());
    }
}

/// A second `shutdown` made while the first runs a slow callback returns
/// only once the first has finished: the operation has expired by then,
/// and nothing is watched.
#[test]
fn a_concurrent_shutdown_returns_only_once_the_first_has_finished() {
    let p: Arc<Purgatory<Key, SlowToExpire>> = Arc::new(
        Purgatory::builder("slow")
            .clock(ManualClock::new())
            .reaper(false)
            .shutdown_policy(ShutdownPolicy::Expire)
            .build()
            .unwrap(),
    );
    let (started_tx, started) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel();
    let o = Operation::new(SlowToExpire {
        purgatory: Mutex::new(Some(p.clone())),
        started: Mutex::new(Some(started_tx)),
        release: Mutex::new(released),
    });
    p.try_complete_else_watch(o.clone(), [key("a")]).unwrap();
    let first = {
        let p = p.clone();
        thread::spawn(move || p.shutdown().len())
    };
    started.recv_timeout(PATIENCE).unwrap();
    let second = {
        let (p, o) = (p.clone(), o.clone());
        thread::spawn(move || {
            let returned = p.shutdown().len();
            (returned, o.outcome(), p.watched())
        })
    };
    thread::sleep(Duration::from_millis(20)); // the second call now waits
    release.send(()).unwrap();
    assert_eq!(second.join().unwrap(), (0, Some(Outcome::Expired), 0));
    assert_eq!(first.join().unwrap(), 1);
}

/// Waiters on other threads (blocked, and awaiting) are woken by the
/// cancelling call itself: no later call to the purgatory is needed.
#[test]
fn a_waiter_resolves_right_after_a_cancel_with_no_later_call() {
    let (p, _clock) = manual();
    let by_key = op(60_000);
    let one = op(60_000);
    p.try_complete_else_watch(by_key.clone(), [key("a")])
        .unwrap();
    p.try_complete_else_watch(one.clone(), [key("b")]).unwrap();
    let started = Arc::new(Barrier::new(5));
    let spawn_waiters = |o: &Operation<MockOp>| {
        let (o1, c, s1, s2) = (o.clone(), o.completion(), started.clone(), started.clone());
        [
            thread::spawn(move || {
                s1.wait();
                o1.wait_timeout(PATIENCE)
            }),
            thread::spawn(move || {
                s2.wait();
                Some(block_on(c))
            }),
        ]
    };
    let mut waiters = Vec::new();
    waiters.extend(spawn_waiters(&by_key));
    waiters.extend(spawn_waiters(&one));
    started.wait();
    // Let the waiters block (not required for correctness, only to test
    // the waking path rather than the ready path).
    thread::sleep(Duration::from_millis(20));
    let cancelled = p.cancel_for_key(&key("a"));
    assert_eq!(cancelled.len(), 1);
    assert!(p.cancel(&one));
    for w in waiters {
        assert_eq!(w.join().unwrap(), Some(Outcome::Cancelled));
    }
}

/// A waker that panics (an executor's bug) is logged; the waiters after
/// it are still woken, and the call that ended the operation returns.
#[test]
fn a_panicking_waker_does_not_keep_the_other_waiters_asleep() {
    struct Panics;
    impl Wake for Panics {
        fn wake(self: Arc<Self>) {
            panic!("waker bug");
        }
    }
    let (p, _clock) = manual();
    let (o, mut first) = watched(&p, 60_000, &["a"]);
    let mut second = o.completion();
    let panicking = Waker::from(Arc::new(Panics));
    let polled = std::pin::Pin::new(&mut first).poll(&mut Context::from_waker(&panicking));
    assert!(polled.is_pending());
    let wakes = Arc::new(CountWakes::default());
    assert!(poll_counting(&mut second, &wakes).is_pending());
    assert!(o.force_complete());
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_resolved(&o, second, Outcome::Completed);
    assert_eq!(p.watched(), 0);
}

#[test]
fn wait_timeout_times_out_while_pending() {
    let (p, _clock) = manual();
    let o = op(60_000);
    p.try_complete_else_watch(o.clone(), [key("a")]).unwrap();
    assert_eq!(o.wait_timeout(Duration::from_millis(5)), None);
    assert_eq!(o.outcome(), None);
    assert!(o.force_complete());
    assert_eq!(
        o.wait_timeout(Duration::from_millis(5)),
        Some(Outcome::Completed)
    );
}

// ------------------------------------------------------- races

/// Many threads check, force, cancel (one by one and by key) and expire
/// the same operations: each leaves exactly once, `on_complete` runs iff
/// the outcome says so, and every view agrees.
#[test]
fn exactly_one_outcome_under_racing_checks_forces_cancels_and_expiry() {
    const OPS: usize = 300;
    let clock = ManualClock::new();
    let p: Arc<Purgatory<Key, MockOp>> = Arc::new(
        Purgatory::builder("race")
            .clock(clock.clone())
            .reaper(false)
            .build()
            .unwrap(),
    );
    let ops: Arc<Vec<Operation<MockOp>>> = Arc::new(
        (0..OPS)
            .map(|i| {
                op_with(|m| {
                    m.timeout = Duration::from_millis(1 + (i % 7) as u64);
                    m.spin = i % 3;
                })
            })
            .collect(),
    );
    let completions: Vec<Completion> = ops.iter().map(Operation::completion).collect();
    for (i, o) in ops.iter().enumerate() {
        let keys = [
            key(&format!("k{}", i % 5)),
            key(&format!("k{}", (i + 1) % 5)),
        ];
        p.try_complete_else_watch(o.clone(), keys).unwrap();
    }
    let go = Arc::new(Barrier::new(5));
    let mut threads = Vec::new();
    for role in 0..4 {
        let (p, ops, go, clock) = (p.clone(), ops.clone(), go.clone(), clock.clone());
        threads.push(thread::spawn(move || {
            go.wait();
            for (i, o) in ops.iter().enumerate() {
                match (role + i) % 4 {
                    0 => {
                        o.set_completable();
                        p.check_and_complete(&key(&format!("k{}", i % 5)));
                    }
                    1 => {
                        o.force_complete();
                    }
                    2 => {
                        p.cancel(o);
                    }
                    _ => {
                        if i % 50 == 0 {
                            p.cancel_for_key(&key(&format!("k{}", i % 5)));
                        }
                        clock.advance_ms(1);
                        p.advance_clock(Duration::ZERO);
                    }
                }
            }
        }));
    }
    go.wait();
    for t in threads {
        t.join().unwrap();
    }
    // Whatever is left expires.
    clock.advance_ms(1_000);
    p.advance_clock(Duration::ZERO);
    let mut by_outcome = [0usize; 3];
    for (o, c) in ops.iter().zip(completions) {
        o.assert_sound();
        let outcome = o.outcome().expect("every operation left");
        let awaited = block_on(c);
        // The stay's outcome; a cancelled operation may be forced later
        // (out of the purgatory, by its owner), which the outcome then says.
        assert!(
            awaited == outcome || (awaited == Outcome::Cancelled && outcome == Outcome::Completed),
            "{awaited:?} then {outcome:?}"
        );
        assert_eq!(o.wait_timeout(Duration::ZERO), Some(outcome));
        let (completions, expirations) = match outcome {
            Outcome::Completed => (1, 0),
            Outcome::Expired => (1, 1),
            Outcome::Cancelled => (0, 0),
            _ => unreachable!(),
        };
        assert_eq!(
            (o.completions(), o.expirations()),
            (completions, expirations)
        );
        by_outcome[match outcome {
            Outcome::Completed => 0,
            Outcome::Expired => 1,
            _ => 2,
        }] += 1;
    }
    let stats = p.stats();
    assert_eq!((stats.watched, stats.delayed), (0, 0));
    // Each operation left the purgatory once (forced after a cancel, it
    // counts as cancelled there).
    assert_eq!(stats.completed + stats.expired + stats.cancelled, OPS);
    assert_eq!(stats.expired, by_outcome[1], "expired");
    assert!(stats.completed <= by_outcome[0]);
}

// ------------------------------------------------------- release rule

/// The purgatory a [`Recorder`] calls from its `Drop`, once set.
type Probe = Arc<Mutex<Option<Arc<Purgatory<Key, Recorder>>>>>;

/// Records, when dropped, the thread and whether the shared group lock was
/// held there; then calls into the purgatory, which would deadlock if the
/// dropping thread held one of its shard locks.
struct Recorder {
    group: OperationLock,
    log: Arc<Mutex<Vec<(ThreadId, bool)>>>,
    probe: Probe,
    ready: bool,
}

impl DelayedOperation for Recorder {
    fn timeout(&self) -> Duration {
        Duration::from_millis(10)
    }
    fn try_complete(&self) -> bool {
        self.ready
    }
    fn on_complete(&self) {}
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let held = self.group.is_owned_by_current_thread();
        self.log
            .lock()
            .unwrap()
            .push((thread::current().id(), held));
        if let Some(p) = self.probe.lock().unwrap().as_ref() {
            p.watched_on(&key("k"));
            p.stats();
        }
    }
}

#[test]
fn an_operation_is_dropped_by_the_call_that_ends_it_with_no_lock_held() {
    let clock = ManualClock::new();
    let p: Arc<Purgatory<Key, Recorder>> = Arc::new(
        Purgatory::builder("release")
            .clock(clock.clone())
            .reaper(false)
            .build()
            .unwrap(),
    );
    let group = new_operation_lock();
    let log = Arc::new(Mutex::new(Vec::new()));
    let probe = Arc::new(Mutex::new(Some(p.clone())));
    let make = |ready| {
        Operation::with_lock(
            Recorder {
                group: group.clone(),
                log: log.clone(),
                probe: probe.clone(),
                ready,
            },
            group.clone(),
        )
    };
    let me = thread::current().id();
    let taken = |log: &Arc<Mutex<Vec<(ThreadId, bool)>>>| std::mem::take(&mut *log.lock().unwrap());

    // Completed by the first try: dropped by that call.
    p.try_complete_else_watch(make(true), [key("k")]).unwrap();
    assert_eq!(taken(&log), [(me, false)]);
    // Forced on another thread, which dropped its handle: dropped there.
    let o = make(false);
    p.try_complete_else_watch(o.clone(), [key("k")]).unwrap();
    let forcer = thread::spawn(move || {
        o.force_complete();
        drop(o);
        thread::current().id()
    })
    .join()
    .unwrap();
    assert_eq!(taken(&log), [(forcer, false)]);
    // Cancelled, one by one and by key: dropped by the cancelling call.
    let o = make(false);
    p.try_complete_else_watch(o.clone(), [key("k")]).unwrap();
    let weak_probe = o.completion();
    assert!(p.cancel(&{ o }));
    assert_eq!(taken(&log), [(me, false)]);
    assert_eq!(block_on(weak_probe), Outcome::Cancelled);
    p.try_complete_else_watch(make(false), [key("k")]).unwrap();
    drop(p.cancel_for_key(&key("k")));
    assert_eq!(taken(&log), [(me, false)]);
    // Expired: dropped on the timer's thread, before advance_clock returns.
    p.try_complete_else_watch(make(false), [key("k")]).unwrap();
    clock.advance_ms(10);
    p.advance_clock(Duration::ZERO);
    let dropped = taken(&log);
    assert_eq!(dropped.len(), 1);
    assert!(dropped[0].0 != me && !dropped[0].1);
    // Nothing waits for a later call.
    assert_eq!(p.stats().watched, 0);
    *probe.lock().unwrap() = None;
}

// ------------------------------------------------------- containment

/// Hashes its id only; panics in `Hash`, `Eq` or `Drop` when asked.
#[derive(Debug, Clone)]
struct Touchy {
    id: u32,
    panic_hash: bool,
    panic_eq: bool,
    panic_drop: bool,
}

fn touchy(id: u32) -> Touchy {
    Touchy {
        id,
        panic_hash: false,
        panic_eq: false,
        panic_drop: false,
    }
}

impl Drop for Touchy {
    fn drop(&mut self) {
        if self.panic_drop && !std::thread::panicking() {
            panic!("Drop panics on purpose");
        }
    }
}

impl Hash for Touchy {
    fn hash<H: Hasher>(&self, state: &mut H) {
        assert!(!self.panic_hash, "Hash panics on purpose");
        self.id.hash(state);
    }
}

impl PartialEq for Touchy {
    fn eq(&self, other: &Self) -> bool {
        assert!(!self.panic_eq && !other.panic_eq, "Eq panics on purpose");
        self.id == other.id
    }
}

impl Eq for Touchy {}

/// Key `id`, whose `Drop` panics.
fn drop_panics(id: u32) -> Touchy {
    Touchy {
        panic_drop: true,
        ..touchy(id)
    }
}

/// A purgatory named `name` on a manual clock, with no reaper, shutting
/// down by `policy`.
fn on_manual_clock<K: WatchKey, Op: DelayedOperation>(
    name: &str,
    policy: ShutdownPolicy,
) -> Purgatory<K, Op> {
    Purgatory::builder(name)
        .clock(ManualClock::new())
        .reaper(false)
        .shutdown_policy(policy)
        .build()
        .unwrap()
}

/// A purgatory of `Touchy` keys on a manual clock.
fn touchy_purgatory() -> Purgatory<Touchy, MockOp> {
    on_manual_clock("touchy", ShutdownPolicy::Drop)
}

#[test]
fn a_panicking_key_leaves_no_partial_watch() {
    let p = touchy_purgatory();
    let other = op(1_000);
    p.try_complete_else_watch(other.clone(), [touchy(9)])
        .unwrap();
    let bad_hash = Touchy {
        panic_hash: true,
        ..touchy(3)
    };
    // Equal hash to key 9, so the table compares them.
    let bad_eq = Touchy {
        panic_eq: true,
        ..touchy(9)
    };
    // Last, after lists were joined; and first, which
    // `try_complete_else_watch` hashes on entry, before anything is locked.
    let cases = [bad_hash, bad_eq].into_iter().flat_map(|bad| {
        [
            vec![touchy(1), touchy(2), bad.clone()],
            vec![bad, touchy(1), touchy(2)],
        ]
    });
    for keys in cases {
        let o = op(1_000);
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            p.try_complete_else_watch(o.clone(), keys)
        }));
        assert!(panicked.is_err(), "the panic reaches the caller");
        assert!(!o.is_watched() && o.outcome().is_none());
        assert_eq!(p.watched_on(&touchy(1)), 0);
        assert_eq!(p.watched_on(&touchy(2)), 0);
        assert_eq!(p.watched_on(&touchy(9)), 1);
        assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (1, 1, 1));
        // The operation is intact: it may be watched again.
        assert_eq!(p.try_complete_else_watch(o.clone(), [touchy(1)]), Ok(false));
        assert!(p.cancel(&o));
    }
    assert_eq!((p.watched(), p.delayed()), (1, 1));
}

/// A key whose `Drop` panics, dropped by the index (a watch's copy of a
/// listed key, a freed list's key): the panic is logged, and the index
/// stays whole.
#[test]
fn a_key_whose_drop_panics_leaves_the_index_whole() {
    let p = touchy_purgatory();
    let bad = || drop_panics(1);
    let (first, second) = (op(1_000), op(1_000));
    assert_eq!(p.try_complete_else_watch(first.clone(), [bad()]), Ok(false));
    // The list has its key: the watch drops this copy.
    assert_eq!(
        p.try_complete_else_watch(second.clone(), [bad()]),
        Ok(false)
    );
    assert_eq!(p.watched_on(&touchy(1)), 2);
    first.completable.store(true, Ordering::Release);
    second.completable.store(true, Ordering::Release);
    assert_eq!(p.check_and_complete(&touchy(1)), 2);
    // The emptied list is freed (by the check, or here at the latest), and
    // its key dropped.
    p.purge();
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    // The index goes on working, with the same key and others.
    for round in 0..3 {
        let o = op(1_000);
        let keys = [touchy(1), touchy(2 + round)];
        assert_eq!(p.try_complete_else_watch(o.clone(), keys), Ok(false));
        assert_eq!(p.watched_keys(), 2);
        assert_eq!(p.cancel_for_key(&touchy(1)).len(), 1);
        p.purge();
        assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    }
}

/// Keys a watch does not use (its operation completed at once, or it was
/// refused) are dropped by the purgatory like the others: a panic in their
/// `Drop` is logged, and the waiters of an operation completed at once are
/// woken (a panic as the call returned leaked the token that wakes them).
#[test]
fn unused_keys_whose_drop_panics_are_logged() {
    init_log();
    let p = touchy_purgatory();
    let bad = || drop_panics(1);
    let now = op(1_000);
    now.set_completable();
    let mut done = now.completion();
    assert_eq!(p.try_complete_else_watch(now.clone(), [bad()]), Ok(true));
    assert_eq!(ready_now(&mut done), Some(Outcome::Completed));
    assert_eq!(
        p.try_complete_else_watch(now.clone(), [bad()]),
        Err(PurgatoryError::AlreadyCompleted)
    );
    let pending = op(1_000);
    assert_eq!(
        p.try_complete_else_watch(pending.clone(), [touchy(2)]),
        Ok(false)
    );
    assert_eq!(
        p.try_complete_else_watch(pending.clone(), [bad()]),
        Err(PurgatoryError::AlreadyWatched)
    );
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (1, 1, 1));
    assert_eq!(p.shutdown().len(), 1);
    assert_eq!(
        p.try_complete_else_watch(op(1_000), [bad()]),
        Err(PurgatoryError::Shutdown)
    );
}

/// Yields its keys, shutting the purgatory down once the first was taken.
struct ShutsDownAfterFirst<'a> {
    purgatory: &'a Purgatory<Touchy, MockOp>,
    keys: std::vec::IntoIter<Touchy>,
    taken: usize,
}

impl Iterator for ShutsDownAfterFirst<'_> {
    type Item = Touchy;
    fn next(&mut self) -> Option<Touchy> {
        if self.taken == 1 {
            assert!(self.purgatory.shutdown().is_empty(), "not attached yet");
        }
        self.taken += 1;
        self.keys.next()
    }
}

/// A shutdown that refuses a watch part-way through its keys: the keys it
/// did not use are dropped like the others (a panic in their `Drop` is
/// logged, and undoes nothing), and the operation, watched under the keys
/// it joined, is handled by the shutdown policy.
#[test]
fn keys_a_shutdown_refused_mid_watch_are_dropped_and_the_policy_applies() {
    init_log();
    for policy in [ShutdownPolicy::Drop, ShutdownPolicy::Expire] {
        let p: Purgatory<Touchy, MockOp> = on_manual_clock("touchy", policy);
        let o = op(1_000);
        let keys = ShutsDownAfterFirst {
            purgatory: &p,
            keys: vec![touchy(1), drop_panics(2), drop_panics(3)].into_iter(),
            taken: 0,
        };
        assert_eq!(
            p.try_complete_else_watch(o.clone(), keys),
            Err(PurgatoryError::Shutdown),
            "{policy:?}"
        );
        let (outcome, callbacks) = match policy {
            ShutdownPolicy::Drop => (Outcome::Cancelled, (0, 0)),
            _ => (Outcome::Expired, (1, 1)),
        };
        assert_eq!(o.outcome(), Some(outcome), "{policy:?}");
        assert_eq!((o.completions(), o.expirations()), callbacks, "{policy:?}");
        assert!(!o.is_watched());
        assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
        assert_eq!(p.stats().panicked, 0, "a key's Drop is not a callback");
    }
}

/// Keys the iterator still holds when a watch is done with it (here the
/// vector's after `take(1)`) are dropped after the operation lock like the
/// others: a panic in their `Drop` is logged and leaves the watch whole.
#[test]
fn keys_an_iterator_still_holds_after_a_watch_are_dropped_like_the_others() {
    init_log();
    let p = touchy_purgatory();
    let o = op(1_000);
    let keys = vec![touchy(1), drop_panics(2)].into_iter().take(1);
    assert_eq!(p.try_complete_else_watch(o.clone(), keys), Ok(false));
    assert!(o.is_watched());
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (1, 1, 1));
    o.set_completable();
    assert_eq!(p.check_and_complete(&touchy(1)), 1);
    assert_eq!(o.outcome(), Some(Outcome::Completed));
    assert_eq!(p.stats().completed, 1);
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
}

/// Completes once `ready` is set; records, when dropped, whether the lock
/// it shares was held there.
struct SharesALock {
    ready: Arc<AtomicBool>,
    lock: OperationLock,
    dropped_under_lock: Arc<Mutex<Option<bool>>>,
}

impl DelayedOperation for SharesALock {
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn try_complete(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {}
}

impl Drop for SharesALock {
    fn drop(&mut self) {
        *self.dropped_under_lock.lock().unwrap() = Some(self.lock.is_owned_by_current_thread());
    }
}

/// The key iterator runs under the watched operation's lock: a check it
/// makes holds back what it releases, as one made from a callback does, so
/// an operation it completes is not dropped under that lock but when the
/// watch returns.
#[test]
fn what_a_check_from_the_key_iterator_releases_waits_for_the_watch() {
    let p: Purgatory<Key, SharesALock> = on_manual_clock("iterator checks", ShutdownPolicy::Drop);
    let group = new_operation_lock();
    let ready = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(Mutex::new(None));
    let other = SharesALock {
        ready: ready.clone(),
        lock: group.clone(),
        dropped_under_lock: dropped.clone(),
    };
    // The purgatory holds its only reference.
    assert_eq!(
        p.try_complete_else_watch(Operation::with_lock(other, group.clone()), [key("b")]),
        Ok(false)
    );
    ready.store(true, Ordering::SeqCst);
    let watched = Operation::with_lock(
        SharesALock {
            ready: Arc::new(AtomicBool::new(false)),
            lock: group.clone(),
            dropped_under_lock: Arc::new(Mutex::new(None)),
        },
        group.clone(),
    );
    // The first key is taken before the lock, the second under it.
    let mut checked = None;
    let keys = [key("a"), key("c")].into_iter().inspect(|k| {
        if *k == key("c") {
            checked = Some(p.check_and_complete(&key("b")));
            assert_eq!(*dropped.lock().unwrap(), None, "held back");
        }
    });
    assert_eq!(p.try_complete_else_watch(watched.clone(), keys), Ok(false));
    assert_eq!(checked, Some(1));
    assert_eq!(
        *dropped.lock().unwrap(),
        Some(false),
        "dropped, no lock held"
    );
    assert_eq!((p.watched(), p.delayed(), p.stats().completed), (2, 1, 1));
}

/// Panics in `Hash` when told to, and in `Drop` when told to, even while a
/// panic unwinds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Brittle {
    id: u32,
    hash_panics: bool,
    drop_panics: bool,
}

impl Hash for Brittle {
    fn hash<H: Hasher>(&self, state: &mut H) {
        assert!(!self.hash_panics, "Hash panics on purpose");
        self.id.hash(state);
    }
}

impl Drop for Brittle {
    fn drop(&mut self) {
        assert!(
            !self.drop_panics,
            "Drop panics on purpose, even while unwinding"
        );
    }
}

thread_local! {
    /// What the next `Calling` key's `Eq` does first, once.
    static ON_EQ: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Lets go of what a call returned.
fn ignore<T>(_: T) {}

/// A key whose `Eq` runs what `ON_EQ` holds.
#[derive(Debug, Clone)]
struct Calling(u32);

impl Hash for Calling {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialEq for Calling {
    fn eq(&self, other: &Self) -> bool {
        if let Some(call) = ON_EQ.with(|on| on.borrow_mut().take()) {
            call();
        }
        self.0 == other.0
    }
}

impl Eq for Calling {}

/// A purgatory call made from a key's `Eq` (under a watch-list lock, which
/// a call needing the same shard would wait for, for good) panics at once,
/// naming the call, and changes nothing; the panic reaches the caller of
/// the call whose `Eq` it was, which leaves everything as it was too.
#[test]
fn a_purgatory_call_from_a_keys_eq_panics_instead_of_waiting_for_itself() {
    type P = Arc<Purgatory<Calling, MockOp>>;
    type Call = Box<dyn Fn(&P, &Operation<MockOp>)>;
    let p: P = Arc::new(on_manual_clock("calling", ShutdownPolicy::Drop));
    let watched = op(1_000);
    assert_eq!(
        p.try_complete_else_watch(watched.clone(), [Calling(1)]),
        Ok(false)
    );
    let calls: Vec<(&str, Call)> = vec![
        (
            "try_complete_else_watch",
            Box::new(|p, _| ignore(p.try_complete_else_watch(op(1), [Calling(1)]))),
        ),
        (
            "check_and_complete",
            Box::new(|p, _| ignore(p.check_and_complete(&Calling(1)))),
        ),
        ("cancel", Box::new(|p, o| ignore(p.cancel(o)))),
        (
            "cancel_for_key",
            Box::new(|p, _| ignore(p.cancel_for_key(&Calling(1)))),
        ),
        (
            "force_complete",
            Box::new(|_, o| ignore(o.force_complete())),
        ),
        (
            "watched_on",
            Box::new(|p, _| ignore(p.watched_on(&Calling(1)))),
        ),
        ("watched_keys", Box::new(|p, _| ignore(p.watched_keys()))),
        ("purge", Box::new(|p, _| p.purge())),
        (
            "advance_clock",
            Box::new(|p, _| ignore(p.advance_clock(Duration::ZERO))),
        ),
        ("shutdown", Box::new(|p, _| ignore(p.shutdown()))),
    ];
    for (name, call) in calls {
        let (inner, o) = (p.clone(), watched.clone());
        ON_EQ.with(|on| *on.borrow_mut() = Some(Box::new(move || call(&inner, &o))));
        let outer = catch_unwind(AssertUnwindSafe(|| p.check_and_complete(&Calling(1))));
        let panic = outer.expect_err(name);
        let message = panic.downcast_ref::<String>().expect("a message");
        assert!(
            message.contains(name) && message.contains("`Eq`"),
            "{message}"
        );
        assert!(
            watched.is_watched() && !p.is_shut_down(),
            "{name} changed something"
        );
        assert_eq!(
            (p.watched(), p.delayed(), p.watched_on(&Calling(1))),
            (1, 1, 1)
        );
    }
    // Another purgatory dropped from `Eq` is shut down all the same (the
    // one whose lock `Eq` runs under cannot be: the call borrows it).
    let other: Purgatory<u32, MockOp> = on_manual_clock("other", ShutdownPolicy::Drop);
    let pending = op(1_000);
    assert_eq!(
        other.try_complete_else_watch(pending.clone(), [1]),
        Ok(false)
    );
    ON_EQ.with(|on| *on.borrow_mut() = Some(Box::new(move || drop(other))));
    assert_eq!(p.check_and_complete(&Calling(1)), 0);
    assert_eq!(pending.outcome(), Some(Outcome::Cancelled));
    watched.completable.store(true, Ordering::SeqCst);
    assert_eq!(p.check_and_complete(&Calling(1)), 1);
    assert_eq!(p.stats().completed, 1);
}

/// When a key's `Hash` panics, the panic reaches the caller, but what the
/// watch lets go of meanwhile (the operation it was handed, the key in
/// hand, the keys not taken) goes the guarded way, each apart: a `Drop`
/// that panics there too is logged, where the unwinding would have aborted.
/// (Keys still in one collection are dropped together, by it: two of them
/// that panic abort, as they would anywhere.)
#[test]
fn a_key_panicking_in_hash_then_in_drop_does_not_abort() {
    init_log();
    let p: Purgatory<Brittle, DropPanics> = on_manual_clock("brittle", ShutdownPolicy::Drop);
    for at in 0..3 {
        let keys: Vec<_> = (0..3)
            .map(|id| Brittle {
                id,
                hash_panics: id == at,
                drop_panics: id == at || id == 2,
            })
            .collect();
        let watch = catch_unwind(AssertUnwindSafe(|| {
            p.try_complete_else_watch(Operation::new(DropPanics), keys)
        }));
        assert!(watch.is_err(), "key {at}: the panic reaches the caller");
        assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    }
}

/// A purgatory of [`Reflexive`] operations, and a handle to one.
type SelfHandle = (Arc<Purgatory<Key, Reflexive>>, Operation<Reflexive>);

/// Does something to itself, through the purgatory and a handle to itself
/// it is given, at the point its `act` names.
struct Reflexive {
    me: Mutex<Option<SelfHandle>>,
    act: Act,
    tries: AtomicUsize,
    completions: AtomicUsize,
}

enum Act {
    /// `timeout` forces its completion.
    ForceInTimeout,
    /// Try number `n` (from 1) cancels its stay, then answers yes.
    CancelInTry(usize),
    /// Try number `n` (from 1) cancels its stay, then forces it.
    CancelThenForceInTry(usize),
    /// The first try watches it (under another key), then answers yes.
    WatchInTry,
    /// `timeout` watches it (under another key).
    WatchInTimeout,
    /// The first try watches it (under another key), and that watch's
    /// first try, the second, answers yes.
    CompletedByAWatchInTry,
    /// The first try watches it with keys whose iterator panics, then
    /// forces it.
    ForcedAfterAFailedWatchInTry,
    /// The second try (once it is watched) shuts the purgatory down.
    ShutdownInSecondTry,
}

impl Reflexive {
    /// The handle it was given, the first time it is asked.
    fn handle(&self) -> Option<SelfHandle> {
        self.me.lock().unwrap().take()
    }

    fn watch_itself(&self) {
        if let Some((p, me)) = self.handle() {
            assert_eq!(p.try_complete_else_watch(me, [key("inner")]), Ok(false));
        }
    }

    fn watch_itself_failing_then_force(&self) {
        if let Some((p, me)) = self.handle() {
            let keys = [key("inner"), key("never")]
                .into_iter()
                .inspect(|k| assert!(*k != key("never"), "the iterator panics"));
            let watch = catch_unwind(AssertUnwindSafe(|| {
                p.try_complete_else_watch(me.clone(), keys)
            }));
            assert!(watch.is_err());
            assert!(me.force_complete());
        }
    }
}

impl DelayedOperation for Reflexive {
    fn timeout(&self) -> Duration {
        match self.act {
            Act::ForceInTimeout => {
                let (_, me) = self.handle().expect("given a handle");
                assert!(me.force_complete());
            }
            Act::WatchInTimeout => self.watch_itself(),
            _ => {}
        }
        Duration::from_secs(60)
    }
    fn try_complete(&self) -> bool {
        let n = self.tries.fetch_add(1, Ordering::SeqCst) + 1;
        match self.act {
            Act::CancelInTry(at) if at == n => {
                let (p, me) = self.handle().expect("given a handle");
                assert!(p.cancel(&me));
                true
            }
            Act::CancelThenForceInTry(at) if at == n => {
                let (p, me) = self.handle().expect("given a handle");
                assert!(p.cancel(&me));
                assert!(me.force_complete());
                false
            }
            Act::WatchInTry if n == 1 => {
                self.watch_itself();
                true
            }
            Act::CompletedByAWatchInTry if n == 1 => {
                if let Some((p, me)) = self.handle() {
                    assert_eq!(p.try_complete_else_watch(me, [key("inner")]), Ok(true));
                }
                false
            }
            Act::CompletedByAWatchInTry => n == 2,
            Act::ForcedAfterAFailedWatchInTry if n == 1 => {
                self.watch_itself_failing_then_force();
                false
            }
            Act::ShutdownInSecondTry if n == 2 => {
                let (p, _) = self.handle().expect("given a handle");
                assert_eq!(p.shutdown().len(), 1);
                false
            }
            _ => false,
        }
    }
    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
    }
}

/// A purgatory, and an operation given a handle to both.
fn reflexive(act: Act) -> SelfHandle {
    let p = reflexive_purgatory();
    let o = reflexive_in(&p, act);
    (p, o)
}

fn reflexive_purgatory() -> Arc<Purgatory<Key, Reflexive>> {
    reflexive_purgatory_with(ShutdownPolicy::Drop)
}

fn reflexive_purgatory_with(policy: ShutdownPolicy) -> Arc<Purgatory<Key, Reflexive>> {
    Arc::new(on_manual_clock("reflexive", policy))
}

/// An operation given a handle to itself and to `p`.
fn reflexive_in(p: &Arc<Purgatory<Key, Reflexive>>, act: Act) -> Operation<Reflexive> {
    let o = Operation::new(Reflexive {
        me: Mutex::new(None),
        act,
        tries: AtomicUsize::new(0),
        completions: AtomicUsize::new(0),
    });
    *o.me.lock().unwrap() = Some((p.clone(), o.clone()));
    o
}

/// A `timeout` that forces its own operation completes it in the watch,
/// as a first try that does.
#[test]
fn a_timeout_that_forces_its_operation_completes_it_in_the_watch() {
    let (p, o) = reflexive(Act::ForceInTimeout);
    assert_eq!(p.try_complete_else_watch(o.clone(), [key("k")]), Ok(true));
    assert_eq!(o.outcome(), Some(Outcome::Completed));
    assert_eq!(o.completions.load(Ordering::SeqCst), 1);
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    assert_eq!(p.stats().completed, 1);
}

/// A try that cancels its own stay and then answers yes leaves it
/// cancelled: the yes of a stay that has ended completes nothing, in a
/// check as in the watch's second try.
#[test]
fn a_try_that_cancels_its_own_stay_leaves_it_cancelled() {
    // The check's try (the watch tried twice).
    let (p, o) = reflexive(Act::CancelInTry(3));
    assert_eq!(p.try_complete_else_watch(o.clone(), [key("k")]), Ok(false));
    let done = o.completion();
    assert_eq!(p.check_and_complete(&key("k")), 0);
    // The watch's second try, once the operation is watched.
    let (q, other) = reflexive(Act::CancelInTry(2));
    assert_eq!(
        q.try_complete_else_watch(other.clone(), [key("k")]),
        Ok(false)
    );
    for (p, o) in [(&p, &o), (&q, &other)] {
        assert_eq!(o.outcome(), Some(Outcome::Cancelled));
        assert_eq!(o.completions.load(Ordering::SeqCst), 0);
        let stats = p.stats();
        assert_eq!((stats.completed, stats.cancelled), (0, 1));
        assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    }
    assert_eq!(ready_now(done), Some(Outcome::Cancelled));
}

/// A try that cancels its own stay and then forces the operation completes
/// it outside the purgatory: the cancel counts, the completion does not,
/// in the watch's second try as in a check's try (as when the two calls
/// are made one after the other from outside).
#[test]
fn a_force_after_a_try_cancelled_its_stay_is_not_counted() {
    for (try_number, watched) in [(2, Ok(true)), (3, Ok(false))] {
        let (p, o) = reflexive(Act::CancelThenForceInTry(try_number));
        assert_eq!(p.try_complete_else_watch(o.clone(), [key("k")]), watched);
        if try_number == 3 {
            assert_eq!(p.check_and_complete(&key("k")), 1, "forced by its try");
        }
        assert_eq!(o.outcome(), Some(Outcome::Completed));
        assert_eq!(o.completions.load(Ordering::SeqCst), 1);
        let stats = p.stats();
        assert_eq!(
            (stats.completed, stats.cancelled),
            (0, 1),
            "try {try_number}"
        );
        assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    }
}

/// A first try or a `timeout` that watches its own operation (here or in
/// another purgatory) hands it to that watch: the outer watch stops with
/// `AlreadyWatched`, as if the other had come first, and counts nothing;
/// the operation stays watched where it went, counted there only.
#[test]
fn a_try_or_timeout_that_watches_its_own_operation_hands_it_over() {
    for (n, (act, elsewhere)) in [
        (Act::WatchInTry, false),
        (Act::WatchInTimeout, false),
        (Act::WatchInTry, true),
        (Act::WatchInTimeout, true),
    ]
    .into_iter()
    .enumerate()
    {
        let p = reflexive_purgatory();
        let q = reflexive_purgatory();
        let o = reflexive_in(if elsewhere { &q } else { &p }, act);
        assert_eq!(
            p.try_complete_else_watch(o.clone(), [key("k")]),
            Err(PurgatoryError::AlreadyWatched),
            "case {n}"
        );
        assert!(o.is_watched());
        let (there, other) = if elsewhere { (&q, &p) } else { (&p, &q) };
        assert_eq!((there.watched(), there.delayed()), (1, 1), "case {n}");
        assert_eq!((other.watched(), other.delayed()), (0, 0), "case {n}");
        assert!(o.force_complete());
        assert_eq!(o.completions.load(Ordering::SeqCst), 1);
        assert_eq!((there.stats().completed, other.stats().completed), (1, 0));
        assert_eq!((there.watched(), there.delayed()), (0, 0));
    }
}

/// A completion before the operation is attached is counted once, by the
/// purgatory whose watch had it then: a watch made from the first try that
/// completes it counts it, the outer watch does not; after a watch made
/// from the try failed (its claim undone), a force that follows is the
/// outer watch's.
#[test]
fn a_completion_before_the_attach_is_counted_once_by_its_watch() {
    for elsewhere in [false, true] {
        let p = reflexive_purgatory();
        let q = reflexive_purgatory();
        let o = reflexive_in(if elsewhere { &q } else { &p }, Act::CompletedByAWatchInTry);
        assert_eq!(p.try_complete_else_watch(o.clone(), [key("k")]), Ok(true));
        assert_eq!(o.completions.load(Ordering::SeqCst), 1);
        let (there, other) = if elsewhere { (&q, &p) } else { (&p, &q) };
        assert_eq!((there.stats().completed, other.stats().completed), (1, 0));
        for p in [&p, &q] {
            assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
        }
    }
    let p = reflexive_purgatory();
    let q = reflexive_purgatory();
    let o = reflexive_in(&q, Act::ForcedAfterAFailedWatchInTry);
    assert_eq!(p.try_complete_else_watch(o.clone(), [key("k")]), Ok(true));
    assert_eq!(o.completions.load(Ordering::SeqCst), 1);
    assert_eq!((p.stats().completed, q.stats().completed), (1, 0));
    assert_eq!((q.watched(), q.delayed(), q.watched_keys()), (0, 0, 0));
}

/// A shutdown made by the watch's second try is a shutdown for the watch,
/// whatever the policy did with the operation.
#[test]
fn a_shutdown_from_the_second_try_fails_the_watch() {
    for policy in [ShutdownPolicy::Drop, ShutdownPolicy::Expire] {
        let p = reflexive_purgatory_with(policy);
        let o = reflexive_in(&p, Act::ShutdownInSecondTry);
        assert_eq!(
            p.try_complete_else_watch(o.clone(), [key("k")]),
            Err(PurgatoryError::Shutdown),
            "{policy:?}"
        );
        let expired = policy == ShutdownPolicy::Expire;
        assert_eq!(o.is_expired(), expired);
        assert_eq!(p.stats().expired, usize::from(expired));
        assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
    }
}

/// An operation its keys complete before a later key panics has completed:
/// the panic reaches the caller, and the completion is counted.
#[test]
fn a_completion_by_the_keys_before_one_panics_is_counted() {
    init_log();
    let p = touchy_purgatory();
    let o = op(1_000);
    let inner = o.clone();
    let bad = Touchy {
        panic_hash: true,
        ..touchy(2)
    };
    let keys = [touchy(1), bad].into_iter().inspect(move |k| {
        if k.id == 2 {
            assert!(inner.force_complete());
        }
    });
    let watch = catch_unwind(AssertUnwindSafe(|| {
        p.try_complete_else_watch(o.clone(), keys)
    }));
    assert!(watch.is_err(), "the panic reaches the caller");
    assert_eq!(o.outcome(), Some(Outcome::Completed));
    assert_eq!(p.stats().completed, 1);
    assert_eq!((p.watched(), p.delayed(), p.watched_keys()), (0, 0, 0));
}

/// Watches an operation when dropped, and says how that went.
struct WatchesWhenDropped {
    purgatory: Arc<Purgatory<Key, MockOp>>,
    watched: Arc<AtomicBool>,
}

impl Drop for WatchesWhenDropped {
    fn drop(&mut self) {
        let watch = self
            .purgatory
            .try_complete_else_watch(op(1_000), [key("late")]);
        let now = op(1_000);
        now.set_completable();
        let done = self.purgatory.try_complete_else_watch(now, [key("late")]);
        self.watched
            .store(watch == Ok(false) && done == Ok(true), Ordering::SeqCst);
    }
}

thread_local! {
    static WATCHES_AT_EXIT: std::cell::RefCell<Option<WatchesWhenDropped>> =
        const { std::cell::RefCell::new(None) };
}

/// A watch made from a thread-local's destructor works (and one that
/// completes at once is counted), though the purgatory's own
/// thread-locals, first used after that one, are gone by then.
#[test]
fn a_watch_made_from_a_thread_locals_destructor_works() {
    let p = Arc::new(manual().0);
    let watched = Arc::new(AtomicBool::new(false));
    let (p2, watched2) = (p.clone(), watched.clone());
    thread::spawn(move || {
        WATCHES_AT_EXIT.with(|w| {
            *w.borrow_mut() = Some(WatchesWhenDropped {
                purgatory: p2.clone(),
                watched: watched2,
            })
        });
        // Both kinds of watch, so that every thread-local they use is in
        // use by then.
        assert_eq!(
            p2.try_complete_else_watch(op(1_000), [key("early")]),
            Ok(false)
        );
        let now = op(1_000);
        now.set_completable();
        assert_eq!(p2.try_complete_else_watch(now, [key("early")]), Ok(true));
    })
    .join()
    .unwrap();
    assert!(watched.load(Ordering::SeqCst));
    assert_eq!((p.watched(), p.stats().completed), (2, 2));
}

/// Reads a manual clock, and panics at the read it is told to.
#[derive(Debug, Clone)]
struct PanickyClock {
    clock: ManualClock,
    panic_next: Arc<AtomicBool>,
}

impl Clock for PanickyClock {
    fn now_nanos(&self) -> u64 {
        assert!(
            !self.panic_next.swap(false, Ordering::Relaxed),
            "the clock panics on purpose"
        );
        self.clock.now_nanos()
    }
}

/// A clock that panics as a watch arms the operation's timeout does not
/// leave it watched with no timeout (never to expire): the panic is
/// logged, and the operation expires at once, as with a panicking
/// `timeout`.
#[test]
fn a_clock_panicking_as_a_watch_arms_expires_the_operation_at_once() {
    init_log();
    let panic_next = Arc::new(AtomicBool::new(false));
    let p: Purgatory<Key, MockOp> = Purgatory::builder("panicky clock")
        .clock(PanickyClock {
            clock: ManualClock::new(),
            panic_next: panic_next.clone(),
        })
        .reaper(false)
        .build()
        .unwrap();
    let o = op(60_000);
    panic_next.store(true, Ordering::Relaxed);
    assert_eq!(p.try_complete_else_watch(o.clone(), [key("a")]), Ok(false));
    assert!(!panic_next.load(Ordering::Relaxed), "the clock was read");
    assert_eq!(o.wait_timeout(PATIENCE), Some(Outcome::Expired));
    assert_eq!((o.completions(), o.expirations()), (1, 1));
    assert_eq!((p.watched(), p.delayed(), p.stats().expired), (0, 0, 1));
    // The clock's next reads are fine: timeouts count from them again.
    let later = op(60_000);
    assert_eq!(
        p.try_complete_else_watch(later.clone(), [key("a")]),
        Ok(false)
    );
    assert_eq!((p.watched(), p.delayed()), (1, 1));
}

/// Never completes; panics in its `Drop`, even while a panic unwinds.
struct DropPanics;

impl DelayedOperation for DropPanics {
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {}
}

impl Drop for DropPanics {
    fn drop(&mut self) {
        panic!("an operation's Drop panics on purpose");
    }
}

/// Dropping a purgatory lets go of its pending operations as every call
/// does: a panic in an operation's `Drop` is logged, not let out of the
/// purgatory's `Drop` (where, on a thread already unwinding, it would
/// abort the process).
#[test]
fn dropping_the_purgatory_logs_a_panicking_operation_drop() {
    init_log();
    for policy in [ShutdownPolicy::Drop, ShutdownPolicy::Expire] {
        let p: Purgatory<Key, DropPanics> = on_manual_clock("drop panics", policy);
        for k in ["a", "b"] {
            assert_eq!(p.try_complete_else_watch(DropPanics, [key(k)]), Ok(false));
        }
        assert!(
            catch_unwind(AssertUnwindSafe(|| drop(p))).is_ok(),
            "{policy:?}"
        );
    }
}

#[test]
fn absurd_shard_counts_are_errors() {
    for shards in [0, usize::MAX, 1 << 36, PurgatoryBuilder::MAX_SHARDS + 1] {
        let built = Purgatory::builder("shards")
            .reaper(false)
            .shards(shards)
            .build::<Key, MockOp>();
        assert_eq!(built.err(), Some(PurgatoryError::Shards(shards)));
    }
    let most = Purgatory::builder("shards")
        .reaper(false)
        .shards(PurgatoryBuilder::MAX_SHARDS)
        .build::<Key, MockOp>();
    assert!(most.is_ok());
    let msg = PurgatoryError::Shards(0).to_string();
    assert!(msg.contains("65536"), "{msg}");
}

#[test]
fn the_timer_shard_count_is_checked_and_used() {
    for shards in [0, 65, usize::MAX] {
        let built = Purgatory::builder("timer-shards")
            .reaper(false)
            .timer_shards(shards)
            .build::<Key, MockOp>();
        let Err(PurgatoryError::Config(ConfigError::ShardsOutOfRange { requested, .. })) = built
        else {
            panic!("{shards} timer shards accepted");
        };
        assert_eq!(requested, shards);
    }
    // Threads watching at once arm their timeouts in one wheel or in
    // several; either way each expires once, on time.
    for shards in [1, 64] {
        let clock = ManualClock::new();
        let p = Purgatory::builder("timer-shards")
            .clock(clock.clone())
            .reaper(false)
            .timer_shards(shards)
            .build::<Key, MockOp>()
            .unwrap();
        let ops: Vec<_> = (0..8).map(|_| op(10)).collect();
        thread::scope(|s| {
            for (i, o) in ops.iter().enumerate() {
                let p = &p;
                s.spawn(move || p.try_complete_else_watch(o.clone(), [key(&i.to_string())]));
            }
        });
        assert_eq!(p.delayed(), 8);
        advance(&p, &clock, 9);
        assert!(ops.iter().all(|o| !o.is_completed()));
        advance(&p, &clock, 1);
        assert!(ops.iter().all(|o| o.is_expired() && o.expirations() == 1));
        assert_eq!(p.delayed(), 0);
    }
}

/// Shutdown under either policy racing checks and forces from other
/// threads: every operation leaves exactly once, and every waiter gets the
/// outcome its operation reports.
#[test]
fn shutdown_racing_checks_and_forces_resolves_every_waiter_once() {
    const OPS: usize = 200;
    for policy in [ShutdownPolicy::Drop, ShutdownPolicy::Expire] {
        let p: Arc<Purgatory<Key, MockOp>> = Arc::new(
            Purgatory::builder("shutdown-race")
                .clock(ManualClock::new())
                .reaper(false)
                .shutdown_policy(policy)
                .build()
                .unwrap(),
        );
        let ops: Arc<Vec<Operation<MockOp>>> = Arc::new((0..OPS).map(|_| op(60_000)).collect());
        let completions: Vec<Completion> = ops.iter().map(Operation::completion).collect();
        for (i, o) in ops.iter().enumerate() {
            p.try_complete_else_watch(o.clone(), [key(&format!("k{}", i % 4))])
                .unwrap();
        }
        let go = Arc::new(Barrier::new(3));
        let racers: Vec<_> = (0..2)
            .map(|role| {
                let (p, ops, go) = (p.clone(), ops.clone(), go.clone());
                thread::spawn(move || {
                    go.wait();
                    for (i, o) in ops.iter().enumerate().filter(|(i, _)| i % 2 == role) {
                        if role == 0 {
                            o.set_completable();
                            p.check_and_complete(&key(&format!("k{}", i % 4)));
                        } else {
                            o.force_complete();
                        }
                    }
                })
            })
            .collect();
        go.wait();
        let returned = p.shutdown().len();
        for r in racers {
            r.join().unwrap();
        }
        let shut_out = match policy {
            ShutdownPolicy::Drop => Outcome::Cancelled,
            _ => Outcome::Expired,
        };
        let mut ended_by_shutdown = 0;
        for (o, c) in ops.iter().zip(completions) {
            o.assert_sound();
            let awaited = block_on(c);
            let outcome = o.outcome().expect("every operation left");
            if awaited == shut_out {
                ended_by_shutdown += 1;
            }
            match (awaited, outcome) {
                // Cancelled at shutdown, forced afterwards by its owner.
                (Outcome::Cancelled, Outcome::Completed) => assert_eq!(o.completions(), 1),
                _ => assert_eq!(awaited, outcome),
            }
            assert_eq!(o.completions(), usize::from(outcome != Outcome::Cancelled));
        }
        assert_eq!(ended_by_shutdown, returned, "{policy:?}");
        assert_eq!((p.watched(), p.delayed()), (0, 0));
    }
}
