//! The one place the purgatory's synchronisation primitives come from, so
//! that a model checker can swap them: under `cfg(loom)` the atomics and the
//! mutex are loom's, and the loom tests explore every interleaving of the
//! protocol modules built on them (the `outcome` module).
//!
//! Reference counts (`Arc`, `Weak`) and the operations' reentrant locks
//! (the `oplock` module takes parking_lot's directly) are not swapped: loom
//! models neither `Weak` nor reentrancy, and the protocol the tests check
//! does not depend on them.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicIsize, AtomicU32, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicIsize, AtomicU32, AtomicU8, AtomicUsize, Ordering,
};

/// A mutual-exclusion lock whose `lock` returns the guard directly (no
/// poisoning): parking_lot's, or under `cfg(loom)` loom's behind the same
/// interface.
#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use self::loom_mutex::{Mutex, MutexGuard};

#[cfg(loom)]
mod loom_mutex {
    /// loom's mutex with parking_lot's interface.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }
}

/// Locks `mutex`, spinning briefly before blocking (see
/// `timer::internal::lock_spinning`); under `cfg(loom)` a plain lock.
#[cfg(not(loom))]
pub(crate) fn lock_spinning<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    timer::internal::lock_spinning(mutex)
}

#[cfg(loom)]
pub(crate) fn lock_spinning<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock()
}
