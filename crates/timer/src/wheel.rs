//! The hierarchical timing wheel: Kafka's `TimingWheel` levels over one
//! arena of entries, driven by a [`DelayQueue`] of buckets.
//!
//! # Levels
//!
//! Level 0 has `wheel_size` buckets of `tick` ms each and covers
//! `interval = tick * wheel_size` ms from its `current_time`. Level `l + 1`
//! is created lazily when a deadline does not fit below it; its tick is the
//! interval of level `l`. With Kafka's defaults (tick 1 ms, 20 buckets):
//!
//! | level | tick    | interval |
//! |-------|---------|----------|
//! | 0     | 1 ms    | 20 ms    |
//! | 1     | 20 ms   | 400 ms   |
//! | 2     | 400 ms  | 8 s      |
//! | 3     | 8 s     | 160 s    |
//! | 4     | 160 s   | 53.3 min |
//!
//! # Placing an entry (Kafka's `add`)
//!
//! Walking up from level 0, with `c` the level's current time:
//! - `deadline < c + tick` (level 0 only): already expired, hand it back;
//! - `deadline < c + interval`: it goes into bucket
//!   `(deadline / tick) % wheel_size`, whose expiration becomes
//!   `(deadline / tick) * tick`, the *start* of the bucket's range; when that
//!   expiration changes the bucket is offered to the delay queue;
//! - otherwise try the next level (creating it if needed).
//!
//! A level's current-time bucket is never used for a new entry (the first
//! rule, or the level below, covers its range), so a bucket never holds
//! entries from two rounds of its wheel.
//!
//! # Advancing
//!
//! [`TimingWheel::advance`] pops due buckets from the delay queue in
//! expiration order. For each it first moves every level's current time up
//! to the bucket's expiration (rounded down to the level's tick), then
//! re-places each entry of the bucket: an entry from a coarse level lands in
//! a finer one ("cascading"), and an entry whose deadline has come is
//! expired. The clock thus jumps from due bucket to due bucket, never
//! through empty ticks. When no bucket is due any more, every level's time
//! moves up to `now`, which is safe because no bucket due by then is left.
//!
//! A bucket of level 1 or above is not cascaded all at once when its range
//! starts, as in Kafka: an *early pass* half its tick before moves the
//! entries the level below can already hold, and a *final pass* at its start
//! moves the rest. Both run in budget-sized slices that give way to due
//! buckets until they run out of slack (their `finish_by`: no entry they
//! still have to move is due earlier). See `lead` and `pass`;
//! [`TimingWheel::advance_due`] and [`TimingWheel::background_allowance`]
//! let an owner spread the passes over the ticks of their slack.
//!
//! # Never early
//!
//! [`TimingWheel::insert`] rounds deadlines *up* to a multiple of the tick,
//! so a level-0 bucket's expiration equals the deadline of each of its
//! entries, and an entry is expired only once the wheel's time has reached
//! its deadline. (Kafka rounds down and can fire up to a tick early.)
//! Deadlines beyond [`MAX_DEADLINE_MS`] are clamped to it, so huge delays
//! saturate instead of overflowing and wrapping into the past.

use std::fmt;
use std::sync::Arc;

use crate::bucket::{Bucket, NOT_PAUSED, NO_EXPIRATION};
use crate::delay_queue::DelayQueue;
use crate::entries::{Entries, TimerHandle, NIL};
use crate::ConfigError;

/// The latest deadline a wheel keeps, in ms after its clock's origin (about
/// 146,000 years): later deadlines are clamped to it. Keeping deadlines a
/// factor of four below `u64::MAX` leaves room for every level's
/// `current_time + interval` without overflow.
pub const MAX_DEADLINE_MS: u64 = u64::MAX / 4;

/// Largest accepted tick, ms: a deadline must be able to round up to a tick
/// below [`MAX_DEADLINE_MS`] with room for a whole level above it.
pub const MAX_TICK_MS: u64 = MAX_DEADLINE_MS >> 16;

