//! The wheel's internals: level arithmetic, positions, the delay queue of
//! buckets, and the early, final and bounded passes. Virtual time only.
//! (The public contract is tested in `tests/wheel.rs`.)

use super::{Insertion, TimingWheel};
use crate::entries::TimerHandle;
use crate::wheel::level::Position;
fn schedule<T: std::fmt::Debug>(wheel: &mut TimingWheel<T>, deadline: u64, task: T) -> TimerHandle {
    match wheel.insert(deadline, task) {
        Insertion::Scheduled(handle) => handle,
        Insertion::Expired(task) => panic!("{task:?} (deadline {deadline}) expired at insert"),
    }
}

/// Advances bucket by bucket up to `until`, returning `(now, task)` for every
/// fired task, and checks that none fires before its deadline.
fn run_until(wheel: &mut TimingWheel<u64>, until: u64) -> Vec<(u64, u64)> {
    let mut fired = Vec::new();
    while let Some(next) = wheel.next_expiration().filter(|&n| n <= until) {
        wheel.advance(next, |deadline| {
            assert!(deadline <= next, "task due at {deadline} fired at {next}");
            fired.push((next, deadline));
        });
    }
    wheel.advance(until, |deadline| fired.push((until, deadline)));
    fired
}

// ---- Kafka's TimingWheelTest: tick 10 ms, 5 buckets (interval 50), start 1000.

fn kafka_wheel() -> TimingWheel<&'static str> {
    TimingWheel::new(10, 5, 1000).unwrap()
}

#[test]
fn add_valid_task() {
    let mut wheel = kafka_wheel();
    assert!(matches!(wheel.insert(1020, "t"), Insertion::Scheduled(_)));
    assert!(!wheel.delay_queue().is_empty());
    assert_eq!(wheel.len(), 1);
}

#[test]
fn overflow_wheel_is_created_once_lazily() {
    let mut wheel = kafka_wheel();
    assert_eq!(wheel.levels(), 1);
    schedule(&mut wheel, 1060, "a");
    assert_eq!(wheel.levels(), 2);
    assert_eq!(wheel.level_tick(1), Some(50));
    schedule(&mut wheel, 1061, "b");
    assert_eq!(wheel.levels(), 2, "the same overflow wheel is reused");
}

#[test]
fn advance_moves_the_overflow_wheel_to_its_own_tick() {
    let mut wheel = kafka_wheel();
    schedule(&mut wheel, 1060, "t");
    let mut fired = Vec::new();
    wheel.advance(1060, |t| fired.push(t));
    assert_eq!(fired, ["t"]);
    assert_eq!(wheel.level_current_time(0), Some(1060));
    assert_eq!(wheel.level_current_time(1), Some(1050));
}

// ---- The seed article's worked example: tick 1 ms, 10 buckets, start 0.

#[test]
fn worked_example_9_88_222_520_521_522() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 10, 0).unwrap();
    let handles: Vec<(u64, TimerHandle)> = [9, 88, 222, 520, 521, 522]
        .into_iter()
        .map(|d| (d, schedule(&mut wheel, d, d)))
        .collect();
    let pos = |wheel: &TimingWheel<u64>, d: u64| {
        let handle = handles.iter().find(|(x, _)| *x == d).unwrap().1;
        wheel
            .position(handle)
            .map(|p| (p.level + 1, p.slot, p.bucket_expiration))
    };
    // Levels are numbered from 1 as in the article: (level, slot, bucket expiration).
    assert_eq!(pos(&wheel, 9), Some((1, 9, 9)));
    assert_eq!(pos(&wheel, 88), Some((2, 8, 80)));
    assert_eq!(pos(&wheel, 222), Some((3, 2, 200)));
    for d in [520, 521, 522] {
        assert_eq!(pos(&wheel, d), Some((3, 5, 500)));
    }
    assert_eq!(wheel.levels(), 3);

    assert_eq!(run_until(&mut wheel, 9), vec![(9, 9)]);
    assert_eq!(run_until(&mut wheel, 80), vec![]);
    assert_eq!(pos(&wheel, 88), Some((1, 8, 88)), "88 cascaded to level 1");
    assert_eq!(run_until(&mut wheel, 88), vec![(88, 88)]);

    assert_eq!(run_until(&mut wheel, 200), vec![]);
    assert_eq!(
        pos(&wheel, 222),
        Some((2, 2, 220)),
        "222: level 3 -> level 2"
    );
    assert_eq!(run_until(&mut wheel, 220), vec![]);
    assert_eq!(
        pos(&wheel, 222),
        Some((1, 2, 222)),
        "222: level 2 -> level 1"
    );
    assert_eq!(run_until(&mut wheel, 221), vec![], "never early");
    assert_eq!(run_until(&mut wheel, 222), vec![(222, 222)]);

    assert_eq!(run_until(&mut wheel, 500), vec![]);
    for d in [520, 521, 522] {
        assert_eq!(pos(&wheel, d), Some((2, 2, 520)));
    }
    assert_eq!(run_until(&mut wheel, 520), vec![(520, 520)]);
    assert_eq!(pos(&wheel, 521), Some((1, 1, 521)));
    assert_eq!(pos(&wheel, 522), Some((1, 2, 522)));
    assert_eq!(run_until(&mut wheel, 600), vec![(521, 521), (522, 522)]);
    assert!(wheel.is_empty());
}

