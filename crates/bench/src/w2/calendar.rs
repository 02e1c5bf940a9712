//! A calendar queue: items due at whole milliseconds, taken in due order.
//!
//! W2's completion thread needs a delay queue of requests due at whole
//! milliseconds, nearly all within the timeout of now. A binary heap costs a
//! sift-down of about log₂(n) cache lines per pop, and at paced rates every
//! line is cold (a thread's cache does not survive its millisecond sleep). A
//! calendar keeps one bucket per millisecond in a ring, so a push appends to
//! one vector and taking a millisecond's requests reads one contiguous run.
//!
//! Why not the project's `timer::TimingWheel`: it pays for what this queue
//! does not need (an arena entry and list links per item, for O(1) cancel,
//! and cascades between levels), and the completion queue is harness
//! overhead that W2 wants as small as possible and apart from the code it
//! measures.
//!
//! Invariants:
//! - Every item in the ring is due in `[cursor, cursor + R)`, where `R` is
//!   the ring's length (a power of two), and sits in bucket `due & (R - 1)`;
//!   so a bucket holds items of a single due millisecond.
//! - Bit `i` of `occupied` is set exactly when bucket `i` is not empty.
//! - Items due at or after `cursor + R` wait in `far` (a heap ordered by due
//!   time, then by push order) and move into the ring as the cursor reaches
//!   them.
//! - An item pushed with a due time before the cursor is filed at the
//!   cursor: it is overdue, and is taken with the cursor's millisecond.
//!
//! Within a millisecond, items come out in push order.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;

/// Most buckets a ring has.
const MAX_RING: u64 = 1 << 16;

/// Buckets whose vectors grew past this many items are given their memory
/// back once emptied, so that a burst does not keep `R` large vectors.
const KEEP_CAPACITY: usize = 256;

/// An item beyond the ring's reach.
struct Far<T> {
    due_ms: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Far<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ms, self.seq) == (other.due_ms, other.seq)
    }
}
impl<T> Eq for Far<T> {}
impl<T> PartialOrd for Far<T> {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Far<T> {
    /// Reversed, so that the max-heap's top is the earliest (then the first
    /// pushed).
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.due_ms, other.seq).cmp(&(self.due_ms, self.seq))
    }
}

/// Items due at whole milliseconds, taken in due order (see the module
/// docs).
pub struct Calendar<T> {
    buckets: Box<[Vec<T>]>,
    /// One bit per bucket: set when the bucket is not empty.
    occupied: Box<[u64]>,
    /// `buckets.len() - 1`.
    mask: u64,
    /// No item in the ring is due before it.
    cursor_ms: u64,
    /// Items in the ring.
    in_ring: usize,
    far: BinaryHeap<Far<T>>,
    /// Pushes to `far` so far: keeps its equal due times in push order.
    far_seq: u64,
}

impl<T> std::fmt::Debug for Calendar<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calendar")
            .field("ring_ms", &self.buckets.len())
            .field("cursor_ms", &self.cursor_ms)
            .field("in_ring", &self.in_ring)
            .field("far", &self.far.len())
            .finish()
    }
}

impl<T> Calendar<T> {
    /// An empty calendar whose ring covers at least `span_ms` milliseconds
    /// (rounded up to a power of two, at least 64 and at most 65,536: 1.5
    /// MB of empty buckets). Items due further ahead than the ring reaches
    /// wait in a heap, so any span is correct; the ring should cover how
    /// far ahead most items are due.
    pub fn new(span_ms: u64) -> Self {
        let len = span_ms.clamp(64, MAX_RING).next_power_of_two() as usize;
        Calendar {
            buckets: (0..len).map(|_| Vec::new()).collect(),
            occupied: vec![0u64; len / 64].into_boxed_slice(),
            mask: len as u64 - 1,
            cursor_ms: 0,
            in_ring: 0,
            far: BinaryHeap::new(),
            far_seq: 0,
        }
    }

    /// Number of items queued.
    pub fn len(&self) -> usize {
        self.in_ring + self.far.len()
    }

