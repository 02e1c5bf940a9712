//! Watch lists: for each key, the operations waiting on it.
//!
//! A [`WatchIndex`] is split into shards (a power of two, 512 by default),
//! each behind its own short-held mutex, so that unrelated keys never
//! contend. A shard owns a hash table from keys to list ids (the key is
//! hashed once per call, and the hash picks both the shard and the slot;
//! see [`table`]) and a slab of lists. Each list is itself a slab: its key,
//! its first two slots in place and the rest in a vector with a free list
//! (see [`slab`]). An operation remembers, for each key it watches, its
//! [`Membership`] — shard, list id and slot, three integers — so leaving a
//! list is O(1): one lock, no lookup, no scan, no purge, no reference count.
//!
//! # Invariants
//!
//! * Lock order: the operation lock (when held) before a shard lock. No user
//!   code runs with a shard lock held but the keys' `Hash` and `Eq` (see
//!   [`WatchKey`]); only one shard lock is held at a time.
//! * A slot is freed only through the membership its operation kept, once:
//!   by the thread that frees the retired batch the operation went to when
//!   it was released, or, for a cancelled operation, as it leaves, under
//!   its lock (see [`crate::retire`]). So slot indices are stable for an
//!   operation's whole stay, and a completed or expired operation's slots
//!   stay occupied (by it) until its batch is freed.
//! * A list id stays allocated while any operation occupies the list, so a
//!   membership never points at a recycled list. A list in the key table is
//!   never empty: it is created with its first entry and removed (and its id
//!   freed) by the thread that frees its last slot, under the shard lock.
//!   [`WatchIndex::remove`] and [`WatchIndex::drain`] take lists out of the
//!   key table while operations still occupy them (*detached* lists); such a
//!   list is freed when its last operation is released.
//! * Each list has a generation, the count of lists its shard had created
//!   when it was, so that a chunked scan ([`WatchIndex::scan`]) notices
//!   that its list is gone, even once the id is reused or the shard has
//!   given its room back.
//! * `keys` counts the lists in the key tables.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::key_eq::InKeyEq;
use crate::members::Membership;
use crate::operation::{DelayedOperation, Shared};
use crate::release::drop_logged;
use crate::stackbuf::StackBuf;
use crate::sync::{lock_spinning, AtomicUsize, Mutex, Ordering};

#[cfg(all(test, loom))]
mod loom_index;
#[cfg(all(test, loom))]
mod loom_models;
mod slab;
mod table;
#[cfg(test)]
mod tests;
mod unwatch;

pub(crate) use slab::Found;
use slab::Slab;
use table::KeyTable;

/// What a key must be: compared, hashed, shared between threads and
/// printable in logs. Implemented for every such type. (`Clone` is not used
/// by the purgatory itself; it is required so that callers can pass one key
/// to several calls.)
///
/// `Eq` runs with a watch-list shard's lock held, and the `Drop` of a key
/// the purgatory lets go of runs where its emptied list is freed (inside
/// purgatory calls, holding a lock of the retired batch or the lock of an
/// operation being watched or leaving): neither, nor `Hash`, may block or
/// call back into the purgatory. A panic in `Hash` or `Eq` reaches the
/// caller; one in `Drop` is logged. A purgatory call made from `Eq` (a
/// watch, check or cancel, a force, a purge, `watched_on`, `watched_keys`,
/// a shutdown or `advance_clock`, of any purgatory) panics at once, saying
/// so, rather than wait for a lock its own thread holds; a
/// [`CancelOnDrop`](crate::CancelOnDrop) dropped there cancels nothing and
/// logs a warning.
pub trait WatchKey: Eq + Hash + Clone + Send + Sync + std::fmt::Debug + 'static {}

impl<T: Eq + Hash + Clone + Send + Sync + std::fmt::Debug + 'static> WatchKey for T {}

/// What a purgatory hashes its keys with: a [`BuildHasher`] shared between
/// threads (see [`PurgatoryBuilder::hasher`](crate::PurgatoryBuilder::hasher)).
/// Implemented for every such type.
pub trait KeyHasher: BuildHasher + Send + Sync + 'static {}

impl<T: BuildHasher + Send + Sync + 'static> KeyHasher for T {}