/// Largest accepted wheel size: keeps bucket ids (level × size + slot) in a
/// `u32` for every possible number of levels.
pub const MAX_WHEEL_SIZE: usize = 1 << 16;

/// What [`TimingWheel::insert`] did with a task.
#[derive(Debug, PartialEq, Eq)]
pub enum Insertion<T> {
    /// The task waits in the wheel; the handle cancels it.
    Scheduled(TimerHandle),
    /// The deadline is within the current tick (or earlier): the task is
    /// handed back, to be run now.
    Expired(T),
}

/// Progress of one bounded call to [`TimingWheel::advance_bounded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Advance {
    /// Entries taken out of due buckets (re-placed or expired).
    pub moved: usize,
    /// Entries expired (handed to the callback).
    pub expired: usize,
    /// Due buckets popped from the delay queue.
    pub buckets: usize,
    /// Whether nothing due at `now` is left.
    pub done: bool,
}

/// Where a waiting task sits: for inspection, tests and debugging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Wheel level, 0 being the finest.
    pub level: usize,
    /// Bucket index within the level: `(deadline / tick) % wheel_size`.
    pub slot: usize,
    /// The bucket's expiration: the start of the time range it covers.
    pub bucket_expiration: u64,
}

/// One level of the wheel: its granularity and its own current time.
#[derive(Debug, Clone, Copy)]
struct Level {
    /// Width of one bucket, ms.
    tick: u64,
    /// `tick * wheel_size`, saturating: the span the level covers.
    interval: u64,
    /// Start of the level's current bucket: a multiple of `tick`.
    current_time: u64,
}

/// A hierarchical timing wheel holding tasks of type `T`.
///
/// Single-threaded: it never reads a clock (callers pass `now`), never
/// blocks and never spawns. [`Timer`](crate::Timer) wraps it for use from
/// many threads.
///
/// ```
/// use timer::{Insertion, TimingWheel};
///
/// let mut wheel = TimingWheel::new(1, 20, 0).unwrap();
/// let Insertion::Scheduled(handle) = wheel.insert(30, "later") else { unreachable!() };
/// wheel.insert(10, "soon");
/// assert!(matches!(wheel.insert(0, "now"), Insertion::Expired("now")));
///
/// let mut fired = Vec::new();
/// wheel.advance(10, |task| fired.push(task));
/// assert_eq!(fired, ["soon"]);
/// assert_eq!(wheel.cancel(handle), Some("later"));
/// assert_eq!(wheel.cancel(handle), None); // stale handles are harmless
/// ```
pub struct TimingWheel<T> {
    entries: Entries<T>,
    /// All levels' buckets: level `l` owns `buckets[l * size .. (l + 1) * size]`.
    buckets: Vec<Bucket>,
    levels: Vec<Level>,
    wheel_size: u64,
    queue: Arc<DelayQueue<u32>>,
    /// A due bucket popped from the queue whose final pass is not finished
    /// yet (see `advance_bounded`).
    flushing: Option<Flush>,
    /// Passes over coarse buckets that ran out of budget, in the order they
    /// paused; each keeps its resume point in `Bucket::cursor`.
    paused: Vec<Paused>,
    /// The earliest due time offered to the queue since the last
    /// [`take_earliest_offered`](Self::take_earliest_offered), or `u64::MAX`.
    earliest_offered: u64,
}

/// A pass over a coarse bucket (level 1 or above) that ran out of budget.
#[derive(Debug, Clone, Copy)]
struct Paused {
    bucket: u32,
    /// The queue time the pass was started at (reported by
    /// `next_expiration`: the pass is overdue work).
    start: u64,
    /// The pass must be finished before anything due at or after this time
    /// is taken: no entry it still has to move is due earlier, and the
    /// level's clock cannot pass the bucket before it.
    finish_by: u64,
}

