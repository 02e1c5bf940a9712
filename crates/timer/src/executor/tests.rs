//! The executor's tests: order, panics, close, and the backlog's hold.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

type Task = Box<dyn FnOnce() + Send>;

#[test]
fn runs_in_order_survives_panics_and_refuses_after_close() {
    let executor: Executor<Task> = Executor::start("test").unwrap();
    let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
    for i in 0..3 {
        let log = log.clone();
        executor
            .submit(Box::new(move || log.lock().push(i)))
            .ok()
            .unwrap();
    }
    executor.submit(Box::new(|| panic!("boom"))).ok().unwrap();
    let batch: Vec<Task> = (3..6)
        .map(|i| {
            let log = log.clone();
            Box::new(move || log.lock().push(i)) as Task
        })
        .collect();
    executor.submit_batch(batch).ok().unwrap();
    executor.wait_idle();
    assert_eq!(*log.lock(), vec![0, 1, 2, 3, 4, 5]);
    executor.close();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let refused = executor.submit(Box::new(move || {
        r.fetch_add(1, Ordering::SeqCst);
    }));
    assert!(refused.is_err(), "closed executor gives the task back");
    executor.wait_idle();
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

/// Pushes `what` to `log` when dropped.
struct LogOnDrop(Arc<parking_lot::Mutex<Vec<&'static str>>>, &'static str);

impl Drop for LogOnDrop {
    fn drop(&mut self) {
        self.0.lock().push(self.1);
    }
}

#[test]
fn memory_given_to_free_later_goes_after_the_jobs_before_it() {
    let executor: Executor<Task> = Executor::start("test").unwrap();
    let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (open, gate) = mpsc::channel::<()>();
    executor
        .submit(Box::new(move || gate.recv().unwrap()))
        .ok()
        .unwrap();
    let batch: Vec<Task> = (0..2)
        .map(|_| {
            let log = log.clone();
            Box::new(move || log.lock().push("task")) as Task
        })
        .collect();
    executor.submit_batch(batch).ok().unwrap();
    executor.free_later(Box::new(LogOnDrop(log.clone(), "freed")));
    assert!(
        log.lock().is_empty(),
        "queued behind the gate, not freed here"
    );
    assert_eq!(executor.backlog(), 4, "counted like a task");
    open.send(()).unwrap();
    // `wait_idle` waits for the freeing too.
    executor.wait_idle();
    assert_eq!(*log.lock(), vec!["task", "task", "freed"]);
    executor.close();
    executor.free_later(Box::new(LogOnDrop(log.clone(), "closed")));
    assert_eq!(
        log.lock().last(),
        Some(&"closed"),
        "freed at once once closed"
    );
}

/// An executor whose thread waits at a gate until `open` is sent to.
fn gated(stall: Duration, hold_max: Duration) -> (Executor<Task>, mpsc::Sender<()>) {
    let executor: Executor<Task> = Executor::start_with_limits("gated", stall, hold_max).unwrap();
    let (open, gate) = mpsc::channel::<()>();
    executor
        .submit(Box::new(move || gate.recv().unwrap()))
        .ok()
        .unwrap();
    (executor, open)
}

fn counting(ran: &Arc<AtomicUsize>, n: usize) -> Vec<Task> {
    (0..n)
        .map(|_| {
            let ran = ran.clone();
            Box::new(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }) as Task
        })
        .collect()
}

#[test]
fn a_held_caller_goes_on_once_the_backlog_is_down_to_low() {
    // A stall far longer than the test: only the backlog can let it go.
    let (executor, open) = gated(Duration::from_secs(60), Duration::from_secs(60));
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..(BACKLOG_HIGH + 2 * BACKLOG_LOW) / 64 {
        executor.submit_batch(counting(&ran, 64)).ok().unwrap();
    }
    assert!(executor.backlog() > BACKLOG_HIGH);
    std::thread::scope(|s| {
        // The gate opens once the caller is held, not before.
        let waiter = held(s, &executor);
        open.send(()).unwrap();
        waiter.join().unwrap();
    });
    // Nothing adds meanwhile, so the backlog only falls from here.
    assert!(executor.backlog() <= BACKLOG_LOW, "{}", executor.backlog());
    executor.close();
    assert_eq!(ran.load(Ordering::SeqCst), BACKLOG_HIGH + 2 * BACKLOG_LOW);
    assert_eq!(executor.backlog(), 0);
}

/// A gated executor with one task more than the bound waiting.
fn gated_over_the_bound(stall: Duration) -> (Executor<Task>, mpsc::Sender<()>, Arc<AtomicUsize>) {
    let (executor, open) = gated(stall, Duration::from_secs(60));
    let ran = Arc::new(AtomicUsize::new(0));
    executor
        .submit_batch(counting(&ran, BACKLOG_HIGH + 1))
        .ok()
        .unwrap();
    (executor, open, ran)
}

