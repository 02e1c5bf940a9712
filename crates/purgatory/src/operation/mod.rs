//! Operation state: what the user implements ([`DelayedOperation`]), the
//! shared, reference-counted state kept for it ([`Shared`]) and the user's
//! handle to it ([`Operation`]).
//!
//! One allocation holds everything an operation needs: its state byte
//! ([`OpState`]), its lock (its own 8-byte one, or a shared one), the
//! user's value and its *links*: the purgatory it is watched in (as an
//! [`Owner`], the trait this module declares for what it needs from
//! there), its claim epoch, its timer handle, its slot in every watch list
//! it joined (the first three in place), and its waiters.
//!
//! # Invariants
//!
//! * Every state change happens with the operation's lock held: claiming it
//!   for a purgatory, completing it, expiring it, cancelling it. The lock is
//!   reentrant, so user callbacks may call back into the purgatory (or
//!   [`Operation::force_complete`]) on the same thread.
//! * `links.owner` is `Some` exactly while the operation is claimed, and
//!   then the purgatory holds one strong reference to the operation, kept
//!   as a count only (taken by [`Shared::attach`], given back by the
//!   unlinking in the `release` module): a pointer to the operation in its
//!   own allocation would say nothing the owner does not. Watch-list slots
//!   and the timer entry hold it weakly.
//! * `try_complete`, `on_complete` and `on_expiration` run only with the lock
//!   held, so they never run concurrently with each other for one operation.
//! * How an operation leaves is the `release` module's business.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use timer::TimerHandle;

use crate::members::Members;
use crate::oplock::{LockKind, LockWord, OpLock, OperationGuard, OperationLock};
use crate::outcome::{Completion, OpState, Outcome, Signal};
use crate::stats::Site;
use crate::sync::{AtomicU32, Ordering, RawLock};

mod links;

pub(crate) use links::{Links, LinksCell, LinksGuard};

/// What a delayed operation does: the condition it waits for and what it does
/// when it finishes.
///
/// The purgatory owns the completed flag: implementations only *answer*
/// whether they can complete ([`try_complete`](Self::try_complete)) and *react*
/// to completion ([`on_complete`](Self::on_complete),
/// [`on_expiration`](Self::on_expiration)).
///
/// Every method is called with the operation's lock held (see
/// [`Operation::with_lock`]); none of them is ever called while the purgatory
/// holds one of its own locks, so they may call back into the purgatory.
/// A panic in any of them is caught at the purgatory boundary and logged.
/// Waiters of the operation on other threads wait until `on_complete` (and
/// `on_expiration`) returned, so a callback must not block on a thread that
/// awaits this operation.
///
/// # Where operations are dropped
///
/// An operation's value is dropped with its last reference. The purgatory
/// holds one while the operation is watched and lets go of it when the
/// public call that completed or cancelled the operation returns (for an
/// expiry, on the timer's thread once the expiry has run; for a call made
/// from inside a callback, when the outermost purgatory call on that thread
/// returns), never while it holds one of its own locks or an operation
/// lock. So if the caller kept no handle, `Drop` runs then, on that thread,
/// unless another purgatory call holds a passing copy at that moment: a
/// check or [`cancel_for_key`](crate::Purgatory::cancel_for_key) of another
/// of its keys (which copies that key's list, a check up to 64 operations
/// at a time, and lets go of each copy once it has handled that operation),
/// a shutdown (likewise, for every list), or its expiry firing then (which
/// waits for its lock). `Drop` then runs when that call lets go, on its
/// thread, also never under a lock; the operation's waiters may have been
/// woken before.
/// The caller may hold its own locks (Kafka calls `tryCompleteElseWatch`
/// under the group lock), so a `Drop` implementation must not block, must
/// not take locks that callers of the purgatory may hold, and must not call
/// `advance_clock` or `shutdown`. A panic in `Drop` is caught and logged
/// when the purgatory lets go of an operation.
///
/// Lock order is the caller's business, as in Kafka: a callback that calls
/// [`Purgatory::check_and_complete`](crate::Purgatory::check_and_complete)
/// locks other operations while holding its own, so two such callbacks on
/// two threads, each checking a key the other's operation is watched under,
/// can deadlock. Operations that must complete each other should share one
/// [`OperationLock`] (Kafka's group lock), or defer the check until the
/// callback has returned (Kafka's action queue).
pub trait DelayedOperation: Send + Sync + 'static {
    /// The operation's timeout, read once when it is watched (under the
    /// operation lock). Saturating: `Duration::MAX` never expires. A panic
    /// here is caught and counts as a zero timeout (the operation expires at
    /// once rather than being lost).
    fn timeout(&self) -> Duration;

    /// Whether the operation can complete now. Called with the operation's
    /// lock held, never concurrently with itself or with `on_complete`.
    /// Return `true` to complete it: the purgatory owns the completed flag,
    /// so there is no need to complete from inside. One that does (Kafka's
    /// `tryComplete` calls `forceComplete()`) has completed in the call
    /// that tried it, whatever it returns; one that cancels the operation
    /// (and perhaps watches it again) leaves it so, whatever it returns. A
    /// panic counts as `false`.
    fn try_complete(&self) -> bool;

    /// Runs exactly once, however the operation finishes (condition met,
    /// forced, or timed out). By then it has left every watch list and its
    /// timer is disarmed, but for one completed by its own watch's key
    /// iterator (see
    /// [`Purgatory::try_complete_else_watch`](crate::Purgatory::try_complete_else_watch)):
    /// that watch leaves the lists it joined, before it returns.
    fn on_complete(&self);

    /// Runs after `on_complete` when (and only when) the timeout completed
    /// the operation. It runs even if `on_complete` panicked.
    fn on_expiration(&self) {}
}

