//! Property tests: random sequences of watches, checks, cancels, forced
//! completions and clock moves against a simple reference model (per
//! operation: its keys, deadline, condition and state), on a manual clock
//! with no reaper. After every step the purgatory's answers, each
//! operation's callbacks and flags, and the `watched()`/`delayed()` counts
//! must agree with the model; after a purge, so must every key's list.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use purgatory::{Operation, PurgatoryError};

/// Keys are drawn from this many.
const KEYS: usize = 5;

#[derive(Debug, Clone)]
enum Step {
    /// Watch a new operation under these keys (duplicates allowed) with this
    /// timeout (ms); `ready` makes its condition hold from the start.
    Watch {
        keys: Vec<usize>,
        timeout: u64,
        ready: bool,
    },
    /// Watch the n-th operation (modulo the count) again.
    Rewatch { op: usize, keys: Vec<usize> },
    /// Make the n-th operation's condition hold.
    Ready(usize),
    /// `check_and_complete` on a key.
    Check(usize),
    /// `cancel_for_key` on a key.
    Cancel(usize),
    /// `force_complete` the n-th operation.
    Force(usize),
    /// Move the clock forward and expire what is due.
    Advance(u64),
    /// Free every retired slot now.
    Purge,
}

fn keys() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..KEYS, 1..4)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (keys(), prop_oneof![1u64..30, 1u64..3_000], prop::bool::weighted(0.2))
            .prop_map(|(keys, timeout, ready)| Step::Watch { keys, timeout, ready }),
        1 => (any::<usize>(), keys()).prop_map(|(op, keys)| Step::Rewatch { op, keys }),
        3 => any::<usize>().prop_map(Step::Ready),
        3 => (0..KEYS).prop_map(Step::Check),
        1 => (0..KEYS).prop_map(Step::Cancel),
        1 => any::<usize>().prop_map(Step::Force),
        3 => prop_oneof![0u64..5, 0u64..100, 0u64..4_000].prop_map(Step::Advance),
        1 => Just(Step::Purge),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Never watched.
    Idle,
    /// Cancelled (by `cancel_for_key`); may be watched again or forced.
    Cancelled,
    Pending,
    Completed {
        expired: bool,
    },
}

/// The reference model of one operation.
#[derive(Debug)]
struct Model {
    keys: Vec<usize>,
    deadline: u64,
    ready: bool,
    state: State,
}

impl Model {
    fn watched_under(&self, key: usize) -> bool {
        self.state == State::Pending && self.keys.contains(&key)
    }
}

struct World {
    purgatory: purgatory::Purgatory<Key, MockOp>,
    clock: purgatory::ManualClock,
    now: u64,
    ops: Vec<Operation<MockOp>>,
    models: Vec<Model>,
}

fn key_name(k: usize) -> Key {
    key(&format!("k{k}"))
}

impl World {
    fn new() -> Self {
        let (purgatory, clock) = manual();
        World {
            purgatory,
            clock,
            now: 0,
            ops: Vec::new(),
            models: Vec::new(),
        }
    }

    /// `try_complete_else_watch` on operation `i`, checked against the model.
    fn watch(&mut self, i: usize, keys: Vec<usize>) {
        let got = self
            .purgatory
            .try_complete_else_watch(self.ops[i].clone(), keys.iter().map(|&k| key_name(k)));
        let timeout = self.ops[i].timeout.as_millis() as u64;
        let m = &mut self.models[i];
        let want = match m.state {
            State::Completed { .. } => Err(PurgatoryError::AlreadyCompleted),
            State::Pending => Err(PurgatoryError::AlreadyWatched),
            State::Idle | State::Cancelled if m.ready => {
                m.state = State::Completed { expired: false };
                Ok(true)
            }
            State::Idle | State::Cancelled => {
                m.state = State::Pending;
                m.keys = keys;
                m.deadline = self.now + timeout;
                Ok(false)
            }
        };
        assert_eq!(got, want, "watching operation {i}");
    }