/// The operations watched under one key, at a list id of its shard; or a
/// free id (no key).
///
/// Laid out in this order (`repr(C)`) so that the key and the slab's head
/// come first: a lookup that matches the key finds a short list's slots on
/// the lines it has just read.
#[repr(C)]
struct ListSlot<K: WatchKey, Op: DelayedOperation> {
    /// `None` while the id is free.
    key: Option<K>,
    slab: Slab<Op>,
    /// The shard's count of lists created when this one was (see
    /// `Shard::created`).
    generation: u32,
    /// Whether the key table maps `key` to this list (false once detached).
    in_table: bool,
    /// The key's tag in the key table.
    tag: u32,
}

/// One shard: a key table and the lists it points to.
struct Shard<K: WatchKey, Op: DelayedOperation> {
    /// List ids, found by their list's key.
    table: KeyTable,
    lists: Vec<ListSlot<K, Op>>,
    free_ids: Vec<u32>,
    /// Lists created so far (wrapping): the next list's generation.
    created: u32,
    /// Emptied slabs of the last lists freed, if small, for the next lists
    /// created (see [`Slab::recycle`]); at most [`SPARE_SLABS`].
    spare: Vec<Slab<Op>>,
}

/// How many emptied slabs a shard keeps for its next lists. Keys whose
/// lists grow past their head and empty again (W4's 100,000 keys with
/// about ten operations each) create and free lists in no particular
/// order, so keeping one would catch only part of them; each freed and
/// reallocated slab is an allocation on the thread watching and a free on
/// the one completing. Bounded, with [`slab::RECYCLE_MAX`], so that an idle
/// shard holds little.
const SPARE_SLABS: usize = 4;

/// The most list ids a shard keeps when all its lists are freed; one that
/// had more gives their room (and its key table's) back. A shard whose
/// few keys come and go keeps its room and allocates nothing.
const KEEP_LISTS: usize = 64;

impl<K: WatchKey, Op: DelayedOperation> Shard<K, Op> {
    fn new() -> Self {
        Shard {
            table: KeyTable::new(),
            lists: Vec::new(),
            free_ids: Vec::new(),
            created: 0,
            spare: Vec::new(),
        }
    }

    fn list(&self, id: u32) -> &ListSlot<K, Op> {
        let list = &self.lists[id as usize];
        assert!(
            list.key.is_some(),
            "a membership or the key table points at a freed list"
        );
        list
    }

    fn list_mut(&mut self, id: u32) -> &mut ListSlot<K, Op> {
        let list = &mut self.lists[id as usize];
        assert!(
            list.key.is_some(),
            "a membership or the key table points at a freed list"
        );
        list
    }

    fn find<Q: Eq + ?Sized>(&self, hash: u64, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
    {
        let lists = &self.lists;
        let _eq = InKeyEq::enter();
        self.table.find(tag(hash), |id| {
            lists[id as usize]
                .key
                .as_ref()
                .is_some_and(|k| k.borrow() == key)
        })
    }

    /// Creates a list for `key` (absent from the table) and returns its id.
    fn create(&mut self, key: K, hash: u64) -> u32 {
        let slab = self.spare.pop().unwrap_or_else(Slab::new);
        self.created = self.created.wrapping_add(1);
        let generation = self.created;
        let id = match self.free_ids.pop() {
            Some(id) => {
                let list = &mut self.lists[id as usize];
                list.key = Some(key);
                list.slab = slab;
                list.generation = generation;
                list.in_table = true;
                list.tag = tag(hash);
                id
            }
            None => {
                let id = u32::try_from(self.lists.len()).expect("too many keys in one shard");
                self.lists.push(ListSlot {
                    key: Some(key),
                    slab,
                    generation,
                    in_table: true,
                    tag: tag(hash),
                });
                id
            }
        };
        self.table.insert(tag(hash), id);
        id
    }

    /// Takes list `id` out of the key table (it stays allocated while
    /// operations occupy it). Returns whether it was in the table.
    fn detach(&mut self, id: u32) -> bool {
        let list = self.list_mut(id);
        let (tag, was_in) = (list.tag, list.in_table);
        list.in_table = false;
        if was_in {
            let removed = self.table.remove(tag, id);
            debug_assert!(removed, "a list in the table was not found by its tag");
        }
        was_in
    }

    /// Frees list `id` (empty), taking it out of the table if needed.
    /// Returns whether it was in the table, and its key, for the caller to
    /// drop once the shard's lock is released ([`drop_key`]).
    fn free_list(&mut self, id: u32) -> (bool, Option<K>) {
        let was_in = self.detach(id);
        let list = &mut self.lists[id as usize];
        let key = list.key.take();
        if key.is_some() {
            let slab = std::mem::replace(&mut list.slab, Slab::new());
            if let Some(slab) = slab.recycle() {
                if self.spare.len() < SPARE_SLABS {
                    self.spare.reserve_exact(SPARE_SLABS);
                    self.spare.push(slab);
                }
            }
        }
        self.free_ids.push(id);
        if self.free_ids.len() == self.lists.len() && self.lists.len() > KEEP_LISTS {
            // Every list is free (so none is in the table): give the room
            // back, so that a peak of keys does not stay resident.
            self.lists = Vec::new();
            self.free_ids = Vec::new();
            self.table = KeyTable::new();
        }
        (was_in, key)
    }
}

/// Drops a key the index no longer holds (a freed list's, or a watch's
/// copy of a key already listed), or the keys a watch did not use (their
/// iterator), with no shard lock held. A `Drop` that panics is logged, as
/// an operation's is: unwinding from here would leave a batch of retired
/// slots half freed, to be freed again, and unwinding from a watch's
/// return would leak the value it returns, with the token that wakes the
/// operation's waiters.
pub(crate) fn drop_key<K>(key: K) {
    drop_logged(key, "a watch key's Drop");
}

/// Keys (or their iterator) that a call holds until it goes, then drops
/// with [`drop_key`]: declared before a lock guard, whatever of them the
/// call did not use goes after the lock is released, however it returns
/// or unwinds.
pub(crate) struct KeysHeld<T>(Option<T>);

impl<T> KeysHeld<T> {
    pub(crate) fn new(keys: T) -> Self {
        KeysHeld(Some(keys))
    }

