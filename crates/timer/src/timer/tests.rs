//! The timer's sharding: where adds go while shards are held, and that a
//! shard's wheel keeps its own time.

use super::*;
use crate::clock::ManualClock;
use crate::thread_index::thread_index;
use std::sync::mpsc;

fn two_shards() -> (ManualClock, Timer) {
    let clock = ManualClock::new();
    let timer = TimerBuilder::new()
        .clock(clock.clone())
        .shards(2)
        .build()
        .expect("valid configuration");
    (clock, timer)
}

#[test]
fn an_add_goes_to_a_free_shard_while_its_own_is_held() {
    let (clock, timer) = two_shards();
    let own = thread_index() % 2;
    let (fired, rx) = mpsc::channel();
    let held = timer.shards[own].state.lock();
    let fired2 = fired.clone();
    let a = timer
        .add(
            Duration::from_millis(5),
            Box::new(move || fired.send("a").unwrap()),
        )
        .unwrap();
    assert_eq!(a.shard(), 1 - own);
    drop(held);
    let b = timer
        .add(
            Duration::from_millis(5),
            Box::new(move || fired2.send("b").unwrap()),
        )
        .unwrap();
    assert_eq!(b.shard(), own);
    assert_eq!(timer.len(), 2);

    // The task in the other shard fires and the one in its own cancels
    // as usual.
    assert!(timer.cancel(&b));
    clock.advance_ms(5);
    assert!(timer.advance_clock(Duration::ZERO));
    timer.wait_for_executor();
    assert_eq!(rx.try_recv(), Ok("a"));
    assert!(rx.try_recv().is_err(), "the cancelled task ran");
    assert_eq!(timer.len(), 0);
    timer.shutdown();
}

#[test]
fn an_add_waits_for_its_own_shard_while_every_shard_is_held() {
    let (_clock, timer) = two_shards();
    let timer = Arc::new(timer);
    let held = [timer.shards[0].state.lock(), timer.shards[1].state.lock()];
    let (done, rx) = mpsc::channel();
    let adder = std::thread::spawn({
        let timer = timer.clone();
        move || {
            let own = thread_index() % 2;
            let handle = timer.add(Duration::from_secs(1), Box::new(|| {})).unwrap();
            done.send(()).unwrap();
            (own, handle)
        }
    });
    // Proves only that the add has not returned yet; it cannot return
    // before the locks are released.
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    drop(held);
    let (own, handle) = adder.join().unwrap();
    assert_eq!(handle.shard(), own);
    assert!(timer.cancel(&handle));
    timer.shutdown();
}

/// Adds forced into a shard that has been idle while the adder's own
/// shard followed the clock (every other shard held) fire exactly at
/// their deadlines: a shard's wheel time is its own, whichever thread
/// adds.
#[test]
fn adds_sent_to_an_idle_shard_fire_exactly_on_time() {
    for (shards, tick) in [(2, 1), (2, 10), (64, 7)] {
        for warm in [0, 36_000_000] {
            adds_into_an_idle_shard(shards, tick, warm);
        }
    }
}

fn adds_into_an_idle_shard(shards: usize, tick: u64, warm: u64) {
    let clock = ManualClock::new();
    let timer: Timer = TimerBuilder::new()
        .clock(clock.clone())
        .tick(Duration::from_millis(tick))
        .shards(shards)
        .build()
        .expect("valid configuration");
    let own = thread_index() % shards;
    let idle = (own + 1) % shards;
    // Only the own shard's wheel follows the clock up to `warm`.
    let mut t = 0;
    while t < warm {
        let step = (warm - t).min(7_919);
        timer
            .add(Duration::from_millis(step), Box::new(|| {}))
            .unwrap();
        t += step;
        clock.set_ms(t);
        timer.advance_clock(Duration::ZERO);
    }
    timer.wait_for_executor();

    let fired = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut deadlines = Vec::new();
    {
        let held: Vec<_> = (0..shards)
            .filter(|&i| i != idle)
            .map(|i| timer.shards[i].state.lock())
            .collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..400u64 {
            // xorshift64: delays from 1 ms to ~6 hours.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let delay = 1 + x % [50, 2_000, 100_000, 20_000_000][i as usize % 4];
            let deadline = (clock.now_ms() + delay).div_ceil(tick) * tick;
            let (fired, clock2) = (fired.clone(), clock.clone());
            let handle = timer
                .add(
                    Duration::from_millis(delay),
                    Box::new(move || fired.lock().push((deadline, clock2.now_ms()))),
                )
                .unwrap();
            assert_eq!(handle.shard(), idle);
            deadlines.push(deadline);
        }
        drop(held);
    }
    let mut steps: Vec<u64> = deadlines.iter().flat_map(|&d| [d - 1, d]).collect();
    steps.sort_unstable();
    steps.dedup();
    for at in steps {
        clock.set_ms(at);
        timer.advance_clock(Duration::ZERO);
        timer.wait_for_executor();
        let fired = fired.lock();
        assert!(fired.iter().all(|&(d, ran)| ran >= d), "a task ran early");
        let due = deadlines.iter().filter(|&&d| d <= at).count();
        assert_eq!(fired.len(), due, "{shards} shards, tick {tick}: at {at} ms");
    }
    assert_eq!(timer.len(), 0);
    timer.shutdown();
}

