//! An operation's lock: its own, or one shared by several operations
//! ([`OperationLock`], Kafka's group lock). Both are reentrant: a user
//! callback, run under the lock, may call back into the purgatory, which
//! locks the operation again.
//!
//! Every operation carries its lock, so the own lock is kept to 8 bytes
//! ([`OwnLock`]): parking_lot's one-byte raw mutex, a 16-bit count and a
//! 32-bit id of the holding thread, where parking_lot's reentrant mutex
//! spends a word on each (24 bytes). The shared lock is parking_lot's
//! reentrant mutex, as the callers that share it (the broker's group lock)
//! use it directly.
//!
//! Invariant: an own lock's `owner` is a thread's id exactly while that
//! thread holds its raw mutex, and `count` is then the number of its guards
//! alive; the last guard to go (in any order) unlocks it. Guards are not
//! `Send`, so a guard is dropped by the thread holding the lock.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::lock_api::RawMutex as _;
use parking_lot::{RawMutex, ReentrantMutex, ReentrantMutexGuard};

/// A reentrant lock shareable by several operations (Kafka uses the group
/// lock for a group's heartbeat, join and sync operations).
///
/// Create one with [`new_operation_lock`] and pass it to
/// [`Operation::with_lock`](crate::Operation::with_lock). It must be
/// reentrant: code holding it may call
/// [`Purgatory::check_and_complete`](crate::Purgatory::check_and_complete),
/// which locks the operations again.
pub type OperationLock = Arc<ReentrantMutex<()>>;

/// A fresh [`OperationLock`].
pub fn new_operation_lock() -> OperationLock {
    Arc::new(ReentrantMutex::new(()))
}

thread_local! {
    /// This thread's id for own locks (0: not assigned yet). Without a
    /// destructor, so that an operation can still be locked from another
    /// thread-local's destructor.
    static THREAD_ID: Cell<u32> = const { Cell::new(0) };
}

/// The next thread id to hand out.
static NEXT_THREAD_ID: AtomicU32 = AtomicU32::new(1);

/// This thread's id: non-zero, and distinct from every other thread's
/// (ids are never reused; a process that starts more than 4 billion threads
/// gets a panic here rather than a shared id).
fn thread_id() -> u32 {
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            let next = NEXT_THREAD_ID
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
                .expect("more than 4 billion threads locked purgatory operations");
            id.set(next);
        }
        id.get()
    })
}

/// An operation's own reentrant lock in 8 bytes: parking_lot's raw mutex,
/// the id of the thread holding it and how many guards that thread holds.
pub(crate) struct OwnLock {
    raw: RawMutex,
    /// Guards alive; written only by the holder.
    count: AtomicU16,
    /// The holder's [`thread_id`], 0 when free. Relaxed suffices: only the
    /// holder writes its own id, so a thread reads its id here only if it
    /// stored it and has not cleared it (its own writes are seen in order).
    owner: AtomicU32,
}

impl OwnLock {
    fn lock(&self) {
        let me = thread_id();
        if self.owner.load(Ordering::Relaxed) == me {
            let count = self.count.load(Ordering::Relaxed);
            let count = count.checked_add(1).expect("operation lock count overflow");
            self.count.store(count, Ordering::Relaxed);
        } else {
            self.raw.lock();
            self.owner.store(me, Ordering::Relaxed);
            self.count.store(1, Ordering::Relaxed);
        }
    }

    fn is_held_by_current_thread(&self) -> bool {
        self.owner.load(Ordering::Relaxed) == thread_id()
    }

    #[allow(unsafe_code)]
    fn unlock(&self) {
        debug_assert!(self.is_held_by_current_thread(), "unlocked by its holder");
        let count = self.count.load(Ordering::Relaxed) - 1;
        self.count.store(count, Ordering::Relaxed);
        if count == 0 {
            self.owner.store(0, Ordering::Relaxed);
            // SAFETY: this thread holds the raw mutex. `unlock` is called
            // only by a guard's drop; a guard is made only by `lock` on the
            // thread that then holds the mutex (`owner` is its id, stored
            // after `raw.lock()` returned there) and is not `Send`, so it
            // is dropped on that thread; and `count` reaches 0 once per
            // `raw.lock()`, at the last of the guards that lock made.
            unsafe { self.raw.unlock() };
        }
    }
}

/// An operation's own lock, or a shared one.
pub(crate) enum OpLock {
    Own(OwnLock),
    Shared(OperationLock),
}

impl OpLock {
    /// A fresh own lock.
    pub(crate) fn own() -> Self {
        OpLock::Own(OwnLock {
            raw: RawMutex::INIT,
            count: AtomicU16::new(0),
            owner: AtomicU32::new(0),
        })
    }

