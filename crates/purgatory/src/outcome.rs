//! How an operation ended, and how whoever holds it learns that.
//!
//! Two small protocols, both built on [`crate::sync`] only, so that the loom
//! tests check them as the purgatory runs them:
//!
//! * [`OpState`], the operation's state byte: whether it is watched, and the
//!   [`Outcome`] of its last stay. [`OpState::decide`] is a single
//!   compare-and-swap, so whichever of several threads (a check on each of
//!   its keys, the timeout, a force, a cancel) decides first wins, and
//!   exactly one does: that one runs `on_complete`, then *settles* the
//!   operation ([`OpState::settle`]). A completed operation shows its
//!   outcome only once settled, so whoever reads `Completed` or `Expired`
//!   also sees what the callbacks did. A waiter that comes between the
//!   decision and the settling marks itself late ([`OpState::mark_late`])
//!   and registers in the operation's links; both are read-modify-writes of
//!   the one byte, so either the settler sees the mark (and takes the late
//!   waiters' signal out of the links, under their lock, which the waiter
//!   holds while registering), or the waiter sees the operation settled.
//! * [`Signal`], the waiters of one stay: an outcome cell and a list of
//!   wakers behind a mutex. [`Signal::resolve`] stores the outcome and then
//!   takes the list; [`Signal::poll`] takes the list's lock and then reads
//!   the outcome. So a waiter either reads the outcome or is in the list the
//!   resolver wakes: no wake-up is lost. Each waiting [`Completion`] (each
//!   copy, each `wait_timeout`) has one slot in the list, holding the waker
//!   it was last polled with, and frees it when dropped: the list holds one
//!   waker per live waiter, whatever the polls, and registering is O(1). An
//!   operation allocates a signal only when someone asks for its
//!   [`Completion`]; nobody awaiting costs one empty pointer.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use timer::internal::{discard_panic, panic_message};

use crate::sync::{AtomicU8, Mutex, Ordering};

/// How an operation left the purgatory (see the crate docs, "The life of
/// an operation"). Non-exhaustive so that a way of leaving can be told
/// apart later without breaking a `match`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Its condition held (a check, or a try of
    /// [`try_complete_else_watch`](crate::Purgatory::try_complete_else_watch))
    /// or it was force-completed: `on_complete` ran.
    Completed,
    /// Its timeout passed (or a shutdown with
    /// [`ShutdownPolicy::Expire`](crate::ShutdownPolicy::Expire)):
    /// `on_complete`, then `on_expiration` ran.
    Expired,
    /// [`cancel_for_key`](crate::Purgatory::cancel_for_key),
    /// [`Purgatory::cancel`](crate::Purgatory::cancel) or a shutdown with
    /// [`ShutdownPolicy::Drop`](crate::ShutdownPolicy::Drop): no callback
    /// ran. A cancelled operation may be watched again; its outcome is then
    /// that of its new stay. Also what a [`Completion`] resolves to when its
    /// operation is dropped without having been watched (say, after a
    /// watch refused with an error).
    Cancelled,
}

/// The operation has completed (set once, never cleared).
const COMPLETED: u8 = 1;
/// The operation was completed by its timeout.
const EXPIRED: u8 = 2;
/// The operation is claimed by a purgatory (watched, maybe armed).
const WATCHED: u8 = 4;
/// The operation's last stay was cancelled (cleared when it is claimed
/// again).
const CANCELLED: u8 = 8;
/// The completed operation's callbacks ran: its outcome shows.
const SETTLED: u8 = 16;
/// A waiter registered after the operation completed, before it settled.
const LATE: u8 = 32;
/// Both set: the operation is leaving (see [`OpState`]).
const LEAVING: u8 = WATCHED | CANCELLED;