/// A shutdown that lands between a visit taking a chunk of due tasks out of
/// a shard and handing them to the executor: those tasks are neither in the
/// wheel (so `shutdown` cannot hand them back) nor run yet. They must still
/// run: shutdown waits for the hand-over before it closes the executor.
#[test]
fn a_shutdown_during_a_chunked_hand_over_loses_no_task() {
    use std::sync::OnceLock;
    use std::time::Instant;

    const N: usize = 4 * wakeup::FLUSH_CHUNK; // several flush chunks
    let (timer, ran) = due_at_5(N);
    // Handed back by the shutdown, once it has returned.
    let handed_back: Arc<OnceLock<usize>> = Arc::new(OnceLock::new());
    let (hook_timer, hook_back) = (timer.clone(), handed_back.clone());
    let mut first = true;
    wakeup::BEFORE_HAND_OVER.set(Some(Box::new(move || {
        if !std::mem::take(&mut first) {
            return;
        }
        let (timer, back) = (hook_timer.clone(), hook_back.clone());
        std::thread::spawn(move || back.set(timer.shutdown().len()).unwrap());
        // Let the shutdown get as far as it can without this chunk: to its
        // end, or (waiting for the hand-over) not.
        let waited = Instant::now();
        while hook_back.get().is_none() && waited.elapsed() < Duration::from_millis(100) {
            std::thread::yield_now();
        }
    })));
    timer.advance_clock(Duration::ZERO);
    wakeup::BEFORE_HAND_OVER.set(None);
    let waited = Instant::now();
    while handed_back.get().is_none() && waited.elapsed() < Duration::from_secs(1) {
        std::thread::yield_now();
    }
    let back = *handed_back.get().expect("shutdown returned");
    // Shutdown ran on another thread: it ran what the executor had been handed.
    assert_eq!(
        ran.load(Ordering::SeqCst) + back,
        N,
        "ran {}, handed back {back}",
        ran.load(Ordering::SeqCst)
    );
}

#[test]
fn a_timer_emptied_by_batched_cancels_frees_every_shard_arena() {
    let (clock, timer) = two_shards();
    let n = 3 * crate::entries::KEEP_SLOTS;
    let mut handles: Vec<TimerHandle> = (0..n)
        .map(|i| {
            timer
                .add(Duration::from_millis(10 + i as u64), Box::new(|| {}))
                .unwrap()
        })
        .collect();
    assert!(arena_capacity(&timer) >= n);
    assert_eq!(timer.cancel_all(&mut handles), n);
    assert_eq!(timer.len(), 0);
    assert_eq!(arena_capacity(&timer), 0);
    // The wheels still visit the buckets the cancelled tasks were in.
    clock.advance_ms(10 * n as u64);
    timer.advance_clock(Duration::ZERO);
    assert_eq!((timer.len(), arena_capacity(&timer)), (0, 0));
    timer.shutdown();
}

/// Slots the arenas of all of `timer`'s wheels hold.
fn arena_capacity(timer: &Timer) -> usize {
    let shards = timer.shards.iter();
    shards.map(|s| s.state.lock().wheel.arena_capacity()).sum()
}

