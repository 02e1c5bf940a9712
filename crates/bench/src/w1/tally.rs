//! The per-task bookkeeping every W1 implementation shares.

use super::params::W1Params;
use super::result::W1Result;
use crate::rng;
use std::time::Duration;

/// A deadline slot of a task that was cancelled.
const CANCELLED: u64 = u64::MAX;
/// A deadline slot of a task that fired.
const FIRED: u64 = u64::MAX - 1;

/// Per-task bookkeeping shared by every implementation: the deadlines, and
/// the fire checks. A task's deadline slot becomes [`CANCELLED`] or
/// [`FIRED`], so a second event on it is caught with a single memory access.
#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) deadlines: Vec<u64>,
    pub(crate) fired: usize,
    pub(crate) early: usize,
    pub(crate) bad: usize,
    pub(crate) late_max_ms: u64,
}

impl Tally {
    pub(crate) fn new(params: &W1Params) -> Self {
        Tally {
            deadlines: rng::delays_ms(params.seed, params.n, params.max_delay_ms),
            fired: 0,
            early: 0,
            bad: 0,
            late_max_ms: 0,
        }
    }

    /// Task `id` fired at virtual time `now`.
    #[inline]
    pub(crate) fn fire(&mut self, id: u64, now: u64) {
        let Some(slot) = self.deadlines.get_mut(id as usize) else {
            self.bad += 1;
            return;
        };
        let deadline = *slot;
        if deadline >= FIRED {
            self.bad += 1; // fired after a cancel, or twice
            return;
        }
        if deadline > now {
            self.early += 1;
        } else {
            self.late_max_ms = self.late_max_ms.max(now - deadline);
        }
        *slot = FIRED;
        self.fired += 1;
    }

    /// Marks the even indices cancelled (outside the timed phase).
    pub(crate) fn mark_cancelled(&mut self) {
        for d in self.deadlines.iter_mut().step_by(2) {
            *d = CANCELLED;
        }
    }

    pub(crate) fn into_result(
        self,
        impl_name: &'static str,
        params: &W1Params,
        phases: [Duration; 3],
        bytes_per_task: Option<f64>,
        pending: usize,
        end_ms: u64,
    ) -> W1Result {
        W1Result {
            impl_name,
            params: params.clone(),
            add: phases[0],
            cancel: phases[1],
            expire: phases[2],
            cancels: params.n.div_ceil(2),
            bytes_per_task,
            fired: self.fired,
            early: self.early,
            bad: self.bad,
            pending,
            late_max_ms: self.late_max_ms,
            end_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_catches_early_double_and_cancelled_fires() {
        let p = W1Params {
            n: 4,
            seed: 1,
            max_delay_ms: 10,
        };
        let mut t = Tally::new(&p);
        t.deadlines = vec![5, 6, 7, 8];
        t.mark_cancelled();
        t.fire(1, 5); // early
        t.fire(1, 6); // double
        t.fire(0, 9); // cancelled
        t.fire(3, 10); // late by 2
        t.fire(9, 10); // unknown id
        assert_eq!((t.fired, t.early, t.bad, t.late_max_ms), (2, 1, 3, 2));
    }
}
