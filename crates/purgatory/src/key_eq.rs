//! Purgatory calls made from a key's `Eq`, which runs under a watch-list
//! shard's lock (see [`WatchKey`](crate::WatchKey)): a thread-local flag
//! marks where `Eq` runs, and the public calls that can take a shard lock
//! refuse, with a panic, to run there. A module of its own, below both the
//! watch lists, which set the flag, and the calls, which read it.

use std::cell::Cell;

thread_local! {
    /// Whether this thread is running keys' `Eq` (and `Borrow`) under a
    /// shard's lock. No destructor: read in any thread-local's too.
    static IN_KEY_EQ: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as running keys' `Eq` until dropped (unwinding too).
pub(crate) struct InKeyEq(bool);

impl InKeyEq {
    pub(crate) fn enter() -> Self {
        InKeyEq(IN_KEY_EQ.with(|eq| eq.replace(true)))
    }
}

impl Drop for InKeyEq {
    fn drop(&mut self) {
        IN_KEY_EQ.with(|eq| eq.set(self.0));
    }
}

/// Panics, naming `call`, if a key's `Eq` made it: `Eq` runs under a
/// shard's lock, and a call needing that shard would wait for its own
/// thread for good (one needing another shard, or another purgatory's,
/// may wait for a thread waiting for this one). Every public call that
/// can take a shard lock checks this on entry, before it changes anything,
/// so the panic leaves all as it was (and reaches the caller of the call
/// whose `Eq` it was, as the key's own panic would).
#[inline]
pub(crate) fn not_from_key_eq(call: &str) {
    if in_key_eq() {
        called_from_key_eq(call);
    }
}

/// Whether this thread is running keys' `Eq` under a shard's lock (see
/// [`not_from_key_eq`]).
#[inline]
pub(crate) fn in_key_eq() -> bool {
    IN_KEY_EQ.with(Cell::get)
}

/// The panic of [`not_from_key_eq`].
#[cold]
#[inline(never)]
pub(crate) fn called_from_key_eq(call: &str) -> ! {
    panic!(
        "purgatory: {call} called from a key's `Eq`, which runs under a watch-list lock \
         and must not call a purgatory (see `WatchKey`)"
    );
}
