//! The expiration reaper, on the real clock: these are the few tests that
//! must wait in real time, to prove the background thread really drives the
//! timer, stops promptly (also while a busy executor holds it back), and
//! survives panicking tasks and clocks; and a reaper on a manual clock,
//! which must notice the clock moving by hand at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use timer::{Clock, ManualClock, Reaper, Timer, TimerBuilder};

type Task = Box<dyn FnOnce() + Send>;

#[test]
fn reaper_expires_tasks_in_real_time() {
    // Kafka's SystemTimerReaperTest.testReaper: delays 100, 200 and 300 ms.
    let timer: Arc<Timer> = Arc::new(Timer::new());
    let reaper = Reaper::start(timer.clone());
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    for delay in [300u64, 100, 200] {
        let tx = tx.clone();
        let task: Task = Box::new(move || tx.send((delay, start.elapsed())).unwrap());
        timer.add(Duration::from_millis(delay), task).unwrap();
    }
    let fired: Vec<(u64, Duration)> = (0..3)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    assert_eq!(
        fired.iter().map(|f| f.0).collect::<Vec<_>>(),
        vec![100, 200, 300]
    );
    for (delay, at) in fired {
        assert!(
            at >= Duration::from_millis(delay),
            "{delay} ms task fired at {at:?}"
        );
    }
    reaper.stop();
}

#[test]
fn stop_wakes_the_reaper_at_once() {
    let timer: Arc<Timer> = Arc::new(Timer::new());
    // A poll interval far longer than the test: only the wake-up can end it.
    let reaper = Reaper::with_poll_interval(timer.clone(), Duration::from_secs(60));
    timer
        .add(Duration::from_secs(3600), Box::new(|| {}))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20)); // let it start waiting
    let started = Instant::now();
    reaper.stop();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "stop returned after {:?}",
        started.elapsed()
    );
    assert_eq!(
        timer.len(),
        1,
        "stopping the reaper leaves the timer's tasks alone"
    );
}

#[test]
fn timer_shutdown_ends_the_reaper_by_itself() {
    let timer: Arc<Timer> = Arc::new(Timer::new());
    let reaper = Reaper::with_poll_interval(timer.clone(), Duration::from_secs(60));
    timer
        .add(Duration::from_secs(3600), Box::new(|| {}))
        .unwrap();
    let pending = timer.shutdown();
    assert_eq!(pending.len(), 1);
    drop(reaper); // joins a thread that has already left its loop
}

#[test]
fn reaper_keeps_running_after_a_task_panics() {
    let timer: Arc<Timer> = Arc::new(Timer::new());
    let reaper = Reaper::start(timer.clone());
    let (tx, rx) = mpsc::channel();
    timer
        .add(
            Duration::from_millis(5),
            Box::new(|| panic!("expired task panics on purpose")),
        )
        .unwrap();
    let task: Task = Box::new(move || tx.send("after the panic").unwrap());
    timer.add(Duration::from_millis(30), task).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok("after the panic")
    );
    reaper.stop();
}

#[test]
fn the_reapers_hook_runs_after_each_advance_and_survives_its_own_panics() {
    let timer: Arc<Timer> = Arc::new(Timer::new());
    let (tx, rx) = mpsc::channel();
    let mut runs = 0;
    let reaper = Reaper::try_start_with(timer.clone(), Duration::from_millis(1), move || {
        runs += 1;
        if runs == 1 {
            panic!("the hook panics on purpose");
        }
        let _ = tx.send(runs);
    })
    .unwrap();
    // The second run comes after the first one's panic; the timer still
    // fires.
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(2));
    let (fired_tx, fired_rx) = mpsc::channel();
    let task: Task = Box::new(move || fired_tx.send(()).unwrap());
    timer.add(Duration::from_millis(2), task).unwrap();
    assert_eq!(fired_rx.recv_timeout(Duration::from_secs(10)), Ok(()));
    reaper.stop();
    assert!(Reaper::try_start_with(timer, Duration::ZERO, || {}).is_err());
}

#[test]
fn an_earlier_task_wakes_a_reaper_waiting_for_a_later_one() {
    let timer: Arc<Timer> = Arc::new(Timer::new());
    let reaper = Reaper::with_poll_interval(timer.clone(), Duration::from_secs(60));
    timer
        .add(Duration::from_secs(600), Box::new(|| {}))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20)); // the reaper now sleeps for 600 s
    let (tx, rx) = mpsc::channel();
    let task: Task = Box::new(move || tx.send(()).unwrap());
    timer.add(Duration::from_millis(10), task).unwrap();
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "woken for the earlier bucket"
    );
    reaper.stop();
}

#[test]
fn a_reaper_on_a_manual_clock_fires_as_soon_as_the_clock_moves() {
    let clock = ManualClock::new();
    let timer: Arc<Timer> = Arc::new(TimerBuilder::new().clock(clock.clone()).build().unwrap());
    // Longer than the test waits: only the clock's move can wake it.
    let reaper = Reaper::with_poll_interval(timer.clone(), Duration::from_secs(60));
    let (tx, rx) = mpsc::channel();
    for hours in [1, 2] {
        let tx = tx.clone();
        let task: Task = Box::new(move || tx.send(hours).unwrap());
        timer.add(Duration::from_secs(3_600 * hours), task).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20)); // the reaper now sleeps
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(1));
    clock.set(Duration::from_secs(7_200));
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(2));
    reaper.stop();
}

