//! Shutting a timer down from its own tasks, and dropping one whose pending
//! tasks panic when dropped.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use timer::{ManualClock, Timer, TimerBuilder};

type Task = Box<dyn FnOnce() + Send>;

fn manual_timer(clock: &ManualClock) -> Arc<Timer<Task>> {
    Arc::new(
        TimerBuilder::new()
            .clock(clock.clone())
            .shards(1)
            .build()
            .unwrap(),
    )
}

/// The first `shutdown` is a task's: it cannot wait for the tasks queued
/// behind it on the executor. A later call (or the drop of the last handle)
/// on another thread must, so that nothing runs once it has returned.
#[test]
fn after_a_task_shut_the_timer_down_a_later_call_waits_for_the_queued_tasks() {
    for drop_instead in [false, true] {
        let clock = ManualClock::new();
        let timer = manual_timer(&clock);
        let ran = Arc::new(AtomicUsize::new(0));
        let (shut, shut_rx) = channel();
        let (go, go_rx) = channel::<()>();
        let go_rx = Arc::new(Mutex::new(go_rx));
        let weak = Arc::downgrade(&timer);
        let first: Task = Box::new(move || {
            let timer = weak.upgrade().expect("alive");
            assert!(timer.shutdown().is_empty(), "the rest was handed over");
            // Not the last handle: the test's drop is.
            drop(timer);
            shut.send(()).unwrap();
        });
        timer.add(Duration::from_millis(1), first).ok().unwrap();
        for _ in 0..4 {
            let (ran, go_rx) = (ran.clone(), go_rx.clone());
            let queued: Task = Box::new(move || {
                // The first of them holds the rest back until released.
                let _ = go_rx.lock().unwrap().recv();
                ran.fetch_add(1, Ordering::SeqCst);
            });
            timer.add(Duration::from_millis(2), queued).ok().unwrap();
        }
        clock.advance(Duration::from_millis(2));
        timer.advance_clock(Duration::ZERO);
        shut_rx.recv().unwrap();
        // Release the queued tasks a little after this thread has begun
        // waiting; a call that does not wait returns with none run.
        let releaser = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            drop(go);
        });
        if drop_instead {
            drop(timer);
        } else {
            assert!(timer.shutdown().is_empty());
        }
        assert_eq!(ran.load(Ordering::SeqCst), 4, "drop {drop_instead}");
        releaser.join().unwrap();
    }
}

/// Panics when dropped.
struct PanicsOnDrop(Arc<AtomicUsize>);

impl timer::TimerTask for PanicsOnDrop {
    fn run(self) {}
}

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("a task's drop panics");
    }
}

#[test]
fn dropping_a_timer_drops_every_pending_task_even_when_their_drops_panic() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let timer: Timer<PanicsOnDrop> = TimerBuilder::new()
        .clock(ManualClock::new())
        .shards(1)
        .build()
        .unwrap();
    for _ in 0..3 {
        timer
            .add(Duration::from_secs(1), PanicsOnDrop(dropped.clone()))
            .ok()
            .unwrap();
    }
    // A second panic while the first unwinds would abort the process.
    assert!(catch_unwind(AssertUnwindSafe(move || drop(timer))).is_ok());
    assert_eq!(dropped.load(Ordering::SeqCst), 3);
}
