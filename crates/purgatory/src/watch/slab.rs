//! One key's list of watching operations: a vector of slots with a free
//! list, so an operation leaves it in O(1) through the slot it kept.

use std::sync::{Arc, Weak};

use crate::operation::{DelayedOperation, Shared};

/// No free slot.
pub(super) const NIL: u32 = u32::MAX;

pub(super) enum Slot<Op: DelayedOperation> {
    /// Weak: the purgatory's strong reference is the operation's own (see
    /// the `release` module).
    Occupied(Weak<Shared<Op>>),
    Vacant {
        next_free: u32,
    },
}

/// The entries of one list.
pub(super) struct Slab<Op: DelayedOperation> {
    pub(super) slots: Vec<Slot<Op>>,
    free: u32,
    pub(super) live: usize,
}

impl<Op: DelayedOperation> Slab<Op> {
    pub(super) fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: NIL,
            live: 0,
        }
    }

    pub(super) fn insert(&mut self, op: Weak<Shared<Op>>) -> u32 {
        self.live += 1;
        if self.free != NIL {
            let slot = self.free;
            match std::mem::replace(&mut self.slots[slot as usize], Slot::Occupied(op)) {
                Slot::Vacant { next_free } => self.free = next_free,
                Slot::Occupied(_) => unreachable!("the free list points at an occupied slot"),
            }
            // The slot the next insert reuses, often freed just now by the
            // thread completing operations: start bringing its line over.
            if let Some(next) = self.slots.get(self.free as usize) {
                timer::internal::prefetch(next);
            }
            slot
        } else {
            let slot = u32::try_from(self.slots.len())
                .ok()
                .filter(|&s| s != NIL)
                .expect("more than 4 billion operations watched on one key");
            self.slots.push(Slot::Occupied(op));
            slot
        }
    }

    /// Frees `slot` if `op` occupies it, returning the entry's reference so
    /// that the caller can drop it after unlocking.
    pub(super) fn remove(&mut self, slot: u32, op: *const Shared<Op>) -> Option<Weak<Shared<Op>>> {
        let entry = self.slots.get_mut(slot as usize)?;
        match entry {
            Slot::Occupied(o) if std::ptr::eq(o.as_ptr(), op) => {}
            _ => return None,
        }
        let old = std::mem::replace(
            entry,
            Slot::Vacant {
                next_free: self.free,
            },
        );
        self.free = slot;
        self.live -= 1;
        match old {
            Slot::Occupied(o) => Some(o),
            Slot::Vacant { .. } => None,
        }
    }

    /// Copies every entry still alive (those whose operation nobody holds
    /// any more have left and are skipped).
    pub(super) fn copy_all(&self, out: &mut Vec<Arc<Shared<Op>>>) {
        out.reserve(self.live);
        out.extend(self.slots.iter().filter_map(|s| match s {
            Slot::Occupied(op) => op.upgrade(),
            Slot::Vacant { .. } => None,
        }));
    }
}