/// A final pass over one due bucket, resumable across `advance_bounded` calls.
#[derive(Debug, Clone, Copy)]
struct Flush {
    bucket: u32,
    /// The queue time the pass was popped at.
    due: u64,
}

impl<T> TimingWheel<T> {
    /// A wheel of `wheel_size` buckets of `tick_ms` each, whose time starts
    /// at `start_ms` (rounded down to the tick). Its delay queue reads a
    /// clock that is never advanced; use [`TimingWheel::with_queue`] to share
    /// one with a blocking consumer.
    pub fn new(tick_ms: u64, wheel_size: usize, start_ms: u64) -> Result<Self, ConfigError> {
        let queue = Arc::new(DelayQueue::new(crate::ManualClock::new()));
        Self::with_queue(tick_ms, wheel_size, start_ms, queue)
    }

    /// Like [`TimingWheel::new`], offering due buckets to `queue` (whose
    /// clock a blocking consumer waits on).
    pub fn with_queue(
        tick_ms: u64,
        wheel_size: usize,
        start_ms: u64,
        queue: Arc<DelayQueue<u32>>,
    ) -> Result<Self, ConfigError> {
        if tick_ms == 0 {
            return Err(ConfigError::ZeroTick);
        }
        if tick_ms > MAX_TICK_MS {
            return Err(ConfigError::TickTooLarge {
                requested_ms: tick_ms,
                max_ms: MAX_TICK_MS,
            });
        }
        if !(2..=MAX_WHEEL_SIZE).contains(&wheel_size) {
            return Err(ConfigError::WheelSizeOutOfRange {
                requested: wheel_size,
                min: 2,
                max: MAX_WHEEL_SIZE,
            });
        }
        let wheel_size = wheel_size as u64;
        let mut wheel = TimingWheel {
            entries: Entries::new(),
            buckets: Vec::new(),
            levels: Vec::new(),
            wheel_size,
            queue,
            flushing: None,
            paused: Vec::new(),
            earliest_offered: u64::MAX,
        };
        wheel.push_level(tick_ms, start_ms - start_ms % tick_ms);
        Ok(wheel)
    }

    /// The wheel's tick (level 0's bucket width), ms.
    pub fn tick_ms(&self) -> u64 {
        self.levels[0].tick
    }

    /// Buckets per level.
    pub fn wheel_size(&self) -> usize {
        self.wheel_size as usize
    }

    /// Levels created so far (overflow levels appear on demand).
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// The wheel's time: the start of level 0's current tick.
    pub fn current_time(&self) -> u64 {
        self.levels[0].current_time
    }

    /// Number of tasks waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no task is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for `additional` more waiting tasks without reallocating.
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    /// The delay queue of this wheel's buckets.
    pub fn delay_queue(&self) -> &Arc<DelayQueue<u32>> {
        &self.queue
    }

    /// The expiration of the earliest bucket not yet flushed, if any. It can
    /// belong to a bucket that cancellations have emptied (advancing to it
    /// then expires nothing), as in Kafka.
    pub fn next_expiration(&self) -> Option<u64> {
        if let Some(flush) = self.flushing {
            return Some(flush.due);
        }
        let paused = self.paused.iter().map(|p| p.start);
        paused.chain(self.queue.peek_expiration()).min()
    }

    /// Like [`next_expiration`](Self::next_expiration), but leaving paused
    /// passes out: when the next bucket is due.
    pub fn next_due_expiration(&self) -> Option<u64> {
        match self.flushing {
            Some(flush) => Some(flush.due),
            None => self.queue.peek_expiration(),
        }
    }

    /// Rounds `deadline_ms` the way [`insert`](Self::insert) does: up to a
    /// multiple of the tick, clamped to [`MAX_DEADLINE_MS`].
    pub fn round_deadline(&self, deadline_ms: u64) -> u64 {
        let tick = self.tick_ms();
        let max = MAX_DEADLINE_MS - MAX_DEADLINE_MS % tick;
        deadline_ms
            .min(max)
            .div_ceil(tick)
            .saturating_mul(tick)
            .min(max)
    }

