//! The thread-safe timer: sharded [`TimingWheel`]s, a [`Clock`], a delay
//! queue that the clock-driving thread sleeps on, and an executor thread that
//! runs expired tasks.
//!
//! # Sharding and locking
//!
//! The timer holds several wheels ("shards"), each behind its own
//! `parking_lot` mutex on its own cache line. Each adding thread sticks to
//! one shard (by [`thread_index`], assigned round-robin on a thread's first
//! use), so threads that add concurrently do not contend with each other;
//! when another thread holds its shard (cancelling, advancing, or adding
//! from a thread with the same index), it adds to the first other shard
//! that is free, and waits only if none is. A handle names its shard, so
//! `cancel` goes straight to it. `add` and `cancel` hold their shard's lock
//! for an O(1) insert or unlink (the clock is read before).
//!
//! The timer's own [`DelayQueue`] holds one wake-up per shard: the due time of
//! the shard's earliest queued bucket, offered when an add makes it earlier.
//! `advance_clock` sleeps on that queue *without* any shard lock, then takes
//! due shards in due order, each up to the next shard's due time, so expired
//! tasks reach the executor in deadline order across shards. A shard's lock
//! is held for at most [`FLUSH_CHUNK`] moved entries at a time, so an adder
//! never waits behind a whole cascade (Kafka holds one write lock for the
//! whole flush, and every add takes its read lock).
//!
//! Expiry is never starved by adds: while the advancing thread waits for a
//! shard, adders release that shard's lock fairly (handing it over rather
//! than re-taking it), and an adder that sees its shard's due work lag the
//! clock by [`EXPIRY_LAG_MS`] or more yields its CPU once, so the reaper and
//! the executor get to run even when adders keep every core busy. Passes
//! over coarse buckets (see [`TimingWheel`]) yield to due buckets between
//! chunks and are spread over the ticks of their slack, a share per wake-up,
//! so the reaper is never busy for long; shards with due work take turns
//! chunk by chunk.
//!
//! Lock order: a shard's lock, then a delay queue's lock; never the reverse.
//!
//! # Invariants
//!
//! - Every task added and not cancelled runs exactly once, on the executor,
//!   no earlier than its deadline: the deadline is the clock's reading plus
//!   the delay, rounded up to the tick, and a task is expired only when the
//!   clock's millisecond reading has reached it.
//! - `cancel` returns `true` iff it removed the task from its wheel; a task
//!   taken out of a wheel for expiry is already on its way to the executor,
//!   so exactly one of "cancel returned true" and "the task ran" happens.
//! - Whenever a shard has a queued bucket, the timer's queue holds a wake-up
//!   for that shard no later than the bucket's due time (`ShardState::armed`),
//!   or, for a shard that stopped mid-way to let another shard's due work go
//!   first, no later than the time it stopped.
//! - After [`Timer::shutdown`] nothing is added, pending tasks are handed
//!   back to the caller, and every task that had been handed to the executor
//!   has run.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

use crate::clock::NANOS_PER_MS;
use crate::delay_queue::DelayQueue;
use crate::entries::{TimerHandle, MAX_SHARDS};
use crate::executor::Executor;
use crate::spin_lock::lock_spinning;
use crate::thread_index::thread_index;
use crate::wheel::{Insertion, TimingWheel};
use crate::{Clock, ConfigError, ShutdownError, SystemClock};

/// How far (ms) a shard's earliest due work may lag the clock before an
/// adder on that shard yields its CPU once, so that expiry catches up.
pub(crate) const EXPIRY_LAG_MS: u64 = 2;

/// Most entries moved per hold of the wheel lock in `advance_clock`.
pub(crate) const FLUSH_CHUNK: usize = 256;

/// How many handles [`Timer::cancel_all`] cancels per hold of a shard's
/// lock. Each cancellation unlinks an entry that was last touched long ago
/// (a cache miss or two), and adders want the same lock for every add:
/// shorter holds keep their waits short. (Reasoned; on its own it did not
/// change W2's count of adder yields measurably.)
pub(crate) const CANCEL_CHUNK: usize = 16;