impl Outcome {
    /// The outcome's name in lower case (`"completed"`, `"expired"`,
    /// `"cancelled"`), as its `Display` writes it: for a metric's label or
    /// a log line.
    ///
    /// ```
    /// use purgatory::Outcome;
    ///
    /// assert_eq!(Outcome::Expired.as_str(), "expired");
    /// assert_eq!(Outcome::Cancelled.to_string(), "cancelled");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Expired => "expired",
            Outcome::Cancelled => "cancelled",
        }
    }

    fn bits(self) -> u8 {
        match self {
            Outcome::Completed => COMPLETED,
            Outcome::Expired => COMPLETED | EXPIRED,
            Outcome::Cancelled => CANCELLED,
        }
    }

    fn from_bits(bits: u8) -> Option<Outcome> {
        if bits & EXPIRED != 0 {
            Some(Outcome::Expired)
        } else if bits & COMPLETED != 0 {
            Some(Outcome::Completed)
        } else if bits & CANCELLED != 0 {
            Some(Outcome::Cancelled)
        } else {
            None
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operation's state byte.
///
/// Invariants: `COMPLETED` is set once and never cleared, and only by a
/// winning [`decide`](Self::decide); `WATCHED` is set by
/// [`claim`](Self::claim) and cleared by the `decide` that ends the stay,
/// by [`unclaim`](Self::unclaim) (a watch that failed before attaching),
/// or, for a stay that its watch's key iterator cancelled before the watch
/// attached it ([`cancel_claimed`](Self::cancel_claimed)), by
/// [`left`](Self::left) once that watch has left the lists it joined.
/// Until then the operation is *leaving*: `WATCHED` and `CANCELLED` both
/// set, its outcome `Cancelled`, not pending, and neither decided again nor
/// claimed, so that no new stay begins while slots of that one are in
/// lists (a slot has no stay of its own: it shows its operation's).
/// An operation is claimed *before* it joins any watch list: a check that
/// finds it in a list (under the list's lock, which the watcher released
/// after claiming) therefore sees it watched, and waits for its lock
/// rather than skipping it. Claiming after joining would leave a window in
/// which a check skips an operation whose second try has not yet seen the
/// check's event (a lost wake-up; the loom model
/// `check_racing_the_two_tries_loses_no_wake_up` covers it).
/// Changes happen under the operation lock, but `decide` does not rely on
/// it: it is one compare-and-swap.
#[derive(Debug, Default)]
pub(crate) struct OpState(AtomicU8);

impl OpState {
    pub(crate) fn new() -> Self {
        OpState(AtomicU8::new(0))
    }

    fn load(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn is_completed(&self) -> bool {
        self.load() & COMPLETED != 0
    }

    pub(crate) fn is_expired(&self) -> bool {
        self.load() & EXPIRED != 0
    }

    pub(crate) fn is_watched(&self) -> bool {
        self.load() & WATCHED != 0
    }

    /// Watched, not completed and not leaving: a candidate for a check.
    pub(crate) fn is_pending(&self) -> bool {
        self.load() & (WATCHED | COMPLETED | CANCELLED) == WATCHED
    }

    /// Cancelled by its watch's key iterator, the watch not yet returned
    /// (see the invariants).
    pub(crate) fn is_leaving(&self) -> bool {
        self.load() & LEAVING == LEAVING
    }

    /// The outcome of the operation's last stay, if it has ended; for a
    /// completed operation, once its callbacks ran (settled).
    pub(crate) fn outcome(&self) -> Option<Outcome> {
        let s = self.load();
        if s & (COMPLETED | SETTLED) == COMPLETED {
            return None;
        }
        Outcome::from_bits(s)
    }

    /// The outcome decided for the last stay, settled or not.
    pub(crate) fn decided(&self) -> Option<Outcome> {
        Outcome::from_bits(self.load())
    }

    /// Marks a completed operation settled: its callbacks ran. Returns
    /// whether a waiter marked itself late before (see the module docs).
    pub(crate) fn settle(&self) -> bool {
        let was = self.0.fetch_or(SETTLED, Ordering::AcqRel);
        debug_assert!(was & COMPLETED != 0 && was & SETTLED == 0);
        was & LATE != 0
    }

    /// Marks a late waiter of a completed (or expired) operation, never a
    /// cancelled one; call it holding the links' lock. Returns whether the
    /// operation is still unsettled, so that the waiter must register (the
    /// settler then takes it).
    pub(crate) fn mark_late(&self) -> bool {
        self.0.fetch_or(LATE, Ordering::AcqRel) & SETTLED == 0
    }

    /// Marks the operation watched for a new stay (clearing a previous
    /// stay's `Cancelled`). Returns false, changing nothing, if it is
    /// completed or already watched.
    pub(crate) fn claim(&self) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & (COMPLETED | WATCHED) == 0).then_some((s & !CANCELLED) | WATCHED)
            })
            .is_ok()
    }

    /// Undoes a [`claim`](Self::claim) whose watch failed before the
    /// operation was tied to a purgatory (a key panicked), putting back
    /// the previous stay's `Cancelled` if it had one (`cancelled`): the
    /// operation is left as it was, its outcome and waiters included.
    /// Lock held.
    pub(crate) fn unclaim(&self, cancelled: bool) {
        let back = if cancelled { CANCELLED } else { 0 };
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some((s & !WATCHED) | back)
            });
    }

    /// Ends the operation's stay with `outcome`, if nobody has: `Completed`
    /// wins unless the operation has completed (a cancelled one, out of the
    /// purgatory, may still be completed by force) or is leaving; `Expired`
    /// and `Cancelled` only while it is watched, not completed and not
    /// leaving (a timeout or a cancel applies to a stay that goes on).
    /// Returns whether this call decided.
    pub(crate) fn decide(&self, outcome: Outcome) -> bool {
        self.decide_in(outcome).is_some()
    }

    /// [`decide`](Self::decide), returning, if this call decided, whether
    /// the operation was watched then (it ended a stay): read by the one
    /// read-modify-write, as a separate load would fetch the line shared
    /// from the core that last had it and upgrade it again.
    pub(crate) fn decide_in(&self, outcome: Outcome) -> Option<bool> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let open = match outcome {
                    Outcome::Completed => s & COMPLETED == 0 && s & LEAVING != LEAVING,
                    _ => s & (WATCHED | COMPLETED | CANCELLED) == WATCHED,
                };
                open.then_some((s & !(WATCHED | CANCELLED)) | outcome.bits())
            })
            .ok()
            .map(|s| s & WATCHED != 0)
    }

    /// Ends a claimed stay with `Cancelled` while keeping the claim: the
    /// operation is leaving (see the invariants) until [`left`](Self::left).
    /// For a stay no purgatory has attached yet, cancelled by its watch's
    /// key iterator. Returns whether this call decided. Lock held.
    pub(crate) fn cancel_claimed(&self) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & (WATCHED | COMPLETED | CANCELLED) == WATCHED).then_some(s | CANCELLED)
            })
            .is_ok()
    }

    /// Ends the claim of a leaving operation, whose watch has left the
    /// lists it joined: it may be watched again. Lock held.
    pub(crate) fn left(&self) {
        let was = self.0.fetch_and(!WATCHED, Ordering::AcqRel);
        debug_assert!(was & LEAVING == LEAVING, "not leaving");
    }
}

