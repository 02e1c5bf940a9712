//! The arena that owns every pending timer entry.
//!
//! An entry lives in one [`Slot`] of a `Vec` for as long as it waits in the
//! wheel, so inserting never allocates once the arena has grown to the peak
//! number of pending tasks, and every other structure (buckets, handles)
//! refers to an entry by its `u32` index instead of a pointer.
//!
//! Invariants:
//! - A slot is *occupied* iff its state is not [`VACANT`]; exactly
//!   the occupied slots hold an initialised task.
//! - A vacant slot keeps, in its unused `deadline`, the arena's *sweep
//!   epoch* when it was freed. It is *listed* if that is the current epoch,
//!   and *left to the sweep* if it is older. Listed slots form a singly
//!   linked free list through their `pos` field, headed by
//!   `Entries::free_head`; freeing pushes, allocating pops (LIFO, so a freed
//!   slot is reused while it is still in cache). Slots left to the sweep all
//!   lie at or after the `sweep` cursor, which allocation moves forward when
//!   the free list is empty, taking them in address order.
//! - A large arena that drains to a sixty-fourth of its slots
//!   ([`SWEEP_BELOW`]) after being at least half full leaves every vacant
//!   slot to the sweep at once: it starts a new epoch and empties the free
//!   list (O(1)). Freed in the order their tasks expired or were cancelled,
//!   those slots would be handed out scattered over the arena, and the next
//!   wave of entries (a restart's heartbeat expectations, a burst sharing
//!   one deadline) would be walked one cache and TLB miss per entry; taken
//!   in address order, its walk streams.
//! - A slot's `generation` changes every time the slot is freed, so a
//!   [`TimerHandle`] taken before the free no longer matches: stale handles
//!   are detected, never aliased. Generations never wrap: a slot freed for
//!   the 2^26 - 1st time is *retired* (vacant, its deadline [`RETIRED`],
//!   never listed nor swept) until the arena gives its memory back. The
//!   free list is LIFO, so one hot slot can get there within seconds of
//!   adds and cancels; retiring costs one slot each time.
//! - A handle's generation carries, in its top [`SHARD_BITS`] bits, the tag
//!   of the arena that issued it, so that a sharded owner can route the
//!   handle back.
//! - Every arena has its own `owner` id, carried by each handle it issues,
//!   so that a handle from another arena (another wheel, another timer's
//!   shard) never resolves here, even where index and generation match.
//!   Ids come from one process-wide counter and repeat only after 2^32 - 1
//!   arenas have been created (or emptied, see below).
//! - An arena that empties while it holds more than [`KEEP_SLOTS`] slots
//!   gives its memory back (a broker's peak of millions of pending tasks
//!   must not stay resident once they are gone) and takes a fresh owner id,
//!   so that no handle issued before resolves against the slots it grows
//!   again (their generations start over). Emptying is rare under load and
//!   the check is one comparison on the freeing path; below `KEEP_SLOTS`
//!   the slots stay, so a lightly loaded timer that empties often never
//!   reallocates.
//! - An arena told to [`defer_freeing`](Entries::defer_freeing) does not
//!   free that memory itself: it keeps the emptied slots aside (all vacant)
//!   until its owner takes them ([`take_emptied`](Entries::take_emptied)),
//!   so the owner can free them off its lock and after the tasks it hands
//!   on. Giving a large arena back unmaps megabytes, which takes
//!   milliseconds; done by the thread that expired the arena's last entries
//!   it would delay those tasks whenever the executor shares its CPU.

use std::fmt;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::panics::discard_panic;

/// The "no entry" index, used as a null link and as the handle of tasks
/// that never entered the wheel.
pub(crate) const NIL: u32 = u32::MAX;

/// State of a vacant slot (see [`Slot::state`]).
pub(crate) const VACANT: u32 = (1 << STATE_BITS) - 1;

/// State of an occupied slot that is not linked into any bucket (between
/// allocation and linking, or while being moved).
pub(crate) const UNLINKED: u32 = VACANT - 1;

