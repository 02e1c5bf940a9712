//! Retired operations: operations that have left the purgatory (completed,
//! expired or cancelled) whose watch-list slots and timer entries are still
//! to be freed, and the batches in which they are freed.
//!
//! Freeing an operation's slots means one lock hold per key and one for the
//! timer. Done one operation at a time, a thread completing operations takes
//! the same few locks several times per operation, alternately with the
//! threads watching new operations under the same keys, and every hand-over
//! moves the lock's cache line from one core to the other. So the thread
//! that released an operation appends it to its stripe of the
//! [`RetireQueue`], and once the stripe holds [`RETIRE_BATCH`] operations it
//! frees the whole batch: the slots grouped by shard, each shard locked once
//! per 16 slots; the timer entries cancelled with one lock hold per timer
//! shard and 16 entries.
//!
//! Slots, timer entries and retired entries hold the operation *weakly*
//! (the purgatory's one strong reference is the operation's own, taken back
//! when it leaves: see the `release` module). So what lingers here is memory
//! only: the operation's value has been dropped once nobody else holds it,
//! and no user code runs when these references go.
//!
//! # Invariants
//!
//! * A retired operation has left: it is not watched, its links are empty,
//!   it is not counted in the purgatory's `watched`. Its slots still point
//!   at it until its batch is freed, but a scan skips it (it is not
//!   pending, or gone) and so do `cancel_for_key` and shutdown (it is not
//!   claimed); a timer entry of it that fires finds it completed, unclaimed
//!   or gone, and does nothing.
//! * Each membership and timer handle of a retired operation is in exactly
//!   one retired entry, and only the freeing of that entry frees it.
//! * Between calls a stripe holds fewer than [`RETIRE_BATCH`] operations.
//! * A stripe's batch is taken and freed in one hold of the stripe's lock.
//!   So once [`RetireQueue::free_own`] has its stripe's lock, whatever the
//!   calling thread retired earlier is free: still in the batch, which it
//!   frees, or freed by a thread sharing the stripe, which it waited for.
//! * A cancelled operation is not batched: its slots and timer entry are
//!   freed as it leaves, under its lock. It may be watched again (here or
//!   in another purgatory) as soon as that lock is released: its outcome
//!   says so already, and the canceller may still be cancelling others.
//!   The watch takes the lock first, so by then the old slots are gone, and
//!   no check or `cancel_for_key` of a key it left finds it through them.
//!   (A completed or expired operation is never watched again, so its
//!   slots may wait for a batch. One cancelled by its own watch's key
//!   iterator before the watch attached it has its slots freed by that
//!   watch, under the same hold of its lock, and stays claimed until then.)
//! * Lock order: a stripe's lock is taken only by these methods, called
//!   with no watch-list or timer lock held (an operation's lock may be:
//!   an operation retires as it leaves); under it they take the
//!   watch-list shards' locks, the timer's shard locks and the unlinked
//!   queue's lock, none of which runs user code (everything freed here
//!   holds the operation weakly). The unlinked queue's lock is a leaf.
//!
//! # Where the memory goes back
//!
//! Once a batch is freed, its retired entries hold the last weak references
//! to operations nobody else holds (and the memberships of operations with
//! many keys, allocated by the watching thread too). They go to a short
//! queue of *unlinked* operations, and each watch drops up to [`DROPS_PER_WATCH`] of them, so
//! that an operation's memory usually returns to the allocator on a thread
//! that allocates operations. (With glibc's malloc a block freed by another
//! thread than the one that allocated it goes back through the allocating
//! arena's lock.) The queue holds at most [`UNLINKED_MAX`]; what does not
//! fit is let go at once. [`RetireQueue::free_all`] empties everything.
//! A thread that watches operations itself (a request handler that checks
//! one key and watches the next operation, as a heartbeat does) lets go of
//! the operations it frees at once instead: they are on an allocating
//! thread already, and queueing them would only trade the queue's lock
//! between such threads on every call.
//! The spill room of an operation with more keys than fit in place (see
//! [`Members`]) is not let go there but handed to the watch being made, if
//! it needs room of that size: a workload whose operations all have a few
//! keys then allocates none for them in a steady state.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Weak;

