//! Retired operations: operations already completed or cancelled whose
//! watch-list slots and timer entries are still to be freed, and the batches
//! in which they are freed.
//!
//! Releasing an operation means leaving every watch list it joined and
//! disarming its timer: one lock hold per key and one for the timer. Done one
//! operation at a time, a thread completing operations takes the same few
//! locks several times per operation, alternately with the threads watching
//! new operations under the same keys, and every hand-over moves the lock's
//! cache line from one core to the other. (In Kafka's purgatory workload,
//! W2, this halved the rate at which a thread could add operations while
//! another force-completed them.) So the releasing thread instead appends
//! the operation to its stripe of the [`RetireQueue`], and once the stripe
//! holds [`RETIRE_BATCH`] operations it frees the whole batch: the slots
//! grouped by shard, each shard locked once per 16 slots; the timer entries
//! cancelled with one lock hold per timer shard and 16 entries.
//!
//! # Invariants
//!
//! * A retired operation is already released: no longer watched, its links
//!   empty, no longer counted in the purgatory's `watched`. Its slots still
//!   hold it until its batch is freed, but a scan skips it (it is not
//!   pending) and so do `cancel_for_key` and shutdown (it is not claimed); a
//!   timer entry of it that fires finds it completed or unclaimed and does
//!   nothing.
//! * Each membership and timer handle of a released operation is in exactly
//!   one retired entry, and only the freeing of that entry frees it: a slot is
//!   still freed exactly once, by the holder of its membership, and stays
//!   occupied (so its list stays allocated) until then.
//! * Between calls a stripe holds fewer than [`RETIRE_BATCH`] operations, so
//!   at most `(RETIRE_BATCH - 1) × stripes` released operations linger,
//!   whatever the keys and however many operations complete.
//! * A stripe's lock is a leaf: held only to push an entry or take the batch,
//!   with no other lock taken and no user code run under it. A batch is freed
//!   after it has been taken out, so an operation dropped during the freeing
//!   (user `Drop` code) may release other operations without deadlock.
//!
//! # Where operations are dropped
//!
//! Once a batch's slots are freed and its timer entries cancelled, the batch
//! holds what are usually the last references to its operations. It is not
//! dropped there: it goes to a short queue of *unlinked* operations, and
//! each call that watches an operation
//! ([`try_complete_else_watch`](crate::Purgatory::try_complete_else_watch))
//! drops up to [`DROPS_PER_WATCH`] of them, oldest first. So operations are
//! usually freed by the threads that create them rather than by the threads
//! that complete or expire them, and a few at a time, so that each free is
//! soon followed by an allocation of the same size (the allocator's thread
//! cache serves both).
//!
//! Why: with glibc's malloc, a block freed by another thread than the one
//! that allocated it goes back through the allocating arena's lock, which
//! the allocating thread takes for its next operation too. In Kafka's
//! purgatory workload (W2), one thread watching operations while another
//! force-completed them lost about a third of its rate to that lock, and
//! peak memory doubled. (mimalloc and jemalloc free across threads without
//! such a lock; for them this is a wash.) It also keeps user `Drop` code off
//! the timer's expiration thread, unless the queue is full. The queue holds
//! bare references in a ring allocated once, so queueing allocates nothing
//! and a batch's vector is freed by the thread that filled it.
//!
//! * The queue holds at most [`UNLINKED_MAX`] operations; what does not fit
//!   is dropped by the freeing thread, so at most that many unlinked
//!   operations wait to be dropped, however long no operation is watched.
//!   [`RetireQueue::free_all`] (the purgatory's `purge`, `advance_clock`
//!   and shutdown) drops them all.
//! * Never while the purgatory holds an operation lock on this thread
//!   (counted by `PurgatoryLock`, nested calls included: a callback or a
//!   `try_complete` calling back into the purgatory runs under an outer
//!   frame's lock): what would be dropped then goes to this thread's
//!   stripe's *deferred* list, the purgatory is noted in a thread-local
//!   list, and releasing the thread's outermost purgatory-held lock drops
//!   the deferred lists of every purgatory noted (a callback of one
//!   purgatory may call into another). Calls that end with no lock held
//!   (`force_complete`, an expiry, `try_complete_else_watch`,
//!   `check_and_complete`, `cancel_for_key`) also drop their own
//!   ([`RetireQueue::drop_deferred`]); shutdown purges. A batch
//!   freed by [`RetireQueue::push`] (the releasing thread holds the lock of
//!   the operation it releases) defers what does not fit the same way. So
//!   the deferred lists hold only what calls in progress released, plus
//!   what a count (`watched_on`, `watched_keys`) freed, which it defers to
//!   the stripe it came from rather than run `Drop` code.
//! * Unlinked operations are no longer in any list or the timer: nothing in
//!   the purgatory reaches them any more; only their memory is pending.
//! * The queue's lock is a leaf too, and operations are dropped after being
//!   taken out of it, with no purgatory lock held. A panic in a user `Drop`
//!   there is caught and logged.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use timer::{Timer, TimerHandle};