    /// Takes the keys back, to be used.
    pub(crate) fn take(mut self) -> T {
        self.0.take().expect("held until dropped")
    }
}

impl<T> std::ops::Deref for KeysHeld<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("held until dropped")
    }
}

impl<T> std::ops::DerefMut for KeysHeld<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("held until dropped")
    }
}

impl<T> Drop for KeysHeld<T> {
    fn drop(&mut self) {
        drop_key(self.0.take());
    }
}

/// A key's tag in its shard's key table: the low 32 bits of its hash (the
/// shard is chosen from a mix of all of them, see `WatchIndex::locate`).
fn tag(hash: u64) -> u32 {
    hash as u32
}

/// Starts fetching the lines of the operation `op` names (its reference
/// counts, state, lock and value), without touching them.
///
/// A watch that joins a list holding one other operation calls it for that
/// one: a short list's next event is often a check of its key that
/// completes the older operation (a member's heartbeat watches the next
/// expectation, then checks its key to complete the pending one, last
/// touched a session ago, often on another core). The lines then arrive
/// while the watch finishes and the timer is armed, rather than when the
/// check reads them.
fn prefetch_operation<Op: DelayedOperation>(op: &std::sync::Weak<Shared<Op>>) {
    // The counts are two words in front of the value.
    let start = op
        .as_ptr()
        .cast::<u8>()
        .wrapping_sub(2 * size_of::<usize>());
    let bytes = 2 * size_of::<usize>() + size_of::<Shared<Op>>();
    for offset in (0..bytes).step_by(64).chain([bytes - 1]) {
        timer::internal::prefetch_addr(start.wrapping_add(offset));
    }
}

/// A shard behind its lock, on its own cache line.
type ShardLock<K, Op> = CachePadded<Mutex<Shard<K, Op>>>;

/// Where a key's list lives: the key's hash (the table's tag comes from
/// it) and its shard, as [`WatchIndex::locate`] finds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Located {
    hash: u64,
    shard: usize,
}

/// Where a chunked scan of one key's list stands.
#[derive(Debug)]
pub(crate) struct Cursor {
    shard: usize,
    list: u32,
    generation: u32,
    next_slot: usize,
}

/// Where a shard's key table keeps its entries, readable without the
/// shard's lock, so that [`WatchIndex::prefetch`] can name the line a
/// lookup will read. Written under the shard lock whenever the table's
/// room changes (rarely); a reader may see a stale or torn pair, which
/// only makes it prefetch a useless line.
#[derive(Default)]
struct TableHint {
    base: AtomicUsize,
    mask: AtomicUsize,
}

impl TableHint {
    /// Records `table`'s location if it moved. Shard lock held.
    fn update(&self, table: &KeyTable) {
        let (base, mask) = table.location();
        let now = (
            self.base.load(Ordering::Relaxed),
            self.mask.load(Ordering::Relaxed),
        );
        if now != (base, mask) {
            self.base.store(base, Ordering::Relaxed);
            self.mask.store(mask, Ordering::Relaxed);
        }
    }
}

