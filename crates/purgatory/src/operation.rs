//! Operation state: what the user implements ([`DelayedOperation`]) and the
//! shared, reference-counted state the purgatory keeps for it
//! ([`Operation`]).
//!
//! One allocation holds everything an operation needs: the user's value, its
//! completion flags, its lock (unless a shared one is supplied) and its
//! *links* — the purgatory it is watched in, its timer handle and its slot in
//! every watch list it joined (inline for up to four keys).
//!
//! # Invariants
//!
//! * Every state change happens with the operation's lock held: claiming it
//!   for a purgatory, completing it, expiring it, cancelling it. The lock is
//!   reentrant, so user callbacks may call back into the purgatory (or
//!   [`Operation::force_complete`]) on the same thread.
//! * `COMPLETED` is set once and never cleared. The thread that sets it (in
//!   [`Shared::finish`]) is the only one to run `on_complete`, so it runs
//!   exactly once; `on_expiration` runs right after it, on the same thread,
//!   only when the timeout completed the operation.
//! * `try_complete`, `on_complete` and `on_expiration` run only with the lock
//!   held, so they never run concurrently with each other for one operation.
//! * Completing or cancelling an operation *releases* it before any callback
//!   runs: it is no longer watched, the purgatory's counters drop, and its
//!   watch-list slots and timer entry are retired, freed in batches of
//!   [`RETIRE_BATCH`](crate::retire::RETIRE_BATCH) per thread (see
//!   [`crate::retire`]): so few completed operations linger, a bounded
//!   number whatever the load.
//! * No purgatory lock (shard or list) is ever held while a user callback
//!   runs; callbacks are called through [`guarded`], which catches panics so
//!   they cannot unwind through the purgatory.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, ReentrantMutex, ReentrantMutexGuard};
use timer::{TimerHandle, TimerTask};

use crate::home::Home;
use crate::retire::Retired;
use crate::watch::Members;

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
///
/// # Where operations are dropped
///
/// An operation's value is dropped with its last reference, and the
/// purgatory holds references for a while after completion (see
/// [`Purgatory::purge`](crate::Purgatory::purge)). So `Drop` runs on any
/// thread, often inside a later purgatory call: a
/// [`try_complete_else_watch`](crate::Purgatory::try_complete_else_watch)
/// (which drops up to two completed operations, under any key), a
/// `check_and_complete`, a `force_complete` or an expiry (when the queue of
/// completed operations is full: the completing call drops them once it has
/// released the operation's lock), `cancel_for_key`, `purge`,
/// `advance_clock` or shutdown. The purgatory never drops an operation
/// while it holds an operation lock or one of its own locks: what would be
/// dropped meanwhile waits until its outermost lock is released. The caller
/// may hold its own, though (Kafka calls `tryCompleteElseWatch` under the
/// group lock, and callbacks run under their operation's lock), and an
/// operation whose last handle a callback passes to a purgatory call is
/// dropped in that call. So a `Drop` implementation must not block, must
/// not take locks that callers of the purgatory may hold, and must not call
/// `advance_clock` or `shutdown`. A panic in `Drop` is caught and logged
/// when the purgatory drops a completed operation from its queue; elsewhere
/// it unwinds as any panic in `Drop` does.
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
    /// Return `true` to complete it (the purgatory owns the completed flag; do
    /// not complete from inside). A panic counts as `false`.
    fn try_complete(&self) -> bool;

    /// Runs exactly once, however the operation finishes (condition met,
    /// forced, or timed out). By then it has left every watch list and its
    /// timer is disarmed.
    fn on_complete(&self);

    /// Runs after `on_complete` when (and only when) the timeout completed
    /// the operation. It runs even if `on_complete` panicked.
    fn on_expiration(&self) {}
}

/// A reentrant lock shareable by several operations (Kafka uses the group
/// lock for a group's heartbeat, join and sync operations).
///
/// Create one with [`new_operation_lock`] and pass it to
/// [`Operation::with_lock`]. It must be reentrant: code holding it may call
/// [`Purgatory::check_and_complete`](crate::Purgatory::check_and_complete),
/// which locks the operations again.
pub type OperationLock = Arc<ReentrantMutex<()>>;