/// A boxed operation is one, so that one purgatory can hold operations of
/// several types (Kafka's rebalance purgatory holds joins and syncs) as
/// `Box<dyn DelayedOperation>`; an enum of the types does the same without
/// the allocation.
///
/// ```
/// use std::time::Duration;
/// use purgatory::{DelayedOperation, Purgatory};
///
/// struct JoinGroup;
/// impl DelayedOperation for JoinGroup {
///     fn timeout(&self) -> Duration { Duration::from_secs(5) }
///     fn try_complete(&self) -> bool { false }
///     fn on_complete(&self) {}
/// }
/// struct SyncGroup;
/// impl DelayedOperation for SyncGroup {
///     fn timeout(&self) -> Duration { Duration::from_secs(5) }
///     fn try_complete(&self) -> bool { true }
///     fn on_complete(&self) {}
/// }
///
/// let rebalance = Purgatory::builder("Rebalance")
///     .reaper(false)
///     .build::<&str, Box<dyn DelayedOperation>>()
///     .unwrap();
/// assert_eq!(rebalance.try_complete_else_watch(Box::new(JoinGroup) as Box<dyn DelayedOperation>, ["g"]), Ok(false));
/// assert_eq!(rebalance.try_complete_else_watch(Box::new(SyncGroup) as Box<dyn DelayedOperation>, ["g"]), Ok(true));
/// assert_eq!(rebalance.watched(), 1);
/// ```
impl<T: DelayedOperation + ?Sized> DelayedOperation for Box<T> {
    fn timeout(&self) -> Duration {
        (**self).timeout()
    }

    fn try_complete(&self) -> bool {
        (**self).try_complete()
    }

    fn on_complete(&self) {
        (**self).on_complete()
    }

    fn on_expiration(&self) {
        (**self).on_expiration()
    }
}

/// The purgatory an operation is watched in, behind one more pointer so
/// that each operation holds a thin one (8 bytes, not 16): the purgatory
/// makes it once and every watched operation shares it.
pub(crate) type OwnerRef<Op> = Arc<Arc<dyn Owner<Op>>>;

/// What an operation needs from the purgatory it is watched in. Declared
/// here, implemented by the purgatory (the `home` module), so that this module
/// never names it.
pub(crate) trait Owner<Op: DelayedOperation>: Send + Sync {
    /// On whose behalf the operation's callbacks run: the purgatory's
    /// name, for logs, and its count of callbacks that panicked.
    fn site(&self) -> &Site;

    /// `op` has left with `outcome` (operation lock held): count it out
    /// (`members.len()` watch-list entries, and one armed timer if
    /// `armed`), and free its slots and its timer entry `timer` (if any):
    /// in a batch, or at once if it was cancelled (it may be watched again
    /// once its lock is released). Runs no user code but the `Drop` of keys
    /// whose lists empty.
    fn left(
        &self,
        op: &Arc<Shared<Op>>,
        members: Members,
        timer: Option<TimerHandle>,
        armed: bool,
        outcome: Outcome,
    );
}