use crate::operation::{guarded, purgatory_holds_a_lock, DelayedOperation, ExpiryTask, Shared};
use crate::stripe;
use crate::watch::{ErasedIndex, Members};

/// How many released operations a stripe collects before freeing them.
///
/// Large enough that the per-batch lock holds are rare next to the
/// per-operation work (three keys and a timer: four lock holds per 64
/// operations instead of per operation), small enough that the lingering
/// operations stay few and a batch's slots still sit in cache when freed.
pub(crate) const RETIRE_BATCH: usize = 64;

/// How many unlinked operations may wait for a watching thread to drop
/// them: eight batches.
///
/// Every operation released was watched once before, so dropping more than
/// one per watch keeps the queue short in a steady state; the room is for
/// bursts (one `check_and_complete` completing thousands of operations).
pub(crate) const UNLINKED_MAX: usize = 8 * RETIRE_BATCH;

/// How many unlinked operations each watch drops (when there are any).
pub(crate) const DROPS_PER_WATCH: usize = 2;

/// One released operation, kept alive until its slots are freed.
pub(crate) struct Retired<Op: DelayedOperation> {
    pub(crate) op: Arc<Shared<Op>>,
    pub(crate) members: Members,
    /// Its timer entry, to be cancelled (`None` when it fired or never was).
    pub(crate) timer: Option<TimerHandle>,
}

/// One thread stripe: its released operations, and the operations it must
/// drop once the call that unlinked them has released its operation lock.
struct StripeState<Op: DelayedOperation> {
    retired: Vec<Retired<Op>>,
    deferred: Vec<Arc<Shared<Op>>>,
}

/// A stripe behind its lock, on its own cache line.
type Stripe<Op> = CachePadded<Mutex<StripeState<Op>>>;

/// Where a freed batch's operations go when the unlinked queue is full.
enum Overflow<'a, Op: DelayedOperation> {
    /// Dropped now (or, if this thread's purgatory call holds an operation
    /// lock, deferred to its own stripe).
    Drop,
    /// Deferred to this stripe, dropped by the next call of a thread using
    /// it that ends with no operation lock held.
    DeferTo(&'a Stripe<Op>),
}

/// Released operations waiting to be freed, striped by thread, and unlinked
/// operations waiting to be dropped.
pub(crate) struct RetireQueue<Op: DelayedOperation> {
    stripes: Box<[Stripe<Op>]>,
    /// Unlinked operations, oldest first, waiting to be dropped by a
    /// watching thread. Allocated once with room for [`UNLINKED_MAX`] (a
    /// pointer each), so queueing never allocates.
    unlinked: CachePadded<Mutex<VecDeque<Arc<Shared<Op>>>>>,
    /// `unlinked.len()`, readable without its lock; changed only under it.
    unlinked_len: AtomicUsize,
    /// Operations in the stripes' deferred lists (a hint, read without
    /// their locks; changed under them).
    deferred_len: AtomicUsize,
}

