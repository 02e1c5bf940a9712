//! Property test of the wheel's internals: random add / cancel / advance
//! sequences, including bounded advances and due-only advances that leave
//! passes paused, against the reference model shared with
//! `tests/properties.rs`: no task fires early, none is lost, none fires
//! twice, cancel answers exactly when the task was still pending; and after
//! every operation the buckets agree with the slots (`check_structure`).

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::{Insertion, TimingWheel};
use crate::entries::TimerHandle;

#[path = "../../tests/model/mod.rs"]
mod model;
use model::{op, round_up, Model, Op};

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn wheel_matches_sorted_map(
        tick in prop_oneof![Just(1u64), Just(3), Just(10)],
        wheel_size in prop_oneof![Just(2usize), Just(3), Just(20), Just(64)],
        start in prop_oneof![Just(0u64), 0u64..100_000],
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut wheel = TimingWheel::new(tick, wheel_size, start).unwrap();
        let mut model = Model::default();
        let mut handles: Vec<Option<TimerHandle>> = Vec::new();
        let mut now = start;
        for op in ops {
            match op {
                Op::Add(delay) => {
                    let id = handles.len();
                    let deadline = now + delay;
                    match wheel.insert(deadline, id) {
                        Insertion::Scheduled(h) => {
                            // (After a bounded step the wheel's time can lag
                            // `now`: a due task is then scheduled and fires at
                            // the next advance.)
                            prop_assert_eq!(wheel.deadline(h), Some(round_up(deadline, tick)));
                            model.add(id, round_up(deadline, tick));
                            handles.push(Some(h));
                        }
                        Insertion::Expired(got) => {
                            prop_assert_eq!(got, id);
                            prop_assert!(round_up(deadline, tick) <= now, "expired early at insert");
                            handles.push(None);
                        }
                    }
                }
                Op::Cancel(n) if !handles.is_empty() => {
                    let id = n % handles.len();
                    let got = handles[id].and_then(|h| wheel.cancel(h));
                    prop_assert_eq!(got.is_some(), model.cancel(id));
                    if let Some(got) = got {
                        prop_assert_eq!(got, id);
                    }
                }
                Op::Cancel(_) => {}
                Op::Step(by, budget) => {
                    now += by;
                    let mut fired = Vec::new();
                    wheel.advance_bounded(now, budget, |id| fired.push(id));
                    prop_assert!(fired.len() <= budget);
                    for id in fired {
                        let deadline = model.deadline_of.get(&id).copied();
                        prop_assert!(deadline.is_some_and(|d| d <= now), "task {} fired early or twice", id);
                        prop_assert!(model.cancel(id));
                    }
                }
                Op::Due(by, budget) => {
                    now += by;
                    let mut fired = BTreeSet::new();
                    loop {
                        let step = wheel.advance_due(now, budget, |id| {
                            assert!(fired.insert(id), "task {id} fired twice");
                        });
                        if step.done {
                            break;
                        }
                    }
                    // Only passes with slack are left: everything due fired.
                    prop_assert!(wheel.paused_finish_by().is_none_or(|f| f > now));
                    prop_assert_eq!(fired, model.expire(now));
                }
                Op::Advance(by) => {
                    now += by;
                    let mut fired = BTreeSet::new();
                    // Step bucket by bucket, as a reaper would.
                    while let Some(next) = wheel.next_expiration().filter(|&n| n <= now) {
                        wheel.advance(next, |id| {
                            assert!(fired.insert(id), "task {id} fired twice");
                        });
                    }
                    wheel.advance(now, |id| {
                        assert!(fired.insert(id), "task {id} fired twice");
                    });
                    prop_assert_eq!(fired, model.expire(now));
                }
            }
            prop_assert_eq!(wheel.len(), model.pending.len());
            prop_assert_eq!(wheel.check_structure(), Ok(()));
        }
        // Nothing is lost: running to the end fires exactly what is pending.
        let mut rest = BTreeSet::new();
        wheel.advance(u64::MAX, |id| { rest.insert(id); });
        prop_assert_eq!(rest, model.expire(u64::MAX));
    }
}

/// Operations that crowd buckets: many entries of one bucket (more than a
/// walk's prefetch lookahead), deadlines on level boundaries, runs of cancels landing in
/// the middle of paused passes, and huge jumps of time.
#[derive(Debug, Clone)]
enum Crowd {
    /// `n` tasks due `delay + i * spread` ms from now, `i < n`.
    Burst { n: usize, delay: u64, spread: u64 },
    /// A task due on a boundary of level `level`: `k` of its intervals after
    /// the current one starts, plus `off` ms (−1, 0 or 1).
    Boundary { level: u32, k: u64, off: i64 },
    /// Cancel `n` consecutive tasks from the `from`-th one ever added.
    Cancel { from: usize, n: usize },
    /// One bounded advance by `by` ms with this budget.
    Step(u64, usize),
    /// Only the work that cannot wait, in chunks of this budget.
    Due(u64, usize),
    /// A full advance by `by` ms in one call (no bucket-by-bucket stepping).
    Jump(u64),
}

