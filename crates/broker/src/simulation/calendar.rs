//! The simulation's pending events: each consumer's next heartbeat, by due
//! time.
//!
//! A ring of per-millisecond buckets covering the next `horizon`
//! milliseconds, rather than a heap or an ordered map of a million events:
//! filing a heartbeat is an index and a push into a bucket that keeps its
//! capacity from lap to lap, and a millisecond's events come out together,
//! sorted by consumer, which is the order a heap of `(time, consumer)` gives.
//! The rare event beyond the horizon waits in an ordered map and moves into
//! the ring when the ring reaches it. The engine never files an event at or
//! before the time it is handling, so a bucket is complete when it is taken.
//!
//! Invariant: every event in the ring is due in `[cursor, cursor + len)`, so
//! each ring slot holds the events of exactly one millisecond; every event
//! in `far` is due at `cursor + len` or later.

use std::collections::BTreeMap;

/// The most ring slots a calendar uses, whatever horizon it is asked for:
/// later events wait in the ordered map.
const MAX_SLOTS: usize = 1 << 16;

/// Pending events, by due time (see the module docs).
#[derive(Debug)]
pub(super) struct Calendar {
    /// Slot `t % len` holds the events due at `t`.
    slots: Vec<Vec<u32>>,
    /// `len - 1` (`len` is a power of two).
    mask: u64,
    /// Every event due before `cursor` has been taken.
    cursor: u64,
    /// Events in the ring.
    in_ring: usize,
    /// Events due at `cursor + len` or later, by due time.
    far: BTreeMap<u64, Vec<u32>>,
    /// Emptied buckets, kept to be refilled without allocating.
    spare: Vec<Vec<u32>>,
}

impl Calendar {
    /// A calendar whose ring covers at least the next `horizon_ms` ms (the
    /// furthest ahead the engine usually files an event), up to
    /// [`MAX_SLOTS`].
    pub(super) fn new(horizon_ms: u64) -> Self {
        let len = usize::try_from(horizon_ms.saturating_add(1))
            .unwrap_or(MAX_SLOTS)
            .clamp(1, MAX_SLOTS)
            .next_power_of_two();
        Calendar {
            slots: vec![Vec::new(); len],
            mask: len as u64 - 1,
            cursor: 0,
            in_ring: 0,
            far: BTreeMap::new(),
            spare: Vec::new(),
        }
    }

    fn len(&self) -> u64 {
        self.mask + 1
    }

    /// Files consumer `index`'s event at `due`, which is not before any
    /// millisecond already taken.
    pub(super) fn push(&mut self, due: u64, index: u32) {
        debug_assert!(due >= self.cursor, "an event filed in the past");
        let due = due.max(self.cursor);
        if due - self.cursor < self.len() {
            self.slots[(due & self.mask) as usize].push(index);
            self.in_ring += 1;
        } else {
            let spare = &mut self.spare;
            self.far
                .entry(due)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .push(index);
        }
    }

    /// When the earliest event is due.
    pub(super) fn next_due(&self) -> Option<u64> {
        if self.in_ring > 0 {
            (self.cursor..self.cursor + self.len())
                .find(|&t| !self.slots[(t & self.mask) as usize].is_empty())
        } else {
            self.far.first_key_value().map(|(&due, _)| due)
        }
    }

    /// The earliest millisecond's events if they are due by `now`, in
    /// consumer order. Hand the bucket back with [`Calendar::recycle`].
    pub(super) fn pop_due(&mut self, now: u64) -> Option<(u64, Vec<u32>)> {
        while self.cursor <= now {
            if self.in_ring == 0 {
                // Nothing in the ring: jump to the first far event (or past
                // `now`) instead of stepping through empty slots.
                let next = self.far.first_key_value().map_or(u64::MAX, |(&t, _)| t);
                if next > now {
                    self.advance_to(now + 1);
                    return None;
                }
                self.advance_to(next);
            }
            let t = self.cursor;
            let slot = (t & self.mask) as usize;
            // Empty slot `t` before the cursor moves on: moving it lets the
            // far events due at `t + len` into this very slot.
            let taken = if self.slots[slot].is_empty() {
                None
            } else {
                let fresh = self.spare.pop().unwrap_or_default();
                Some(std::mem::replace(&mut self.slots[slot], fresh))
            };
            self.advance_to(t + 1);
            if let Some(mut bucket) = taken {
                self.in_ring -= bucket.len();
                bucket.sort_unstable();
                return Some((t, bucket));
            }
        }
        None
    }

    /// Moves the cursor to `to` (not backwards) and the far events now
    /// within the ring's reach into it.
    fn advance_to(&mut self, to: u64) {
        self.cursor = self.cursor.max(to);
        let reach = self.cursor.saturating_add(self.len());
        while let Some(entry) = self.far.first_entry() {
            if *entry.key() >= reach {
                break;
            }
            let (due, mut bucket) = entry.remove_entry();
            let slot = &mut self.slots[(due & self.mask) as usize];
            self.in_ring += bucket.len();
            slot.append(&mut bucket);
            self.spare.push(bucket);
        }
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
        let mut c = Calendar::new(8);
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
        assert_eq!(c.pop_due(9).unwrap().1, [0]);
        assert_eq!(c.pop_due(9).unwrap(), (9, vec![2]));
        assert_eq!((c.next_due(), c.pop_due(1_000)), (None, None));
    }

    #[test]
    fn events_beyond_the_horizon_wait_and_keep_their_order() {
        // A ring of 4 slots: events 3 to 1,000 ms ahead go to the far map
        // and come back, in time order, exactly when due.
        let mut c = Calendar::new(3);
        assert_eq!(c.len(), 4);
        for (due, index) in [(1_000, 5), (6, 1), (2, 7), (6, 0), (1_000, 2), (4, 3)] {
            c.push(due, index);
        }
        assert_eq!(c.next_due(), Some(2));
        let mut seen = Vec::new();
        let mut now = 0;
        while now <= 2_000 {
            match c.pop_due(now) {
                Some((due, bucket)) => {
                    assert!(due <= now, "never early");
                    seen.push((due, bucket.clone()));
                    c.recycle(bucket);
                    if due == 4 {
                        // Filed from inside the run, past the horizon again.
                        c.push(500, 9);
                    }
                }
                None => now += 1,
            }
        }
        assert_eq!(
            seen,
            [
                (2, vec![7]),
                (4, vec![3]),
                (6, vec![0, 1]),
                (500, vec![9]),
                (1_000, vec![2, 5])
            ]
        );
        assert_eq!(c.next_due(), None);
    }

    #[test]
    fn a_late_caller_gets_every_missed_millisecond_in_order() {
        let mut c = Calendar::new(16);
        for t in 1..=40u64 {
            c.push(t, (40 - t) as u32);
        }
        let mut dues = Vec::new();
        while let Some((due, bucket)) = c.pop_due(40) {
            assert_eq!(bucket, [(40 - due) as u32]);
            dues.push(due);
            c.recycle(bucket);
        }
        assert_eq!(dues, (1..=40).collect::<Vec<_>>());
    }
}
