//! The purgatory: operations watched under keys until their condition holds
//! or their timeout passes.
//!
//! [`Purgatory::try_complete_else_watch`] follows Kafka's sequence: try the
//! operation; if it cannot complete, watch it under every key *while holding
//! its lock*, try again (so no completion event between the two tries is
//! lost), then arm its timer outside the lock and disarm it if the operation
//! completed meanwhile. [`Purgatory::check_and_complete`] tries the operations
//! watched under one key. Expiry runs on the timer's executor thread, driven
//! by the reaper thread or by [`Purgatory::advance_clock`]. How an
//! operation leaves is [`crate::release`]'s business.
//!
//! # Invariants
//!
//! * An operation leaves exactly once per stay, under its lock, by whoever
//!   gets there first (a key's check, a force, the timeout, a cancel); it
//!   is counted out of [`Purgatory::watched`] and [`Purgatory::delayed`] at
//!   once, and its slots and timer entry are freed in small per-thread
//!   batches (see [`Purgatory::purge`]), never by a sweep over every list.
//! * Every public call lets go of what it released before it returns (see
//!   [`crate::release`]).
//! * No user callback runs while a watch-list shard lock is held; checks work on
//!   a snapshot of a list, taken a chunk at a time.
//! * After [`Purgatory::shutdown`] nothing is watched or armed; every
//!   operation that was pending has been handled by the
//!   [`ShutdownPolicy`] and returned.

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::fmt::Debug;
use std::hash::Hash;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use timer::internal::{discard_panic, panic_message};
use timer::{ConfigError, Reaper, ShutdownError};

use crate::builder::{PurgatoryBuilder, ShutdownPolicy};
use crate::cancel_on_drop::{self, CancelOnDrop};
use crate::error::PurgatoryError;
use crate::home::Home;
use crate::key_eq;
use crate::members::Members;
use crate::operation::{DelayedOperation, Operation, OwnerRef, Shared};
use crate::outcome::Outcome;
use crate::release::{self, drop_logged, guarded, let_go, ExpiryTask, Released, WatchWindow};
use crate::retire::{RetireQueue, Retired, Unwatch};
use crate::stackbuf::StackBuf;
use crate::sync::Mutex;
use crate::watch::{KeyHasher, KeysHeld, Located, WatchIndex, WatchKey};

/// What a watch answers if the operation's first try or `timeout` watched
/// it (here or elsewhere) since its stay was `stay`: still watched,
/// `AlreadyWatched`, as if that watch had come first; completed by then,
/// `Ok(true)` (counted by the window of the watch that had it then, see
/// `WatchWindow`). `None` if not (or if it was watched and cancelled
/// meanwhile: the watch goes on, trying it again once it is watched). Lock
/// held.
#[allow(clippy::type_complexity)]
fn taken_meanwhile<Op: DelayedOperation>(
    shared: &Shared<Op>,
    stay: u32,
) -> Option<Result<(bool, Option<Released<Op>>), (PurgatoryError, Option<Released<Op>>)>> {
    if shared.stay() == stay {
        None
    } else if shared.is_completed() {
        Some(Ok((true, None)))
    } else if shared.is_watched() {
        Some(Err((PurgatoryError::AlreadyWatched, None)))
    } else {
        None
    }
}

/// How many operations [`Purgatory::check_and_complete`] copies out of a list
/// per shard-lock hold: small enough that a scan of a long hot list never
/// holds off a watcher of the same shard for long.
const CHECK_CHUNK: usize = 64;

/// How many completed operations' tokens [`Purgatory::check_and_complete`]
/// keeps on its stack; more go to a vector.
const RELEASED_INLINE: usize = 8;

