//! Advancing the wheel: taking due buckets from the delay queue in
//! expiration order, flushing level-0 buckets, and the early and final
//! passes that cascade a coarse bucket down, in budget-sized slices.

use crate::bucket::{Side, NO_EXPIRATION};

use super::{TimingWheel, MAX_DEADLINE_MS};

/// Progress of one bounded call to `TimingWheel::advance_bounded`. Its
/// budget counts the entries looked at: moved, or kept by an early pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Advance {
    /// Entries taken out of due buckets (re-placed or expired).
    pub(crate) moved: usize,
    /// Entries an early pass looked at and left for the final pass (the
    /// level below cannot hold them yet).
    pub(crate) kept: usize,
    /// Entries expired (handed to the callback).
    pub(crate) expired: usize,
    /// Due buckets popped from the delay queue.
    pub(crate) buckets: usize,
    /// Whether nothing due at `now` is left.
    pub(crate) done: bool,
}

impl Advance {
    /// The entries looked at, which the budget bounds.
    pub(crate) fn spent(&self) -> usize {
        self.moved + self.kept
    }
}

/// A pass over a coarse bucket (level 1 or above) that ran out of budget.
#[derive(Debug, Clone, Copy)]
pub(super) struct Paused {
    pub(super) bucket: u32,
    /// The queue time the pass was started at (reported by
    /// `next_expiration`: the pass is overdue work).
    pub(super) start: u64,
    /// The pass must be finished before anything due at or after this time
    /// is taken: no entry it still has to move is due earlier, and the
    /// level's clock cannot pass the bucket before it.
    pub(super) finish_by: u64,
    /// A final pass (it empties the bucket), or an early one (it moves the
    /// bucket's front only).
    pub(super) whole: bool,
}

/// A final pass over one due bucket, resumable across `advance_bounded` calls.
#[derive(Debug, Clone, Copy)]
pub(super) struct Flush {
    pub(super) bucket: u32,
    /// The queue time the pass was popped at.
    pub(super) due: u64,
}