/// The state shared by every [`Operation`] handle, every watch-list entry and
/// the timer entry of one operation.
///
/// Laid out in this order (`repr(C)`) so that what a `check_and_complete`
/// scan touches for every watched operation, the reference counts (just
/// before), the state, the lock and the start of the user's value, shares as
/// few cache lines as possible; the links come last. The state byte's word
/// also holds what would otherwise cost a word each (see `layout_tests`):
/// the links' lock byte, the kind of the operation's lock and the claim
/// epoch.
#[repr(C)]
pub(crate) struct Shared<Op: DelayedOperation> {
    pub(crate) state: OpState,
    /// Guards `links` (see [`links`](Self::links)).
    links_lock: RawLock,
    /// Which lock `lock` holds; never changes.
    lock_kind: LockKind,
    /// Bumped each time the operation is claimed, before it joins any
    /// list: it names the stay, so that an expiry task armed for an earlier
    /// one (cancelled, then watched again) does nothing, nor does a check or
    /// `cancel_for_key` that found the operation in a list of an earlier
    /// one. Part of the links in all but storage: written only with the
    /// operation lock and the links' lock held, read under either (so
    /// `Relaxed` suffices: the lock orders it), or where a list shows a
    /// slot of the stay (see [`stay`](Self::stay)).
    epoch: AtomicU32,
    lock: LockWord,
    op: Op,
    links: LinksCell<Op>,
}

impl<Op: DelayedOperation> Shared<Op> {
    /// `op` with its own lock (`None`) or `shared`. The lock's word and
    /// its kind are made together here and never change, which is what
    /// reading the word ([`oplock`](Self::oplock)) and releasing it (the
    /// `Drop`) rely on.
    fn new(op: Op, shared: Option<OperationLock>) -> Self {
        let (lock_kind, lock) = LockWord::new(shared);
        Shared {
            state: OpState::new(),
            links_lock: RawLock::new(),
            lock_kind,
            epoch: AtomicU32::new(0),
            lock,
            op,
            links: LinksCell::new(Links::empty()),
        }
    }