impl<Op: DelayedOperation> RetireQueue<Op> {
    /// A queue with [`stripe::count`] stripes, so that threads rarely share
    /// one.
    pub(crate) fn new() -> Self {
        RetireQueue {
            stripes: (0..stripe::count())
                .map(|_| {
                    CachePadded::new(Mutex::new(StripeState {
                        retired: Vec::new(),
                        deferred: Vec::new(),
                    }))
                })
                .collect(),
            unlinked: CachePadded::new(Mutex::new(VecDeque::with_capacity(UNLINKED_MAX))),
            unlinked_len: AtomicUsize::new(0),
            deferred_len: AtomicUsize::new(0),
        }
    }

    fn own_stripe(&self) -> &Stripe<Op> {
        stripe::own(&self.stripes)
    }

    /// Appends `retired` to this thread's stripe, freeing the stripe's batch
    /// if it is full. The caller holds the released operation's lock, so
    /// what the freeing cannot queue is deferred (see the module docs).
    pub(crate) fn push(
        &self,
        retired: Retired<Op>,
        index: &dyn ErasedIndex<Op>,
        timer: &Timer<ExpiryTask<Op>>,
        name: &str,
    ) {
        let stripe = self.own_stripe();
        let full = {
            let mut state = stripe.lock();
            state.retired.push(retired);
            if state.retired.len() >= RETIRE_BATCH {
                // A full batch's room at once, rather than doubling up to
                // it (five reallocations of entries ~100 bytes each).
                std::mem::replace(&mut state.retired, Vec::with_capacity(RETIRE_BATCH))
            } else {
                return;
            }
        };
        self.free(full, index, timer, name, Overflow::DeferTo(stripe));
    }

    /// Frees what this thread's stripe holds, and drops what it deferred
    /// (unless a purgatory call on this thread holds an operation lock).
    pub(crate) fn free_own(
        &self,
        index: &dyn ErasedIndex<Op>,
        timer: &Timer<ExpiryTask<Op>>,
        name: &str,
    ) {
        let batch = std::mem::take(&mut self.own_stripe().lock().retired);
        self.free(batch, index, timer, name, Overflow::Drop);
        self.drop_deferred(name);
    }

    /// Drops what this thread's stripe deferred (see the module docs),
    /// unless a purgatory call on this thread still holds an operation lock
    /// (the outermost call drops it then).
    pub(crate) fn drop_deferred(&self, name: &str) {
        // Relaxed: what this thread deferred, it sees; another thread's
        // deferrals are that thread's to drop.
        if self.deferred_len.load(Ordering::Relaxed) == 0 || purgatory_holds_a_lock() {
            return;
        }
        let deferred = self.take_deferred(self.own_stripe());
        drop_all(name, deferred);
    }

    /// Frees what every stripe holds. Then, if `drop_all_held`, drops
    /// every unlinked and deferred operation (deferring them to this
    /// thread's stripe if a purgatory call on it holds an operation lock);
    /// else what the freeing cannot queue is deferred to the stripe it came
    /// from, so that the caller (a count) runs no `Drop` code.
    pub(crate) fn free_all(
        &self,
        index: &dyn ErasedIndex<Op>,
        timer: &Timer<ExpiryTask<Op>>,
        name: &str,
        drop_all_held: bool,
    ) {
        for stripe in self.stripes.iter() {
            let batch = std::mem::take(&mut stripe.lock().retired);
            let overflow = if drop_all_held {
                Overflow::Drop
            } else {
                Overflow::DeferTo(stripe)
            };
            self.free(batch, index, timer, name, overflow);
        }
        if drop_all_held {
            for stripe in self.stripes.iter() {
                let deferred = self.take_deferred(stripe);
                self.drop_or_defer(name, deferred);
            }
            let all: Vec<_> = {
                let mut queue = self.unlinked.lock();
                self.unlinked_len.store(0, Ordering::Relaxed);
                queue.drain(..).collect()
            };
            self.drop_or_defer(name, all);
        }
    }