/// The waiters of one stay of an operation.
#[derive(Debug)]
pub(crate) struct Signal {
    /// `Outcome::bits()` once resolved, else 0.
    outcome: AtomicU8,
    wakers: Mutex<Wakers>,
}

/// A signal's waiters: one slot per waiting [`Completion`], reused once
/// freed; emptied (taken) when the signal resolves.
#[derive(Debug, Default)]
struct Wakers {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Signal {
    pub(crate) fn new() -> Self {
        Signal {
            outcome: AtomicU8::new(0),
            wakers: Mutex::new(Wakers::default()),
        }
    }

    fn get(&self) -> Option<Outcome> {
        Outcome::from_bits(self.outcome.load(Ordering::Acquire))
    }

    /// Whether the stay's waiters have been told its outcome.
    pub(crate) fn is_resolved(&self) -> bool {
        self.get().is_some()
    }

    /// Records `outcome` and wakes every waiter. Called once per signal.
    ///
    /// A waker is an executor's code: one that panics is logged, and the
    /// waiters after it are still woken (a panic reaching the caller would
    /// leave them asleep for good, as the list is already taken).
    pub(crate) fn resolve(&self, outcome: Outcome) {
        self.outcome.store(outcome.bits(), Ordering::Release);
        let wakers = std::mem::take(&mut *self.wakers.lock());
        for waker in wakers.slots.into_iter().flatten() {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(move || waker.wake())) {
                log::error!("purgatory: a waker panicked: {}", panic_message(&*panic));
                discard_panic(panic);
            }
        }
    }