// ---- Boundaries of every level, cascading, jumping.

#[test]
fn each_level_boundary_goes_to_the_right_level() {
    for start in [0u64, 12_345, 7_999_999] {
        let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, start).unwrap();
        for level in 0..7usize {
            // Make sure the level exists, then read its range.
            schedule(&mut wheel, start + 20u64.pow(level as u32) * 19 + 1, 0);
            let tick = wheel.level_tick(level).unwrap();
            let end = wheel.level_current_time(level).unwrap() + tick * 20;
            let last = schedule(&mut wheel, end - 1, end - 1);
            let first_above = schedule(&mut wheel, end, end);
            assert_eq!(
                wheel.position(last).unwrap().level,
                level,
                "start {start}: {} fits level {level}",
                end - 1
            );
            assert_eq!(
                wheel.position(first_above).unwrap().level,
                level + 1,
                "start {start}: {end} overflows level {level}"
            );
        }
        // Everything fires at exactly its deadline, from any level.
        let fired = run_until(&mut wheel, u64::MAX / 8);
        assert!(
            fired
                .iter()
                .all(|&(now, deadline)| now == deadline || deadline == 0),
            "{fired:?}"
        );
        assert!(wheel.is_empty());
    }
}

#[test]
fn cascade_walks_down_every_level_and_fires_on_time() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    // The task sits in the first half of each coarse bucket's range, so
    // each bucket's early pass (half its tick before its range starts)
    // moves it one level down.
    let deadline = 3 * 160_000 + 2 * 8_000 + 7 * 400 + 3 * 20 + 5; // 498_865
    let handle = schedule(&mut wheel, deadline, deadline);
    let mut levels_seen = vec![wheel.position(handle).unwrap().level];
    let mut steps = 0;
    while let Some(next) = wheel.next_expiration() {
        steps += 1;
        let mut fired = 0;
        wheel.advance(next, |d| {
            assert_eq!(d, next);
            fired += 1;
        });
        match wheel.position(handle) {
            Some(Position {
                level,
                bucket_expiration,
                ..
            }) => {
                assert!(bucket_expiration <= deadline);
                levels_seen.push(level)
            }
            None => assert_eq!((fired, next), (1, deadline)),
        }
    }
    assert_eq!(levels_seen, vec![4, 3, 2, 1, 0]);
    assert_eq!(steps, 5, "one jump per level: no empty ticks");
}

