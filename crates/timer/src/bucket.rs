//! A bucket: the entries of one wheel slot, as [`CHAINS`] doubly linked
//! lists threaded through the arena (see `entries`).
//!
//! Appending, prepending, removing any entry and popping a chain's head are
//! O(1) and never allocate: the links are the `prev`/`next` indices inside
//! each slot. An entry's chain follows from its index alone.
//!
//! Why several chains: walking a list is a chain of dependent loads, and in
//! a big bucket each one misses the cache (the entries were last touched
//! when they were added). The wheel walks a bucket's chains in turn, so that
//! [`CHAINS`] of those misses are under way at once instead of one.
//!
//! Invariants:
//! - An entry is linked into at most one bucket, in chain
//!   [`chain`]`(index)`, and its `bucket` field names that bucket (or is
//!   `UNLINKED`).
//! - For each chain, `head == NIL` iff `tail == NIL`; `len` counts the
//!   entries of all chains.
//! - `expiration` is the start of the time range the bucket currently covers,
//!   or [`NO_EXPIRATION`] while it covers none (never filled, or just
//!   flushed). It changes only through [`Bucket::set_expiration`], whose
//!   `true` result tells the wheel to queue the bucket in the delay queue:
//!   a bucket is queued once per round of its wheel, not once per entry.

use crate::entries::{Entries, NIL, UNLINKED};

/// Lists per bucket.
pub(crate) const CHAINS: usize = 8;

/// The chain of a bucket that entry `index` goes in.
#[inline]
pub(crate) fn chain(index: u32) -> usize {
    index as usize % CHAINS
}

/// `expiration` of a bucket that covers no time range.
pub(crate) const NO_EXPIRATION: u64 = u64::MAX;

/// `cursor` of a bucket with no paused pass. (Entry indices are below
/// `UNLINKED`, and `NIL` means "paused at the end of the chain".)
pub(crate) const NOT_PAUSED: u32 = u32::MAX - 1;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    head: [u32; CHAINS],
    tail: [u32; CHAINS],
    /// Entries linked.
    len: u32,
    /// Where a paused pass resumes in each chain (an entry, or `NIL` at the
    /// chain's end), or [`NOT_PAUSED`] in every chain. See the wheel's
    /// `pass`.
    pub(crate) cursor: [u32; CHAINS],
    expiration: u64,
    /// A lower bound on the deadlines of the entries waiting for the
    /// bucket's final pass (those at its back, see the wheel's `place`):
    /// maintained by the wheel, which uses it to tell how long that pass may
    /// be put off.
    pub(crate) min_deadline: u64,
}