/// A task the timer runs once, when it expires, on the timer's executor
/// thread.
///
/// Every `FnOnce() + Send + 'static` closure is a task; implement the trait
/// for your own type to keep a timer entry as small as the type (the
/// purgatory's expiry task is a single `Arc`).
pub trait TimerTask: Send + 'static {
    /// Runs the task.
    fn run(self);
}

impl<F: FnOnce() + Send + 'static> TimerTask for F {
    fn run(self) {
        self()
    }
}

/// Configures and builds a [`Timer`]. Defaults follow Kafka: tick 1 ms,
/// wheel size 20, real time ([`SystemClock`]).
///
/// ```
/// use std::time::Duration;
/// use timer::{ManualClock, Timer, TimerBuilder};
///
/// let timer: Timer = TimerBuilder::new()
///     .tick(Duration::from_millis(10))
///     .wheel_size(64)
///     .clock(ManualClock::new())
///     .name("session-timeouts")
///     .build()
///     .unwrap();
/// assert_eq!(timer.name(), "session-timeouts");
/// assert!(TimerBuilder::new().wheel_size(0).build::<Box<dyn FnOnce() + Send>>().is_err());
/// ```
#[derive(Debug, Clone)]
pub struct TimerBuilder {
    tick: Duration,
    wheel_size: usize,
    shards: Option<usize>,
    clock: Option<Arc<dyn Clock>>,
    name: String,
}

impl TimerBuilder {
    /// A builder with Kafka's defaults (the same as [`Timer::builder`], which
    /// needs the task type named: `Timer::<MyTask>::builder()`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Width of a level-0 bucket: a whole number of milliseconds, at least 1.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// Buckets per wheel level (at least 2).
    pub fn wheel_size(mut self, wheel_size: usize) -> Self {
        self.wheel_size = wheel_size;
        self
    }

    /// Number of independently locked wheels, 1 to 64 (default: the number
    /// of CPUs the process may use). Threads that add at the same time
    /// contend only when they share a shard.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// The clock to read (default: a new [`SystemClock`]).
    pub fn clock(self, clock: impl Clock) -> Self {
        self.shared_clock(Arc::new(clock))
    }

    /// A clock shared with other components.
    pub fn shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The timer's name, used for its threads (`executor-<name>`) and logs.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Builds the timer and starts its executor thread.
    pub fn build<T: TimerTask>(self) -> Result<Timer<T>, ConfigError> {
        if self.tick.is_zero() {
            return Err(ConfigError::ZeroTick);
        }
        if self.tick.subsec_nanos() % NANOS_PER_MS as u32 != 0 {
            return Err(ConfigError::TickNotWholeMillis);
        }
        let tick_ms = u64::try_from(self.tick.as_millis()).unwrap_or(u64::MAX);
        let shards = self.shards.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_SHARDS))
        });
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(ConfigError::ShardsOutOfRange {
                requested: shards,
                min: 1,
                max: MAX_SHARDS,
            });
        }
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(SystemClock::new()) as Arc<dyn Clock>);
        let start = clock.now_ms();
        let shards = (0..shards)
            .map(|i| {
                let queue = Arc::new(DelayQueue::with_shared_clock(clock.clone()));
                let mut wheel = TimingWheel::with_queue(tick_ms, self.wheel_size, start, queue)?;
                wheel.set_shard(i);
                Ok(CachePadded::new(Shard {
                    state: Mutex::new(ShardState {
                        wheel,
                        armed: u64::MAX,
                    }),
                    size: AtomicUsize::new(0),
                    advancer_waiting: AtomicBool::new(false),
                }))
            })
            .collect::<Result<Box<[_]>, ConfigError>>()?;
        let executor =
            Executor::start(&self.name).map_err(|e| ConfigError::Spawn(e.to_string()))?;
        Ok(Timer {
            shards,
            queue: DelayQueue::with_shared_clock(clock.clone()),
            clock,
            executor,
            shut_down: AtomicBool::new(false),
            name: self.name,
            tick_ms,
        })
    }
}

impl Default for TimerBuilder {
    fn default() -> Self {
        TimerBuilder {
            tick: Duration::from_millis(1),
            wheel_size: 20,
            shards: None,
            clock: None,
            name: "timer".to_owned(),
        }
    }
}