#[test]
fn early_pass_moves_the_first_half_before_the_range_starts() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    // 400 tasks in the level-2 bucket [400, 800), queued half its tick
    // (200 ms) early: at 200.
    let handles: Vec<_> = (400..800).map(|d| schedule(&mut wheel, d, d)).collect();
    assert!(handles
        .iter()
        .all(|&h| wheel.position(h).unwrap().level == 2));
    assert_eq!(wheel.next_expiration(), Some(200));
    assert_eq!(wheel.advance(200, |_| panic!("nothing is due at 200")), 0);
    // Level 1 now spans [200, 600): everything below 600 moved down early.
    for (d, &h) in (400..800).zip(&handles) {
        let level = wheel.position(h).unwrap().level;
        assert_eq!(level, if d < 600 { 1 } else { 2 }, "task {d}");
    }
    // The other half moves at 400 (the final pass), and all fire on time.
    assert_eq!(wheel.advance(400, |d| assert_eq!(d, 400)), 1);
    assert!(handles[200..]
        .iter()
        .all(|&h| wheel.position(h).unwrap().level < 2));
    let fired = run_until(&mut wheel, 800);
    assert_eq!(fired.len(), 399);
    assert!(fired.iter().all(|&(now, d)| now == d));
}

#[test]
fn a_long_final_pass_gives_way_to_due_buckets() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    // The level-1 bucket [40, 60): its early pass (at 30) moves what is
    // below 50; 1,000 tasks due at 55 wait for its final pass at 40.
    for i in 0..1_000 {
        schedule(&mut wheel, 55, i);
    }
    let soon = schedule(&mut wheel, 41, 41);
    assert_eq!(wheel.advance(30, |_| panic!("nothing is due at 30")), 0);
    assert_eq!(wheel.position(soon).unwrap().level, 0);
    // At 41 the final pass starts, but the task due at 41 fires after one
    // slice of it, not after all of it.
    let mut fired = Vec::new();
    let mut calls = 0;
    while fired.is_empty() {
        calls += 1;
        let step = wheel.advance_bounded(41, 10, |t| fired.push(t));
        assert!(!step.done, "the final pass is not finished yet");
    }
    assert_eq!(fired, [41]);
    assert!(calls <= 3, "waited for {calls} slices");
    // The rest of the pass runs when nothing is due, and everything fires at
    // its deadline.
    while !wheel.advance_bounded(41, 10, |t| fired.push(t)).done {}
    assert_eq!(fired.len(), 1);
    assert_eq!(wheel.advance(54, |_| panic!("nothing is due before 55")), 0);
    assert_eq!(wheel.advance(55, |_| {}), 1_000);
    assert!(wheel.is_empty());
}

#[test]
fn passes_spread_over_their_slack_still_fire_everything_on_time() {
    // A W3-like load: 200,000 deadlines spread over 10 s, so coarse buckets
    // hold thousands of entries. Advanced every tick the way the timer does
    // it (due work first, then the background share of paused passes), every
    // task fires exactly at its deadline and no tick moves much more than its
    // share.
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let deadline = 1 + x % 10_000;
        schedule(&mut wheel, deadline, deadline);
    }
    let mut fired = 0;
    let mut most_moved_in_a_tick = 0;
    for now in 1..=10_000u64 {
        let mut moved = 0;
        let mut on_time = |d: u64| {
            assert_eq!(d, now, "task due at {d} fired at {now}");
            fired += 1;
        };
        loop {
            let step = wheel.advance_due(now, 256, &mut on_time);
            moved += step.moved;
            if step.done {
                break;
            }
        }
        if wheel.paused_finish_by().is_some() {
            let mut left = wheel.background_allowance(now).max(256);
            while left > 0 {
                let step = wheel.advance_bounded(now, left.min(256), &mut on_time);
                moved += step.moved;
                left = left.saturating_sub(step.moved);
                if step.done {
                    break;
                }
            }
        }
        most_moved_in_a_tick = most_moved_in_a_tick.max(moved);
    }
    assert_eq!(fired, 200_000);
    assert!(wheel.is_empty());
    // Without spreading, the level-3 bucket's pass alone would move ~40,000
    // entries in one tick.
    assert!(
        most_moved_in_a_tick < 5_000,
        "a tick moved {most_moved_in_a_tick} entries"
    );
}

