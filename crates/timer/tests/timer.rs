//! The thread-safe `Timer`: Kafka's `TimerTest` restated, the semantics the
//! timer promises (never early, exactly once, cancel versus expiry, stale
//! handles, saturation, shutdown, panics, executor isolation) and a
//! multi-thread stress test. Driven by a `ManualClock` except where noted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use timer::{Clock, ConfigError, ManualClock, Reaper, Timer, TimerBuilder, TimerHandle};

type Task = Box<dyn FnOnce() + Send>;

fn manual_timer(clock: &ManualClock, wheel_size: usize) -> Timer {
    TimerBuilder::new()
        .clock(clock.clone())
        .wheel_size(wheel_size)
        .name("test")
        .build()
        .unwrap()
}

/// A timer of 20 buckets with exactly `shards` shards, whatever the CPUs.
fn sharded_timer(clock: &ManualClock, shards: usize) -> Timer {
    TimerBuilder::new()
        .clock(clock.clone())
        .wheel_size(20)
        .shards(shards)
        .name("test")
        .build()
        .unwrap()
}

/// A task that counts its run in `counter`.
fn counting_task(counter: &Arc<AtomicUsize>) -> Task {
    let counter = counter.clone();
    Box::new(move || {
        counter.fetch_add(1, Ordering::Relaxed);
    })
}

/// Moves the clock to `ms`, expires what is due and waits for it to run.
fn advance_to(timer: &Timer, clock: &ManualClock, ms: u64) {
    clock.set_ms(ms);
    timer.advance_clock(Duration::ZERO);
    timer.wait_for_executor();
}

#[test]
fn already_expired_tasks_run_on_the_executor_without_an_advance() {
    // Kafka's testAlreadyExpiredTask (negative delays become zero here).
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 3);
    let (tx, rx) = mpsc::channel();
    for id in -5..0 {
        let tx = tx.clone();
        let task: Task = Box::new(move || {
            tx.send((id, thread::current().name().map(str::to_owned)))
                .unwrap()
        });
        timer.add(Duration::ZERO, task).unwrap();
    }
    let mut got: Vec<_> = (0..5)
        .map(|_| rx.recv_timeout(Duration::from_secs(3)).unwrap())
        .collect();
    got.sort();
    assert_eq!(
        got.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![-5, -4, -3, -2, -1]
    );
    assert!(got
        .iter()
        .all(|(_, name)| name.as_deref() == Some("executor-test")));
    assert_eq!(timer.len(), 0);
}

#[test]
fn task_expiration_across_six_levels() {
    // Kafka's testTaskExpiration: wheel size 3, ids 0..5 once, 10..100 twice,
    // 100..500 once; 585 tasks, each firing exactly at its deadline.
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 3);
    let output = Arc::new(Mutex::new(Vec::new()));
    let mut expected = Vec::new();
    let mut add = |id: u64| {
        let (output, clock) = (output.clone(), clock.clone());
        let task: Task = Box::new(move || output.lock().unwrap().push((id, clock.now_ms())));
        timer.add(Duration::from_millis(id), task).unwrap();
        expected.push(id);
    };
    (0..5).for_each(&mut add);
    (10..100).for_each(|id| {
        add(id);
        add(id)
    });
    (100..500).for_each(&mut add);
    expected.sort_unstable();
    assert_eq!(expected.len(), 585);
    for ms in 0..=500 {
        advance_to(&timer, &clock, ms);
    }
    let output = output.lock().unwrap();
    let mut ids: Vec<u64> = output.iter().map(|&(id, _)| id).collect();
    ids.sort_unstable();
    assert_eq!(ids, expected);
    assert!(
        output.iter().all(|&(id, at)| at == id),
        "each fires at its deadline, never early or late"
    );
    assert_eq!(timer.len(), 0);
}