/// A thread-safe hierarchical timer.
///
/// Many threads may [`add`](Timer::add) and [`cancel`](Timer::cancel) while
/// one thread drives the clock with [`advance_clock`](Timer::advance_clock),
/// usually a [`Reaper`](crate::Reaper). Expired tasks run on the timer's own
/// executor thread.
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use timer::{ManualClock, Timer, TimerBuilder};
///
/// let clock = ManualClock::new();
/// let timer: Timer = TimerBuilder::new().clock(clock.clone()).build().unwrap();
/// let (fired, rx) = mpsc::channel();
/// let fired2 = fired.clone();
/// timer.add(Duration::from_millis(50), Box::new(move || fired.send("a").unwrap())).unwrap();
/// let b = timer.add(Duration::from_millis(80), Box::new(move || fired2.send("b").unwrap())).unwrap();
/// assert_eq!(timer.len(), 2);
///
/// clock.advance_ms(50);
/// assert!(timer.advance_clock(Duration::ZERO));
/// timer.wait_for_executor();
/// assert_eq!(rx.try_recv(), Ok("a"));
/// assert!(timer.cancel(&b));
/// assert_eq!(timer.len(), 0);
/// ```
pub struct Timer<T: TimerTask = Box<dyn FnOnce() + Send>> {
    shards: Box<[CachePadded<Shard<T>>]>,
    /// Wake-ups: `(due, shard)`, see the module invariants.
    queue: DelayQueue<usize>,
    clock: Arc<dyn Clock>,
    executor: Executor<T>,
    shut_down: AtomicBool,
    name: String,
    tick_ms: u64,
}

/// One independently locked wheel.
struct Shard<T> {
    state: Mutex<ShardState<T>>,
    /// Mirror of the wheel's length, refreshed under the lock, so that
    /// `len()` never takes a lock.
    size: AtomicUsize,
    /// Set while a thread advancing the clock waits for this shard's lock:
    /// adders then hand the lock over fairly instead of re-taking it at
    /// once, so a tight loop of adds cannot starve expiry.
    advancer_waiting: AtomicBool,
}

impl<T> Shard<T> {
    /// Releases the shard, handing it straight to a waiting advancer if any.
    fn release(&self, state: MutexGuard<'_, ShardState<T>>) {
        if self.advancer_waiting.load(Ordering::Relaxed) {
            MutexGuard::unlock_fair(state);
        } else {
            drop(state);
        }
    }

    /// Takes the shard's lock on behalf of a thread advancing the clock.
    fn lock_for_advance(&self) -> MutexGuard<'_, ShardState<T>> {
        if let Some(state) = self.state.try_lock() {
            return state;
        }
        self.advancer_waiting.store(true, Ordering::Relaxed);
        let state = self.state.lock();
        self.advancer_waiting.store(false, Ordering::Relaxed);
        state
    }
}

struct ShardState<T> {
    wheel: TimingWheel<T>,
    /// Due time of this shard's latest wake-up in the timer's queue (no later
    /// than its earliest queued bucket), or `u64::MAX` when none is needed.
    armed: u64,
}

impl<T: TimerTask> Timer<T> {
    /// A timer with Kafka's defaults: tick 1 ms, wheel size 20, real time.
    ///
    /// # Panics
    /// If the executor thread cannot be spawned (as `std::thread::spawn`);
    /// use [`Timer::builder`] to get that as an error value.
    pub fn new() -> Self {
        match Self::builder().build() {
            Ok(timer) => timer,
            Err(e) => panic!("cannot start a timer: {e}"),
        }
    }

    /// A builder, starting from Kafka's defaults.
    pub fn builder() -> TimerBuilder {
        TimerBuilder::default()
    }

