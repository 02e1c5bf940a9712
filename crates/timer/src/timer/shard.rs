//! One shard of a [`Timer`]: a wheel behind its own lock, and how adders
//! and the thread advancing the clock take that lock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::{Timer, TimerTask};
use crate::thread_index::thread_index;
use crate::wheel::TimingWheel;

/// One independently locked wheel.
pub(super) struct Shard<T> {
    pub(super) state: Mutex<ShardState<T>>,
    /// Mirror of the wheel's length, refreshed under the lock, so that
    /// `len()` never takes a lock.
    pub(super) size: AtomicUsize,
    /// Set while a thread advancing the clock waits for this shard's lock:
    /// adders then hand the lock over fairly instead of re-taking it at
    /// once, so a tight loop of adds cannot starve expiry.
    pub(super) advancer_waiting: AtomicBool,
}

impl<T> Shard<T> {
    /// Releases the shard, handing it straight to a waiting advancer if any.
    pub(super) fn release(&self, state: MutexGuard<'_, ShardState<T>>) {
        if self.advancer_waiting.load(Ordering::Relaxed) {
            MutexGuard::unlock_fair(state);
        } else {
            drop(state);
        }
    }

    /// Takes the shard's lock on behalf of a thread advancing the clock.
    pub(super) fn lock_for_advance(&self) -> MutexGuard<'_, ShardState<T>> {
        if let Some(state) = self.state.try_lock() {
            return state;
        }
        self.advancer_waiting.store(true, Ordering::Relaxed);
        let state = self.state.lock();
        self.advancer_waiting.store(false, Ordering::Relaxed);
        state
    }
}

pub(super) struct ShardState<T> {
    pub(super) wheel: TimingWheel<T>,
    /// Due time of this shard's latest wake-up in the timer's queue (no later
    /// than its earliest queued bucket), or `u64::MAX` when none is needed.
    pub(super) armed: u64,
    /// Due times of this shard's wake-ups in the timer's queue: `armed`,
    /// and those an add made stale by arming the shard sooner (the queue
    /// cannot take an item out). A re-arm for a time already queued queues
    /// nothing, so that stale wake-ups do not pile up at one time. The
    /// wake-up a visit took stays listed until the visit re-arms, since a
    /// visit that unwinds puts it back.
    pub(super) queued: Vec<u64>,
    /// The share of background passes left for one millisecond of the clock
    /// `(ms, entries)`: a visit that yields to another shard and comes back
    /// within that millisecond resumes it rather than starting a new one.
    pub(super) share: Option<(u64, usize)>,
}

impl<T> ShardState<T> {
    /// Arms the shard for `due`; returns whether the timer's queue needs a
    /// wake-up for it (none is queued for that time yet).
    pub(super) fn arm(&mut self, due: u64) -> bool {
        self.armed = due;
        if due == u64::MAX || self.queued.contains(&due) {
            return false;
        }
        self.queued.push(due);
        true
    }

    /// Notes that the wake-up due at `due` has left the timer's queue.
    pub(super) fn unqueue(&mut self, due: u64) {
        if let Some(at) = self.queued.iter().position(|&q| q == due) {
            self.queued.swap_remove(at);
        }
    }
}

impl<T: TimerTask> Timer<T> {
    /// Locks a shard for an add: the calling thread's own, or, if another
    /// thread holds that one, the first other shard that is free at once.
    /// A task may live in any shard (its handle names the shard), so an
    /// adder need not wait behind a batch of cancels or an advance while
    /// another wheel is idle. Blocks on its own shard only when every shard
    /// is busy.
    pub(super) fn lock_for_add(&self) -> (usize, MutexGuard<'_, ShardState<T>>) {
        let n = self.shards.len();
        let own = thread_index() % n;
        if let Some(state) = self.shards[own].state.try_lock() {
            return (own, state);
        }
        for step in 1..n {
            let index = (own + step) % n;
            if let Some(state) = self.shards[index].state.try_lock() {
                return (index, state);
            }
        }
        (own, self.shards[own].state.lock())
    }
}