    /// The outcome, or registers `waker` in the waiter's `slot` (taking
    /// one if it has none) to be woken when it is decided. The waker it
    /// replaces is dropped after the lock is released.
    pub(crate) fn poll(&self, waker: &Waker, slot: &mut Option<usize>) -> Poll<Outcome> {
        if let Some(outcome) = self.get() {
            return Poll::Ready(outcome);
        }
        let replaced = {
            let mut wakers = self.wakers.lock();
            if let Some(outcome) = self.get() {
                return Poll::Ready(outcome);
            }
            match *slot {
                Some(index) => match &mut wakers.slots[index] {
                    Some(kept) if kept.will_wake(waker) => None,
                    kept => kept.replace(waker.clone()),
                },
                None => {
                    let index = match wakers.free.pop() {
                        Some(index) => index,
                        None => {
                            wakers.slots.push(None);
                            wakers.slots.len() - 1
                        }
                    };
                    wakers.slots[index] = Some(waker.clone());
                    *slot = Some(index);
                    None
                }
            }
        };
        drop(replaced);
        Poll::Pending
    }

    /// Frees a waiter's slot (its `Completion` is going). Nothing to do
    /// once resolved: the list is gone.
    fn forget(&self, index: usize) {
        let waker = {
            let mut wakers = self.wakers.lock();
            let waker = wakers.slots.get_mut(index).and_then(Option::take);
            if waker.is_some() {
                wakers.free.push(index);
            }
            waker
        };
        drop(waker);
    }
}

/// A future resolving to the [`Outcome`] of an operation's stay in a
/// purgatory; see [`Operation::completion`](crate::Operation::completion).
///
/// Owned, `Send + 'static`, and cheap to clone; every clone resolves to the
/// same outcome. It works on any executor (it needs only the waker it is
/// polled with), and it does not keep the operation alive. As `Future`
/// asks, only the waker of its latest poll is woken (each clone keeps its
/// own); dropping it stops waiting.
#[derive(Debug)]
#[must_use = "a future does nothing unless polled"]
pub struct Completion {
    state: CompletionState,
}

#[derive(Debug)]
enum CompletionState {
    Ready(Outcome),
    Waiting {
        signal: Arc<Signal>,
        /// Its slot in the signal's list, once polled.
        slot: Option<usize>,
    },
}

impl Completion {
    pub(crate) fn ready(outcome: Outcome) -> Self {
        Completion {
            state: CompletionState::Ready(outcome),
        }
    }

    pub(crate) fn waiting(signal: Arc<Signal>) -> Self {
        Completion {
            state: CompletionState::Waiting { signal, slot: None },
        }
    }

    /// The signal of the stay it waits for, unless it was ready when made.
    pub(crate) fn signal(&self) -> Option<&Arc<Signal>> {
        match &self.state {
            CompletionState::Ready(_) => None,
            CompletionState::Waiting { signal, .. } => Some(signal),
        }
    }

    fn poll_with(&mut self, waker: &Waker) -> Poll<Outcome> {
        match &mut self.state {
            CompletionState::Ready(outcome) => Poll::Ready(*outcome),
            CompletionState::Waiting { signal, slot } => signal.poll(waker, slot),
        }
    }

