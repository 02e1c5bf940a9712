//! The simulation's pending events: each consumer's next heartbeat, by due
//! time.
//!
//! A calendar of buckets, one per millisecond that has events, rather than a
//! heap of a million events: a heartbeat is filed with one small ordered-map
//! lookup and a push, and a millisecond's events come out together, sorted
//! by consumer, which is the order a heap of `(time, consumer)` gives. The
//! engine never files an event at or before the time it is handling, so a
//! bucket is complete when it is taken.

use std::collections::BTreeMap;

/// Pending events, by due time (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Calendar {
    buckets: BTreeMap<u64, Vec<u32>>,
    /// Emptied buckets, kept to be refilled without allocating.
    spare: Vec<Vec<u32>>,
}

impl Calendar {
    /// Files consumer `index`'s event at `due`.
    pub(super) fn push(&mut self, due: u64, index: u32) {
        let spare = &mut self.spare;
        self.buckets
            .entry(due)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(index);
    }

    /// When the earliest event is due.
    pub(super) fn next_due(&self) -> Option<u64> {
        self.buckets.first_key_value().map(|(&due, _)| due)
    }

    /// The earliest millisecond's events if they are due by `now`, in
    /// consumer order. Hand the bucket back with [`Calendar::recycle`].
    pub(super) fn pop_due(&mut self, now: u64) -> Option<(u64, Vec<u32>)> {
        let entry = self.buckets.first_entry()?;
        if *entry.key() > now {
            return None;
        }
        let (due, mut bucket) = entry.remove_entry();
        bucket.sort_unstable();
        Some((due, bucket))
    }

    /// Takes back a bucket [`Calendar::pop_due`] handed out.
    pub(super) fn recycle(&mut self, mut bucket: Vec<u32>) {
        bucket.clear();
        self.spare.push(bucket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_consumer() {
        let mut c = Calendar::default();
        for (due, index) in [(5, 3), (2, 9), (5, 1), (2, 4), (7, 0)] {
            c.push(due, index);
        }
        assert_eq!(c.next_due(), Some(2));
        assert_eq!(c.pop_due(1), None);
        let (due, bucket) = c.pop_due(6).unwrap();
        assert_eq!((due, bucket.as_slice()), (2, &[4, 9][..]));
        c.recycle(bucket);
        let (due, bucket) = c.pop_due(6).unwrap();
        assert_eq!((due, bucket.as_slice()), (5, &[1, 3][..]));
        c.recycle(bucket);
        assert_eq!(c.pop_due(6), None);
        assert_eq!(c.next_due(), Some(7));
        c.push(9, 2);
        assert_eq!(c.spare.len(), 1, "a recycled bucket is reused");
    }
}
