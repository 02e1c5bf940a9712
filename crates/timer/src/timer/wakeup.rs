//! Driving the clock: the timer's queue of per-shard wake-ups, and visiting
//! a due shard in chunks until its due work is done, handing each chunk's
//! expired tasks to the executor as it goes.
//!
//! A visit to a shard has two phases (see [`Phase`]): the work that cannot
//! wait (due buckets, passes out of slack), then a share of the passes over
//! coarse buckets that still have slack (see the wheel's `lead`), one share
//! per millisecond of the clock (`ShardState::share`). After a chunk of
//! work it yields to another shard that is due, and comes back once that
//! shard has had a chunk; it ends by re-arming the shard's wake-up
//! ([`next_wakeup`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::shard::ShardState;
use super::{Timer, TimerTask};
use crate::delay_queue::DelayQueue;
use crate::wheel::{Advance, TimingWheel};

/// Most entries looked at (moved, or kept for a final pass) per hold of a
/// shard's lock in `advance_clock`: short enough that an adder waiting for
/// the shard barely notices, long enough that a burst does not pay a clock
/// read, a look at the queue, the lock and a hand-over every few entries.
pub(crate) const FLUSH_CHUNK: usize = 1024;

/// What a visit to one shard is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Due buckets, and passes that are out of slack.
    Due,
    /// Passes with slack left: at most `left` more entries in this visit.
    Background { left: usize },
}

impl Phase {
    /// One chunk of the phase's work: at most [`FLUSH_CHUNK`] entries moved,
    /// nothing due after `until`.
    fn step<T>(self, wheel: &mut TimingWheel<T>, until: u64, expired: &mut Vec<T>) -> Advance {
        let push = |task| {
            // Room for a whole chunk at the first task: a burst's chunks
            // are full, and growing one doubling at a time copies it over
            // and over.
            if expired.capacity() == 0 {
                expired.reserve_exact(FLUSH_CHUNK);
            }
            expired.push(task)
        };
        match self {
            Phase::Due => wheel.advance_due(until, FLUSH_CHUNK, push),
            Phase::Background { left } => wheel.advance_bounded(until, left.min(FLUSH_CHUNK), push),
        }
    }

    /// The phase after a chunk that did `step`, or `None` when the visit is
    /// over. `share` is the shard's share of the passes left for a
    /// millisecond (see `ShardState::share`).
    fn after<T>(
        self,
        step: Advance,
        wheel: &TimingWheel<T>,
        now: u64,
        share: &mut Option<(u64, usize)>,
    ) -> Option<Phase> {
        match self {
            // Due work done, passes with slack left: on to their share,
            // one per millisecond however often the visit yields and comes
            // back within it. At least a chunk, so that a pass with much
            // slack does not wake the thread for nothing.
            Phase::Due if step.done && wheel.paused_finish_by().is_some() => {
                let left = match *share {
                    Some((ms, left)) if ms == now => left,
                    _ => wheel.background_allowance(now).max(FLUSH_CHUNK),
                };
                (left > 0).then_some(Phase::Background { left })
            }
            Phase::Due => (!step.done).then_some(Phase::Due),
            Phase::Background { left } => {
                let left = left.saturating_sub(step.spent());
                *share = Some((now, left));
                (!step.done && left > 0).then_some(Phase::Background { left })
            }
        }
    }
}

/// When a shard must be visited next, or `None` when it has nothing queued.
///
/// Buckets offered by the visit, or by adds between its chunks, are all
/// covered by the wheel's next due expiration. Paused passes resume a tick
/// later, unless something is due sooner (or a pass's `finish_by` comes
/// first; with the background share it cannot, but the wake-up must not
/// rely on that). A shard that `yielded` to another stopped with work to
/// do now (due, or its share of the passes): it queues at `now`, behind the
/// shards that are due, so it comes back as soon as they have had a chunk,
/// not a tick later (a pass's share would then be lost for every tick in
/// which another shard is due).
fn next_wakeup<T>(wheel: &TimingWheel<T>, now: u64, tick_ms: u64, yielded: bool) -> Option<u64> {
    if yielded {
        return Some(now);
    }
    let next = wheel.next_due_expiration();
    match wheel.paused_finish_by() {
        Some(finish_by) => {
            let later = now.saturating_add(tick_ms).min(finish_by);
            Some(next.map_or(later, |n| n.min(later)))
        }
        None => next,
    }
}

/// A shard's wake-up, taken off the timer's queue for a visit that has not
/// re-armed it yet. Dropped only when the visit unwinds (the clock is a
/// user's type, and may panic): it puts the wake-up back, so that the
/// shard's tasks still fire at a later advance. A visit that ends normally
/// forgets it.
struct TakenWakeUp<'a> {
    queue: &'a DelayQueue<usize>,
    due: u64,
    index: usize,
}