use crossbeam_utils::CachePadded;
use timer::{Timer, TimerHandle, TimerTask};

use crate::members::{Members, Spill};
use crate::operation::{DelayedOperation, Shared};
use crate::stripe;
use crate::sync::{AtomicUsize, Mutex, Ordering};

/// How many released operations a stripe collects before freeing them.
///
/// Large enough that the per-batch lock holds are rare next to the
/// per-operation work (three keys and a timer: four lock holds per 64
/// operations instead of per operation), small enough that a batch's slots
/// still sit in cache when freed.
pub(crate) const RETIRE_BATCH: usize = 64;

/// How many unlinked operations may wait for a watching thread: eight
/// batches.
pub(crate) const UNLINKED_MAX: usize = 8 * RETIRE_BATCH;

/// How many unlinked operations each watch lets go of (when there are any).
/// More than one, so that the queue stays short in a steady state.
pub(crate) const DROPS_PER_WATCH: usize = 2;

thread_local! {
    /// Whether this thread has watched an operation (see the module docs).
    static WATCHES: Cell<bool> = const { Cell::new(false) };
}

/// One operation that has left, with what is still to be freed.
pub(crate) struct Retired<Op: DelayedOperation> {
    pub(crate) op: Weak<Shared<Op>>,
    pub(crate) members: Members,
    /// Its timer entry, to be cancelled (`None` when it fired or never was).
    pub(crate) timer: Option<TimerHandle>,
}

/// What the retire queue needs from the watch index: freeing slots. (The
/// index sits above this module and implements it.)
pub(crate) trait Unwatch<Op: DelayedOperation>: Send + Sync {
    /// Frees the slots of every retired operation in `batch` (each occupies
    /// every slot of its memberships), locking each shard once.
    fn unwatch_batch(&self, batch: &[Retired<Op>]);
}

/// One stripe: the operations its threads retired, and room for the
/// timer handles of the batch being freed, kept so that freeing a batch
/// allocates nothing in a steady state.
struct Stripe<Op: DelayedOperation> {
    batch: Vec<Retired<Op>>,
    handles: Vec<TimerHandle>,
}

type StripeLock<Op> = CachePadded<Mutex<Stripe<Op>>>;

/// An unlinked operation: its last weak reference (empty once let go, see
/// [`RetireQueue::drop_unlinked`]), and its memberships, whose spill room
/// (an operation with many keys) was allocated by a watching thread and
/// so goes back to one too, for reuse.
type Unlinked<Op> = (Weak<Shared<Op>>, Members);

/// Retired operations waiting to be freed, striped by thread, and unlinked
/// operations waiting for their memory to be let go.
pub(crate) struct RetireQueue<Op: DelayedOperation> {
    stripes: Box<[StripeLock<Op>]>,
    /// Oldest first. Allocated once with room for [`UNLINKED_MAX`], so
    /// queueing never allocates.
    unlinked: CachePadded<Mutex<VecDeque<Unlinked<Op>>>>,
    /// `unlinked.len()`, readable without its lock; changed only under it.
    unlinked_len: AtomicUsize,
}

impl<Op: DelayedOperation> RetireQueue<Op> {
    pub(crate) fn new() -> Self {
        RetireQueue {
            stripes: (0..stripe::count())
                .map(|_| {
                    CachePadded::new(Mutex::new(Stripe {
                        batch: Vec::new(),
                        handles: Vec::new(),
                    }))
                })
                .collect(),
            unlinked: CachePadded::new(Mutex::new(VecDeque::with_capacity(UNLINKED_MAX))),
            unlinked_len: AtomicUsize::new(0),
        }
    }