#[test]
fn deadlines_round_up_at_sub_millisecond_resolution() {
    let clock = ManualClock::new();
    clock.advance(Duration::from_micros(10_300)); // 10.3 ms
    let timer = manual_timer(&clock, 20);
    let fired = Arc::new(AtomicUsize::new(0));
    let f = fired.clone();
    let task: Task = Box::new(move || {
        f.fetch_add(1, Ordering::SeqCst);
    });
    timer.add(Duration::from_millis(5), task).unwrap(); // due at 15.3 ms
    clock.set(Duration::from_micros(15_000));
    timer.advance_clock(Duration::ZERO);
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::SeqCst), 0, "15.0 ms is before 15.3 ms");
    advance_to(&timer, &clock, 16);
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

#[test]
fn cancel_is_true_once_and_stale_handles_are_harmless() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let noop = || -> Task { Box::new(|| {}) };
    let a = timer.add(Duration::from_millis(100), noop()).unwrap();
    let b = timer.add(Duration::from_millis(10), noop()).unwrap();
    let now = timer.add(Duration::ZERO, noop()).unwrap();
    assert_eq!(timer.len(), 2, "the zero-delay task went to the executor");
    assert!(timer.cancel(&a));
    assert_eq!(timer.len(), 1, "cancel frees the task at once");
    assert!(!timer.cancel(&a), "second cancel");
    assert!(!timer.cancel(&now), "a task that never waited");
    advance_to(&timer, &clock, 10);
    assert!(!timer.cancel(&b), "a task that already fired");
    // The freed slots are reused; the old handles must not reach the new tasks.
    let c = timer.add(Duration::from_millis(50), noop()).unwrap();
    let d = timer.add(Duration::from_millis(50), noop()).unwrap();
    assert!(!timer.cancel(&a) && !timer.cancel(&b));
    assert_eq!(timer.len(), 2);
    assert!(timer.cancel(&c) && timer.cancel(&d));
}

/// `remove` is `cancel` giving the task back: added again, it fires at its
/// new deadline, once; a handle of a task that fired, was removed, or never
/// waited gives nothing.
#[test]
fn remove_gives_the_task_back_to_add_at_a_new_deadline() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let fired = Arc::new(AtomicUsize::new(0));
    let idle = timer
        .add(Duration::from_millis(30), counting_task(&fired))
        .unwrap();
    advance_to(&timer, &clock, 20);
    let task = timer.remove(&idle).expect("still waiting");
    assert_eq!(timer.len(), 0);
    assert!(timer.remove(&idle).is_none() && !timer.cancel(&idle));
    let idle = timer.add(Duration::from_millis(30), task).unwrap();
    advance_to(&timer, &clock, 49);
    assert_eq!(fired.load(Ordering::Relaxed), 0, "moved to 50");
    advance_to(&timer, &clock, 50);
    assert_eq!(fired.load(Ordering::Relaxed), 1);
    assert!(timer.remove(&idle).is_none(), "fired");
    let now = timer.add(Duration::ZERO, counting_task(&fired)).unwrap();
    assert!(now.is_detached() && !idle.is_detached());
    assert!(timer.remove(&now).is_none());
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::Relaxed), 2);
}

/// `backlog` counts what the executor holds: a blocked task and every task
/// handed over behind it, none once they ran.
#[test]
fn backlog_counts_the_tasks_handed_over_and_not_finished() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let (started_tx, started) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    timer
        .add(
            Duration::ZERO,
            Box::new(move || {
                started_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            }),
        )
        .unwrap();
    started.recv().unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    for delay in [0, 0, 5, 5, 5] {
        timer
            .add(Duration::from_millis(delay), counting_task(&fired))
            .unwrap();
    }
    assert_eq!((timer.backlog(), timer.len()), (3, 3));
    clock.set_ms(5);
    assert!(timer.advance_clock(Duration::ZERO));
    assert_eq!((timer.backlog(), timer.len()), (6, 0));
    go.send(()).unwrap();
    timer.wait_for_executor();
    assert_eq!((timer.backlog(), fired.load(Ordering::Relaxed)), (0, 5));
}