#[test]
fn bounded_advance_resumes_and_allows_cancel_midway() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    // 10,000 tasks in the level-3 bucket [8000, 16000), early pass at 4000.
    let handles: Vec<_> = (0..10_000)
        .map(|i| schedule(&mut wheel, 8_000 + i % 400, i))
        .collect();
    let mut fired = Vec::new();
    let first = wheel.advance_bounded(4_000, 100, |t| fired.push(t));
    assert!(!first.done);
    assert_eq!(first.moved, 100);
    assert_eq!(first.buckets, 1);
    assert_eq!(
        wheel.next_expiration(),
        Some(4_000),
        "the paused pass is still next"
    );
    // Cancel a task the paused pass has not reached (the bucket's last) and
    // one it has already moved.
    assert_eq!(wheel.cancel(handles[9_999]), Some(9_999));
    assert_eq!(wheel.cancel(handles[1]), Some(1));
    let mut calls = 1;
    while !wheel.advance_bounded(8_000, 100, |t| fired.push(t)).done {
        calls += 1;
    }
    assert!(calls > 90, "the flush really was chunked ({calls} calls)");
    // Everything due at 8000 fired; the rest waits.
    fired.sort_unstable();
    let due: Vec<u64> = (0..10_000).filter(|i| i % 400 == 0).collect();
    assert_eq!(fired, due);
    assert_eq!(wheel.len(), 10_000 - due.len() - 2);
    assert_eq!(wheel.advance(9_000, |_| {}), 10_000 - due.len() - 2);
}

#[test]
fn cancelling_the_entry_under_a_paused_early_pass_cursor() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    let handles: Vec<_> = (8_000..8_010).map(|d| schedule(&mut wheel, d, d)).collect();
    // Stop after 3 entries: the cursor now rests on entry 3.
    assert!(!wheel.advance_bounded(7_600, 3, |_| {}).done);
    assert_eq!(wheel.cancel(handles[3]), Some(8_003));
    assert!(wheel.advance_bounded(7_600, usize::MAX, |_| {}).done);
    let fired = run_until(&mut wheel, 9_000);
    assert!(fired.iter().all(|&(now, d)| now == d));
    let tasks: Vec<u64> = fired.iter().map(|&(_, d)| d - 8_000).collect();
    assert_eq!(tasks, vec![0, 1, 2, 4, 5, 6, 7, 8, 9]);
}

/// Chunk by chunk, how many tasks each bounded advance to `now` hands out,
/// until nothing due is left; checks that none is early.
fn hand_overs_per_chunk(wheel: &mut TimingWheel<u64>, now: u64, budget: usize) -> Vec<usize> {
    let mut chunks = Vec::new();
    loop {
        let mut handed = 0;
        let step = wheel.advance_bounded(now, budget, |deadline| {
            assert!(deadline <= now, "task due at {deadline} fired at {now}");
            handed += 1;
        });
        chunks.push(handed);
        if step.done {
            return chunks;
        }
    }
}

/// A burst sharing one deadline in a coarse bucket, whose final pass has
/// not started when the deadline comes: the first chunk already hands tasks
/// out, instead of the whole bucket moving down the levels first.
#[test]
fn a_burst_found_due_by_a_cascade_is_handed_out_chunk_by_chunk() {
    const N: u64 = 2_000;
    const BUDGET: usize = 256;
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    // Level 2 (400 ms buckets), bucket [800, 1200): its early pass (at 600)
    // keeps them all, beyond level 1's reach, for the final pass at 800.
    let handles: Vec<_> = (0..N).map(|_| schedule(&mut wheel, 1_010, 1_010)).collect();
    assert!(handles
        .iter()
        .all(|&h| wheel.position(h).unwrap().level == 2));
    let chunks = hand_overs_per_chunk(&mut wheel, 1_010, BUDGET);
    assert_eq!(chunks[0], BUDGET, "the first chunk hands out a full budget");
    assert_eq!(chunks.iter().sum::<usize>() as u64, N);
    assert!(wheel.is_empty());
}

/// The same with the final pass under way in the background when the
/// deadline comes: what it has moved and what it still has both go out in
/// chunks as soon as they are due.
#[test]
fn a_burst_under_a_paused_final_pass_starts_out_with_the_first_chunk() {
    const N: u64 = 2_000;
    const BUDGET: usize = 256;
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    for _ in 0..N {
        schedule(&mut wheel, 1_010, 1_010);
    }
    // At 800 the final pass starts; only what cannot wait is done, so it
    // moves a chunk and pauses with slack left (its entries are due at
    // 1010).
    while !wheel
        .advance_due(800, BUDGET, |_| panic!("nothing is due at 800"))
        .done
    {}
    assert_eq!(wheel.paused_finish_by(), Some(1_010));
    let chunks = hand_overs_per_chunk(&mut wheel, 1_010, BUDGET);
    assert!(chunks[0] > 0, "first chunk: {chunks:?}");
    assert!(
        chunks.iter().all(|&c| c > 0),
        "every chunk hands tasks out: {chunks:?}"
    );
    assert_eq!(chunks.iter().sum::<usize>() as u64, N);
    assert!(wheel.is_empty());
}