/// Keys to watch lists, sharded; keys are hashed with `S`.
pub(crate) struct WatchIndex<K: WatchKey, Op: DelayedOperation, S> {
    hasher: S,
    shards: Box<[ShardLock<K, Op>]>,
    /// One per shard, apart from the shards' locks (which both threads
    /// write), so that reading them rarely misses.
    hints: Box<[TableHint]>,
    mask: usize,
    keys: AtomicUsize,
}

impl<K: WatchKey, Op: DelayedOperation, S: BuildHasher> WatchIndex<K, Op, S> {
    /// An empty index with `shards` shards (a power of two).
    pub(crate) fn new(shards: usize, hasher: S) -> Arc<Self> {
        debug_assert!(shards.is_power_of_two());
        Arc::new(WatchIndex {
            hasher,
            shards: (0..shards)
                .map(|_| CachePadded::new(Mutex::new(Shard::new())))
                .collect(),
            hints: (0..shards).map(|_| TableHint::default()).collect(),
            mask: shards - 1,
            keys: AtomicUsize::new(0),
        })
    }

    pub(crate) fn locate<Q: Hash + ?Sized>(&self, key: &Q) -> Located {
        let hash = self.hasher.hash_one(key);
        // The key table uses the low 32 bits (the tag, whose low bits pick
        // the slot). The shard is taken from a multiplicative mix of the
        // whole hash (the golden-ratio constant), so that it does not fix
        // the slot's bits and a hasher whose output fits in 32 bits still
        // spreads keys over every shard.
        let mixed = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Located {
            hash,
            shard: ((mixed >> 32) as usize) & self.mask,
        }
    }

    /// [`watch_at`](Self::watch_at), locating `key` first (for the crate's
    /// tests).
    #[cfg(test)]
    pub(crate) fn watch(
        &self,
        key: K,
        op: &Arc<Shared<Op>>,
        closed: impl Fn() -> bool,
    ) -> Result<Membership, K> {
        let at = self.locate(&key);
        self.watch_at(KeysHeld::new(key), at, op, closed)
    }

    /// Adds `op` to `key`'s list, creating the list if needed; `at` is
    /// [`locate`](Self::locate)`(&key)` (a key located elsewhere would be
    /// lost in another shard's table). Refuses (and hands the key back, for
    /// the caller to drop once it holds no lock) if `closed()` holds once
    /// the shard is locked, so that nothing is added after a shutdown has
    /// drained the index.
    pub(crate) fn watch_at(
        &self,
        key: KeysHeld<K>,
        at: Located,
        op: &Arc<Shared<Op>>,
        closed: impl Fn() -> bool,
    ) -> Result<Membership, K> {
        debug_assert!(at == self.locate(&*key), "key located elsewhere");
        let Located {
            hash,
            shard: shard_ix,
        } = at;
        let mut shard = lock_spinning(&self.shards[shard_ix]);
        if closed() {
            drop(shard);
            return Err(key.take());
        }
        let (list, listed) = match shard.find(hash, &*key) {
            Some(id) => (id, Some(key)),
            None => {
                self.keys.fetch_add(1, Ordering::Relaxed);
                let id = shard.create(key.take(), hash);
                self.hints[shard_ix].update(&shard.table);
                (id, None)
            }
        };
        let slab = &mut shard.list_mut(list).slab;
        let slot = slab.insert(Arc::downgrade(op));
        if let Some(other) = slab.head_neighbour(slot) {
            prefetch_operation(other);
        }
        drop(shard);
        // The watch's copy of a key already listed goes now, the shard
        // lock released, its `Drop` guarded.
        drop(listed);
        Ok(Membership {
            shard: shard_ix as u32,
            list,
            slot,
        })
    }

    /// Starts fetching the lines a [`watch_at`](Self::watch_at) or
    /// [`scan`](Self::scan) of `key` reads first: its shard's lock and the
    /// key table's entry where the lookup starts. Takes no lock. Returns
    /// where the key lives, for [`watch_at`](Self::watch_at).
    pub(crate) fn prefetch<Q: Hash + ?Sized>(&self, key: &Q) -> Located {
        let at = self.locate(key);
        let Located {
            hash,
            shard: shard_ix,
        } = at;
        timer::internal::prefetch(&self.shards[shard_ix]);
        let hint = &self.hints[shard_ix];
        let base = hint.base.load(Ordering::Relaxed);
        if base != 0 {
            let slot = tag(hash) as usize & hint.mask.load(Ordering::Relaxed);
            timer::internal::prefetch_addr((base as *const u64).wrapping_add(slot));
        }
        at
    }