    /// The operation's links, their lock held until the guard is dropped.
    /// Never held while taking the operation's lock, or while calling user
    /// code.
    #[allow(unsafe_code)]
    #[inline]
    pub(crate) fn links(&self) -> LinksGuard<'_, Op> {
        // SAFETY: `links_lock` is this operation's links' lock, and this is
        // the only place that locks either.
        unsafe { self.links.lock(&self.links_lock) }
    }

    /// The operation's lock, read with its kind.
    #[allow(unsafe_code)]
    #[inline]
    fn oplock(&self) -> OpLock<'_> {
        // SAFETY: `lock` and `lock_kind` were made together (`new`) and
        // never change.
        unsafe { self.lock.get(self.lock_kind) }
    }

    pub(crate) fn op(&self) -> &Op {
        &self.op
    }

    /// The current claim's epoch. Read it under the links' lock (`_links`
    /// proves it), together with the owner it goes with.
    pub(crate) fn epoch(&self, _links: &Links<Op>) -> u32 {
        self.epoch.load(Ordering::Relaxed)
    }

    pub(crate) fn lock(&self) -> OperationGuard<'_> {
        self.oplock().lock()
    }

    /// Whether this thread holds the operation's lock.
    pub(crate) fn is_locked_here(&self) -> bool {
        self.oplock().is_held_by_current_thread()
    }

    pub(crate) fn is_completed(&self) -> bool {
        self.state.is_completed()
    }

    /// Whether the operation is claimed by a watch (also while leaving,
    /// see [`OpState`]).
    pub(crate) fn is_watched(&self) -> bool {
        self.state.is_watched()
    }

    /// Whether the operation is watched and not completed (nor leaving, see
    /// [`OpState`]): a candidate for `check_and_complete`. Lock-free;
    /// re-checked under the lock.
    pub(crate) fn is_pending(&self) -> bool {
        self.state.is_pending()
    }

    /// Marks the operation watched for a new stay and bumps its epoch
    /// (see [`OpState::claim`]). Returns false, changing nothing, if it is
    /// completed or already watched. Lock held.
    pub(crate) fn claim(&self) -> bool {
        if !self.state.claim() {
            return false;
        }
        let links = self.links();
        self.epoch
            .store(self.epoch(&links).wrapping_add(1), Ordering::Relaxed);
        true
    }

    /// The epoch of the operation's stay, read without the links' lock
    /// where it cannot change: with the operation lock held (a claim takes
    /// it), or under the lock of a watch-list shard showing a slot of the
    /// operation. A stay puts its slots in after its claim, under that
    /// lock, and a cancelled one frees them before its lock is released,
    /// under that lock too (see the retire module), so a slot seen there is
    /// of the current stay, or of a completed one, never claimed again. (A
    /// claim undone before any list kept a slot, see `OpState::unclaim`,
    /// leaves its epoch unused: epochs only need to differ.)
    pub(crate) fn stay(&self) -> u32 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// Whether the operation is currently claimed by `owner` (compared by
    /// address). Lock held.
    pub(crate) fn is_claimed_by(&self, owner: *const ()) -> bool {
        self.is_watched()
            && self
                .links()
                .owner
                .as_ref()
                .is_some_and(|o| std::ptr::addr_eq(Arc::as_ptr(&**o), owner))
    }

    /// Ties the operation, already claimed ([`claim`](Self::claim), before
    /// it joined any list), to `owner` with its watch-list memberships, and
    /// takes the purgatory's strong reference. Lock held. Returns the
    /// claim's epoch.
    pub(crate) fn attach(self: &Arc<Self>, owner: OwnerRef<Op>, members: Members) -> u32 {
        let mut links = self.links();
        debug_assert!(links.owner.is_none() && links.members.is_empty());
        debug_assert!(self.is_watched() && !self.is_completed());
        links.owner = Some(owner);
        let epoch = self.epoch(&links);
        let (placed, more) = members.split();
        links.members = placed;
        if more.capacity() > 0 {
            links.side.get_or_insert_with(Box::default).more = more;
        }
        // The purgatory's reference, a count only while `owner` is set;
        // `detach` turns it back into an `Arc`.
        let _ = Arc::into_raw(Arc::clone(self));
        // The signal, if any, was made while the operation was not
        // watched: its waiters wait for this stay.
        epoch
    }

    /// Empties the operation's links in one hold of their lock and unties
    /// it from its owner, if it has one: returns the owner with the strong
    /// reference [`attach`](Self::attach) took with it, and the rest of the
    /// links (their `owner` empty). Lock held.
    #[allow(unsafe_code, clippy::type_complexity)]
    pub(crate) fn detach(self: &Arc<Self>) -> (Option<(OwnerRef<Op>, Arc<Self>)>, Links<Op>) {
        let mut links = std::mem::replace(&mut *self.links(), Links::empty());
        let Some(owner) = links.owner.take() else {
            return (None, links);
        };
        // SAFETY: these are this operation's own links. `attach` turned one
        // strong reference to this operation into a raw pointer (the same
        // pointer as `as_ptr`) when it set their owner, and the owner is set
        // only there and taken out only here: the count this turns back
        // into an `Arc` is that one, and it is turned back once.
        let kept = unsafe { Arc::from_raw(Arc::as_ptr(self)) };
        (Some((owner, kept)), links)
    }
}

impl<Op: DelayedOperation> Drop for Shared<Op> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: made with `lock_kind` (`new`); the operation is going.
        // Released first, so that a failed assertion below does not leak a
        // shared lock's reference.
        unsafe { self.lock.release(self.lock_kind) }
        let signal = {
            let mut links = self.links();
            // An owner still set would mean the owner's reference was given
            // back twice (or never taken): the count is wrong.
            debug_assert!(links.owner.is_none(), "dropped while owned");
            // Waiters still here wait for a stay that never began (never
            // watched, or its watch refused): it ends now, with no callback
            // run, and nobody else is left to tell them.
            links.side.as_mut().and_then(|side| side.signal.take())
        };
        if let Some(signal) = signal {
            signal.resolve(Outcome::Cancelled);
        }
    }
}

/// A shareable handle to a delayed operation and its completion state.
///
/// Cloning is cheap (an `Arc`); every clone refers to the same operation.
/// Derefs to the user's operation. Create one with [`Operation::new`] (or
/// `op.into()`), keep a clone if you want to look at or force-complete the
/// operation later, and hand it to
/// [`Purgatory::try_complete_else_watch`](crate::Purgatory::try_complete_else_watch).
///
/// An operation is watched by at most one purgatory at a time, completes at
/// most once, and once completed is never watched again.
pub struct Operation<Op: DelayedOperation>(pub(crate) Arc<Shared<Op>>);

