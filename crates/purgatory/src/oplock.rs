//! An operation's lock: its own, or one shared by several operations
//! ([`OperationLock`], Kafka's group lock). Both are reentrant: a user
//! callback, run under the lock, may call back into the purgatory, which
//! locks the operation again.
//!
//! Every operation carries its lock, so it takes one word ([`LockWord`]):
//! the own lock ([`OwnLock`]) is parking_lot's one-byte raw mutex, a
//! 16-bit count and a 32-bit id of the holding thread, where parking_lot's
//! reentrant mutex spends a word on each (24 bytes); the shared lock is a
//! pointer to parking_lot's reentrant mutex, as the callers that share it
//! (the broker's group lock) use it directly. Which of the two a word
//! holds is its [`LockKind`], a byte the operation keeps in the padding of
//! its first word: a tagged enum would spend a second word on the tag.
//!
//! Invariant: an own lock's `owner` is a thread's id exactly while that
//! thread holds its raw mutex, and `count` is then the number of its guards
//! alive; the last guard to go (in any order) unlocks it. Guards are not
//! `Send`, so a guard is dropped by the thread holding the lock.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use parking_lot::{ReentrantMutex, ReentrantMutexGuard};

use crate::sync::{AtomicU16, AtomicU32, Ordering, RawLock};

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

#[cfg(not(loom))]
thread_local! {
    /// This thread's id for own locks (0: not assigned yet). Without a
    /// destructor, so that an operation can still be locked from another
    /// thread-local's destructor.
    static THREAD_ID: Cell<u32> = const { Cell::new(0) };
}

// loom runs its threads on one OS thread: each needs an id of its own.
#[cfg(loom)]
loom::thread_local! {
    static THREAD_ID: Cell<u32> = Cell::new(0);
}

/// The next thread id to hand out. A plain atomic even under `cfg(loom)`:
/// handing out ids is not part of the protocol the model checks.
static NEXT_THREAD_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// This thread's id: non-zero, and distinct from every other thread's
/// (ids are never reused; a process that starts more than 4 billion threads
/// gets a panic here rather than a shared id).
fn thread_id() -> u32 {
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            let next = NEXT_THREAD_ID
                .fetch_update(
                    std::sync::atomic::Ordering::Relaxed,
                    std::sync::atomic::Ordering::Relaxed,
                    |n| n.checked_add(1),
                )
                .expect("more than 4 billion threads locked purgatory operations");
            id.set(next);
        }
        id.get()
    })
}

/// An operation's own reentrant lock in 8 bytes: parking_lot's raw mutex,
/// the id of the thread holding it and how many guards that thread holds.
pub(crate) struct OwnLock {
    raw: RawLock,
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

/// Which lock a [`LockWord`] holds: decided when the word is made, never
/// changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum LockKind {
    Own,
    Shared,
}

/// An operation's lock, own or shared, in one word; which one is the
/// [`LockKind`] made with it, kept by its holder beside it (see the module
/// docs). The holder drops it with [`release`](Self::release).
pub(crate) struct LockWord(Word);

/// The word's two readings; which one is live, the [`LockKind`] says.
union Word {
    own: ManuallyDrop<OwnLock>,
    shared: ManuallyDrop<OperationLock>,
}

/// A lock word read with its kind.
#[derive(Clone, Copy)]
pub(crate) enum OpLock<'a> {
    Own(&'a OwnLock),
    Shared(&'a OperationLock),
}

impl LockWord {
    /// A lock word and the kind it is made with, the one pair that reads
    /// it: a fresh own lock for `None`, `shared` otherwise. The only
    /// constructor, so a word and a kind that do not match are never made;
    /// the holder keeps the two together and gives the word back with
    /// [`release`](Self::release) (a word dropped without it leaks a
    /// shared lock's reference).
    pub(crate) fn new(shared: Option<OperationLock>) -> (LockKind, Self) {
        match shared {
            None => {
                let own = OwnLock {
                    raw: RawLock::new(),
                    count: AtomicU16::new(0),
                    owner: AtomicU32::new(0),
                };
                let word = Word {
                    own: ManuallyDrop::new(own),
                };
                (LockKind::Own, LockWord(word))
            }
            Some(lock) => {
                let word = Word {
                    shared: ManuallyDrop::new(lock),
                };
                (LockKind::Shared, LockWord(word))
            }
        }
    }

    /// The lock, read as `kind`.
    ///
    /// # Safety
    ///
    /// `kind` is the kind this word was made with.
    #[allow(unsafe_code)]
    #[inline]
    pub(crate) unsafe fn get(&self, kind: LockKind) -> OpLock<'_> {
        // SAFETY: the caller passes the kind the word was made with, so the
        // field read is the one written, and nothing writes the word after.
        unsafe {
            match kind {
                LockKind::Own => OpLock::Own(&self.0.own),
                LockKind::Shared => OpLock::Shared(&self.0.shared),
            }
        }
    }

    /// Drops the lock (the shared lock's reference; under `cfg(loom)` the
    /// own lock's model state too).
    ///
    /// # Safety
    ///
    /// `kind` is the kind this word was made with, and the word is not
    /// used after.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn release(&mut self, kind: LockKind) {
        // SAFETY: the field dropped is the one written (the caller's
        // `kind`), once (the caller's promise not to use the word again).
        unsafe {
            match kind {
                LockKind::Own => ManuallyDrop::drop(&mut self.0.own),
                LockKind::Shared => ManuallyDrop::drop(&mut self.0.shared),
            }
        }
    }
}

