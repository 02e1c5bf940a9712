//! The executor: the one thread per timer that runs expired tasks.
//!
//! Expired tasks never run on the thread that adds them, nor on the thread
//! that advances the clock: they are sent here, so a slow task delays only the
//! tasks behind it, never the clock or the adders.
//!
//! Invariants:
//! - Tasks run in the order they were submitted, each exactly once.
//! - A task that panics is caught and logged; the thread goes on.
//! - Once [`Executor::close`] has returned, every task accepted by
//!   [`Executor::submit`] has run, and `submit` refuses new ones (giving the
//!   task back), so no task is ever silently lost.
//!
//! The backlog (tasks accepted and not yet run) is bounded for the thread
//! that drives the clock: [`Executor::wait_for_room`] holds it while more
//! than [`BACKLOG_HIGH`] tasks wait, until the executor is down to
//! [`BACKLOG_LOW`], looking again every [`HOLD_NAP`]: the executor never
//! wakes it, since a thread woken by another is placed on the waker's CPU
//! by a scheduler that packs threads, and the two would then take turns on
//! one CPU for the whole drain. Expiring tasks faster than they run gains
//! nothing (they
//! wait here instead of in the wheel), and an unbounded backlog holds a
//! second copy of a burst's tasks in memory that the allocator maps and
//! unmaps over and over, at the clock thread's expense; when the two threads
//! share a CPU, that cost delays the tasks themselves. The hold is never
//! long: an executor that runs no task for [`STALL`] (a slow or blocked
//! task) lifts the bound until it runs one, a hold ends after [`HOLD_MAX`]
//! whatever the backlog, and [`Executor::release_held`] (the reaper's stop)
//! or [`Executor::close`] end it at once.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::panics::{discard_panic, panic_message};
use crate::TimerTask;

enum Job<T> {
    Run(T),
    Batch(Vec<T>),
    /// Memory to free after the jobs before it (see [`Executor::free_later`]).
    Free(Box<dyn Send>),
    /// Answered once every job sent before it has run.
    Barrier(mpsc::SyncSender<()>),
}

/// Tasks waiting above which [`Executor::wait_for_room`] holds its caller:
/// 64 of the clock's chunks.
pub(crate) const BACKLOG_HIGH: usize = 65536;
/// Tasks waiting at which a held caller goes on: enough left for the
/// executor to run while the caller wakes up and hands over more.
pub(crate) const BACKLOG_LOW: usize = 32768;
/// How often a held caller looks at the backlog again.
const HOLD_NAP: Duration = Duration::from_micros(250);
/// How long an executor may run no task before the bound is lifted.
pub(crate) const STALL: Duration = Duration::from_millis(1);
/// The longest one call of [`Executor::wait_for_room`] holds its caller,
/// even while the executor makes progress (others may keep its backlog
/// up by submitting directly).
pub(crate) const HOLD_MAX: Duration = Duration::from_millis(20);

pub(crate) struct Executor<T> {
    /// `None` once closed. Submitting takes this lock only for the send,
    /// which makes "refused" and "will run" exclusive (see `close`).
    sender: Mutex<Option<mpsc::Sender<Job<T>>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
    backlog: Arc<Backlog>,
}

/// The executor's backlog, shared with its thread.
struct Backlog {
    /// Tasks accepted and not yet run.
    tasks: AtomicUsize,
    /// Tasks run so far, stored (not added to) by the executor thread after
    /// each task: moves whenever the executor makes progress.
    ran: AtomicUsize,
    /// `ran` when the executor was last found stalled, plus one (0: never):
    /// the bound is lifted while `ran` stays there.
    stalled_at: AtomicUsize,
    /// Bumped to let every held caller go (see `release_held`).
    releases: AtomicUsize,
    /// Callers held in `wait_for_room` (read by tests).
    waiting: AtomicUsize,
    closed: AtomicBool,
    /// [`STALL`], or a test's.
    stall: Duration,
    /// [`HOLD_MAX`], or a test's.
    hold_max: Duration,
    lock: Mutex<()>,
    room: Condvar,
}

impl Backlog {
    /// Counts a finished job of `tasks` tasks.
    fn done(&self, tasks: usize) {
        self.tasks.fetch_sub(tasks, Ordering::SeqCst);
    }

    fn wake(&self) {
        let _guard = self.lock.lock();
        self.room.notify_all();
    }
}

impl<T: TimerTask> Executor<T> {
    /// Starts the executor thread, named `executor-<timer name>` as in Kafka.
    pub(crate) fn start(timer_name: &str) -> std::io::Result<Self> {
        Self::start_with_limits(timer_name, STALL, HOLD_MAX)
    }