impl<S> PurgatoryBuilder<S> {
    /// Builds the purgatory, starting its timer's executor thread and, if
    /// enabled, its reaper thread.
    ///
    /// # Errors
    /// [`PurgatoryError::Config`] for a bad tick or wheel size, or if a
    /// thread cannot be spawned; [`PurgatoryError::ReaperPollInterval`]
    /// for a poll interval shorter than the tick with the reaper enabled;
    /// [`PurgatoryError::Shards`] for a shard count of 0 or more than
    /// [`PurgatoryBuilder::MAX_SHARDS`].
    pub fn build<K: WatchKey, Op: DelayedOperation>(
        self,
    ) -> Result<Purgatory<K, Op, S>, PurgatoryError>
    where
        S: KeyHasher,
    {
        if self.shards == 0 || self.shards > PurgatoryBuilder::MAX_SHARDS {
            return Err(PurgatoryError::Shards(self.shards));
        }
        let timer = Arc::new(self.timer.build::<ExpiryTask<Op>>()?);
        let tick = Duration::from_millis(timer.tick_ms());
        let poll = self
            .reaper_poll_interval
            .unwrap_or_else(|| Reaper::default_poll_interval(timer.tick_ms()));
        if self.reaper && poll < tick {
            return Err(PurgatoryError::ReaperPollInterval { poll, tick });
        }
        let shards = self.shards.max(2).next_power_of_two();
        let index = WatchIndex::<K, Op, S>::new(shards, self.hasher);
        let unwatch: Arc<dyn Unwatch<Op>> = index.clone();
        let home = Arc::new(Home::new(self.name, timer.clone(), unwatch));
        home.publish();
        let reaper = if self.reaper {
            let reaper = Reaper::try_start_with(timer, poll, home.publisher(poll))
                .map_err(|e| PurgatoryError::Config(ConfigError::Spawn(e.to_string())))?;
            Some(reaper)
        } else {
            None
        };
        Ok(Purgatory {
            owner: home.as_owner(),
            home,
            index,
            reaper: Mutex::new(reaper),
            policy: self.shutdown_policy,
        })
    }
}

/// Delayed operations watched under keys, completed when their condition
/// holds, expired when their timeout passes — each exactly once.
///
/// Thread-safe: share it with an `Arc` (or by reference). See the crate
/// documentation for an example.
///
/// Do not call [`advance_clock`](Self::advance_clock) or
/// [`shutdown`](Self::shutdown) while holding an operation's lock (they wait
/// for expirations, which take operation locks), nor `advance_clock` from an
/// operation callback or an operation's `Drop` (see [`DelayedOperation`]
/// on where operations are dropped).
///
/// `S` hashes the keys: std's `RandomState` unless another is chosen with
/// [`PurgatoryBuilder::hasher`].
pub struct Purgatory<K: WatchKey, Op: DelayedOperation, S: KeyHasher = RandomState> {
    pub(crate) home: Arc<Home<Op>>,
    /// `home` as the owner every operation watched here points to.
    pub(crate) owner: OwnerRef<Op>,
    pub(crate) index: Arc<WatchIndex<K, Op, S>>,
    pub(crate) reaper: Mutex<Option<Reaper>>,
    pub(crate) policy: ShutdownPolicy,
}

/// Stands in for the operation type where none is chosen yet; see
/// [`Purgatory::builder`]. It has no values.
#[doc(hidden)]
#[derive(Debug)]
pub enum Unchosen {}

impl DelayedOperation for Unchosen {
    fn timeout(&self) -> Duration {
        match *self {}
    }
    fn try_complete(&self) -> bool {
        match *self {}
    }
    fn on_complete(&self) {
        match *self {}
    }
}

impl Purgatory<(), Unchosen> {
    /// A builder starting from the defaults of [`Purgatory::new`]. The key
    /// and operation types are chosen by
    /// [`build`](PurgatoryBuilder::build): `Purgatory::builder("produce")
    /// .reaper(false).build::<Key, Op>()`. (This function lives on one
    /// concrete instantiation, as `HashMap::new` does, so that
    /// `Purgatory::builder(..)` needs no type annotations.)
    pub fn builder(name: impl Into<String>) -> PurgatoryBuilder {
        PurgatoryBuilder::new(name.into())
    }
}

impl<K: WatchKey, Op: DelayedOperation> Purgatory<K, Op> {
    /// A purgatory with Kafka's defaults: real time, tick 1 ms, wheel size
    /// 20, reaper running with a 200 ms poll, [`ShutdownPolicy::Drop`].
    ///
    /// # Panics
    /// If the timer or reaper thread cannot be spawned; use
    /// [`Purgatory::builder`] to get that as an error value.
    pub fn new(name: impl Into<String>) -> Self {
        match PurgatoryBuilder::new(name.into()).build() {
            Ok(p) => p,
            Err(e) => panic!("cannot start a purgatory: {e}"),
        }
    }
}

