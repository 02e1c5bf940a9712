//! How an operation leaves the purgatory: the one path every way of leaving
//! takes (a check, a force, the timeout, a cancel, a shutdown).
//!
//! 1. **Decide**, under the operation lock: [`OpState::decide`](crate::outcome::OpState::decide) picks the
//!    outcome; exactly one caller wins (see [`crate::outcome`]).
//! 2. **Unlink**, still under the lock ([`Shared::unlink`]): the links are
//!    emptied (owner, timer handle, memberships, the purgatory's strong
//!    reference, the waiters), and the owner counts the operation out and
//!    queues its slots and timer entry to be freed in a batch (see
//!    [`crate::retire`]; those hold it weakly, so only memory waits there),
//!    or, for a cancel, frees them at once: a cancelled operation may be
//!    watched again as soon as the lock is released. (One not attached yet,
//!    cancelled by its watch's key iterator, has its slots in that watch's
//!    hands: it stays claimed until the watch has freed them, see
//!    [`OpState`](crate::outcome::OpState).)
//! 3. **Callbacks**, still under the lock, with no purgatory lock held:
//!    `on_complete`, then `on_expiration` for an expiry; none for a cancel.
//!    Then the operation is settled: its outcome shows, and waiters that
//!    came while the callbacks ran are taken along (see [`crate::outcome`]).
//! 4. **Let go**, once the caller has released every lock: the
//!    [`Released`] token the unlinking returned drops the purgatory's
//!    strong reference, so the operation's `Drop` runs then if nobody else
//!    holds it, and then resolves the waiters: one that kept no handle
//!    wakes to an operation already dropped. Every public call lets go of
//!    what it released before it returns ([`let_go`]).
//!
//! A purgatory call made from inside a user callback runs under an outer
//! call's operation lock, so it must not let go: what it releases waits in
//! a thread-local list until the outermost call returns ([`flush`]). The
//! callback depth that tells one from the other is counted where callbacks
//! are called ([`guarded`]), and around the user code a watch runs under
//! the operation's lock (its keys and their iterator: see
//! [`WatchWindow`]). A watch's window also collects what happens to its
//! operation before it is attached (a completion, by its try or by user
//! code forcing it, and the panics of the callbacks that ran), to count
//! and report them for the watching purgatory. These, and that list, are
//! this module's only thread-local state.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use timer::internal::{discard_panic, panic_message};
use timer::TimerTask;

use crate::operation::{DelayedOperation, Operation, OwnerRef, Shared};
use crate::outcome::{Outcome, Signal};
use crate::stats::Site;

thread_local! {
    /// How many user callbacks the purgatory is running on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Whether `HELD` may be non-empty: a plain load on every flush.
    static ANY_HELD: Cell<bool> = const { Cell::new(false) };
    /// What calls made inside callbacks released: let go by the outermost.
    static HELD: RefCell<VecDeque<Box<dyn Any>>> = const { RefCell::new(VecDeque::new()) };
    /// How many watch windows are open on this thread (nested: a watch made
    /// from the user code another runs opens its own).
    static WINDOWS: Cell<u32> = const { Cell::new(0) };
    /// How many watch windows this thread has opened, ever: a window's
    /// number, and when a note was left (see [`WatchWindow`]).
    static WINDOWS_OPENED: Cell<u64> = const { Cell::new(0) };
    /// Whether `LEFT` may be non-empty: a plain load as every window closes
    /// (and no thread-local with a destructor touched by a watch with
    /// nothing to report, which may run in another thread-local's
    /// destructor).
    static ANY_LEFT: Cell<bool> = const { Cell::new(false) };
    /// What happened, while windows were open, to operations no purgatory
    /// had attached. The window watching that operation counts and reports
    /// it when it closes; the outermost window logs what panics are left
    /// as unwatched, and drops the rest.
    static LEFT: RefCell<Vec<Left>> = const { RefCell::new(Vec::new()) };
}

/// What a watch window is left: the operation's address, how many windows
/// the thread had opened then, whether it happened in a stay (the
/// operation claimed by a watch), and what happened.
type Left = (usize, u64, bool, Note);