#[test]
fn an_arena_emptied_by_expiry_is_freed_on_the_executor_after_its_tasks() {
    let (clock, timer) = two_shards();
    let (open, gate) = mpsc::channel::<()>();
    // Due at once: straight to the executor, which it then blocks.
    timer
        .add(Duration::ZERO, Box::new(move || gate.recv().unwrap()))
        .unwrap();
    let n = 2 * crate::entries::KEEP_SLOTS;
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..n {
        let ran = ran.clone();
        let task = move || {
            ran.fetch_add(1, Ordering::SeqCst);
        };
        timer
            .add(Duration::from_millis(10), Box::new(task))
            .unwrap();
    }
    clock.advance_ms(10);
    assert!(timer.advance_clock(Duration::ZERO));
    // The wheel gave its arena up; the memory waits at the executor behind
    // the gate and the tasks, counted as one more job.
    assert_eq!(arena_capacity(&timer), 0);
    assert_eq!(timer.executor.backlog(), 1 + n + 1);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    open.send(()).unwrap();
    timer.wait_for_executor();
    assert_eq!(ran.load(Ordering::SeqCst), n);
    assert_eq!(timer.executor.backlog(), 0);
    timer.shutdown();
}

/// Adds a task due at 37 ms (added at 0): the back of level 1's bucket
/// [20, 40), whose final pass at 20 has until 37 to move it into level 0.
fn add_due_at_37(timer: &Timer) -> TimerHandle {
    let handle = timer.add(Duration::from_millis(37), Box::new(|| {}));
    handle.unwrap()
}

/// How many of `handles` that shard `shard` issued sit in its level 0.
fn in_level_0(timer: &Timer, handles: &[TimerHandle], shard: usize) -> usize {
    let state = timer.shards[shard].state.lock();
    let mine = handles.iter().filter(|h| h.shard() == shard);
    mine.filter(|&&h| state.wheel.position(h).is_some_and(|p| p.level == 0))
        .count()
}

/// Moves the clock one millisecond at a time through `ms`, advancing the
/// timer at each.
fn tick_through(clock: &ManualClock, timer: &Timer, ms: std::ops::RangeInclusive<u64>) {
    for ms in ms {
        clock.set_ms(ms);
        timer.advance_clock(Duration::ZERO);
    }
}

/// A coarse bucket's final pass with slack is worked through a share per
/// tick even while another shard wakes every tick: a visit yields to a due
/// shard only after a chunk of its own work, and comes back as soon as
/// that shard has had a chunk, not a tick later.
#[test]
fn a_pass_with_slack_progresses_while_another_shard_wakes_every_tick() {
    let (clock, timer) = two_shards();
    let own = thread_index() % 2;
    let n = 20 * super::wakeup::FLUSH_CHUNK;
    let burst: Vec<TimerHandle> = (0..n).map(|_| add_due_at_37(&timer)).collect();
    assert!(burst.iter().all(|h| h.shard() == own));
    {
        // The other shard: one task due every millisecond.
        let _held = timer.shards[own].state.lock();
        for ms in 1..=40 {
            let handle = timer.add(Duration::from_millis(ms), Box::new(|| {}));
            assert_eq!(handle.unwrap().shard(), 1 - own);
        }
    }
    tick_through(&clock, &timer, 1..=36);
    // Each tick's share is twice what is left over the ticks left: the
    // pass is done before its deadline.
    assert_eq!(
        in_level_0(&timer, &burst, own),
        n,
        "left in level 1 at 36 ms"
    );
    assert_eq!(
        timer.shards[own].state.lock().wheel.paused_finish_by(),
        None
    );
    timer.shutdown();
}

/// Two shards with passes under way take turns chunk by chunk, and each
/// does one share per millisecond however often it yields and comes back:
/// a fresh share on every return would have them cascade everything at
/// once, a stall of milliseconds for the executor and the adders.
#[test]
fn shards_taking_turns_do_one_share_of_their_passes_per_millisecond() {
    let (clock, timer) = two_shards();
    let own = thread_index() % 2;
    let n = 40 * super::wakeup::FLUSH_CHUNK;
    let mut burst: Vec<TimerHandle> = (0..n).map(|_| add_due_at_37(&timer)).collect();
    {
        let _held = timer.shards[own].state.lock();
        burst.extend((0..n).map(|_| add_due_at_37(&timer)));
    }
    tick_through(&clock, &timer, 1..=20);
    // At 20 each final pass did a chunk as due work and one share (twice
    // what is left over the 17 ms of slack), no more.
    for shard in 0..2 {
        let moved = in_level_0(&timer, &burst, shard);
        assert!(moved > 0 && moved < n / 4, "shard {shard}: {moved} of {n}");
    }
    tick_through(&clock, &timer, 21..=36);
    let moved = [0, 1].map(|shard| in_level_0(&timer, &burst, shard));
    assert_eq!(moved, [n, n]);
    timer.shutdown();
}

