//! The timer at its edges: handles given to the wrong timer, a clock that
//! panics, a clock that goes backwards, a clock at the end of its range, and
//! ticks so long that no clock reaches them. Driven by a `ManualClock`,
//! except the one test that proves a reaper on a clock at its end waits
//! instead of spinning.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use timer::{
    Clock, ConfigError, DelayQueue, Insertion, ManualClock, OnMove, Reaper, Timer, TimerBuilder,
    TimingWheel, MAX_TICK_MS,
};

fn counter() -> (Arc<AtomicUsize>, impl Fn() -> Box<dyn FnOnce() + Send>) {
    let fired = Arc::new(AtomicUsize::new(0));
    let f = fired.clone();
    let task = move || {
        let f = f.clone();
        Box::new(move || {
            f.fetch_add(1, Ordering::SeqCst);
        }) as Box<dyn FnOnce() + Send>
    };
    (fired, task)
}

fn one_shard(clock: &Arc<dyn Clock>) -> Timer {
    TimerBuilder::new()
        .shared_clock(clock.clone())
        .shards(1)
        .build()
        .unwrap()
}

#[test]
fn a_handle_acts_only_on_the_timer_that_issued_it() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new());
    let (a, b) = (one_shard(&clock), one_shard(&clock));
    let (fired, task) = counter();
    // The same shard, slot and generation in both timers.
    let a_handle = a.add(Duration::from_millis(10), task()).unwrap();
    let b_handle = b.add(Duration::from_millis(10), task()).unwrap();
    assert_ne!(a_handle, b_handle);

    assert!(!b.cancel(&a_handle));
    assert_eq!(b.cancel_all(&mut [a_handle]), 0);
    assert_eq!(b.len(), 1, "b's task is untouched");
    assert!(a.cancel(&a_handle));

    let manual = ManualClock::new();
    let b2: Timer = TimerBuilder::new().clock(manual.clone()).build().unwrap();
    let handle = b2.add(Duration::from_millis(10), task()).unwrap();
    manual.advance_ms(10);
    b2.advance_clock(Duration::ZERO);
    b2.wait_for_executor();
    assert!(!b2.cancel(&handle));
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    b.shutdown();
}

#[test]
fn a_wheel_handle_acts_only_on_its_own_wheel() {
    let mut a = TimingWheel::new(1, 20, 0).unwrap();
    let mut b = TimingWheel::new(1, 20, 0).unwrap();
    let Insertion::Scheduled(ha) = a.insert(10, 'a') else {
        panic!("scheduled")
    };
    let Insertion::Scheduled(hb) = b.insert(10, 'b') else {
        panic!("scheduled")
    };
    assert_eq!(b.cancel(ha), None);
    assert!(!b.contains(ha) && b.contains(hb));
    assert_eq!(a.cancel(ha), Some('a'));
}

/// A manual clock that panics at its `n`-th reading from when it is armed.
#[derive(Debug)]
struct PanickyClock {
    time: ManualClock,
    countdown: AtomicUsize,
    armed: AtomicBool,
}

impl Clock for PanickyClock {
    fn now_nanos(&self) -> u64 {
        if self.armed.load(Ordering::SeqCst) && self.countdown.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.armed.store(false, Ordering::SeqCst);
            panic!("the clock broke");
        }
        self.time.now_nanos()
    }
}

/// Whichever reading of the clock inside `advance_clock` panics, the
/// shard's tasks still fire at later advances.
#[test]
fn tasks_survive_a_clock_that_panics_inside_advance_clock() {
    for reading in 1..=6 {
        let panicky = Arc::new(PanickyClock {
            time: ManualClock::new(),
            countdown: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
        });
        let clock: Arc<dyn Clock> = panicky.clone();
        let timer = one_shard(&clock);
        let (fired, task) = counter();
        for delay in [5, 5, 30] {
            timer.add(Duration::from_millis(delay), task()).unwrap();
        }
        panicky.time.advance_ms(5);
        panicky.countdown.store(reading, Ordering::SeqCst);
        panicky.armed.store(true, Ordering::SeqCst);
        let first = catch_unwind(AssertUnwindSafe(|| timer.advance_clock(Duration::ZERO)));
        panicky.armed.store(false, Ordering::SeqCst);
        for _ in 0..3 {
            panicky.time.advance_ms(20);
            timer.advance_clock(Duration::ZERO);
        }
        timer.wait_for_executor();
        assert_eq!(
            fired.load(Ordering::SeqCst),
            3,
            "panic at reading {reading} (first advance: {:?})",
            first.is_ok()
        );
        assert_eq!(timer.len(), 0);
    }
}