/// What happened to an operation no purgatory had attached.
enum Note {
    /// It completed.
    Completed,
    /// A callback of its (named) panicked, with this message.
    Panicked(&'static str, String),
}

/// Leaves `note` about the operation at address `op` for its window
/// (`in_stay`: the operation was claimed by a watch then). Returns it if no
/// window is open, or the thread's list is gone.
fn leave(op: usize, in_stay: bool, note: Note) -> Option<Note> {
    if WINDOWS.with(Cell::get) == 0 {
        return Some(note);
    }
    let mut note = Some(note);
    let left = LEFT.try_with(|left| {
        if let Some(note) = note.take() {
            left.borrow_mut()
                .push((op, WINDOWS_OPENED.with(Cell::get), in_stay, note));
        }
    });
    if left.is_ok() {
        ANY_LEFT.with(|any| any.set(true));
    }
    note
}

/// Calls a user callback on behalf of `site` (`None`: of no purgatory),
/// catching, logging and counting a panic. Returns `None` if it panicked.
/// While it runs, purgatory calls it makes hold back what they release (see
/// the module docs).
pub(crate) fn guarded<R>(
    site: Option<&Site>,
    what: &'static str,
    f: impl FnOnce() -> R,
) -> Option<R> {
    guarded_for(site, 0, false, what, f)
}

/// [`guarded`], for a callback of the operation at address `op` (0: none
/// in particular): with no site, inside a watch window, a panic is left for
/// the window watching that operation to report (see [`WatchWindow`];
/// `in_stay`: as [`leave`]).
fn guarded_for<R>(
    site: Option<&Site>,
    op: usize,
    in_stay: bool,
    what: &'static str,
    f: impl FnOnce() -> R,
) -> Option<R> {
    DEPTH.with(|d| d.set(d.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get() - 1));
    match result {
        Ok(r) => Some(r),
        Err(panic) => {
            let msg = panic_message(&*panic);
            match site {
                Some(site) => {
                    log::error!("purgatory {}: {what} panicked: {msg}", site.name);
                    site.count_panic();
                }
                None if op != 0 => {
                    if leave(op, in_stay, Note::Panicked(what, msg.to_string())).is_some() {
                        log::error!("purgatory <unwatched>: {what} panicked: {msg}");
                    }
                }
                None => log::error!("purgatory <unwatched>: {what} panicked: {msg}"),
            }
            discard_panic(panic);
            None
        }
    }
}

/// What a watch holds while it runs user code under its operation's lock
/// before attaching the operation (its tries, its `timeout`, its keys'
/// `Hash` and `Eq`, their iterator): from [`open`](Self::open) until it is
/// dropped, what purgatory calls release is held back as inside a callback
/// (that code runs under an operation lock too). And when it closes, it
/// counts with `completed` a completion of the operation meanwhile by user
/// code (a force, a check of a key it joined; a first try that says yes is
/// counted by the watch itself), and reports for `site` the panics of the
/// callbacks that ran: no purgatory had attached the operation, so no
/// owner counts them.
///
/// Once its watch has claimed the operation, a completion that was not of
/// a stay (a force after a cancel from the second try) is no purgatory's,
/// as outside a window: not counted, its panics logged as unwatched.
///
/// Windows nest: user code one runs may watch other operations, or the
/// same one elsewhere. A note goes to the innermost window of its
/// operation that was open when it was left: windows are numbered as they
/// open and close in the reverse order, so that is the first to close of
/// those numbered no later than the note; one opened after it (a watch
/// refusing the operation, say) is not its window. What no window claims
/// (an operation no window watches, forced there) is dropped when the
/// outermost closes, its panics logged as unwatched.
pub(crate) struct WatchWindow<'a> {
    site: &'a Site,
    completed: &'a dyn Fn(),
    op: usize,
    /// Its number: how many windows the thread had opened with it.
    number: u64,
    /// Whether no other window was open when it opened.
    outermost: bool,
    /// Whether its watch has claimed the operation.
    claimed: bool,
}

impl<'a> WatchWindow<'a> {
    pub(crate) fn open<Op: DelayedOperation>(
        op: &Arc<Shared<Op>>,
        site: &'a Site,
        completed: &'a dyn Fn(),
    ) -> Self {
        DEPTH.with(|d| d.set(d.get() + 1));
        let outer = WINDOWS.with(|w| w.replace(w.get() + 1));
        let number = WINDOWS_OPENED.with(|n| {
            n.set(n.get() + 1);
            n.get()
        });
        WatchWindow {
            site,
            completed,
            op: Arc::as_ptr(op) as usize,
            number,
            outermost: outer == 0,
            claimed: false,
        }
    }