    /// Schedules `task` to run once `delay` has passed.
    ///
    /// The deadline is the clock's reading plus `delay`, rounded up to the
    /// tick (saturating: `Duration::MAX` never fires). A zero delay hands the
    /// task to the executor at once. The returned handle cancels the task; for
    /// a task that went straight to the executor it is already stale.
    ///
    /// After [`shutdown`](Timer::shutdown) the task is given back in the error.
    pub fn add(&self, delay: Duration, task: T) -> Result<TimerHandle, ShutdownError<T>> {
        let now = self.clock.now_nanos();
        let delay = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        if delay == 0 {
            return self.run_now(task);
        }
        let deadline_ms = now.saturating_add(delay).div_ceil(NANOS_PER_MS);
        let (index, mut state) = self.lock_for_add();
        let shard = &self.shards[index];
        if self.shut_down.load(Ordering::Acquire) {
            return Err(ShutdownError(task));
        }
        match state.wheel.insert(deadline_ms, task) {
            Insertion::Scheduled(handle) => {
                shard.size.store(state.wheel.len(), Ordering::Relaxed);
                if let Some(due) = state.wheel.take_earliest_offered() {
                    if due < state.armed {
                        state.armed = due;
                        self.queue.offer(due, index);
                    }
                }
                // Expiry is running behind (the reaper or the executor is
                // starved of CPU, e.g. by adders on every core): let them in.
                let behind = state.armed.saturating_add(EXPIRY_LAG_MS) <= now / NANOS_PER_MS;
                shard.release(state);
                if behind {
                    std::thread::yield_now();
                }
                Ok(handle)
            }
            Insertion::Expired(task) => {
                shard.release(state);
                self.run_now(task)
            }
        }
    }

    /// Locks a shard for an add: the calling thread's own, or, if another
    /// thread holds that one, the first other shard that is free at once.
    /// A task may live in any shard (its handle names the shard), so an
    /// adder need not wait behind a batch of cancels or an advance while
    /// another wheel is idle. Blocks on its own shard only when every shard
    /// is busy.
    fn lock_for_add(&self) -> (usize, MutexGuard<'_, ShardState<T>>) {
        let n = self.shards.len();
        let own = thread_index() % n;
        if let Some(state) = self.shards[own].state.try_lock() {
            return (own, state);
        }
        for step in 1..n {
            let index = (own + step) % n;
            if let Some(state) = self.shards[index].state.try_lock() {
                return (index, state);
            }
        }
        (own, self.shards[own].state.lock())
    }

