//! Property test of the wheel's internals: random add / cancel / advance
//! sequences, including bounded advances and due-only advances that leave
//! passes paused, against the reference model shared with
//! `tests/properties.rs`: no task fires early, none is lost, none fires
//! twice, cancel answers exactly when the task was still pending.

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
        }
        // Nothing is lost: running to the end fires exactly what is pending.
        let mut rest = BTreeSet::new();
        wheel.advance(u64::MAX, |id| { rest.insert(id); });
        prop_assert_eq!(rest, model.expire(u64::MAX));
    }
}
