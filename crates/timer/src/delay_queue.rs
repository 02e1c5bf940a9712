//! The delay queue: a thread-safe priority queue of items (the wheel's
//! buckets) ordered by expiration, with a blocking [`DelayQueue::poll`].
//!
//! It is what lets the clock jump from one due bucket straight to the next:
//! the reaper sleeps until the head item is due instead of ticking through
//! empty milliseconds. The wheel offers a bucket when it starts a round,
//! and a coarse one again for its final pass once its early pass is done,
//! so the queue holds at most one item per bucket at a time (one a
//! bucket emptied by cancels keeps until it comes due) and its size is
//! bounded by the number of buckets, not of tasks.
//!
//! Invariants:
//! - Items come out in expiration order; items with equal expirations come
//!   out in the order they were offered.
//! - A waiter is woken when an item is offered that becomes the new head
//!   (it may be due earlier than what the waiter sleeps for), on
//!   [`DelayQueue::wake`], and on [`DelayQueue::close`]; it then re-reads the
//!   head, so spurious wake-ups are harmless.
//! - An item is *due* when the clock's millisecond reading is at least its
//!   expiration: never earlier. Every method decides it so; an expiration
//!   past the last millisecond a clock can read is never due.
//! - A waiter counts itself in `sleepers`, then (after a fence) reads the
//!   clock with the state locked and sleeps releasing that lock; a clock
//!   moved by hand (see [`Clock::subscribe`]) moves, then (after a fence)
//!   looks at `sleepers`, and if any takes the lock before it notifies. By
//!   the two fences, either the move finds the waiter counted, or the
//!   waiter reads the new time; counted, it is either asleep when the
//!   notice comes or still holds the lock, and reads the new time next. No
//!   move is missed, and a move nobody waits for costs no lock.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::clock::{Clock, OnMove, NANOS_PER_MS};
use crate::panics::{discard_panic, panic_message};

/// A priority queue of items keyed by expiration (milliseconds on the
/// queue's [`Clock`]), whose consumers can block until the head is due.
///
/// ```
/// use std::time::Duration;
/// use timer::{DelayQueue, ManualClock};
///
/// let clock = ManualClock::new();
/// let queue = DelayQueue::new(clock.clone());
/// queue.offer(20, "b");
/// queue.offer(10, "a");
/// assert_eq!(queue.poll(Duration::ZERO), None); // nothing due at 0 ms
/// clock.set_ms(15);
/// assert_eq!(queue.poll(Duration::ZERO), Some((10, "a")));
/// assert_eq!(queue.peek_expiration(), Some(20));
/// ```
pub struct DelayQueue<T> {
    waits: Arc<Waits<T>>,
    clock: Arc<dyn Clock>,
    /// Called by the clock when it moves by hand; the clock holds it weakly.
    on_move: Arc<OnMove>,
    /// Subscribes `on_move` before the first wait that may sleep (never
    /// under the state lock: a move calls `on_move` under the clock's
    /// list lock, and `on_move` takes the state lock). A queue only ever
    /// polled, like a wheel's, never subscribes.
    subscribed: Once,
}

/// The queue's state and what its waiters sleep on, shared with the
/// clock's notice of a move.
struct Waits<T> {
    state: Mutex<State<T>>,
    changed: Condvar,
    /// Threads inside a wait (see the module's invariants).
    sleepers: AtomicUsize,
}

struct State<T> {
    heap: BinaryHeap<Item<T>>,
    /// Tie-breaker so equal expirations leave in offer order.
    next_seq: u64,
    /// Bumped by `wake` so that waiters notice a wake-up that is not an offer.
    wakes: u64,
    closed: bool,
}

struct Item<T> {
    expiration: u64,
    seq: u64,
    value: T,
}

// `BinaryHeap` is a max-heap: reverse the order so the earliest item is on top.
impl<T> Ord for Item<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.expiration, other.seq).cmp(&(self.expiration, self.seq))
    }
}
impl<T> PartialOrd for Item<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> PartialEq for Item<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for Item<T> {}