#[cfg(test)]
thread_local! {
    /// Runs on the advancing thread after a chunk's lock is released and
    /// before its tasks are handed over: lets the crate's tests interleave
    /// there.
    pub(super) static BEFORE_HAND_OVER: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
        const { std::cell::RefCell::new(None) };
}

impl Drop for TakenWakeUp<'_> {
    fn drop(&mut self) {
        self.queue.offer(self.due, self.index);
    }
}

impl<T: TimerTask> Timer<T> {
    /// Drives the clock: waits up to `timeout` (real time, whatever the
    /// clock: the argument is a wait, not a move) for the earliest bucket to
    /// come due (waking early if an earlier one is added or the timer shuts
    /// down), then expires everything due by the clock, handing expired tasks
    /// to the executor. Returns whether any bucket was due. On a
    /// [`ManualClock`](crate::ManualClock), move the clock, then call this
    /// with `Duration::ZERO`. Another thread driving the same timer (a
    /// reaper) may have taken a due shard first: this call then leaves it
    /// to that thread and does not wait for it.
    ///
    /// While more than 65,536 expired tasks wait for the executor, the call
    /// waits for it to catch up to 32,768 before it expires more (holding no
    /// lock: adds and cancels go on). It waits no longer than 20 ms at a
    /// time, not at all while the executor has run nothing for a
    /// millisecond (a task that blocks), so a task never holds the clock,
    /// and a stopping reaper is let go at once.
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        self.advance(timeout, None)
    }

    /// The reaper's [`advance_clock`](Self::advance_clock): it also stops
    /// expiring once `timeout` has passed since the call began, or once the
    /// reaper is being stopped ([`wake`](Self::wake)), after the chunk it
    /// is handing over (at least one per call, so the clock always moves
    /// on). The shard it was visiting is re-armed to be visited again at
    /// once, so the next call goes on where this one stopped. The reaper's
    /// loop thus comes round about once per poll interval even while the
    /// executor holds it back, and a stopped reaper leaves the due tasks it
    /// has not handed over in the wheel, for `shutdown` to hand back.
    pub(crate) fn advance_clock_bounded(&self, timeout: Duration) -> bool {
        let bound = Bound {
            ends: Instant::now().checked_add(timeout),
            stops: self.stops.load(Ordering::SeqCst),
        };
        self.advance(timeout, Some(&bound))
    }

    fn advance(&self, timeout: Duration, bound: Option<&Bound>) -> bool {
        if self.is_shut_down() || !self.queue.wait_until_due(timeout) {
            return false;
        }
        let mut any = false;
        while let Some((due, index)) = self.queue.poll_due(self.clock.now_ms()) {
            let wake_up = TakenWakeUp {
                queue: &self.queue,
                due,
                index,
            };
            any |= self.advance_shard(index, due, bound);
            // The visit re-armed the shard's wake-up, or found it stale.
            std::mem::forget(wake_up);
            if bound.is_some_and(|b| b.reached(self)) {
                break;
            }
        }
        any
    }

    /// Visits shard `index` for its wake-up due at `due`: expires what is
    /// due in chunks of at most [`FLUSH_CHUNK`] moved entries per hold of its
    /// lock, handing each chunk's tasks to the executor, then re-arms the
    /// shard's wake-up. Returns whether any bucket was due.
    ///
    /// A wake-up the shard is no longer armed for is stale and ends the
    /// visit at once, re-arming nothing: an add that made the shard due
    /// sooner queued another without taking this one out (the queue cannot),
    /// and re-arming from every stale wake-up would keep each of them alive
    /// for ever, one more visit per tick for every such add. (A re-arm for
    /// a time whose wake-up is still queued queues no other: see
    /// `ShardState::queued`.)
    ///
    /// Each chunk reads the clock afresh, so buckets that come due during a
    /// long flush are seen, and goes no further than the next other shard's
    /// wake-up, so shards are expired in due order (and the executor gets
    /// tasks in deadline order). Passes with slack are not worked through in
    /// one go: a long burst of cascading would keep this thread busy for
    /// milliseconds, and on a machine whose scheduler packs threads onto one
    /// CPU the executor would wait behind it.
    ///
    /// Once `bound` is reached, the visit yields after its chunk as if to
    /// another shard, and the call ends (see
    /// [`advance_clock_bounded`](Self::advance_clock_bounded)).
    fn advance_shard(&self, index: usize, due: u64, bound: Option<&Bound>) -> bool {
        let shard = &self.shards[index];
        let mut any = false;
        let mut phase = Some(Phase::Due);
        // Whether this visit has done a chunk of work: it yields to another
        // shard only then, so two shards that keep yielding to each other
        // still make progress.
        let mut worked = false;
        while let Some(current) = phase {
            let now = self.clock.now_ms();
            let bounded = bound.is_some_and(|b| b.reached(self));
            let until = self
                .queue
                .peek_expiration()
                .map_or(now, |next| next.min(now));
            let mut expired = Vec::new();
            let mut handing_over = None;
            let emptied;
            {
                let mut state = shard.lock_for_advance();
                if self.shut_down.load(Ordering::Acquire) {
                    return any;
                }
                // Stale (see above). Between chunks an add may re-arm the
                // shard sooner too: the wake-up it queued, due already, then
                // takes over the visit.
                if state.armed != due {
                    state.unqueue(due);
                    return any;
                }
                let step = current.step(&mut state.wheel, until, &mut expired);
                emptied = state.wheel.take_emptied();
                if !expired.is_empty() {
                    // Counted under the lock: a shutdown that drains this
                    // shard afterwards waits for the hand-over below, and
                    // the guard lowers the count even if this visit unwinds.
                    handing_over = Some(HandingOver::new(&self.handing_over));
                }
                any |= step.buckets > 0 || step.spent() > 0;
                let ShardState { wheel, share, .. } = &mut *state;
                phase = current.after(step, wheel, now, share);
                shard.size.store(state.wheel.len(), Ordering::Relaxed);
                // Shards with work take turns chunk by chunk.
                worked |= step.spent() > 0;
                let yielded =
                    phase.is_some() && worked && (bounded || self.another_shard_is_due(now));
                if phase.is_none() || yielded {
                    // Left the queue for good only now: a visit that
                    // unwinds before puts it back (`TakenWakeUp`).
                    state.unqueue(due);
                    self.rearm(index, &mut state, now, yielded);
                    phase = None;
                }
            }
            #[cfg(test)]
            BEFORE_HAND_OVER.with_borrow_mut(|hook| hook.as_mut().map(|hook| hook()));
            // Counted iff the chunk expired something.
            if let Some(counted) = handing_over {
                self.hand_over(expired);
                drop(counted);
                // No lock is held here: adders and cancels go on while the
                // executor catches up (see the executor's backlog).
                self.executor.wait_for_room();
            }
            // After the chunk's tasks, not before them (see `entries`).
            self.free_emptied(emptied);
        }
        any
    }

    /// Whether the timer's queue holds a wake-up due by `now`: another
    /// shard's, or a stale one of the shard being visited (yielding to it
    /// costs a visit that ends at once, see `advance_shard`).
    fn another_shard_is_due(&self, now: u64) -> bool {
        self.queue
            .peek_expiration()
            .is_some_and(|theirs| theirs <= now)
    }

    /// Queues shard `index`'s next wake-up (see [`next_wakeup`]).
    fn rearm(&self, index: usize, state: &mut ShardState<T>, now: u64, yielded: bool) {
        state.wheel.take_earliest_offered();
        let due = next_wakeup(&state.wheel, now, self.tick_ms, yielded).unwrap_or(u64::MAX);
        if state.arm(due) {
            self.queue.offer(due, index);
        }
    }

    /// Gives expired tasks to the executor.
    fn hand_over(&self, expired: Vec<T>) {
        if let Err(tasks) = self.executor.submit_batch(expired) {
            // Not expected: shutdown closes the executor only after every
            // chunk taken out of a shard has been handed over (see
            // `handing_over`). Such tasks could only be dropped unrun.
            log::warn!(
                "timer {}: {} expired tasks dropped by shutdown",
                self.name,
                tasks.len()
            );
        }
    }
}

/// Where a call of [`Timer::advance_clock_bounded`] stops expiring.
struct Bound {
    /// When its time is up (`None`: never).
    ends: Option<Instant>,
    /// The timer's `stops` when the call began.
    stops: usize,
}

impl Bound {
    fn reached<T: TimerTask>(&self, timer: &Timer<T>) -> bool {
        timer.stops.load(Ordering::SeqCst) != self.stops
            || self.ends.is_some_and(|ends| Instant::now() >= ends)
    }
}

/// One chunk taken out of a shard and not yet handed to the executor:
/// [`Timer::shutdown`] waits until none is left, so it never closes the
/// executor in front of tasks it did not drain.
struct HandingOver<'a>(&'a AtomicUsize);

impl<'a> HandingOver<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        HandingOver(count)
    }
}

impl Drop for HandingOver<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}
