//! The wheel's levels: placing an entry in the bucket its deadline belongs
//! to, moving the levels' clocks, and the invariant that a bucket never holds
//! entries from two rounds of its level.

use crate::bucket::{keep_capacity, Bucket, Side};
#[cfg(test)]
use crate::entries::TimerHandle;
use crate::entries::MAX_LEVELS;

use super::divisor::Divisor;
use super::TimingWheel;

/// One level of the wheel: its granularity and its own current time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Level {
    /// Width of one bucket, ms.
    pub(super) tick: u64,
    /// `tick`, prepared for dividing deadlines by it.
    pub(super) per_tick: Divisor,
    /// `tick * wheel_size`, saturating: the span the level covers.
    pub(super) interval: u64,
    /// Start of the level's current bucket: a multiple of `tick`.
    pub(super) current_time: u64,
    /// That bucket's slot: `(current_time / tick) % wheel_size`.
    pub(super) current_slot: u64,
    /// Entries due within this span of their bucket's start go to the
    /// bucket's front: those its early pass moves (the level below spans
    /// them from the pass on). Zero at level 0, which has no early pass.
    pub(super) front: u64,
}

/// Where a waiting task sits: for the crate's tests.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// Wheel level, 0 being the finest.
    pub(crate) level: usize,
    /// Bucket index within the level: `(deadline / tick) % wheel_size`.
    pub(crate) slot: usize,
    /// The bucket's expiration: the start of the time range it covers.
    pub(crate) bucket_expiration: u64,
}

impl<T> TimingWheel<T> {
    /// Links entry `index` into the bucket its deadline belongs to; returns
    /// `false` when the deadline has come (the entry stays unlinked).
    pub(super) fn place(&mut self, index: u32, deadline: u64) -> bool {
        let mut level = 0;
        loop {
            let Level {
                tick,
                interval,
                current_time,
                ..
            } = self.levels[level];
            if deadline < current_time.saturating_add(tick) {
                debug_assert_eq!(level, 0, "only level 0 expires entries");
                return false;
            }
            if deadline < current_time.saturating_add(interval) {
                self.link(index, deadline, level);
                return true;
            }
            level += 1;
            if level == self.levels.len() {
                let below = self.levels[level - 1];
                // Kafka: the overflow wheel starts at the current time of the
                // level below (rounded down to its own tick).
                self.push_level(below.interval, below.current_time);
            }
        }
    }

    /// Like [`place`](Self::place) for an entry cascading down from `level`
    /// whose deadline the level below spans: it searches from there down, as
    /// most entries land one level lower. (A level spans every deadline a
    /// finer one does: all levels' times follow the same clock.)
    pub(super) fn place_below(&mut self, index: u32, deadline: u64, level: usize) -> bool {
        let spans = |l: &Level| deadline < l.current_time.saturating_add(l.interval);
        debug_assert!(spans(&self.levels[level - 1]), "the level below spans it");
        let mut level = level - 1;
        while level > 0 && spans(&self.levels[level - 1]) {
            level -= 1;
        }
        let finest = self.levels[0];
        if level == 0 && deadline < finest.current_time.saturating_add(finest.tick) {
            return false;
        }
        self.link(index, deadline, level);
        true
    }