/// A zero delay does not read the clock: a caller whose clock just panicked
/// (the purgatory, arming an operation's timeout) can still hand a task
/// over to run at once. A positive delay reads it, and the panic reaches
/// the caller with nothing added.
#[test]
fn a_zero_delay_does_not_read_the_clock() {
    let panicky = Arc::new(PanickyClock {
        time: ManualClock::new(),
        countdown: AtomicUsize::new(1),
        armed: AtomicBool::new(false),
    });
    let clock: Arc<dyn Clock> = panicky.clone();
    let timer = one_shard(&clock);
    let (fired, task) = counter();
    panicky.armed.store(true, Ordering::SeqCst);
    timer.add(Duration::ZERO, task()).unwrap();
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    let added = catch_unwind(AssertUnwindSafe(|| {
        timer.add(Duration::from_millis(5), task())
    }));
    assert!(added.is_err(), "the clock was read, and panicked");
    assert_eq!(timer.len(), 0);
}

/// The same in the middle of a long visit: bursts in coarse buckets of two
/// shards, handed over chunk by chunk, with the clock panicking at any of
/// the visit's readings. Every task still fires exactly once, none early.
#[test]
fn tasks_survive_a_clock_that_panics_between_chunks() {
    const N: usize = 1_500;
    for reading in 1..=16 {
        let panicky = Arc::new(PanickyClock {
            time: ManualClock::new(),
            countdown: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
        });
        let clock: Arc<dyn Clock> = panicky.clone();
        let timer: Timer = TimerBuilder::new()
            .shared_clock(clock.clone())
            .shards(2)
            .build()
            .unwrap();
        let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
        let early = Arc::new(AtomicUsize::new(0));
        for i in 0..N {
            // Three bursts: a level-2 bucket's final pass finds them due.
            let delay = [810u64, 1_010, 1_190][i % 3];
            let (runs, early, time) = (runs.clone(), early.clone(), panicky.time.clone());
            let task: Box<dyn FnOnce() + Send> = Box::new(move || {
                runs[i].fetch_add(1, Ordering::SeqCst);
                if time.now_ms() < delay {
                    early.fetch_add(1, Ordering::SeqCst);
                }
            });
            timer.add(Duration::from_millis(delay), task).unwrap();
        }
        panicky.time.set_ms(1_100);
        panicky.countdown.store(reading, Ordering::SeqCst);
        panicky.armed.store(true, Ordering::SeqCst);
        let first = catch_unwind(AssertUnwindSafe(|| timer.advance_clock(Duration::ZERO)));
        panicky.armed.store(false, Ordering::SeqCst);
        for ms in [1_100, 1_150, 1_200, 1_300] {
            panicky.time.set_ms(ms);
            timer.advance_clock(Duration::ZERO);
        }
        timer.wait_for_executor();
        for (i, r) in runs.iter().enumerate() {
            assert_eq!(
                r.load(Ordering::SeqCst),
                1,
                "panic at reading {reading} (first advance: {:?}): task {i}",
                first.is_ok()
            );
        }
        assert_eq!(early.load(Ordering::SeqCst), 0);
        assert_eq!(timer.len(), 0);
    }
}

/// A clock that breaks its contract and goes backwards.
#[derive(Debug, Default)]
struct FreeClock(AtomicU64);

impl Clock for FreeClock {
    fn now_nanos(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A task added after the clock went backwards never fires before its
/// delay has passed on the new reading (it fires late instead: its delay
/// counts from the time the timer had reached).
#[test]
fn a_clock_that_goes_backwards_fires_nothing_early() {
    const MS: u64 = 1_000_000;
    let free = Arc::new(FreeClock::default());
    let clock: Arc<dyn Clock> = free.clone();
    let timer = one_shard(&clock);
    let (fired, task) = counter();
    // The wheel's time reaches 1,000 ms with this task's expiry.
    timer.add(Duration::from_millis(1_000), task()).unwrap();
    free.0.store(1_000 * MS, Ordering::SeqCst);
    timer.advance_clock(Duration::ZERO);
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    free.0.store(500 * MS, Ordering::SeqCst);
    timer.add(Duration::from_millis(100), task()).unwrap();
    for ms in [500, 599] {
        free.0.store(ms * MS, Ordering::SeqCst);
        timer.advance_clock(Duration::ZERO);
        timer.wait_for_executor();
        assert_eq!(fired.load(Ordering::SeqCst), 1, "fired at {ms} ms");
    }
    free.0.store(1_100 * MS, Ordering::SeqCst);
    timer.advance_clock(Duration::ZERO);
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::SeqCst), 2);
    assert!(timer.is_empty());
}

