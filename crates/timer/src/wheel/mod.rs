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
//! entries from two rounds of its wheel. Debug builds check this
//! (`holds_one_round`) when a bucket starts a new round and when a due
//! bucket is taken from the queue.
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
//! still have to move is due earlier). See `lead` (in `level.rs`) and
//! `pass` (in `cascade.rs`); `advance_due` and `background_allowance` let an
//! owner spread the passes over the ticks of their slack.
//!
//! Walking a coarse bucket is where expiry spends its time: each entry was
//! last touched when it was added, so each one is a cache miss. Three things
//! keep those misses few and overlapping: a bucket keeps the entries its
//! early pass moves in an array of their own (its front), so each entry is
//! looked at once per level; a bucket is arrays of entry indices, so a walk
//! prefetches the slots of the entries ahead of it and many misses are under
//! way at once (see `bucket`); and a pass that finds entries already due
//! hands them out at once rather than moving them down first.
//!
//! # Never early
//!
//! [`TimingWheel::insert`] rounds deadlines *up* to a multiple of the tick,
//! so a level-0 bucket's expiration equals the deadline of each of its
//! entries, and an entry is expired only once the wheel's time has reached
//! its deadline. (Kafka rounds down and can fire up to a tick early.)
//! Deadlines beyond [`MAX_DEADLINE_MS`] are clamped to it (to the last
//! multiple of the tick not past it), so huge delays saturate instead of
//! overflowing and wrapping into the past.
//!
//! # Files
//!
//! - `mod.rs`: the wheel, its configuration, insert and cancel;
//! - `level.rs`: the levels, placing an entry and the one-round invariant;
//! - `cascade.rs`: advancing: due buckets, early and final passes;
//! - `divisor.rs`: dividing deadlines by a level's tick without a division.

mod cascade;
mod divisor;
mod level;
#[cfg(test)]
mod pass_tests;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

use crate::bucket::Bucket;
use crate::clock::NANOS_PER_MS;
use crate::delay_queue::DelayQueue;
use crate::entries::{EmptiedSlots, Entries, TimerHandle};
use crate::ConfigError;

pub(crate) use cascade::Advance;
use cascade::{Flush, Paused};
use level::Level;

/// The latest deadline a wheel keeps, in ms after its clock's origin (about
/// 146 million years): later deadlines are clamped to it. Keeping deadlines a
/// factor of four below `u64::MAX` leaves room for every level's
/// `current_time + interval` without overflow.
pub const MAX_DEADLINE_MS: u64 = u64::MAX / 4;

/// Largest accepted tick, ms: the last millisecond a [`Clock`](crate::Clock)
/// can read (`u64::MAX` nanoseconds, about 584 years). A task is due at the
/// end of a tick at the earliest, so with a longer tick no clock could ever
/// reach a deadline and nothing would fire. With this tick, a task added
/// during the first tick fires when the clock reaches its last millisecond.
pub const MAX_TICK_MS: u64 = u64::MAX / NANOS_PER_MS;

// A deadline rounds up to a tick below MAX_DEADLINE_MS with room for a whole
// level above it, for every accepted tick and wheel size.
const _: () = assert!(
    MAX_TICK_MS
        .saturating_mul(MAX_WHEEL_SIZE as u64)
        .saturating_mul(2)
        < MAX_DEADLINE_MS
);

/// Largest accepted wheel size: keeps bucket ids (level × size + slot) in a
/// `u32` for every possible number of levels.
pub const MAX_WHEEL_SIZE: usize = 1 << 16;

/// What [`TimingWheel::insert`] did with a task.
#[derive(Debug, PartialEq, Eq)]
pub enum Insertion<T> {
    /// The task waits in the wheel; the handle cancels it.
    Scheduled(TimerHandle),
    /// The deadline, once rounded (see
    /// [`TimingWheel::round_deadline`]), is not after the wheel's current
    /// time: the task is handed back, to be run now.
    Expired(T),
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
    /// `wheel_size`, prepared for taking deadlines modulo it.
    per_size: divisor::Divisor,
    queue: Arc<DelayQueue<u32>>,
    /// A due bucket popped from the queue whose final pass is not finished
    /// yet (see `advance_bounded`).
    flushing: Option<Flush>,
    /// Passes over coarse buckets that ran out of budget, in the order they
    /// paused; each resumes from what is left in its bucket's arrays.
    paused: Vec<Paused>,
    /// The earliest due time offered to the queue since the last
    /// [`take_earliest_offered`](Self::take_earliest_offered), or `u64::MAX`.
    earliest_offered: u64,
}