    /// Links entry `index` into its bucket at `level`, which spans its
    /// deadline (not expired), and queues the bucket when it starts a round.
    #[inline(always)]
    fn link(&mut self, index: u32, deadline: u64, level: usize) {
        let Level {
            tick,
            current_time,
            current_slot,
            front,
            ..
        } = self.levels[level];
        // The level spans the deadline, so it is at most `wheel_size - 1`
        // buckets ahead of the current one: one division, no modulo.
        let ahead = match tick {
            1 => deadline - current_time, // level 0 at Kafka's default tick
            _ => self.levels[level].per_tick.div(deadline - current_time),
        };
        let mut slot = current_slot + ahead;
        if slot >= self.wheel_size {
            slot -= self.wheel_size;
        }
        let id = (level as u64 * self.wheel_size + slot) as u32;
        let expiration = current_time + ahead * tick;
        let bucket = &mut self.buckets[id as usize];
        let new_round = bucket.set_expiration(expiration);
        if deadline < expiration.saturating_add(front) {
            // Its early pass moves it: at the front, where that pass looks
            // (and stops at the first entry it leaves).
            debug_assert!(!bucket.paused, "early pass under way");
            bucket.push(level as u32, &mut self.entries, index, Side::Front);
            if new_round {
                bucket.min_deadline = u64::MAX;
            }
        } else {
            bucket.push(level as u32, &mut self.entries, index, Side::Back);
            bucket.min_deadline = match new_round {
                true => deadline,
                false => bucket.min_deadline.min(deadline),
            };
        }
        if new_round {
            self.start_round(id, level);
        }
    }

    /// Queues bucket `id` of `level`, which starts a round with the entry
    /// just linked. Once per round, not per entry: kept out of `link`.
    #[cold]
    #[inline(never)]
    fn start_round(&mut self, id: u32, level: usize) {
        debug_assert!(self.holds_one_round(id), "bucket {id} mixes rounds");
        let expiration = self.buckets[id as usize].expiration();
        let due = expiration.saturating_sub(self.lead(level));
        self.offer(due, id);
    }

    pub(super) fn push_level(&mut self, tick: u64, start: u64) {
        // The early pass runs at `expiration - lead`, when the level below
        // spans up to `expiration - lead + tick` (its interval is this tick,
        // unless saturated: then nothing goes to the front).
        let level = self.levels.len();
        // A slot's state names its level in a few bits: more levels than
        // that cannot arise (each level's interval at least doubles, and
        // deadlines stay below 2^62 ms).
        assert!(level < MAX_LEVELS as usize, "too many wheel levels");
        let front = match self.levels.last() {
            Some(below) if below.tick.checked_mul(self.wheel_size) == Some(tick) => {
                tick - self.lead(level)
            }
            _ => 0,
        };
        let current_time = start - start % tick;
        self.levels.push(Level {
            tick,
            per_tick: Divisor::new(tick),
            interval: tick.saturating_mul(self.wheel_size),
            current_time,
            current_slot: (current_time / tick) % self.wheel_size,
            front,
        });
        let empty = Bucket::empty(keep_capacity(self.wheel_size));
        self.buckets
            .extend(std::iter::repeat_n(empty, self.wheel_size as usize));
    }

    /// The bucket an entry linked at `level` with `deadline` is in: Kafka's
    /// rule, `(deadline / tick) % wheel_size` within the level.
    #[inline]
    pub(super) fn bucket_id(&self, level: usize, deadline: u64) -> u32 {
        let Level { tick, per_tick, .. } = self.levels[level];
        let ticks = match tick {
            1 => deadline,
            _ => per_tick.div(deadline),
        };
        (level as u64 * self.wheel_size + self.per_size.rem(ticks)) as u32
    }

    /// Moves every level's time up to `time` (rounded down to its tick).
    pub(super) fn advance_levels(&mut self, time: u64) {
        for level in &mut self.levels {
            if time >= level.current_time.saturating_add(level.tick) {
                level.current_time = time - time % level.tick;
                level.current_slot = (time / level.tick) % self.wheel_size;
            }
        }
    }