impl<T: Send + 'static> DelayQueue<T> {
    /// An empty queue reading time from `clock`.
    pub fn new(clock: impl Clock) -> Self {
        Self::with_shared_clock(Arc::new(clock))
    }

    /// An empty queue reading time from a shared clock.
    pub fn with_shared_clock(clock: Arc<dyn Clock>) -> Self {
        let waits = Arc::new(Waits {
            state: Mutex::new(State {
                heap: BinaryHeap::new(),
                next_seq: 0,
                wakes: 0,
                closed: false,
            }),
            changed: Condvar::new(),
            sleepers: AtomicUsize::new(0),
        });
        let weak = Arc::downgrade(&waits);
        let on_move: Arc<OnMove> = Arc::new(move || {
            let Some(waits) = weak.upgrade() else {
                return;
            };
            // After the move, before looking (see the module's invariants).
            fence(AtomicOrdering::SeqCst);
            if waits.sleepers.load(AtomicOrdering::Relaxed) == 0 {
                return;
            }
            // Taken and let go before notifying: a waiter between its
            // reading of the clock and its sleep holds it.
            drop(waits.state.lock());
            waits.changed.notify_all();
        });
        DelayQueue {
            waits,
            clock,
            on_move,
            subscribed: Once::new(),
        }
    }
}

impl<T> DelayQueue<T> {
    /// The clock the queue reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Adds an item due at `expiration` ms. Wakes waiters when it becomes the
    /// new head. Returns `false` (and drops nothing: the item is kept) only
    /// to report that the queue is closed; offers to a closed queue are
    /// still stored, so that nothing is lost.
    pub fn offer(&self, expiration: u64, value: T) -> bool {
        let mut state = self.waits.state.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        let new_head = state.heap.peek().is_none_or(|h| expiration < h.expiration);
        state.heap.push(Item {
            expiration,
            seq,
            value,
        });
        let open = !state.closed;
        drop(state);
        if new_head {
            self.waits.changed.notify_all();
        }
        open
    }

    /// Removes and returns the head if it is due at `now_ms`.
    pub fn poll_due(&self, now_ms: u64) -> Option<(u64, T)> {
        let mut state = self.waits.state.lock();
        Self::pop_due(&mut state, now_ms)
    }

    /// Waits up to `timeout` for the head to be due, then removes and returns
    /// it. Returns `None` on timeout, on [`wake`](Self::wake) and once the
    /// queue is closed.
    pub fn poll(&self, timeout: Duration) -> Option<(u64, T)> {
        self.subscribe_before_sleeping(timeout);
        let mut state = self.waits.state.lock();
        if self.wait_due(&mut state, timeout) {
            Self::pop_due(&mut state, self.clock.now_ms())
        } else {
            None
        }
    }

    /// Waits up to `timeout` until the head item is due, without removing it.
    ///
    /// Returns `true` when an item is due; `false` on timeout, when woken by
    /// [`wake`](Self::wake), or when the queue is closed. Wakes early when an
    /// earlier item is offered, and then waits for that one instead.
    pub fn wait_until_due(&self, timeout: Duration) -> bool {
        self.subscribe_before_sleeping(timeout);
        let mut state = self.waits.state.lock();
        self.wait_due(&mut state, timeout)
    }

    /// See `subscribed`; a zero timeout never sleeps. A clock whose
    /// `subscribe` panics is logged and left unsubscribed: its moves are
    /// then seen when a wait ends, as with a clock that never notifies.
    fn subscribe_before_sleeping(&self, timeout: Duration) {
        if !timeout.is_zero() {
            self.subscribed.call_once(|| {
                let subscribe = || self.clock.subscribe(Arc::downgrade(&self.on_move));
                if let Err(panic) = catch_unwind(AssertUnwindSafe(subscribe)) {
                    log::error!(
                        "delay queue: the clock's subscribe panicked: {}",
                        panic_message(&*panic)
                    );
                    discard_panic(panic);
                }
            });
        }
    }

    /// The expiration of the head item, due or not.
    pub fn peek_expiration(&self) -> Option<u64> {
        self.waits
            .state
            .lock()
            .heap
            .peek()
            .map(|item| item.expiration)
    }

    /// Number of items queued.
    pub fn len(&self) -> usize {
        self.waits.state.lock().heap.len()
    }

    /// Whether no item is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every item. They are dropped after the queue's lock is
    /// released, so an item's `Drop` may use the queue.
    pub fn clear(&self) {
        let items = std::mem::take(&mut self.waits.state.lock().heap);
        drop(items);
    }

    /// Wakes every waiter once; each returns as if its timeout had passed.
    pub fn wake(&self) {
        self.waits.state.lock().wakes += 1;
        self.waits.changed.notify_all();
    }

    /// Closes the queue: waiters return at once and later waits do not block.
    pub fn close(&self) {
        self.waits.state.lock().closed = true;
        self.waits.changed.notify_all();
    }