#[test]
fn cancel_all_cancels_across_shards_and_skips_stale_handles() {
    let clock = ManualClock::new();
    // Several shards whatever the machine's CPU count.
    let timer = Arc::new(sharded_timer(&clock, 4));
    assert_eq!(timer.shards(), 4);
    let fired = Arc::new(AtomicUsize::new(0));
    // Each thread adds to its own shard; the handles come back interleaved.
    let per_thread: Vec<Vec<TimerHandle>> = (0..timer.shards())
        .map(|t| {
            let (timer, fired) = (timer.clone(), fired.clone());
            thread::spawn(move || {
                (0..50u64)
                    .map(|i| {
                        let fired = fired.clone();
                        let task: Task = Box::new(move || {
                            fired.fetch_add(1, Ordering::SeqCst);
                        });
                        timer
                            .add(Duration::from_millis(5 + (i + t as u64) % 70), task)
                            .unwrap()
                    })
                    .collect()
            })
        })
        .map(|h| h.join().unwrap())
        .collect();
    let total: usize = per_thread.iter().map(Vec::len).sum();
    assert_eq!(timer.len(), total);
    let mut doomed: Vec<TimerHandle> = per_thread
        .iter()
        .flat_map(|handles| handles.iter().step_by(2).copied())
        .collect();
    let stale = doomed[0];
    assert!(timer.cancel(&stale));
    doomed.push(stale); // now appears twice, and is stale
    assert_eq!(timer.cancel_all(&mut doomed), total / 2 - 1);
    assert_eq!(timer.len(), total - total / 2);
    assert_eq!(timer.cancel_all(&mut doomed), 0, "all stale now");
    assert_eq!(timer.cancel_all(&mut []), 0);
    advance_to(&timer, &clock, 1_000);
    assert_eq!(fired.load(Ordering::SeqCst), total - total / 2);
}

/// Adds a task to its timer when dropped: had `cancel_all` dropped it under
/// the shard's lock, the add would wait for that lock forever.
struct AddsWhenDropped(std::sync::Weak<Timer>);

impl Drop for AddsWhenDropped {
    fn drop(&mut self) {
        if let Some(timer) = self.0.upgrade() {
            let task: Task = Box::new(|| {});
            timer.add(Duration::from_secs(60), task).unwrap();
        }
    }
}

#[test]
fn cancel_all_drops_the_tasks_with_no_lock_held() {
    let clock = ManualClock::new();
    // One shard: the tasks and the adds their drops make share its lock.
    let timer = Arc::new(sharded_timer(&clock, 1));
    // More than one chunk of handles.
    let mut handles: Vec<TimerHandle> = (0..40)
        .map(|_| {
            let on_drop = AddsWhenDropped(Arc::downgrade(&timer));
            let task: Task = Box::new(move || drop(on_drop));
            timer.add(Duration::from_millis(50), task).unwrap()
        })
        .collect();
    let (done, finished) = mpsc::channel();
    let canceller = timer.clone();
    thread::spawn(move || done.send(canceller.cancel_all(&mut handles)).unwrap());
    let cancelled = finished
        .recv_timeout(Duration::from_secs(5))
        .expect("cancel_all dropped a task under the shard's lock");
    assert_eq!(cancelled, 40);
    assert_eq!(timer.len(), 40, "each dropped task added one");
}

/// Panics when dropped.
struct PanicsWhenDropped;

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        panic!("task dropped");
    }
}

#[test]
fn cancel_all_cancels_every_handle_when_a_task_panics_on_drop() {
    let clock = ManualClock::new();
    let timer = sharded_timer(&clock, 1);
    let fired = Arc::new(AtomicUsize::new(0));
    // The bad task first, then more than one chunk of good ones.
    let bad = PanicsWhenDropped;
    let bad: Task = Box::new(move || drop(bad));
    let mut handles = vec![timer.add(Duration::from_millis(50), bad).unwrap()];
    handles.extend((0..40).map(|_| {
        timer
            .add(Duration::from_millis(50), counting_task(&fired))
            .unwrap()
    }));
    let mut cancel = handles.clone();
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        timer.cancel_all(&mut cancel)
    }));
    assert!(panic.is_err(), "the caller sees the task's panic");
    assert_eq!(timer.len(), 0, "every handle was cancelled");
    assert_eq!(timer.cancel_all(&mut handles), 0, "all stale now");
    advance_to(&timer, &clock, 1_000);
    assert_eq!(fired.load(Ordering::SeqCst), 0);
}