    /// Schedules `task` to expire at `deadline_ms` (see
    /// [`round_deadline`](Self::round_deadline)). A deadline before the end
    /// of the current tick hands the task back as [`Insertion::Expired`].
    pub fn insert(&mut self, deadline_ms: u64, task: T) -> Insertion<T> {
        let deadline = self.round_deadline(deadline_ms);
        let Level {
            tick, current_time, ..
        } = self.levels[0];
        if deadline < current_time.saturating_add(tick) {
            return Insertion::Expired(task);
        }
        let index = self.entries.insert(deadline, task);
        let placed = self.place(index, deadline);
        debug_assert!(placed, "a deadline past the current tick is always placed");
        Insertion::Scheduled(self.entries.handle(index))
    }

    /// Whether `handle` names a task still waiting in the wheel.
    pub fn contains(&self, handle: TimerHandle) -> bool {
        self.entries.resolve(handle).is_some()
    }

    /// The (rounded) deadline of a waiting task.
    pub fn deadline(&self, handle: TimerHandle) -> Option<u64> {
        let index = self.entries.resolve(handle)?;
        Some(self.entries.slot(index).deadline)
    }

    /// The level, slot and bucket expiration of a waiting task.
    pub fn position(&self, handle: TimerHandle) -> Option<Position> {
        let index = self.entries.resolve(handle)?;
        let bucket = self.entries.slot(index).bucket as u64;
        Some(Position {
            level: (bucket / self.wheel_size) as usize,
            slot: (bucket % self.wheel_size) as usize,
            bucket_expiration: self.buckets[bucket as usize].expiration(),
        })
    }

    /// The current time of wheel level `level` (a multiple of that level's
    /// tick), if the level exists yet.
    pub fn level_current_time(&self, level: usize) -> Option<u64> {
        self.levels.get(level).map(|l| l.current_time)
    }

    /// The tick of wheel level `level`, if the level exists yet.
    pub fn level_tick(&self, level: usize) -> Option<u64> {
        self.levels.get(level).map(|l| l.tick)
    }

    /// Removes a waiting task and returns it; `None` when the handle is
    /// stale (the task expired, was cancelled, or the slot was reused).
    pub fn cancel(&mut self, handle: TimerHandle) -> Option<T> {
        let index = self.entries.resolve(handle)?;
        let slot = self.entries.slot(index);
        let (bucket, next) = (slot.bucket, slot.next);
        let bucket = &mut self.buckets[bucket as usize];
        if bucket.cursor == index {
            bucket.cursor = next; // keep a paused early pass on a live entry
        }
        bucket.unlink(&mut self.entries, index);
        Some(self.entries.remove(index))
    }

    /// Expires every task due at `now_ms`, handing each to `expired` in
    /// deadline order (ties in no particular order). Returns how many expired.
    pub fn advance(&mut self, now_ms: u64, mut expired: impl FnMut(T)) -> usize {
        let mut count = 0;
        loop {
            let step = self.advance_bounded(now_ms, usize::MAX, &mut expired);
            count += step.expired;
            if step.done {
                return count;
            }
        }
    }

    /// Like [`advance`](Self::advance), but moves at most `budget` entries
    /// and then returns (`done == false`), so that a caller holding a lock
    /// can release it between chunks of a large flush. The next call resumes
    /// where this one stopped.
    pub fn advance_bounded(
        &mut self,
        now_ms: u64,
        budget: usize,
        expired: impl FnMut(T),
    ) -> Advance {
        self.advance_chunk(now_ms, budget, true, expired)
    }

