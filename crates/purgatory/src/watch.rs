//! Watch lists: for each key, the operations waiting on it.
//!
//! A [`WatchIndex`] maps keys to [`WatchList`]s in a sharded map
//! ([`dashmap`]), so that unrelated keys never contend. Each list is a slab:
//! a vector of slots with a free list, guarded by its own short-held mutex.
//! An operation remembers, for each key it watches, the list and the slot it
//! occupies (a [`Membership`]), so leaving a list is O(1): no scan, no purge.
//!
//! # Invariants
//!
//! * Lock order: shard lock, then list lock. The operation lock, when held,
//!   is taken before both. No user code runs with a shard or list lock held.
//! * A slot is freed only by the thread that *releases* the operation that
//!   occupies it (under the operation's lock), so slot indices are stable for
//!   an operation's whole stay and need no generation.
//! * A list in the map is never empty: it is created with its first entry,
//!   under the shard lock, and the thread that frees its last slot removes it
//!   from the map (under the shard lock, re-checking that it is still empty
//!   and still the key's list). A list removed from the map is *detached*:
//!   nothing is added to it again.
//! * [`WatchList::snapshot_from`] copies (clones the `Arc`s of) a chunk of
//!   pending operations under the list lock and returns; callers run
//!   callbacks on the copy, without the lock. An operation present when a
//!   scan starts keeps its slot until it leaves, so a chunked scan visits it.

use std::collections::hash_map::RandomState;
use std::hash::Hash;
use std::sync::{Arc, Weak};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use parking_lot::Mutex;

use crate::operation::{DelayedOperation, Shared};

/// What a key must be: compared, hashed, cloned once per list, shared
/// between threads and printable in logs. Implemented for every such type.
pub trait WatchKey: Eq + Hash + Clone + Send + Sync + std::fmt::Debug + 'static {}

impl<T: Eq + Hash + Clone + Send + Sync + std::fmt::Debug + 'static> WatchKey for T {}

/// A watch list with its key type erased, as seen from an operation (whose
/// type does not name the key type).
pub(crate) trait ErasedList<Op: DelayedOperation>: Send + Sync {
    /// Frees `slot`, which `op` occupies; removes the key from the index if
    /// the list became empty.
    fn unwatch(&self, slot: u32, op: &Shared<Op>);
}

/// One operation's place in one watch list.
pub(crate) struct Membership<Op: DelayedOperation> {
    list: Arc<dyn ErasedList<Op>>,
    slot: u32,
}

impl<Op: DelayedOperation> Membership<Op> {
    /// Leaves the list.
    pub(crate) fn unwatch(self, op: &Shared<Op>) {
        self.list.unwatch(self.slot, op);
    }
}

/// How many memberships an operation keeps without allocating.
const INLINE_MEMBERS: usize = 4;

/// An operation's memberships: inline for the first few keys (so the common
/// case costs no allocation beyond the operation itself), spilling to a
/// vector for more.
pub(crate) struct Members<Op: DelayedOperation> {
    inline: [Option<Membership<Op>>; INLINE_MEMBERS],
    len: usize,
    spill: Vec<Membership<Op>>,
}

impl<Op: DelayedOperation> Default for Members<Op> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Op: DelayedOperation> Members<Op> {
    pub(crate) fn new() -> Self {
        Members {
            inline: [None, None, None, None],
            len: 0,
            spill: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, m: Membership<Op>) {
        if self.len < INLINE_MEMBERS {
            self.inline[self.len] = Some(m);
        } else {
            self.spill.push(m);
        }
        self.len += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<Op: DelayedOperation> IntoIterator for Members<Op> {
    type Item = Membership<Op>;
    type IntoIter = std::iter::Chain<
        std::iter::Flatten<std::array::IntoIter<Option<Membership<Op>>, INLINE_MEMBERS>>,
        std::vec::IntoIter<Membership<Op>>,
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.inline.into_iter().flatten().chain(self.spill)
    }
}

/// No free slot.
const NIL: u32 = u32::MAX;

enum Slot<Op: DelayedOperation> {
    Occupied(Arc<Shared<Op>>),
    Vacant { next_free: u32 },
}

/// The entries of one list.
struct Slab<Op: DelayedOperation> {
    slots: Vec<Slot<Op>>,
    free: u32,
    live: usize,
    detached: bool,
}

impl<Op: DelayedOperation> Slab<Op> {
    fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: NIL,
            live: 0,
            detached: false,
        }
    }