impl<Op: DelayedOperation> Operation<Op> {
    /// Wraps `op` with its own reentrant lock.
    pub fn new(op: Op) -> Self {
        Operation(Arc::new(Shared::new(op, None)))
    }

    /// Wraps `op` with a caller-supplied lock, which may be shared by several
    /// operations (Kafka's group lock): their callbacks then never run
    /// concurrently with each other or with code holding the lock on
    /// another thread (the lock is reentrant; see [`lock`](Self::lock)).
    pub fn with_lock(op: Op, lock: OperationLock) -> Self {
        Operation(Arc::new(Shared::new(op, Some(lock))))
    }

    /// Whether the operation has completed (by its condition, by force or by
    /// its timeout).
    pub fn is_completed(&self) -> bool {
        self.0.is_completed()
    }

    /// Whether the operation was completed by its timeout.
    pub fn is_expired(&self) -> bool {
        self.0.state.is_expired()
    }

    /// Whether the operation is currently watched by a purgatory. (`false`
    /// too for one the key iterator of its watch cancelled, though until
    /// that watch returns it is neither watched again nor forced.)
    pub fn is_watched(&self) -> bool {
        self.0.is_watched() && !self.0.state.is_leaving()
    }

    /// How the operation's last stay in a purgatory ended, or `None` while
    /// it has not ended (or never began). Lock-free.
    ///
    /// A completion or an expiry shows once `on_complete` (and
    /// `on_expiration`) ran, so whoever reads `Completed` also sees what
    /// `on_complete` did; while they run on another thread this is `None`,
    /// though [`is_completed`](Self::is_completed) is already `true`
    /// (Kafka's `isCompleted`, which a completing call sets first).
    pub fn outcome(&self) -> Option<Outcome> {
        self.0.state.outcome()
    }

    /// A future resolving to the [`Outcome`] of the operation's stay: when
    /// it leaves the purgatory by any way (a check, a force, its timeout,
    /// [`cancel_for_key`](crate::Purgatory::cancel_for_key),
    /// [`Purgatory::cancel`](crate::Purgatory::cancel), a shutdown under
    /// either policy). Ready at once if it has already left (and not been
    /// watched again). Take it once the watch is accepted: taken between
    /// two stays of an operation cancelled and watched again, it is ready
    /// at once with the first stay's `Cancelled`, not the second's outcome.
    ///
    /// The future is owned (`Send + 'static`, it does not borrow or keep
    /// the operation) and works on any executor; clone it to await it in
    /// several places. It resolves after `on_complete` (and
    /// `on_expiration`) ran, also when taken while they run on another
    /// thread: waiters are woken once the call that finished the operation
    /// has released its locks and the purgatory's reference (so an
    /// operation nobody else holds has been dropped by then, unless another
    /// call holds a passing copy; see [`DelayedOperation`] on where
    /// operations are dropped). Taken on the
    /// thread running the callbacks (from inside them), it is ready at
    /// once. The first call allocates the operation's list of waiters; an
    /// operation nobody awaits pays nothing.
    ///
    /// Outside a stay (never watched, or its watch refused with an error),
    /// it resolves to [`Outcome::Completed`] when the operation is
    /// [forced](Self::force_complete), and to [`Outcome::Cancelled`] when
    /// it is dropped: it can no longer be watched, and no callback ran.
    ///
    /// To cancel the operation when the waiting side goes away (a request
    /// handler's task aborted), await
    /// [`Purgatory::cancel_on_drop`](crate::Purgatory::cancel_on_drop)
    /// instead.
    pub fn completion(&self) -> Completion {
        if let Some(outcome) = self.outcome() {
            return Completion::ready(outcome);
        }
        let mut links = self.0.links();
        // Re-read under the links' lock: whoever decides the outcome takes
        // the signal out under it afterwards, and whoever settles it takes
        // a late waiter's (see `crate::outcome`).
        if let Some(outcome) = self.outcome() {
            return Completion::ready(outcome);
        }
        if let Some(decided @ (Outcome::Completed | Outcome::Expired)) = self.0.state.decided() {
            // Completed, its callbacks running. On this thread (the lock is
            // held here only by them, or by code they called): ready, as
            // waiting would wait for itself.
            if self.0.is_locked_here() || !self.0.state.mark_late() {
                return Completion::ready(decided);
            }
        }
        let side = links.side.get_or_insert_with(Box::default);
        let signal = side.signal.get_or_insert_with(|| Arc::new(Signal::new()));
        Completion::waiting(signal.clone())
    }