#[test]
fn huge_delays_saturate_and_never_fire() {
    let clock = ManualClock::starting_at_ms(1_000);
    let timer = manual_timer(&clock, 20);
    let fired = Arc::new(AtomicUsize::new(0));
    for delay in [
        Duration::MAX,
        Duration::from_millis(u64::MAX),
        Duration::from_secs(u64::MAX / 1000),
    ] {
        let f = fired.clone();
        let task: Task = Box::new(move || {
            f.fetch_add(1, Ordering::SeqCst);
        });
        timer.add(delay, task).unwrap();
    }
    assert_eq!(timer.len(), 3);
    for step in [1u64, 1 << 20, 1 << 40, 1 << 50] {
        advance_to(&timer, &clock, step);
    }
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    assert_eq!(timer.len(), 3);
}

#[test]
fn cancel_racing_expiry_has_exactly_one_winner() {
    const N: usize = 20_000; // several flush chunks, so cancels land between them
    let clock = ManualClock::new();
    let timer = Arc::new(manual_timer(&clock, 20));
    let ran: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
    let handles: Vec<TimerHandle> = (0..N)
        .map(|i| {
            let ran = ran.clone();
            let task: Task = Box::new(move || {
                ran[i].fetch_add(1, Ordering::SeqCst);
            });
            timer
                .add(Duration::from_millis(10 + (i % 3) as u64 * 400), task)
                .unwrap()
        })
        .collect();
    clock.set_ms(1_000);
    let advancer = {
        let timer = timer.clone();
        thread::spawn(move || timer.advance_clock(Duration::ZERO))
    };
    // Cancel from the far end while the advancer flushes from the front.
    let cancelled: Vec<bool> = handles.iter().rev().map(|h| timer.cancel(h)).collect();
    assert!(advancer.join().unwrap());
    timer.wait_for_executor();
    let mut winners = (0, 0);
    for (i, cancelled) in cancelled.into_iter().rev().enumerate() {
        let runs = ran[i].load(Ordering::SeqCst);
        assert_eq!(
            runs + cancelled as usize,
            1,
            "task {i}: ran {runs} times, cancelled {cancelled}"
        );
        if cancelled {
            winners.0 += 1
        } else {
            winners.1 += 1
        }
    }
    assert_eq!(winners.0 + winners.1, N);
    assert_eq!(timer.len(), 0);
}

#[test]
fn shutdown_returns_pending_runs_handed_over_and_refuses_new() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let ran = Arc::new(AtomicUsize::new(0));
    let counting = |ran: &Arc<AtomicUsize>| -> Task {
        let ran = ran.clone();
        Box::new(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        })
    };
    for _ in 0..100 {
        timer.add(Duration::ZERO, counting(&ran)).unwrap(); // handed to the executor
    }
    for d in 1..=10 {
        timer
            .add(Duration::from_millis(d * 1_000), counting(&ran))
            .unwrap();
    }
    let pending = timer.shutdown();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        100,
        "everything handed over ran before shutdown returned"
    );
    assert_eq!(pending.len(), 10, "pending tasks are given back, not run");
    assert_eq!(timer.len(), 0);
    assert!(timer.is_shut_down());
    let refused = timer
        .add(Duration::from_millis(5), counting(&ran))
        .unwrap_err();
    refused.into_inner()(); // the caller still owns the task
    assert_eq!(ran.load(Ordering::SeqCst), 101);
    assert!(timer.add(Duration::ZERO, counting(&ran)).is_err());
    clock.set_ms(1_000_000);
    assert!(!timer.advance_clock(Duration::from_millis(1)));
    timer.wait_for_executor(); // returns at once after shutdown
    assert!(timer.shutdown().is_empty(), "idempotent");
    drop(pending);
    assert_eq!(
        ran.load(Ordering::SeqCst),
        101,
        "dropped pending tasks never ran"
    );
}

