//! The one place the purgatory's synchronisation primitives come from, so
//! that a model checker can swap them: under `cfg(loom)` the atomics, the
//! mutex and the cell are loom's, and the loom tests explore every
//! interleaving of the protocol modules built on them (the `outcome`
//! module).
//!
//! The operations' own reentrant lock (`oplock`) is built on this module's
//! atomics and [`RawLock`], and an operation's links live in this module's
//! [`UnsafeCell`], so their loom models check the real code.
//! Reference counts (`Arc`, `Weak`) and the shared `OperationLock`
//! (parking_lot's reentrant mutex, part of the public API) are not
//! swapped: loom models neither `Weak` nor parking_lot.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicU16, AtomicU32, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU16, AtomicU32, AtomicU8, AtomicUsize, Ordering,
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

#[cfg(not(loom))]
use parking_lot::lock_api::RawMutex as _;

/// A one-byte lock without a guard, for locks that keep their own record of
/// who holds them (the operations' own lock): parking_lot's raw mutex, or
/// under `cfg(loom)` a flag that loom's threads spin on.
#[cfg(not(loom))]
pub(crate) struct RawLock(parking_lot::RawMutex);

#[cfg(not(loom))]
impl RawLock {
    pub(crate) fn new() -> Self {
        RawLock(parking_lot::RawMutex::INIT)
    }

    pub(crate) fn lock(&self) {
        self.0.lock();
    }

    /// # Safety
    ///
    /// The calling thread holds the lock (its `lock` returned and it has
    /// not unlocked since).
    #[allow(unsafe_code)]
    pub(crate) unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (this function's contract).
        unsafe { self.0.unlock() }
    }
}

#[cfg(loom)]
pub(crate) struct RawLock(loom::sync::atomic::AtomicBool);

#[cfg(loom)]
impl RawLock {
    pub(crate) fn new() -> Self {
        RawLock(loom::sync::atomic::AtomicBool::new(false))
    }

    pub(crate) fn lock(&self) {
        while self
            .0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            loom::thread::yield_now();
        }
    }

    /// # Safety
    ///
    /// The calling thread holds the lock.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// An `UnsafeCell` that a model checker can watch: loom's under `cfg(loom)`,
/// which checks that every access is ordered with every other, otherwise a
/// thin wrapper over std's with the part of loom's interface the crate uses.
#[cfg(loom)]
pub(crate) use loom::cell::{MutPtr, UnsafeCell};

#[cfg(not(loom))]
pub(crate) use self::std_cell::{MutPtr, UnsafeCell};

#[cfg(not(loom))]
mod std_cell {
    /// std's `UnsafeCell` with loom's interface.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) fn new(value: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }

        /// A pointer for mutable access; under loom the access lasts as
        /// long as the pointer.
        #[inline]
        pub(crate) fn get_mut(&self) -> MutPtr<T> {
            MutPtr(self.0.get())
        }
    }

    /// A raw pointer into an [`UnsafeCell`], as loom's `MutPtr`.
    #[derive(Debug)]
    pub(crate) struct MutPtr<T>(*mut T);

    impl<T> MutPtr<T> {
        /// Calls `f` with the raw pointer.
        #[inline]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0)
        }
    }
}
