//! Passes over crowded coarse buckets, looked at from inside: a bucket
//! paused mid-way, with cancels next to where its pass stopped and new
//! entries arriving while it is paused; level
//! boundaries under a tick that does not divide evenly; and huge jumps of
//! time. Virtual time only.

use super::{Insertion, TimingWheel, MAX_DEADLINE_MS};
use crate::bucket::{FRONT, LOOKAHEAD};
use crate::entries::{TimerHandle, MAX_LEVELS};

fn schedule(wheel: &mut TimingWheel<u64>, deadline: u64) -> TimerHandle {
    let task = wheel.round_deadline(deadline);
    match wheel.insert(deadline, task) {
        Insertion::Scheduled(handle) => handle,
        Insertion::Expired(_) => panic!("deadline {deadline} expired at insert"),
    }
}

/// Advances bucket by bucket up to `until`; returns `(now, task)` for every
/// fired task (a task is its rounded deadline).
fn run_until(wheel: &mut TimingWheel<u64>, until: u64) -> Vec<(u64, u64)> {
    let mut fired = Vec::new();
    while let Some(next) = wheel.next_expiration().filter(|&n| n <= until) {
        wheel.advance(next, |d| fired.push((next, d)));
    }
    wheel.advance(until, |d| fired.push((until, d)));
    fired
}

/// The bucket id a waiting task is linked into, found by looking through
/// every bucket (not from its slot, as the wheel does).
fn bucket_of(wheel: &TimingWheel<u64>, handle: TimerHandle) -> u32 {
    let index = wheel.entries.resolve(handle).expect("waiting");
    let found = wheel
        .buckets
        .iter()
        .position(|b| b.iter().any(|i| i == index));
    found.expect("linked in a bucket") as u32
}

impl TimingWheel<u64> {
    /// The bucket id a waiting task's slot names (its level and deadline).
    fn bucket_id_of(&self, handle: TimerHandle) -> u32 {
        let slot = self.entries.slot(self.entries.resolve(handle).unwrap());
        self.bucket_id(slot.state() as usize, slot.deadline)
    }
}

#[test]
fn a_paused_early_pass_survives_cancels_around_where_it_stopped_and_new_back_entries() {
    // Tick 1, 20 buckets: the level-1 bucket [100, 120) has its early pass
    // at 90, which moves 100..110 (the front) and leaves 110..120 (the
    // back). 96 entries alternate front and back.
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    let handles: Vec<TimerHandle> = (0..96u64)
        .map(|i| schedule(&mut wheel, 100 + (i * 7) % 20))
        .collect();
    let id = bucket_of(&wheel, handles[0]);
    assert!(handles.iter().all(|&h| bucket_of(&wheel, h) == id));
    assert!(handles.iter().all(|&h| wheel.bucket_id_of(h) == id));
    assert!(wheel.buckets[id as usize].len() > 2 * LOOKAHEAD);

    // A few entries into the early pass, it pauses.
    let step = wheel.advance_bounded(90, 12, |d| panic!("{d} fired at 90"));
    assert!(!step.done);
    assert!(wheel.buckets[id as usize].paused);

    // Cancel the entries the pass takes next (the front's last ones), its
    // first ones (each cancel moves the last entry into the hole) and some
    // at the back.
    let front: Vec<u32> = wheel.buckets[id as usize]
        .iter()
        .filter(|&i| wheel.entries.slot(i).pos & FRONT != 0)
        .collect();
    let back: Vec<u32> = wheel.buckets[id as usize]
        .iter()
        .filter(|&i| wheel.entries.slot(i).pos & FRONT == 0)
        .collect();
    let targets: Vec<u32> = front[front.len() - 3..]
        .iter()
        .chain(&front[..3])
        .chain(&back[..2])
        .chain(&back[back.len() - 2..])
        .copied()
        .collect();
    let mut cancelled = Vec::new();
    for &h in &handles {
        if wheel
            .entries
            .resolve(h)
            .is_some_and(|i| targets.contains(&i))
        {
            cancelled.push(wheel.cancel(h).unwrap());
        }
    }
    assert_eq!(cancelled.len(), targets.len());

    // New entries while paused: 115 joins the paused bucket's back (level 0
    // spans only [90, 110)), 105 goes to level 0, 119 equals the last back
    // deadline.
    let late: Vec<TimerHandle> = [115, 105, 119, 110, 109]
        .into_iter()
        .map(|d| schedule(&mut wheel, d))
        .collect();
    assert_eq!(bucket_of(&wheel, late[0]), id);
    assert_eq!(bucket_of(&wheel, late[2]), id);
    assert_eq!(bucket_of(&wheel, late[3]), id);
    assert!(bucket_of(&wheel, late[1]) < 20 && bucket_of(&wheel, late[4]) < 20);

    let fired = run_until(&mut wheel, 200);
    assert!(fired.iter().all(|&(now, d)| now == d), "{fired:?}");
    let mut got: Vec<u64> = fired.iter().map(|&(_, d)| d).collect();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..96u64).map(|i| 100 + (i * 7) % 20).collect();
    for d in cancelled {
        let at = want.iter().position(|&w| w == d).unwrap();
        want.remove(at);
    }
    want.extend([115, 105, 119, 110, 109]);
    want.sort_unstable();
    assert_eq!(got, want);
    assert!(wheel.is_empty());
}