    /// How long before its range starts a bucket of `level` is queued: half
    /// its tick (rounded down to a tick of the level below, at least one),
    /// zero at level 0.
    ///
    /// Cascading a coarse bucket is the costly part of expiry (a level-2
    /// bucket can hold a twentieth of all pending tasks), and Kafka does it
    /// when the bucket's range *starts*, so the tasks due first in that range
    /// wait for the whole cascade. Here a coarse bucket is passed over twice,
    /// and neither pass holds up tasks that are due:
    ///
    /// - an *early pass* at `expiration - lead`, when the level below
    ///   already spans the first half of the bucket's range: it moves those
    ///   entries down, and has `lead` ms before the first of them is due;
    /// - a *final pass* at `expiration`, when the level below spans the whole
    ///   range: it moves the rest, none of which is due before about
    ///   `expiration + lead`.
    ///
    /// Both run in budget-sized slices; a slice gives way to buckets that are
    /// due, unless the pass is about to run out of slack (see `Paused`).
    pub(super) fn lead(&self, level: usize) -> u64 {
        match level {
            0 => 0,
            _ => self.levels[level - 1]
                .tick
                .saturating_mul((self.wheel_size / 2).max(1)),
        }
    }

    /// Whether every entry of bucket `id` belongs to the round its
    /// expiration names: its deadline lies in `[expiration, expiration +
    /// tick)` for the tick of the bucket's level. This is the invariant "a
    /// bucket never holds entries from two rounds" (see the module docs),
    /// written for debug assertions; it walks the bucket, O(its length).
    pub(super) fn holds_one_round(&self, id: u32) -> bool {
        let bucket = &self.buckets[id as usize];
        let tick = self.levels[id as usize / self.wheel_size as usize].tick;
        let start = bucket.expiration();
        bucket.iter().all(|at| {
            let deadline = self.entries.slot(at).deadline;
            deadline >= start && deadline - start < tick
        })
    }
}

/// Inspection for the crate's tests.
#[cfg(test)]
impl<T> TimingWheel<T> {
    /// The level, slot and bucket expiration of a waiting task.
    pub(crate) fn position(&self, handle: TimerHandle) -> Option<Position> {
        let index = self.entries.resolve(handle)?;
        let slot = self.entries.slot(index);
        let bucket = self.bucket_id(slot.state() as usize, slot.deadline) as u64;
        Some(Position {
            level: (bucket / self.wheel_size) as usize,
            slot: (bucket % self.wheel_size) as usize,
            bucket_expiration: self.buckets[bucket as usize].expiration(),
        })
    }

    /// The current time of wheel level `level` (a multiple of that level's
    /// tick), if the level exists yet.
    pub(crate) fn level_current_time(&self, level: usize) -> Option<u64> {
        self.levels.get(level).map(|l| l.current_time)
    }

    /// The tick of wheel level `level`, if the level exists yet.
    pub(crate) fn level_tick(&self, level: usize) -> Option<u64> {
        self.levels.get(level).map(|l| l.tick)
    }

    /// The delay queue of this wheel's buckets.
    pub(crate) fn delay_queue(&self) -> &crate::DelayQueue<u32> {
        &self.queue
    }

    /// Checks the buckets against the slots: each entry's slot says where
    /// in its bucket's arrays it sits, its level and deadline name that
    /// bucket, every waiting entry is in a bucket, and a bucket is paused
    /// iff a pass over it is.
    pub(crate) fn check_structure(&self) -> Result<(), String> {
        let size = self.wheel_size as usize;
        let mut linked = 0;
        for (id, bucket) in self.buckets.iter().enumerate() {
            let level = id / size;
            if !bucket.positions_match(&self.entries, level as u32) {
                return Err(format!("bucket {id}: positions or levels disagree"));
            }
            for index in bucket.iter() {
                let deadline = self.entries.slot(index).deadline;
                if self.bucket_id(level, deadline) as usize != id {
                    return Err(format!("entry {index} ({deadline}) is not in bucket {id}"));
                }
            }
            let passed = self.paused.iter().any(|p| p.bucket as usize == id);
            if bucket.paused != passed {
                return Err(format!("bucket {id}: paused {}", bucket.paused));
            }
            linked += bucket.len();
        }
        match linked == self.entries.len() {
            true => Ok(()),
            false => Err(format!("{linked} linked of {}", self.entries.len())),
        }
    }
}
