//! Taking a lock that is held briefly and wanted often: spin on it for a few
//! microseconds before blocking.
//!
//! `parking_lot`'s `lock` spins for about a microsecond, then yields the CPU
//! (a system call) up to seven times, then sleeps. That suits locks whose
//! holders may run for long. The purgatory's watch-list shard locks are
//! held for a microsecond or two at a time, by threads that take them
//! millions of times a second; a waiter that yields pays a system call each
//! time, and on a virtual machine a system call costs several microseconds,
//! many times the wait it avoids.
//!
//! Used where both sides are such threads: the purgatory's watch and unwatch
//! paths, and [`Timer::cancel_all`](crate::Timer::cancel_all). Not for an
//! adder's wait on a timer shard: there the holder may be the reaper, and an
//! adder that spins keeps the CPU from it, so expiry runs late. (An adder
//! whose shard is held adds to another, free shard, and waits only if all
//! are held.)
//!
//! Invariant: a waiter spins for a bounded time (about [`SPIN_ROUNDS`] ×
//! [`PAUSES_PER_ROUND`] CPU pauses) and then takes the lock the usual way,
//! so a holder that is descheduled costs a waiter at most that much CPU.

use parking_lot::{Mutex, MutexGuard};

/// How many times a waiter checks the lock before blocking.
pub(crate) const SPIN_ROUNDS: u32 = 64;

/// CPU pauses between two checks (`std::hint::spin_loop`). With the
/// rounds, a few microseconds on current x86 (a pause is 10–140 cycles,
/// depending on the model).
pub(crate) const PAUSES_PER_ROUND: u32 = 8;

/// Locks `mutex`: at once if it is free; else spins, checking it
/// `SPIN_ROUNDS` times, before blocking as [`Mutex::lock`] does.
pub fn lock_spinning<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    if let Some(guard) = mutex.try_lock() {
        return guard;
    }
    for _ in 0..SPIN_ROUNDS {
        for _ in 0..PAUSES_PER_ROUND {
            std::hint::spin_loop();
        }
        // A plain load first, so that waiters do not keep stealing the
        // cache line from the holder.
        if !mutex.is_locked() {
            if let Some(guard) = mutex.try_lock() {
                return guard;
            }
        }
    }
    mutex.lock()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[test]
    fn takes_a_free_lock_and_waits_for_a_held_one() {
        let m = Mutex::new(0);
        *lock_spinning(&m) += 1;
        assert_eq!(*m.lock(), 1);
        // Held for longer than the spin: the waiter blocks, then gets it.
        let held = AtomicBool::new(false);
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let guard = m.lock();
            s.spawn(|| {
                while !held.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                *lock_spinning(&m) += 1;
                done.fetch_add(1, Ordering::Release);
            });
            held.store(true, Ordering::Release);
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(done.load(Ordering::Acquire), 0, "waits while held");
            drop(guard);
        });
        assert_eq!((*m.lock(), done.load(Ordering::Acquire)), (2, 1));
    }
}