    /// Blocks the calling thread until the operation has left, its outcome
    /// showing (the callbacks ran and the purgatory let go), or `timeout`
    /// passes (real time); `None` on timeout. Waits in a slot of its own,
    /// freed before it returns.
    pub(crate) fn wait_timeout(&self, timeout: Duration) -> Option<Outcome> {
        let signal = match &self.state {
            CompletionState::Ready(outcome) => return Some(*outcome),
            CompletionState::Waiting { signal, .. } => signal,
        };
        let mut waiting = Completion::waiting(signal.clone());
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Poll::Ready(outcome) = waiting.poll_with(&waker) {
                return Some(outcome);
            }
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    std::thread::park_timeout(left);
                }
            }
        }
    }
}

impl Clone for Completion {
    /// A copy that waits on its own: it has no slot until polled.
    fn clone(&self) -> Self {
        match &self.state {
            CompletionState::Ready(outcome) => Completion::ready(*outcome),
            CompletionState::Waiting { signal, .. } => Completion::waiting(signal.clone()),
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let CompletionState::Waiting {
            signal,
            slot: Some(index),
        } = &self.state
        {
            signal.forget(*index);
        }
    }
}

impl Future for Completion {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        self.get_mut().poll_with(cx.waker())
    }
}

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Default)]
    struct CountWakes(std::sync::atomic::AtomicUsize);

    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn held(signal: &Signal) -> usize {
        signal.wakers.lock().slots.iter().flatten().count()
    }

    #[test]
    fn a_completion_holds_only_the_waker_of_its_latest_poll() {
        let signal = Arc::new(Signal::new());
        let (a, b) = (
            Arc::new(CountWakes::default()),
            Arc::new(CountWakes::default()),
        );
        let mut c = Completion::waiting(signal.clone());
        assert_eq!(c.poll_with(&Waker::from(a.clone())), Poll::Pending);
        assert_eq!(c.poll_with(&Waker::from(b.clone())), Poll::Pending);
        assert_eq!(c.poll_with(&Waker::from(b.clone())), Poll::Pending);
        assert_eq!(held(&signal), 1);
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (1, 2));
        signal.resolve(Outcome::Completed);
        assert_eq!(a.0.load(Ordering::SeqCst), 0);
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        assert_eq!(
            c.poll_with(&Waker::from(a.clone())),
            Poll::Ready(Outcome::Completed)
        );
    }

    #[test]
    fn dropped_and_timed_out_waiters_leave_no_waker_behind() {
        let signal = Arc::new(Signal::new());
        let c = Completion::waiting(signal.clone());
        for _ in 0..1_000 {
            assert_eq!(c.wait_timeout(Duration::ZERO), None);
            let mut copy = c.clone();
            assert_eq!(copy.poll_with(&Waker::noop().clone()), Poll::Pending);
            assert_eq!(held(&signal), 1, "the copy's only");
        }
        assert_eq!(held(&signal), 0);
        assert!(signal.wakers.lock().slots.len() <= 2, "slots are reused");
        let dropped = Arc::new(CountWakes::default());
        let mut gone = c.clone();
        assert_eq!(gone.poll_with(&Waker::from(dropped.clone())), Poll::Pending);
        drop(gone);
        assert_eq!(Arc::strong_count(&dropped), 1);
        signal.resolve(Outcome::Expired);
        assert_eq!(dropped.0.load(Ordering::SeqCst), 0);
        assert_eq!(c.wait_timeout(Duration::ZERO), Some(Outcome::Expired));
    }

    /// A leaving operation shows `Cancelled`, and nothing decides or claims
    /// it until its watch has left; then it may be claimed, and only then.
    #[test]
    fn a_leaving_operation_is_neither_decided_nor_claimed_until_it_left() {
        let state = OpState::new();
        assert!(!state.cancel_claimed(), "not claimed");
        assert!(state.claim());
        assert!(state.cancel_claimed());
        assert!(!state.cancel_claimed(), "once");
        assert!(state.is_leaving() && state.is_watched() && !state.is_pending());
        assert_eq!(state.outcome(), Some(Outcome::Cancelled));
        for outcome in [Outcome::Completed, Outcome::Expired, Outcome::Cancelled] {
            assert!(!state.decide(outcome), "{outcome:?} decided");
        }
        assert!(!state.claim());
        state.left();
        assert!(!state.is_leaving() && !state.is_watched());
        assert_eq!(state.outcome(), Some(Outcome::Cancelled));
        assert!(state.claim(), "watched again");
        assert!(state.is_pending() && state.outcome().is_none());
    }
}

