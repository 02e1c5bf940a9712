//! The part of a purgatory that a watched operation points back to.
//!
//! [`Operation`](crate::Operation) is generic over the operation type only,
//! not over the key type, so what an operation needs to leave its purgatory
//! on its own (when force-completed, expired or cancelled) lives here,
//! without the keys: the timer (to disarm it), the watch index behind a
//! key-type-erased trait object (to leave its lists), the watched and armed
//! counters, the queue of released operations whose slots and timer entries
//! are still to be freed ([`RetireQueue`]), and the name (for logs).
//!
//! Invariants: `watched` equals the number of watch-list entries of every
//! operation claimed by this purgatory. It is raised by the claimer before
//! the operation lock is released and lowered by the releaser under that
//! lock, so it never goes below zero. `armed` equals the number of claimed
//! operations whose timer handle is stored in their links: raised under the
//! links' mutex when the handle is stored, lowered by the thread that takes
//! it out (under the operation lock) right after. It is striped by thread (see
//! [`StripedCounter`]): the thread watching operations and the one completing
//! them would otherwise write one cache line for every operation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use timer::Timer;

use crate::operation::{
    note_deferred, purgatory_holds_a_lock, DeferredDrops, DelayedOperation, ExpiryTask, Shared,
};
use crate::retire::{RetireQueue, Retired};
use crate::stripe::StripedCounter;
use crate::watch::ErasedIndex;

pub(crate) struct Home<Op: DelayedOperation> {
    pub(crate) name: String,
    pub(crate) timer: Arc<Timer<ExpiryTask<Op>>>,
    /// The purgatory's watch lists, reached without the key type.
    pub(crate) index: Arc<dyn ErasedIndex<Op>>,
    retired: RetireQueue<Op>,
    watched: StripedCounter,
    /// Operations whose timer handle is stored in their links: raised when
    /// the handle is stored, lowered when it is taken out (the operation
    /// completed, expired or was cancelled).
    armed: StripedCounter,
    shut_down: AtomicBool,
}

impl<Op: DelayedOperation> Home<Op> {
    pub(crate) fn new(
        name: String,
        timer: Arc<Timer<ExpiryTask<Op>>>,
        index: Arc<dyn ErasedIndex<Op>>,
    ) -> Self {
        Home {
            name,
            timer,
            index,
            retired: RetireQueue::new(),
            watched: StripedCounter::new(),
            armed: StripedCounter::new(),
            shut_down: AtomicBool::new(false),
        }
    }

    pub(crate) fn watched(&self) -> usize {
        self.watched.sum()
    }

    pub(crate) fn add_watched(&self, n: usize) {
        self.watched.add(n);
    }

    pub(crate) fn sub_watched(&self, n: usize) {
        self.watched.sub(n);
    }

    /// Counts an operation whose timer handle was just stored.
    pub(crate) fn add_armed(&self) {
        self.armed.add(1);
    }

    /// Counts an operation whose timer handle was just taken out.
    pub(crate) fn sub_armed(&self) {
        self.armed.sub(1);
    }

    /// Hands a released operation's slots and timer entry over to be freed
    /// in a batch (see [`RetireQueue`]).
    pub(crate) fn retire(self: &Arc<Self>, retired: Retired<Op>) {
        self.retired
            .push(retired, &*self.index, &self.timer, &self.name);
        self.note_if_deferred();
    }

    /// Frees what this thread has retired and not yet freed.
    pub(crate) fn free_own_retired(self: &Arc<Self>) {
        self.retired.free_own(&*self.index, &self.timer, &self.name);
        self.note_if_deferred();
    }

    /// Drops `ops` now, or defers them if this thread's purgatory calls
    /// hold an operation lock (see [`crate::retire`]).
    pub(crate) fn drop_or_defer(self: &Arc<Self>, ops: Vec<Arc<Shared<Op>>>) {
        self.retired.drop_or_defer(&self.name, ops);
        self.note_if_deferred();
    }

    /// If this thread holds an operation lock and deferred drops here, has
    /// the release of its outermost lock drop them.
    fn note_if_deferred(self: &Arc<Self>) {
        if purgatory_holds_a_lock() && self.retired.has_deferred() {
            note_deferred(self.clone());
        }
    }

    /// Drops up to two completed operations whose slots and timer entries
    /// are already freed, if any (a watching thread's share; see
    /// [`crate::retire`]).
    pub(crate) fn drop_unlinked(&self) {
        self.retired.drop_unlinked(&self.name);
    }

    /// Drops what this thread deferred while it held an operation lock (see
    /// [`crate::retire`]). Call with no operation lock held.
    pub(crate) fn drop_deferred(&self) {
        self.retired.drop_deferred(&self.name);
    }

    /// Frees everything retired and not yet freed, by any thread; then, if
    /// `drop_unlinked`, drops every completed operation still held.
    pub(crate) fn free_all_retired(self: &Arc<Self>, drop_unlinked: bool) {
        self.retired
            .free_all(&*self.index, &self.timer, &self.name, drop_unlinked);
        self.note_if_deferred();
    }

    /// Operations with an armed timer (a snapshot while operations are
    /// armed and released concurrently).
    pub(crate) fn delayed(&self) -> usize {
        self.armed.sum()
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::SeqCst)
    }

    /// Marks the purgatory shut down; returns whether it already was.
    pub(crate) fn mark_shut_down(&self) -> bool {
        self.shut_down.swap(true, Ordering::SeqCst)
    }
}

impl<Op: DelayedOperation> DeferredDrops for Home<Op> {
    fn drop_deferred(&self) {
        Home::drop_deferred(self);
    }
}