// ---- Memory: an emptied wheel gives its arena back.

#[test]
fn a_wide_wheel_keeps_little_room_in_its_buckets_once_a_peak_is_gone() {
    // 32 tasks in each of 4,095 level-0 buckets: every array grows to 32
    // entries, more than a 4,096-bucket level keeps room for each.
    const SIZE: u64 = 4096;
    const PER_BUCKET: u64 = 32;
    let keep = crate::bucket::keep_capacity(SIZE) as usize;
    assert!(keep < PER_BUCKET as usize);
    let mut wheel = TimingWheel::new(1, SIZE as usize, 0).unwrap();
    for deadline in 1..SIZE {
        for _ in 0..PER_BUCKET {
            schedule(&mut wheel, deadline, deadline);
        }
    }
    assert!(wheel.bucket_capacity() >= ((SIZE - 1) * PER_BUCKET) as usize);
    let fired = run_until(&mut wheel, SIZE);
    assert_eq!(fired.len() as u64, (SIZE - 1) * PER_BUCKET);
    assert!(
        wheel.bucket_capacity() <= (SIZE - 1) as usize * keep,
        "{} entries of room kept",
        wheel.bucket_capacity()
    );
}

#[test]
fn a_wheel_emptied_by_expiry_or_cancel_frees_its_arena_and_keeps_working() {
    use crate::entries::KEEP_SLOTS;
    let n = 2 * KEEP_SLOTS as u64;
    let mut wheel = TimingWheel::new(1, 20, 0).unwrap();
    let handles: Vec<_> = (1..=n).map(|d| schedule(&mut wheel, d, d)).collect();
    assert!(wheel.entries.capacity() >= n as usize);
    let fired = run_until(&mut wheel, n);
    assert_eq!(fired.len(), n as usize);
    assert!(wheel.is_empty());
    assert_eq!(wheel.entries.capacity(), 0, "expired to empty: arena freed");
    assert!(handles.iter().all(|&h| wheel.cancel(h).is_none()));

    // Stale handles stay harmless once indices are reused from 0.
    let again: Vec<_> = (1..=n).map(|d| schedule(&mut wheel, n + d, d)).collect();
    assert!(handles.iter().all(|&h| !wheel.contains(h)));
    assert_eq!(wheel.len(), n as usize);
    for (i, &h) in again.iter().enumerate() {
        assert_eq!(wheel.cancel(h), Some(i as u64 + 1));
    }
    assert_eq!(
        wheel.entries.capacity(),
        0,
        "cancelled to empty: arena freed"
    );
    assert!(run_until(&mut wheel, 3 * n).is_empty());
}

#[test]
fn final_passes_keep_nothing_at_any_deadline_of_the_range() {
    // Tick 1, 20 buckets: level 2 spans 400 ms per bucket. Every deadline of
    // two adjacent level-2 buckets, both ends included, moved by bounded
    // passes that pause and resume: each pass ends (a final pass that kept
    // an entry would pop it again for ever) and each task fires once, on
    // time.
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    let deadlines = 800..=1_600u64;
    for deadline in deadlines.clone() {
        schedule(&mut wheel, deadline, deadline);
    }
    let mut fired = Vec::new();
    let mut calls = 0;
    while let Some(next) = wheel.next_expiration() {
        loop {
            calls += 1;
            assert!(calls < 100_000, "a pass does not end");
            let step = wheel.advance_bounded(next, 7, |deadline| {
                assert!(deadline <= next, "task due at {deadline} fired at {next}");
                fired.push(deadline);
            });
            if step.done {
                break;
            }
        }
    }
    fired.sort_unstable();
    assert_eq!(fired, deadlines.collect::<Vec<_>>());
    assert!(wheel.is_empty());
}