    /// Appends `retired` to this thread's stripe, freeing the stripe's batch
    /// if it is full.
    pub(crate) fn push<T: TimerTask>(
        &self,
        retired: Retired<Op>,
        index: &dyn Unwatch<Op>,
        timer: &Timer<T>,
    ) {
        let mut stripe = stripe::own(&self.stripes).lock();
        if stripe.batch.capacity() == 0 {
            // A full batch's room at once, rather than doubling up to it.
            stripe.batch.reserve_exact(RETIRE_BATCH);
        }
        stripe.batch.push(retired);
        if stripe.batch.len() == RETIRE_BATCH {
            self.free_stripe(&mut stripe, index, timer);
        }
    }

    /// Frees `retired` at once, by itself, and lets go of it: a cancelled
    /// operation, which may be watched again as soon as its lock is
    /// released (see the module invariants), or the lists a failed watch
    /// joined.
    pub(crate) fn free_now<T: TimerTask>(
        retired: Retired<Op>,
        index: &dyn Unwatch<Op>,
        timer: &Timer<T>,
    ) {
        if let Some(handle) = &retired.timer {
            timer.cancel(handle);
        }
        index.unwatch_batch(std::slice::from_ref(&retired));
    }

    /// Frees what this thread's stripe holds: once it returns, every
    /// operation this thread retired has left its watch lists and timer,
    /// whichever thread sharing the stripe freed it (see the module
    /// invariants).
    pub(crate) fn free_own<T: TimerTask>(&self, index: &dyn Unwatch<Op>, timer: &Timer<T>) {
        let mut stripe = stripe::own(&self.stripes).lock();
        self.free_stripe(&mut stripe, index, timer);
    }

    /// Frees `stripe`'s batch, its lock held; keeps the vectors' room.
    fn free_stripe<T: TimerTask>(
        &self,
        stripe: &mut Stripe<Op>,
        index: &dyn Unwatch<Op>,
        timer: &Timer<T>,
    ) {
        let Stripe { batch, handles } = stripe;
        self.free(batch, handles, index, timer);
        // What did not fit in the unlinked queue (usually nothing) goes
        // here, on the thread whose stripe allocated it.
        batch.clear();
        handles.clear();
    }

    /// Frees what every stripe holds; then, if `let_go`, lets go of every
    /// unlinked operation too. Each stripe gives its room back.
    pub(crate) fn free_all<T: TimerTask>(
        &self,
        index: &dyn Unwatch<Op>,
        timer: &Timer<T>,
        let_go: bool,
    ) {
        for stripe in self.stripes.iter() {
            let mut stripe = stripe.lock();
            self.free_stripe(&mut stripe, index, timer);
            stripe.batch = Vec::new();
            stripe.handles = Vec::new();
        }
        if let_go {
            let all: Vec<_> = {
                let mut queue = self.unlinked.lock();
                self.unlinked_len.store(0, Ordering::Relaxed);
                queue.drain(..).collect()
            };
            drop(all);
        }
    }

    /// Lets go of up to [`DROPS_PER_WATCH`] unlinked operations, oldest
    /// first: called by a thread about to watch an operation whose
    /// memberships need `room` spill room. Returns the first spill room of
    /// exactly that size they had, for the operation to reuse.
    ///
    /// A second spill room of that size is not let go: its entry stays at
    /// the front, holding only the spill (its operation's reference is let
    /// go now), for the next watch with the same need. So a workload whose
    /// operations all have the same few keys reuses every spill.
    pub(crate) fn drop_unlinked(&self, room: usize) -> Option<Spill> {
        WATCHES.with(|watches| watches.set(true));
        // Relaxed: a stale zero only leaves the operations for the next call.
        if self.unlinked_len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut ops: [Weak<Shared<Op>>; DROPS_PER_WATCH] = Default::default();
        let mut spills: [Option<Members>; DROPS_PER_WATCH] = Default::default();
        let mut spare = None;
        {
            let mut queue = self.unlinked.lock();
            for (op, spill) in ops.iter_mut().zip(&mut spills) {
                let Some((front_op, front)) = queue.front_mut() else {
                    break;
                };
                *op = std::mem::take(front_op);
                let fits = room > 0 && front.spill_room() == room;
                if fits && spare.is_some() {
                    break;
                }
                let (_, members) = queue.pop_front().expect("a front");
                if fits {
                    spare = members.into_spill();
                } else {
                    *spill = Some(members);
                }
            }
            self.unlinked_len.store(queue.len(), Ordering::Relaxed);
        }
        // The operations' memory and unused spills go here, unlocked.
        drop((ops, spills));
        spare
    }