impl Bucket {
    pub(crate) const EMPTY: Bucket = Bucket {
        head: [NIL; CHAINS],
        tail: [NIL; CHAINS],
        len: 0,
        cursor: [NOT_PAUSED; CHAINS],
        expiration: NO_EXPIRATION,
        min_deadline: u64::MAX,
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of entries linked.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// Each chain's first entry, or [`NIL`].
    pub(crate) fn heads(&self) -> [u32; CHAINS] {
        self.head
    }

    /// Whether a pass over the bucket is paused (see `cursor`).
    pub(crate) fn is_paused(&self) -> bool {
        self.cursor[0] != NOT_PAUSED
    }

    pub(crate) fn expiration(&self) -> u64 {
        self.expiration
    }

    /// Sets the expiration; returns whether it changed (Kafka's
    /// `setExpiration`), i.e. whether the bucket must be queued again.
    pub(crate) fn set_expiration(&mut self, expiration: u64) -> bool {
        std::mem::replace(&mut self.expiration, expiration) != expiration
    }

    /// Appends the unlinked entry `index` to its chain and records `id` as
    /// its bucket.
    pub(crate) fn push_back<T>(&mut self, id: u32, entries: &mut Entries<T>, index: u32) {
        let c = chain(index);
        let tail = self.tail[c];
        {
            let slot = entries.slot_mut(index);
            debug_assert_eq!(slot.bucket, UNLINKED, "entry is already in a bucket");
            slot.bucket = id;
            slot.prev = tail;
            slot.next = NIL;
        }
        if tail == NIL {
            self.head[c] = index;
        } else {
            entries.slot_mut(tail).next = index;
        }
        self.tail[c] = index;
        self.len += 1;
    }

    /// Prepends the unlinked entry `index` to its chain and records `id` as
    /// its bucket.
    pub(crate) fn push_front<T>(&mut self, id: u32, entries: &mut Entries<T>, index: u32) {
        let c = chain(index);
        let head = self.head[c];
        {
            let slot = entries.slot_mut(index);
            debug_assert_eq!(slot.bucket, UNLINKED, "entry is already in a bucket");
            slot.bucket = id;
            slot.prev = NIL;
            slot.next = head;
        }
        if head == NIL {
            self.tail[c] = index;
        } else {
            entries.slot_mut(head).prev = index;
        }
        self.head[c] = index;
        self.len += 1;
    }

    /// Unlinks entry `index`, which must be in this bucket.
    pub(crate) fn unlink<T>(&mut self, entries: &mut Entries<T>, index: u32) {
        let c = chain(index);
        let (prev, next) = {
            let slot = entries.slot_mut(index);
            debug_assert!(slot.bucket != UNLINKED, "entry is not in a bucket");
            let links = (slot.prev, slot.next);
            slot.bucket = UNLINKED;
            slot.prev = NIL;
            slot.next = NIL;
            links
        };
        if prev == NIL {
            debug_assert_eq!(self.head[c], index);
            self.head[c] = next;
        } else {
            entries.slot_mut(prev).next = next;
        }
        if next == NIL {
            debug_assert_eq!(self.tail[c], index);
            self.tail[c] = prev;
        } else {
            entries.slot_mut(next).prev = prev;
        }
        self.len -= 1;
    }

    /// Unlinks and returns the first entry of chain `c`, if any.
    pub(crate) fn pop_front<T>(&mut self, entries: &mut Entries<T>, c: usize) -> Option<u32> {
        let head = self.head[c];
        if head == NIL {
            return None;
        }
        self.unlink(entries, head);
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each chain's entries, in order.
    fn collect(bucket: &Bucket, entries: &Entries<u32>) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        for mut at in bucket.heads() {
            let mut chain = Vec::new();
            while at != NIL {
                chain.push(at);
                at = entries.slot(at).next;
            }
            out.push(chain);
        }
        out
    }

    /// Entries `ids` split by chain, in order.
    fn by_chain(ids: &[u32]) -> Vec<Vec<u32>> {
        (0..CHAINS)
            .map(|c| ids.iter().copied().filter(|&i| chain(i) == c).collect())
            .collect()
    }

    #[test]
    fn append_remove_any_and_pop_in_order() {
        let mut entries = Entries::new();
        let mut bucket = Bucket::EMPTY;
        let ids: Vec<u32> = (0..3 * CHAINS as u32)
            .map(|i| entries.insert(0, i))
            .collect();
        for &i in &ids {
            bucket.push_back(7, &mut entries, i);
            assert_eq!(entries.slot(i).bucket, 7);
        }
        assert_eq!(collect(&bucket, &entries), by_chain(&ids));
        let (head, middle, tail) = (ids[0], ids[CHAINS], ids[2 * CHAINS]);
        for i in [middle, head, tail] {
            bucket.unlink(&mut entries, i);
            assert_eq!(entries.slot(i).bucket, UNLINKED);
        }
        let left: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|i| ![head, middle, tail].contains(i))
            .collect();
        assert_eq!(collect(&bucket, &entries), by_chain(&left));
        assert_eq!(bucket.len(), left.len());
        let mut popped = Vec::new();
        for c in 0..CHAINS {
            while let Some(i) = bucket.pop_front(&mut entries, c) {
                assert_eq!(chain(i), c);
                popped.push(i);
            }
        }
        popped.sort_unstable();
        assert_eq!(popped, left);
        assert!(bucket.is_empty());
        assert_eq!(bucket.heads(), [NIL; CHAINS]);
    }

    #[test]
    fn push_front_prepends_and_keeps_the_links() {
        let mut entries = Entries::new();
        let mut bucket = Bucket::EMPTY;
        // Four entries of one chain.
        let ids: Vec<u32> = (0..4 * CHAINS as u32)
            .map(|i| entries.insert(0, i))
            .filter(|&i| chain(i) == 0)
            .collect();
        bucket.push_front(3, &mut entries, ids[1]);
        bucket.push_back(3, &mut entries, ids[2]);
        bucket.push_front(3, &mut entries, ids[0]);
        bucket.push_back(3, &mut entries, ids[3]);
        assert_eq!(collect(&bucket, &entries)[0], ids);
        bucket.unlink(&mut entries, ids[0]);
        bucket.unlink(&mut entries, ids[3]);
        assert_eq!(collect(&bucket, &entries)[0], vec![ids[1], ids[2]]);
        assert_eq!(bucket.pop_front(&mut entries, 0), Some(ids[1]));
        assert_eq!(bucket.pop_front(&mut entries, 0), Some(ids[2]));
        assert!(bucket.is_empty());
    }

    #[test]
    fn set_expiration_reports_changes_only() {
        let mut bucket = Bucket::EMPTY;
        assert_eq!(bucket.expiration(), NO_EXPIRATION);
        assert!(bucket.set_expiration(20));
        assert!(!bucket.set_expiration(20));
        assert!(bucket.set_expiration(40));
        assert!(bucket.set_expiration(NO_EXPIRATION));
    }
}