    /// Like [`advance_bounded`](Self::advance_bounded), but only does what
    /// cannot wait: due buckets, and paused passes that are out of slack
    /// (see `Paused`). With paused passes left it still reports `done`
    /// ([`paused_finish_by`](Self::paused_finish_by) tells them); see
    /// [`background_allowance`](Self::background_allowance) for spreading
    /// them over the following ticks.
    pub fn advance_due(&mut self, now_ms: u64, budget: usize, expired: impl FnMut(T)) -> Advance {
        self.advance_chunk(now_ms, budget, false, expired)
    }

    /// The earliest time by which a paused pass must be finished (see
    /// [`advance_due`](Self::advance_due)), or `None` when no pass over a
    /// coarse bucket is paused: an owner that spreads passes over later
    /// ticks must come back no later than this.
    pub fn paused_finish_by(&self) -> Option<u64> {
        self.paused.iter().map(|p| p.finish_by).min()
    }

    /// How many entries to move in paused passes at `now_ms` so that, done
    /// every tick, each pass finishes well within its slack: twice each
    /// pass's bucket length spread over the ticks left before its
    /// `finish_by`.
    pub fn background_allowance(&self, now_ms: u64) -> usize {
        let tick = self.tick_ms();
        self.paused
            .iter()
            .map(|p| {
                let ticks_left = p.finish_by.saturating_sub(now_ms) / tick;
                let len = self.buckets[p.bucket as usize].len() as u64;
                (len.saturating_mul(2) / ticks_left.max(1)) as usize
            })
            .fold(0usize, usize::saturating_add)
    }