/// A one-shard timer on `clock` holding `n` tasks due in 1 ms, each taking
/// the executor about 2 µs (far longer than the reaper takes to hand one
/// over, so more than 65,536 soon wait and the reaper is held back), and
/// the count of those that ran.
fn slow_burst(clock: &ManualClock, n: usize) -> (Arc<Timer>, Arc<AtomicUsize>) {
    let timer: Arc<Timer> = Arc::new(
        TimerBuilder::new()
            .clock(clock.clone())
            .shards(1)
            .build()
            .unwrap(),
    );
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..n {
        let ran = ran.clone();
        let task: Task = Box::new(move || {
            let started = Instant::now();
            while started.elapsed() < Duration::from_micros(2) {}
            ran.fetch_add(1, Ordering::SeqCst);
        });
        timer.add(Duration::from_millis(1), task).unwrap();
    }
    (timer, ran)
}

/// Stopping a reaper that a busy executor holds back, then shutting the
/// timer down: each task runs or is handed back, exactly once. (That the
/// stop ends the reaper's call after its chunk, leaving the rest to hand
/// back, is checked deterministically in the crate's own tests; here, on a
/// loaded machine, the executor may stall and let the reaper hand over
/// everything before the stop.)
#[test]
fn stopping_a_reaper_held_by_a_busy_executor_loses_no_task() {
    const N: usize = 200_000;
    let clock = ManualClock::new();
    let (timer, ran) = slow_burst(&clock, N);
    // Longer than the test: only the stop can end its calls.
    let reaper = Reaper::with_poll_interval(timer.clone(), Duration::from_secs(60));
    clock.advance_ms(1);
    // Past the executor's first hold of the reaper.
    while timer.len() > N - 70_000 {
        std::thread::yield_now();
    }
    reaper.stop();
    let left = timer.len();
    let handed_back = timer.shutdown().len();
    assert_eq!(handed_back, left);
    assert_eq!(
        ran.load(Ordering::SeqCst) + handed_back,
        N,
        "each task once"
    );
}

/// While a busy executor holds the reaper back, its loop still comes round
/// about once per poll interval: its hook runs during the drain, not only
/// once the last due task is handed over.
#[test]
fn a_reapers_hook_runs_while_a_busy_executor_holds_it() {
    const N: usize = 100_000;
    let clock = ManualClock::new();
    let (timer, ran) = slow_burst(&clock, N);
    let during = Arc::new(AtomicUsize::new(0));
    let (seen, counted) = (timer.clone(), during.clone());
    // A poll far shorter than the drain, even with no hold at all.
    let reaper = Reaper::try_start_with(timer.clone(), Duration::from_millis(1), move || {
        if (1..N).contains(&seen.len()) {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    })
    .unwrap();
    clock.advance_ms(1);
    while ran.load(Ordering::SeqCst) < N {
        std::thread::yield_now();
    }
    reaper.stop();
    // At least the call that the executor held back for 20 ms ended before
    // the last task was handed over. (With every due task handed over in
    // one call, the hook would first run with none left.)
    assert!(
        during.load(Ordering::SeqCst) >= 1,
        "the hook did not run during the drain"
    );
}

/// A clock that panics at every reading, once armed.
#[derive(Debug, Default)]
struct BrokenClock {
    armed: AtomicBool,
    readings: AtomicUsize,
}

impl Clock for BrokenClock {
    fn now_nanos(&self) -> u64 {
        if self.armed.load(Ordering::SeqCst) {
            self.readings.fetch_add(1, Ordering::SeqCst);
            panic!("the clock is broken");
        }
        0
    }
}

/// A clock that always panics does not spin the reaper: it pauses after
/// each panic, 1 ms at first and doubling up to its poll interval.
#[test]
fn a_reaper_pauses_after_its_clock_panics() {
    let clock = Arc::new(BrokenClock::default());
    let shared: Arc<dyn Clock> = clock.clone();
    let timer: Arc<Timer> = Arc::new(TimerBuilder::new().shared_clock(shared).build().unwrap());
    // A task waiting: the reaper reads the clock to know how long to wait.
    timer
        .add(Duration::from_secs(3600), Box::new(|| {}))
        .unwrap();
    let reaper = Reaper::with_poll_interval(timer.clone(), Duration::from_millis(50));
    clock.armed.store(true, Ordering::SeqCst);
    // Pauses of 1, 2, 4, 8, 16 and 32 ms, then 50 ms each.
    std::thread::sleep(Duration::from_millis(100));
    reaper.stop();
    let readings = clock.readings.load(Ordering::SeqCst);
    assert!(
        (1..=20).contains(&readings),
        "{readings} readings of a broken clock in 100 ms"
    );
}