/// With the clock at its end, a task whose deadline saturated stays pending,
/// and `advance_clock` waits out its timeout instead of returning at once.
#[test]
fn a_clock_at_its_end_does_not_spin_the_reaper() {
    let clock = ManualClock::new();
    let timer: Timer = TimerBuilder::new().clock(clock.clone()).build().unwrap();
    let (fired, task) = counter();
    timer.add(Duration::MAX, task()).unwrap();
    timer.add(Duration::from_secs(3600), task()).unwrap();
    clock.advance(Duration::MAX);
    timer.advance_clock(Duration::ZERO);
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::SeqCst), 1, "the hour-long task fired");
    assert_eq!(timer.len(), 1, "Duration::MAX never fires");
    // Real time: each call must wait for its whole timeout.
    let timeout = Duration::from_millis(10);
    let started = Instant::now();
    for _ in 0..3 {
        assert!(!timer.advance_clock(timeout));
    }
    assert!(started.elapsed() >= timeout * 3, "advance_clock spun");
    assert_eq!(timer.len(), 1);
    timer.shutdown();
}

#[test]
fn a_tick_no_clock_reaches_is_a_configuration_error() {
    let too_long = Duration::from_millis(MAX_TICK_MS + 1);
    let err = TimerBuilder::new()
        .tick(too_long)
        .build::<Box<dyn FnOnce() + Send>>()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::TickTooLarge {
            requested_ms: MAX_TICK_MS + 1,
            max_ms: MAX_TICK_MS
        }
    );
    assert!(TimingWheel::<()>::new(MAX_TICK_MS + 1, 20, 0).is_err());
}

/// The longest tick accepted still fires: a task added in the first tick is
/// due at the last millisecond a clock reads.
#[test]
fn the_longest_tick_fires_at_the_end_of_time() {
    let clock = ManualClock::new();
    let timer: Timer = TimerBuilder::new()
        .clock(clock.clone())
        .tick(Duration::from_millis(MAX_TICK_MS))
        .build()
        .unwrap();
    let (fired, task) = counter();
    timer.add(Duration::from_millis(1), task()).unwrap();
    clock.advance(Duration::from_millis(MAX_TICK_MS - 1));
    timer.advance_clock(Duration::ZERO);
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::SeqCst), 0, "never early");
    clock.advance(Duration::MAX);
    assert_eq!(clock.now_ms(), MAX_TICK_MS);
    timer.advance_clock(Duration::ZERO);
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

#[test]
fn a_name_with_a_nul_byte_is_a_configuration_error() {
    let built = TimerBuilder::new()
        .name("orders\0x")
        .build::<Box<dyn FnOnce() + Send>>();
    assert_eq!(built.err(), Some(ConfigError::NameHasNul));
}

#[test]
fn a_reaper_refuses_a_poll_interval_shorter_than_the_tick() {
    let ticking = |ms| -> Arc<Timer> {
        Arc::new(
            TimerBuilder::new()
                .tick(Duration::from_millis(ms))
                .clock(ManualClock::new())
                .build()
                .unwrap(),
        )
    };
    let timer = ticking(10);
    for poll in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(9_999),
    ] {
        let refused = Reaper::try_start(timer.clone(), poll).expect_err("refused");
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
        assert!(refused.to_string().contains("tick"), "{refused}");
    }
    Reaper::try_start(timer, Duration::from_millis(10))
        .expect("a tick is enough")
        .stop();
    // The default poll (200 ms) gives way to a longer tick.
    let coarse = ticking(500);
    assert_eq!(
        Reaper::default_poll_interval(500),
        Duration::from_millis(500)
    );
    assert_eq!(
        Reaper::default_poll_interval(1),
        Reaper::DEFAULT_POLL_INTERVAL
    );
    Reaper::start(coarse).stop();
}

/// A wrapper clock whose `subscribe` always panics.
#[derive(Debug)]
struct BadSubscribe(ManualClock);

impl Clock for BadSubscribe {
    fn now_nanos(&self) -> u64 {
        self.0.now_nanos()
    }
    fn subscribe(&self, _: std::sync::Weak<OnMove>) {
        panic!("subscribe is broken");
    }
}