    fn insert(&mut self, op: Arc<Shared<Op>>) -> u32 {
        self.live += 1;
        if self.free != NIL {
            let slot = self.free;
            let old = std::mem::replace(&mut self.slots[slot as usize], Slot::Occupied(op));
            match old {
                Slot::Vacant { next_free } => self.free = next_free,
                Slot::Occupied(_) => unreachable!("free list points at an occupied slot"),
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

    /// Frees `slot` if `op` occupies it, returning the entry's `Arc` so the
    /// caller can drop it after unlocking.
    fn remove(&mut self, slot: u32, op: &Shared<Op>) -> Option<Arc<Shared<Op>>> {
        let entry = self.slots.get_mut(slot as usize)?;
        match entry {
            Slot::Occupied(o) if std::ptr::eq(Arc::as_ptr(o), op) => {}
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
        if self.live == 0 {
            // Reset so that a list reused after emptying scans no holes.
            self.slots.clear();
            self.free = NIL;
        }
        match old {
            Slot::Occupied(o) => Some(o),
            Slot::Vacant { .. } => None,
        }
    }
}

/// The operations watched under one key.
pub(crate) struct WatchList<K: WatchKey, Op: DelayedOperation> {
    key: K,
    index: Weak<WatchIndex<K, Op>>,
    slab: Mutex<Slab<Op>>,
}

impl<K: WatchKey, Op: DelayedOperation> WatchList<K, Op> {
    /// Number of entries (an operation watched twice on this key counts twice).
    pub(crate) fn len(&self) -> usize {
        self.slab.lock().live
    }

    /// Copies up to `max` pending operations, starting at slot `from`, into
    /// `out`; returns the slot to continue from (`None` at the end).
    pub(crate) fn snapshot_from(
        &self,
        from: usize,
        max: usize,
        out: &mut Vec<Arc<Shared<Op>>>,
    ) -> Option<usize> {
        let slab = self.slab.lock();
        let mut i = from;
        while i < slab.slots.len() {
            if out.len() >= max {
                return Some(i);
            }
            if let Slot::Occupied(op) = &slab.slots[i] {
                if op.is_pending() {
                    out.push(op.clone());
                }
            }
            i += 1;
        }
        None
    }

    /// Marks the list detached (it has left the index) and copies all its
    /// entries.
    fn detach_and_snapshot(&self, out: &mut Vec<Arc<Shared<Op>>>) {
        let mut slab = self.slab.lock();
        slab.detached = true;
        out.reserve(slab.live);
        out.extend(slab.slots.iter().filter_map(|s| match s {
            Slot::Occupied(op) => Some(op.clone()),
            Slot::Vacant { .. } => None,
        }));
    }

    /// Removes this list's key from the index if the key still maps to this
    /// list and the list is still empty.
    fn remove_key_if_empty(&self) {
        let Some(index) = self.index.upgrade() else {
            return;
        };
        index.map.remove_if(&self.key, |_, list| {
            if !std::ptr::eq(Arc::as_ptr(list), self) {
                return false;
            }
            let mut slab = list.slab.lock();
            if slab.live == 0 {
                slab.detached = true;
                true
            } else {
                false
            }
        });
    }
}

impl<K: WatchKey, Op: DelayedOperation> ErasedList<Op> for WatchList<K, Op> {
    fn unwatch(&self, slot: u32, op: &Shared<Op>) {
        let (removed, emptied) = {
            let mut slab = self.slab.lock();
            let removed = slab.remove(slot, op);
            debug_assert!(
                removed.is_some(),
                "an operation left a slot it did not hold"
            );
            (removed, slab.live == 0 && !slab.detached)
        };
        // The entry's Arc is dropped here, outside the list lock (it is never
        // the last reference: the caller holds one).
        drop(removed);
        if emptied {
            self.remove_key_if_empty();
        }
    }
}

/// Keys to watch lists, sharded.
pub(crate) struct WatchIndex<K: WatchKey, Op: DelayedOperation> {
    map: DashMap<K, Arc<WatchList<K, Op>>, RandomState>,
}

impl<K: WatchKey, Op: DelayedOperation> WatchIndex<K, Op> {
    /// An empty index with `shards` shards (a power of two, at least 2).
    pub(crate) fn new(shards: usize) -> Arc<Self> {
        Arc::new(WatchIndex {
            map: DashMap::with_capacity_and_hasher_and_shard_amount(0, RandomState::new(), shards),
        })
    }

    /// Adds `op` to `key`'s list, creating the list if needed. Refuses (and
    /// returns `None`) if `closed()` holds once the key's shard is locked,
    /// so that nothing is added after a shutdown has drained the index.
    pub(crate) fn watch(
        self: &Arc<Self>,
        key: K,
        op: &Arc<Shared<Op>>,
        closed: impl Fn() -> bool,
    ) -> Option<Membership<Op>> {
        // Fast path: the key exists; a shard read lock keeps the list in the
        // map (so not detached) while we insert.
        if let Some(list) = self.map.get(&key) {
            if closed() {
                return None;
            }
            let slot = list.slab.lock().insert(op.clone());
            let list: Arc<dyn ErasedList<Op>> = list.value().clone();
            return Some(Membership { list, slot });
        }
        let entry = self.map.entry(key);
        if closed() {
            return None;
        }
        let list = match entry {
            Entry::Occupied(e) => e.into_ref(),
            Entry::Vacant(v) => {
                let list = Arc::new(WatchList {
                    key: v.key().clone(),
                    index: Arc::downgrade(self),
                    slab: Mutex::new(Slab::new()),
                });
                v.insert(list)
            }
        };
        let slot = list.slab.lock().insert(op.clone());
        let list: Arc<dyn ErasedList<Op>> = list.value().clone();
        Some(Membership { list, slot })
    }

    /// The list of `key`, if any (the shard lock is released on return).
    pub(crate) fn get(&self, key: &K) -> Option<Arc<WatchList<K, Op>>> {
        self.map.get(key).map(|r| r.value().clone())
    }

    /// Removes `key`'s list from the index and copies its entries.
    pub(crate) fn remove(&self, key: &K, out: &mut Vec<Arc<Shared<Op>>>) -> bool {
        match self.map.remove(key) {
            Some((_, list)) => {
                list.detach_and_snapshot(out);
                true
            }
            None => false,
        }
    }

    /// Removes every list and copies all their entries (an operation watched
    /// on several keys appears several times).
    pub(crate) fn drain(&self, out: &mut Vec<Arc<Shared<Op>>>) {
        self.map.retain(|_, list| {
            list.detach_and_snapshot(out);
            false
        });
    }

    /// Number of keys with a list.
    pub(crate) fn keys(&self) -> usize {
        self.map.len()
    }
}