/// A fresh [`OperationLock`].
pub fn new_operation_lock() -> OperationLock {
    Arc::new(ReentrantMutex::new(()))
}

/// Proof that the current thread holds an operation's lock; see
/// [`Operation::lock`].
pub type OperationGuard<'a> = ReentrantMutexGuard<'a, ()>;

/// The operation has completed (set once, never cleared).
const COMPLETED: u8 = 1;
/// The operation was completed by its timeout.
const EXPIRED: u8 = 2;
/// The operation is claimed by a purgatory (watched, maybe armed).
const WATCHED: u8 = 4;

/// The operation's own lock, or a shared one.
enum LockKind {
    Own(ReentrantMutex<()>),
    Shared(OperationLock),
}

/// Everything that ties a watched operation to its purgatory. Changed only
/// with the operation lock held (the mutex around it is there for `Sync`, and
/// for the one access made without the operation lock: storing the timer
/// handle after arming, see `Purgatory::arm`).
pub(crate) struct Links<Op: DelayedOperation> {
    /// The purgatory the operation is watched in; `None` when it is not.
    pub(crate) home: Option<Arc<Home<Op>>>,
    /// Bumped each time the operation is claimed, so that an expiry task
    /// armed for an earlier claim (cancelled, then watched again) does nothing.
    pub(crate) epoch: u32,
    /// The armed timer entry, once stored.
    pub(crate) timer: Option<TimerHandle>,
    /// The operation's slot in each watch list it joined.
    pub(crate) members: Members,
}

impl<Op: DelayedOperation> Links<Op> {
    fn new() -> Self {
        Links {
            home: None,
            epoch: 0,
            timer: None,
            members: Members::new(),
        }
    }
}

/// The state shared by every [`Operation`] handle, every watch-list entry and
/// the timer entry of one operation.
///
/// Laid out in this order (`repr(C)`) so that what a `check_and_complete`
/// scan touches for every watched operation, the reference count (just
/// before), the state, the lock and the start of the user's value, shares as
/// few cache lines as possible; the links, touched only when the operation
/// is watched or released, come last. (Left to the compiler, fields are
/// ordered by alignment, which puts the one-byte state after the links.)
#[repr(C)]
pub(crate) struct Shared<Op: DelayedOperation> {
    state: AtomicU8,
    lock: LockKind,
    op: Op,
    pub(crate) links: Mutex<Links<Op>>,
}

thread_local! {
    /// How many operation locks the purgatory holds on this thread (taken
    /// by its own calls, nested ones included, not by users).
    static PURGATORY_LOCKS: Cell<u32> = const { Cell::new(0) };
    /// The purgatories (of any operation type) to which this thread
    /// deferred drops while it held an operation lock: the release of its
    /// outermost lock drops them.
    static DEFERRED_IN: RefCell<Vec<Arc<dyn DeferredDrops>>> = const { RefCell::new(Vec::new()) };
    /// Whether `DEFERRED_IN` may be non-empty. Read on every release of an
    /// outermost lock: unlike `DEFERRED_IN` (which has a destructor, so
    /// each access checks its registration) it is a plain thread-local
    /// load.
    static DEFERRED_NOTED: Cell<bool> = const { Cell::new(false) };
}

/// A purgatory holding drops that this thread deferred (see [`crate::retire`]).
pub(crate) trait DeferredDrops {
    /// Drops what this thread deferred. No operation lock held.
    fn drop_deferred(&self);
}

/// Records that this thread deferred drops to `home` while holding an
/// operation lock, so that the release of its outermost one drops them,
/// whichever purgatory that lock belongs to.
pub(crate) fn note_deferred(home: Arc<dyn DeferredDrops>) {
    DEFERRED_IN.with(|homes| {
        let mut homes = homes.borrow_mut();
        if !homes
            .iter()
            .any(|h| std::ptr::addr_eq(Arc::as_ptr(h), Arc::as_ptr(&home)))
        {
            homes.push(home);
        }
    });
    DEFERRED_NOTED.with(|noted| noted.set(true));
}