impl<K: WatchKey, Op: DelayedOperation, S: KeyHasher> Purgatory<K, Op, S> {
    /// Completes `op` now if it can, else watches it under every key and
    /// arms its timeout. Returns `Ok(true)` iff the operation completed in
    /// this call (`on_complete` has then run).
    ///
    /// Sequence: `try_complete` under the operation lock; if not done, add
    /// the operation to each key's watch list and call `try_complete` again,
    /// still under the lock (a completion event between the two tries
    /// cannot be lost: once the operation is in a list, a concurrent
    /// [`check_and_complete`](Self::check_and_complete) waits for the lock
    /// and tries it afterwards). Then, outside the lock, arm the timer for
    /// [`DelayedOperation::timeout`]; if the operation completed meanwhile,
    /// the timer entry is cancelled at once. Duplicate keys are allowed
    /// (the operation is then watched twice on that key, as in Kafka).
    ///
    /// The key iterator and each key's `Hash`/`Eq` run under the operation
    /// lock, which is reentrant; only the first key is taken and hashed
    /// before the lock (so that its shard is fetched meanwhile). A key's
    /// `Hash` and `Eq` must not call the purgatory (see [`WatchKey`]: `Eq`
    /// runs under a watch-list lock too, and such a call panics), but the
    /// iterator may. If it (or `timeout`) completes the operation on this
    /// thread
    /// ([`Operation::force_complete`], or a
    /// [`check_and_complete`](Self::check_and_complete) on a key already
    /// joined), the operation leaves the lists it joined and is neither
    /// counted as watched nor armed, and the call returns `Ok(true)`, as
    /// when the first `try_complete` succeeds (the completion, and a panic
    /// of its callbacks, count here too); completed while the first key is
    /// taken, it is found completed: [`PurgatoryError::AlreadyCompleted`].
    /// If the iterator cancels it
    /// ([`cancel_for_key`](Self::cancel_for_key) on a key already joined),
    /// it leaves the lists it joined the same way and the call returns
    /// `Ok(false)`, the operation cancelled; until the call returns it can
    /// be neither forced nor watched again (`AlreadyWatched`). (A
    /// [`cancel`](Self::cancel) from there finds it not yet watched here,
    /// and returns `false`.) Either way the watch stops there: the key the
    /// iterator was yielding is not joined, and no further key is taken.
    /// Calls the iterator makes into a purgatory once the first key is
    /// taken hold back what they release until this call returns, as calls
    /// made from callbacks do. Keys the watch does not use (left in the
    /// iterator, not joined, or refused by a shutdown) are dropped after
    /// the operation lock is released.
    ///
    /// # Panics
    /// If a key's `Hash` or `Eq` (or the key iterator) panics, the panic
    /// reaches the caller, and the operation is left as it was: in no list,
    /// not counted, not armed, not completed (it may be watched again),
    /// unless the iterator completed or cancelled it before: it then stays
    /// so, in no list.
    ///
    /// # Errors
    /// * [`PurgatoryError::NoKeys`] if `keys` is empty (nothing is tried).
    /// * [`PurgatoryError::AlreadyWatched`] if the operation is already
    ///   watched, here or elsewhere (also if its first `try_complete` or its
    ///   `timeout` watched it: it is that watch's), and
    ///   [`PurgatoryError::AlreadyCompleted`] if it has completed: an
    ///   operation is handed over at most once at a time and never after it
    ///   completed. (One cancelled by [`cancel`](Self::cancel),
    ///   [`cancel_for_key`](Self::cancel_for_key) or a
    ///   [`ShutdownPolicy::Drop`] shutdown may be watched again.)
    /// * [`PurgatoryError::Shutdown`] if the purgatory is shut down; the
    ///   operation is then not watched. If the call began before the
    ///   shutdown and had started watching the operation, the operation has
    ///   been handled by the [`ShutdownPolicy`] like every pending one (with
    ///   [`ShutdownPolicy::Expire`] it has expired), and it may or may not
    ///   be in the list `shutdown()` returns; otherwise it is untouched.
    ///
    /// A refused operation is not handed back: to answer its client anyway
    /// (say, [`force_complete`](Operation::force_complete) it to send what
    /// it has), pass a clone and keep the handle, as
    /// `try_complete_else_watch(op.clone(), keys)`.
    pub fn try_complete_else_watch(
        &self,
        op: impl Into<Operation<Op>>,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<bool, PurgatoryError> {
        if key_eq::in_key_eq() {
            // What it was handed goes the guarded way, as the panic unwinds
            // through user code.
            drop_logged(op, "an operation's Drop");
            drop_logged(keys, "a key's Drop");
            key_eq::called_from_key_eq("try_complete_else_watch");
        }
        let op = op.into();
        // A panic from a key (its `Hash` or `Eq`, their iterator) reaches
        // the caller, but not before our handle and what the watch held
        // back went the guarded way: dropped by the unwinding, a `Drop`
        // that panicked too would abort.
        let result = catch_unwind(AssertUnwindSafe(|| self.watch_or_complete(&op.0, keys)));
        // Our handle first: the token may then hold the last reference. If
        // ours is the last, its `Drop` is guarded, and deferred inside a
        // callback, as every release is.
        let_go(op);
        let (result, released) = match result {
            Ok(Ok((done, released))) => (Ok(done), released),
            Ok(Err((e, released))) => (Err(e), released),
            Err(panic) => {
                release::flush();
                resume_unwind(panic)
            }
        };
        if let Some(released) = released {
            let_go(released);
        }
        release::flush();
        result
    }

    /// [`try_complete_else_watch`](Self::try_complete_else_watch), up to
    /// letting go of what it released.
    #[allow(clippy::type_complexity)]
    fn watch_or_complete(
        &self,
        shared: &Arc<Shared<Op>>,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<(bool, Option<Released<Op>>), (PurgatoryError, Option<Released<Op>>)> {
        // The keys it does not use (the first, the rest of their iterator,
        // one taken but not joined) are dropped when it returns, after the
        // operation lock, each held apart so that their `Drop`s are guarded
        // one by one (see `drop_key`).
        let mut keys = KeysHeld::new(keys.into_iter());
        let mut unjoined = KeysHeld::new(None);
        let Some(first) = keys.next() else {
            return Err((PurgatoryError::NoKeys, None));
        };
        let first = KeysHeld::new(first);
        // The first key's shard and table entry are one cache miss each at
        // scale: start them now, so they overlap the work before the join.
        let first_at = self.index.prefetch(&*first);
        if self.home.is_shut_down() {
            return Err((PurgatoryError::Shutdown, None));
        }
        // This thread's share of returning finished operations' memory, so
        // it is freed where operations are created (see `crate::retire`),
        // and spill room for this one's memberships if it has many keys.
        let keys_hint = keys.size_hint().0.saturating_add(1);
        let spare = self.home.drop_unlinked(Members::room_for(keys_hint));
        let site = Some(&self.home.site);
        // No owner counts a completion before the operation is attached:
        // the window does, for the purgatory whose watch it is.
        let count_completed = || self.home.count(Outcome::Completed);
        let (epoch, timeout) = {
            let _guard = shared.lock();
            // User code runs from here until the operation is attached (its
            // tries, its timeout, the keys): it may complete the operation
            // by force, and may call the purgatory, under this lock.
            let mut window = WatchWindow::open(shared, &self.home.site, &count_completed);
            if shared.is_completed() {
                return Err((PurgatoryError::AlreadyCompleted, None));
            }
            if shared.is_watched() {
                return Err((PurgatoryError::AlreadyWatched, None));
            }
            // The try and `timeout` may also watch the operation (here or
            // elsewhere): then it is that watch's, and this one stops (see
            // `taken_meanwhile`).
            let stay = shared.stay();
            let yes = shared.try_complete_guarded(site);
            if let Some(taken) = taken_meanwhile(shared, stay) {
                return taken;
            }
            if (yes && shared.stay() == stay) || shared.is_completed() {
                // A try may force its own completion (Kafka's habit): then
                // it has completed whatever it answers, and `finish` finds
                // it done, and the window counts it. Not watched yet, it
                // leaves no list, and no owner counts it: counted here if
                // this call completed it (the common case, with no note).
                let released = shared.finish_first_try(&self.home.site);
                if released.is_some() {
                    count_completed();
                }
                return Ok((true, released));
            }
            let stay = shared.stay();
            let timeout =
                guarded(site, "timeout", || shared.op().timeout()).unwrap_or(Duration::ZERO);
            if let Some(taken) = taken_meanwhile(shared, stay) {
                return taken;
            }
            if shared.is_completed() {
                // `timeout` forced it: as when the try does.
                return Ok((true, None));
            }
            // Marked watched before it joins any list, so that a check
            // finding it there does not skip it (see `OpState`). We hold its
            // lock, so no other thread completes it meanwhile; but the key
            // iterator and each key's `Hash`/`Eq` run here, and the lock is
            // reentrant: they may complete it on this thread
            // (`force_complete`, or `check_and_complete` on a key already
            // joined), handled below.
            let cancelled = shared.state.outcome() == Some(Outcome::Cancelled);
            let claimed = shared.claim();
            debug_assert!(claimed, "neither watched nor completed, lock held");
            window.claimed();
            let members = Members::with_capacity(keys_hint, spare);
            let first = (first, first_at);
            let members =
                self.watch_all(shared, first, &mut *keys, &mut unjoined, members, cancelled);
            if !shared.is_pending() {
                // Completed or cancelled re-entrantly while joining, before
                // any owner was set: that resolved its waiters but had
                // nothing to detach. Leave the lists joined, as the panic
                // path does, and neither attach nor arm it. Cancelled, it
                // is leaving until then (see `OpState`).
                self.leave_partial(shared, members);
                if shared.state.is_leaving() {
                    shared.state.left();
                    return Ok((false, None));
                }
                return Ok((true, None));
            }
            self.home.add_watched(members.len());
            let epoch = shared.attach(self.owner.clone(), members);
            if unjoined.is_some() {
                // Still pending, so a shutdown refused the key: handled like
                // every operation pending at shutdown.
                let released = self.apply_shutdown_policy(shared);
                return Err((PurgatoryError::Shutdown, released));
            }
            // Counted by the owner when it leaves, by `finish` or the force.
            // A yes completes it only if this stay goes on: a try may have
            // cancelled it.
            let yes = shared.try_complete_guarded(site);
            if shared.is_completed() {
                // Forced by the try, or expired by a shutdown it made.
                return if shared.state.is_expired() {
                    Err((PurgatoryError::Shutdown, None))
                } else {
                    Ok((true, None))
                };
            }
            if yes && shared.is_pending() && shared.stay() == epoch {
                return Ok((true, shared.finish(Outcome::Completed)));
            }
            (epoch, timeout)
        };
        self.arm(shared, epoch, timeout)
    }

    /// Adds `shared` to the list of `first` (a key and where it lives: it
    /// was taken and located on entry, see `watch_or_complete`), then of
    /// every key in `keys`, recording each in `members` (empty, with room
    /// made). Returns the members. It stops at a key a shutdown refuses,
    /// or whose taking completed or cancelled the operation (the key
    /// iterator may): that key goes to `unjoined`, and the keys after it
    /// stay in `keys`. If a key's `Hash` or `Eq` panics, the lists joined
    /// so far are left and the claim undone (its previous stay's outcome
    /// put back: `cancelled`) before the panic goes on, so that no partial
    /// watch remains. Operation lock held.
    fn watch_all(
        &self,
        shared: &Arc<Shared<Op>>,
        first: (KeysHeld<K>, Located),
        keys: &mut impl Iterator<Item = K>,
        unjoined: &mut Option<K>,
        mut members: Members,
        cancelled: bool,
    ) -> Members {
        let closed = || self.home.is_shut_down();
        // Each key held, so that its `Drop` is guarded if its `Hash` or
        // `Eq` panics.
        let located = |key| {
            let key = KeysHeld::new(key);
            let at = self.index.locate(&*key);
            (key, at)
        };
        let joined = catch_unwind(AssertUnwindSafe(|| {
            for (key, at) in std::iter::once(first).chain(keys.by_ref().map(located)) {
                // Not pending once the iterator completed or cancelled it:
                // the caller leaves the lists joined, so join no more.
                if !shared.is_pending() {
                    *unjoined = Some(key.take());
                    return;
                }
                match self.index.watch_at(key, at, shared, closed) {
                    Ok(m) => members.push(m),
                    Err(key) => {
                        *unjoined = Some(key);
                        return;
                    }
                }
            }
        }));
        match joined {
            Ok(()) => members,
            Err(panic) => {
                self.leave_partial(shared, members);
                // Completed or cancelled by the key iterator before a key
                // panicked, it stays so (its window counts a completion).
                if shared.state.is_leaving() {
                    shared.state.left();
                } else if shared.is_pending() {
                    shared.state.unclaim(cancelled);
                }
                resume_unwind(panic)
            }
        }
    }

    /// Takes `shared` out of the lists in `members`, joined by a watch that
    /// did not attach it (nothing counts them). Operation lock held.
    fn leave_partial(&self, shared: &Arc<Shared<Op>>, members: Members) {
        let partial = Retired {
            op: Arc::downgrade(shared),
            members,
            timer: None,
        };
        RetireQueue::free_now(partial, &*self.index, &self.home.timer);
    }

    /// Arms the timer of an operation claimed at `epoch`, outside its lock.
    #[allow(clippy::type_complexity)]
    fn arm(
        &self,
        shared: &Arc<Shared<Op>>,
        epoch: u32,
        timeout: Duration,
    ) -> Result<(bool, Option<Released<Op>>), (PurgatoryError, Option<Released<Op>>)> {
        let timer = &self.home.timer;
        // A clock that panics here would leave the operation watched with
        // no timeout: like a panicking `timeout`, it expires at once (a
        // zero delay does not read the clock). Not `guarded`: no callback
        // runs here, and a watch need not pay for marking one.
        let added = catch_unwind(AssertUnwindSafe(|| {
            timer.add(timeout, ExpiryTask::new(shared, epoch))
        }))
        .unwrap_or_else(|panic| {
            let name = self.home.name();
            log::error!(
                "purgatory {name}: the clock panicked arming a timeout, which expires at once: {}",
                panic_message(&*panic)
            );
            discard_panic(panic);
            timer.add(Duration::ZERO, ExpiryTask::new(shared, epoch))
        });
        match added {
            Ok(handle) => {
                let mut links = shared.links();
                if shared.epoch(&links) == epoch && links.owner.is_some() {
                    links.timer = Some(handle);
                    self.home.add_armed();
                } else {
                    // Left between the lock release and now: disarm. If the
                    // entry already fired, its task finds the operation
                    // completed, unclaimed or gone, and does nothing.
                    drop(links);
                    self.home.timer.cancel(&handle);
                }
                Ok((false, None))
            }
            Err(ShutdownError(task)) => {
                drop(task);
                let _guard = shared.lock();
                let ours = shared.is_claimed_by(self.home.addr())
                    && shared.epoch(&shared.links()) == epoch;
                let released = if ours && !shared.is_completed() {
                    self.apply_shutdown_policy(shared)
                } else {
                    None
                };
                Err((PurgatoryError::Shutdown, released))
            }
        }
    }

    /// Handles one pending operation at shutdown. Operation lock held; let
    /// go of the result once it is released.
    pub(crate) fn apply_shutdown_policy(&self, shared: &Arc<Shared<Op>>) -> Option<Released<Op>> {
        match self.policy {
            ShutdownPolicy::Drop => shared.cancel(self.home.addr()),
            ShutdownPolicy::Expire => shared.finish(Outcome::Expired),
        }
    }

    /// A hint, for a caller that knows which key it will watch or check
    /// next and has other work to do first: starts bringing into this
    /// core's caches the first lines that a watch or check of `key` reads
    /// (its shard's lock and where the lookup starts in the shard's key
    /// table), so that they arrive during that work rather than in the
    /// call. It hashes the key and changes nothing; it takes no lock and
    /// never waits. A request handler about to heartbeat a member, say,
    /// calls it before looking the member up in its group. `key` may be any
    /// borrowed form of the key type (see
    /// [`check_and_complete`](Self::check_and_complete)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use purgatory::{DelayedOperation, Purgatory};
    /// # struct Never;
    /// # impl DelayedOperation for Never {
    /// #     fn timeout(&self) -> Duration { Duration::from_secs(30) }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// # }
    /// let purgatory = Purgatory::builder("heartbeat").reaper(false).build::<u64, Never>().unwrap();
    /// purgatory.prefetch(&7); // then other work, then a watch or check of 7
    /// assert_eq!(purgatory.check_and_complete(&7), 0);
    /// ```
    pub fn prefetch<Q: Hash + ?Sized>(&self, key: &Q)
    where
        K: Borrow<Q>,
    {
        self.index.prefetch(key);
    }

    /// Tries every operation watched under `key` and completes those that can
    /// complete now. Returns how many this call completed.
    ///
    /// Each operation is tried under its lock (waiting for it, as Kafka
    /// does), never with a purgatory lock held: the list is copied a chunk
    /// (64 operations) at a time, and each copy is tried and let go of. When
    /// it returns, the operations it completed have left all their lists (it
    /// frees this thread's retired batch, see [`purge`](Self::purge); one
    /// completed from its own watch's key iterator leaves them when that
    /// watch returns), their
    /// waiters are woken, and the purgatory holds no reference to them (but
    /// for passing copies held by calls on other threads, see
    /// [`DelayedOperation`] on where operations are dropped); a key whose
    /// list became empty is removed. Call it without holding locks that
    /// `try_complete` implementations take, and mind the lock order when
    /// calling it from a callback (see [`DelayedOperation`]).
    ///
    /// `key` may be any borrowed form of the key type, as for
    /// [`HashMap::get`](std::collections::HashMap::get): a `&str` for
    /// `String` keys, so a check allocates no key. Its `Hash` and `Eq` must
    /// agree with the key type's (as [`Borrow`] asks).
    ///
    /// # Panics
    /// If `key`'s `Hash` or `Eq` panics, the panic reaches the caller once
    /// the operations this call completed until then were let go. Its
    /// `Debug` formats a debug-level log line once all is done: a panic
    /// there reaches the caller after the check did everything but return
    /// its count.
    pub fn check_and_complete<Q: Hash + Eq + Debug + ?Sized>(&self, key: &Q) -> usize
    where
        K: Borrow<Q>,
    {
        key_eq::not_from_key_eq("check_and_complete");
        let site = Some(&self.home.site);
        // On the stack: a check of a short list (a heartbeat's one
        // operation) allocates nothing.
        let mut batch = StackBuf::<_, CHECK_CHUNK>::new();
        let mut cursor = None;
        let mut completed = 0;
        let mut released = StackBuf::<_, RELEASED_INLINE>::new();
        let scanned = catch_unwind(AssertUnwindSafe(|| loop {
            cursor = self.index.scan(key, cursor, CHECK_CHUNK, &mut batch);
            // Each copy goes as soon as its operation was tried, not after
            // the chunk: one that a check of another of its keys completes
            // meanwhile is not held here through the slow tries of the
            // operations after it (only through those before it). No lock
            // is held here; a copy may be the last reference.
            batch.drain_each(|(op, stay)| {
                let (done, token) = op.check(site, stay);
                completed += usize::from(done);
                released.extend(token);
                let_go(op);
            });
            if cursor.is_none() {
                break;
            }
        }));
        if let Err(panic) = scanned {
            // The key's `Hash` or `Eq` panicked (the rest is guarded): what
            // this call holds goes the guarded way, not with the unwinding
            // (where a `Drop` that panicked too would abort).
            batch.drain_each(let_go);
            released.drain_each(let_go);
            release::flush();
            resume_unwind(panic);
        }
        if completed > 0 {
            self.home.free_own_retired();
        }
        released.drain_each(let_go);
        release::flush();
        // Last: the key's `Debug` is user code.
        if completed > 0 {
            let name = self.home.name();
            log::debug!("purgatory {name}: completed {completed} operations for key {key:?}");
        }
        completed
    }

    /// Cancels one operation watched here: it leaves every watch list, its
    /// timer is disarmed, no callback runs, and its
    /// [`outcome`](Operation::outcome) is [`Outcome::Cancelled`] (its
    /// waiters are woken before this returns). Returns `true` iff this call
    /// cancelled it: `false` if it is not watched here or has already left
    /// (completed, expired, cancelled). It may be watched again.
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatory::{DelayedOperation, Operation, Outcome, Purgatory};
    ///
    /// struct Never;
    /// impl DelayedOperation for Never {
    ///     fn timeout(&self) -> Duration { Duration::from_secs(30) }
    ///     fn try_complete(&self) -> bool { false }
    ///     fn on_complete(&self) { unreachable!("cancelled, never completed") }
    /// }
    ///
    /// let purgatory = Purgatory::builder("fetch").reaper(false).build::<u32, Never>().unwrap();
    /// let op = Operation::new(Never);
    /// purgatory.try_complete_else_watch(op.clone(), [1, 2]).unwrap();
    /// assert!(purgatory.cancel(&op));
    /// assert!(!purgatory.cancel(&op), "only once");
    /// assert_eq!(op.outcome(), Some(Outcome::Cancelled));
    /// assert_eq!(purgatory.stats().cancelled, 1);
    /// assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    /// ```
    pub fn cancel(&self, op: &Operation<Op>) -> bool {
        cancel_on_drop::cancel(&self.home, op, None, "cancel")
    }

    /// The [`completion`](Operation::completion) of `op`, as a future that
    /// [cancels](Self::cancel) `op` here when dropped before it resolved:
    /// what an async request handler awaits, so that a client that went
    /// away (its task aborted, or another branch of a `select!` taken)
    /// does not leave its request parked until the timeout. Take it as
    /// [`Operation::completion`] says (before the first watch, or once a
    /// later watch is accepted). See [`CancelOnDrop`] for an example.
    pub fn cancel_on_drop(&self, op: &Operation<Op>) -> CancelOnDrop<Op> {
        CancelOnDrop::new(&self.home, op)
    }

    /// Stops watching `key`: returns the operations watched under it that
    /// were pending, cancelled (no callback runs; their
    /// [`outcome`](Operation::outcome) is [`Outcome::Cancelled`] and their
    /// waiters are woken before this returns), with their timers disarmed
    /// and removed from the watch lists of their other keys too. They may
    /// be watched again. Returns an empty vector for an unknown key. An
    /// operation watched more than once under `key` is returned once
    /// (Kafka's `cancelForKey` returns it once per watch). Made from the key
    /// iterator of a watch (see
    /// [`try_complete_else_watch`](Self::try_complete_else_watch)), it
    /// cancels that watch's operation too if the operation joined `key`;
    /// that one leaves the lists of its other keys, its waiters are woken,
    /// and it may be watched again when the watch returns.
    ///
    /// `key` may be any borrowed form of the key type (see
    /// [`check_and_complete`](Self::check_and_complete)).
    pub fn cancel_for_key<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Vec<Operation<Op>>
    where
        K: Borrow<Q>,
    {
        key_eq::not_from_key_eq("cancel_for_key");
        let mut ops = Vec::new();
        if !self.index.remove(key, &mut ops) {
            return Vec::new();
        }
        let mut cancelled = Vec::with_capacity(ops.len());
        let mut released = Vec::new();
        for (op, stay) in ops {
            // An operation watched twice on the key appears twice; the first
            // visit cancels it. One in this stay with no owner yet is being
            // watched here, by the watch that holds its lock on this thread
            // and runs this call from its key iterator: cancelled, it is
            // counted here.
            let token = op.cancel_found(stay, self.home.addr(), || {
                self.home.count(Outcome::Cancelled);
            });
            match token {
                Some(token) => {
                    released.push(token);
                    cancelled.push(Operation(op));
                }
                None => let_go(op),
            }
        }
        for token in released {
            let_go(token);
        }
        cancelled
    }
}
