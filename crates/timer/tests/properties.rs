//! Property tests: random add / cancel / advance sequences against a simple
//! reference model (a sorted map of deadline → task), checking that no task
//! fires early, none is lost, none fires twice, cancel answers exactly when
//! the task was still pending, and the counts agree.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use timer::{Clock, Insertion, ManualClock, TimerBuilder, TimerHandle, TimingWheel};

#[derive(Debug, Clone)]
enum Op {
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

fn op() -> impl Strategy<Value = Op> {
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
struct Model {
    pending: BTreeSet<(u64, usize)>,
    deadline_of: HashMap<usize, u64>,
}

impl Model {
    fn add(&mut self, id: usize, deadline: u64) {
        self.pending.insert((deadline, id));
        self.deadline_of.insert(id, deadline);
    }
    fn cancel(&mut self, id: usize) -> bool {
        match self.deadline_of.remove(&id) {
            Some(d) => self.pending.remove(&(d, id)),
            None => false,
        }
    }
    /// Tasks due at `now`, removed from the model.
    fn expire(&mut self, now: u64) -> BTreeSet<usize> {
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

fn round_up(deadline: u64, tick: u64) -> u64 {
    deadline.div_ceil(tick) * tick
}

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

    #[test]
    fn timer_matches_sorted_map(
        tick in prop_oneof![Just(1u64), Just(5)],
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let clock = ManualClock::starting_at_ms(1_000);
        let timer = TimerBuilder::new()
            .clock(clock.clone())
            .tick(Duration::from_millis(tick))
            .build()
            .unwrap();
        let fired = Arc::new(Mutex::new(Vec::new()));
        let mut model = Model::default();
        let mut handles = Vec::new();
        for op in ops {
            match op {
                Op::Add(delay) => {
                    let id = handles.len();
                    let f = fired.clone();
                    let handle = timer
                        .add(Duration::from_millis(delay), Box::new(move || f.lock().unwrap().push(id)))
                        .unwrap();
                    // A zero delay runs at once; others wait for the tick.
                    let due = match delay {
                        0 => clock.now_ms(),
                        _ => round_up(clock.now_ms() + delay, tick),
                    };
                    model.add(id, due);
                    handles.push(handle);
                }
                Op::Cancel(n) if !handles.is_empty() => {
                    let id = n % handles.len();
                    timer.wait_for_executor();
                    let ran = fired.lock().unwrap().contains(&id);
                    let cancelled = timer.cancel(&handles[id]);
                    // Tasks already due (delay 0) are with the executor: not
                    // in the model's view of "pending" once the clock says due.
                    let pending_in_model = model.cancel(id);
                    if cancelled {
                        prop_assert!(pending_in_model && !ran);
                    } else if pending_in_model {
                        // Only possible for a task handed straight to the
                        // executor: it has run, and leaves the model here.
                        prop_assert!(ran, "cancel refused a pending task {}", id);
                        fired.lock().unwrap().retain(|&x| x != id);
                    }
                }
                Op::Cancel(_) => {}
                Op::Advance(by) | Op::Step(by, _) | Op::Due(by, _) => {
                    clock.advance_ms(by);
                    timer.advance_clock(Duration::ZERO);
                    timer.wait_for_executor();
                    let now = clock.now_ms();
                    let mut got: Vec<usize> = std::mem::take(&mut *fired.lock().unwrap());
                    got.sort_unstable();
                    let want: Vec<usize> = model.expire(now).into_iter().collect();
                    // A zero-delay task fires without an advance; it is due in
                    // the model too, so both sides agree after every advance.
                    prop_assert_eq!(got, want);
                }
            }
            timer.wait_for_executor();
            let zero_delay_ran = fired.lock().unwrap().len();
            prop_assert_eq!(timer.len() + zero_delay_ran, model.pending.len());
        }
        // Shutdown hands back exactly the tasks still waiting.
        let waiting = timer.len();
        let left = timer.shutdown();
        prop_assert_eq!(left.len(), waiting);
        prop_assert_eq!(timer.len(), 0);
    }
}
