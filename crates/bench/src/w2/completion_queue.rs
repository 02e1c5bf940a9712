//! The completion queue: requests handed over by the generator, taken in
//! due order by the completion thread.

use super::calendar::Calendar;
use super::op::{Ctx, Padded, W2Op};
use parking_lot::{Condvar, Mutex};
use purgatory::Operation;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One request in the completion queue.
pub(crate) struct Due {
    pub(crate) due_ms: u64,
    pub(crate) op: Operation<W2Op>,
}

struct QueueState {
    /// Requests handed over since the completion thread last took them, in
    /// no particular order.
    inbox: Vec<Due>,
    /// The completion thread waits for a wake-up.
    parked: bool,
    closed: bool,
}

/// The completion thread's side of the queue: the requests it has taken
/// from the inbox, by due time, and a spare vector to swap with the inbox.
struct Taken {
    calendar: Calendar<Due>,
    spare: Vec<Due>,
}

/// Kafka's `CompletionQueue`: a delay queue of requests, ordered by due
/// time, drained by one completion thread.
///
/// The generator appends to an unordered inbox (the shared lock is held for
/// a vector swap or append); the completion thread takes the whole inbox
/// (a swap) and files it by due millisecond in its own [`Calendar`],
/// outside the shared lock. So the generator never waits for the
/// completion thread's ordering work, and the achieved rate is the
/// purgatory's, not the harness's.
///
/// Timed sleeps cost several times the CPU of an untimed wait woken by
/// another thread (`purgatory-bench wakeups`), so the run has a single
/// timed sleeper, the *clock thread* (the generator, then the main thread
/// once every request is issued), which wakes at most once per millisecond
/// anyway. The completion thread parks without a timeout; the clock thread
/// calls [`CompletionQueue::wake_if_due`] each time its millisecond changes
/// and includes the queue's head in the time it sleeps until. So requests
/// are completed in their due millisecond, as with a timed wait, for a
/// fraction of the cost.
pub struct CompletionQueue {
    state: Mutex<QueueState>,
    cv: Condvar,
    /// Locked by the completion thread only (and `Debug`).
    taken: Mutex<Taken>,
    /// Earliest due time in the inbox ([`u64::MAX`] when empty), updated
    /// under the state lock.
    inbox_head_ms: Padded<AtomicU64>,
    /// Earliest due time in the completion thread's calendar ([`u64::MAX`]
    /// when empty), written by that thread; never later than the truth.
    taken_head_ms: Padded<AtomicU64>,
    /// `QueueState::parked`, mirrored under the lock.
    parked: Padded<AtomicBool>,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        let taken = self.taken.try_lock().map(|t| t.calendar.len());
        f.debug_struct("CompletionQueue")
            .field("inbox", &s.inbox.len())
            .field("taken", &taken)
            .field("parked", &s.parked)
            .field("closed", &s.closed)
            .finish()
    }
}

impl CompletionQueue {
    /// An empty, open queue for requests due at most about `span_ms` after
    /// the completion thread's clock (any span is correct; the right one
    /// keeps them in the calendar's ring, see [`Calendar::new`]).
    pub fn new(span_ms: u64) -> Self {
        CompletionQueue {
            state: Mutex::new(QueueState {
                inbox: Vec::new(),
                parked: false,
                closed: false,
            }),
            cv: Condvar::new(),
            taken: Mutex::new(Taken {
                calendar: Calendar::new(span_ms),
                spare: Vec::new(),
            }),
            inbox_head_ms: Padded(AtomicU64::new(u64::MAX)),
            taken_head_ms: Padded(AtomicU64::new(u64::MAX)),
            parked: Padded(AtomicBool::new(false)),
        }
    }

    /// Moves every request of `batch` into the queue (one short lock hold:
    /// a swap when the inbox is empty, else an append).
    pub(crate) fn push_all(&self, batch: &mut Vec<Due>) {
        let Some(min) = batch.iter().map(|d| d.due_ms).min() else {
            return;
        };
        let mut s = self.state.lock();
        if s.inbox.is_empty() {
            std::mem::swap(&mut s.inbox, batch);
        } else {
            s.inbox.append(batch);
        }
        self.inbox_head_ms.0.fetch_min(min, Ordering::AcqRel);
    }

    /// Due time of the earliest queued request ([`u64::MAX`] when empty);
    /// never later than the truth.
    pub fn head_ms(&self) -> u64 {
        let inbox = self.inbox_head_ms.0.load(Ordering::Acquire);
        inbox.min(self.taken_head_ms.0.load(Ordering::Acquire))
    }

    /// Wakes the completion thread if it is parked and the head is due by
    /// `now_ms`. Returns whether it woke it.
    pub fn wake_if_due(&self, now_ms: u64) -> bool {
        if self.head_ms() > now_ms || !self.parked.0.load(Ordering::Acquire) {
            return false;
        }
        let mut s = self.state.lock();
        if !s.parked {
            return false;
        }
        s.parked = false;
        self.parked.0.store(false, Ordering::Release);
        drop(s);
        self.cv.notify_one();
        true
    }

    /// No more pushes: the completion thread returns once the queue is empty.
    pub fn close(&self) {
        let mut s = self.state.lock();
        s.closed = true;
        s.parked = false;
        self.parked.0.store(false, Ordering::Release);
        drop(s);
        self.cv.notify_one();
    }

    /// Moves every request due by `ctx`'s clock into `out` (in due order)
    /// and returns the clock reading; parks (untimed) while none is due.
    /// Returns `None` once the queue is closed and empty. Counts the parks
    /// in `parks`. Called by the completion thread only.
    pub(crate) fn pop_due(&self, ctx: &Ctx, out: &mut Vec<Due>, parks: &mut u64) -> Option<u64> {
        let mut taken = self.taken.lock();
        let Taken { calendar, spare } = &mut *taken;
        loop {
            {
                let mut s = self.state.lock();
                if s.inbox.is_empty() {
                    let now = ctx.read_clock_ms();
                    if calendar.head_ms().is_none_or(|head| head > now) {
                        if calendar.is_empty() && s.closed {
                            return None;
                        }
                        // Nothing due: wait for the clock thread (or a close).
                        *parks += 1;
                        s.parked = true;
                        self.parked.0.store(true, Ordering::Release);
                        self.cv.wait(&mut s);
                        s.parked = false;
                        self.parked.0.store(false, Ordering::Release);
                        continue;
                    }
                } else {
                    // Take the inbox. Its head moves to the calendar's before
                    // the lock is released, so `head_ms` never overshoots.
                    // (Pushers, which hold the lock to write it, are shut
                    // out, so a load then a store is enough.)
                    let inbox_head = self.inbox_head_ms.0.load(Ordering::Acquire);
                    self.taken_head_ms.0.fetch_min(inbox_head, Ordering::AcqRel);
                    self.inbox_head_ms.0.store(u64::MAX, Ordering::Release);
                    std::mem::swap(&mut s.inbox, spare);
                }
            }
            for due in spare.drain(..) {
                calendar.push(due.due_ms, due);
            }
            let now = ctx.read_clock_ms();
            calendar.pop_due(now, out);
            self.taken_head_ms
                .0
                .store(calendar.head_ms().unwrap_or(u64::MAX), Ordering::Release);
            if !out.is_empty() {
                return Some(now);
            }
        }
    }
}