fn crowd() -> impl Strategy<Value = Crowd> {
    prop_oneof![
        3 => (1usize..40, prop_oneof![0u64..50, 0u64..5_000, 0u64..500_000], 0u64..3)
            .prop_map(|(n, delay, spread)| Crowd::Burst { n, delay, spread }),
        2 => (0u32..4, 0u64..3, -1i64..=1).prop_map(|(level, k, off)| Crowd::Boundary { level, k, off }),
        2 => (any::<usize>(), 1usize..12).prop_map(|(from, n)| Crowd::Cancel { from, n }),
        3 => (prop_oneof![0u64..10, 0u64..3_000], 1usize..20).prop_map(|(by, b)| Crowd::Step(by, b)),
        2 => (prop_oneof![0u64..10, 0u64..3_000], 1usize..20).prop_map(|(by, b)| Crowd::Due(by, b)),
        1 => prop_oneof![0u64..1_000, 0u64..1_000_000, Just(1u64 << 40)].prop_map(Crowd::Jump),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn crowded_buckets_match_sorted_map(
        tick in prop_oneof![Just(1u64), Just(7), Just(10)],
        wheel_size in prop_oneof![Just(2usize), Just(3), Just(20), Just(64)],
        start in prop_oneof![Just(0u64), 0u64..100_000],
        ops in prop::collection::vec(crowd(), 1..60),
    ) {
        let mut wheel = TimingWheel::new(tick, wheel_size, start).unwrap();
        let mut model = Model::default();
        let mut handles: Vec<Option<TimerHandle>> = Vec::new();
        let mut now = start;
        let add = |wheel: &mut TimingWheel<usize>, model: &mut Model, handles: &mut Vec<Option<TimerHandle>>, now: u64, deadline: u64| {
            let id = handles.len();
            let want = round_up(deadline, tick);
            match wheel.insert(deadline, id) {
                Insertion::Scheduled(h) => {
                    assert_eq!(wheel.deadline(h), Some(want));
                    model.add(id, want);
                    handles.push(Some(h));
                }
                Insertion::Expired(got) => {
                    assert_eq!(got, id);
                    assert!(want <= now, "task due at {want} expired at insert at {now}");
                    handles.push(None);
                }
            }
        };
        let check_fired = |model: &mut Model, fired: Vec<usize>, now: u64| {
            for id in fired {
                let deadline = model.deadline_of.get(&id).copied();
                assert!(deadline.is_some_and(|d| d <= now), "task {id} ({deadline:?}) fired early at {now} or twice");
                assert!(model.cancel(id));
            }
        };
        for op in ops {
            match op {
                Crowd::Burst { n, delay, spread } => {
                    for i in 0..n as u64 {
                        add(&mut wheel, &mut model, &mut handles, now, now + delay + i * spread);
                    }
                }
                Crowd::Boundary { level, k, off } => {
                    let interval = tick.saturating_mul((wheel_size as u64).saturating_pow(level + 1));
                    let base = now - now % interval;
                    let deadline = (base + k.saturating_add(1).saturating_mul(interval)).saturating_add_signed(off);
                    add(&mut wheel, &mut model, &mut handles, now, deadline.max(now));
                }
                Crowd::Cancel { from, n } if !handles.is_empty() => {
                    for id in (from % handles.len()..handles.len()).take(n) {
                        let got = handles[id].and_then(|h| wheel.cancel(h));
                        prop_assert_eq!(got.is_some(), model.cancel(id));
                        if let Some(got) = got {
                            prop_assert_eq!(got, id);
                        }
                    }
                }
                Crowd::Cancel { .. } => {}
                Crowd::Step(by, budget) => {
                    now += by;
                    let mut fired = Vec::new();
                    wheel.advance_bounded(now, budget, |id| fired.push(id));
                    prop_assert!(fired.len() <= budget);
                    check_fired(&mut model, fired, now);
                }
                Crowd::Due(by, budget) => {
                    now += by;
                    let mut fired = Vec::new();
                    while !wheel.advance_due(now, budget, |id| fired.push(id)).done {}
                    prop_assert!(wheel.paused_finish_by().is_none_or(|f| f > now));
                    check_fired(&mut model, fired, now);
                    prop_assert_eq!(model.expire(now), BTreeSet::new(), "due tasks left at {}", now);
                }
                Crowd::Jump(by) => {
                    now += by;
                    let mut fired = Vec::new();
                    wheel.advance(now, |id| fired.push(id));
                    check_fired(&mut model, fired, now);
                    prop_assert_eq!(model.expire(now), BTreeSet::new(), "due tasks left at {}", now);
                }
            }
            prop_assert_eq!(wheel.len(), model.pending.len());
            prop_assert_eq!(wheel.check_structure(), Ok(()));
        }
        let mut rest = BTreeSet::new();
        wheel.advance(u64::MAX, |id| { assert!(rest.insert(id), "task {id} fired twice"); });
        prop_assert_eq!(rest, model.expire(u64::MAX));
        prop_assert!(wheel.is_empty());
    }
}