#[test]
fn a_panicking_task_does_not_stop_the_executor() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let (tx, rx) = mpsc::channel();
    let boom: Task = Box::new(|| panic!("task panics on purpose"));
    timer.add(Duration::from_millis(1), boom).unwrap();
    let after: Task = Box::new(move || tx.send("still running").unwrap());
    timer.add(Duration::from_millis(2), after).unwrap();
    advance_to(&timer, &clock, 2);
    assert_eq!(rx.try_recv(), Ok("still running"));
}

/// A panic whose payload panics again when dropped: the executor drops
/// the payload it caught without letting that second panic end it.
#[test]
fn a_panic_payload_that_panics_on_drop_does_not_stop_the_executor() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("payload dropped");
        }
    }
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let (tx, rx) = mpsc::channel();
    let boom: Task = Box::new(|| std::panic::panic_any(PanicsOnDrop));
    timer.add(Duration::from_millis(1), boom).unwrap();
    let after: Task = Box::new(move || tx.send("still running").unwrap());
    timer.add(Duration::from_millis(2), after).unwrap();
    advance_to(&timer, &clock, 2);
    assert_eq!(rx.try_recv(), Ok("still running"));
    assert!(timer.add(Duration::ZERO, Box::new(|| {})).is_ok());
}

#[test]
fn a_slow_task_does_not_stall_the_clock() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let (release, blocked) = mpsc::channel::<()>();
    let slow: Task = Box::new(move || blocked.recv().unwrap());
    timer.add(Duration::from_millis(1), slow).unwrap();
    for d in 2..100 {
        timer
            .add(Duration::from_millis(d), Box::new(|| {}))
            .unwrap();
    }
    for ms in 1..100 {
        clock.set_ms(ms);
        assert!(
            timer.advance_clock(Duration::ZERO),
            "clock moves while a task blocks"
        );
    }
    assert_eq!(timer.len(), 0);
    release.send(()).unwrap();
    timer.wait_for_executor();
}

/// The executor's backlog is bounded for the clock's thread, but a task
/// that blocks the executor lifts the bound: a burst far above it is still
/// handed over, and the clock moves on.
#[test]
fn a_blocked_executor_does_not_hold_back_a_burst() {
    const N: usize = 100_000;
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let (release, blocked) = mpsc::channel::<()>();
    let slow: Task = Box::new(move || blocked.recv().unwrap());
    timer.add(Duration::from_millis(1), slow).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for i in 0..N {
        let task = counting_task(&ran);
        timer
            .add(Duration::from_millis(2 + (i % 3) as u64), task)
            .unwrap();
    }
    for ms in 1..10 {
        clock.set_ms(ms);
        timer.advance_clock(Duration::ZERO);
    }
    assert_eq!(timer.len(), 0, "every task handed over");
    assert_eq!(ran.load(Ordering::Relaxed), 0);
    release.send(()).unwrap();
    timer.wait_for_executor();
    assert_eq!(ran.load(Ordering::Relaxed), N);
}

#[test]
fn tasks_may_use_the_timer_from_the_executor_thread() {
    let clock = ManualClock::new();
    let timer = Arc::new(manual_timer(&clock, 20));
    let (tx, rx) = mpsc::channel();
    let inner = timer.clone();
    let task: Task = Box::new(move || {
        inner.wait_for_executor(); // would wait for itself: returns at once
        let tx2 = tx.clone();
        inner
            .add(
                Duration::from_millis(5),
                Box::new(move || tx2.send("re-armed").unwrap()),
            )
            .unwrap();
        tx.send("first").unwrap();
    });
    timer.add(Duration::from_millis(1), task).unwrap();
    advance_to(&timer, &clock, 1);
    assert_eq!(rx.try_recv(), Ok("first"));
    advance_to(&timer, &clock, 6);
    assert_eq!(rx.try_recv(), Ok("re-armed"));
    // Shutting down from a task must not deadlock either.
    let inner = timer.clone();
    let (done_tx, done) = mpsc::channel();
    let stopper: Task = Box::new(move || {
        inner.shutdown();
        done_tx.send(()).unwrap();
    });
    timer.add(Duration::ZERO, stopper).unwrap();
    done.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(timer.is_shut_down());
}

