//! The thread-safe timer: sharded [`TimingWheel`](crate::TimingWheel)s, a
//! [`Clock`], a delay queue that the clock-driving thread sleeps on, and an
//! executor thread that runs expired tasks.
//!
//! # Sharding and locking
//!
//! The timer holds several wheels ("shards"), each behind its own
//! `parking_lot` mutex on its own cache line. Each adding thread sticks to
//! one shard (by [`thread_index`](crate::thread_index::thread_index),
//! assigned round-robin on a thread's first use), so threads that add
//! concurrently do not contend with each other; when another thread holds
//! its shard (cancelling, advancing, or adding
//! from a thread with the same index), it adds to the first other shard
//! that is free, and waits only if none is. A handle names its shard, so
//! `cancel` goes straight to it. `add` and `cancel` hold their shard's lock
//! for an O(1) insert or unlink (the clock is read before).
//!
//! The timer's own [`DelayQueue`] holds one wake-up per shard: the due time of
//! the shard's earliest queued bucket, offered when an add makes it earlier.
//! `advance_clock` sleeps on that queue *without* any shard lock, then takes
//! due shards in due order, each up to the next shard's due time, so expired
//! tasks reach the executor in deadline order across shards (except when
//! expiry runs behind: a cascade hands over the due tasks it finds as it
//! finds them, so a burst sharing one deadline starts firing at once rather
//! than after the whole cascade). A shard's lock
//! is held for at most `FLUSH_CHUNK` moved entries at a time, so an adder
//! never waits behind a whole cascade (Kafka holds one write lock for the
//! whole flush, and every add takes its read lock).
//!
//! Expiry is never starved by adds: while the advancing thread waits for a
//! shard, adders release that shard's lock fairly (handing it over rather
//! than re-taking it), and an adder that sees its shard's due work lag the
//! clock by `EXPIRY_LAG_MS` or more yields its CPU once, so the reaper and
//! the executor get to run even when adders keep every core busy. Passes
//! over coarse buckets (see [`TimingWheel`](crate::TimingWheel)) yield to
//! due buckets between chunks and are spread over the ticks of their slack, a share per
//! millisecond, so the reaper is never busy for long; shards with work take
//! turns chunk by chunk.
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
//!
//! # Files
//!
//! - `mod.rs`: the timer, adding and cancelling, shutdown;
//! - `builder.rs`: configuration;
//! - `shard.rs`: one locked wheel, and how threads take its lock;
//! - `wakeup.rs`: driving the clock: the wake-up queue and advancing shards.

mod builder;
mod shard;
#[cfg(test)]
mod tests;
mod wakeup;

use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::NANOS_PER_MS;
use crate::delay_queue::DelayQueue;
use crate::entries::{EmptiedSlots, TimerHandle};
use crate::executor::Executor;
use crate::panics::{discard_panic, panic_message};
use crate::shutdown_gate::ShutdownGate;
use crate::spin_lock::lock_spinning;
use crate::wheel::Insertion;
use crate::{Clock, ShutdownError};

pub use builder::TimerBuilder;
use shard::Shard;

/// How far (ms) a shard's earliest due work may lag the clock before an
/// adder on that shard yields its CPU once, so that expiry catches up.
pub(crate) const EXPIRY_LAG_MS: u64 = 2;

/// How many handles [`Timer::cancel_all`] cancels per hold of a shard's
/// lock. Each cancellation unlinks an entry that was last touched long ago
/// (a cache miss or two), and adders want the same lock for every add:
/// shorter holds keep their waits short.
pub(crate) const CANCEL_CHUNK: usize = 16;

/// A task the timer runs once, when it expires, on the timer's executor
/// thread.
///
/// Every `FnOnce() + Send + 'static` closure is a task; implement the trait
/// for your own type to keep a timer entry as small as the type (the
/// purgatory's expiry task is a single `Arc`).
///
/// A timer's tasks run one at a time on that one thread, so a task must not
/// block (a blocking send on a full channel, a lock held elsewhere for
/// long): every expiry behind it waits, and [`Timer::backlog`] grows. Hand
/// slow work to another thread. A task that holds the timer it is in (to
/// add a retry, or itself again for a periodic task) holds it through a
/// `Weak`: an `Arc` in a pending task keeps the timer, its thread and the
/// task alive after every other handle is gone.
pub trait TimerTask: Send + 'static {
    /// Runs the task.
    fn run(self);
}