    /// Whether [`close`](Self::close) has been called.
    pub fn is_closed(&self) -> bool {
        self.waits.state.lock().closed
    }

    fn pop_due(state: &mut State<T>, now_ms: u64) -> Option<(u64, T)> {
        if state.heap.peek()?.expiration <= now_ms {
            let item = state.heap.pop()?;
            Some((item.expiration, item.value))
        } else {
            None
        }
    }

    /// The waiting loop shared by `poll` and `wait_until_due`; called with the
    /// state locked, returns with it locked.
    fn wait_due(
        &self,
        state: &mut parking_lot::MutexGuard<'_, State<T>>,
        timeout: Duration,
    ) -> bool {
        let give_up = Instant::now().checked_add(timeout);
        let wakes = state.wakes;
        // A zero timeout never sleeps (see below), so a clock driven by hand
        // with `advance_clock(ZERO)` pays nothing for its wake-ups.
        let _counted = (!timeout.is_zero()).then(|| Sleeper::count(&self.waits.sleepers));
        // A wait for the head is a real-time sleep for the clock's distance
        // to it. A clock that has not moved when such a sleep ends is driven
        // by hand (or coarse): the next wait for the head lasts at least
        // twice the last, up to `UNMOVED_WAIT_MAX`, instead of spinning on a
        // head a nanosecond ahead. A hand-driven clock's moves wake the
        // queue anyway (see `subscribe_before_sleeping`); a coarse one is
        // read again soon enough.
        let mut slept: Option<(u64, Duration)> = None;
        let mut floor = Duration::ZERO;
        loop {
            if state.closed || state.wakes != wakes {
                return false;
            }
            let now_nanos = self.clock.now_nanos();
            floor = match slept.take() {
                Some((from, waited)) if from == now_nanos => (waited * 2)
                    .max(Duration::from_micros(1))
                    .min(UNMOVED_WAIT_MAX),
                Some(_) => Duration::ZERO,
                None => floor,
            };
            // How long until the head is due, on the queue's clock. "Due" is
            // decided on the millisecond reading, as in `poll_due`.
            let due_in = match state.heap.peek() {
                Some(head) if head.expiration <= now_nanos / NANOS_PER_MS => return true,
                // An expiration beyond the clock's range (its `u64`
                // nanoseconds) is never due: wait for the timeout.
                Some(head) => head
                    .expiration
                    .checked_mul(NANOS_PER_MS)
                    .map(|due_at| Duration::from_nanos(due_at - now_nanos)),
                None => None,
            };
            let now = Instant::now();
            let left = match give_up {
                Some(give_up) if give_up <= now => return false,
                Some(give_up) => give_up - now,
                None => Duration::MAX,
            };
            let until_head = due_in
                .map(|due_in| due_in.max(floor))
                .filter(|&wait| wait < left);
            let wait = until_head.unwrap_or(left);
            // A wait that ends by timeout loops back to re-read the clock: the
            // head may be due now, or (with a manual clock) the caller's
            // timeout may have passed.
            match Instant::now().checked_add(wait) {
                Some(until) => {
                    let timed_out = self.waits.changed.wait_until(state, until).timed_out();
                    if timed_out && until_head.is_some() {
                        slept = Some((now_nanos, wait));
                    }
                }
                None => self.waits.changed.wait(state),
            }
        }
    }
}

/// The longest a wait for the head lasts while the clock stays unmoved (see
/// `wait_due`): a frozen manual clock costs a waiter this many wake-ups a
/// second at most, a coarse real clock this much lateness at most.
const UNMOVED_WAIT_MAX: Duration = Duration::from_millis(10);

/// A thread counted in `sleepers` until dropped; counted, then fenced,
/// before it reads the clock (see the module's invariants).
struct Sleeper<'a>(&'a AtomicUsize);

impl<'a> Sleeper<'a> {
    fn count(sleepers: &'a AtomicUsize) -> Self {
        sleepers.fetch_add(1, AtomicOrdering::Relaxed);
        fence(AtomicOrdering::SeqCst);
        Sleeper(sleepers)
    }
}

impl Drop for Sleeper<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, AtomicOrdering::Relaxed);
    }
}

