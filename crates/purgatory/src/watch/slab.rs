//! One key's list of watching operations: its first [`HEAD`] slots in
//! place, the rest in a vector with a stack of its free ones, so an
//! operation leaves it in O(1) through the slot it kept.
//!
//! A slot is one pointer (8 bytes): an occupied slot holds the operation's
//! weak reference, a vacant one nothing. Most lists hold one or two
//! operations (a member's heartbeat expectation, and the next one while it
//! replaces the pending one; a one-partition fetch), so the first slots
//! live in the list itself, beside its key: a lookup that finds the key
//! has them on the lines it just read, and such a list allocates nothing.
//! A vacant head slot is found by looking at both; the vacant slots of the
//! rest (the *tail*) wait on their own stack of indices (4 bytes each, only
//! while vacant) rather than being threaded through the slots, which would
//! make every slot as large as a pointer and an index with a tag.

use std::sync::{Arc, Weak};

use crate::operation::{DelayedOperation, Shared};

/// An operation copied out of a list, with the epoch of the stay the slot
/// it was found in belongs to ([`Shared::stay`], read under the shard
/// lock): what it is done with is for that stay only.
pub(crate) type Found<Op> = (Arc<Shared<Op>>, u32);

/// The operation in `slot`, if anyone still holds it, with its stay. Shard
/// lock held.
pub(super) fn found<Op: DelayedOperation>(slot: &Weak<Shared<Op>>) -> Option<Found<Op>> {
    let op = slot.upgrade()?;
    let stay = op.stay();
    Some((op, stay))
}

/// Weak: the purgatory's strong reference is the operation's own (see the
/// `release` module). `None`: vacant.
pub(super) type Slot<Op> = Option<Weak<Shared<Op>>>;

/// How many slots a list keeps in place: a heartbeat's member list holds
/// the pending expectation and, while it is replaced, the next one.
pub(super) const HEAD: usize = 2;

/// The most slots an emptied slab's tail may have room for and still be
/// kept for reuse ([`Slab::recycle`]): a shard keeps a few, so this bounds
/// what an idle shard holds.
pub(super) const RECYCLE_MAX: usize = 16;

/// The entries of one list: slots `0..HEAD` in `head`, slot `HEAD + i` at
/// `tail[i]`.
///
/// Invariants: `free` holds each vacant tail slot's index exactly once, and
/// nothing else; `live` counts the occupied slots.
pub(super) struct Slab<Op: DelayedOperation> {
    head: [Slot<Op>; HEAD],
    tail: Vec<Slot<Op>>,
    /// Vacant tail slots, the most recently freed last (reused first: its
    /// line is the likeliest to be in cache).
    free: Vec<u32>,
    live: u32,
}

impl<Op: DelayedOperation> Slab<Op> {
    pub(super) fn new() -> Self {
        Slab {
            head: [None, None],
            tail: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }

    /// This slab, emptied (every slot vacant) and kept for another list, if
    /// it has a tail with little room: a key whose list grows past its head
    /// and empties again then allocates nothing. A slab without a tail is
    /// not kept: a new one costs nothing either.
    pub(super) fn recycle(mut self) -> Option<Self> {
        debug_assert_eq!(self.live(), 0, "recycling a list still watched");
        let room = self.tail.capacity().max(self.free.capacity());
        if room == 0 || room > RECYCLE_MAX {
            return None;
        }
        self.tail.clear();
        self.free.clear();
        Some(self)
    }

    /// Number of occupied slots.
    pub(super) fn live(&self) -> usize {
        self.live as usize
    }

    /// One past the highest slot index in use.
    pub(super) fn len(&self) -> usize {
        HEAD + self.tail.len()
    }

    /// The slots from index `from` (below [`len`](Self::len)) to the end
    /// of the head or of the tail, whichever holds `from`.
    pub(super) fn run_from(&self, from: usize) -> &[Slot<Op>] {
        match from.checked_sub(HEAD) {
            None => &self.head[from..],
            Some(i) => &self.tail[i..],
        }
    }

    /// The slot at `index`, if it is in use.
    pub(super) fn get(&self, index: u32) -> Option<&Slot<Op>> {
        let index = index as usize;
        match index.checked_sub(HEAD) {
            None => self.head.get(index),
            Some(i) => self.tail.get(i),
        }
    }

    pub(super) fn insert(&mut self, op: Weak<Shared<Op>>) -> u32 {
        let slot = self.place(op);
        self.live += 1;
        slot
    }

    /// Puts `op` in a vacant slot (the head's first, then the one freed
    /// last) or a new one at the end; returns its index.
    fn place(&mut self, op: Weak<Shared<Op>>) -> u32 {
        if let Some(i) = self.head.iter().position(Option::is_none) {
            self.head[i] = Some(op);
            return i as u32;
        }
        if let Some(slot) = self.free.pop() {
            let old = self.tail[slot as usize - HEAD].replace(op);
            debug_assert!(old.is_none(), "the free stack named an occupied slot");
            // The slot the next insert reuses, often freed just now by the
            // thread completing operations: start bringing its line over.
            if let Some(&next) = self.free.last() {
                timer::internal::prefetch(&self.tail[next as usize - HEAD]);
            }
            slot
        } else {
            let slot = u32::try_from(HEAD + self.tail.len())
                .ok()
                .filter(|&s| s != u32::MAX)
                .expect("more than 4 billion operations watched on one key");
            self.tail.push(Some(op));
            slot
        }
    }

    /// The other operation of a list that has only its head, if `slot` is
    /// one of the head's and the other is occupied.
    pub(super) fn head_neighbour(&self, slot: u32) -> Option<&Weak<Shared<Op>>> {
        if !self.tail.is_empty() || slot as usize >= HEAD {
            return None;
        }
        self.head[(slot as usize + 1) % HEAD].as_ref()
    }

    /// Frees `slot` if `op` occupies it, returning the entry's reference so
    /// that the caller can drop it after unlocking.
    ///
    /// A head slot is simply emptied. The tail's last slot is popped rather
    /// than put on the free stack: popping leaves the free stack untouched
    /// (neither its cache line nor an allocation for it). Only occupied
    /// slots are popped, so every index on the stack stays below the
    /// length.
    pub(super) fn remove(&mut self, slot: u32, op: *const Shared<Op>) -> Option<Weak<Shared<Op>>> {
        let index = slot as usize;
        let last = index + 1 == self.len() && index >= HEAD;
        let entry = match index.checked_sub(HEAD) {
            None => &mut self.head[index],
            Some(i) => self.tail.get_mut(i)?,
        };
        if !entry.as_ref().is_some_and(|o| std::ptr::eq(o.as_ptr(), op)) {
            return None;
        }
        self.live -= 1;
        if last {
            return self.tail.pop().flatten();
        }
        let taken = entry.take();
        if index >= HEAD {
            self.free.push(slot);
        }
        taken
    }

    /// Copies every entry still alive (those whose operation nobody holds
    /// any more have left and are skipped), each with its stay (see
    /// [`Found`]). Shard lock held.
    pub(super) fn copy_all(&self, out: &mut Vec<Found<Op>>) {
        out.reserve(self.live());
        let slots = self.head.iter().chain(&self.tail);
        out.extend(slots.flatten().filter_map(found));
    }
}
