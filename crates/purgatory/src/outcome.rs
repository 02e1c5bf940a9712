//! How an operation ended, and how whoever holds it learns that.
//!
//! Two small protocols, both built on [`crate::sync`] only, so that the loom
//! tests check them as the purgatory runs them:
//!
//! * [`OpState`], the operation's state byte: whether it is watched, and the
//!   [`Outcome`] of its last stay. [`OpState::decide`] is a single
//!   compare-and-swap, so whichever of several threads (a check on each of
//!   its keys, the timeout, a force, a cancel) decides first wins, and
//!   exactly one does: that one runs `on_complete`.
//! * [`Signal`], the waiters of one stay: an outcome cell and a list of
//!   wakers behind a mutex. [`Signal::resolve`] stores the outcome and then
//!   takes the list; [`Signal::poll`] takes the list's lock and then reads
//!   the outcome. So a waiter either reads the outcome or is in the list the
//!   resolver wakes: no wake-up is lost. An operation allocates a signal
//!   only when someone asks for its [`Completion`]; nobody awaiting costs
//!   one empty pointer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::sync::{AtomicU8, Mutex, Ordering};

/// How an operation left the purgatory (see the crate docs, "The life of
/// an operation").
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
    /// that of its new stay.
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

impl Outcome {
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

/// An operation's state byte.
///
/// Invariants: `COMPLETED` is set once and never cleared, and only by a
/// winning [`decide`](Self::decide); `WATCHED` is set by
/// [`claim`](Self::claim) and cleared by the `decide` that ends the stay.
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

    /// Watched and not completed: a candidate for a check.
    pub(crate) fn is_pending(&self) -> bool {
        self.load() & (WATCHED | COMPLETED) == WATCHED
    }

    /// The outcome of the operation's last stay, if it has ended.
    pub(crate) fn outcome(&self) -> Option<Outcome> {
        Outcome::from_bits(self.load())
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

    /// Ends the operation's stay with `outcome`, if nobody has: `Completed`
    /// and `Expired` win unless the operation has completed (a cancelled
    /// one, out of the purgatory, may still be completed by force),
    /// `Cancelled` only while it is watched and not completed. Returns
    /// whether this call decided.
    pub(crate) fn decide(&self, outcome: Outcome) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let open = match outcome {
                    Outcome::Cancelled => s & (WATCHED | COMPLETED) == WATCHED,
                    _ => s & COMPLETED == 0,
                };
                open.then_some((s & !(WATCHED | CANCELLED)) | outcome.bits())
            })
            .is_ok()
    }
}

/// The waiters of one stay of an operation.
#[derive(Debug)]
pub(crate) struct Signal {
    /// `Outcome::bits()` once resolved, else 0.
    outcome: AtomicU8,
    wakers: Mutex<Vec<Waker>>,
}

impl Signal {
    pub(crate) fn new() -> Self {
        Signal {
            outcome: AtomicU8::new(0),
            wakers: Mutex::new(Vec::new()),
        }
    }

    fn get(&self) -> Option<Outcome> {
        Outcome::from_bits(self.outcome.load(Ordering::Acquire))
    }

    /// Records `outcome` and wakes every waiter. Called once per signal.
    pub(crate) fn resolve(&self, outcome: Outcome) {
        self.outcome.store(outcome.bits(), Ordering::Release);
        let wakers = std::mem::take(&mut *self.wakers.lock());
        for waker in wakers {
            waker.wake();
        }
    }

    /// The outcome, or registers `waker` to be woken when it is decided.
    pub(crate) fn poll(&self, waker: &Waker) -> Poll<Outcome> {
        if let Some(outcome) = self.get() {
            return Poll::Ready(outcome);
        }
        let mut wakers = self.wakers.lock();
        if let Some(outcome) = self.get() {
            return Poll::Ready(outcome);
        }
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
        Poll::Pending
    }
}

/// A future resolving to the [`Outcome`] of an operation's stay in a
/// purgatory; see [`Operation::completion`](crate::Operation::completion).
///
/// Owned, `Send + 'static`, and cheap to clone; every clone resolves to the
/// same outcome. It works on any executor (it needs only the waker it is
/// polled with), and it does not keep the operation alive.
#[derive(Debug, Clone)]
#[must_use = "a future does nothing unless polled"]
pub struct Completion {
    state: CompletionState,
}

#[derive(Debug, Clone)]
enum CompletionState {
    Ready(Outcome),
    Waiting(Arc<Signal>),
}

impl Completion {
    pub(crate) fn ready(outcome: Outcome) -> Self {
        Completion {
            state: CompletionState::Ready(outcome),
        }
    }

    pub(crate) fn waiting(signal: Arc<Signal>) -> Self {
        Completion {
            state: CompletionState::Waiting(signal),
        }
    }

    fn poll_with(&self, waker: &Waker) -> Poll<Outcome> {
        match &self.state {
            CompletionState::Ready(outcome) => Poll::Ready(*outcome),
            CompletionState::Waiting(signal) => signal.poll(waker),
        }
    }

    /// Blocks the calling thread until the outcome is decided or `timeout`
    /// passes (real time); `None` on timeout.
    pub(crate) fn wait_timeout(&self, timeout: Duration) -> Option<Outcome> {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Poll::Ready(outcome) = self.poll_with(&waker) {
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

impl Future for Completion {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        self.poll_with(cx.waker())
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