/// An operation lock held by the purgatory. While this thread holds any,
/// the purgatory drops no operation on it: a `Drop` would run under the
/// lock, and the lock is reentrant, so a nested purgatory call (from a
/// callback, or a `try_complete` that force-completes its own operation)
/// cannot tell from its own guard whether an outer frame still holds one.
/// What would be dropped is deferred instead (see [`crate::retire`]), and
/// releasing the outermost lock drops it.
pub(crate) struct PurgatoryLock<'a> {
    guard: Option<OperationGuard<'a>>,
}

impl Drop for PurgatoryLock<'_> {
    // Inlined, with the rare work out of line: this runs once per operation
    // a check visits, and on the usual path (nothing deferred) is an unlock
    // and two plain thread-local accesses.
    #[inline]
    fn drop(&mut self) {
        drop(self.guard.take());
        let outermost = PURGATORY_LOCKS.with(|n| {
            n.set(n.get() - 1);
            n.get() == 0
        });
        if outermost && DEFERRED_NOTED.with(|noted| noted.replace(false)) {
            drop_noted_deferrals();
        }
    }
}

/// Drops what this thread deferred while it held operation locks, in every
/// purgatory noted. One purgatory at a time, with the list not borrowed
/// while it drops: a `Drop` may call back into a purgatory and note more
/// (setting the flag again; the loop takes those too). Popping keeps the
/// list's allocation.
#[cold]
#[inline(never)]
fn drop_noted_deferrals() {
    while let Some(home) = DEFERRED_IN.with(|homes| homes.borrow_mut().pop()) {
        home.drop_deferred();
    }
}

/// Whether the purgatory holds an operation lock on this thread.
pub(crate) fn purgatory_holds_a_lock() -> bool {
    PURGATORY_LOCKS.with(|n| n.get() > 0)
}

/// Calls a user callback, catching and logging a panic. Returns `None` if it
/// panicked.
pub(crate) fn guarded<R>(purgatory: &str, what: &str, f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("<non-string panic payload>");
            log::error!("purgatory {purgatory}: {what} panicked: {msg}");
            None
        }
    }
}

fn home_name<Op: DelayedOperation>(home: &Option<Arc<Home<Op>>>) -> &str {
    home.as_ref().map_or("<unwatched>", |h| h.name.as_str())
}

impl<Op: DelayedOperation> Shared<Op> {
    fn new(op: Op, lock: LockKind) -> Self {
        Shared {
            state: AtomicU8::new(0),
            lock,
            links: Mutex::new(Links::new()),
            op,
        }
    }

    pub(crate) fn op(&self) -> &Op {
        &self.op
    }

