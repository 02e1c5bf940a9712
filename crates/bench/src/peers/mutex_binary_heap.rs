//! W3 peer: a `Mutex<BinaryHeap>` of deadlines with a condvar reaper thread.
//!
//! Producers lock the heap, push `(deadline, task)` and, when their deadline
//! precedes the instant the reaper plans to wake at, notify the condvar.
//! The reaper thread sleeps (`Condvar::wait_timeout`) until the earliest
//! deadline, pops what is due (at most [`MAX_BATCH`] per lock hold, so that
//! producers are not held off for long), and runs the tasks on its own
//! thread, outside the lock. There is no cancellation (W3 has none).
//!
//! Time is nanoseconds since an origin `Instant` chosen by the caller;
//! deadlines are exact (no rounding to a tick), so a task never fires early.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use timer::TimerTask;

/// Most tasks the reaper pops per lock hold.
pub const MAX_BATCH: usize = 1024;

/// A task and its deadline; ordered so that `BinaryHeap` is a min-heap on
/// the deadline.
struct Entry<T> {
    due_ns: u64,
    task: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.due_ns == other.due_ns
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.due_ns.cmp(&self.due_ns)
    }
}

/// What the lock protects.
struct State<T> {
    heap: BinaryHeap<Entry<T>>,
    /// When the reaper will wake by itself (ns): `u64::MAX` while it waits
    /// with nothing queued, `0` while it is awake (no notification needed).
    wake_at_ns: u64,
    shutdown: bool,
}

struct Shared<T> {
    origin: Instant,
    state: Mutex<State<T>>,
    wake: Condvar,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Tasks run outside the lock, so poisoning cannot leave the heap
        // half-updated: carry on with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A thread-safe timer: `Mutex<BinaryHeap>` plus a reaper thread.
pub struct MutexHeapTimer<T: TimerTask> {
    shared: Arc<Shared<T>>,
    reaper: Option<JoinHandle<()>>,
}

impl<T: TimerTask> std::fmt::Debug for MutexHeapTimer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexHeapTimer")
            .field("len", &self.len())
            .finish()
    }
}

impl<T: TimerTask> MutexHeapTimer<T> {
    /// Starts a timer (and its reaper thread) whose clock counts from `origin`.
    pub fn start(origin: Instant) -> Self {
        Self::with_capacity(origin, 0)
    }

    /// Like [`MutexHeapTimer::start`], with room for `capacity` tasks.
    pub fn with_capacity(origin: Instant, capacity: usize) -> Self {
        let shared = Arc::new(Shared {
            origin,
            state: Mutex::new(State {
                heap: BinaryHeap::with_capacity(capacity),
                wake_at_ns: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let reaper = thread::Builder::new()
            .name("mutex-heap-reaper".into())
            .spawn(move || reap(&s))
            .expect("spawn the reaper thread");
        MutexHeapTimer {
            shared,
            reaper: Some(reaper),
        }
    }

    /// Schedules `task` to run `delay` from now.
    pub fn add(&self, delay: Duration, task: T) {
        let delay_ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        let due_ns = self.shared.now_ns().saturating_add(delay_ns);
        self.add_at(due_ns, task);
    }

    /// Schedules `task` to run when the clock reaches `due_ns` (nanoseconds
    /// since the origin).
    pub fn add_at(&self, due_ns: u64, task: T) {
        let mut state = self.shared.lock();
        state.heap.push(Entry { due_ns, task });
        let notify = due_ns < state.wake_at_ns;
        drop(state);
        if notify {
            self.shared.wake.notify_one();
        }
    }

    /// Tasks waiting.
    pub fn len(&self) -> usize {
        self.shared.lock().heap.len()
    }

    /// Whether no task waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the reaper and returns the tasks that had not run.
    pub fn shutdown(mut self) -> Vec<T> {
        self.stop();
        let mut state = self.shared.lock();
        std::mem::take(&mut state.heap)
            .into_iter()
            .map(|e| e.task)
            .collect()
    }

    fn stop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(reaper) = self.reaper.take() {
            let _ = reaper.join();
        }
    }
}

impl<T: TimerTask> Drop for MutexHeapTimer<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The reaper loop: run what is due, then sleep until the next deadline.
fn reap<T: TimerTask>(shared: &Shared<T>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut state = shared.lock();
    loop {
        if state.shutdown {
            return;
        }
        let now = shared.now_ns();
        while batch.len() < MAX_BATCH {
            match state.heap.peek() {
                Some(top) if top.due_ns <= now => {
                    if let Some(e) = state.heap.pop() {
                        batch.push(e.task);
                    }
                }
                _ => break,
            }
        }
        if !batch.is_empty() {
            state.wake_at_ns = 0;
            drop(state);
            for task in batch.drain(..) {
                task.run();
            }
            state = shared.lock();
            continue;
        }
        state = match state.heap.peek().map(|top| top.due_ns) {
            None => {
                state.wake_at_ns = u64::MAX;
                shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner)
            }
            Some(due) => {
                state.wake_at_ns = due;
                let timeout = Duration::from_nanos(due - now);
                shared
                    .wake
                    .wait_timeout(state, timeout)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
        };
        state.wake_at_ns = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn runs_tasks_in_deadline_order_and_never_early() {
        let origin = Instant::now();
        let timer = MutexHeapTimer::start(origin);
        let (tx, rx) = mpsc::channel();
        for (i, ms) in [(0u32, 30u64), (1, 10), (2, 20), (3, 0)] {
            let tx = tx.clone();
            let due = origin + Duration::from_millis(ms);
            timer.add_at(
                ms * 1_000_000,
                Box::new(move || tx.send((i, Instant::now() >= due)).unwrap())
                    as Box<dyn FnOnce() + Send>,
            );
        }
        let got: Vec<(u32, bool)> = (0..4).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got, vec![(3, true), (1, true), (2, true), (0, true)]);
        assert!(timer.is_empty());
    }

    #[test]
    fn shutdown_hands_back_pending_tasks() {
        fn noop() {}
        let timer = MutexHeapTimer::start(Instant::now());
        timer.add(Duration::from_secs(3600), noop as fn());
        timer.add(Duration::from_secs(7200), noop as fn());
        assert_eq!(timer.len(), 2);
        assert_eq!(timer.shutdown().len(), 2);
    }
}