    /// Copies up to `max` live operations of `key`'s list into `out` (the
    /// pending ones, and maybe a few that have left but whose slots are not
    /// freed yet: the caller re-checks each under its lock),
    /// starting where `cursor` stands (a fresh scan when `None`). Returns the
    /// cursor to continue from, or `None` when the list is done (or gone).
    pub(crate) fn scan<Q: Hash + Eq + ?Sized, const N: usize>(
        &self,
        key: &Q,
        cursor: Option<Cursor>,
        max: usize,
        out: &mut StackBuf<Found<Op>, N>,
    ) -> Option<Cursor>
    where
        K: Borrow<Q>,
    {
        let (shard_ix, hash) = match &cursor {
            Some(c) => (c.shard, 0),
            None => {
                let at = self.locate(key);
                (at.shard, at.hash)
            }
        };
        let shard = self.shards[shard_ix].lock();
        let mut cursor = match cursor {
            Some(c) => c,
            None => {
                let list = shard.find(hash, key)?;
                Cursor {
                    shard: shard_ix,
                    list,
                    generation: shard.lists[list as usize].generation,
                    next_slot: 0,
                }
            }
        };
        // A shard that freed every list since the last chunk has given its
        // room back: the id may be past the end.
        let list = shard.lists.get(cursor.list as usize)?;
        if list.key.is_none() || list.generation != cursor.generation || !list.in_table {
            // Emptied or cancelled since the last chunk.
            return None;
        }
        let mut i = cursor.next_slot;
        while i < list.slab.len() {
            let room = max.saturating_sub(out.len());
            if room == 0 {
                cursor.next_slot = i;
                return Some(cursor);
            }
            let run = list.slab.run_from(i);
            let window = &run[..run.len().min(room.min(64))];
            // Two passes, so the shard lock is held briefly. The first only
            // reads each occupant's reference count: independent loads,
            // whose cache misses the CPU overlaps (the operations were last
            // touched long ago, often on another core). The second takes a
            // reference to the live ones, and each (an atomic
            // read-modify-write, which waits for its cache line before the
            // next can start) finds its line in cache. A reference taken
            // here is never let go under the lock: it may be the last.
            let mut live = 0u64;
            for (j, slot) in window.iter().enumerate() {
                if slot.as_ref().is_some_and(|op| op.strong_count() > 0) {
                    live |= 1 << j;
                }
            }
            for (j, slot) in window.iter().enumerate() {
                if let Some(op) = slot {
                    if live & (1 << j) != 0 {
                        out.extend(slab::found(op));
                    }
                }
            }
            i += window.len();
        }
        None
    }

    /// Number of entries in `key`'s list.
    pub(crate) fn len_of<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> usize
    where
        K: Borrow<Q>,
    {
        let at = self.locate(key);
        let shard = self.shards[at.shard].lock();
        shard
            .find(at.hash, key)
            .map_or(0, |id| shard.list(id).slab.live())
    }

    /// Takes `key`'s list out of the index and copies its entries. Returns
    /// whether the key had a list.
    pub(crate) fn remove<Q: Hash + Eq + ?Sized>(&self, key: &Q, out: &mut Vec<Found<Op>>) -> bool
    where
        K: Borrow<Q>,
    {
        let at = self.locate(key);
        let mut shard = self.shards[at.shard].lock();
        let Some(id) = shard.find(at.hash, key) else {
            return false;
        };
        shard.detach(id);
        self.keys.fetch_sub(1, Ordering::Relaxed);
        shard.list(id).slab.copy_all(out);
        true
    }

    /// Takes every list out of the index and copies all their entries (an
    /// operation watched on several keys appears several times).
    pub(crate) fn drain(&self, out: &mut Vec<Found<Op>>) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let ids = shard.table.drain();
            for id in ids {
                let list = shard.list_mut(id);
                list.in_table = false;
                list.slab.copy_all(out);
                self.keys.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops the emptied slabs every shard keeps for its next lists.
    pub(crate) fn drop_spares(&self) {
        for shard in self.shards.iter() {
            let spare = std::mem::take(&mut shard.lock().spare);
            drop(spare);
        }
    }

    /// Number of keys with a list.
    pub(crate) fn keys(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }
}