/// The `deadline` of a retired slot (see the module invariants): above
/// every sweep epoch.
const RETIRED: u64 = u64::MAX;

/// A large arena that has been at least half full leaves its vacant slots
/// to the sweep once no more than one slot in this many is occupied.
pub(crate) const SWEEP_BELOW: usize = 64;

/// The most wheel levels a slot's state can name: levels `0..MAX_LEVELS`.
pub(crate) const MAX_LEVELS: u32 = UNLINKED;

/// Bits of a handle's generation that name the issuing arena (shard).
pub(crate) const SHARD_BITS: u32 = 6;
/// The most shards a handle can name.
pub(crate) const MAX_SHARDS: usize = 1 << SHARD_BITS;
const GENERATION_BITS: u32 = 32 - SHARD_BITS;
const GENERATION_MASK: u32 = (1 << GENERATION_BITS) - 1;
/// Bits of a slot's `meta` above its generation: its state (the handle has
/// its shard there instead).
const STATE_BITS: u32 = SHARD_BITS;

/// Slots an emptied arena keeps (96 KiB of 24-byte slots); above this it
/// frees them all (see the module invariants).
pub(crate) const KEEP_SLOTS: usize = 4096;

/// The owner id of no arena (a detached handle's).
const NO_OWNER: u32 = 0;

/// The id the next arena takes (skipping [`NO_OWNER`] when it wraps).
static NEXT_OWNER: AtomicU32 = AtomicU32::new(NO_OWNER + 1);

fn next_owner() -> u32 {
    loop {
        let owner = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
        if owner != NO_OWNER {
            return owner;
        }
    }
}

/// Identifies one scheduled task, in the timer (or wheel) that issued it.
///
/// Handles are small (12 bytes), `Copy`, `Eq` and `Hash`, so they can be kept
/// in maps. A handle stays harmless after its task has fired or been
/// cancelled, after its slot has been reused by another task, and when given
/// to a timer other than the one that issued it: cancelling through it then
/// does nothing and returns `false`/`None`. The handles of tasks that never
/// waited in a wheel (a zero delay, a deadline already passed) are all one
/// stale handle, equal to each other ([`is_detached`](Self::is_detached)):
/// keep those out of a map keyed by handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
    /// The issuing arena's id (see the module invariants); 0 for none.
    pub(crate) owner: u32,
}

impl TimerHandle {
    /// The shard (arena tag) that issued this handle.
    pub(crate) fn shard(&self) -> usize {
        (self.generation >> GENERATION_BITS) as usize
    }

    /// Whether this is the handle of a task that never waited in a wheel
    /// (a zero delay, a deadline already passed): one stale handle, shared
    /// by all such tasks, that cancels nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use timer::Timer;
    ///
    /// let timer: Timer = Timer::new();
    /// let now = timer.add(Duration::ZERO, Box::new(|| {})).unwrap();
    /// let later = timer.add(Duration::from_secs(60), Box::new(|| {})).unwrap();
    /// assert!(now.is_detached());
    /// assert!(!later.is_detached());
    /// ```
    pub fn is_detached(&self) -> bool {
        self.index == NIL
    }

    /// The handle of a task that never entered the wheel because it was
    /// already due when added (it went straight to the executor).
    pub(crate) const DETACHED: TimerHandle = TimerHandle {
        index: NIL,
        generation: 0,
        owner: NO_OWNER,
    };
}

impl fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.index == NIL {
            f.write_str("TimerHandle(detached)")
        } else {
            let (index, generation, owner) = (self.index, self.generation, self.owner);
            write!(f, "TimerHandle({index}v{generation}@{owner})")
        }
    }
}