/// A second `shutdown` made while the first waits for a running task
/// returns only once the first has finished: the task has run by then.
#[test]
fn a_concurrent_shutdown_returns_only_once_the_first_has_finished() {
    let clock = ManualClock::new();
    let timer = Arc::new(manual_timer(&clock, 20));
    let (release, released) = mpsc::channel::<()>();
    let ran = Arc::new(AtomicUsize::new(0));
    let (started_tx, started) = mpsc::channel();
    let blocking: Task = {
        let ran = ran.clone();
        Box::new(move || {
            started_tx.send(()).unwrap();
            let _ = released.recv_timeout(Duration::from_secs(10));
            ran.fetch_add(1, Ordering::SeqCst);
        })
    };
    timer.add(Duration::ZERO, blocking).unwrap();
    started.recv_timeout(Duration::from_secs(10)).unwrap();
    let shut_down_by = |timer: &Arc<Timer>| {
        let (timer, ran) = (timer.clone(), ran.clone());
        thread::spawn(move || {
            timer.shutdown();
            ran.load(Ordering::SeqCst)
        })
    };
    let first = shut_down_by(&timer);
    while !timer.is_shut_down() {
        thread::yield_now();
    }
    let second = shut_down_by(&timer);
    thread::sleep(Duration::from_millis(20)); // the second call now waits
    release.send(()).unwrap();
    assert_eq!(second.join().unwrap(), 1, "the task had run");
    assert_eq!(first.join().unwrap(), 1);
}

#[test]
fn shards_merge_in_deadline_order_and_cancel_from_any_thread() {
    let clock = ManualClock::new();
    let timer: Arc<Timer> = Arc::new(
        TimerBuilder::new()
            .clock(clock.clone())
            .shards(4)
            .build()
            .unwrap(),
    );
    assert_eq!(timer.shards(), 4);
    let order = Arc::new(Mutex::new(Vec::new()));
    // Four threads (so four shards), deadlines interleaved across them.
    let handles: Vec<(u64, TimerHandle)> = (0..4u64)
        .map(|t| {
            let (timer, order) = (timer.clone(), order.clone());
            thread::spawn(move || {
                (0..250u64)
                    .map(|i| {
                        let deadline = 1 + i * 4 + t;
                        let order = order.clone();
                        let task: Task = Box::new(move || order.lock().unwrap().push(deadline));
                        (
                            deadline,
                            timer.add(Duration::from_millis(deadline), task).unwrap(),
                        )
                    })
                    .collect::<Vec<_>>()
            })
        })
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(timer.len(), 1000);
    // Cancel every third task from this thread: handles route to their shard.
    let cancelled: Vec<u64> = handles
        .iter()
        .filter(|(d, _)| d % 3 == 0)
        .map(|(d, h)| {
            assert!(timer.cancel(h));
            *d
        })
        .collect();
    assert_eq!(timer.len(), 1000 - cancelled.len());
    // One jump over all deadlines: shards are merged in due order.
    clock.set_ms(2_000);
    assert!(timer.advance_clock(Duration::ZERO));
    timer.wait_for_executor();
    let order = order.lock().unwrap();
    let expected: Vec<u64> = (1..=1000).filter(|d| d % 3 != 0).collect();
    assert_eq!(*order, expected, "deadline order across shards");
}

/// Kafka's `advanceClock` answer: whether a bucket came due during the
/// call (even one whose tasks were all cancelled); `false` when nothing
/// was due, with the clock still or moved short of the next deadline.
#[test]
fn advance_clock_says_whether_anything_was_due() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    assert!(!timer.advance_clock(Duration::ZERO), "empty");
    let ran = Arc::new(AtomicUsize::new(0));
    timer
        .add(Duration::from_millis(10), counting_task(&ran))
        .unwrap();
    assert!(!timer.advance_clock(Duration::ZERO), "not due");
    clock.advance_ms(9);
    assert!(!timer.advance_clock(Duration::ZERO), "a millisecond short");
    clock.advance_ms(1);
    assert!(timer.advance_clock(Duration::ZERO), "due");
    timer.wait_for_executor();
    assert_eq!(ran.load(Ordering::Relaxed), 1);
    assert!(!timer.advance_clock(Duration::ZERO), "nothing left");
}

