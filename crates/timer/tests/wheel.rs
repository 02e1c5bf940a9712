//! The single-threaded `TimingWheel`: Kafka's `TimingWheelTest` restated, the
//! seed article's worked example, the boundaries of every level, cascading,
//! rounding, saturation and bounded flushes. Virtual time only.

use timer::{ConfigError, Insertion, TimerHandle, TimingWheel, MAX_DEADLINE_MS};

fn schedule<T: std::fmt::Debug>(wheel: &mut TimingWheel<T>, deadline: u64, task: T) -> TimerHandle {
    match wheel.insert(deadline, task) {
        Insertion::Scheduled(handle) => handle,
        Insertion::Expired(task) => panic!("{task:?} (deadline {deadline}) expired at insert"),
    }
}

// ---- Kafka's TimingWheelTest: tick 10 ms, 5 buckets (interval 50), start 1000.

fn kafka_wheel() -> TimingWheel<&'static str> {
    TimingWheel::new(10, 5, 1000).unwrap()
}

#[test]
fn add_expired_task() {
    let mut wheel = kafka_wheel();
    assert_eq!(wheel.insert(999, "t"), Insertion::Expired("t"));
    assert_eq!(wheel.insert(1000, "t"), Insertion::Expired("t"));
    assert_eq!(wheel.len(), 0);
}

#[test]
fn cancelled_task_is_gone_and_its_handle_stale() {
    let mut wheel = kafka_wheel();
    let handle = schedule(&mut wheel, 1020, "t");
    assert_eq!(wheel.cancel(handle), Some("t"));
    assert!(!wheel.contains(handle));
    assert_eq!(wheel.cancel(handle), None);
    assert_eq!(wheel.len(), 0);
}

#[test]
fn task_inside_the_current_tick_waits_for_the_tick_end() {
    // Kafka expires 1005 at once (up to a tick early); this wheel rounds the
    // deadline up to 1010 and fires it then.
    let mut wheel = kafka_wheel();
    let handle = schedule(&mut wheel, 1005, "t");
    assert_eq!(wheel.deadline(handle), Some(1010));
    assert_eq!(wheel.advance(1009, |_| {}), 0);
    assert_eq!(wheel.advance(1010, |_| {}), 1);
}

#[test]
fn advance_within_a_tick_and_to_the_next() {
    let mut wheel = kafka_wheel();
    wheel.advance(1005, |_| {});
    assert_eq!(wheel.current_time(), 1000);
    wheel.advance(1010, |_| {});
    assert_eq!(wheel.current_time(), 1010);
}

#[test]
fn advance_jumps_over_empty_time() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    schedule(&mut wheel, 1_000_000, 1);
    // A single call covers a million milliseconds: only the few due buckets
    // are visited.
    let mut fired = 0;
    assert_eq!(wheel.advance(999_999, |_| fired += 1), 0);
    assert_eq!(wheel.advance(1_000_000, |_| fired += 1), 1);
    assert_eq!(fired, 1);
    assert_eq!(wheel.current_time(), 1_000_000);
}

#[test]
fn deadlines_round_up_to_the_tick() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(10, 8, 0).unwrap();
    let h = schedule(&mut wheel, 31, 31);
    assert_eq!(wheel.deadline(h), Some(40));
    assert_eq!(wheel.advance(39, |_| {}), 0);
    assert_eq!(wheel.advance(40, |_| {}), 1);
    assert_eq!(wheel.round_deadline(40), 40);
    assert_eq!(wheel.round_deadline(41), 50);
}

#[test]
fn huge_deadlines_saturate_and_never_fire_early() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 5).unwrap();
    let h = schedule(&mut wheel, u64::MAX, 1);
    assert_eq!(wheel.deadline(h), Some(MAX_DEADLINE_MS));
    assert!(
        wheel.levels() <= 16,
        "levels stay bounded: {}",
        wheel.levels()
    );
    assert_eq!(wheel.advance(1 << 40, |_| {}), 0);
    assert_eq!(wheel.advance(MAX_DEADLINE_MS - 1, |_| {}), 0);
    assert_eq!(
        wheel.advance(u64::MAX, |_| {}),
        1,
        "fires at the end of time, not before"
    );
    // A wheel with the largest tick and size works too.
    let mut big: TimingWheel<u64> =
        TimingWheel::new(timer::MAX_TICK_MS, timer::MAX_WHEEL_SIZE, 0).unwrap();
    assert!(matches!(big.insert(u64::MAX, 0), Insertion::Scheduled(_)));
    assert_eq!(big.advance(u64::MAX, |_| {}), 1);
}

/// A wheel starting where deadlines are clamped would hand every task
/// back as due, before its deadline: such a start is refused.
#[test]
fn a_start_at_the_last_deadline_is_refused() {
    let refused = |tick, start| TimingWheel::<u64>::new(tick, 20, start).err();
    let last = MAX_DEADLINE_MS;
    let too_late = |requested_ms, max_ms| {
        Some(ConfigError::StartTooLate {
            requested_ms,
            max_ms,
        })
    };
    assert_eq!(refused(1, last), too_late(last, last - 1));
    assert_eq!(refused(1, u64::MAX), too_late(u64::MAX, last - 1));
    let big = timer::MAX_TICK_MS;
    let last_big = last - last % big;
    assert_eq!(refused(big, last - 5), too_late(last - 5, last_big - 1));
    // The latest accepted start still schedules, and fires on time.
    for (tick, start) in [(1, last - 1), (big, last_big - 1)] {
        let mut wheel: TimingWheel<u64> = TimingWheel::new(tick, 20, start).unwrap();
        let deadline = wheel.round_deadline(u64::MAX);
        assert!(matches!(wheel.insert(u64::MAX, 7), Insertion::Scheduled(_)));
        assert_eq!(wheel.advance(deadline - 1, |_| {}), 0);
        assert_eq!(wheel.advance(deadline, |_| {}), 1);
    }
}