    /// Whether `signal` belongs to the operation's current stay (or, before
    /// the first watch, to the first): a stay that ends takes its signal
    /// out of the links, under the operation lock, which the caller holds
    /// so that the answer stays true.
    pub(crate) fn has_signal(&self, signal: &Arc<Signal>) -> bool {
        debug_assert!(self.0.is_locked_here());
        let links = self.0.links();
        let current = links.side.as_ref().and_then(|side| side.signal.as_ref());
        current.is_some_and(|current| Arc::ptr_eq(current, signal))
    }

    /// Blocks the calling thread until the operation leaves the purgatory
    /// (see [`completion`](Self::completion)) or `timeout` passes, whichever
    /// is first; returns the outcome, or `None` on timeout. On a thread
    /// holding the operation's lock (inside any of its methods, such as
    /// `try_complete` or `on_complete`, or under [`lock`](Self::lock)) it
    /// does not wait: only that thread could decide the outcome meanwhile.
    /// It returns the outcome if decided, `None` if not.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Outcome> {
        if let Some(outcome) = self.outcome() {
            return Some(outcome);
        }
        if self.0.is_locked_here() && self.0.state.decided().is_none() {
            return None;
        }
        // Locked here and decided: its callbacks run on this thread, and
        // `completion` is ready at once.
        self.completion().wait_timeout(timeout)
    }

    /// Locks the operation (its own lock or the shared one), blocking until
    /// it is free. While the guard lives, none of the operation's callbacks
    /// run on another thread.
    ///
    /// The lock is held by a thread, and it is reentrant: code on the same
    /// thread passes it. Async tasks sharing a thread (a current-thread
    /// runtime, a `LocalSet`) therefore share it too, so do not hold the
    /// guard across an `.await` (it is not `Send`, so a multi-threaded
    /// runtime refuses to spawn such a task).
    ///
    /// # Panics
    /// The lock is reentrant up to 65,535 guards held at once on one thread
    /// for an operation's own lock: taking one more panics, before anything
    /// changes.
    pub fn lock(&self) -> OperationGuard<'_> {
        self.0.lock()
    }

    /// Whether the current thread holds the operation's lock.
    pub fn is_locked_by_current_thread(&self) -> bool {
        self.0.is_locked_here()
    }

    /// Whether two handles refer to the same operation.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<Op: DelayedOperation> Clone for Operation<Op> {
    fn clone(&self) -> Self {
        Operation(self.0.clone())
    }
}

impl<Op: DelayedOperation> Deref for Operation<Op> {
    type Target = Op;
    fn deref(&self) -> &Op {
        self.0.op()
    }
}

impl<Op: DelayedOperation> From<Op> for Operation<Op> {
    fn from(op: Op) -> Self {
        Operation::new(op)
    }
}

impl<Op: DelayedOperation + fmt::Debug> fmt::Debug for Operation<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Operation")
            .field("op", self.0.op())
            .field("completed", &self.is_completed())
            .field("expired", &self.is_expired())
            .field("watched", &self.is_watched())
            .field("outcome", &self.outcome())
            .finish()
    }
}

/// An operation that waits for nothing and does nothing, for the tests
/// and loom models of this module, `links` and `release`.
#[cfg(test)]
pub(crate) struct Idle;

#[cfg(test)]
impl DelayedOperation for Idle {
    fn timeout(&self) -> Duration {
        Duration::MAX
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {}
}

/// An owner that does nothing when an operation leaves, for the same tests.
#[cfg(test)]
pub(crate) struct NoOwner(Site);

#[cfg(test)]
impl NoOwner {
    pub(crate) fn new() -> Self {
        NoOwner(Site::new("test".into()))
    }
}

#[cfg(test)]
impl<Op: DelayedOperation> Owner<Op> for NoOwner {
    fn site(&self) -> &Site {
        &self.0
    }
    fn left(&self, _: &Arc<Shared<Op>>, _: Members, _: Option<TimerHandle>, _: bool, _: Outcome) {}
}

#[cfg(test)]
mod layout_tests;