    /// Frees the slots and cancels the timer entries of `batch`, then,
    /// unless this thread watches operations itself, queues its operations'
    /// last references for a watching thread, taking them out of `batch`
    /// (what does not fit stays). `handles` (empty) is room for the timer
    /// handles. Called with the batch's stripe locked.
    fn free<T: TimerTask>(
        &self,
        batch: &mut Vec<Retired<Op>>,
        handles: &mut Vec<TimerHandle>,
        index: &dyn Unwatch<Op>,
        timer: &Timer<T>,
    ) {
        if batch.is_empty() {
            return;
        }
        handles.extend(batch.iter().filter_map(|r| r.timer));
        if !handles.is_empty() {
            timer.cancel_all(handles);
        }
        index.unwatch_batch(batch);
        if WATCHES.with(Cell::get) {
            // Let go by the caller (see the module docs).
            return;
        }
        let mut queue = self.unlinked.lock();
        let room = UNLINKED_MAX.saturating_sub(queue.len());
        let unlinked = batch.drain(..room.min(batch.len()));
        queue.extend(unlinked.map(|r| (r.op, r.members)));
        self.unlinked_len.store(queue.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Weak};
    use std::thread;
    use std::time::Duration;

    use timer::ManualClock;

    use crate::operation::Shared;
    use crate::{DelayedOperation, Operation, Purgatory};

    /// Completes once told to.
    #[derive(Default)]
    struct Ready(AtomicBool);

    impl Ready {
        fn set(&self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    impl DelayedOperation for Ready {
        fn timeout(&self) -> Duration {
            Duration::from_secs(3600)
        }
        fn try_complete(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
        fn on_complete(&self) {}
    }

    /// Watches an operation under `key` on this thread; returns a weak
    /// reference to its allocation, and the operation to complete.
    fn watch(p: &Purgatory<u32, Ready>, key: u32) -> (Weak<Shared<Ready>>, Operation<Ready>) {
        let op = Operation::new(Ready::default());
        let weak = Arc::downgrade(&op.0);
        assert_eq!(p.try_complete_else_watch(op.clone(), [key]), Ok(false));
        (weak, op)
    }

    #[test]
    fn a_watching_thread_lets_go_of_what_it_frees_and_another_queues_it() {
        let p: Purgatory<u32, Ready> = Purgatory::builder("retire")
            .clock(ManualClock::new())
            .reaper(false)
            .build()
            .expect("purgatory");
        // Checked on the thread that watches: the purgatory's last weak
        // reference goes with the check; only this test's are left (the
        // test keeps the operation, so the counts stay readable).
        let (weak, op) = watch(&p, 1);
        op.set();
        assert_eq!(p.check_and_complete(&1), 1);
        assert_eq!(weak.weak_count(), 1, "let go by the checking thread");
        // Checked on a thread that never watches: queued for a watching
        // thread, which lets go of it with its next watch.
        let (weak, op2) = watch(&p, 2);
        op2.set();
        thread::scope(|s| {
            s.spawn(|| assert_eq!(p.check_and_complete(&2), 1));
        });
        assert_eq!(weak.weak_count(), 2, "queued, for a watching thread");
        let _next = watch(&p, 3);
        assert_eq!(weak.weak_count(), 1, "let go by the next watch");
        drop((op, op2));
    }
}