    pub(crate) fn lock(&self) -> OperationGuard<'_> {
        match &self.lock {
            LockKind::Own(m) => m.lock(),
            LockKind::Shared(m) => m.lock(),
        }
    }

    /// Locks the operation on the purgatory's behalf: while the returned
    /// guard lives, this thread drops no operation (see [`PurgatoryLock`]).
    #[inline]
    pub(crate) fn lock_for_purgatory(&self) -> PurgatoryLock<'_> {
        let guard = self.lock();
        PURGATORY_LOCKS.with(|n| n.set(n.get() + 1));
        PurgatoryLock { guard: Some(guard) }
    }

    fn raw_lock(&self) -> &ReentrantMutex<()> {
        match &self.lock {
            LockKind::Own(m) => m,
            LockKind::Shared(m) => m,
        }
    }

    /// Changes the state flags. Every caller holds the operation lock, so a
    /// load and a store suffice (no locked read-modify-write).
    fn set_state(&self, f: impl FnOnce(u8) -> u8) {
        debug_assert!(self.raw_lock().is_owned_by_current_thread());
        let s = self.state.load(Ordering::Relaxed);
        self.state.store(f(s), Ordering::Release);
    }

    pub(crate) fn is_completed(&self) -> bool {
        self.state.load(Ordering::Acquire) & COMPLETED != 0
    }

    pub(crate) fn is_expired(&self) -> bool {
        self.state.load(Ordering::Acquire) & EXPIRED != 0
    }

    pub(crate) fn is_watched(&self) -> bool {
        self.state.load(Ordering::Acquire) & WATCHED != 0
    }

    /// Whether the operation is watched and not completed: a candidate for
    /// `check_and_complete`. Lock-free; re-checked under the lock.
    pub(crate) fn is_pending(&self) -> bool {
        self.state.load(Ordering::Acquire) & (WATCHED | COMPLETED) == WATCHED
    }

    /// Whether the operation is currently claimed by `home`. Lock held.
    pub(crate) fn is_claimed_by(&self, home: &Arc<Home<Op>>) -> bool {
        self.is_watched()
            && self
                .links
                .lock()
                .home
                .as_ref()
                .is_some_and(|h| Arc::ptr_eq(h, home))
    }

    /// `try_complete`, with a panic counting as "not complete". Lock held.
    pub(crate) fn try_complete_guarded(&self, purgatory: &str) -> bool {
        guarded(purgatory, "try_complete", || self.op.try_complete()).unwrap_or(false)
    }

    /// Claims the operation for `home` with its watch-list memberships. Lock
    /// held; the operation must be neither watched nor completed. Returns the
    /// claim's epoch.
    pub(crate) fn claim(&self, home: Arc<Home<Op>>, members: Members) -> u32 {
        let mut links = self.links.lock();
        debug_assert!(links.home.is_none() && links.members.is_empty());
        links.home = Some(home);
        links.epoch = links.epoch.wrapping_add(1);
        links.members = members;
        let epoch = links.epoch;
        drop(links);
        self.set_state(|s| s | WATCHED);
        epoch
    }

    /// Unties the operation from its purgatory: it is no longer watched, the
    /// purgatory's watched counter drops, and its watch-list slots and timer
    /// entry (when `cancel_timer`) are retired, to be freed with the next
    /// batch of this thread's (see [`crate::retire`]). Lock held. Returns the
    /// purgatory it was watched in, if any. Calls no user code other than
    /// the `Drop` of operations whose last reference a freed batch held.
    pub(crate) fn release(self: &Arc<Self>, cancel_timer: bool) -> Option<Arc<Home<Op>>> {
        self.set_state(|s| s & !WATCHED);
        let (home, timer, members) = {
            let mut links = self.links.lock();
            (
                links.home.take(),
                links.timer.take(),
                std::mem::take(&mut links.members),
            )
        };
        if let Some(home) = &home {
            if timer.is_some() {
                home.sub_armed();
            }
            let timer = timer.filter(|_| cancel_timer);
            let n = members.len();
            if n > 0 {
                home.sub_watched(n);
            }
            if n > 0 || timer.is_some() {
                home.retire(Retired {
                    op: self.clone(),
                    members,
                    timer,
                });
            }
        } else {
            debug_assert!(members.is_empty() && timer.is_none());
        }
        home
    }

    /// Completes the operation if nobody has: sets the flags, releases it,
    /// then runs `on_complete` (and `on_expiration` if `expired`). Lock held.
    /// Returns what it did; call [`Finished::settle`] once the lock is
    /// released.
    pub(crate) fn finish(self: &Arc<Self>, expired: bool) -> Finished<Op> {
        debug_assert!(self.raw_lock().is_owned_by_current_thread());
        // Every state change happens under the operation lock, which this
        // thread holds: a plain check-then-set is race-free.
        if self.is_completed() {
            return Finished::Already;
        }
        let flags = if expired {
            COMPLETED | EXPIRED
        } else {
            COMPLETED
        };
        self.set_state(|s| s | flags);
        // An expiring operation's timer entry is the one firing: nothing to
        // cancel.
        let home = self.release(!expired);
        let name = home_name(&home);
        guarded(name, "on_complete", || self.op.on_complete());
        if expired {
            guarded(name, "on_expiration", || self.op.on_expiration());
        }
        Finished::Now(home)
    }

    /// The `check_and_complete` step for one operation: lock, and if it is
    /// still watched and not completed, try it and complete it if it can.
    /// Returns whether `try_complete` said yes.
    pub(crate) fn check(self: &Arc<Self>, purgatory: &str) -> bool {
        if !self.is_pending() {
            return false;
        }
        let _guard = self.lock_for_purgatory();
        if !self.is_pending() {
            return false;
        }
        // Counted when `try_complete` says yes, even if it completed the
        // operation itself (by force). The caller, `check_and_complete`,
        // settles deferred drops when it frees its batch at the end.
        if self.try_complete_guarded(purgatory) {
            let _ = self.finish(false);
            true
        } else {
            false
        }
    }

    /// The timeout path, on the timer's executor thread.
    fn expire(self: &Arc<Self>, epoch: u32) {
        let finished = {
            let _guard = self.lock_for_purgatory();
            if self.is_completed() {
                return;
            }
            {
                let links = self.links.lock();
                if links.home.is_none() || links.epoch != epoch {
                    // Cancelled (and maybe watched again) since this entry
                    // was armed.
                    return;
                }
            }
            self.finish(true)
        };
        finished.settle();
    }
}