/// Models of the completion protocol, run by loom over every interleaving:
/// `RUSTFLAGS="--cfg loom" cargo test -p purgatory --release --lib loom_models`.
/// They drive the real [`OpState`] and [`Signal`] (through loom's atomics
/// and mutex, see `crate::sync`); the operation lock and a watch list are
/// modelled by plain mutexes.
#[cfg(all(test, loom))]
pub(crate) mod loom_models {
    use super::*;
    use crate::sync::AtomicBool;
    use crate::sync::AtomicUsize;
    use loom::sync::Notify;
    use loom::thread;

    /// Wakes a loom thread blocked in [`block_on`].
    struct Wakeup(Notify);

    impl Wake for Wakeup {
        fn wake(self: Arc<Self>) {
            self.0.notify();
        }
    }

    /// Polls `completion` until ready, blocking between polls: a wake-up
    /// that never comes is a deadlock, which loom reports.
    pub(crate) fn block_on(mut completion: Completion) -> Outcome {
        let wakeup = Arc::new(Wakeup(Notify::new()));
        let waker = Waker::from(wakeup.clone());
        loop {
            if let Poll::Ready(outcome) = completion.poll_with(&waker) {
                return outcome;
            }
            wakeup.0.wait();
        }
    }

    /// Decides `outcome` as a leaving path does: the winner resolves the
    /// waiters.
    fn leave(state: &OpState, signal: &Signal, wins: &AtomicUsize, outcome: Outcome) {
        if state.decide(outcome) {
            wins.fetch_add(1, Ordering::SeqCst);
            if outcome != Outcome::Cancelled {
                state.settle();
            }
            signal.resolve(outcome);
        }
    }

    /// A waiter asking while the operation completes, as
    /// `Operation::completion` does: the outcome if it shows, else a
    /// registration in the links (a mutex here), marked late if the
    /// operation is completed but not settled.
    fn ask(state: &OpState, links: &Mutex<Option<Arc<Signal>>>) -> Completion {
        if let Some(outcome) = state.outcome() {
            return Completion::ready(outcome);
        }
        let mut links = links.lock();
        if let Some(outcome) = state.outcome() {
            return Completion::ready(outcome);
        }
        if let Some(decided) = state.decided() {
            if !state.mark_late() {
                return Completion::ready(decided);
            }
        }
        Completion::waiting(links.get_or_insert_with(|| Arc::new(Signal::new())).clone())
    }

    /// A waiter asking at any point of a completion (before the decision,
    /// during the callbacks, after the settling) gets the outcome, and
    /// only once the callbacks ran; no wake-up is lost.
    #[test]
    fn a_waiter_asking_while_the_callbacks_run_waits_for_them() {
        loom::model(|| {
            let state = Arc::new(OpState::new());
            assert!(state.claim());
            let links = Arc::new(Mutex::new(None::<Arc<Signal>>));
            let ran = Arc::new(AtomicBool::new(false));
            let completer = {
                let (state, links, ran) = (state.clone(), links.clone(), ran.clone());
                thread::spawn(move || {
                    assert!(state.decide(Outcome::Completed));
                    // Unlink: the stay's signal leaves the links.
                    let early = links.lock().take();
                    ran.store(true, Ordering::Relaxed);
                    let late = if state.settle() {
                        links.lock().take()
                    } else {
                        None
                    };
                    for signal in [early, late].into_iter().flatten() {
                        signal.resolve(Outcome::Completed);
                    }
                })
            };
            let waiter = ask(&state, &links);
            assert_eq!(block_on(waiter), Outcome::Completed);
            assert!(
                ran.load(Ordering::Relaxed),
                "woken before the callbacks ran"
            );
            completer.join().unwrap();
        });
    }