impl<T> TimingWheel<T> {
    /// A wheel of `wheel_size` buckets of `tick_ms` each, whose time starts
    /// at `start_ms` (rounded down to the tick). The wheel never reads a
    /// clock: its callers pass the time to [`advance`](Self::advance).
    /// A start at or after the last multiple of the tick not past
    /// [`MAX_DEADLINE_MS`] is refused ([`ConfigError::StartTooLate`]): every
    /// deadline is clamped to that multiple at the latest, so none could
    /// follow the wheel's first tick.
    pub fn new(tick_ms: u64, wheel_size: usize, start_ms: u64) -> Result<Self, ConfigError> {
        let queue = Arc::new(DelayQueue::new(crate::ManualClock::new()));
        Self::with_queue(tick_ms, wheel_size, start_ms, queue)
    }

    /// Like [`TimingWheel::new`], offering due buckets to `queue` (whose
    /// clock a blocking consumer waits on).
    pub(crate) fn with_queue(
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
        // The wheel's first tick must end by the last deadline it keeps, or
        // every insert would be clamped into the past (see `round_deadline`).
        let last_deadline = MAX_DEADLINE_MS - MAX_DEADLINE_MS % tick_ms;
        if start_ms >= last_deadline {
            return Err(ConfigError::StartTooLate {
                requested_ms: start_ms,
                max_ms: last_deadline - 1,
            });
        }
        let wheel_size = wheel_size as u64;
        let mut wheel = TimingWheel {
            entries: Entries::new(),
            buckets: Vec::new(),
            levels: Vec::new(),
            wheel_size,
            per_size: divisor::Divisor::new(wheel_size),
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

    /// Makes room in the entry arena for `additional` more waiting tasks,
    /// so that adding them does not reallocate it. (The buckets' arrays of
    /// indices still grow as they fill, and an arena that empties gives its
    /// memory back, what was reserved included.)
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    /// When the wheel next has work, if ever: the expiration of a level-0
    /// bucket, or the time of a coarse bucket's early or final pass (an
    /// early pass moves entries down a level and may expire none). It can
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
    pub(crate) fn next_due_expiration(&self) -> Option<u64> {
        match self.flushing {
            Some(flush) => Some(flush.due),
            None => self.queue.peek_expiration(),
        }
    }

    /// Rounds `deadline_ms` the way [`insert`](Self::insert) does: up to a
    /// multiple of the tick, clamped to the last multiple of the tick not
    /// past [`MAX_DEADLINE_MS`] (so a deadline less than a tick below that
    /// limit, about 146 million years out, rounds down to it).
    pub fn round_deadline(&self, deadline_ms: u64) -> u64 {
        let tick = self.tick_ms();
        if tick == 1 {
            // Kafka's default: nothing to round (and no division to pay).
            return deadline_ms.min(MAX_DEADLINE_MS);
        }
        let max = MAX_DEADLINE_MS - MAX_DEADLINE_MS % tick;
        deadline_ms
            .min(max)
            .div_ceil(tick)
            .saturating_mul(tick)
            .min(max)
    }

    /// Schedules `task` to expire at `deadline_ms` (see
    /// [`round_deadline`](Self::round_deadline)). A deadline that, rounded,
    /// is not after the wheel's current time hands the task back as
    /// [`Insertion::Expired`].
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

    /// Removes a waiting task and returns it; `None` when the handle is
    /// stale (the task expired, was cancelled, or the slot was reused).
    pub fn cancel(&mut self, handle: TimerHandle) -> Option<T> {
        let index = self.entries.resolve(handle)?;
        let slot = self.entries.slot(index);
        // A resolved handle names a linked entry, whose state is its level
        // (never `UNLINKED`: the wheel is exclusive, no pass is half-way).
        debug_assert!((slot.state() as usize) < self.levels.len());
        let id = self.bucket_id(slot.state() as usize, slot.deadline);
        let bucket = &mut self.buckets[id as usize];
        // A paused pass resumes from what is left in the arrays: nothing to
        // fix up.
        bucket.unlink(&mut self.entries, index);
        Some(self.entries.remove(index))
    }

    /// Slots the wheel's arena holds (for tests of its shrinking).
    #[cfg(test)]
    pub(crate) fn arena_capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Entries the buckets' arrays together have room for (for tests of
    /// their shrinking).
    #[cfg(test)]
    pub(crate) fn bucket_capacity(&self) -> usize {
        self.buckets.iter().map(Bucket::capacity).sum()
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

    /// From now on, keeps the arena's memory when it empties, for the owner
    /// to free off its lock (see [`take_emptied`](Self::take_emptied)).
    pub(crate) fn defer_freeing(&mut self) {
        self.entries.defer_freeing();
    }

    /// The memory of the arena emptied since the last call, if any (only
    /// after [`defer_freeing`](Self::defer_freeing)).
    pub(crate) fn take_emptied(&mut self) -> Option<EmptiedSlots<T>> {
        self.entries.take_emptied()
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
            bucket.clear();
        }
        self.flushing = None;
        self.paused.clear();
        self.queue.clear();
        tasks
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