    /// Marks the operation claimed by this window's watch.
    pub(crate) fn claimed(&mut self) {
        self.claimed = true;
    }

    /// Counts and reports what was left for this window, and, if it is
    /// the outermost, drops the rest (logging its panics as unwatched).
    /// Rare: only user code forcing an operation before its attach, a check
    /// from its key iterator, or a panicking callback leaves anything.
    #[cold]
    #[inline(never)]
    fn report(&self) {
        let mut completed = 0;
        let mut panics = Vec::new();
        let mut unclaimed = Vec::new();
        let _ = LEFT.try_with(|left| {
            left.borrow_mut().retain_mut(|(op, at, in_stay, note)| {
                let mine = *op == self.op && *at >= self.number;
                if !mine && !self.outermost {
                    return true;
                }
                let counted = mine && (*in_stay || !self.claimed);
                match note {
                    Note::Completed if counted => completed += 1,
                    Note::Completed => {}
                    Note::Panicked(what, msg) => {
                        let panic = (*what, std::mem::take(msg));
                        if counted {
                            panics.push(panic);
                        } else {
                            unclaimed.push(panic);
                        }
                    }
                }
                false
            });
        });
        if self.outermost {
            ANY_LEFT.with(|any| any.set(false));
        }
        // The list released: counting and logging may call back in.
        for _ in 0..completed {
            (self.completed)();
        }
        for (what, msg) in panics {
            log::error!("purgatory {}: {what} panicked: {msg}", self.site.name);
            self.site.count_panic();
        }
        for (what, msg) in unclaimed {
            log::error!("purgatory <unwatched>: {what} panicked: {msg}");
        }
    }
}

impl Drop for WatchWindow<'_> {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
        WINDOWS.with(|w| w.set(w.get() - 1));
        if ANY_LEFT.with(Cell::get) {
            self.report();
        }
    }
}

/// Whether this thread is inside a user callback run by the purgatory.
pub(crate) fn in_callback() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Drops `value` (a [`Released`] token, or a reference to an operation
/// that may be the last) now, or, inside a callback, once the outermost
/// purgatory call returns. Call with no purgatory or operation lock held by
/// the calling frame.
pub(crate) fn let_go<T: 'static>(value: T) {
    if in_callback() {
        // Once the thread's list is gone (a call made from another
        // thread-local's destructor), nothing can be held back.
        let mut value = Some(value);
        let held = HELD.try_with(|held| {
            if let Some(value) = value.take() {
                held.borrow_mut().push_back(Box::new(value));
            }
        });
        if held.is_ok() {
            ANY_HELD.with(|any| any.set(true));
            return;
        }
        drop_logged(value, "an operation's Drop");
    } else {
        drop_logged(value, "an operation's Drop");
    }
}

/// Lets go of what calls inside callbacks held back, if this is the
/// outermost purgatory call on the thread. Every public call that runs
/// callbacks ends with it, its locks released.
#[inline]
pub(crate) fn flush() {
    if ANY_HELD.with(|any| any.get()) && !in_callback() {
        flush_held();
    }
}

#[cold]
#[inline(never)]
fn flush_held() {
    ANY_HELD.with(|any| any.set(false));
    // One at a time, in the order they were held back (a call's copies of
    // an operation before its token, which wakes the waiters), the list
    // not borrowed while it drops: a `Drop` may call the purgatory again
    // (at depth 0 it lets go at once).
    while let Some(value) = HELD
        .try_with(|held| held.borrow_mut().pop_front())
        .ok()
        .flatten()
    {
        drop_logged(value, "an operation's Drop");
    }
}

/// Drops `value`, catching and logging a panic in a user `Drop` (`what`
/// names it in the log).
pub(crate) fn drop_logged<T>(value: T, what: &str) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        log::error!("purgatory: {what} panicked: {}", panic_message(&*panic));
        discard_panic(panic);
    }
}