    /// Whether no item is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `item`, due at `due_ms`.
    pub fn push(&mut self, due_ms: u64, item: T) {
        let due_ms = due_ms.max(self.cursor_ms);
        if due_ms - self.cursor_ms <= self.mask {
            self.file(due_ms, item);
        } else {
            self.far.push(Far {
                due_ms,
                seq: self.far_seq,
                item,
            });
            self.far_seq += 1;
        }
    }

    /// Due time of the earliest item (after clamping to the cursor, see the
    /// module docs), if any.
    pub fn head_ms(&self) -> Option<u64> {
        self.first_occupied()
            .or_else(|| self.far.peek().map(|f| f.due_ms))
    }

    /// Appends every item due by `now_ms` to `out`, in due order; returns
    /// how many.
    pub fn pop_due(&mut self, now_ms: u64, out: &mut Vec<T>) -> usize {
        let before = out.len();
        loop {
            if self.in_ring == 0 {
                // Only far items, if any: jump to the first of them (or to
                // now) instead of stepping through empty milliseconds.
                let Some(head) = self.far.peek().map(|f| f.due_ms) else {
                    break;
                };
                if head > now_ms {
                    break;
                }
                self.cursor_ms = self.cursor_ms.max(head);
                self.refill();
            }
            let Some(due_ms) = self.first_occupied() else {
                break;
            };
            if due_ms > now_ms {
                break;
            }
            self.cursor_ms = due_ms;
            let i = (due_ms & self.mask) as usize;
            let bucket = &mut self.buckets[i];
            self.in_ring -= bucket.len();
            out.append(bucket);
            if bucket.capacity() > KEEP_CAPACITY {
                *bucket = Vec::new();
            }
            self.occupied[i / 64] &= !(1u64 << (i % 64));
            self.refill();
        }
        // Nothing in the ring is due by now: the cursor may move up to it,
        // which lets the ring reach further ahead.
        if self.cursor_ms < now_ms {
            self.cursor_ms = now_ms;
            self.refill();
        }
        out.len() - before
    }

    /// Puts `item` in the ring. `due_ms` is within its reach.
    fn file(&mut self, due_ms: u64, item: T) {
        debug_assert!(due_ms >= self.cursor_ms && due_ms - self.cursor_ms <= self.mask);
        let i = (due_ms & self.mask) as usize;
        self.buckets[i].push(item);
        self.occupied[i / 64] |= 1u64 << (i % 64);
        self.in_ring += 1;
    }

    /// Moves the far items the ring now reaches into it.
    fn refill(&mut self) {
        while self
            .far
            .peek()
            .is_some_and(|f| f.due_ms.max(self.cursor_ms) - self.cursor_ms <= self.mask)
        {
            let Some(Far { due_ms, item, .. }) = self.far.pop() else {
                break;
            };
            self.file(due_ms.max(self.cursor_ms), item);
        }
    }

