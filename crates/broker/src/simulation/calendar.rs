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
//! A bitmap of the slots that hold events lets the next event be found a
//! word (64 ms) at a time: a sparse run (one consumer, a week) would
//! otherwise step through every empty millisecond.
//!
//! Invariants: every event in the ring is due in `[cursor, cursor + len)`,
//! so each ring slot holds the events of exactly one millisecond; every
//! event in `far` is due at `cursor + len` or later; a slot's bit in
//! `occupied` is set exactly when the slot holds events.

use std::collections::BTreeMap;

/// The most ring slots a calendar uses, whatever horizon it is asked for:
/// later events wait in the ordered map.
const MAX_SLOTS: usize = 1 << 16;

/// Pending events, by due time (see the module docs).
#[derive(Debug)]
pub(super) struct Calendar {
    /// Slot `t % len` holds the events due at `t`.
    slots: Vec<Vec<u32>>,
    /// Bit `i % 64` of word `i / 64` is set when slot `i` holds events.
    occupied: Vec<u64>,
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
            occupied: vec![0; len.div_ceil(64)],
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
            let slot = (due & self.mask) as usize;
            self.slots[slot].push(index);
            self.mark(slot);
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
            Some(self.first_in_ring())
        } else {
            self.far.first_key_value().map(|(&due, _)| due)
        }
    }

    fn mark(&mut self, slot: usize) {
        self.occupied[slot / 64] |= 1 << (slot % 64);
    }

    fn unmark(&mut self, slot: usize) {
        self.occupied[slot / 64] &= !(1 << (slot % 64));
    }

    /// When the earliest event in the ring is due; the ring holds one.
    fn first_in_ring(&self) -> u64 {
        debug_assert!(self.in_ring > 0);
        let len = self.len() as usize;
        let start = (self.cursor & self.mask) as usize;
        // Slots from `start` to the ring's end, then from its start: times
        // `cursor ..` in order.
        let slot = self
            .first_marked(start, len)
            .or_else(|| self.first_marked(0, start))
            .expect("a ring holding events has a marked slot");
        self.cursor + ((slot + len - start) % len) as u64
    }

    /// The first marked slot in `from..to`.
    fn first_marked(&self, from: usize, to: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.occupied.get(word)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                let slot = word * 64 + bits.trailing_zeros() as usize;
                return (slot < to).then_some(slot);
            }
            word += 1;
            if word * 64 >= to {
                return None;
            }
            bits = self.occupied[word];
        }
    }

    /// The earliest millisecond's events if they are due by `now`, in
    /// consumer order. Hand the bucket back with [`Calendar::recycle`].
    pub(super) fn pop_due(&mut self, now: u64) -> Option<(u64, Vec<u32>)> {
        while self.cursor <= now {
            // Jump to the first event (or past `now`) instead of stepping
            // through empty slots.
            let next = if self.in_ring > 0 {
                self.first_in_ring()
            } else {
                self.far.first_key_value().map_or(u64::MAX, |(&t, _)| t)
            };
            if next > now {
                self.advance_to(now + 1);
                return None;
            }
            self.advance_to(next);
            let t = self.cursor;
            let slot = (t & self.mask) as usize;
            // Empty slot `t` before the cursor moves on: moving it lets the
            // far events due at `t + len` into this very slot.
            let taken = if self.slots[slot].is_empty() {
                None
            } else {
                let fresh = self.spare.pop().unwrap_or_default();
                self.unmark(slot);
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
            let slot = (due & self.mask) as usize;
            self.in_ring += bucket.len();
            self.slots[slot].append(&mut bucket);
            self.mark(slot);
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
    fn matches_an_ordered_map_across_sparse_jumps_and_ring_wraps() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        use std::collections::BTreeSet;

        for (seed, horizon) in [(1, 100), (2, 63), (3, 200), (4, 1_000), (5, 5)] {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut c = Calendar::new(horizon);
            let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
            let mut now = 0u64;
            for index in 0..3_000u32 {
                // Mostly within the horizon, some far beyond it; the caller
                // sometimes jumps far ahead, sometimes a millisecond.
                let ahead = match rng.random_range(0..10) {
                    0 => rng.random_range(horizon..horizon * 20),
                    _ => rng.random_range(1..=horizon),
                };
                c.push(now + ahead, index);
                model.insert((now + ahead, index));
                assert_eq!(c.next_due(), model.first().map(|&(t, _)| t), "seed {seed}");
                now += match rng.random_range(0..4) {
                    0 => rng.random_range(0..horizon * 3),
                    _ => rng.random_range(0..3),
                };
                while let Some((due, bucket)) = c.pop_due(now) {
                    let expected: Vec<u32> = model
                        .iter()
                        .take_while(|&&(t, _)| t == due)
                        .map(|&(_, i)| i)
                        .collect();
                    assert!(due <= now, "never early");
                    assert_eq!(model.first().map(|&(t, _)| t), Some(due), "seed {seed}");
                    assert_eq!(bucket, expected, "seed {seed}, due {due}");
                    model.retain(|&(t, _)| t != due);
                    c.recycle(bucket);
                }
                assert!(model.first().is_none_or(|&(t, _)| t > now), "seed {seed}");
            }
        }
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