/// What an operation's leaving left to do once the locks are released:
/// drop the purgatory's strong reference, then resolve its waiters. Both
/// happen when the token is dropped; hand it to [`let_go`].
#[must_use = "hand it to release::let_go once the locks are released"]
pub(crate) struct Released<Op: DelayedOperation> {
    keep: Option<Arc<Shared<Op>>>,
    /// The waiters of the stay, registered before it was decided.
    signal: Option<Arc<Signal>>,
    /// Those that came while the callbacks ran.
    late: Option<Arc<Signal>>,
    outcome: Outcome,
}

impl<Op: DelayedOperation> Drop for Released<Op> {
    fn drop(&mut self) {
        // The reference first; the waiters are resolved by the guard's drop,
        // which also runs if the operation's `Drop` panics.
        let _resolve = Resolve {
            signals: [self.signal.take(), self.late.take()],
            outcome: self.outcome,
        };
        drop(self.keep.take());
    }
}

/// Resolves the signals it holds when dropped, unwinding or not.
struct Resolve {
    signals: [Option<Arc<Signal>>; 2],
    outcome: Outcome,
}

impl Drop for Resolve {
    fn drop(&mut self) {
        for signal in self.signals.iter_mut().filter_map(Option::take) {
            signal.resolve(self.outcome);
        }
    }
}

impl<Op: DelayedOperation> Shared<Op> {
    /// Step 2: empties the links and hands what is to be freed to the
    /// owner. Lock held, outcome decided. Returns the token to let go of and
    /// the owner it left (for the callbacks' logs).
    fn unlink(self: &Arc<Self>, outcome: Outcome) -> (Released<Op>, Option<OwnerRef<Op>>) {
        debug_assert!(self.is_locked_here());
        let (attached, links) = self.detach();
        let (owner, keep) = attached.unzip();
        let (timer, members, signal) = links.into_parts();
        if let Some(owner) = &owner {
            let armed = timer.is_some();
            // An expiring operation's timer entry is the one firing.
            let timer = timer.filter(|_| outcome != Outcome::Expired);
            owner.left(self, members, timer, armed, outcome);
        } else {
            debug_assert!(members.is_empty() && timer.is_none() && keep.is_none());
        }
        let released = Released {
            keep,
            signal,
            late: None,
            outcome,
        };
        (released, owner)
    }

    /// Completes the operation (`Completed` or `Expired`) if nobody has:
    /// steps 1 to 3. Lock held. `None` if it had completed before.
    pub(crate) fn finish(self: &Arc<Self>, outcome: Outcome) -> Option<Released<Op>> {
        self.finish_in(outcome, None)
    }

    /// [`finish`](Self::finish), with the callbacks run on behalf of
    /// `unattached` if no purgatory has attached the operation: a watch's
    /// first try completed it, or a check completed it while its watch was
    /// still joining lists (the purgatory watching it is then the checking
    /// one). A completion with no owner is left as a note for the window
    /// watching the operation, which counts it (see [`WatchWindow`]).
    pub(crate) fn finish_in(
        self: &Arc<Self>,
        outcome: Outcome,
        unattached: Option<&Site>,
    ) -> Option<Released<Op>> {
        self.finish_noting(outcome, unattached, true)
    }

    /// The completion of a watch's first try that said yes: as
    /// [`finish_in`](Self::finish_in), but the caller, whose window it is,
    /// counts it if this call completed it (`Some`), with no note to leave.
    pub(crate) fn finish_first_try(self: &Arc<Self>, site: &Site) -> Option<Released<Op>> {
        self.finish_noting(Outcome::Completed, Some(site), false)
    }

    fn finish_noting(
        self: &Arc<Self>,
        outcome: Outcome,
        unattached: Option<&Site>,
        note: bool,
    ) -> Option<Released<Op>> {
        debug_assert!(outcome != Outcome::Cancelled);
        let in_stay = self.state.decide_in(outcome)?;
        let (mut released, owner) = self.unlink(outcome);
        let site = owner.as_ref().map_or(unattached, |o| Some(o.site()));
        let addr = Arc::as_ptr(self) as usize;
        if owner.is_none() && note {
            // No owner counts it: the window watching it does, if any.
            leave(addr, in_stay, Note::Completed);
        }
        guarded_for(site, addr, in_stay, "on_complete", || {
            self.op().on_complete()
        });
        if outcome == Outcome::Expired {
            guarded_for(site, addr, in_stay, "on_expiration", || {
                self.op().on_expiration()
            });
        }
        if self.state.settle() {
            released.late = self
                .links()
                .side
                .as_mut()
                .and_then(|side| side.signal.take());
        }
        Some(released)
    }