#[test]
fn bad_configuration_is_an_error_value() {
    let build = |b: TimerBuilder| b.build::<Task>().map(|_| ()).unwrap_err();
    assert_eq!(
        build(TimerBuilder::new().tick(Duration::ZERO)),
        ConfigError::ZeroTick
    );
    assert_eq!(
        build(TimerBuilder::new().tick(Duration::from_micros(1500))),
        ConfigError::TickNotWholeMillis
    );
    assert!(matches!(
        build(TimerBuilder::new().wheel_size(0)),
        ConfigError::WheelSizeOutOfRange { .. }
    ));
    assert!(matches!(
        build(TimerBuilder::new().wheel_size(1)),
        ConfigError::WheelSizeOutOfRange { .. }
    ));
    assert!(matches!(
        build(TimerBuilder::new().tick(Duration::from_millis(u64::MAX))),
        ConfigError::TickTooLarge { .. }
    ));
    for shards in [0, 65] {
        assert!(matches!(
            build(TimerBuilder::new().shards(shards)),
            ConfigError::ShardsOutOfRange { requested, .. } if requested == shards
        ));
    }
    let defaults: Timer = Timer::new();
    assert_eq!((defaults.tick_ms(), defaults.name()), (1, "timer"));
}

/// Real clock and a running reaper: threads add and cancel concurrently;
/// every task either fires once (never before its deadline) or was cancelled.
#[test]
fn stress_many_threads_adding_and_cancelling_with_a_reaper() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 5_000;
    let timer: Arc<Timer> = Arc::new(Timer::new());
    let reaper = Reaper::start(timer.clone());
    let runs: Arc<Vec<AtomicUsize>> = Arc::new(
        (0..THREADS * PER_THREAD)
            .map(|_| AtomicUsize::new(0))
            .collect(),
    );
    let early = Arc::new(AtomicUsize::new(0));
    let cancelled: usize = (0..THREADS)
        .map(|t| {
            let (timer, runs, early) = (timer.clone(), runs.clone(), early.clone());
            thread::spawn(move || {
                let mut seed = t as u64 * 7919 + 1;
                let mut rand = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                let mut handles = Vec::with_capacity(PER_THREAD);
                for i in 0..PER_THREAD {
                    let id = t * PER_THREAD + i;
                    let delay = Duration::from_micros(rand() % 30_000);
                    let due = timer.clock().now_nanos() + delay.as_nanos() as u64;
                    let (runs, early, clock) = (runs.clone(), early.clone(), timer.clock().clone());
                    let task: Task = Box::new(move || {
                        if clock.now_nanos() < due {
                            early.fetch_add(1, Ordering::SeqCst);
                        }
                        runs[id].fetch_add(1, Ordering::SeqCst);
                    });
                    handles.push((id, timer.add(delay, task).unwrap()));
                }
                let mut cancelled = Vec::new();
                for (id, handle) in handles {
                    if rand() % 2 == 0 && timer.cancel(&handle) {
                        cancelled.push(id);
                    }
                }
                cancelled
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| {
            let cancelled = h.join().unwrap();
            for &id in &cancelled {
                assert_eq!(
                    runs[id].load(Ordering::SeqCst),
                    0,
                    "cancelled task {id} ran"
                );
            }
            cancelled.len()
        })
        .sum();
    // Real time: wait (bounded) for the last deadlines, ~30 ms away.
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while !timer.is_empty() && std::time::Instant::now() < give_up {
        thread::sleep(Duration::from_millis(5));
    }
    timer.wait_for_executor();
    let ran: usize = runs.iter().map(|r| r.load(Ordering::SeqCst)).sum();
    assert!(
        runs.iter().all(|r| r.load(Ordering::SeqCst) <= 1),
        "a task ran twice"
    );
    assert_eq!(
        ran + cancelled,
        THREADS * PER_THREAD,
        "every task is accounted for"
    );
    assert_eq!(
        early.load(Ordering::SeqCst),
        0,
        "no task fired before its deadline"
    );
    reaper.stop();
}

#[test]
fn cascades_spread_over_ticks_still_fire_every_task_on_time() {
    // 20,000 tasks over 4 s: coarse buckets hold thousands, so the timer
    // works through their passes a share per tick. Advanced tick by tick,
    // every task still runs exactly in its deadline's millisecond.
    let clock = ManualClock::new();
    let timer = TimerBuilder::new()
        .clock(clock.clone())
        .shards(2)
        .name("paced")
        .build()
        .unwrap();
    let late = Arc::new(AtomicUsize::new(0));
    let fired = Arc::new(AtomicUsize::new(0));
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let delay = 1 + x % 4_000;
        let (late, fired, clock) = (late.clone(), fired.clone(), clock.clone());
        let task: Task = Box::new(move || {
            if clock.now_ms() != delay {
                late.fetch_add(1, Ordering::Relaxed);
            }
            fired.fetch_add(1, Ordering::Relaxed);
        });
        timer.add(Duration::from_millis(delay), task).unwrap();
    }
    for ms in 1..=4_000 {
        advance_to(&timer, &clock, ms);
    }
    assert_eq!(fired.load(Ordering::Relaxed), 20_000);
    assert_eq!(late.load(Ordering::Relaxed), 0);
    assert_eq!(timer.len(), 0);
}

#[test]
fn shutdown_with_cascades_half_done_returns_every_pending_task() {
    // 10,000 tasks in one level-2 bucket [800, 1200): at 600 its early pass
    // starts and the timer does only a share of it before shutdown.
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 20);
    let fired = Arc::new(AtomicUsize::new(0));
    for i in 0..10_000u64 {
        let task = counting_task(&fired);
        timer
            .add(Duration::from_millis(800 + i % 400), task)
            .unwrap();
    }
    advance_to(&timer, &clock, 600);
    assert_eq!(timer.len(), 10_000, "nothing is due yet");
    let pending = timer.shutdown();
    assert_eq!(pending.len(), 10_000);
    assert_eq!(fired.load(Ordering::Relaxed), 0);
    assert_eq!(timer.len(), 0);
}

