//! [`CancelOnDrop`]: an operation's completion that cancels the operation
//! when the awaiting side goes away first (see
//! [`Purgatory::cancel_on_drop`]).
//!
//! It holds the purgatory's home and the operation weakly. A guard
//! outliving its purgatory keeps none of it alive, and finds nothing to
//! cancel (the shutdown has already ended every stay). Nor does a guard
//! keep the operation alive (but while its `Drop` cancels): an operation
//! dropped outside a stay (its watch refused) resolves its waiters, this
//! one included. Cancelling goes
//! the way of [`Purgatory::cancel`]: under the operation's lock, only if
//! the operation is watched by that purgatory, and only in the stay whose
//! signal the guard waits on.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use crate::home::Home;
use crate::key_eq;
use crate::operation::{DelayedOperation, Operation, Shared};
use crate::outcome::{Completion, Outcome, Signal};
use crate::release::let_go;

#[cfg(doc)]
use crate::Purgatory;

/// A future resolving to the [`Outcome`] of an operation's stay, like
/// [`Completion`], that cancels the operation when dropped before it
/// resolved: what a request handler awaits, so that a client that went
/// away (its task aborted, or the other branch of a `select!` taken) does
/// not leave its request parked until the timeout. Made by
/// [`Purgatory::cancel_on_drop`].
///
/// Dropped unresolved, it cancels the operation as
/// [`Purgatory::cancel`] does (no callback runs, its waiters get
/// [`Outcome::Cancelled`]) if the operation is still watched by that
/// purgatory, in the stay it waits for; otherwise it does nothing. Once
/// that stay has ended (whether or not the future was polled since), or
/// after [`disarm`](Self::disarm), dropping it cancels nothing: not a
/// later stay of the operation watched again. Dropped inside the key
/// iterator of the watch that holds its operation, it cancels nothing, as
/// [`Purgatory::cancel`] does there (the watch goes on); dropped inside a
/// key's `Eq`, where no purgatory call may be made (see
/// [`WatchKey`](crate::WatchKey)), it cancels nothing either, and logs a
/// warning.
///
/// Owned and `Send + 'static` (for an operation that is), so it can be
/// moved into a spawned task. It holds the operation and the purgatory
/// weakly (the operation strongly only while its `Drop` cancels): it keeps
/// neither alive, so an operation never watched (its first watch refused
/// for want of keys or by a shutdown), once dropped, resolves it to
/// [`Outcome::Cancelled`].
///
/// ```
/// use std::time::Duration;
/// use purgatory::{DelayedOperation, Operation, Outcome, Purgatory};
///
/// struct Fetch;
/// impl DelayedOperation for Fetch {
///     fn timeout(&self) -> Duration { Duration::from_secs(30) }
///     fn try_complete(&self) -> bool { false }
///     fn on_complete(&self) {}
/// }
///
/// let purgatory = Purgatory::builder("fetch").reaper(false).build::<u32, Fetch>().unwrap();
/// let op = Operation::new(Fetch);
/// let done = purgatory.cancel_on_drop(&op);
/// purgatory.try_complete_else_watch(op.clone(), [1, 2]).unwrap();
/// // The handler's task is aborted while it awaits `done`.
/// drop(done);
/// assert_eq!(op.outcome(), Some(Outcome::Cancelled));
/// assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
/// ```
#[must_use = "dropping it at once cancels the operation"]
pub struct CancelOnDrop<Op: DelayedOperation> {
    done: Completion,
    /// What to cancel if dropped unresolved; `None` once resolved or
    /// disarmed.
    cancel: Option<Armed<Op>>,
}

/// A guard's purgatory and operation, both held weakly.
struct Armed<Op: DelayedOperation> {
    home: Weak<Home<Op>>,
    op: Weak<Shared<Op>>,
}

impl<Op: DelayedOperation> CancelOnDrop<Op> {
    pub(crate) fn new(home: &Arc<Home<Op>>, op: &Operation<Op>) -> Self {
        CancelOnDrop {
            done: op.completion(),
            cancel: Some(Armed {
                home: Arc::downgrade(home),
                op: Arc::downgrade(&op.0),
            }),
        }
    }

    /// The plain [`Completion`]: keeps waiting for the same outcome, but
    /// dropping it no longer cancels the operation.
    pub fn disarm(mut self) -> Completion {
        self.cancel = None;
        // `Completion` has a `Drop`, so it is moved out by a swap.
        std::mem::replace(&mut self.done, Completion::ready(Outcome::Cancelled))
    }
}

impl<Op: DelayedOperation> std::fmt::Debug for CancelOnDrop<Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelOnDrop")
            .field("done", &self.done)
            .field("armed", &self.cancel.is_some())
            .finish()
    }
}

impl<Op: DelayedOperation> Future for CancelOnDrop<Op> {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut this.done).poll(cx);
        if outcome.is_ready() {
            // Nothing left to cancel.
            this.cancel = None;
        }
        outcome
    }
}

impl<Op: DelayedOperation> Drop for CancelOnDrop<Op> {
    fn drop(&mut self) {
        let Some(Armed { home, op }) = self.cancel.take() else {
            return;
        };
        // Ready when made: the stay had already ended.
        let Some(signal) = self.done.signal() else {
            return;
        };
        let Some(home) = home.upgrade() else {
            return;
        };
        if key_eq::in_key_eq() {
            // A purgatory call from `Eq` would wait for the shard lock `Eq`
            // runs under, and a panic from a `Drop` may abort: the stay is
            // left to end its own way. The operation is not even taken
            // (the last handle's drop would run user code under that lock).
            if !signal.is_resolved() && op.strong_count() > 0 {
                log::warn!(
                    "purgatory {}: a CancelOnDrop dropped inside a key's `Eq` cancels \
                     nothing; a stay it waits for goes on (see `WatchKey`)",
                    home.name()
                );
            }
            return;
        }
        let Some(op) = op.upgrade() else {
            return;
        };
        let op = Operation(op);
        cancel(&home, &op, Some(signal), "dropping a CancelOnDrop");
        // Possibly the last handle, dropped the purgatory's way.
        let_go(op);
    }
}

/// Cancels `op` if it is watched by the purgatory of `home` (see
/// [`Purgatory::cancel`]), and, given a `stay`'s signal, only while that
/// stay lasts: a guard whose stay ended unobserved leaves the next alone.
/// `call` names the caller for the panic when a key's `Eq` made it.
pub(crate) fn cancel<Op: DelayedOperation>(
    home: &Arc<Home<Op>>,
    op: &Operation<Op>,
    stay: Option<&Arc<Signal>>,
    call: &str,
) -> bool {
    key_eq::not_from_key_eq(call);
    let released = {
        let _guard = op.0.lock();
        if stay.is_some_and(|signal| !op.has_signal(signal)) {
            return false;
        }
        op.0.cancel(home.addr())
    };
    let cancelled = released.is_some();
    if let Some(released) = released {
        let_go(released);
    }
    cancelled
}
