//! The part of a purgatory that a watched operation points back to.
//!
//! [`Operation`](crate::Operation) is generic over the operation type only,
//! not over the key type, so what an operation needs to leave its purgatory
//! on its own (when force-completed, expired or cancelled) lives here,
//! without the keys: the timer (to disarm it), the watch index behind a
//! key-type-erased trait object (to leave its lists), the watched counter
//! the queue of released operations whose slots and timer entries are still
//! to be freed ([`RetireQueue`]), and the name (for logs).
//!
//! Invariant: `watched` equals the number of watch-list entries of every
//! operation claimed by this purgatory. It is raised by the claimer before
//! the operation lock is released and lowered by the releaser under that
//! lock, so it never goes below zero. It is striped by thread (see
//! [`StripedCounter`]): the thread watching operations and the one completing
//! them would otherwise write one cache line for every operation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use timer::Timer;

use crate::operation::{DelayedOperation, ExpiryTask};
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

    /// Hands a released operation's slots and timer entry over to be freed
    /// in a batch (see [`RetireQueue`]).
    pub(crate) fn retire(&self, retired: Retired<Op>) {
        self.retired.push(retired, &*self.index, &self.timer);
    }

    /// Frees what this thread has retired and not yet freed.
    pub(crate) fn free_own_retired(&self) {
        self.retired.free_own(&*self.index, &self.timer);
    }

    /// Drops up to two completed operations whose slots and timer entries
    /// are already freed, if any (a watching thread's share; see
    /// [`crate::retire`]).
    pub(crate) fn drop_unlinked(&self) {
        self.retired.drop_unlinked();
    }

    /// Frees everything retired and not yet freed, by any thread, and drops
    /// every completed operation still held.
    pub(crate) fn free_all_retired(&self) {
        self.retired.free_all(&*self.index, &self.timer);
    }

    /// Armed timer entries: the timer's size less the entries of released
    /// operations not yet cancelled.
    pub(crate) fn delayed(&self) -> usize {
        let retired = self.retired.timers();
        self.timer.size().saturating_sub(retired)
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::SeqCst)
    }

    /// Marks the purgatory shut down; returns whether it already was.
    pub(crate) fn mark_shut_down(&self) -> bool {
        self.shut_down.swap(true, Ordering::SeqCst)
    }
}