    fn apply(&mut self, step: &Step) {
        let n = self.ops.len();
        match step.clone() {
            Step::Watch {
                keys,
                timeout,
                ready,
            } => {
                let o = op(timeout);
                if ready {
                    o.set_completable();
                }
                self.ops.push(o);
                self.models.push(Model {
                    keys: Vec::new(),
                    deadline: 0,
                    ready,
                    state: State::Idle,
                });
                self.watch(n, keys);
            }
            Step::Rewatch { op, keys } if n > 0 => self.watch(op % n, keys),
            Step::Ready(i) if n > 0 => {
                self.ops[i % n].set_completable();
                self.models[i % n].ready = true;
            }
            Step::Check(k) => {
                let got = self.purgatory.check_and_complete(&key_name(k));
                let mut want = 0;
                for m in &mut self.models {
                    if m.watched_under(k) && m.ready {
                        m.state = State::Completed { expired: false };
                        want += 1;
                    }
                }
                assert_eq!(got, want, "check_and_complete(k{k})");
            }
            Step::Cancel(k) => {
                let got = self.purgatory.cancel_for_key(&key_name(k));
                let mut got: Vec<usize> = got
                    .iter()
                    .map(|c| {
                        self.ops
                            .iter()
                            .position(|o| Operation::ptr_eq(o, c))
                            .expect("a cancelled operation is one of ours")
                    })
                    .collect();
                got.sort_unstable();
                let mut want = Vec::new();
                for (i, m) in self.models.iter_mut().enumerate() {
                    if m.watched_under(k) {
                        m.state = State::Cancelled;
                        want.push(i);
                    }
                }
                assert_eq!(got, want, "cancel_for_key(k{k})");
            }
            Step::Force(i) if n > 0 => {
                let i = i % n;
                let got = self.ops[i].force_complete();
                let m = &mut self.models[i];
                let want = !matches!(m.state, State::Completed { .. });
                if want {
                    m.state = State::Completed { expired: false };
                }
                assert_eq!(got, want, "force_complete of operation {i}");
            }
            Step::Advance(ms) => {
                self.now += ms;
                self.clock.advance_ms(ms);
                self.purgatory.advance_clock(std::time::Duration::ZERO);
                for m in &mut self.models {
                    if m.state == State::Pending && m.deadline <= self.now {
                        m.state = State::Completed { expired: true };
                    }
                }
            }
            Step::Purge => {
                self.purgatory.purge();
                self.check_lists();
            }
            // Steps naming an operation when there is none.
            Step::Rewatch { .. } | Step::Ready(_) | Step::Force(_) => {}
        }
        self.check_operations();
    }

    /// Every operation's flags and callbacks, and the O(1) counts.
    fn check_operations(&self) {
        for (i, (o, m)) in self.ops.iter().zip(&self.models).enumerate() {
            o.assert_sound();
            let (completed, expired) = match m.state {
                State::Completed { expired } => (true, expired),
                _ => (false, false),
            };
            assert_eq!(o.is_completed(), completed, "operation {i} completed");
            assert_eq!(o.is_expired(), expired, "operation {i} expired");
            assert_eq!(
                o.is_watched(),
                m.state == State::Pending,
                "operation {i} watched"
            );
            assert_eq!(o.completions(), usize::from(completed), "operation {i}");
            let outcome = match m.state {
                State::Idle | State::Pending => None,
                State::Cancelled => Some(purgatory::Outcome::Cancelled),
                State::Completed { expired: false } => Some(purgatory::Outcome::Completed),
                State::Completed { expired: true } => Some(purgatory::Outcome::Expired),
            };
            assert_eq!(o.outcome(), outcome, "operation {i} outcome");
            assert_eq!(o.expirations(), usize::from(expired), "operation {i}");
        }
        let pending = self.models.iter().filter(|m| m.state == State::Pending);
        let entries: usize = pending.clone().map(|m| m.keys.len()).sum();
        assert_eq!(self.purgatory.watched(), entries, "watched()");
        assert_eq!(self.purgatory.delayed(), pending.count(), "delayed()");
    }

    /// Once purged, each key's list holds exactly its pending operations'
    /// entries, and keys without any are gone.
    fn check_lists(&self) {
        let mut per_key = BTreeMap::new();
        for m in self.models.iter().filter(|m| m.state == State::Pending) {
            for &k in &m.keys {
                *per_key.entry(k).or_insert(0usize) += 1;
            }
        }
        for k in 0..KEYS {
            let want = per_key.get(&k).copied().unwrap_or(0);
            assert_eq!(
                self.purgatory.watched_on(&key_name(k)),
                want,
                "list of k{k}"
            );
        }
        assert_eq!(
            self.purgatory.watched_keys(),
            per_key.len(),
            "watched_keys()"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_purgatory_agrees_with_the_model(steps in prop::collection::vec(step(), 1..120)) {
        let mut world = World::new();
        for step in &steps {
            world.apply(step);
        }
        world.purgatory.purge();
        world.check_lists();
        // Everything still pending expires by its deadline, once.
        world.apply(&Step::Advance(4_000));
        world.purgatory.purge();
        world.check_lists();
        prop_assert_eq!(world.purgatory.watched_keys(), 0);
    }
}
