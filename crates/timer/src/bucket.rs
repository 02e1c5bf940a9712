//! A bucket: the entries of one wheel slot, as two arrays of arena indices
//! (see `entries`), its *front* and its *back*.
//!
//! Adding, removing any entry and taking the last entry of either array are
//! O(1) and allocate only when an array grows: each entry's slot records
//! where in which array it sits (`Slot::pos`), so removing it moves the
//! array's last entry into its place (and updates that entry's `pos`).
//!
//! Why arrays and not lists threaded through the slots: in a big bucket each
//! entry's slot misses the cache (it was last touched when added), and a
//! list is a chain of dependent loads, so its walk waits for one miss after
//! another. An array names the entries ahead of the one being taken, so a
//! walk prefetches their slots [`LOOKAHEAD`] entries early and is bound by
//! memory bandwidth rather than latency. Removal pays one more touch (the
//! moved entry's slot) where unlinking from a doubly linked list touched
//! both neighbours.
//!
//! The front holds the entries a coarse bucket's early pass moves, the back
//! those left for its final pass (see the wheel's `link`); a level-0 bucket
//! uses its back only.
//!
//! Invariants:
//! - An entry is in at most one bucket, at `front[p]` or `back[p]` as its
//!   slot's `pos` says ([`FRONT`] bit, and `p` below it), and its slot's
//!   state is the bucket's level (`UNLINKED` when in none); the level and
//!   the entry's deadline name the bucket (see the wheel's `bucket_id`).
//! - `expiration` is the start of the time range the bucket currently covers,
//!   or [`NO_EXPIRATION`] while it covers none (never filled, or just
//!   flushed). It changes only through [`Bucket::set_expiration`], whose
//!   `true` result tells the wheel to queue the bucket in the delay queue:
//!   a bucket is queued once per round of its wheel (a coarse one again for
//!   its final pass), not once per entry.

use crate::entries::{Entries, UNLINKED};

/// `Slot::pos` bit of an entry in a bucket's front.
pub(crate) const FRONT: u32 = 1 << 31;

/// How many entries ahead of the one it takes a walk prefetches the slot
/// of: enough misses in flight to cover a memory access's latency.
pub(crate) const LOOKAHEAD: usize = 16;

/// Capacity (entries) above which an array gives memory back as it empties
/// (see `shrink_if_sparse`), at most: a peak of millions of pending tasks
/// must not stay resident in buckets once they are gone, while small
/// buckets, which fill and empty every round, keep theirs. With Kafka's 20
/// buckets each array may keep 4 KiB.
const MAX_KEEP: u32 = 1024;

/// The fewest entries an array keeps room for, whatever the wheel's size.
const MIN_KEEP: u32 = 16;

/// Entries all of a level's arrays together keep room for, at most, once
/// emptied (160 KiB), up to 1,280 buckets: a wide wheel's buckets keep less each,
/// so that a peak spread over thousands of buckets does not leave a tenth
/// of its memory behind. Wider still, each array keeps [`MIN_KEEP`] (64
/// bytes): 512 KiB a level at 4,096 buckets.
const LEVEL_KEEP: u64 = 2 * 20 * MAX_KEEP as u64;

/// What each array of a level of `wheel_size` buckets keeps room for once
/// emptied: [`LEVEL_KEEP`] shared among the level's arrays, within
/// [`MIN_KEEP`]..=[`MAX_KEEP`].
pub(crate) fn keep_capacity(wheel_size: u64) -> u32 {
    let share = LEVEL_KEEP / (2 * wheel_size).max(1);
    share.clamp(MIN_KEEP as u64, MAX_KEEP as u64) as u32
}

/// `expiration` of a bucket that covers no time range.
pub(crate) const NO_EXPIRATION: u64 = u64::MAX;

/// One of a bucket's two arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// Entries a coarse bucket's early pass moves.
    Front,
    /// The rest.
    Back,
}

#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    front: Vec<u32>,
    back: Vec<u32>,
    /// Capacity (entries) above which each array gives memory back as it
    /// empties: see [`keep_capacity`].
    keep: u32,
    /// Whether a pass over the bucket is paused (see the wheel's `pass`).
    pub(crate) paused: bool,
    expiration: u64,
    /// A lower bound on the deadlines of the entries waiting for the
    /// bucket's final pass (those at its back, see the wheel's `link`):
    /// maintained by the wheel, which uses it to tell how long that pass may
    /// be put off.
    pub(crate) min_deadline: u64,
}

impl Bucket {
    /// An empty bucket whose arrays keep room for `keep` entries each once
    /// emptied (see [`keep_capacity`]).
    pub(crate) const fn empty(keep: u32) -> Bucket {
        Bucket {
            front: Vec::new(),
            back: Vec::new(),
            keep,
            paused: false,
            expiration: NO_EXPIRATION,
            min_deadline: u64::MAX,
        }
    }