    #[test]
    fn a_waiter_registering_as_the_outcome_is_decided_is_woken() {
        loom::model(|| {
            let signal = Arc::new(Signal::new());
            let waiter = Completion::waiting(signal.clone());
            let resolver = thread::spawn(move || signal.resolve(Outcome::Completed));
            assert_eq!(block_on(waiter), Outcome::Completed);
            resolver.join().unwrap();
        });
    }

    /// A claimed operation left by `mine` on this thread and by each of
    /// `others` on a thread of its own, with a waiter: returns its state,
    /// what the waiter got, and how many decided.
    fn race(mine: Outcome, others: &[Outcome]) -> (Arc<OpState>, Outcome, usize) {
        let state = Arc::new(OpState::new());
        assert!(state.claim());
        let signal = Arc::new(Signal::new());
        let wins = Arc::new(AtomicUsize::new(0));
        let waiter = Completion::waiting(signal.clone());
        let racers: Vec<_> = others
            .iter()
            .map(|&outcome| {
                let (state, signal, wins) = (state.clone(), signal.clone(), wins.clone());
                thread::spawn(move || leave(&state, &signal, &wins, outcome))
            })
            .collect();
        leave(&state, &signal, &wins, mine);
        let got = block_on(waiter);
        for racer in racers {
            racer.join().unwrap();
        }
        let wins = wins.load(Ordering::SeqCst);
        (state, got, wins)
    }

    /// Two keys' checks and the timeout race: exactly one decides (so one
    /// `on_complete`), and the waiter gets that one's outcome.
    #[test]
    fn two_checks_and_the_timeout_complete_exactly_once() {
        loom::model(|| {
            let (state, got, wins) =
                race(Outcome::Completed, &[Outcome::Completed, Outcome::Expired]);
            assert_eq!(wins, 1);
            assert_eq!(state.outcome(), Some(got));
            assert!(state.is_completed() && !state.is_watched());
        });
    }

    /// A cancel racing the expiry: one wins; the loser changes nothing.
    #[test]
    fn cancel_racing_expiry_decides_once() {
        loom::model(|| {
            let (state, got, wins) = race(Outcome::Cancelled, &[Outcome::Expired]);
            assert_eq!(wins, 1);
            assert_eq!(state.outcome(), Some(got));
            assert_eq!(state.is_completed(), got == Outcome::Expired);
            assert!(!state.is_watched());
        });
    }

    /// `try_complete_else_watch`'s two tries against a check of the key:
    /// the watcher tries, claims the operation, joins the list (under the
    /// list's lock) and tries again, all under the operation lock; the
    /// checker makes the condition hold, then looks at the list and, if it
    /// finds the operation pending, tries it under the operation lock.
    /// Whatever the interleaving, one of them completes it.
    #[test]
    fn check_racing_the_two_tries_loses_no_wake_up() {
        loom::model(|| {
            let op_lock = Arc::new(Mutex::new(()));
            let listed = Arc::new(Mutex::new(false));
            let ready = Arc::new(AtomicBool::new(false));
            let state = Arc::new(OpState::new());
            let checker = {
                let (op_lock, listed, ready, state) = (
                    op_lock.clone(),
                    listed.clone(),
                    ready.clone(),
                    state.clone(),
                );
                thread::spawn(move || {
                    ready.store(true, Ordering::Release);
                    let found = *listed.lock();
                    if found && state.is_pending() {
                        let _op = op_lock.lock();
                        if state.is_pending() && ready.load(Ordering::Acquire) {
                            state.decide(Outcome::Completed);
                        }
                    }
                })
            };
            {
                let _op = op_lock.lock();
                if ready.load(Ordering::Acquire) {
                    state.decide(Outcome::Completed);
                } else {
                    assert!(state.claim());
                    *listed.lock() = true;
                    if ready.load(Ordering::Acquire) {
                        state.decide(Outcome::Completed);
                    }
                }
            }
            checker.join().unwrap();
            assert!(state.is_completed(), "a lost wake-up");
        });
    }
}
