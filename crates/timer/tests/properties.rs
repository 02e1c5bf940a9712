//! Property tests: random add / cancel / advance sequences against a simple
//! reference model (a sorted map of deadline → task), checking that no task
//! fires early, none is lost, none fires twice, cancel answers exactly when
//! the task was still pending, and the counts agree.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use timer::{Clock, ManualClock, TimerBuilder};

mod model;
use model::{op, round_up, Model, Op};

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

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

/// Operations that crowd a timer's buckets (see `crowded_timer_matches_sorted_map`).
#[derive(Debug, Clone)]
enum Crowd {
    /// `n` tasks due `delay + i * spread` ms from now, `i < n`.
    Burst { n: usize, delay: u64, spread: u64 },
    /// Cancel `n` consecutive tasks from the `from`-th one ever added.
    Cancel { from: usize, n: usize },
    /// Move the clock by this many ms and advance.
    Advance(u64),
}

fn crowd() -> impl Strategy<Value = Crowd> {
    prop_oneof![
        3 => (1usize..300, prop_oneof![0u64..50, 0u64..3_000, 0u64..200_000], 0u64..3)
            .prop_map(|(n, delay, spread)| Crowd::Burst { n, delay, spread }),
        2 => (any::<usize>(), 1usize..100).prop_map(|(from, n)| Crowd::Cancel { from, n }),
        4 => prop_oneof![0u64..10, 0u64..1_000, 0u64..100_000, Just(1u64 << 40)].prop_map(Crowd::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Bursts of hundreds of tasks (more than one flush chunk, in buckets
    /// longer than a walk's prefetch lookahead) under non-default ticks, wheel sizes and
    /// shard counts: after every advance exactly the due tasks have run,
    /// cancel succeeds exactly for tasks that have not, and nothing is lost.
    #[test]
    fn crowded_timer_matches_sorted_map(
        tick in prop_oneof![Just(1u64), Just(7), Just(10)],
        wheel_size in prop_oneof![Just(2usize), Just(3), Just(20), Just(64)],
        shards in 1usize..4,
        ops in prop::collection::vec(crowd(), 1..30),
    ) {
        let clock = ManualClock::starting_at_ms(12_345);
        let builder = TimerBuilder::new().clock(clock.clone());
        let builder = builder.tick(Duration::from_millis(tick)).wheel_size(wheel_size);
        let timer = builder.shards(shards).build().unwrap();
        let (fired, mut model, mut handles) = (Arc::new(Mutex::new(Vec::new())), Model::default(), Vec::new());
        for op in ops {
            match op {
                Crowd::Burst { n, delay, spread } => {
                    for i in 0..n as u64 {
                        let id = handles.len();
                        let (f, c) = (fired.clone(), clock.clone());
                        let delay = delay + i * spread;
                        let due = match delay {
                            0 => clock.now_ms(),
                            _ => round_up(clock.now_ms() + delay, tick),
                        };
                        let task = Box::new(move || f.lock().unwrap().push((id, c.now_ms())));
                        handles.push(timer.add(Duration::from_millis(delay), task).unwrap());
                        model.add(id, due);
                    }
                }
                Crowd::Cancel { from, n } if !handles.is_empty() => {
                    for id in (from % handles.len()..handles.len()).take(n) {
                        let was_pending = model.cancel(id);
                        if timer.cancel(&handles[id]) {
                            prop_assert!(was_pending, "cancel stopped task {} twice or after it ran", id);
                        } else if was_pending {
                            // Only a zero-delay task, handed straight to the executor.
                            timer.wait_for_executor();
                            let mut f = fired.lock().unwrap();
                            let at = f.iter().position(|&(x, _)| x == id);
                            prop_assert!(at.is_some(), "cancel refused pending task {}", id);
                            f.remove(at.unwrap());
                        }
                    }
                }
                Crowd::Cancel { .. } => {}
                Crowd::Advance(by) => {
                    clock.advance_ms(by);
                    timer.advance_clock(Duration::ZERO);
                    timer.wait_for_executor();
                    let now = clock.now_ms();
                    let got: Vec<(usize, u64)> = std::mem::take(&mut *fired.lock().unwrap());
                    let mut ids: Vec<usize> = got.iter().map(|&(id, _)| id).collect();
                    ids.sort_unstable();
                    let want: Vec<usize> = model.expire(now).into_iter().collect();
                    prop_assert_eq!(ids, want, "at {}", now);
                }
            }
        }
        timer.wait_for_executor();
        let ran_now = fired.lock().unwrap().len();
        prop_assert_eq!(timer.len() + ran_now, model.pending.len());
        let left = timer.shutdown();
        prop_assert_eq!(left.len() + ran_now, model.pending.len());
    }
}