#[test]
fn cancelling_every_entry_of_a_paused_pass_ends_the_bucket_round() {
    let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 20, 0).unwrap();
    let handles: Vec<TimerHandle> = (0..40u64)
        .map(|i| schedule(&mut wheel, 100 + i % 20))
        .collect();
    let id = bucket_of(&wheel, handles[0]);
    assert!(!wheel.advance_bounded(90, 3, |_| {}).done);
    let left: usize = handles
        .iter()
        .filter(|&&h| wheel.cancel(h).is_some())
        .count();
    assert_eq!(left + wheel.len(), 40);
    assert!(wheel.advance(90, |d| panic!("{d} fired at 90")) == 0);
    let moved_early: Vec<u64> = run_until(&mut wheel, 200)
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    assert!(moved_early.iter().all(|&d| d < 110), "{moved_early:?}");
    assert!(wheel.is_empty());
    assert!(!wheel.buckets[id as usize].paused);
    // The bucket takes a later round cleanly.
    let again = schedule(&mut wheel, 500);
    assert_eq!(run_until(&mut wheel, 600), [(500, 500)]);
    assert!(!wheel.contains(again));
}

#[test]
fn level_boundaries_under_a_seven_ms_tick_fire_on_time() {
    for wheel_size in [2usize, 3, 20] {
        let start = 1_003;
        let mut wheel: TimingWheel<u64> = TimingWheel::new(7, wheel_size, start).unwrap();
        let mut want = Vec::new();
        for level in 0..5u32 {
            let interval = 7 * (wheel_size as u64).pow(level + 1);
            let base = start - start % interval;
            for k in 1..3 {
                for off in [-1i64, 0, 1] {
                    let deadline = (base + k * interval).saturating_add_signed(off);
                    if deadline.div_ceil(7) * 7 > start - start % 7 + 7 {
                        schedule(&mut wheel, deadline);
                        want.push(deadline.div_ceil(7) * 7);
                    }
                }
            }
        }
        let fired = run_until(&mut wheel, 1 << 30);
        assert!(
            fired.iter().all(|&(now, d)| now == d),
            "size {wheel_size}: {fired:?}"
        );
        let mut got: Vec<u64> = fired.into_iter().map(|(_, d)| d).collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "size {wheel_size}");
    }
}

#[test]
fn after_a_huge_jump_new_entries_land_in_the_right_slots() {
    for (tick, wheel_size) in [(1u64, 20usize), (7, 3), (10, 64), (1, 2)] {
        let mut wheel: TimingWheel<u64> = TimingWheel::new(tick, wheel_size, 0).unwrap();
        for d in [5u64, 500, 50_000, 5_000_000, 1 << 33] {
            schedule(&mut wheel, d);
        }
        let jump = (1u64 << 40) + 3;
        assert_eq!(wheel.advance(jump, |d| assert!(d <= jump)), 5);
        // The levels' current slots follow the jump: entries added now fire
        // exactly at their (rounded) deadlines, from every level.
        let mut want = Vec::new();
        for delay in [1u64, 2, 19, 20, 21, 399, 400, 401, 8_000, 1 << 20] {
            let deadline = jump + delay;
            schedule(&mut wheel, deadline);
            want.push(deadline.div_ceil(tick) * tick);
        }
        let fired = run_until(&mut wheel, jump + (1 << 21));
        assert!(
            fired.iter().all(|&(now, d)| now == d),
            "tick {tick}: {fired:?}"
        );
        let got: Vec<u64> = fired.into_iter().map(|(_, d)| d).collect();
        want.sort_unstable();
        assert_eq!(got, want, "tick {tick}, size {wheel_size}");
    }
}

#[test]
fn the_deepest_wheel_names_every_level_in_its_slots() {
    // A two-bucket wheel with a 1 ms tick needs the most levels; a slot
    // names its level in a few bits (see `MAX_LEVELS`).
    for start in [0, MAX_DEADLINE_MS / 3, MAX_DEADLINE_MS - 5] {
        let mut wheel: TimingWheel<u64> = TimingWheel::new(1, 2, start).unwrap();
        let far = schedule(&mut wheel, MAX_DEADLINE_MS);
        let near = schedule(&mut wheel, start + 3);
        let mid = schedule(&mut wheel, start / 2 + MAX_DEADLINE_MS / 2);
        assert!(wheel.levels() <= MAX_LEVELS as usize, "{}", wheel.levels());
        for h in [far, near, mid] {
            assert_eq!(wheel.bucket_id_of(h), bucket_of(&wheel, h));
        }
        assert_eq!(wheel.cancel(mid), Some(start / 2 + MAX_DEADLINE_MS / 2));
        let mut fired = Vec::new();
        wheel.advance(u64::MAX, |d| fired.push(d));
        fired.sort_unstable();
        assert_eq!(fired, [start + 3, MAX_DEADLINE_MS]);
        assert!(!wheel.contains(far) && !wheel.contains(near));
    }
}
