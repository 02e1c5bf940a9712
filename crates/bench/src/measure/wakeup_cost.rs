//! What the wake-ups a run takes cost on this machine, measured just before
//! the run, so that a report can tell the workload's own CPU apart from its
//! pacing's.

use super::cpu::{cpu_since, thread_cpu};
use parking_lot::{Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// The CPU time one wake-up of each kind the run uses costs on this machine,
/// measured just before the run (`None` where thread CPU time cannot be
/// read). A timed sleep costs tens of µs of CPU whatever its length, so at
/// paced rates the harness's own pacing is a large part of a run's CPU
/// (`purgatory-bench wakeups` compares the primitives); W2's report
/// subtracts these costs in a separate field so that what the purgatory
/// costs can be told apart from what waking up costs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WakeupCost {
    /// One timed sleep of about a millisecond (the clock thread's).
    pub timed_sleep: Option<Duration>,
    /// One untimed park woken by another thread's notify, both sides (the
    /// completion thread's).
    pub park: Option<Duration>,
}

impl WakeupCost {
    /// Batches measured per kind; the median batch is kept, as a VM's
    /// wake-up costs drift.
    const BATCHES: usize = 5;
    /// Wake-ups per batch.
    const PER_BATCH: u32 = 40;

    /// Measures both costs (about 0.4 s).
    pub fn measure() -> Self {
        let timed_sleep = Self::median((0..Self::BATCHES).map(|_| {
            let c0 = thread_cpu();
            for _ in 0..Self::PER_BATCH {
                thread::sleep(Duration::from_millis(1));
            }
            cpu_since(c0, thread_cpu()).map(|d| d / Self::PER_BATCH)
        }));
        let park = Self::median((0..Self::BATCHES).map(|_| Self::park_batch(Self::PER_BATCH)));
        WakeupCost { timed_sleep, park }
    }

    /// One batch of `per_batch` parks: a waiter parked without a timeout,
    /// woken once per millisecond (so that it really is asleep each time);
    /// the notifier's side is timed around the notify alone. Returns the
    /// cost of one, both sides.
    pub(crate) fn park_batch(per_batch: u32) -> Option<Duration> {
        // (signals sent, signals seen): a counter, not a flag, so that two
        // signals sent while the waiter is descheduled still add up and it
        // cannot wait for one that already came.
        let state = (Mutex::new((0u32, 0u32)), Condvar::new());
        let mut notify_cpu = Some(Duration::ZERO);
        let waiter_cpu = thread::scope(|s| {
            let waiter = s.spawn(|| {
                let c0 = thread_cpu();
                let (lock, cv) = &state;
                let mut g = lock.lock();
                while g.1 < per_batch {
                    if g.0 > g.1 {
                        g.1 = g.0;
                    } else {
                        cv.wait(&mut g);
                    }
                }
                drop(g);
                cpu_since(c0, thread_cpu())
            });
            for _ in 0..per_batch {
                thread::sleep(Duration::from_millis(1));
                let c0 = thread_cpu();
                state.0.lock().0 += 1;
                state.1.notify_one();
                notify_cpu = notify_cpu
                    .zip(cpu_since(c0, thread_cpu()))
                    .map(|(a, b)| a + b);
            }
            waiter.join().expect("calibration waiter panicked")
        });
        waiter_cpu.zip(notify_cpu).map(|(w, n)| (w + n) / per_batch)
    }

    /// The median of the batches, if every one was measured.
    fn median(batches: impl Iterator<Item = Option<Duration>>) -> Option<Duration> {
        let mut v: Vec<Duration> = batches.collect::<Option<_>>()?;
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    }

    /// What `sleeps` timed sleeps and `parks` parks cost.
    pub fn of(&self, sleeps: u64, parks: u64) -> Option<Duration> {
        let times = |d: Duration, k: u64| d.saturating_mul(u32::try_from(k).unwrap_or(u32::MAX));
        Some(times(self.timed_sleep?, sleeps) + times(self.park?, parks))
    }
}