    /// Cancels the operation if it is claimed by `owner` and not completed:
    /// steps 1 and 2, no callback. Lock held.
    pub(crate) fn cancel(self: &Arc<Self>, owner: *const ()) -> Option<Released<Op>> {
        if !self.is_claimed_by(owner) || !self.state.decide(Outcome::Cancelled) {
            return None;
        }
        Some(self.unlink(Outcome::Cancelled).0)
    }

    /// Cancels the operation if a watch has claimed it and not attached it
    /// yet: steps 1 and 2, no callback, nothing to detach. Only code that
    /// watch runs under the operation lock gets here (a `cancel_for_key`
    /// from its key iterator, finding it in a list it joined). The
    /// operation is then leaving (see [`OpState`](crate::outcome::OpState))
    /// until the watch has left its lists. No owner counts it: the caller
    /// does. Lock held.
    pub(crate) fn cancel_unattached(self: &Arc<Self>) -> Option<Released<Op>> {
        if self.links().owner.is_some() || !self.state.cancel_claimed() {
            return None;
        }
        Some(self.unlink(Outcome::Cancelled).0)
    }

    /// The `cancel_for_key` step for one operation found in a list of the
    /// purgatory `owner` in its stay `stay`: lock, and if that stay goes on,
    /// cancel it ([`cancel`](Self::cancel), or, claimed by a watch not yet
    /// attached, [`cancel_unattached`](Self::cancel_unattached), which
    /// `unattached` is told of under the lock, to count it). One cancelled
    /// meanwhile and watched again is left to its new stay, one completing
    /// concurrently to its completer.
    pub(crate) fn cancel_found(
        self: &Arc<Self>,
        stay: u32,
        owner: *const (),
        unattached: impl FnOnce(),
    ) -> Option<Released<Op>> {
        let _guard = self.lock();
        if self.stay() != stay {
            return None;
        }
        self.cancel(owner).or_else(|| {
            let token = self.cancel_unattached();
            if token.is_some() {
                unattached();
            }
            token
        })
    }

    /// `try_complete`, with a panic counting as "not complete". Lock held.
    pub(crate) fn try_complete_guarded(&self, site: Option<&Site>) -> bool {
        guarded(site, "try_complete", || self.op().try_complete()).unwrap_or(false)
    }

    /// The `check_and_complete` step for one operation found in a list of
    /// its stay `epoch`: lock, and if that stay goes on (still watched, not
    /// completed, not cancelled and watched again), try it and complete it
    /// if it can. Returns whether `try_complete` said yes, and what to let
    /// go of.
    pub(crate) fn check(
        self: &Arc<Self>,
        site: Option<&Site>,
        epoch: u32,
    ) -> (bool, Option<Released<Op>>) {
        if !self.is_pending() {
            return (false, None);
        }
        let _guard = self.lock();
        if !self.is_pending() || self.stay() != epoch {
            return (false, None);
        }
        // Counted when `try_complete` completed the operation itself (by
        // force), whatever it said: it was pending, and the lock held
        // since, so this call completed it. A yes completes it only if the
        // stay still goes on: a try may have cancelled it (and watched it
        // again).
        let yes = self.try_complete_guarded(site);
        if self.is_completed() {
            // Forced by the try (this call completed it), or expired by a
            // shutdown it made (it did not).
            (!self.state.is_expired(), None)
        } else if yes && self.is_pending() && self.stay() == epoch {
            (true, self.finish_in(Outcome::Completed, site))
        } else {
            (false, None)
        }
    }

    /// The timeout path, on the timer's executor thread. Lets go of `self`
    /// before the waiters are woken (the token holds the purgatory's
    /// reference until then).
    fn expire(self: Arc<Self>, epoch: u32) {
        let released = {
            let _guard = self.lock();
            let ours = {
                let links = self.links();
                // Otherwise cancelled (and maybe watched again) since this
                // entry was armed.
                links.owner.is_some() && self.epoch(&links) == epoch
            };
            if ours {
                self.finish(Outcome::Expired)
            } else {
                None
            }
        };
        let_go(self);
        if let Some(released) = released {
            let_go(released);
        }
        flush();
    }
}