    /// Empties the bucket and frees its arrays' memory.
    pub(crate) fn clear(&mut self) {
        *self = Bucket::empty(self.keep);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.front.is_empty() && self.back.is_empty()
    }

    /// Number of entries in the bucket.
    pub(crate) fn len(&self) -> usize {
        self.front.len() + self.back.len()
    }

    /// Every entry, front first (for checks and tests).
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.front.iter().chain(&self.back).copied()
    }

    pub(crate) fn expiration(&self) -> u64 {
        self.expiration
    }

    /// Sets the expiration; returns whether it changed (Kafka's
    /// `setExpiration`), i.e. whether the bucket must be queued again.
    pub(crate) fn set_expiration(&mut self, expiration: u64) -> bool {
        std::mem::replace(&mut self.expiration, expiration) != expiration
    }

    fn side(&mut self, side: Side) -> &mut Vec<u32> {
        match side {
            Side::Front => &mut self.front,
            Side::Back => &mut self.back,
        }
    }

    /// Adds the unlinked entry `index` to `side` and records `level` (the
    /// bucket's) in its slot.
    ///
    /// # Panics
    /// When one array would hold more than 2^31 entries (64 GiB of slots:
    /// memory runs out long before).
    #[inline]
    pub(crate) fn push<T>(&mut self, level: u32, entries: &mut Entries<T>, index: u32, side: Side) {
        let list = self.side(side);
        let at = u32::try_from(list.len())
            .ok()
            .filter(|&at| at < FRONT)
            .expect("timer bucket is full: 2^31 entries in one array");
        list.push(index);
        let slot = entries.slot_mut(index);
        debug_assert_eq!(slot.state(), UNLINKED, "entry is already in a bucket");
        slot.set_state(level);
        slot.pos = match side {
            Side::Front => at | FRONT,
            Side::Back => at,
        };
    }

    /// Takes entry `index`, which must be in this bucket, out of it.
    #[inline]
    pub(crate) fn unlink<T>(&mut self, entries: &mut Entries<T>, index: u32) {
        let pos = {
            let slot = entries.slot_mut(index);
            debug_assert!(slot.state() != UNLINKED, "entry is not in a bucket");
            slot.set_state(UNLINKED);
            slot.pos
        };
        let list = match pos & FRONT {
            0 => &mut self.back,
            _ => &mut self.front,
        };
        let at = (pos & !FRONT) as usize;
        debug_assert_eq!(list[at], index, "slot's pos names another entry");
        let last = list.pop().expect("a bucket holding the entry is not empty");
        if last != index {
            list[at] = last;
            entries.slot_mut(last).pos = pos;
        }
        shrink_if_sparse(list, self.keep);
    }

    /// Takes the last entry of `side` out of the bucket, if any, and
    /// prefetches the slot of the entry [`LOOKAHEAD`] places before it.
    #[inline]
    pub(crate) fn pop<T>(&mut self, entries: &mut Entries<T>, side: Side) -> Option<u32> {
        let keep = self.keep;
        let list = self.side(side);
        let index = list.pop()?;
        if let Some(ahead) = list.len().checked_sub(LOOKAHEAD) {
            entries.prefetch(list[ahead]);
        }
        shrink_if_sparse(list, keep);
        let slot = entries.slot_mut(index);
        debug_assert_eq!(slot.pos & !FRONT, list.len() as u32);
        slot.set_state(UNLINKED);
        Some(index)
    }

    /// Prefetches the slots of the last [`LOOKAHEAD`] entries of `side`:
    /// those a walk with [`pop`](Self::pop) takes before its own prefetches
    /// have run ahead.
    pub(crate) fn prefetch_tail<T>(&self, entries: &Entries<T>, side: Side) {
        let list = match side {
            Side::Front => &self.front,
            Side::Back => &self.back,
        };
        for &index in list.iter().rev().take(LOOKAHEAD) {
            entries.prefetch(index);
        }
    }

    /// Whether each entry's slot says where in the arrays it is and that it
    /// is linked at `level` (for the crate's tests).
    #[cfg(test)]
    pub(crate) fn positions_match<T>(&self, entries: &Entries<T>, level: u32) -> bool {
        let sides = [(FRONT, &self.front), (0, &self.back)];
        sides.into_iter().all(|(side, list)| {
            list.iter().enumerate().all(|(at, &index)| {
                let slot = entries.slot(index);
                slot.pos == at as u32 | side && slot.state() == level
            })
        })
    }

    /// Memory the arrays hold, in entries (for tests of its release).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.front.capacity() + self.back.capacity()
    }
}