    fn advance_chunk(
        &mut self,
        now_ms: u64,
        budget: usize,
        background: bool,
        mut expired: impl FnMut(T),
    ) -> Advance {
        // Every deadline is at most MAX_DEADLINE_MS, so a later `now` expires
        // exactly what MAX_DEADLINE_MS does; clamping keeps every level's
        // `current_time + interval` far from overflow.
        let now_ms = now_ms.min(MAX_DEADLINE_MS);
        let mut step = Advance::default();
        loop {
            if let Some(flush) = self.flushing {
                if !self.final_pass(flush, budget, &mut step, &mut expired) {
                    return step;
                }
                self.flushing = None;
            }
            if step.moved >= budget {
                return step;
            }
            let next_due = self.queue.peek_expiration().filter(|&due| due <= now_ms);
            // A paused pass must finish before anything due at or after its
            // `finish_by` is taken: entries it has yet to move would be late,
            // or its level's clock would pass the bucket and its slot could
            // take entries of a later round.
            // The paused pass with the least slack, if any, and whether it
            // runs now: before a due bucket at or after its `finish_by`
            // (entries it has yet to move would be late, or its level's clock
            // would pass the bucket and its slot could take entries of a
            // later round), or when nothing is due, in the background or
            // once out of slack.
            let most_urgent = self
                .paused
                .iter()
                .enumerate()
                .min_by_key(|(_, p)| p.finish_by)
                .map(|(position, p)| (position, p.finish_by));
            let run_paused = most_urgent.filter(|&(_, finish_by)| match next_due {
                Some(due) => finish_by <= due,
                None => background || finish_by <= now_ms,
            });
            if let Some((position, _)) = run_paused {
                let paused = self.paused.remove(position);
                self.pass(paused, budget, &mut step, &mut expired);
                continue;
            }
            if next_due.is_none() {
                // Safe with passes paused: each has `finish_by > now`, so no
                // level's time reaches past a paused bucket's start (early
                // pass) or range (final pass).
                self.advance_levels(now_ms);
                step.done = true;
                return step;
            }
            let Some((due, bucket)) = self.queue.poll_due(now_ms) else {
                continue;
            };
            let b = self.buckets[bucket as usize];
            let level = bucket as usize / self.wheel_size as usize;
            if b.expiration() == NO_EXPIRATION || b.cursor != NOT_PAUSED {
                continue; // stale: flushed (or being passed over) since queued
            }
            if due == b.expiration() {
                step.buckets += 1;
                self.advance_levels(due);
                if level == 0 {
                    self.flushing = Some(Flush { bucket, due });
                } else {
                    // The final pass: everything left fits the level below
                    // now, and nothing left is due before `min_deadline`.
                    self.buckets[bucket as usize].cursor = b.head();
                    let finish_by = b.min_deadline;
                    self.buckets[bucket as usize].min_deadline = u64::MAX;
                    let paused = Paused {
                        bucket,
                        start: due,
                        finish_by,
                    };
                    self.pass(paused, budget, &mut step, &mut expired);
                }
            } else if level > 0 && due == b.expiration().saturating_sub(self.lead(level)) {
                step.buckets += 1;
                self.advance_levels(due);
                self.buckets[bucket as usize].cursor = b.head();
                self.buckets[bucket as usize].min_deadline = u64::MAX;
                let paused = Paused {
                    bucket,
                    start: due,
                    finish_by: b.expiration(),
                };
                self.pass(paused, budget, &mut step, &mut expired);
            }
            // Otherwise stale: re-armed for another round since.
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
    fn lead(&self, level: usize) -> u64 {
        match level {
            0 => 0,
            _ => self.levels[level - 1]
                .tick
                .saturating_mul((self.wheel_size / 2).max(1)),
        }
    }

    /// Moves the entries the level below can hold, resuming at the bucket's
    /// cursor; entries that have become due are expired. When the budget
    /// runs out first, the pass pauses: its cursor stays in the bucket and it
    /// joins `paused`, to be resumed once nothing is due, or before anything
    /// due at or after its `finish_by` is taken.
    ///
    /// At the end of an early pass, the bucket keeps the entries the level
    /// below could not hold yet, and is queued again for its final pass at
    /// its expiration; `min_deadline` is then the earliest of their
    /// deadlines (or lower, if entries join the bucket later). A final pass
    /// empties the bucket.
    fn pass(
        &mut self,
        paused: Paused,
        budget: usize,
        step: &mut Advance,
        expired: &mut impl FnMut(T),
    ) {
        let id = paused.bucket;
        let level = id as usize / self.wheel_size as usize;
        let below = self.levels[level - 1];
        let horizon = below.current_time.saturating_add(below.interval);
        let mut cursor = self.buckets[id as usize].cursor;
        let mut kept_min = u64::MAX;
        while cursor != NIL {
            if step.moved >= budget {
                let bucket = &mut self.buckets[id as usize];
                bucket.cursor = cursor;
                bucket.min_deadline = bucket.min_deadline.min(kept_min);
                self.paused.push(paused);
                return;
            }
            let index = cursor;
            let slot = self.entries.slot(index);
            cursor = slot.next;
            let deadline = slot.deadline;
            if deadline < horizon {
                step.moved += 1;
                self.buckets[id as usize].unlink(&mut self.entries, index);
                if !self.place(index, deadline) {
                    step.expired += 1;
                    expired(self.entries.remove(index));
                }
            } else {
                kept_min = kept_min.min(deadline);
            }
        }
        let bucket = &mut self.buckets[id as usize];
        bucket.cursor = NOT_PAUSED;
        bucket.min_deadline = bucket.min_deadline.min(kept_min);
        if bucket.is_empty() {
            bucket.set_expiration(NO_EXPIRATION);
            bucket.min_deadline = u64::MAX;
        } else {
            // The rest of the range waits for the final pass.
            let expiration = bucket.expiration();
            self.offer(expiration, id);
        }
    }

    /// Moves (or expires) every entry of the bucket; returns whether the
    /// pass is finished.
    fn final_pass(
        &mut self,
        flush: Flush,
        budget: usize,
        step: &mut Advance,
        expired: &mut impl FnMut(T),
    ) -> bool {
        let bucket = flush.bucket as usize;
        while step.moved < budget {
            let Some(index) = self.buckets[bucket].pop_front(&mut self.entries) else {
                self.buckets[bucket].set_expiration(NO_EXPIRATION);
                return true;
            };
            step.moved += 1;
            let deadline = self.entries.slot(index).deadline;
            if !self.place(index, deadline) {
                step.expired += 1;
                expired(self.entries.remove(index));
            }
        }
        if self.buckets[bucket].is_empty() {
            self.buckets[bucket].set_expiration(NO_EXPIRATION);
            return true;
        }
        false
    }

    /// Queues bucket `id` to be visited at `due`.
    fn offer(&mut self, due: u64, id: u32) {
        self.earliest_offered = self.earliest_offered.min(due);
        self.queue.offer(due, id);
    }

    /// Tags the handles this wheel issues with `shard` (for a sharded owner).
    pub(crate) fn set_shard(&mut self, shard: usize) {
        self.entries.set_shard(shard);
    }

    /// The earliest due time offered to this wheel's queue since the last
    /// call, if any: lets an owner of several wheels keep one wake-up queue
    /// for all of them.
    pub(crate) fn take_earliest_offered(&mut self) -> Option<u64> {
        let earliest = std::mem::replace(&mut self.earliest_offered, u64::MAX);
        (earliest != u64::MAX).then_some(earliest)
    }

    /// Takes every waiting task out of the wheel (for shutdown), leaving it
    /// empty; the delay queue is cleared too.
    pub fn drain(&mut self) -> Vec<T> {
        let mut tasks = Vec::with_capacity(self.entries.len());
        self.entries.drain(|task| tasks.push(task));
        for bucket in &mut self.buckets {
            *bucket = Bucket::EMPTY;
        }
        self.flushing = None;
        self.paused.clear();
        self.queue.clear();
        tasks
    }

    /// Links entry `index` into the bucket its deadline belongs to; returns
    /// `false` when the deadline has come (the entry stays unlinked).
    fn place(&mut self, index: u32, deadline: u64) -> bool {
        let mut level = 0;
        loop {
            let Level {
                tick,
                interval,
                current_time,
            } = self.levels[level];
            if deadline < current_time.saturating_add(tick) {
                debug_assert_eq!(level, 0, "only level 0 expires entries");
                return false;
            }
            if deadline < current_time.saturating_add(interval) {
                let virtual_id = deadline / tick;
                let id = level as u64 * self.wheel_size + virtual_id % self.wheel_size;
                let id = id as u32;
                let bucket = &mut self.buckets[id as usize];
                bucket.push_back(id, &mut self.entries, index);
                let expiration = virtual_id * tick;
                if bucket.set_expiration(expiration) {
                    // A new round of this slot.
                    bucket.min_deadline = deadline;
                    let due = expiration.saturating_sub(self.lead(level));
                    self.offer(due, id);
                } else {
                    bucket.min_deadline = bucket.min_deadline.min(deadline);
                }
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

    fn push_level(&mut self, tick: u64, start: u64) {
        self.levels.push(Level {
            tick,
            interval: tick.saturating_mul(self.wheel_size),
            current_time: start - start % tick,
        });
        self.buckets
            .extend(std::iter::repeat_n(Bucket::EMPTY, self.wheel_size as usize));
    }

    /// Moves every level's time up to `time` (rounded down to its tick).
    fn advance_levels(&mut self, time: u64) {
        for level in &mut self.levels {
            if time >= level.current_time.saturating_add(level.tick) {
                level.current_time = time - time % level.tick;
            }
        }
    }
}

impl<T> fmt::Debug for TimingWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingWheel")
            .field("tick_ms", &self.tick_ms())
            .field("wheel_size", &self.wheel_size)
            .field("levels", &self.levels.len())
            .field("current_time", &self.current_time())
            .field("len", &self.len())
            .finish()
    }
}