    /// Locks, blocking until the lock is free or held by this thread.
    pub(crate) fn lock(&self) -> OperationGuard<'_> {
        match self {
            OpLock::Own(own) => {
                own.lock();
                OperationGuard(Guard::Own(own, PhantomData))
            }
            OpLock::Shared(lock) => OperationGuard(Guard::Shared { _held: lock.lock() }),
        }
    }

    /// Whether this thread holds the lock.
    pub(crate) fn is_held_by_current_thread(&self) -> bool {
        match self {
            OpLock::Own(own) => own.is_held_by_current_thread(),
            OpLock::Shared(lock) => lock.is_owned_by_current_thread(),
        }
    }
}

/// Proof that the current thread holds an operation's lock; see
/// [`Operation::lock`](crate::Operation::lock). The lock is released when
/// the last guard of it on this thread is dropped (in any order).
#[must_use = "the lock is released when the guard is dropped"]
pub struct OperationGuard<'a>(Guard<'a>);

enum Guard<'a> {
    /// Not `Send`: dropped by the thread holding the lock.
    Own(&'a OwnLock, PhantomData<*const ()>),
    Shared {
        _held: ReentrantMutexGuard<'a, ()>,
    },
}

impl Drop for OperationGuard<'_> {
    fn drop(&mut self) {
        if let Guard::Own(own, _) = &self.0 {
            own.unlock();
        }
    }
}

impl fmt::Debug for OperationGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OperationGuard")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[test]
    fn the_own_lock_is_eight_bytes_and_either_lock_sixteen() {
        assert_eq!(std::mem::size_of::<OwnLock>(), 8);
        assert_eq!(std::mem::size_of::<OpLock>(), 16);
    }

    #[test]
    fn reentrant_in_any_drop_order_and_released_by_the_last_guard() {
        for lock in [OpLock::own(), OpLock::Shared(new_operation_lock())] {
            assert!(!lock.is_held_by_current_thread());
            let a = lock.lock();
            let b = lock.lock();
            assert!(lock.is_held_by_current_thread());
            drop(a);
            assert!(lock.is_held_by_current_thread(), "b still holds it");
            let c = lock.lock();
            drop(b);
            drop(c);
            assert!(!lock.is_held_by_current_thread());
            std::thread::scope(|s| {
                s.spawn(|| {
                    let _g = lock.lock();
                    assert!(lock.is_held_by_current_thread());
                });
            });
        }
    }

    #[test]
    fn two_own_locks_nest_in_either_order() {
        let (x, y) = (OpLock::own(), OpLock::own());
        let gx = x.lock();
        let gy = y.lock();
        drop(gx);
        assert!(!x.is_held_by_current_thread() && y.is_held_by_current_thread());
        let gx = x.lock();
        drop(gy);
        assert!(x.is_held_by_current_thread() && !y.is_held_by_current_thread());
        drop(gx);
    }

    /// A thread may hold many own locks, each twice, and release them in
    /// any order.
    #[test]
    fn a_thread_may_hold_many_locks() {
        let locks: Vec<OpLock> = (0..21).map(|_| OpLock::own()).collect();
        let mut guards: Vec<_> = locks.iter().map(OpLock::lock).collect();
        guards.extend(locks.iter().rev().map(OpLock::lock));
        assert!(locks.iter().all(OpLock::is_held_by_current_thread));
        // The first guard of each, in place or not, then the second.
        let second = guards.split_off(locks.len());
        drop(guards);
        assert!(locks.iter().all(OpLock::is_held_by_current_thread));
        drop(second);
        assert!(!locks.iter().any(OpLock::is_held_by_current_thread));
        std::thread::scope(|s| {
            s.spawn(|| drop(locks.iter().map(OpLock::lock).collect::<Vec<_>>()));
        });
    }

    /// Threads taking the lock (reentrantly, half the time) never overlap.
    #[test]
    fn excludes_other_threads() {
        let lock = OpLock::own();
        let inside = AtomicBool::new(false);
        let entries = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (lock, inside, entries) = (&lock, &inside, &entries);
                s.spawn(move || {
                    for i in 0..2_000 {
                        let _g = lock.lock();
                        let _again = ((i + t) % 2 == 0).then(|| lock.lock());
                        assert!(!inside.swap(true, Ordering::SeqCst), "two threads inside");
                        entries.fetch_add(1, Ordering::Relaxed);
                        inside.store(false, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(entries.load(Ordering::Relaxed), 8_000);
        assert!(!lock.is_held_by_current_thread());
    }
}