#[test]
fn a_stalled_executor_lifts_the_bound_until_it_finishes_a_job() {
    let (executor, open, ran) = gated_over_the_bound(Duration::from_millis(2));
    // Held for one stall at most, then not at all while the gate holds.
    executor.wait_for_room();
    executor.wait_for_room();
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    open.send(()).unwrap();
    executor.wait_idle();
    assert_eq!(ran.load(Ordering::SeqCst), BACKLOG_HIGH + 1);
    assert_eq!(executor.backlog(), 0);
}

#[test]
fn a_held_caller_goes_on_when_the_executor_closes() {
    let (executor, open, ran) = gated_over_the_bound(Duration::from_secs(60));
    std::thread::scope(|s| {
        let waiter = held(s, &executor);
        // Closing joins the thread, which needs the gate open.
        open.send(()).unwrap();
        executor.close();
        waiter.join().unwrap();
    });
    assert_eq!(ran.load(Ordering::SeqCst), BACKLOG_HIGH + 1);
}

/// Starts a caller held in `wait_for_room` on `executor` (whose backlog
/// is over the bound) and returns once it is held.
fn held<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    executor: &'s Executor<Task>,
) -> std::thread::ScopedJoinHandle<'s, ()> {
    let waiter = s.spawn(|| executor.wait_for_room());
    while executor.backlog.waiting.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    waiter
}

#[test]
fn release_held_lets_a_held_caller_go() {
    let (executor, open, ran) = gated_over_the_bound(Duration::from_secs(60));
    std::thread::scope(|s| {
        let waiter = held(s, &executor);
        executor.release_held();
        waiter.join().unwrap();
    });
    assert_eq!(ran.load(Ordering::SeqCst), 0, "released, not drained");
    open.send(()).unwrap();
    executor.close();
    assert_eq!(ran.load(Ordering::SeqCst), BACKLOG_HIGH + 1);
}

#[test]
fn a_hold_ends_after_hold_max_whatever_the_backlog() {
    let (executor, open) = gated(Duration::from_secs(60), Duration::from_millis(5));
    let ran = Arc::new(AtomicUsize::new(0));
    executor
        .submit_batch(counting(&ran, BACKLOG_HIGH + 1))
        .ok()
        .unwrap();
    // Neither stalled (for a minute) nor drained: only the cap ends it.
    executor.wait_for_room();
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    open.send(()).unwrap();
    executor.close();
    assert_eq!(ran.load(Ordering::SeqCst), BACKLOG_HIGH + 1);
}

#[test]
fn the_executor_thread_is_never_held() {
    let executor = Arc::new(
        Executor::<Task>::start_with_limits(
            "self",
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
        .unwrap(),
    );
    let ran = Arc::new(AtomicUsize::new(0));
    let (done, finished) = mpsc::channel();
    let inner = executor.clone();
    let (open, gate) = mpsc::channel::<()>();
    executor
        .submit(Box::new(move || {
            gate.recv().unwrap();
            // The backlog is above the bound, and this thread is the
            // one that would lower it.
            inner.wait_for_room();
            done.send(()).unwrap();
        }))
        .ok()
        .unwrap();
    executor
        .submit_batch(counting(&ran, BACKLOG_HIGH + 1))
        .ok()
        .unwrap();
    open.send(()).unwrap();
    finished.recv_timeout(Duration::from_secs(10)).unwrap();
    executor.wait_idle();
    assert_eq!(ran.load(Ordering::SeqCst), BACKLOG_HIGH + 1);
}

#[test]
fn a_task_is_counted_until_it_has_run() {
    // `wait_idle` returns at once on an empty backlog: that is right only
    // if a task that has started but not finished still counts.
    let executor: Executor<Task> = Executor::start("count").unwrap();
    let (started_tx, started) = mpsc::channel::<()>();
    let (open, gate) = mpsc::channel::<()>();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    executor
        .submit(Box::new(move || {
            started_tx.send(()).unwrap();
            gate.recv().unwrap();
            r.fetch_add(1, Ordering::SeqCst);
        }))
        .ok()
        .unwrap();
    started.recv().unwrap();
    assert_eq!(executor.backlog(), 1, "running, not yet run");
    open.send(()).unwrap();
    executor.wait_idle();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(executor.backlog(), 0);
    executor.wait_idle(); // nothing queued: returns at once
    executor.close();
}

#[test]
fn close_runs_everything_already_accepted() {
    let executor: Executor<Task> = Executor::start("drain").unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..100 {
        let ran = ran.clone();
        executor
            .submit(Box::new(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }))
            .ok()
            .unwrap();
    }
    executor.close();
    assert_eq!(ran.load(Ordering::SeqCst), 100);
}
