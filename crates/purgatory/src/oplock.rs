//! An operation's lock: its own, or one shared by several operations
//! ([`OperationLock`], Kafka's group lock). Both are reentrant: a user
//! callback, run under the lock, may call back into the purgatory, which
//! locks the operation again.
//!
//! Every operation carries its lock, so the own lock is kept to one byte:
//! parking_lot's raw mutex, with the reentrancy counted beside it in a
//! thread-local list of the own locks this thread holds (by address, with
//! how many times), rather than in an owner word and a count word per
//! operation. A thread holds few at a time (one per nested callback), so
//! the list is short and a lookup a few compares. The shared lock is
//! parking_lot's reentrant mutex, as the callers that share it (the
//! broker's group lock) use it directly.
//!
//! Invariant: this thread's list has an entry for an own lock exactly while
//! this thread holds its raw mutex, with the number of guards of it alive;
//! the last guard to go unlocks it. Guards are not `Send`, so a guard is
//! dropped on the thread whose list counts it.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
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

/// How many own locks a thread's list holds in place. More (a deep chain
/// of callbacks, each locking another operation) go to a vector.
const HELD_IN_PLACE: usize = 16;

/// The own locks a thread holds: address and number of guards.
struct Held {
    locks: [(usize, u32); HELD_IN_PLACE],
    len: usize,
    /// Whether [`MORE_HELD`] may be non-empty.
    more: bool,
}

thread_local! {
    /// In place and without a destructor, so that an operation can still be
    /// locked from another thread-local's destructor.
    static HELD: RefCell<Held> = const {
        RefCell::new(Held { locks: [(0, 0); HELD_IN_PLACE], len: 0, more: false })
    };
    /// The locks beyond [`HELD_IN_PLACE`].
    static MORE_HELD: RefCell<Vec<(usize, u32)>> = const { RefCell::new(Vec::new()) };
}

/// Counts one more guard of the own lock at `at` if this thread holds it;
/// returns whether it did.
fn count_again(at: usize) -> bool {
    let bump = |(a, n): &mut (usize, u32)| {
        (*a == at).then(|| *n = n.checked_add(1).expect("lock count overflow"))
    };
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        let len = held.len;
        held.locks[..len].iter_mut().any(|e| bump(e).is_some())
            || (held.more
                && MORE_HELD.with(|more| more.borrow_mut().iter_mut().any(|e| bump(e).is_some())))
    })
}

/// Records that this thread has just locked the own lock at `at`.
fn count_first(at: usize) {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        if held.len < HELD_IN_PLACE {
            let len = held.len;
            held.locks[len] = (at, 1);
            held.len += 1;
        } else {
            held.more = true;
            MORE_HELD.with(|more| more.borrow_mut().push((at, 1)));
        }
    });
}

/// Counts one guard of the own lock at `at` out; returns whether it was
/// the last (the entry is then gone).
fn count_out(at: usize) -> bool {
    let out = |list: &mut [(usize, u32)]| {
        let i = list.iter().position(|(a, _)| *a == at)?;
        list[i].1 -= 1;
        Some((i, list[i].1 == 0))
    };
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        let len = held.len;
        if let Some((i, last)) = out(&mut held.locks[..len]) {
            if last {
                held.locks.swap(i, len - 1);
                held.len -= 1;
            }
            return last;
        }
        assert!(held.more, "a guard's lock is counted on its thread");
        MORE_HELD.with(|more| {
            let mut more = more.borrow_mut();
            let (i, last) = out(&mut more).expect("a guard's lock is counted on its thread");
            if last {
                more.swap_remove(i);
            }
            held.more = !more.is_empty();
            last
        })
    })
}

/// Whether this thread holds the own lock at `at`.
fn counted(at: usize) -> bool {
    HELD.with(|held| {
        let held = held.borrow();
        held.locks[..held.len].iter().any(|(a, _)| *a == at)
            || (held.more && MORE_HELD.with(|more| more.borrow().iter().any(|(a, _)| *a == at)))
    })
}

/// An operation's own lock, or a shared one.
pub(crate) enum OpLock {
    Own(RawMutex),
    Shared(OperationLock),
}

impl OpLock {
    /// A fresh own lock.
    pub(crate) fn own() -> Self {
        OpLock::Own(RawMutex::INIT)
    }

    /// Locks, blocking until the lock is free or held by this thread.
    pub(crate) fn lock(&self) -> OperationGuard<'_> {
        match self {
            OpLock::Own(raw) => {
                let at = addr(raw);
                if !count_again(at) {
                    raw.lock();
                    count_first(at);
                }
                OperationGuard(Guard::Own(raw, PhantomData))
            }
            OpLock::Shared(lock) => OperationGuard(Guard::Shared { _held: lock.lock() }),
        }
    }

    /// Whether this thread holds the lock.
    pub(crate) fn is_held_by_current_thread(&self) -> bool {
        match self {
            OpLock::Own(raw) => counted(addr(raw)),
            OpLock::Shared(lock) => lock.is_owned_by_current_thread(),
        }
    }
}

fn addr(raw: &RawMutex) -> usize {
    std::ptr::from_ref(raw) as usize
}

/// Proof that the current thread holds an operation's lock; see
/// [`Operation::lock`](crate::Operation::lock). The lock is released when
/// the last guard of it on this thread is dropped (in any order).
#[must_use = "the lock is released when the guard is dropped"]
pub struct OperationGuard<'a>(Guard<'a>);

enum Guard<'a> {
    /// Not `Send`: dropped where [`HELD`] counts it.
    Own(&'a RawMutex, PhantomData<*const ()>),
    Shared {
        _held: ReentrantMutexGuard<'a, ()>,
    },
}

impl Drop for OperationGuard<'_> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        let Guard::Own(raw, _) = &self.0 else {
            return;
        };
        if count_out(addr(raw)) {
            // SAFETY: this thread holds the raw mutex: its list had an
            // entry for it, made only after `raw.lock()` returned on this
            // thread, and removed only here, now, as its last guard goes
            // (guards are not `Send`, so this is that thread).
            unsafe { raw.unlock() };
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
    fn the_own_lock_is_one_byte_and_either_lock_sixteen() {
        assert_eq!(std::mem::size_of::<RawMutex>(), 1);
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

    /// A thread holding more own locks than its list keeps in place counts
    /// the others aside, and releases each, in any order.
    #[test]
    fn a_thread_may_hold_more_locks_than_fit_in_place() {
        let locks: Vec<OpLock> = (0..HELD_IN_PLACE + 5).map(|_| OpLock::own()).collect();
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
