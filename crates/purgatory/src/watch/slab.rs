//! One key's list of watching operations: a vector of slots and a stack of
//! the free ones, so an operation leaves it in O(1) through the slot it
//! kept.
//!
//! A slot is one pointer (8 bytes): an occupied slot holds the operation's
//! weak reference, a vacant one nothing, and the vacant slots' indices wait
//! on their own stack (4 bytes each, only while vacant) rather than being
//! threaded through the slots, which would make every slot as large as a
//! pointer and an index with a tag (16 bytes).

use std::sync::{Arc, Weak};

use crate::operation::{DelayedOperation, Shared};

/// Weak: the purgatory's strong reference is the operation's own (see the
/// `release` module). `None`: vacant, its index on the free stack.
pub(super) type Slot<Op> = Option<Weak<Shared<Op>>>;

/// The most slots an emptied slab may have room for and still be kept for
/// reuse ([`Slab::recycle`]): a shard keeps one, so this bounds what an
/// idle shard holds.
pub(super) const RECYCLE_MAX: usize = 16;

/// The entries of one list.
///
/// Invariant: `free` holds each vacant slot's index exactly once, and
/// nothing else.
pub(super) struct Slab<Op: DelayedOperation> {
    pub(super) slots: Vec<Slot<Op>>,
    /// Vacant slots, the most recently freed last (reused first: its line
    /// is the likeliest to be in cache).
    free: Vec<u32>,
}

impl<Op: DelayedOperation> Slab<Op> {
    pub(super) fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// This slab, emptied (every slot vacant) and kept for another list, if
    /// its room is small: a key whose list empties and fills again (a
    /// heartbeat's member, one operation at a time) then allocates nothing.
    pub(super) fn recycle(mut self) -> Option<Self> {
        debug_assert_eq!(self.live(), 0, "recycling a list still watched");
        if self.slots.capacity() > RECYCLE_MAX || self.free.capacity() > RECYCLE_MAX {
            return None;
        }
        self.slots.clear();
        self.free.clear();
        Some(self)
    }

    /// Number of occupied slots.
    pub(super) fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub(super) fn insert(&mut self, op: Weak<Shared<Op>>) -> u32 {
        if let Some(slot) = self.free.pop() {
            let old = self.slots[slot as usize].replace(op);
            debug_assert!(old.is_none(), "the free stack named an occupied slot");
            // The slot the next insert reuses, often freed just now by the
            // thread completing operations: start bringing its line over.
            if let Some(&next) = self.free.last() {
                timer::internal::prefetch(&self.slots[next as usize]);
            }
            slot
        } else {
            let slot = u32::try_from(self.slots.len())
                .ok()
                .filter(|&s| s != u32::MAX)
                .expect("more than 4 billion operations watched on one key");
            self.slots.push(Some(op));
            slot
        }
    }

    /// Frees `slot` if `op` occupies it, returning the entry's reference so
    /// that the caller can drop it after unlocking.
    ///
    /// The last slot is popped rather than put on the free stack: most
    /// lists hold a few operations (a key's one heartbeat or fetch), and
    /// popping leaves the free stack untouched (neither its cache line nor
    /// an allocation for it). Only occupied slots are popped, so every
    /// index on the stack stays below the length.
    pub(super) fn remove(&mut self, slot: u32, op: *const Shared<Op>) -> Option<Weak<Shared<Op>>> {
        let last = slot as usize + 1 == self.slots.len();
        let entry = self.slots.get_mut(slot as usize)?;
        if !entry.as_ref().is_some_and(|o| std::ptr::eq(o.as_ptr(), op)) {
            return None;
        }
        if last {
            return self.slots.pop().flatten();
        }
        self.free.push(slot);
        entry.take()
    }

    /// Copies every entry still alive (those whose operation nobody holds
    /// any more have left and are skipped).
    pub(super) fn copy_all(&self, out: &mut Vec<Arc<Shared<Op>>>) {
        out.reserve(self.live());
        out.extend(self.slots.iter().flatten().filter_map(Weak::upgrade));
    }
}