    /// Drops up to [`DROPS_PER_WATCH`] unlinked operations, oldest first:
    /// called by a thread about to watch an operation (see the module docs),
    /// unless a purgatory call on it holds an operation lock.
    pub(crate) fn drop_unlinked(&self, name: &str) {
        // Relaxed: a stale zero only leaves the operations for the next call.
        if self.unlinked_len.load(Ordering::Relaxed) == 0 || purgatory_holds_a_lock() {
            return;
        }
        let taken: [Option<Arc<Shared<Op>>>; DROPS_PER_WATCH] = {
            let mut queue = self.unlinked.lock();
            let taken = std::array::from_fn(|_| queue.pop_front());
            self.unlinked_len.store(queue.len(), Ordering::Relaxed);
            taken
        };
        drop_all(name, taken.into_iter().flatten());
    }

    /// Frees the slots and cancels the timer entries of `batch`, then queues
    /// its operations (maybe their last references) to be dropped by a
    /// watching thread; those that do not fit go where `overflow` says.
    fn free(
        &self,
        mut batch: Vec<Retired<Op>>,
        index: &dyn ErasedIndex<Op>,
        timer: &Timer<ExpiryTask<Op>>,
        name: &str,
        overflow: Overflow<'_, Op>,
    ) {
        if batch.is_empty() {
            return;
        }
        let mut handles: Vec<TimerHandle> = Vec::with_capacity(batch.len());
        handles.extend(batch.iter().filter_map(|r| r.timer));
        if !handles.is_empty() {
            timer.cancel_all(&mut handles);
        }
        index.unwatch_batch(&batch);
        {
            let mut queue = self.unlinked.lock();
            let room = UNLINKED_MAX.saturating_sub(queue.len());
            queue.extend(batch.drain(..room.min(batch.len())).map(|r| r.op));
            self.unlinked_len.store(queue.len(), Ordering::Relaxed);
        }
        // What did not fit (usually nothing). The batch's vector is freed
        // here, on the thread whose stripe allocated it.
        if batch.is_empty() {
            return;
        }
        let ops = batch.into_iter().map(|r| r.op);
        match overflow {
            Overflow::Drop => self.drop_or_defer(name, ops),
            Overflow::DeferTo(stripe) => self.defer(stripe, ops),
        }
    }

    /// Whether this thread's stripe holds deferred drops.
    pub(crate) fn has_deferred(&self) -> bool {
        self.deferred_len.load(Ordering::Relaxed) > 0
            && !self.own_stripe().lock().deferred.is_empty()
    }

    /// Drops `ops`, or defers them to this thread's stripe if a purgatory
    /// call on this thread holds an operation lock.
    pub(crate) fn drop_or_defer(&self, name: &str, ops: impl IntoIterator<Item = Arc<Shared<Op>>>) {
        if purgatory_holds_a_lock() {
            self.defer(self.own_stripe(), ops);
        } else {
            drop_all(name, ops);
        }
    }

    fn defer(&self, stripe: &Stripe<Op>, ops: impl IntoIterator<Item = Arc<Shared<Op>>>) {
        let mut state = stripe.lock();
        let before = state.deferred.len();
        state.deferred.extend(ops);
        self.deferred_len
            .fetch_add(state.deferred.len() - before, Ordering::Relaxed);
    }

    fn take_deferred(&self, stripe: &Stripe<Op>) -> Vec<Arc<Shared<Op>>> {
        let mut state = stripe.lock();
        self.deferred_len
            .fetch_sub(state.deferred.len(), Ordering::Relaxed);
        std::mem::take(&mut state.deferred)
    }
}

/// Drops unlinked operations one by one, with no purgatory lock held. A
/// panic in a user `Drop` is logged, not propagated (the caller is in the
/// middle of a purgatory call), and the other operations are still dropped.
fn drop_all<Op: DelayedOperation>(name: &str, ops: impl IntoIterator<Item = Arc<Shared<Op>>>) {
    for op in ops {
        guarded(name, "drop", move || drop(op));
    }
}