#[test]
fn drain_takes_every_task() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    for i in 1..=100 {
        schedule(&mut wheel, i * 97, i);
    }
    let mut tasks = wheel.drain();
    tasks.sort_unstable();
    assert_eq!(tasks, (1..=100).collect::<Vec<_>>());
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiration(), None);
    assert_eq!(wheel.advance(10_000, |_| {}), 0);
    // Still usable afterwards.
    schedule(&mut wheel, 20_000, 7);
    assert_eq!(wheel.advance(20_000, |_| {}), 1);
}

#[test]
fn reused_slots_do_not_revive_stale_handles() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    let old = schedule(&mut wheel, 50, 1);
    wheel.advance(50, |_| {});
    let new = schedule(&mut wheel, 100, 2);
    assert_ne!(old, new);
    assert_eq!(wheel.cancel(old), None, "fired task's handle is stale");
    assert_eq!(wheel.cancel(new), Some(2));
}

#[test]
fn bad_configuration_is_an_error_value() {
    assert_eq!(
        TimingWheel::<()>::new(0, 20, 0).unwrap_err(),
        ConfigError::ZeroTick
    );
    for size in [0, 1, timer::MAX_WHEEL_SIZE + 1] {
        assert!(matches!(
            TimingWheel::<()>::new(1, size, 0).unwrap_err(),
            ConfigError::WheelSizeOutOfRange { requested, .. } if requested == size
        ));
    }
}

// ---- A panicking callback or task `Drop`.

/// A callback that panics while a coarse bucket is being moved down cuts
/// the pass short; the rest of the bucket is not stranded: a later advance
/// resumes the pass, and every other task fires once, none early, in a
/// build with or without debug assertions (whose bucket checks see no
/// mixed rounds).
#[test]
fn a_panicking_callback_strands_no_task_of_a_coarse_bucket() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let mut wheel = TimingWheel::new(1, 20, 0).unwrap();
    // Level 2: the bucket [400, 800); both due by the advance below.
    schedule(&mut wheel, 400, "a");
    schedule(&mut wheel, 401, "b");
    schedule(&mut wheel, 8_000, "later");
    let cut = catch_unwind(AssertUnwindSafe(|| {
        wheel.advance(415, |t| panic!("the callback panics on {t}"))
    }));
    assert!(cut.is_err());
    assert_eq!(wheel.len(), 2);
    // The pass, begun early (at 200), is overdue work.
    assert_eq!(wheel.next_expiration(), Some(200));
    let mut fired = Vec::new();
    for now in [415, 800, 8_500] {
        wheel.advance(now, |t| fired.push((now, t)));
        // The same bucket, in its next round.
        if now == 800 {
            schedule(&mut wheel, 8_400, "c");
        }
    }
    fired.sort();
    assert_eq!(fired.len(), 3, "{fired:?}");
    assert_eq!(fired[0].0, 415, "{fired:?}");
    assert_eq!(&fired[1..], [(8_500, "c"), (8_500, "later")]);
    assert!(wheel.is_empty());
}

/// A callback that panics in a level-0 flush leaves the flush's other
/// tasks in the wheel; the next advance hands them out first, even one with
/// an earlier `now_ms`: they were due at the wheel's time, which does not
/// go back. Nothing else comes out early.
#[test]
fn a_panicking_level_0_flush_is_finished_by_the_next_advance_whatever_its_now() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let mut wheel = TimingWheel::new(1, 20, 0).unwrap();
    for task in [1, 2, 3] {
        schedule(&mut wheel, 10, task);
    }
    schedule(&mut wheel, 15, 4);
    let cut = catch_unwind(AssertUnwindSafe(|| {
        wheel.advance(10, |t| panic!("the callback panics on {t}"))
    }));
    assert!(cut.is_err());
    assert_eq!((wheel.current_time(), wheel.len()), (10, 3));
    let mut fired = Vec::new();
    assert_eq!(wheel.advance(0, |t| fired.push(t)), 2);
    fired.sort();
    assert_eq!(fired.len(), 2);
    assert!(fired.iter().all(|t| (1..=3).contains(t)), "{fired:?}");
    // An earlier `now` expires nothing new; the wheel's time stays.
    assert_eq!(wheel.advance(5, |t| panic!("{t} is not due")), 0);
    assert_eq!((wheel.current_time(), wheel.len()), (10, 1));
    assert_eq!(wheel.advance(15, |t| assert_eq!(t, 4)), 1);
    assert!(wheel.is_empty());
}

/// Dropping a wheel drops every pending task even if one's `Drop` panics
/// (as a `Vec` does); the panic goes on to the caller.
#[test]
fn dropping_a_wheel_drops_every_task_past_a_panicking_one() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicUsize, Ordering};
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Task(u32);
    impl Drop for Task {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
            if self.0 % 2 == 0 && !std::thread::panicking() {
                panic!("task {} panics in Drop", self.0);
            }
        }
    }
    let mut wheel = TimingWheel::new(1, 20, 0).unwrap();
    for i in 0..5u32 {
        assert!(matches!(
            wheel.insert(10 + u64::from(i) * 300, Task(i)),
            Insertion::Scheduled(_)
        ));
    }
    assert!(catch_unwind(AssertUnwindSafe(move || drop(wheel))).is_err());
    assert_eq!(DROPS.load(Ordering::SeqCst), 5);
}
