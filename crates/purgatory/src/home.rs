//! The part of a purgatory that a watched operation points back to, as its
//! [`Owner`]: what an operation needs to leave on its own (when forced,
//! expired or cancelled) without the key type: the timer (to disarm it),
//! the watch index behind the retire queue's [`Unwatch`] trait (to free its
//! slots), the counters, and the name (for logs).
//!
//! Invariants: `watched` equals the number of watch-list entries of every
//! operation claimed by this purgatory. It is raised by the claimer before
//! the operation lock is released and lowered by the operation's leaving,
//! under that lock, so it never goes below zero. `armed` equals the number
//! of claimed operations whose timer handle is stored in their links:
//! raised under the links' mutex when the handle is stored, lowered by the
//! leaving that takes it out. Both are striped by thread (see
//! [`StripedCounter`]): the thread watching operations and the one
//! completing them would otherwise write one cache line per operation. The
//! outcome counts only grow.

use std::sync::Arc;
use std::time::{Duration, Instant};

use timer::internal::ShutdownGate;
use timer::{Timer, TimerHandle};

use crate::members::{Members, Spill};
use crate::operation::{DelayedOperation, Owner, OwnerRef, Shared};
use crate::outcome::Outcome;
use crate::release::ExpiryTask;
use crate::retire::{RetireQueue, Retired, Unwatch};
use crate::stats::{Metrics, PurgatoryStats, Site};
use crate::stripe::StripedCounter;
use crate::sync::{AtomicBool, Ordering};

pub(crate) struct Home<Op: DelayedOperation> {
    /// The purgatory's name and its count of callbacks that panicked.
    pub(crate) site: Site,
    pub(crate) timer: Arc<Timer<ExpiryTask<Op>>>,
    /// The purgatory's watch lists, reached without the key type.
    index: Arc<dyn Unwatch<Op>>,
    retired: RetireQueue<Op>,
    watched: StripedCounter,
    armed: StripedCounter,
    completed: StripedCounter,
    expired: StripedCounter,
    cancelled: StripedCounter,
    metrics: Metrics,
    shut_down: AtomicBool,
    /// Lets one `shutdown` through, and has the others wait for it.
    pub(crate) shutdown_gate: ShutdownGate,
}

impl<Op: DelayedOperation> Home<Op> {
    pub(crate) fn new(
        name: String,
        timer: Arc<Timer<ExpiryTask<Op>>>,
        index: Arc<dyn Unwatch<Op>>,
    ) -> Self {
        Home {
            metrics: Metrics::new(&name),
            site: Site::new(name),
            timer,
            index,
            retired: RetireQueue::new(),
            watched: StripedCounter::new(),
            armed: StripedCounter::new(),
            completed: StripedCounter::new(),
            expired: StripedCounter::new(),
            cancelled: StripedCounter::new(),
            shut_down: AtomicBool::new(false),
            shutdown_gate: ShutdownGate::new(),
        }
    }

    /// This home as an operation's owner (made once per purgatory and
    /// shared by its operations), and its address (for
    /// `Shared::is_claimed_by`).
    pub(crate) fn as_owner(self: &Arc<Self>) -> OwnerRef<Op> {
        Arc::new(self.clone())
    }

    pub(crate) fn addr(self: &Arc<Self>) -> *const () {
        Arc::as_ptr(self).cast()
    }

    pub(crate) fn name(&self) -> &str {
        &self.site.name
    }

    pub(crate) fn add_watched(&self, n: usize) {
        self.watched.add(n);
    }

    /// Counts an operation whose timer handle was just stored.
    pub(crate) fn add_armed(&self) {
        self.armed.add(1);
    }

    /// Counts an operation that left without being claimed (completed by
    /// the first try of `try_complete_else_watch`).
    pub(crate) fn count(&self, outcome: Outcome) {
        match outcome {
            Outcome::Completed => self.completed.add(1),
            Outcome::Expired => {
                self.expired.add(1);
                self.metrics.expired();
            }
            Outcome::Cancelled => self.cancelled.add(1),
        }
    }

    /// Frees what this thread has retired and not yet freed.
    pub(crate) fn free_own_retired(&self) {
        self.retired.free_own(&*self.index, &self.timer);
    }

    /// Lets go of up to two unlinked operations' memory (a watching
    /// thread's share; see [`crate::retire`]); returns spill room of size
    /// `room` one of them had, for reuse.
    pub(crate) fn drop_unlinked(&self, room: usize) -> Option<Spill> {
        self.retired.drop_unlinked(room)
    }

    /// Frees everything retired and not yet freed, by any thread; then, if
    /// `let_go`, the memory of every unlinked operation.
    pub(crate) fn free_all_retired(&self, let_go: bool) {
        self.retired.free_all(&*self.index, &self.timer, let_go);
    }

    pub(crate) fn stats(&self) -> PurgatoryStats {
        let stats = PurgatoryStats {
            watched: self.watched.sum(),
            delayed: self.armed.sum(),
            completed: self.completed.sum(),
            expired: self.expired.sum(),
            cancelled: self.cancelled.sum(),
            panicked: self.site.panicked(),
        };
        self.metrics.publish(stats.watched, stats.delayed);
        stats
    }

    /// Sets the published gauges (with the `metrics` feature; nothing
    /// without it).
    pub(crate) fn publish(&self) {
        if Metrics::ENABLED {
            self.metrics.publish(self.watched(), self.delayed());
        }
    }

    /// What the reaper runs after each advance of the clock: the gauges,
    /// set at most once per `every` (they follow the counts without a
    /// thread of their own; Kafka computes them when scraped, which the
    /// `metrics` facade has no way to ask for). Holds the purgatory weakly,
    /// as the reaper belongs to it.
    pub(crate) fn publisher(self: &Arc<Self>, every: Duration) -> impl FnMut() + Send + 'static {
        let home = Metrics::ENABLED.then(|| Arc::downgrade(self));
        let mut last = Instant::now();
        move || {
            let Some(home) = home.as_ref() else { return };
            if last.elapsed() >= every {
                last = Instant::now();
                if let Some(home) = home.upgrade() {
                    home.publish();
                }
            }
        }
    }

    pub(crate) fn watched(&self) -> usize {
        self.watched.sum()
    }

    pub(crate) fn delayed(&self) -> usize {
        self.armed.sum()
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::SeqCst)
    }

    /// Marks the purgatory shut down: watches are refused from now on.
    pub(crate) fn mark_shut_down(&self) {
        self.shut_down.store(true, Ordering::SeqCst);
    }
}

impl<Op: DelayedOperation> Owner<Op> for Home<Op> {
    fn site(&self) -> &Site {
        &self.site
    }

    fn left(
        &self,
        op: &Arc<Shared<Op>>,
        members: Members,
        timer: Option<TimerHandle>,
        armed: bool,
        outcome: Outcome,
    ) {
        if armed {
            self.armed.sub(1);
        }
        if !members.is_empty() {
            self.watched.sub(members.len());
        }
        self.count(outcome);
        if outcome == Outcome::Expired {
            log::debug!("purgatory {}: an operation expired", self.name());
        }
        if !members.is_empty() || timer.is_some() {
            let retired = Retired {
                op: Arc::downgrade(op),
                members,
                timer,
            };
            if outcome == Outcome::Cancelled {
                RetireQueue::free_now(retired, &*self.index, &self.timer);
            } else {
                self.retired.push(retired, &*self.index, &self.timer);
            }
        }
    }
}