/// Halves a large array's memory once it is three-quarters empty: a pass
/// that moves millions of entries down a level then gives the memory of
/// the array it empties back as the one it fills grows, rather than
/// holding both at their peak. Amortised O(1): each halving follows as many
/// removals as it keeps room for.
#[inline(always)]
fn shrink_if_sparse(list: &mut Vec<u32>, keep: u32) {
    if list.capacity() > keep as usize && list.len() < list.capacity() / 4 {
        halve(list);
    }
}

#[cold]
#[inline(never)]
fn halve(list: &mut Vec<u32>) {
    list.shrink_to(list.capacity() / 2);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the invariant between the arrays and the slots' `pos`.
    fn check(bucket: &Bucket, entries: &Entries<u32>, level: u32) {
        assert!(bucket.positions_match(entries, level));
    }

    #[test]
    fn push_unlink_any_and_pop_keep_positions() {
        let mut entries = Entries::new();
        let mut bucket = Bucket::empty(MAX_KEEP);
        let ids: Vec<u32> = (0..40).map(|i| entries.insert(0, i)).collect();
        for &i in &ids {
            let side = if i % 3 == 0 { Side::Front } else { Side::Back };
            bucket.push(7, &mut entries, i, side);
        }
        check(&bucket, &entries, 7);
        assert_eq!(bucket.len(), 40);
        // The first, a middle one and the last of each side.
        for i in [0, 3, 39, 1, 20, 38, 21] {
            bucket.unlink(&mut entries, ids[i]);
            assert_eq!(entries.slot(ids[i]).state(), UNLINKED);
            check(&bucket, &entries, 7);
        }
        assert_eq!(bucket.len(), 33);
        let mut popped = Vec::new();
        for side in [Side::Front, Side::Back] {
            while let Some(i) = bucket.pop(&mut entries, side) {
                assert_eq!(entries.slot(i).state(), UNLINKED);
                check(&bucket, &entries, 7);
                popped.push(i);
            }
        }
        popped.sort_unstable();
        let mut left = ids.clone();
        left.retain(|i| ![0, 3, 39, 1, 20, 38, 21].contains(i));
        assert_eq!(popped, left);
        assert!(bucket.is_empty());
    }

    #[test]
    fn a_large_array_gives_its_memory_back_as_it_empties() {
        let mut entries = Entries::new();
        let mut bucket = Bucket::empty(MAX_KEEP);
        let ids: Vec<u32> = (0..8 * MAX_KEEP).map(|i| entries.insert(0, i)).collect();
        for &i in &ids {
            bucket.push(1, &mut entries, i, Side::Back);
        }
        let peak = bucket.capacity();
        assert!(peak >= ids.len());
        for &i in &ids[..ids.len() * 7 / 8] {
            bucket.unlink(&mut entries, i);
        }
        assert!(
            bucket.capacity() <= peak / 2,
            "an array an eighth full shrinks"
        );
        check(&bucket, &entries, 1);
        while bucket.pop(&mut entries, Side::Back).is_some() {}
        assert!(
            bucket.capacity() <= MAX_KEEP as usize,
            "{}",
            bucket.capacity()
        );
        // A small one keeps its arrays.
        bucket.push(1, &mut entries, ids[0], Side::Front);
        bucket.unlink(&mut entries, ids[0]);
        assert!(bucket.capacity() > 0);
    }

    #[test]
    fn a_level_keeps_room_for_at_most_its_share() {
        // Kafka's 20 buckets and narrower wheels keep the most.
        assert_eq!(keep_capacity(20), MAX_KEEP);
        assert_eq!(keep_capacity(2), MAX_KEEP);
        assert_eq!(keep_capacity(512), 40);
        assert_eq!(keep_capacity(4096), MIN_KEEP);
        assert_eq!(keep_capacity(1 << 20), MIN_KEEP);
        for size in [20, 64, 512, 1000] {
            assert!(2 * size * keep_capacity(size) as u64 <= LEVEL_KEEP);
        }
    }

    /// The builder's `wheel_size` docs state a bucket's size.
    #[test]
    fn a_bucket_is_72_bytes() {
        assert_eq!(std::mem::size_of::<Bucket>(), 72);
    }

    #[test]
    fn set_expiration_reports_changes_only() {
        let mut bucket = Bucket::empty(MAX_KEEP);
        assert_eq!(bucket.expiration(), NO_EXPIRATION);
        assert!(bucket.set_expiration(20));
        assert!(!bucket.set_expiration(20));
        assert!(bucket.set_expiration(40));
        assert!(bucket.set_expiration(NO_EXPIRATION));
    }
}