impl<'a> OpLock<'a> {
    /// Locks, blocking until the lock is free or held by this thread.
    pub(crate) fn lock(self) -> OperationGuard<'a> {
        match self {
            OpLock::Own(own) => {
                own.lock();
                OperationGuard(Guard::Own(own, PhantomData))
            }
            OpLock::Shared(lock) => OperationGuard(Guard::Shared { _held: lock.lock() }),
        }
    }

    /// Whether this thread holds the lock.
    pub(crate) fn is_held_by_current_thread(self) -> bool {
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

/// A lock word with its kind, as an operation keeps them: for the tests.
#[cfg(test)]
pub(crate) struct KeptLock(LockKind, LockWord);

#[cfg(test)]
#[allow(unsafe_code)]
impl KeptLock {
    pub(crate) fn own() -> Self {
        let (kind, word) = LockWord::new(None);
        KeptLock(kind, word)
    }

    pub(crate) fn shared(lock: OperationLock) -> Self {
        let (kind, word) = LockWord::new(Some(lock));
        KeptLock(kind, word)
    }

    pub(crate) fn get(&self) -> OpLock<'_> {
        // SAFETY: made together.
        unsafe { self.1.get(self.0) }
    }

    pub(crate) fn lock(&self) -> OperationGuard<'_> {
        self.get().lock()
    }

    pub(crate) fn is_held_by_current_thread(&self) -> bool {
        self.get().is_held_by_current_thread()
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
impl Drop for KeptLock {
    fn drop(&mut self) {
        // SAFETY: made together; not used after.
        unsafe { self.1.release(self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[test]
    fn either_lock_takes_one_word_and_its_kind_a_byte() {
        assert_eq!(std::mem::size_of::<OwnLock>(), 8);
        assert_eq!(std::mem::size_of::<LockWord>(), 8);
        assert_eq!(std::mem::size_of::<LockKind>(), 1);
    }

    /// The shared lock's word holds a reference, given back once.
    #[test]
    fn a_shared_word_holds_one_reference() {
        let group = new_operation_lock();
        let kept = KeptLock::shared(group.clone());
        assert_eq!(Arc::strong_count(&group), 2);
        let guard = kept.lock();
        assert!(group.is_owned_by_current_thread());
        drop(guard);
        drop(kept);
        assert_eq!(Arc::strong_count(&group), 1);
    }

    #[test]
    fn reentrant_in_any_drop_order_and_released_by_the_last_guard() {
        for lock in [KeptLock::own(), KeptLock::shared(new_operation_lock())] {
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
        let (x, y) = (KeptLock::own(), KeptLock::own());
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
        let locks: Vec<KeptLock> = (0..21).map(|_| KeptLock::own()).collect();
        let mut guards: Vec<_> = locks.iter().map(KeptLock::lock).collect();
        guards.extend(locks.iter().rev().map(KeptLock::lock));
        assert!(locks.iter().all(KeptLock::is_held_by_current_thread));
        // The first guard of each, in place or not, then the second.
        let second = guards.split_off(locks.len());
        drop(guards);
        assert!(locks.iter().all(KeptLock::is_held_by_current_thread));
        drop(second);
        assert!(!locks.iter().any(KeptLock::is_held_by_current_thread));
        std::thread::scope(|s| {
            s.spawn(|| drop(locks.iter().map(KeptLock::lock).collect::<Vec<_>>()));
        });
    }

    /// Threads taking the lock (reentrantly, half the time) never overlap.
    #[test]
    fn excludes_other_threads() {
        let lock = KeptLock::own();
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

/// The own lock under loom: every interleaving of two threads, one of them
/// reentrant and dropping its guards out of order, and loom's race detector
/// on the data the lock guards. Run with
/// `RUSTFLAGS="--cfg loom" cargo test -p purgatory --release --lib loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::cell::UnsafeCell;

    /// Data guarded by an own lock.
    struct Guarded {
        lock: KeptLock,
        value: UnsafeCell<u32>,
    }

    // SAFETY: `value` is touched only with `lock` held (the model's point).
    #[allow(unsafe_code)]
    unsafe impl Sync for Guarded {}

    impl Guarded {
        fn bump(&self) {
            assert!(self.lock.is_held_by_current_thread());
            // SAFETY: this thread holds `lock`; loom reports any access
            // that the lock does not order.
            #[allow(unsafe_code)]
            self.value.with_mut(|value| unsafe { *value += 1 });
        }
    }

    #[test]
    fn own_lock_excludes_and_is_released_by_the_last_guard() {
        loom::model(|| {
            let shared = loom::sync::Arc::new(Guarded {
                lock: KeptLock::own(),
                value: UnsafeCell::new(0),
            });
            let other = shared.clone();
            let t = loom::thread::spawn(move || {
                let _guard = other.lock.lock();
                other.bump();
            });
            let first = shared.lock.lock();
            let second = shared.lock.lock();
            drop(first);
            shared.bump();
            drop(second);
            assert!(!shared.lock.is_held_by_current_thread());
            t.join().unwrap();
            let _guard = shared.lock.lock();
            // SAFETY: the lock is held.
            #[allow(unsafe_code)]
            let total = shared.value.with(|value| unsafe { *value });
            assert_eq!(total, 2);
        });
    }
}