    fn run_now(&self, task: T) -> Result<TimerHandle, ShutdownError<T>> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(ShutdownError(task));
        }
        self.executor.submit(task).map_err(ShutdownError)?;
        Ok(TimerHandle::DETACHED)
    }

    /// Cancels a waiting task. Returns `true` iff this call stopped it from
    /// running; `false` for a task that already fired, is firing, was
    /// cancelled before, or for a stale handle. The task is dropped at once
    /// (outside the timer's lock), freeing its memory.
    pub fn cancel(&self, handle: &TimerHandle) -> bool {
        let Some(shard) = self.shards.get(handle.shard()) else {
            return false;
        };
        let task = {
            let mut state = shard.state.lock();
            let task = state.wheel.cancel(*handle);
            shard.size.store(state.wheel.len(), Ordering::Relaxed);
            shard.release(state);
            task
        };
        task.is_some()
    }

    /// Cancels every task in `handles`, like [`cancel`](Self::cancel) for
    /// each, but taking each shard's lock once per small chunk of the handles
    /// it issued rather than once per handle (the handles are reordered by
    /// shard). Returns how many were cancelled; the rest were stale. The
    /// tasks are dropped after every lock is released.
    ///
    /// This is the cheap way for a thread that completes many operations to
    /// disarm their timers: its lock holds no longer alternate with those of
    /// the threads adding tasks at every single cancellation, and each is
    /// short, so an adder waiting for one rarely gives up its CPU.
    pub fn cancel_all(&self, handles: &mut [TimerHandle]) -> usize {
        handles.sort_unstable_by_key(TimerHandle::shard);
        let mut cancelled = Vec::with_capacity(handles.len());
        for run in handles.chunk_by(|a, b| a.shard() == b.shard()) {
            let Some(shard) = self.shards.get(run[0].shard()) else {
                continue;
            };
            for chunk in run.chunks(CANCEL_CHUNK) {
                let mut state = lock_spinning(&shard.state);
                cancelled.extend(chunk.iter().filter_map(|&h| state.wheel.cancel(h)));
                shard.size.store(state.wheel.len(), Ordering::Relaxed);
                shard.release(state);
            }
        }
        cancelled.len()
    }

    /// Drives the clock: waits up to `timeout` for the earliest bucket to
    /// come due (waking early if an earlier one is added or the timer shuts
    /// down), then expires everything due by the clock, handing expired tasks
    /// to the executor. Returns whether any bucket was due.
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        if self.is_shut_down() || !self.queue.wait_until_due(timeout) {
            return false;
        }
        let mut any = false;
        while let Some((_, index)) = self.queue.poll_due(self.clock.now_ms()) {
            any |= self.advance_shard(index);
        }
        any
    }

    /// Expires what is due in one shard, in chunks of at most
    /// [`FLUSH_CHUNK`] moved entries per hold of its lock, then re-arms the
    /// shard's wake-up. Each chunk reads the clock afresh, so buckets that
    /// come due during a long flush are seen, and goes no further than the
    /// next other shard's wake-up, so shards are expired in due order (and
    /// the executor gets tasks in deadline order). Returns whether any
    /// bucket was due.
    ///
    /// Passes over coarse buckets that have slack left (see the wheel's
    /// `lead`) are not worked through in one go: each call does the share
    /// [`TimingWheel::background_allowance`] asks for, and the shard is
    /// woken again a tick later for more. A long burst of cascading would
    /// otherwise keep this thread busy for milliseconds, and on a machine
    /// whose scheduler packs threads onto one CPU the executor would wait
    /// behind it.
    fn advance_shard(&self, index: usize) -> bool {
        let shard = &self.shards[index];
        let mut any = false;
        // Entries left to move in the background, once the due work is done.
        let mut allowance: Option<usize> = None;
        loop {
            let now = self.clock.now_ms();
            let until = self
                .queue
                .peek_expiration()
                .map_or(now, |next| next.min(now));
            let mut expired = Vec::new();
            let (step, finished, yielded) = {
                let mut state = shard.lock_for_advance();
                if self.shut_down.load(Ordering::Acquire) {
                    return any;
                }
                let wheel = &mut state.wheel;
                let step = match allowance {
                    None => wheel.advance_due(until, FLUSH_CHUNK, |task| expired.push(task)),
                    Some(left) => wheel
                        .advance_bounded(until, left.min(FLUSH_CHUNK), |task| expired.push(task)),
                };
                let finished = match &mut allowance {
                    None if step.done && wheel.paused_finish_by().is_some() => {
                        // Due work done: on to the background share. At
                        // least a chunk per wake-up, so that a pass with much
                        // slack does not wake the thread for nothing.
                        allowance = Some(wheel.background_allowance(now).max(FLUSH_CHUNK));
                        false
                    }
                    None => step.done,
                    Some(left) => {
                        *left = left.saturating_sub(step.moved);
                        step.done || *left == 0
                    }
                };
                shard.size.store(wheel.len(), Ordering::Relaxed);
                // Stop when done, or when another shard has due work: shards
                // with due work take turns chunk by chunk.
                let yielded = !finished
                    && self
                        .queue
                        .peek_expiration()
                        .is_some_and(|theirs| theirs <= now);
                if finished || yielded {
                    // Buckets offered by the flush, or by adds between its
                    // chunks, are all covered by the wheel's next expiration.
                    // A shard that yields has work due now: it queues behind
                    // the shards that are due. Paused passes resume a tick
                    // later, unless something is due sooner (or a pass's
                    // `finish_by` comes first; with the allowance above it
                    // cannot, but the wake-up must not rely on that).
                    wheel.take_earliest_offered();
                    let next = wheel.next_due_expiration();
                    let next = match wheel.paused_finish_by() {
                        Some(finish_by) => {
                            let later = now.saturating_add(self.tick_ms).min(finish_by);
                            Some(next.map_or(later, |n| n.min(later)))
                        }
                        None => next,
                    };
                    state.armed = match next {
                        Some(next) if yielded => next.max(now),
                        Some(next) => next,
                        None => u64::MAX,
                    };
                    if state.armed != u64::MAX {
                        self.queue.offer(state.armed, index);
                    }
                }
                (step, finished, yielded)
            };
            any |= step.buckets > 0 || step.moved > 0;
            if !expired.is_empty() {
                if let Err(tasks) = self.executor.submit_batch(expired) {
                    // Only after shutdown; such tasks are dropped unrun,
                    // like the rest of the pending ones.
                    log::warn!(
                        "timer {}: {} expired tasks dropped by shutdown",
                        self.name,
                        tasks.len()
                    );
                }
            }
            if finished || yielded {
                return any;
            }
        }
    }

    /// Number of tasks waiting in the wheel (not counting tasks already
    /// handed to the executor). Never takes the timer's lock.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.size.load(Ordering::Relaxed))
            .sum()
    }

    /// Number of shards (independently locked wheels).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Blocks until every task handed to the executor before this call has
    /// run. With a [`ManualClock`](crate::ManualClock) this makes tests
    /// deterministic: move the clock, `advance_clock(Duration::ZERO)`, wait,
    /// then assert. Returns at once when called from a task (on the
    /// executor thread) or after shutdown.
    pub fn wait_for_executor(&self) {
        self.executor.wait_idle();
    }

    /// Shuts the timer down and returns the tasks still waiting, which never
    /// run (Kafka drops them; here the caller decides). Tasks already handed
    /// to the executor run before this returns (unless it is called from a
    /// task, on the executor thread: they then run after the current one).
    /// Wakes any thread in [`advance_clock`](Timer::advance_clock); later
    /// adds fail with [`ShutdownError`]. Calling it again returns nothing.
    pub fn shutdown(&self) -> Vec<T> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Vec::new();
        }
        let mut pending = Vec::new();
        for shard in self.shards.iter() {
            let mut state = shard.state.lock();
            pending.append(&mut state.wheel.drain());
            state.armed = u64::MAX;
            shard.size.store(0, Ordering::Relaxed);
        }
        self.queue.close();
        self.executor.close();
        log::debug!(
            "timer {}: shut down with {} tasks pending",
            self.name,
            pending.len()
        );
        pending
    }

    /// Whether no task is waiting in the wheel (see [`len`](Timer::len)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether [`shutdown`](Timer::shutdown) has been called.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// The clock this timer reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The timer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tick, in milliseconds.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms
    }

    /// Wakes a thread blocked in `advance_clock` so that it returns (used by
    /// the reaper to stop promptly).
    pub(crate) fn wake(&self) {
        self.queue.wake();
    }
}