/// The queue logs the panic and waits as for a clock that never notifies:
/// every later wait works, none panics.
#[test]
fn a_clock_whose_subscribe_panics_leaves_the_timer_working() {
    let manual = ManualClock::new();
    let clock: Arc<dyn Clock> = Arc::new(BadSubscribe(manual.clone()));
    let timer = one_shard(&clock);
    let (fired, task) = counter();
    timer.add(Duration::from_millis(5), task()).unwrap();
    for _ in 0..2 {
        let waited = catch_unwind(AssertUnwindSafe(|| {
            timer.advance_clock(Duration::from_millis(1))
        }));
        assert_eq!(waited.ok(), Some(false), "nothing due, no panic");
    }
    manual.advance(Duration::from_millis(5));
    assert!(timer.advance_clock(Duration::from_millis(1)));
    timer.wait_for_executor();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

/// A manual clock set to its own reading, or advanced by nothing, has not
/// moved: it tells no subscriber (a clock that re-syncs on every read
/// would otherwise wake, and lock, every sleeper on each read).
#[test]
fn a_manual_clock_that_does_not_move_tells_nobody() {
    let clock = ManualClock::new();
    let moves = Arc::new(AtomicUsize::new(0));
    let on_move: Arc<OnMove> = {
        let moves = moves.clone();
        Arc::new(move || {
            moves.fetch_add(1, Ordering::SeqCst);
        })
    };
    clock.subscribe(Arc::downgrade(&on_move));
    clock.set_ms(10);
    assert_eq!(moves.load(Ordering::SeqCst), 1);
    assert!(!clock.set_ms(10), "its own reading");
    assert!(!clock.set_ms(3), "backwards");
    clock.advance(Duration::ZERO);
    assert_eq!(moves.load(Ordering::SeqCst), 1);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(moves.load(Ordering::SeqCst), 2);
    clock.advance(Duration::MAX);
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        moves.load(Ordering::SeqCst),
        3,
        "at its end it moves no more"
    );
}

/// Holds its queue weakly and looks at it when dropped.
struct LooksBack {
    queue: std::sync::Weak<DelayQueue<LooksBack>>,
    seen: Arc<AtomicUsize>,
}

impl Drop for LooksBack {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.upgrade() {
            self.seen.store(queue.len() + 100, Ordering::SeqCst);
        }
    }
}

#[test]
fn clearing_a_delay_queue_drops_its_items_outside_its_lock() {
    let queue = Arc::new(DelayQueue::new(ManualClock::new()));
    let seen = Arc::new(AtomicUsize::new(0));
    for at in 0..3 {
        let item = LooksBack {
            queue: Arc::downgrade(&queue),
            seen: seen.clone(),
        };
        queue.offer(at, item);
    }
    queue.clear();
    assert_eq!(
        seen.load(Ordering::SeqCst),
        100,
        "the queue was empty and free"
    );
}

/// Counts its readings of a manual clock (and forwards `subscribe`).
#[derive(Debug)]
struct CountingReads(ManualClock, Arc<AtomicUsize>);

impl Clock for CountingReads {
    fn now_nanos(&self) -> u64 {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.now_nanos()
    }
    fn subscribe(&self, on_move: std::sync::Weak<OnMove>) {
        self.0.subscribe(on_move);
    }
}

/// With a manual clock just short of the head, the remaining manual
/// nanosecond is no real-time wait worth making again and again: while the
/// clock stays unmoved the waits double, and a move still wakes the waiter
/// at once.
#[test]
fn a_wait_on_a_manual_clock_just_short_of_the_head_does_not_spin() {
    let manual = ManualClock::new();
    let reads = Arc::new(AtomicUsize::new(0));
    let queue = DelayQueue::new(CountingReads(manual.clone(), reads.clone()));
    queue.offer(10, ());
    manual.set(Duration::from_millis(10) - Duration::from_nanos(1));
    reads.store(0, Ordering::SeqCst);
    assert_eq!(queue.poll(Duration::from_millis(30)), None);
    // Waits double from a microsecond to 10 ms: a few dozen readings.
    assert!(reads.load(Ordering::SeqCst) < 100, "{reads:?} readings");
    // A move still wakes it at once.
    let mover = {
        let manual = manual.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            manual.set(Duration::from_millis(10));
        })
    };
    let started = Instant::now();
    assert_eq!(queue.poll(Duration::from_secs(10)), Some((10, ())));
    assert!(started.elapsed() < Duration::from_secs(5));
    mover.join().unwrap();
}
