//! When the heartbeat purgatory may next expire an expectation, so that a
//! virtual-time engine can jump over the milliseconds in which nothing can
//! happen instead of stepping through each.
//!
//! The purgatory does not say when its next expiration is, but the engine
//! knows every deadline it has caused: each join and each heartbeat it sends
//! at time `t` schedules an expectation due at `t` plus the session timeout.
//! It notes those times here, merged into runs of milliseconds; a noted time
//! whose expectation is gone (the member heartbeated again, or left) costs
//! only a wake-up that finds nothing due.

use std::collections::VecDeque;

/// Milliseconds noted past each deadline: the timer expires an expectation
/// at the first `advance_clock` at or after its deadline, and the detection
/// delay's documented bound allows one tick more; a spare wake-up costs one
/// millisecond's step.
const EXPIRY_SLACK_MS: u64 = 1;

/// How many runs the noted times are kept in at most (about): with a long
/// session timeout and sparse heartbeats, runs closer together than the
/// timeout divided by this are merged, which adds wake-ups, not memory.
const MAX_RUNS: u64 = 1 << 20;

/// The milliseconds at which an expectation may expire (see the module docs).
#[derive(Debug)]
pub(super) struct Expiries {
    /// Disjoint runs `(first, last)` of noted milliseconds, in time order.
    runs: VecDeque<(u64, u64)>,
    /// A note this close after the last run extends it.
    merge_gap: u64,
}

impl Expiries {
    pub(super) fn new(session_timeout_ms: u64) -> Self {
        Expiries {
            runs: VecDeque::new(),
            merge_gap: (session_timeout_ms / MAX_RUNS).max(1),
        }
    }

    /// Notes an expectation due at `deadline`; deadlines come in time order
    /// (each is the engine's time plus the same session timeout).
    pub(super) fn note(&mut self, deadline: u64) {
        let last = deadline.saturating_add(EXPIRY_SLACK_MS);
        match self.runs.back_mut() {
            Some(run) if deadline <= run.1.saturating_add(self.merge_gap) => {
                debug_assert!(deadline >= run.0, "deadlines noted out of order");
                run.1 = run.1.max(last);
            }
            _ => self.runs.push_back((deadline, last)),
        }
    }

    /// The first noted millisecond after `t` (forgetting those up to `t`).
    pub(super) fn next_after(&mut self, t: u64) -> Option<u64> {
        while let Some(&(first, last)) = self.runs.front() {
            if last > t {
                return Some(first.max(t + 1));
            }
            self.runs.pop_front();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noted_deadlines_come_back_in_order_with_their_slack() {
        let mut e = Expiries::new(100);
        for d in [10, 10, 11, 20, 50] {
            e.note(d);
        }
        // Runs 10..=12, 20..=21, 50..=51.
        let mut wakes = Vec::new();
        let mut t = 0;
        while let Some(next) = e.next_after(t) {
            wakes.push(next);
            t = next;
        }
        assert_eq!(wakes, [10, 11, 12, 20, 21, 50, 51]);
        assert_eq!(e.next_after(0), None);
    }

    #[test]
    fn long_timeouts_merge_close_runs() {
        let mut e = Expiries::new(MAX_RUNS * 10);
        e.note(100);
        e.note(105);
        e.note(120);
        assert_eq!(e.runs, [(100, 106), (120, 121)]);
    }
}