impl<T> TimingWheel<T> {
    /// Expires every task due at `now_ms`, handing each to `expired`, and
    /// returns how many expired. Tasks come out in deadline order (ties in no
    /// particular order) when `now_ms` moves bucket by bucket (see
    /// [`next_expiration`](Self::next_expiration)); after a longer jump,
    /// tasks that a coarse bucket's cascade finds already due come out as
    /// they are found, ahead of earlier ones waiting in finer buckets.
    ///
    /// The wheel's time ([`current_time`](Self::current_time)) never goes
    /// back: a `now_ms` before it expires nothing new. If `expired` panics,
    /// the panic reaches the caller and the tasks not yet handed out stay in
    /// the wheel; the next call hands out those already due at the wheel's
    /// time first, whatever its `now_ms`.
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
    pub(crate) fn advance_bounded(
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
    pub(crate) fn advance_due(
        &mut self,
        now_ms: u64,
        budget: usize,
        expired: impl FnMut(T),
    ) -> Advance {
        self.advance_chunk(now_ms, budget, false, expired)
    }

    /// The earliest time by which a paused pass must be finished (see
    /// [`advance_due`](Self::advance_due)), or `None` when no pass over a
    /// coarse bucket is paused: an owner that spreads passes over later
    /// ticks must come back no later than this.
    pub(crate) fn paused_finish_by(&self) -> Option<u64> {
        self.paused.iter().map(|p| p.finish_by).min()
    }

    /// How many entries to move in paused passes at `now_ms` so that, done
    /// every tick, each pass finishes well within its slack: twice each
    /// pass's bucket length spread over the ticks left before its
    /// `finish_by`.
    pub(crate) fn background_allowance(&self, now_ms: u64) -> usize {
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
            if step.spent() >= budget {
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
                self.pass(paused, now_ms, budget, &mut step, &mut expired);
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
            let b = &self.buckets[bucket as usize];
            let (expiration, min_deadline) = (b.expiration(), b.min_deadline);
            let level = bucket as usize / self.wheel_size as usize;
            if expiration == NO_EXPIRATION || b.paused {
                continue; // stale: flushed (or being passed over) since queued
            }
            debug_assert!(self.holds_one_round(bucket), "bucket {bucket} mixes rounds");
            if due == expiration {
                step.buckets += 1;
                self.advance_levels(due);
                if level == 0 {
                    self.flushing = Some(Flush { bucket, due });
                } else {
                    // The final pass: everything left fits the level below
                    // now, and nothing left is due before `min_deadline`.
                    self.buckets[bucket as usize].min_deadline = u64::MAX;
                    let paused = Paused {
                        bucket,
                        start: due,
                        finish_by: min_deadline,
                        whole: true,
                    };
                    self.pass(paused, now_ms, budget, &mut step, &mut expired);
                }
            } else if level > 0 && due == expiration.saturating_sub(self.lead(level)) {
                step.buckets += 1;
                self.advance_levels(due);
                // `min_deadline` covers the entries at the back: those this
                // pass leaves for the final one.
                let paused = Paused {
                    bucket,
                    start: due,
                    finish_by: expiration,
                    whole: false,
                };
                self.pass(paused, now_ms, budget, &mut step, &mut expired);
            }
            // Otherwise stale: re-armed for another round since.
        }
    }

    /// Moves the entries the level below can hold, resuming with what is
    /// left in the bucket; entries due by `now_ms` are expired as they are
    /// found, each chunk's with the chunk (ahead of earlier-due entries still
    /// waiting in finer buckets: deadline order gives way to getting late
    /// tasks out promptly, and nothing is ever early). When the budget runs
    /// out first (or `expired` panics), the pass pauses: the bucket stays
    /// marked paused and the pass in `paused`, to be resumed once nothing is
    /// due, or before anything due at or after its `finish_by` is taken.
    /// Cancels in between take entries out of the arrays the pass resumes
    /// from.
    ///
    /// An early pass takes the bucket's front: the entries the level below
    /// can hold from the pass on (see `link`). The bucket keeps its back and
    /// is queued again for its final pass at its expiration; `min_deadline`,
    /// kept up by `link` for the entries at the back, bounds their deadlines
    /// from below. A final pass empties the bucket.
    fn pass(
        &mut self,
        paused: Paused,
        now_ms: u64,
        budget: usize,
        step: &mut Advance,
        expired: &mut impl FnMut(T),
    ) {
        let id = paused.bucket;
        let level = id as usize / self.wheel_size as usize;
        let below = self.levels[level - 1];
        let horizon = below.current_time.saturating_add(below.interval);
        let sides: &[Side] = match paused.whole {
            true => &[Side::Front, Side::Back],
            false => &[Side::Front],
        };
        // Recorded as paused from the start, so that a pass cut short by a
        // panicking `expired` is resumed by a later advance, as one out of
        // budget is, rather than stranding the rest of its bucket.
        self.buckets[id as usize].paused = true;
        self.paused.push(paused);
        for &side in sides {
            self.buckets[id as usize].prefetch_tail(&self.entries, side);
            loop {
                if step.spent() >= budget {
                    return;
                }
                let Some(index) = self.buckets[id as usize].pop(&mut self.entries, side) else {
                    break;
                };
                let deadline = self.entries.slot(index).deadline;
                if deadline <= now_ms {
                    // Due already: the pass is running behind its entries (a
                    // big cascade, or `now` far ahead of the wheel's time).
                    // Out as found, so that the first of a burst sharing one
                    // deadline does not wait for the whole bucket to move
                    // down.
                    step.moved += 1;
                    step.expired += 1;
                    expired(self.entries.remove(index));
                } else if deadline < horizon {
                    step.moved += 1;
                    if !self.place_below(index, deadline, level) {
                        step.expired += 1;
                        expired(self.entries.remove(index));
                    }
                } else {
                    // Beyond the level below: left for the final pass. A
                    // final pass finds none (the level below spans the
                    // bucket's whole range by then); if it did, the entry
                    // would go back to the end of the array this pass pops
                    // from and be popped again for ever: fail loudly instead.
                    assert!(!paused.whole, "final pass keeps {deadline}");
                    step.kept += 1;
                    let bucket = &mut self.buckets[id as usize];
                    bucket.push(level as u32, &mut self.entries, index, Side::Back);
                    bucket.min_deadline = bucket.min_deadline.min(deadline);
                }
            }
        }
        let ours = self.paused.pop();
        debug_assert!(ours.is_some_and(|p| p.bucket == id), "a pass's own record");
        let bucket = &mut self.buckets[id as usize];
        bucket.paused = false;
        if bucket.is_empty() {
            bucket.set_expiration(NO_EXPIRATION);
            bucket.min_deadline = u64::MAX;
        } else {
            // The rest of the range waits for the final pass.
            let expiration = bucket.expiration();
            self.offer(expiration, id);
        }
    }

    /// Expires every entry of a due level-0 bucket (all at its back, see
    /// `link`); returns whether the bucket is empty.
    fn final_pass(
        &mut self,
        flush: Flush,
        budget: usize,
        step: &mut Advance,
        expired: &mut impl FnMut(T),
    ) -> bool {
        let bucket = flush.bucket as usize;
        self.buckets[bucket].prefetch_tail(&self.entries, Side::Back);
        while step.spent() < budget {
            let Some(index) = self.buckets[bucket].pop(&mut self.entries, Side::Back) else {
                break;
            };
            // A level-0 bucket holds one deadline (rounded to the tick), its
            // expiration, which the wheel's time has reached.
            debug_assert!(self.entries.slot(index).deadline <= self.current_time());
            step.moved += 1;
            step.expired += 1;
            expired(self.entries.remove(index));
        }
        let bucket = &mut self.buckets[bucket];
        if bucket.is_empty() {
            bucket.set_expiration(NO_EXPIRATION);
            return true;
        }
        false
    }
}
