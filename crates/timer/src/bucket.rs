//! A bucket: the entries of one wheel slot, as a doubly linked list threaded
//! through the arena (see `entries`).
//!
//! Appending, removing any entry and popping the head are O(1) and never
//! allocate: the links are the `prev`/`next` indices inside each slot.
//!
//! Invariants:
//! - An entry is linked into at most one bucket, and its `bucket` field names
//!   that bucket (or is `UNLINKED`).
//! - `head == NIL` iff `tail == NIL` iff the bucket is empty.
//! - `expiration` is the start of the time range the bucket currently covers,
//!   or [`NO_EXPIRATION`] while it covers none (never filled, or just
//!   flushed). It changes only through [`Bucket::set_expiration`], whose
//!   `true` result tells the wheel to queue the bucket in the delay queue:
//!   a bucket is queued once per round of its wheel, not once per entry.

use crate::entries::{Entries, NIL, UNLINKED};

/// `expiration` of a bucket that covers no time range.
pub(crate) const NO_EXPIRATION: u64 = u64::MAX;

/// `cursor` of a bucket with no paused early pass. (Entry indices are below
/// `UNLINKED`, and `NIL` means "paused at the end of the list".)
pub(crate) const NOT_PAUSED: u32 = u32::MAX - 1;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    head: u32,
    tail: u32,
    /// Entries linked.
    len: u32,
    /// Where a paused early pass resumes (an entry, or `NIL` at the end), or
    /// [`NOT_PAUSED`]. See the wheel's `pass`.
    pub(crate) cursor: u32,
    expiration: u64,
    /// A lower bound on the deadlines of the entries waiting for the
    /// bucket's final pass (those at its back, see the wheel's `place`):
    /// maintained by the wheel, which uses it to tell how long that pass may
    /// be put off.
    pub(crate) min_deadline: u64,
}

impl Bucket {
    pub(crate) const EMPTY: Bucket = Bucket {
        head: NIL,
        tail: NIL,
        len: 0,
        cursor: NOT_PAUSED,
        expiration: NO_EXPIRATION,
        min_deadline: u64::MAX,
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Number of entries linked.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// The first entry, or [`NIL`].
    pub(crate) fn head(&self) -> u32 {
        self.head
    }

    pub(crate) fn expiration(&self) -> u64 {
        self.expiration
    }

    /// Sets the expiration; returns whether it changed (Kafka's
    /// `setExpiration`), i.e. whether the bucket must be queued again.
    pub(crate) fn set_expiration(&mut self, expiration: u64) -> bool {
        std::mem::replace(&mut self.expiration, expiration) != expiration
    }

    /// Appends the unlinked entry `index` and records `id` as its bucket.
    pub(crate) fn push_back<T>(&mut self, id: u32, entries: &mut Entries<T>, index: u32) {
        let tail = self.tail;
        {
            let slot = entries.slot_mut(index);
            debug_assert_eq!(slot.bucket, UNLINKED, "entry is already in a bucket");
            slot.bucket = id;
            slot.prev = tail;
            slot.next = NIL;
        }
        if tail == NIL {
            self.head = index;
        } else {
            entries.slot_mut(tail).next = index;
        }
        self.tail = index;
        self.len += 1;
    }

    /// Prepends the unlinked entry `index` and records `id` as its bucket.
    pub(crate) fn push_front<T>(&mut self, id: u32, entries: &mut Entries<T>, index: u32) {
        let head = self.head;
        {
            let slot = entries.slot_mut(index);
            debug_assert_eq!(slot.bucket, UNLINKED, "entry is already in a bucket");
            slot.bucket = id;
            slot.prev = NIL;
            slot.next = head;
        }
        if head == NIL {
            self.tail = index;
        } else {
            entries.slot_mut(head).prev = index;
        }
        self.head = index;
        self.len += 1;
    }

    /// Unlinks entry `index`, which must be in this bucket.
    pub(crate) fn unlink<T>(&mut self, entries: &mut Entries<T>, index: u32) {
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
            debug_assert_eq!(self.head, index);
            self.head = next;
        } else {
            entries.slot_mut(prev).next = next;
        }
        if next == NIL {
            debug_assert_eq!(self.tail, index);
            self.tail = prev;
        } else {
            entries.slot_mut(next).prev = prev;
        }
        self.len -= 1;
    }

    /// Unlinks and returns the first entry, if any.
    pub(crate) fn pop_front<T>(&mut self, entries: &mut Entries<T>) -> Option<u32> {
        let head = self.head;
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

    fn collect(bucket: &Bucket, entries: &Entries<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = bucket.head;
        while at != NIL {
            out.push(at);
            at = entries.slot(at).next;
        }
        out
    }

    #[test]
    fn append_remove_any_and_pop_in_order() {
        let mut entries = Entries::new();
        let mut bucket = Bucket::EMPTY;
        let ids: Vec<u32> = (0..5).map(|i| entries.insert(0, i)).collect();
        for &i in &ids {
            bucket.push_back(7, &mut entries, i);
            assert_eq!(entries.slot(i).bucket, 7);
        }
        assert_eq!(collect(&bucket, &entries), ids);
        bucket.unlink(&mut entries, ids[2]); // middle
        bucket.unlink(&mut entries, ids[0]); // head
        bucket.unlink(&mut entries, ids[4]); // tail
        assert_eq!(collect(&bucket, &entries), vec![ids[1], ids[3]]);
        assert_eq!(bucket.len(), 2);
        assert_eq!(entries.slot(ids[2]).bucket, UNLINKED);
        assert_eq!(bucket.pop_front(&mut entries), Some(ids[1]));
        assert_eq!(bucket.pop_front(&mut entries), Some(ids[3]));
        assert_eq!(bucket.pop_front(&mut entries), None);
        assert!(bucket.is_empty());
        assert_eq!(bucket.len(), 0);
    }

    #[test]
    fn push_front_prepends_and_keeps_the_links() {
        let mut entries = Entries::new();
        let mut bucket = Bucket::EMPTY;
        let ids: Vec<u32> = (0..4).map(|i| entries.insert(0, i)).collect();
        bucket.push_front(3, &mut entries, ids[1]);
        bucket.push_back(3, &mut entries, ids[2]);
        bucket.push_front(3, &mut entries, ids[0]);
        bucket.push_back(3, &mut entries, ids[3]);
        assert_eq!(collect(&bucket, &entries), ids);
        bucket.unlink(&mut entries, ids[0]);
        bucket.unlink(&mut entries, ids[3]);
        assert_eq!(collect(&bucket, &entries), vec![ids[1], ids[2]]);
        assert_eq!(bucket.pop_front(&mut entries), Some(ids[1]));
        assert_eq!(bucket.pop_front(&mut entries), Some(ids[2]));
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