#[test]
fn passes_with_one_tick_of_slack_never_make_a_task_late() {
    // Tick 5 ms, wheel size 2: coarse buckets get a lead of one lower-level
    // tick, so their passes have the least slack there is. The clock moves in
    // uneven steps, so the timer wakes late into that slack. Every task must
    // still fire in the first advance at or after its deadline.
    let clock = ManualClock::new();
    let timer = TimerBuilder::new()
        .clock(clock.clone())
        .tick(Duration::from_millis(5))
        .wheel_size(2)
        .shards(1)
        .name("coarse")
        .build()
        .unwrap();
    let fired_at = Arc::new(Mutex::new(Vec::new()));
    for i in 0..3_000u64 {
        let (fired_at, clock) = (fired_at.clone(), clock.clone());
        let delay = 20 + (i % 4) * 5; // deadlines 20, 25, 30, 35
        let task: Task = Box::new(move || fired_at.lock().unwrap().push((delay, clock.now_ms())));
        timer.add(Duration::from_millis(delay), task).unwrap();
    }
    for ms in [3, 7, 11, 13, 17, 19, 20, 23, 25, 28, 30, 33, 35] {
        advance_to(&timer, &clock, ms);
        let fired = fired_at.lock().unwrap();
        let due = fired.iter().filter(|&&(d, _)| d <= ms).count();
        assert_eq!(due, fired.len(), "nothing fires early");
        assert_eq!(
            due,
            (0..3_000u64).filter(|i| 20 + (i % 4) * 5 <= ms).count(),
            "at {ms}"
        );
    }
    assert_eq!(timer.len(), 0);
}