/// One arena slot: an entry when occupied, a free-list node when vacant.
///
/// With a `u64` or pointer-sized task this is 24 bytes, checked by
/// `slot_is_24_bytes_for_word_sized_tasks`. Keeping the task in a
/// `MaybeUninit` (rather than an `Option<T>`) saves 8 bytes a slot for tasks
/// without a niche, such as a `u64`. The slot does not name its bucket: the
/// level it is linked at and its deadline do (Kafka's rule,
/// `(deadline / tick) % wheel_size`), so the level shares a word with the
/// generation.
pub(crate) struct Slot<T> {
    /// Occupied: where the entry sits in its bucket's arrays (see
    /// `bucket`). Vacant: the next free slot, or [`NIL`].
    pub(crate) pos: u32,
    /// The generation (bumped on every free; see the module invariants) in
    /// the low [`GENERATION_BITS`], the state above: the wheel level the
    /// entry is linked at, [`UNLINKED`], or [`VACANT`].
    meta: u32,
    /// Absolute expiration in the wheel's milliseconds.
    pub(crate) deadline: u64,
    /// Initialised iff the slot is occupied.
    task: MaybeUninit<T>,
}

impl<T> Slot<T> {
    /// The wheel level the entry is linked at, [`UNLINKED`], or [`VACANT`].
    #[inline(always)]
    pub(crate) fn state(&self) -> u32 {
        self.meta >> GENERATION_BITS
    }

    /// Sets the state (see [`state`](Self::state)), keeping the generation.
    #[inline(always)]
    pub(crate) fn set_state(&mut self, state: u32) {
        debug_assert!(state <= VACANT);
        self.meta = (self.meta & GENERATION_MASK) | (state << GENERATION_BITS);
    }

    fn generation(&self) -> u32 {
        self.meta & GENERATION_MASK
    }
}

/// The arena of entries. See the module docs for its invariants.
pub(crate) struct Entries<T> {
    slots: Vec<Slot<T>>,
    free_head: u32,
    /// The sweep epoch (see the module invariants).
    epoch: u64,
    /// Where the sweep resumes: no slot before it is left to the sweep.
    sweep: usize,
    /// Whether at least half the slots have been occupied since the last
    /// sweep began, so that draining below [`SWEEP_BELOW`] starts another.
    peaked: bool,
    len: usize,
    /// `shard << GENERATION_BITS`, or'd into every handle issued.
    tag: u32,
    /// This arena's id, carried by every handle issued.
    owner: u32,
    /// Whether an emptied arena's memory waits in `emptied` for its owner
    /// (see the module invariants) instead of being freed at once.
    defer_freeing: bool,
    /// The slots of the last emptied arena, all vacant, while the owner has
    /// not taken them; an empty `Vec` (no memory) otherwise.
    emptied: Vec<Slot<T>>,
}

/// The memory of an emptied arena: every slot vacant, so dropping it frees
/// memory and runs no task's destructor. Held only to be dropped.
pub(crate) struct EmptiedSlots<T> {
    _slots: Vec<Slot<T>>,
}

impl<T> EmptiedSlots<T> {
    /// Slots it holds room for.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self._slots.capacity()
    }
}

impl<T> Entries<T> {
    pub(crate) fn new() -> Self {
        Entries {
            slots: Vec::new(),
            free_head: NIL,
            epoch: 0,
            sweep: 0,
            peaked: false,
            len: 0,
            tag: 0,
            owner: next_owner(),
            defer_freeing: false,
            emptied: Vec::new(),
        }
    }

    /// From now on, keeps an emptied arena's memory for the owner to take
    /// ([`take_emptied`](Self::take_emptied)) instead of freeing it.
    pub(crate) fn defer_freeing(&mut self) {
        self.defer_freeing = true;
    }

    /// The memory of the last arena emptied since the previous call, if any
    /// (only with [`defer_freeing`](Self::defer_freeing)).
    pub(crate) fn take_emptied(&mut self) -> Option<EmptiedSlots<T>> {
        (self.emptied.capacity() > 0).then(|| EmptiedSlots {
            _slots: std::mem::take(&mut self.emptied),
        })
    }

    /// Tags every handle issued from now on with `shard` (< [`MAX_SHARDS`]).
    pub(crate) fn set_shard(&mut self, shard: usize) {
        assert!(shard < MAX_SHARDS, "shard {shard} out of range");
        self.tag = (shard as u32) << GENERATION_BITS;
    }