impl<T> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.waits.state.lock();
        f.debug_struct("DelayQueue")
            .field("len", &state.heap.len())
            .field("head_expiration", &state.heap.peek().map(|i| i.expiration))
            .field("closed", &state.closed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, SystemClock};
    use std::thread;

    #[test]
    fn items_leave_in_expiration_then_offer_order() {
        let clock = ManualClock::starting_at_ms(100);
        let queue = DelayQueue::new(clock.clone());
        for (exp, v) in [(30, 'c'), (10, 'a'), (20, 'b'), (10, 'z')] {
            queue.offer(exp, v);
        }
        let mut out = Vec::new();
        while let Some(item) = queue.poll_due(100) {
            out.push(item);
        }
        assert_eq!(out, vec![(10, 'a'), (10, 'z'), (20, 'b'), (30, 'c')]);
    }

    #[test]
    fn nothing_is_due_before_its_expiration() {
        let clock = ManualClock::starting_at_ms(9);
        let queue = DelayQueue::new(clock.clone());
        queue.offer(10, ());
        assert!(!queue.wait_until_due(Duration::ZERO));
        assert_eq!(queue.poll(Duration::ZERO), None);
        clock.advance(Duration::from_micros(999));
        assert_eq!(queue.poll(Duration::ZERO), None, "9.999 ms is not 10 ms");
        clock.advance(Duration::from_micros(1));
        assert_eq!(queue.poll(Duration::ZERO), Some((10, ())));
        assert!(queue.is_empty());
    }

    #[test]
    fn at_the_end_of_time_wait_and_poll_agree() {
        let clock = ManualClock::new();
        clock.advance(Duration::MAX);
        let last_ms = u64::MAX / NANOS_PER_MS;
        assert_eq!(clock.now_ms(), last_ms);
        let queue = DelayQueue::new(clock.clone());
        queue.offer(last_ms + 1, "never");
        assert!(!queue.wait_until_due(Duration::ZERO));
        assert_eq!(queue.poll(Duration::ZERO), None);
        queue.offer(last_ms, "last");
        assert!(queue.wait_until_due(Duration::ZERO));
        assert_eq!(queue.poll(Duration::ZERO), Some((last_ms, "last")));
        assert!(!queue.wait_until_due(Duration::ZERO));
    }

    #[test]
    fn empty_queue_poll_times_out() {
        let queue: DelayQueue<()> = DelayQueue::new(ManualClock::new());
        assert_eq!(queue.poll(Duration::from_millis(1)), None);
    }

    // Real-time tests: they prove the blocking path, so they wait (briefly).
    #[test]
    fn poll_wakes_early_when_an_earlier_item_arrives() {
        let queue = Arc::new(DelayQueue::new(SystemClock::new()));
        queue.offer(60_000, "late");
        let poller = {
            let queue = queue.clone();
            thread::spawn(move || {
                let started = Instant::now();
                let got = queue.poll(Duration::from_secs(30));
                (got, started.elapsed())
            })
        };
        thread::sleep(Duration::from_millis(20));
        let now = queue.clock().now_ms();
        queue.offer(now + 5, "early");
        let (got, waited) = poller.join().unwrap();
        assert_eq!(got.map(|(_, v)| v), Some("early"));
        assert!(waited < Duration::from_secs(10), "woke for the early item");
    }

    #[test]
    fn a_waiter_looks_again_when_a_manual_clock_moves() {
        let clock = ManualClock::new();
        let queue: Arc<DelayQueue<()>> = Arc::new(DelayQueue::new(clock.clone()));
        queue.offer(3_600_000, ());
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = queue.clone();
        // Its real-time wait is longer than the test waits for its answer:
        // only the clock's move can end it in time.
        thread::spawn(move || tx.send(waiter.wait_until_due(Duration::from_secs(60))));
        thread::sleep(Duration::from_millis(20)); // the waiter now sleeps
        clock.set_ms(3_600_000);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
    }

    #[test]
    fn close_and_wake_release_waiters() {
        let queue: Arc<DelayQueue<()>> = Arc::new(DelayQueue::new(SystemClock::new()));
        let waiter = |queue: Arc<DelayQueue<()>>| {
            thread::spawn(move || queue.wait_until_due(Duration::from_secs(60)))
        };
        let woken = waiter(queue.clone());
        // A wake that lands before the waiter starts waiting is not seen by
        // it, so wake until it returns.
        while !woken.is_finished() {
            queue.wake();
            thread::sleep(Duration::from_millis(1));
        }
        assert!(!woken.join().unwrap());
        let closed = waiter(queue.clone());
        queue.close();
        assert!(
            !closed.join().unwrap(),
            "close is sticky: seen even if it came first"
        );
        assert!(queue.is_closed());
        assert!(
            !queue.wait_until_due(Duration::MAX),
            "a closed queue never blocks"
        );
    }
}