    /// [`start`](Self::start) with `stall` and `hold_max` in place of
    /// [`STALL`] and [`HOLD_MAX`].
    fn start_with_limits(
        timer_name: &str,
        stall: Duration,
        hold_max: Duration,
    ) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel::<Job<T>>();
        let name = timer_name.to_owned();
        let backlog = Arc::new(Backlog {
            tasks: AtomicUsize::new(0),
            ran: AtomicUsize::new(0),
            stalled_at: AtomicUsize::new(0),
            releases: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            stall,
            hold_max,
            lock: Mutex::new(()),
            room: Condvar::new(),
        });
        let thread = {
            let backlog = backlog.clone();
            thread::Builder::new()
                .name(format!("executor-{timer_name}"))
                .spawn(move || {
                    // Only this thread writes `ran`: a plain store per task,
                    // not a read-modify-write.
                    let mut ran = 0usize;
                    let mut run = |task| {
                        run_task(&name, task);
                        ran = ran.wrapping_add(1);
                        backlog.ran.store(ran, Ordering::Relaxed);
                    };
                    for job in receiver {
                        match job {
                            Job::Run(task) => {
                                run(task);
                                backlog.done(1);
                            }
                            Job::Batch(tasks) => {
                                let count = tasks.len();
                                tasks.into_iter().for_each(&mut run);
                                backlog.done(count);
                            }
                            Job::Free(memory) => {
                                // Not a task: a free that takes longer than
                                // `STALL` lifts the bound for a moment.
                                drop(memory);
                                backlog.done(1);
                            }
                            Job::Barrier(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                    log::debug!("timer {name}: executor stopped");
                })?
        };
        Ok(Executor {
            sender: Mutex::new(Some(sender)),
            thread_id: thread.thread().id(),
            thread: Mutex::new(Some(thread)),
            backlog,
        })
    }

    /// Queues one task; gives it back if the executor is closed.
    pub(crate) fn submit(&self, task: T) -> Result<(), T> {
        match &*self.sender.lock() {
            Some(sender) => {
                // Counted before the send: the thread may run it at once.
                self.backlog.tasks.fetch_add(1, Ordering::SeqCst);
                sender.send(Job::Run(task)).map_err(|e| match e.0 {
                    Job::Run(task) => {
                        self.backlog.tasks.fetch_sub(1, Ordering::SeqCst);
                        task
                    }
                    _ => unreachable!("sent a Run job"),
                })
            }
            None => Err(task),
        }
    }

    /// Queues tasks to run in order; gives them back if the executor is closed.
    pub(crate) fn submit_batch(&self, tasks: Vec<T>) -> Result<(), Vec<T>> {
        match &*self.sender.lock() {
            Some(sender) => {
                let count = tasks.len();
                self.backlog.tasks.fetch_add(count, Ordering::SeqCst);
                sender.send(Job::Batch(tasks)).map_err(|e| match e.0 {
                    Job::Batch(tasks) => {
                        self.backlog.tasks.fetch_sub(count, Ordering::SeqCst);
                        tasks
                    }
                    _ => unreachable!("sent a Batch job"),
                })
            }
            None => Err(tasks),
        }
    }

    /// Frees `memory` on the executor thread once every job queued before
    /// it has run, so that tasks handed over just before (an emptied
    /// arena's last ones) do not wait for the freeing. It counts in the
    /// backlog as one task, so [`wait_idle`](Self::wait_idle) waits for it
    /// too. Frees it at once, here, if the executor is closed.
    pub(crate) fn free_later(&self, memory: Box<dyn Send>) {
        let refused = match &*self.sender.lock() {
            Some(sender) => {
                self.backlog.tasks.fetch_add(1, Ordering::SeqCst);
                sender.send(Job::Free(memory)).err().map(|e| {
                    self.backlog.tasks.fetch_sub(1, Ordering::SeqCst);
                    e.0
                })
            }
            None => Some(Job::Free(memory)),
        };
        // Outside the sender's lock: freeing may take milliseconds.
        drop(refused);
    }

    /// Tasks accepted and not yet run.
    pub(crate) fn backlog(&self) -> usize {
        self.backlog.tasks.load(Ordering::Relaxed)
    }

    /// Holds the caller while more than [`BACKLOG_HIGH`] tasks wait, until
    /// no more than [`BACKLOG_LOW`] do (see the module docs). Returns at once
    /// on the executor thread itself (it would wait for itself), and while
    /// the executor is stalled: when it runs no task for [`STALL`], the bound
    /// is lifted until it runs one. A hold ends after [`HOLD_MAX`] at most,
    /// and at once when the executor closes or [`release_held`] is called.
    ///
    /// [`release_held`]: Executor::release_held
    pub(crate) fn wait_for_room(&self) {
        let b = &*self.backlog;
        if b.tasks.load(Ordering::Relaxed) <= BACKLOG_HIGH
            || self.is_current_thread()
            || b.stalled_at.load(Ordering::Relaxed) == b.ran.load(Ordering::Relaxed).wrapping_add(1)
        {
            return;
        }
        let started = Instant::now();
        let mut guard = b.lock.lock();
        let releases = b.releases.load(Ordering::SeqCst);
        let mut ran = b.ran.load(Ordering::Relaxed);
        let mut progressed_at = started;
        b.waiting.fetch_add(1, Ordering::Relaxed);
        loop {
            if b.tasks.load(Ordering::SeqCst) <= BACKLOG_LOW
                || b.closed.load(Ordering::SeqCst)
                || b.releases.load(Ordering::SeqCst) != releases
                || started.elapsed() >= b.hold_max
            {
                break;
            }
            // Looks again after a nap rather than being woken by the
            // executor: a wake-up from it would tell the scheduler that the
            // two threads belong on one CPU.
            let nap = HOLD_NAP.min(b.hold_max.saturating_sub(started.elapsed()));
            b.room.wait_for(&mut guard, nap);
            let now_ran = b.ran.load(Ordering::Relaxed);
            if now_ran != ran {
                ran = now_ran;
                progressed_at = Instant::now();
            } else if progressed_at.elapsed() >= b.stall {
                b.stalled_at.store(ran.wrapping_add(1), Ordering::Relaxed);
                log::debug!(
                    "timer executor stalled: backlog of {} tasks",
                    self.backlog()
                );
                break;
            }
        }
        b.waiting.fetch_sub(1, Ordering::Relaxed);
    }

    /// Lets every caller held in [`wait_for_room`](Self::wait_for_room) go
    /// at once; callers after this one are held as before. The reaper's stop
    /// calls it, so that stopping never waits for a backlog to drain.
    pub(crate) fn release_held(&self) {
        self.backlog.releases.fetch_add(1, Ordering::SeqCst);
        self.backlog.wake();
    }

    /// Blocks until every task submitted before the call has run. Returns at
    /// once when no task is waiting or running (the backlog counts a task
    /// until it has run), when called from the executor thread itself
    /// (waiting there would wait for itself) or when the executor is closed
    /// (then nothing is left, or, closed by one of its tasks, the thread
    /// runs what is left on its own).
    pub(crate) fn wait_idle(&self) {
        // SeqCst pairs with `done`'s decrement, made after the task ran: a
        // zero here means the tasks' effects are visible to the caller. A
        // clock driven tick by tick (a simulation) then pays no round trip
        // through the executor for ticks that expired nothing.
        if self.backlog.tasks.load(Ordering::SeqCst) == 0 || self.is_current_thread() {
            return;
        }
        let (done, wait) = mpsc::sync_channel(1);
        let sent = match &*self.sender.lock() {
            Some(sender) => sender.send(Job::Barrier(done)).is_ok(),
            None => false,
        };
        if sent {
            // An error means the thread is gone, so nothing is left to wait for.
            let _ = wait.recv();
        }
    }

    /// Whether the calling thread is the executor's.
    pub(crate) fn is_current_thread(&self) -> bool {
        thread::current().id() == self.thread_id
    }

    /// Stops accepting tasks, lets the thread run those already accepted,
    /// and joins it (unless called from the executor thread itself, which
    /// then finishes on its own after the current task).
    pub(crate) fn close(&self) {
        drop(self.sender.lock().take());
        self.backlog.closed.store(true, Ordering::SeqCst);
        self.backlog.wake();
        if self.is_current_thread() {
            return;
        }
        // The lock is held through the join: a concurrent closer waits for
        // the thread to finish too, instead of finding the handle gone.
        if let Some(thread) = self.thread.lock().take() {
            // The thread catches task panics, so join fails only if the
            // runtime itself panicked there; nothing more can be done.
            if thread.join().is_err() {
                log::error!("timer executor thread ended with a panic");
            }
        }
    }
}

fn run_task<T: TimerTask>(timer_name: &str, task: T) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| task.run())) {
        log::error!(
            "timer {timer_name}: an expired task panicked: {}",
            panic_message(&*panic)
        );
        discard_panic(panic);
    }
}

#[cfg(test)]
mod tests;