impl<T: TimerTask> Default for Timer<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: TimerTask> Drop for Timer<T> {
    /// Shuts down; pending tasks are dropped without running.
    fn drop(&mut self) {
        drop(self.shutdown());
    }
}

impl<T: TimerTask> fmt::Debug for Timer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("name", &self.name)
            .field("tick_ms", &self.tick_ms)
            .field("len", &self.len())
            .field("shut_down", &self.is_shut_down())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::sync::mpsc;

    fn two_shards() -> (ManualClock, Timer) {
        let clock = ManualClock::new();
        let timer = TimerBuilder::new()
            .clock(clock.clone())
            .shards(2)
            .build()
            .expect("valid configuration");
        (clock, timer)
    }

    #[test]
    fn an_add_goes_to_a_free_shard_while_its_own_is_held() {
        let (clock, timer) = two_shards();
        let own = thread_index() % 2;
        let (fired, rx) = mpsc::channel();
        let held = timer.shards[own].state.lock();
        let fired2 = fired.clone();
        let a = timer
            .add(
                Duration::from_millis(5),
                Box::new(move || fired.send("a").unwrap()),
            )
            .unwrap();
        assert_eq!(a.shard(), 1 - own);
        drop(held);
        let b = timer
            .add(
                Duration::from_millis(5),
                Box::new(move || fired2.send("b").unwrap()),
            )
            .unwrap();
        assert_eq!(b.shard(), own);
        assert_eq!(timer.len(), 2);

        // The task in the other shard fires and the one in its own cancels
        // as usual.
        assert!(timer.cancel(&b));
        clock.advance_ms(5);
        assert!(timer.advance_clock(Duration::ZERO));
        timer.wait_for_executor();
        assert_eq!(rx.try_recv(), Ok("a"));
        assert!(rx.try_recv().is_err(), "the cancelled task ran");
        assert_eq!(timer.len(), 0);
        timer.shutdown();
    }

    #[test]
    fn an_add_waits_for_its_own_shard_while_every_shard_is_held() {
        let (_clock, timer) = two_shards();
        let timer = Arc::new(timer);
        let held = [timer.shards[0].state.lock(), timer.shards[1].state.lock()];
        let (done, rx) = mpsc::channel();
        let adder = std::thread::spawn({
            let timer = timer.clone();
            move || {
                let own = thread_index() % 2;
                let handle = timer.add(Duration::from_secs(1), Box::new(|| {})).unwrap();
                done.send(()).unwrap();
                (own, handle)
            }
        });
        // Proves only that the add has not returned yet; it cannot return
        // before the locks are released.
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        drop(held);
        let (own, handle) = adder.join().unwrap();
        assert_eq!(handle.shard(), own);
        assert!(timer.cancel(&handle));
        timer.shutdown();
    }

    /// Adds forced into a shard that has been idle while the adder's own
    /// shard followed the clock (every other shard held) fire exactly at
    /// their deadlines: a shard's wheel time is its own, whichever thread
    /// adds.
    #[test]
    fn adds_sent_to_an_idle_shard_fire_exactly_on_time() {
        for (shards, tick) in [(2, 1), (2, 10), (64, 7)] {
            for warm in [0, 36_000_000] {
                adds_into_an_idle_shard(shards, tick, warm);
            }
        }
    }

    fn adds_into_an_idle_shard(shards: usize, tick: u64, warm: u64) {
        let clock = ManualClock::new();
        let timer: Timer = TimerBuilder::new()
            .clock(clock.clone())
            .tick(Duration::from_millis(tick))
            .shards(shards)
            .build()
            .expect("valid configuration");
        let own = thread_index() % shards;
        let idle = (own + 1) % shards;
        // Only the own shard's wheel follows the clock up to `warm`.
        let mut t = 0;
        while t < warm {
            let step = (warm - t).min(7_919);
            timer
                .add(Duration::from_millis(step), Box::new(|| {}))
                .unwrap();
            t += step;
            clock.set_ms(t);
            timer.advance_clock(Duration::ZERO);
        }
        timer.wait_for_executor();

        let fired = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut deadlines = Vec::new();
        {
            let held: Vec<_> = (0..shards)
                .filter(|&i| i != idle)
                .map(|i| timer.shards[i].state.lock())
                .collect();
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            for i in 0..400u64 {
                // xorshift64: delays from 1 ms to ~6 hours.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let delay = 1 + x % [50, 2_000, 100_000, 20_000_000][i as usize % 4];
                let deadline = (clock.now_ms() + delay).div_ceil(tick) * tick;
                let (fired, clock2) = (fired.clone(), clock.clone());
                let handle = timer
                    .add(
                        Duration::from_millis(delay),
                        Box::new(move || fired.lock().push((deadline, clock2.now_ms()))),
                    )
                    .unwrap();
                assert_eq!(handle.shard(), idle);
                deadlines.push(deadline);
            }
            drop(held);
        }
        let mut steps: Vec<u64> = deadlines.iter().flat_map(|&d| [d - 1, d]).collect();
        steps.sort_unstable();
        steps.dedup();
        for at in steps {
            clock.set_ms(at);
            timer.advance_clock(Duration::ZERO);
            timer.wait_for_executor();
            let fired = fired.lock();
            assert!(fired.iter().all(|&(d, ran)| ran >= d), "a task ran early");
            let due = deadlines.iter().filter(|&&d| d <= at).count();
            assert_eq!(fired.len(), due, "{shards} shards, tick {tick}: at {at} ms");
        }
        assert_eq!(timer.len(), 0);
        timer.shutdown();
    }
}