/// The timer entry of a watched operation, in one word (a timer slot holds
/// a task of a pointer's size in 24 bytes, one of two words in 32): a
/// weak pointer to the operation and the epoch of the stay it was armed
/// for, which its expiry checks (see `Shared::epoch`).
///
/// Most operations have one stay: one is watched again only after a
/// cancel. So the word is the weak pointer itself for a first stay
/// ([`FIRST_STAY`], implied), and for a later one a pointer to a box
/// holding the weak pointer and the epoch, its lowest bit set ([`AGAIN`]):
/// both point to values aligned to at least 2, so that bit is free.
pub(crate) struct ExpiryTask<Op: DelayedOperation> {
    word: NonNull<()>,
    _holds: PhantomData<Weak<Shared<Op>>>,
}

/// The epoch of an operation's first stay (`Shared::claim` counts from 0).
const FIRST_STAY: u32 = 1;

/// Set in an [`ExpiryTask`]'s word when it points to an [`Again`].
const AGAIN: usize = 1;

/// The expiry task of a later stay: boxed, since it carries its epoch.
struct Again<Op: DelayedOperation> {
    op: Weak<Shared<Op>>,
    epoch: u32,
}

// SAFETY: the task owns what its word points to, a `Weak<Shared<Op>>` (or
// a box of one and a `u32`), which is `Send` since `Shared<Op>` is `Send`
// and `Sync` (`Op: Send + Sync`); nothing else reaches it.
#[allow(unsafe_code)]
unsafe impl<Op: DelayedOperation> Send for ExpiryTask<Op> where Weak<Shared<Op>>: Send {}

impl<Op: DelayedOperation> ExpiryTask<Op> {
    pub(crate) fn new(op: &Arc<Shared<Op>>, epoch: u32) -> Self {
        // The lowest bit of a pointer to either is free for the tag.
        const {
            assert!(align_of::<Shared<Op>>() >= 2 && align_of::<Again<Op>>() >= 2);
        }
        let op = Arc::downgrade(op);
        let word = if epoch == FIRST_STAY {
            Weak::into_raw(op).cast::<()>().cast_mut()
        } else {
            let again = Box::into_raw(Box::new(Again { op, epoch }));
            debug_assert!(again.addr() & AGAIN == 0, "aligned to at least 2");
            again.cast::<()>().map_addr(|a| a | AGAIN)
        };
        ExpiryTask {
            // Neither `into_raw` returns null.
            word: NonNull::new(word).expect("a weak pointer or a box is not null"),
            _holds: PhantomData,
        }
    }

    /// The weak pointer and the epoch, taking them out of the word.
    #[allow(unsafe_code)]
    fn take(self) -> (Weak<Shared<Op>>, u32) {
        let word = std::mem::ManuallyDrop::new(self).word;
        // SAFETY: the task is consumed, its drop skipped: `word` is
        // turned back once.
        unsafe { Self::parts(word) }
    }

    /// Turns a task's word back into what it holds.
    ///
    /// # Safety
    ///
    /// `word` is a task's, and is turned back once.
    #[allow(unsafe_code)]
    unsafe fn parts(word: NonNull<()>) -> (Weak<Shared<Op>>, u32) {
        let word = word.as_ptr();
        // SAFETY: `new` made `word` from `Weak::into_raw` (lowest bit
        // clear, first stay) or `Box::into_raw` of an `Again` (bit set),
        // with these types, and the caller turns it back once.
        unsafe {
            if word.addr() & AGAIN == 0 {
                (Weak::from_raw(word.cast::<Shared<Op>>()), FIRST_STAY)
            } else {
                let again = word.map_addr(|a| a & !AGAIN).cast::<Again<Op>>();
                let Again { op, epoch } = *Box::from_raw(again);
                (op, epoch)
            }
        }
    }
}

impl<Op: DelayedOperation> Drop for ExpiryTask<Op> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the task is going; `take` skips this drop, so the word
        // is turned back once.
        drop(unsafe { Self::parts(self.word) });
    }
}

impl<Op: DelayedOperation> TimerTask for ExpiryTask<Op> {
    fn run(self) {
        let (op, epoch) = self.take();
        // Gone: it left, and nobody holds it any more.
        if let Some(op) = op.upgrade() {
            op.expire(epoch);
        }
    }
}