/// An add that makes a shard due sooner queues a second wake-up and cannot
/// take the first out of the queue: that one is stale when it comes due,
/// and is dropped then, not re-armed, and a re-arm for a time already
/// queued queues nothing. Otherwise every such add would leave one more
/// wake-up, and one more visit per tick, for as long as the timer runs.
#[test]
fn stale_wake_ups_die_when_due_and_do_not_pile_up() {
    let clock = ManualClock::new();
    let timer: Timer = TimerBuilder::new()
        .clock(clock.clone())
        .shards(1)
        .build()
        .expect("valid configuration");
    let (fired, rx) = mpsc::channel();
    // Keeps the shard armed for its far bucket throughout.
    timer
        .add(Duration::from_millis(10_000), Box::new(|| {}))
        .unwrap();
    for ms in 1..=1_000u64 {
        let fired = fired.clone();
        let task: Box<dyn FnOnce() + Send> = Box::new(move || fired.send(ms).unwrap());
        timer.add(Duration::from_millis(1), task).unwrap();
        clock.set_ms(ms);
        timer.advance_clock(Duration::ZERO);
        assert!(
            timer.queue.len() <= 3,
            "at {ms} ms: {} wake-ups queued for one shard",
            timer.queue.len()
        );
    }
    timer.wait_for_executor();
    assert_eq!(rx.try_iter().count(), 1_000, "every task fired");
    assert_eq!(timer.len(), 1);
    timer.shutdown();
}

/// A one-shard timer on a manual clock with `n` tasks due at 5 ms, the
/// clock at 5 ms, and the count of those that ran.
fn due_at_5(n: usize) -> (Arc<Timer>, Arc<std::sync::atomic::AtomicUsize>) {
    let clock = ManualClock::new();
    let timer: Arc<Timer> = Arc::new(
        TimerBuilder::new()
            .clock(clock.clone())
            .shards(1)
            .build()
            .unwrap(),
    );
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..n {
        let ran = ran.clone();
        let task: Box<dyn FnOnce() + Send> = Box::new(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        });
        timer.add(Duration::from_millis(5), task).unwrap();
    }
    clock.set_ms(5);
    (timer, ran)
}

/// The reaper's call ends after the chunk it is handing over once its
/// time is up, with at least one chunk per call; the shard is re-armed, so
/// the next call goes on. The public `advance_clock` expires everything.
#[test]
fn a_bounded_advance_ends_after_one_chunk_once_its_time_is_up() {
    const N: usize = 3 * wakeup::FLUSH_CHUNK + 100;
    let (timer, ran) = due_at_5(N);
    for calls in 1..=2 {
        assert!(timer.advance_clock_bounded(Duration::ZERO));
        assert_eq!(timer.len(), N - calls * wakeup::FLUSH_CHUNK);
    }
    assert!(timer.advance_clock(Duration::ZERO));
    assert_eq!(timer.len(), 0);
    timer.wait_for_executor();
    assert_eq!(ran.load(Ordering::SeqCst), N);
}

/// A stop (`wake`) ends a bounded call after its next chunk, however long
/// its time; it does not end the public `advance_clock`.
#[test]
fn a_wake_ends_a_bounded_advance_after_its_next_chunk() {
    const N: usize = 4 * wakeup::FLUSH_CHUNK;
    let (timer, ran) = due_at_5(N);
    let woken = timer.clone();
    wakeup::BEFORE_HAND_OVER.set(Some(Box::new(move || woken.wake())));
    assert!(timer.advance_clock_bounded(Duration::from_secs(3600)));
    assert_eq!(timer.len(), N - 2 * wakeup::FLUSH_CHUNK);
    assert!(timer.advance_clock(Duration::ZERO));
    wakeup::BEFORE_HAND_OVER.set(None);
    assert_eq!(timer.len(), 0, "the public call stopped too");
    timer.wait_for_executor();
    assert_eq!(ran.load(Ordering::SeqCst), N);
}
