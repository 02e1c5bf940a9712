//! The reference model the property tests compare the timer with (a sorted
//! map of deadline → task), and the random operations they run. Shared by
//! `tests/properties.rs` (the timer) and the crate's own wheel properties
//! (`src/wheel/properties.rs`, which includes this file by path).

// Each including target uses its own part (the timer never takes a budget).
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Add a task due `delay` ms from now.
    Add(u64),
    /// Cancel the n-th task ever added (modulo the count).
    Cancel(usize),
    /// Move time forward by this many ms and expire what is due.
    Advance(u64),
    /// Move time forward and make one bounded advance with this budget,
    /// which may leave passes paused for later ops to interleave with.
    Step(u64, usize),
    /// Move time forward and do only the work that cannot wait
    /// (`advance_due`, in chunks of this budget), leaving passes with slack
    /// paused, as the timer does between ticks.
    Due(u64, usize),
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![0u64..50, 0u64..2_000, 0u64..200_000].prop_map(Op::Add),
        2 => any::<usize>().prop_map(Op::Cancel),
        3 => prop_oneof![0u64..10, 0u64..500, 0u64..50_000].prop_map(Op::Advance),
        2 => (prop_oneof![0u64..10, 0u64..2_000], 1usize..6).prop_map(|(by, budget)| Op::Step(by, budget)),
        2 => (prop_oneof![0u64..10, 0u64..2_000], 1usize..6).prop_map(|(by, budget)| Op::Due(by, budget)),
    ]
}

/// The reference: pending tasks ordered by (rounded deadline, id).
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) pending: BTreeSet<(u64, usize)>,
    pub(crate) deadline_of: HashMap<usize, u64>,
}

impl Model {
    pub(crate) fn add(&mut self, id: usize, deadline: u64) {
        self.pending.insert((deadline, id));
        self.deadline_of.insert(id, deadline);
    }
    pub(crate) fn cancel(&mut self, id: usize) -> bool {
        match self.deadline_of.remove(&id) {
            Some(d) => self.pending.remove(&(d, id)),
            None => false,
        }
    }
    /// Tasks due at `now`, removed from the model.
    pub(crate) fn expire(&mut self, now: u64) -> BTreeSet<usize> {
        let due: Vec<_> = self
            .pending
            .iter()
            .take_while(|(d, _)| *d <= now)
            .copied()
            .collect();
        due.iter()
            .map(|&(d, id)| {
                self.pending.remove(&(d, id));
                self.deadline_of.remove(&id);
                id
            })
            .collect()
    }
}

pub(crate) fn round_up(deadline: u64, tick: u64) -> u64 {
    deadline.div_ceil(tick) * tick
}
