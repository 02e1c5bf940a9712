//! The part of a purgatory that a watched operation points back to.
//!
//! [`Operation`](crate::Operation) is generic over the operation type only,
//! not over the key type, so what an operation needs to leave its purgatory
//! on its own (when force-completed, expired or cancelled) lives here,
//! without the keys: the timer (to disarm it), the watch index behind a
//! key-type-erased trait object (to leave its lists), the watched counter
//! and the name (for logs).
//!
//! Invariant: `watched` equals the number of watch-list entries of every
//! operation claimed by this purgatory. It is raised by the claimer before
//! the operation lock is released and lowered by the releaser under that
//! lock, so it never goes below zero.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use timer::Timer;

use crate::operation::{DelayedOperation, ExpiryTask};
use crate::watch::ErasedIndex;

pub(crate) struct Home<Op: DelayedOperation> {
    pub(crate) name: String,
    pub(crate) timer: Arc<Timer<ExpiryTask<Op>>>,
    /// The purgatory's watch lists, reached without the key type.
    pub(crate) index: Arc<dyn ErasedIndex<Op>>,
    watched: CachePadded<AtomicUsize>,
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
            watched: CachePadded::new(AtomicUsize::new(0)),
            shut_down: AtomicBool::new(false),
        }
    }

    pub(crate) fn watched(&self) -> usize {
        self.watched.load(Ordering::Relaxed)
    }

    pub(crate) fn add_watched(&self, n: usize) {
        self.watched.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn sub_watched(&self, n: usize) {
        self.watched.fetch_sub(n, Ordering::Relaxed);
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::SeqCst)
    }

    /// Marks the purgatory shut down; returns whether it already was.
    pub(crate) fn mark_shut_down(&self) -> bool {
        self.shut_down.swap(true, Ordering::SeqCst)
    }
}