impl<F: FnOnce() + Send + 'static> TimerTask for F {
    fn run(self) {
        self()
    }
}

/// A thread-safe hierarchical timer.
///
/// Many threads may [`add`](Timer::add) and [`cancel`](Timer::cancel) while
/// one thread drives the clock with [`advance_clock`](Timer::advance_clock),
/// usually a [`Reaper`](crate::Reaper); a test on a
/// [`ManualClock`](crate::ManualClock) drives it itself, with no reaper (see
/// [`wait_for_executor`](Timer::wait_for_executor)). Expired tasks run on
/// the timer's own executor thread, one at a time (see [`TimerTask`]).
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
    /// Lets one `shutdown` through, and has the others wait for it.
    shutdown_gate: ShutdownGate,
    /// Chunks of expired tasks taken out of a shard and not handed to the
    /// executor yet: `shutdown` lets them through before it closes the
    /// executor, as they are no longer in any wheel to be handed back.
    handing_over: AtomicUsize,
    /// Bumped by [`wake`](Self::wake): a reaper's call of
    /// `advance_clock_bounded` that sees it move stops expiring.
    stops: AtomicUsize,
    name: String,
    tick_ms: u64,
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
    /// tick (saturating: `Duration::MAX` never fires). Never earlier: were
    /// the clock to read behind the time the wheel taking the task has
    /// reached (a clock that went backwards, against the [`Clock`]
    /// contract), the delay counts from the wheel's time. Each shard has
    /// its own wheel, and an idle one may lag the others: after such a
    /// clock, two adds with the same delay from different threads may
    /// fire at different times, neither before the reading plus `delay`. A zero
    /// delay hands the task to the executor at once, without reading the
    /// clock. The returned handle
    /// cancels the task; for a task that went straight to the executor it
    /// is already stale ([`TimerHandle::is_detached`]).
    ///
    /// Tasks sharing a deadline run in no particular order, not in the
    /// order they were added (the order of the buckets they went through
    /// decides, and a clock that jumps hands them over as found).
    ///
    /// After [`shutdown`](Timer::shutdown) the task is given back in the
    /// error. That error holds the task, so it is `Sync` only if the task
    /// is (a boxed closure is not): to pass it on as
    /// `Box<dyn Error + Send + Sync>` (or `anyhow::Error`), map it with
    /// [`ShutdownError::without_task`].
    pub fn add(&self, delay: Duration, task: T) -> Result<TimerHandle, ShutdownError<T>> {
        let delay = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        if delay == 0 {
            return self.run_now(task);
        }
        let now = self.clock.now_nanos();
        let (index, mut state) = self.lock_for_add();
        let shard = &self.shards[index];
        if self.shut_down.load(Ordering::Acquire) {
            return Err(ShutdownError(task));
        }
        // A clock that went backwards (against the `Clock` contract) reads
        // behind the wheel, which never goes back: the delay then counts
        // from the wheel's time, so the task fires late on the new reading
        // rather than at once, early.
        let wheel_now = state.wheel.current_time().saturating_mul(NANOS_PER_MS);
        let deadline_ms = now
            .max(wheel_now)
            .saturating_add(delay)
            .div_ceil(NANOS_PER_MS);
        match state.wheel.insert(deadline_ms, task) {
            Insertion::Scheduled(handle) => {
                shard.size.store(state.wheel.len(), Ordering::Relaxed);
                if let Some(due) = state.wheel.take_earliest_offered() {
                    if due < state.armed && state.arm(due) {
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
    /// (outside the timer's lock), freeing its memory; if its `Drop`
    /// panics, the panic reaches the caller instead of the `true` (the task
    /// was stopped all the same, and the timer stays whole).
    pub fn cancel(&self, handle: &TimerHandle) -> bool {
        self.remove(handle).is_some()
    }

    /// Cancels a waiting task and gives it back, as
    /// [`cancel`](Self::cancel) does but without dropping it; `None` when
    /// `cancel` would return `false`. To move a task to a new deadline (an
    /// idle timeout that each message resets), add it back.
    ///
    /// ```
    /// use std::time::Duration;
    /// use timer::{ManualClock, Timer, TimerBuilder};
    ///
    /// let clock = ManualClock::new();
    /// let timer: Timer = TimerBuilder::new().clock(clock.clone()).build().unwrap();
    /// let idle = timer.add(Duration::from_secs(30), Box::new(|| {})).unwrap();
    /// clock.advance_ms(10_000); // a message arrives: 30 s from now again
    /// let task = timer.remove(&idle).expect("still waiting");
    /// let idle = timer.add(Duration::from_secs(30), task).unwrap();
    /// assert!(timer.remove(&idle).is_some());
    /// ```
    pub fn remove(&self, handle: &TimerHandle) -> Option<T> {
        let shard = self.shards.get(handle.shard())?;
        let (task, emptied) = {
            let mut state = shard.state.lock();
            let task = state.wheel.cancel(*handle);
            let emptied = state.wheel.take_emptied();
            shard.size.store(state.wheel.len(), Ordering::Relaxed);
            shard.release(state);
            (task, emptied)
        };
        self.free_emptied(emptied);
        task
    }

    /// Has an emptied arena's memory freed on the executor thread, off the
    /// caller's path (unmapping a large arena takes milliseconds).
    pub(super) fn free_emptied(&self, emptied: Option<EmptiedSlots<T>>) {
        if let Some(memory) = emptied {
            self.executor.free_later(Box::new(memory));
        }
    }

    /// Cancels every task in `handles`, like [`cancel`](Self::cancel) for
    /// each, but taking each shard's lock once per small chunk of the handles
    /// it issued rather than once per handle (the handles are reordered by
    /// shard). Returns how many were cancelled; the rest were stale. Each
    /// chunk's tasks are dropped after its lock is released, never under one,
    /// and nothing is allocated. A task whose `Drop` panics does not stop
    /// the rest: every handle is cancelled and every task dropped, and then
    /// the first such panic resumes in the caller.
    ///
    /// This is the cheap way for a thread that completes many operations to
    /// disarm their timers: its lock holds no longer alternate with those of
    /// the threads adding tasks at every single cancellation, and each is
    /// short, so an adder waiting for one rarely gives up its CPU.
    pub fn cancel_all(&self, handles: &mut [TimerHandle]) -> usize {
        handles.sort_unstable_by_key(TimerHandle::shard);
        let mut cancelled = 0;
        let mut panicked = None;
        for run in handles.chunk_by(|a, b| a.shard() == b.shard()) {
            let Some(shard) = self.shards.get(run[0].shard()) else {
                continue;
            };
            for chunk in run.chunks(CANCEL_CHUNK) {
                // On the stack: this runs for every batch a purgatory frees.
                let mut taken: [Option<T>; CANCEL_CHUNK] = std::array::from_fn(|_| None);
                let mut state = lock_spinning(&shard.state);
                for (task, &handle) in taken.iter_mut().zip(chunk) {
                    *task = state.wheel.cancel(handle);
                }
                let emptied = state.wheel.take_emptied();
                shard.size.store(state.wheel.len(), Ordering::Relaxed);
                shard.release(state);
                self.free_emptied(emptied);
                cancelled += taken.iter().filter(|task| task.is_some()).count();
                for task in taken.into_iter().flatten() {
                    if let Err(panic) = catch_unwind(AssertUnwindSafe(move || drop(task))) {
                        match panicked {
                            None => panicked = Some(panic),
                            Some(_) => discard_panic(panic),
                        }
                    }
                }
            }
        }
        if let Some(panic) = panicked {
            resume_unwind(panic);
        }
        cancelled
    }

    /// Number of tasks waiting in the wheel (not counting tasks already
    /// handed to the executor: see [`backlog`](Self::backlog)). Never takes
    /// the timer's lock.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.size.load(Ordering::Relaxed))
            .sum()
    }

    /// Number of expired tasks handed to the executor and not finished, the
    /// one running included (a chunk handed over at once, up to 1,024
    /// tasks, counts until its last task finished; the timer's own frees of
    /// emptied memory, which also run there, count one each). The timer's
    /// tasks run one at a time on its one executor thread, so a backlog
    /// that keeps growing means a task blocks or runs long, and every
    /// expiry behind it waits (see [`TimerTask`]). With [`len`](Self::len),
    /// what the timer holds. Never takes a lock.
    pub fn backlog(&self) -> usize {
        self.executor.backlog()
    }

    /// Number of shards (independently locked wheels).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Blocks until every task handed to the executor before this call has
    /// run. With a [`ManualClock`](crate::ManualClock) and no
    /// [`Reaper`](crate::Reaper) this makes tests deterministic: move the
    /// clock, `advance_clock(Duration::ZERO)`, wait, then assert. (A reaper
    /// driving the same clock may be part-way through handing over what the
    /// move made due: the test's `advance_clock` then finds nothing left to
    /// do and returns, and this call does not wait for the reaper's rest.)
    /// Returns at once when called from a task (on the executor thread) or
    /// after shutdown.
    pub fn wait_for_executor(&self) {
        self.executor.wait_idle();
    }

    /// Shuts the timer down and returns the tasks still waiting, which never
    /// run (Kafka drops them; here the caller decides). Tasks already handed
    /// to the executor run before this returns (unless it is called from a
    /// task, on the executor thread: they then run after the current one).
    /// Wakes any thread in [`advance_clock`](Timer::advance_clock); later
    /// adds fail with [`ShutdownError`]. Calling it again returns nothing;
    /// a call made while another is under way, or after one made by a task,
    /// first waits for it to finish and for the tasks handed to the
    /// executor to run (unless made from a task, which that call may be
    /// waiting for), so call it holding no lock a task may need.
    pub fn shutdown(&self) -> Vec<T> {
        let Some(_finishing) = self.shutdown_gate.enter() else {
            if !self.executor.is_current_thread() {
                self.shutdown_gate.wait_finished();
                // A first call made by a task could not wait for the tasks
                // queued behind it (it runs on the executor): this one
                // does. Closing again only joins the thread, if nobody has.
                self.executor.close();
            }
            return Vec::new();
        };
        self.shut_down.store(true, Ordering::SeqCst);
        let mut pending = Vec::new();
        for shard in self.shards.iter() {
            let mut state = shard.state.lock();
            pending.append(&mut state.wheel.drain());
            state.armed = u64::MAX;
            state.queued.clear();
            shard.size.store(0, Ordering::Relaxed);
        }
        // A visit that took a chunk out of a shard before the flag was set
        // hands it over now (it does so without any lock, so this wait is
        // short); later visits see the flag under the shard's lock.
        while self.handing_over.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
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

    /// Wakes a thread blocked in `advance_clock` so that it returns, and
    /// has a call of `advance_clock_bounded` stop expiring after its chunk
    /// (used by the reaper to stop promptly).
    pub(crate) fn wake(&self) {
        self.stops.fetch_add(1, Ordering::SeqCst);
        self.queue.wake();
        // A reaper held by the executor's backlog (see `advance_clock`)
        // goes on at once too.
        self.executor.release_held();
    }
}

impl<T: TimerTask> Default for Timer<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: TimerTask> Drop for Timer<T> {
    /// Shuts down; pending tasks are dropped without running, each on its
    /// own: one whose `Drop` panics is logged, and the others are still
    /// dropped (a second panic while the first unwinds would abort).
    fn drop(&mut self) {
        for task in self.shutdown() {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(move || drop(task))) {
                log::error!(
                    "timer {}: a pending task's drop panicked: {}",
                    self.name,
                    panic_message(&*panic)
                );
                discard_panic(panic);
            }
        }
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