    /// Due time of the first non-empty bucket at or after the cursor.
    fn first_occupied(&self) -> Option<u64> {
        if self.in_ring == 0 {
            return None;
        }
        let len = self.buckets.len() as u64;
        let start = self.cursor_ms & self.mask;
        let words = self.occupied.len();
        // Scan the bitmap from the cursor's bit, wrapping once: the first
        // word with the bits below the cursor's cleared, the other words
        // whole, and the first word again for the bits below the cursor.
        let first = (start / 64) as usize;
        for step in 0..=words {
            let w = (first + step) % words;
            let mut bits = self.occupied[w];
            if step == 0 {
                bits &= !0u64 << (start % 64);
            }
            if bits != 0 {
                let i = w as u64 * 64 + u64::from(bits.trailing_zeros());
                // Distance from the cursor's bucket, modulo the ring.
                return Some(self.cursor_ms + ((i + len - start) & self.mask));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use std::collections::BTreeMap;

    fn drain(c: &mut Calendar<u32>, now: u64) -> Vec<u32> {
        let mut out = Vec::new();
        c.pop_due(now, &mut out);
        out
    }

    #[test]
    fn takes_items_in_due_order_and_push_order_within_a_millisecond() {
        let mut c = Calendar::new(64);
        c.push(5, 1);
        c.push(3, 2);
        c.push(5, 3);
        c.push(3, 4);
        assert_eq!(c.head_ms(), Some(3));
        assert!(drain(&mut c, 2).is_empty());
        assert_eq!(drain(&mut c, 4), vec![2, 4]);
        assert_eq!(c.head_ms(), Some(5));
        assert_eq!(drain(&mut c, 10), vec![1, 3]);
        assert!(c.is_empty());
        assert_eq!(c.head_ms(), None);
    }

    #[test]
    fn overdue_items_come_out_with_the_next_take() {
        let mut c = Calendar::new(64);
        c.push(10, 1);
        assert_eq!(drain(&mut c, 20), vec![1]);
        c.push(5, 2); // before the cursor
        assert_eq!(c.head_ms(), Some(20));
        assert_eq!(drain(&mut c, 20), vec![2]);
    }

    #[test]
    fn items_beyond_the_ring_wait_and_come_back_in_order() {
        let mut c = Calendar::new(64);
        c.push(1_000, 1);
        c.push(70, 2);
        c.push(1_000, 3);
        c.push(63, 4);
        c.push(500, 5);
        assert_eq!(c.len(), 5);
        assert_eq!(c.head_ms(), Some(63));
        assert_eq!(drain(&mut c, 100), vec![4, 2]);
        assert_eq!(c.head_ms(), Some(500));
        assert_eq!(drain(&mut c, 999), vec![5]);
        assert_eq!(drain(&mut c, 1_000), vec![1, 3]);
        assert!(c.is_empty());
    }

    #[test]
    fn a_huge_span_is_capped_and_still_correct() {
        let mut c = Calendar::new(u64::MAX);
        assert_eq!(c.buckets.len() as u64, MAX_RING);
        c.push(u64::MAX - 1, 1);
        c.push(MAX_RING * 3, 2);
        c.push(7, 3);
        assert_eq!(drain(&mut c, MAX_RING * 3), vec![3, 2]);
        assert_eq!(c.head_ms(), Some(u64::MAX - 1));
        assert_eq!(drain(&mut c, u64::MAX), vec![1]);
        assert!(c.is_empty());
    }

    #[test]
    fn the_ring_wraps_at_its_end() {
        let mut c = Calendar::new(64);
        for due in 60..70 {
            c.push(due, due as u32);
        }
        assert_eq!(drain(&mut c, 61), vec![60, 61]);
        assert_eq!(c.head_ms(), Some(62));
        assert_eq!(drain(&mut c, 65), vec![62, 63, 64, 65]);
        assert_eq!(drain(&mut c, 100), vec![66, 67, 68, 69]);
    }

    /// Random pushes and takes against a sorted map of (due, push order).
    #[test]
    fn agrees_with_a_sorted_map() {
        for seed in 0..50u64 {
            let mut rng = SplitMix64::new(seed);
            let span = [64, 128, 1024][seed as usize % 3];
            let mut c = Calendar::new(span);
            let mut model: BTreeMap<(u64, u32), u32> = BTreeMap::new();
            let mut now = rng.next_u64() % 1_000_000;
            let mut next = 0u32;
            for _ in 0..2_000 {
                match rng.next_u64() % 4 {
                    0 | 1 => {
                        // Mostly within the ring, sometimes far, sometimes overdue.
                        let ahead = match rng.next_u64() % 10 {
                            0 => rng.next_u64() % (span * 8),
                            1 => 0,
                            _ => rng.next_u64() % span,
                        };
                        let due = (now + ahead).saturating_sub(rng.next_u64() % 3);
                        c.push(due, next);
                        // Overdue items are filed at the cursor.
                        let filed = due.max(c.cursor_ms);
                        model.insert((filed, next), next);
                        next += 1;
                    }
                    2 => {
                        now += rng.next_u64() % (span / 2);
                    }
                    _ => {
                        let got = drain(&mut c, now);
                        let want: Vec<u32> = {
                            let keys: Vec<_> =
                                model.range(..(now + 1, 0)).map(|(k, _)| *k).collect();
                            keys.iter().map(|k| model.remove(k).unwrap()).collect()
                        };
                        assert_eq!(got, want, "seed {seed}, now {now}");
                    }
                }
                assert_eq!(c.len(), model.len());
                assert_eq!(c.head_ms(), model.keys().next().map(|(due, _)| *due));
            }
        }
    }
}