    /// Number of occupied slots.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `additional` more entries without reallocating.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let free = self.slots.len() - self.len;
        if additional > free {
            self.slots.reserve(additional - free);
        }
    }

    /// Stores a task and returns its (unlinked) slot index.
    ///
    /// # Panics
    /// When more than `u32::MAX` entries are pending at once (about 100 GB
    /// of entries: memory runs out long before).
    pub(crate) fn insert(&mut self, deadline: u64, task: T) -> u32 {
        self.len += 1;
        // A wave of entries worth a sweep once it drains (see `remove`).
        self.peaked |= self.len * 2 >= self.slots.len();
        if self.free_head != NIL {
            let index = self.free_head;
            self.free_head = self.slots[index as usize].pos;
            // The slot the next insert reuses, often freed just now by
            // another thread: start bringing its line over (see `prefetch`).
            if let Some(next) = self.slots.get(self.free_head as usize) {
                crate::prefetch::prefetch(next);
            }
            self.occupy(index, deadline, task);
            return index;
        }
        if let Some(index) = self.next_swept() {
            self.occupy(index, deadline, task);
            return index;
        }
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i < NIL)
            .expect("timer arena is full: more than 2^32 - 1 pending entries");
        self.slots.push(Slot {
            pos: 0,
            meta: UNLINKED << GENERATION_BITS,
            deadline,
            task: MaybeUninit::new(task),
        });
        self.sweep = self.slots.len();
        index
    }

    /// Fills vacant slot `index` with an unlinked entry.
    #[inline(always)]
    fn occupy(&mut self, index: u32, deadline: u64, task: T) {
        let slot = &mut self.slots[index as usize];
        slot.pos = 0;
        slot.set_state(UNLINKED);
        slot.deadline = deadline;
        slot.task.write(task);
    }

    /// The next slot left to the sweep, in address order, if any.
    fn next_swept(&mut self) -> Option<u32> {
        while self.sweep < self.slots.len() {
            let index = self.sweep;
            self.sweep += 1;
            let slot = &self.slots[index];
            if slot.state() == VACANT && slot.deadline < self.epoch {
                return Some(index as u32);
            }
        }
        None
    }

    /// Leaves every vacant slot to the sweep (see the module invariants):
    /// a new epoch makes every listed slot one left to the sweep, so nothing
    /// is written but the arena's fields.
    fn start_sweep(&mut self) {
        debug_assert!(self.sweep_done());
        self.epoch += 1;
        self.free_head = NIL;
        self.sweep = 0;
        self.peaked = false;
    }

    /// Whether the sweep has passed every slot.
    fn sweep_done(&self) -> bool {
        self.sweep >= self.slots.len()
    }

    /// Frees an occupied slot and returns its task. The slot must already be
    /// unlinked from its bucket. Gives the arena's memory back if this was
    /// the last entry of a large arena (see the module invariants): every
    /// index is then out of range until the arena grows again.
    pub(crate) fn remove(&mut self, index: u32) -> T {
        let task = self.take(index);
        if self.peaked
            && self.len * SWEEP_BELOW <= self.slots.len()
            && self.slots.len() > KEEP_SLOTS
            && self.sweep_done()
        {
            self.start_sweep();
        }
        if self.len == 0 && self.slots.capacity() > KEEP_SLOTS {
            let slots = self.release_memory();
            if self.defer_freeing {
                // A previous arena's memory not taken yet goes now.
                self.emptied = slots;
            }
        }
        task
    }

    /// Gives up every slot of an empty arena (returned, for the caller to
    /// free) and retires its owner id, so that handles issued so far stay
    /// stale when indices are reused from 0.
    #[must_use]
    fn release_memory(&mut self) -> Vec<Slot<T>> {
        debug_assert_eq!(self.len, 0);
        self.free_head = NIL;
        self.sweep = 0;
        self.peaked = false;
        self.owner = next_owner();
        std::mem::take(&mut self.slots)
    }

    /// Slots allocated (occupied, vacant, or room to grow into).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// [`remove`](Self::remove) without giving memory back, for loops over
    /// the slots.
    fn take(&mut self, index: u32) -> T {
        let slot = &mut self.slots[index as usize];
        assert!(slot.state() != VACANT, "removing a vacant timer entry");
        debug_assert_eq!(slot.state(), UNLINKED, "entry still linked in a bucket");
        debug_assert!(
            slot.generation() < GENERATION_MASK,
            "a retired slot was reused"
        );
        let generation = slot.generation() + 1;
        slot.meta = generation | (VACANT << GENERATION_BITS);
        if generation == GENERATION_MASK {
            // Its last generation: reused, the slot would start over at 0,
            // and a handle kept since then would match again. Retired
            // instead: never listed, and passed over by the sweep (its
            // deadline is no epoch).
            slot.deadline = RETIRED;
        } else {
            slot.deadline = self.epoch;
            slot.pos = self.free_head;
            self.free_head = index;
        }
        self.len -= 1;
        // SAFETY: the slot was occupied (checked above: not VACANT),
        // and by the module invariant an occupied slot holds an initialised
        // task. Marking it VACANT first means the task is read exactly once
        // and never dropped again by `Drop` or a later `remove`.
        unsafe { slot.task.assume_init_read() }
    }

    /// The handle of an occupied slot.
    pub(crate) fn handle(&self, index: u32) -> TimerHandle {
        TimerHandle {
            index,
            generation: self.slots[index as usize].generation() | self.tag,
            owner: self.owner,
        }
    }

    /// The slot index a handle names, if the handle is still current.
    pub(crate) fn resolve(&self, handle: TimerHandle) -> Option<u32> {
        let slot = self.slots.get(handle.index as usize)?;
        let current = slot.generation() | self.tag;
        let live = slot.state() != VACANT && current == handle.generation;
        (live && handle.owner == self.owner).then_some(handle.index)
    }

    /// Starts fetching slot `index` into the cache (both of its lines, when
    /// it straddles two), ahead of a walk that reaches it soon.
    #[inline(always)]
    pub(crate) fn prefetch(&self, index: u32) {
        if let Some(slot) = self.slots.get(index as usize) {
            crate::prefetch::prefetch(slot);
            crate::prefetch::prefetch(&slot.task);
        }
    }

    pub(crate) fn slot(&self, index: u32) -> &Slot<T> {
        &self.slots[index as usize]
    }

    pub(crate) fn slot_mut(&mut self, index: u32) -> &mut Slot<T> {
        &mut self.slots[index as usize]
    }

    /// Frees every occupied slot, handing each task to `f`.
    pub(crate) fn drain(&mut self, mut f: impl FnMut(T)) {
        for index in 0..self.slots.len() as u32 {
            let slot = &mut self.slots[index as usize];
            if slot.state() != VACANT {
                slot.set_state(UNLINKED);
                f(self.take(index));
            }
        }
        if self.slots.capacity() > KEEP_SLOTS {
            drop(self.release_memory());
        }
    }
}

impl<T> Drop for Entries<T> {
    fn drop(&mut self) {
        // Every task is dropped even if one's `Drop` panics (as a `Vec`
        // drops all its elements); the first panic goes on afterwards.
        let mut first_panic = None;
        for slot in &mut self.slots {
            if slot.state() != VACANT {
                slot.set_state(VACANT);
                // SAFETY: occupied slots hold an initialised task (module
                // invariant); marking the slot VACANT first ensures it is
                // dropped once even if a task's destructor panics midway.
                let dropped =
                    catch_unwind(AssertUnwindSafe(|| unsafe { slot.task.assume_init_drop() }));
                if let Err(panic) = dropped {
                    match first_panic {
                        None => first_panic = Some(panic),
                        Some(_) => discard_panic(panic),
                    }
                }
            }
        }
        if let Some(panic) = first_panic {
            resume_unwind(panic);
        }
    }
}

#[cfg(test)]
mod tests;
