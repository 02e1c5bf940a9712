//! An operation's links ([`Links`]: its owner, timer handle and
//! memberships) and the lock that guards them.
//!
//! The lock is a byte, not a `Mutex<Links>`: a mutex's byte would sit
//! before the links with seven bytes of padding, while the operation has
//! room for it in the padding of its first word (see `Shared`). So the
//! links live in a [`LinksCell`], and [`LinksGuard`] pairs the cell with
//! the byte that guards it; `Shared::links` is the one place that pairs
//! them, always its own two.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use timer::TimerHandle;

use super::{DelayedOperation, OwnerRef};
use crate::members::{Members, Placed};
use crate::outcome::Signal;
use crate::sync::{MutPtr, RawLock, UnsafeCell};

/// Everything that ties a watched operation to its purgatory. Changed only
/// with the operation lock held (their own lock,
/// [`Shared::links`](super::Shared::links), is there for `Sync`, for
/// storing the timer handle after arming, see `Purgatory::arm`, and for
/// registering waiters, see
/// [`Operation::completion`](super::Operation::completion)).
pub(crate) struct Links<Op: DelayedOperation> {
    /// The purgatory the operation is watched in; `None` when it is not.
    /// While `Some`, the purgatory holds a strong reference (see the module
    /// invariants).
    pub(crate) owner: Option<OwnerRef<Op>>,
    /// The armed timer entry, once stored.
    pub(crate) timer: Option<TimerHandle>,
    /// The operation's slot in each watch list it joined, the first few.
    pub(crate) members: Placed,
    /// What few operations need: slots beyond the first few, waiters.
    pub(crate) side: Option<Box<Side>>,
}

/// The links of an operation with more keys than fit in place, or with
/// waiters: one pointer in the links, so that operations without either
/// pay 8 bytes for them.
#[derive(Default)]
pub(crate) struct Side {
    /// Memberships beyond the ones in place.
    pub(crate) more: Vec<crate::members::Membership>,
    /// The waiters of this stay, once someone asked for a [`Completion`](crate::Completion).
    pub(crate) signal: Option<Arc<Signal>>,
}

impl<Op: DelayedOperation> Links<Op> {
    pub(super) fn empty() -> Self {
        Links {
            owner: None,
            timer: None,
            members: Placed::default(),
            side: None,
        }
    }

    /// What emptied links held besides their owner: the timer handle, the
    /// memberships (all of them) and the waiters.
    pub(crate) fn into_parts(self) -> (Option<TimerHandle>, Members, Option<Arc<Signal>>) {
        let (more, signal) = match self.side {
            Some(side) => {
                let Side { more, signal } = *side;
                (more, signal)
            }
            None => (Vec::new(), None),
        };
        (self.timer, Members::join(self.members, more), signal)
    }
}

/// An operation's links, reached only through a [`LinksGuard`].
pub(crate) struct LinksCell<Op: DelayedOperation>(UnsafeCell<Links<Op>>);

// SAFETY: the links are reached only through a `LinksGuard`, which holds
// the lock that guards the cell (`LinksCell::lock`'s contract): as for a
// mutex, sharing the cell between threads hands the links from one thread
// to another, so it needs them `Send`.
#[allow(unsafe_code)]
unsafe impl<Op: DelayedOperation> Sync for LinksCell<Op> where Links<Op>: Send {}

impl<Op: DelayedOperation> LinksCell<Op> {
    pub(super) fn new(links: Links<Op>) -> Self {
        LinksCell(UnsafeCell::new(links))
    }

    /// Locks `raw` and returns the links it guards.
    ///
    /// # Safety
    ///
    /// `raw` is the lock that guards this cell: every call for this cell
    /// passes the same one, and nothing else locks it.
    #[allow(unsafe_code)]
    pub(super) unsafe fn lock<'a>(&'a self, raw: &'a RawLock) -> LinksGuard<'a, Op> {
        raw.lock();
        LinksGuard {
            raw,
            // Under loom, the mutable access it tracks lasts until the
            // guard drops it, just before unlocking.
            links: ManuallyDrop::new(self.0.get_mut()),
            _not_send: PhantomData,
        }
    }
}

/// The links of an operation, their lock held; unlocks when dropped. Not
/// `Send`: dropped by the thread that locked.
pub(crate) struct LinksGuard<'a, Op: DelayedOperation> {
    raw: &'a RawLock,
    links: ManuallyDrop<MutPtr<Links<Op>>>,
    _not_send: PhantomData<*const ()>,
}

#[allow(unsafe_code)]
impl<Op: DelayedOperation> Deref for LinksGuard<'_, Op> {
    type Target = Links<Op>;
    fn deref(&self) -> &Links<Op> {
        // SAFETY: this guard holds the cell's lock (`LinksCell::lock`), so
        // no other reference to the links exists while it lives.
        self.links.with(|links| unsafe { &*links })
    }
}

#[allow(unsafe_code)]
impl<Op: DelayedOperation> DerefMut for LinksGuard<'_, Op> {
    fn deref_mut(&mut self) -> &mut Links<Op> {
        // SAFETY: as for `deref`; `&mut self` makes this the only one.
        self.links.with(|links| unsafe { &mut *links })
    }
}

impl<Op: DelayedOperation> Drop for LinksGuard<'_, Op> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the pointer is dropped once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.links) };
        // SAFETY: this thread locked `raw` when it made this guard (the
        // guard is not `Send`) and has not unlocked it since.
        unsafe { self.raw.unlock() }
    }
}

/// The links' lock under loom: the links live in loom's `UnsafeCell`
/// (`crate::sync`), so loom reports any access to them that the lock byte
/// does not order. Run with
/// `RUSTFLAGS="--cfg loom" cargo test -p purgatory --release --lib loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::operation::{Idle, Operation};

    /// The signal of `op`'s stay, made by whichever thread comes first.
    fn signal(op: &Operation<Idle>) -> Arc<Signal> {
        let mut links = op.0.links();
        let side = links.side.get_or_insert_with(Box::default);
        side.signal
            .get_or_insert_with(|| Arc::new(Signal::new()))
            .clone()
    }

    /// Two threads write and read one operation's links, each under
    /// `Shared::links`: the second sees what the first wrote.
    #[test]
    fn links_lock_orders_every_access() {
        loom::model(|| {
            let op = Operation::new(Idle);
            let other = op.clone();
            let t = loom::thread::spawn(move || signal(&other));
            let mine = signal(&op);
            let theirs = t.join().unwrap();
            assert!(Arc::ptr_eq(&mine, &theirs), "one signal per stay");
            assert!(op.0.links().side.is_some());
        });
    }
}