/// What [`Shared::finish`] did.
#[must_use = "settle it once the operation lock is released"]
pub(crate) enum Finished<Op: DelayedOperation> {
    /// The operation had completed before.
    Already,
    /// This call completed it. It was watched in the purgatory given, if
    /// any, which may hold drops deferred until the lock is released.
    Now(Option<Arc<Home<Op>>>),
}

impl<Op: DelayedOperation> Finished<Op> {
    /// Drops what completing the operation deferred (see
    /// [`crate::retire`]); call it with the operation lock released.
    /// Returns whether this call completed the operation.
    pub(crate) fn settle(self) -> bool {
        match self {
            Finished::Already => false,
            Finished::Now(home) => {
                if let Some(home) = home {
                    home.drop_deferred();
                }
                true
            }
        }
    }
}

/// The timer entry of a watched operation: one pointer and its claim epoch.
pub(crate) struct ExpiryTask<Op: DelayedOperation> {
    op: Arc<Shared<Op>>,
    epoch: u32,
}

impl<Op: DelayedOperation> ExpiryTask<Op> {
    pub(crate) fn new(op: Arc<Shared<Op>>, epoch: u32) -> Self {
        ExpiryTask { op, epoch }
    }
}

impl<Op: DelayedOperation> TimerTask for ExpiryTask<Op> {
    fn run(self) {
        self.op.expire(self.epoch);
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
        Operation(Arc::new(Shared::new(
            op,
            LockKind::Own(ReentrantMutex::new(())),
        )))
    }

    /// Wraps `op` with a caller-supplied lock, which may be shared by several
    /// operations (Kafka's group lock): their callbacks then never run
    /// concurrently with each other or with code holding the lock.
    pub fn with_lock(op: Op, lock: OperationLock) -> Self {
        Operation(Arc::new(Shared::new(op, LockKind::Shared(lock))))
    }

    /// Whether the operation has completed (by its condition, by force or by
    /// its timeout).
    pub fn is_completed(&self) -> bool {
        self.0.is_completed()
    }

    /// Whether the operation was completed by its timeout.
    pub fn is_expired(&self) -> bool {
        self.0.is_expired()
    }

    /// Whether the operation is currently watched by a purgatory.
    pub fn is_watched(&self) -> bool {
        self.0.is_watched()
    }

    /// Completes the operation now, whatever its condition (Kafka's
    /// `forceComplete`). Returns `true` iff this call completed it.
    ///
    /// Takes the operation lock, leaves every watch list, disarms the timer
    /// and runs `on_complete` (not `on_expiration`). Safe to call from inside
    /// the operation's own callbacks (the lock is reentrant); from
    /// `try_complete` it completes the operation, and the `true` returned by
    /// `try_complete` afterwards changes nothing.
    pub fn force_complete(&self) -> bool {
        let finished = {
            let _guard = self.0.lock_for_purgatory();
            self.0.finish(false)
        };
        finished.settle()
    }

    /// Locks the operation (its own lock or the shared one), blocking until
    /// it is free. While the guard lives, none of the operation's callbacks
    /// run on another thread.
    pub fn lock(&self) -> OperationGuard<'_> {
        self.0.lock()
    }

    /// Whether the current thread holds the operation's lock.
    pub fn is_locked_by_current_thread(&self) -> bool {
        self.0.raw_lock().is_owned_by_current_thread()
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
            .finish()
    }
}