impl<Op: DelayedOperation> Operation<Op> {
    /// Completes the operation now, whatever its condition (Kafka's
    /// `forceComplete`). Returns `true` iff this call completed it; its
    /// [`outcome`](Self::outcome) is then [`Outcome::Completed`]. An
    /// operation cancelled earlier (out of the purgatory, its waiters told
    /// `Cancelled`) may still be completed this way by its owner (one that
    /// its watch's key iterator cancelled: once that watch has returned;
    /// until then a force returns `false`).
    ///
    /// Takes the operation lock, leaves every watch list, disarms the timer
    /// and runs `on_complete` (not `on_expiration`); made from the key
    /// iterator of the watch that has the operation, it leaves the lists
    /// when that watch returns. Safe to call from inside
    /// the operation's own callbacks (the lock is reentrant); from
    /// `try_complete` it completes the operation, and the `true` returned by
    /// `try_complete` afterwards changes nothing. The purgatory has let go
    /// of the operation when it returns (see [`DelayedOperation`]).
    pub fn force_complete(&self) -> bool {
        crate::key_eq::not_from_key_eq("force_complete");
        let released = {
            let _guard = self.0.lock();
            self.0.finish(Outcome::Completed)
        };
        let done = released.is_some();
        if let Some(released) = released {
            let_go(released);
        }
        flush();
        done
    }
}

/// An expiry racing a cancel and the next stay, under loom: the expiry
/// task checks the stay it was armed for (owner and epoch, under the
/// links' lock), so a stale one ends nothing. Run with
/// `RUSTFLAGS="--cfg loom" cargo test -p purgatory --release --lib loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use timer::TimerTask;

    use super::*;
    use crate::members::Members;
    use crate::operation::{Idle, NoOwner};

    /// Claims `op` for `owner` under its lock, as a watch does; its epoch.
    fn watch(op: &Operation<Idle>, owner: &OwnerRef<Idle>) -> Option<u32> {
        let _guard = op.lock();
        op.0.claim()
            .then(|| op.0.attach(owner.clone(), Members::new()))
    }

    /// Cancels `op` under its lock and lets go; whether it was cancelled.
    fn cancel(op: &Operation<Idle>, owner: &OwnerRef<Idle>) -> bool {
        let released = {
            let _guard = op.lock();
            op.0.cancel(Arc::as_ptr(&**owner).cast())
        };
        let cancelled = released.is_some();
        drop(released);
        cancelled
    }

    /// The timer's thread runs the task of the stay after `earlier`
    /// cancelled stays; meanwhile the owner cancels it and watches the
    /// operation again. Either the expiry wins (the cancel and the new
    /// stay find it completed), or the new stay stays on, its outcome
    /// undecided, whenever the stale task ran.
    fn expiry_racing_cancel_then_rewatch(earlier: u32) {
        loom::model(move || {
            let op = Operation::new(Idle);
            let owner: OwnerRef<Idle> = Arc::new(Arc::new(NoOwner::new()));
            for _ in 0..earlier {
                watch(&op, &owner).expect("watched");
                assert!(cancel(&op, &owner));
            }
            let epoch = watch(&op, &owner).expect("watched");
            let task = ExpiryTask::new(&op.0, epoch);
            let timer = loom::thread::spawn(move || TimerTask::run(task));
            let cancelled = cancel(&op, &owner);
            let again = watch(&op, &owner);
            timer.join().unwrap();
            if cancelled {
                assert_eq!(again, Some(epoch + 1), "watched again");
                assert!(
                    op.is_watched() && op.outcome().is_none(),
                    "a stale expiry ended it"
                );
                assert!(cancel(&op, &owner));
            } else {
                assert_eq!(op.outcome(), Some(Outcome::Expired));
                assert_eq!(again, None, "completed, never watched again");
            }
        });
    }

    #[test]
    fn a_first_stays_expiry_races_a_cancel_then_a_new_stay() {
        expiry_racing_cancel_then_rewatch(0);
    }

    #[test]
    fn a_later_stays_boxed_expiry_races_a_cancel_then_a_new_stay() {
        expiry_racing_cancel_then_rewatch(1);
    }
}

#[cfg(test)]
mod tests;
