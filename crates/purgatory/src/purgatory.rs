//! The purgatory: operations watched under keys until their condition holds
//! or their timeout passes.
//!
//! [`Purgatory::try_complete_else_watch`] follows Kafka's sequence: try the
//! operation; if it cannot complete, watch it under every key *while holding
//! its lock*, try again (so no completion event between the two tries is
//! lost), then arm its timer outside the lock and disarm it if the operation
//! completed meanwhile. [`Purgatory::check_and_complete`] tries the operations
//! watched under one key. Expiry runs on the timer's executor thread, driven
//! by the reaper thread or by [`Purgatory::advance_clock`].
//!
//! # Invariants
//!
//! * An operation is completed exactly once, under its lock, by whoever gets
//!   there first (a key's check, a force-complete, the timeout); completing
//!   it releases it from every watch list and its timer before
//!   `on_complete` runs. So [`Purgatory::watched`] and
//!   [`Purgatory::delayed`] count only pending operations, and the slots and
//!   timer entries of completed ones are freed in small per-thread batches
//!   (see [`Purgatory::purge`]), never by a sweep over every list.
//! * [`Purgatory::watched`] and [`Purgatory::delayed`] are O(1) reads of
//!   counters.
//! * No user callback runs while a watch-list shard lock is held; checks work on
//!   a snapshot of a list, taken a chunk at a time.
//! * After [`Purgatory::shutdown`] nothing is watched or armed; every
//!   operation that was pending has been handled by the
//!   [`ShutdownPolicy`] and returned.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::iter;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use timer::{Clock, ConfigError, Reaper, ShutdownError, TimerBuilder};

use crate::error::PurgatoryError;
use crate::home::Home;
use crate::operation::{purgatory_holds_a_lock, DelayedOperation, ExpiryTask, Operation, Shared};
use crate::watch::{KeyHasher, Members, WatchIndex, WatchKey};

/// How many operations [`Purgatory::check_and_complete`] copies out of a list
/// per shard-lock hold: small enough that a scan of a long hot list never
/// holds off a watcher of the same shard for long.
const CHECK_CHUNK: usize = 64;

/// What [`Purgatory::shutdown`] (and dropping a purgatory) does with the
/// operations still pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShutdownPolicy {
    /// Kafka's behaviour: pending operations get no callback. They are
    /// unwatched, disarmed, left not completed, and returned by `shutdown()`.
    #[default]
    Drop,
    /// Each pending operation is expired as if its timeout had passed:
    /// `on_complete` then `on_expiration` run (on the thread calling
    /// `shutdown()`), and it is returned by `shutdown()`, completed.
    Expire,
}

/// Configures and builds a [`Purgatory`]; see [`Purgatory::builder`]. `S`
/// is the key hasher (see [`hasher`](Self::hasher)).
#[derive(Debug, Clone)]
pub struct PurgatoryBuilder<S = RandomState> {
    name: String,
    /// Tick, wheel size and clock of the purgatory's timer.
    timer: TimerBuilder,
    reaper: bool,
    reaper_poll_interval: Duration,
    shutdown_policy: ShutdownPolicy,
    shards: usize,
    hasher: S,
}

impl PurgatoryBuilder {
    /// The default number of watch-list shards (Kafka's).
    pub const DEFAULT_SHARDS: usize = 512;

    fn new(name: String) -> Self {
        PurgatoryBuilder {
            timer: TimerBuilder::new().name(name.clone()),
            name,
            reaper: true,
            reaper_poll_interval: Reaper::DEFAULT_POLL_INTERVAL,
            shutdown_policy: ShutdownPolicy::Drop,
            shards: Self::DEFAULT_SHARDS,
            hasher: RandomState::new(),
        }
    }
}

impl<S> PurgatoryBuilder<S> {
    /// The hasher of watch keys (default: std's [`RandomState`], SipHash
    /// with a random seed, which resists keys chosen to collide). Every
    /// watch and check hashes its key once; with short keys SipHash is a
    /// noticeable part of a watch's cost (in W2, with 3 keys per request,
    /// rustc's FxHasher cut the watching thread's instructions per request
    /// by 17% and its CPU time by up to a tenth), so a faster hasher pays
    /// where keys are not chosen by untrusted clients.
    /// Kafka's keys include client-chosen strings (group and transactional
    /// ids); keep a seeded, collision-resistant hasher for those.
    pub fn hasher<S2: KeyHasher>(self, hasher: S2) -> PurgatoryBuilder<S2> {
        PurgatoryBuilder {
            name: self.name,
            timer: self.timer,
            reaper: self.reaper,
            reaper_poll_interval: self.reaper_poll_interval,
            shutdown_policy: self.shutdown_policy,
            shards: self.shards,
            hasher,
        }
    }

    /// The clock timeouts are measured with (default: a new
    /// [`SystemClock`](timer::SystemClock)).
    pub fn clock(self, clock: impl Clock) -> Self {
        self.shared_clock(Arc::new(clock))
    }

    /// A clock shared with other components (e.g. several purgatories and a
    /// simulation driving one [`ManualClock`](timer::ManualClock)).
    pub fn shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.timer = self.timer.shared_clock(clock);
        self
    }

    /// The timer's tick (default 1 ms; a whole number of milliseconds).
    pub fn tick(mut self, tick: Duration) -> Self {
        self.timer = self.timer.tick(tick);
        self
    }

    /// The number of buckets per timing-wheel level (default 20).
    pub fn wheel_size(mut self, wheel_size: usize) -> Self {
        self.timer = self.timer.wheel_size(wheel_size);
        self
    }

    /// Whether a reaper thread drives expiry (default `true`). Without it,
    /// operations expire only when [`Purgatory::advance_clock`] is called:
    /// the setting for tests and virtual-time simulations.
    pub fn reaper(mut self, enabled: bool) -> Self {
        self.reaper = enabled;
        self
    }

    /// How long the reaper waits for the next bucket per loop (default
    /// 200 ms, as Kafka). It wakes early when an earlier bucket is added and
    /// on shutdown, so this only bounds idle wake-ups.
    pub fn reaper_poll_interval(mut self, poll: Duration) -> Self {
        self.reaper_poll_interval = poll;
        self
    }

    /// What shutdown does with pending operations (default
    /// [`ShutdownPolicy::Drop`]).
    pub fn shutdown_policy(mut self, policy: ShutdownPolicy) -> Self {
        self.shutdown_policy = policy;
        self
    }

    /// The number of watch-list shards (default 512), rounded up to a power
    /// of two, at least 2.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// Builds the purgatory, starting its timer's executor thread and, if
    /// enabled, its reaper thread.
    ///
    /// # Errors
    /// [`PurgatoryError::Config`] for a bad tick or wheel size, or if a
    /// thread cannot be spawned; [`PurgatoryError::ZeroReaperPollInterval`]
    /// for a zero poll interval with the reaper enabled.
    pub fn build<K: WatchKey, Op: DelayedOperation>(
        self,
    ) -> Result<Purgatory<K, Op, S>, PurgatoryError>
    where
        S: KeyHasher,
    {
        if self.reaper && self.reaper_poll_interval.is_zero() {
            return Err(PurgatoryError::ZeroReaperPollInterval);
        }
        let timer = Arc::new(self.timer.build::<ExpiryTask<Op>>()?);
        let reaper = if self.reaper {
            let reaper = Reaper::try_start(timer.clone(), self.reaper_poll_interval)
                .map_err(|e| PurgatoryError::Config(ConfigError::Spawn(e.to_string())))?;
            Some(reaper)
        } else {
            None
        };
        let shards = self.shards.max(2).next_power_of_two();
        let index = WatchIndex::<K, Op, S>::new(shards, self.hasher);
        Ok(Purgatory {
            home: Arc::new(Home::new(self.name, timer, index.clone())),
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
    home: Arc<Home<Op>>,
    index: Arc<WatchIndex<K, Op, S>>,
    reaper: Mutex<Option<Reaper>>,
    policy: ShutdownPolicy,
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
    /// Before that, the call drops up to two operations that completed
    /// earlier, under any key (their last references, held by the purgatory
    /// once their slots and timer entries are freed), so that their memory
    /// is freed on a thread that creates operations rather than on the
    /// thread that completed them (see [`purge`](Self::purge)). Their `Drop`
    /// runs here, under whatever locks the caller holds (see
    /// [`DelayedOperation`]).
    ///
    /// # Errors
    /// * [`PurgatoryError::NoKeys`] if `keys` is empty (nothing is tried).
    /// * [`PurgatoryError::AlreadyWatched`] if the operation is already
    ///   watched, here or elsewhere, and
    ///   [`PurgatoryError::AlreadyCompleted`] if it has completed: an
    ///   operation is handed over at most once at a time and never after it
    ///   completed. (One returned by [`cancel_for_key`](Self::cancel_for_key)
    ///   or by a [`ShutdownPolicy::Drop`] shutdown may be watched again.)
    /// * [`PurgatoryError::Shutdown`] if the purgatory is shut down; the
    ///   operation is then not watched. If the call began before the
    ///   shutdown and had started watching the operation, the operation has
    ///   been handled by the [`ShutdownPolicy`] like every pending one (with
    ///   [`ShutdownPolicy::Expire`] it has expired), and it may or may not
    ///   be in the list `shutdown()` returns; otherwise it is untouched.
    pub fn try_complete_else_watch(
        &self,
        op: impl Into<Operation<Op>>,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<bool, PurgatoryError> {
        let result = self.watch_or_complete(op.into(), keys);
        // What completing it (or a shutdown meeting it) deferred until its
        // lock was released.
        self.home.drop_deferred();
        result
    }

    /// [`try_complete_else_watch`](Self::try_complete_else_watch), but for
    /// the deferred drops.
    fn watch_or_complete(
        &self,
        op: Operation<Op>,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<bool, PurgatoryError> {
        let shared = &op.0;
        let mut keys = keys.into_iter();
        let Some(first) = keys.next() else {
            return Err(PurgatoryError::NoKeys);
        };
        if self.home.is_shut_down() {
            return Err(PurgatoryError::Shutdown);
        }
        // This thread's share of freeing completed operations: so they are
        // freed where operations are created (see `crate::retire`).
        self.home.drop_unlinked();
        let name = self.home.name.as_str();
        let (epoch, timeout) = {
            let _guard = shared.lock_for_purgatory();
            if shared.is_completed() {
                return Err(PurgatoryError::AlreadyCompleted);
            }
            if shared.is_watched() {
                return Err(PurgatoryError::AlreadyWatched);
            }
            if shared.try_complete_guarded(name) {
                // Not watched yet: nothing of it is retired or deferred.
                let _ = shared.finish(false);
                return Ok(true);
            }
            let timeout = crate::operation::guarded(name, "timeout", || shared.op().timeout())
                .unwrap_or(Duration::ZERO);
            // No user code runs while the operation is being added to the
            // lists and we hold its lock, so it cannot complete meanwhile:
            // Kafka's "skip the remaining keys once completed" never applies.
            let mut members = Members::new();
            let mut refused = false;
            let closed = || self.home.is_shut_down();
            for key in iter::once(first).chain(keys) {
                match self.index.watch(key, shared, closed) {
                    Some(m) => members.push(m),
                    None => {
                        refused = true;
                        break;
                    }
                }
            }
            debug_assert!(!shared.is_completed());
            self.home.add_watched(members.len());
            let epoch = shared.claim(self.home.clone(), members);
            if refused {
                // Shut down while we were watching: handled like every
                // operation pending at shutdown.
                self.apply_shutdown_policy(shared);
                return Err(PurgatoryError::Shutdown);
            }
            if shared.try_complete_guarded(name) {
                // Settled by the caller.
                let _ = shared.finish(false);
                return Ok(true);
            }
            (epoch, timeout)
        };
        self.arm(shared, epoch, timeout)
    }

    /// Arms the timer of an operation claimed at `epoch`, outside its lock.
    fn arm(
        &self,
        shared: &Arc<Shared<Op>>,
        epoch: u32,
        timeout: Duration,
    ) -> Result<bool, PurgatoryError> {
        let task = ExpiryTask::new(shared.clone(), epoch);
        match self.home.timer.add(timeout, task) {
            Ok(handle) => {
                let mut links = shared.links.lock();
                if links.epoch == epoch && links.home.is_some() {
                    links.timer = Some(handle);
                    self.home.add_armed();
                } else {
                    // Completed (or cancelled) between the lock release and
                    // now: disarm. If the entry already fired, its task sees
                    // the operation completed or unclaimed and does nothing.
                    drop(links);
                    self.home.timer.cancel(&handle);
                }
                Ok(false)
            }
            Err(ShutdownError(task)) => {
                drop(task);
                let _guard = shared.lock_for_purgatory();
                let ours = shared.is_claimed_by(&self.home) && shared.links.lock().epoch == epoch;
                if ours && !shared.is_completed() {
                    self.apply_shutdown_policy(shared);
                }
                Err(PurgatoryError::Shutdown)
            }
        }
    }

    /// Handles one pending operation at shutdown. Operation lock held.
    fn apply_shutdown_policy(&self, shared: &Arc<Shared<Op>>) {
        match self.policy {
            ShutdownPolicy::Drop => {
                shared.release(false);
            }
            ShutdownPolicy::Expire => {
                // Settled by the caller: shutdown purges, and
                // `try_complete_else_watch` drops what was deferred.
                let _ = shared.finish(true);
            }
        }
    }

    /// Tries every operation watched under `key` and completes those that can
    /// complete now. Returns how many this call completed.
    ///
    /// Each operation is tried under its lock (waiting for it, as Kafka
    /// does), never with a purgatory lock held: the list is copied a chunk at
    /// a time and the copies are tried. The operations it completed have
    /// left all their lists when it returns (it frees this thread's retired
    /// batch, see [`purge`](Self::purge)), and a key whose list became empty
    /// is removed. Call it
    /// without holding locks that `try_complete` implementations take, and
    /// mind the lock order when calling it from a callback (see
    /// [`DelayedOperation`]).
    pub fn check_and_complete(&self, key: &K) -> usize {
        let name = self.home.name.as_str();
        let mut batch = Vec::new();
        let mut cursor = None;
        let mut completed = 0;
        // Called from a callback (an outer frame holds an operation lock):
        // the copies may be the last references by the time they are let
        // go, and must not be dropped under that lock.
        let nested = purgatory_holds_a_lock();
        let mut held_back = Vec::new();
        loop {
            cursor = self.index.scan(key, cursor, CHECK_CHUNK, &mut batch);
            for op in batch.drain(..) {
                if op.check(name) {
                    completed += 1;
                }
                if nested {
                    held_back.push(op);
                }
            }
            if cursor.is_none() {
                break;
            }
        }
        if !held_back.is_empty() {
            self.home.drop_or_defer(held_back);
        }
        if completed > 0 {
            self.home.free_own_retired();
            log::debug!("purgatory {name}: completed {completed} operations for key {key:?}");
        } else {
            // What nested calls from `try_complete` deferred.
            self.home.drop_deferred();
        }
        completed
    }

    /// Stops watching `key`: returns the operations watched under it, not
    /// completed (no callback runs), with their timers disarmed and removed
    /// from the watch lists of their other keys too. They may be watched
    /// again. Returns an empty vector for an unknown key.
    pub fn cancel_for_key(&self, key: &K) -> Vec<Operation<Op>> {
        let mut ops = Vec::new();
        if !self.index.remove(key, &mut ops) {
            return Vec::new();
        }
        let mut cancelled = Vec::with_capacity(ops.len());
        let nested = purgatory_holds_a_lock();
        let mut held_back = Vec::new();
        for op in ops {
            let ours = {
                let _guard = op.lock_for_purgatory();
                // An operation watched twice on the key appears twice; the
                // first visit releases it. One completing concurrently is
                // left to its completer.
                let ours = !op.is_completed() && op.is_claimed_by(&self.home);
                if ours {
                    op.release(true);
                }
                ours
            };
            if ours {
                cancelled.push(Operation(op));
            } else if nested {
                // As in `check_and_complete`.
                held_back.push(op);
            }
        }
        if !held_back.is_empty() {
            self.home.drop_or_defer(held_back);
        }
        self.home.free_own_retired();
        cancelled
    }

    /// Number of watch-list entries (an operation watched under three keys
    /// counts three times). O(1): a sum of a few per-thread counters (at
    /// most 64), independent of the number of operations. Completed and
    /// cancelled operations are never counted, even before their slots are
    /// freed (see [`purge`](Self::purge)).
    pub fn watched(&self) -> usize {
        self.home.watched()
    }

    /// Number of operations with an armed timer. O(1): a sum of a few
    /// per-thread counters (at most 64), independent of the number of
    /// operations. An operation stops being counted as soon as it completes
    /// or is cancelled, even before its timer entry is removed (see
    /// [`purge`](Self::purge)).
    pub fn delayed(&self) -> usize {
        self.home.delayed()
    }

    /// Frees now the watch-list slots and timer entries of every completed
    /// or cancelled operation not yet freed, and drops the purgatory's
    /// references to every completed operation it still holds.
    ///
    /// The purgatory frees completed operations by itself, in two stages,
    /// and never sweeps its lists as Kafka's purge does:
    ///
    /// * An operation leaves the counts at once when it completes, but its
    ///   slots and timer entry are freed in batches of 64 per thread stripe
    ///   (two stripes per CPU): one lock hold per shard and 16 slots
    ///   instead of one per key and operation. At most 63 per stripe wait.
    ///   [`check_and_complete`](Self::check_and_complete) and
    ///   [`cancel_for_key`](Self::cancel_for_key) free what their own thread
    ///   released before returning.
    /// * Its memory is then freed by the threads that watch new operations,
    ///   two per [`try_complete_else_watch`](Self::try_complete_else_watch),
    ///   so that it returns to the allocator where it was allocated. At most
    ///   512 wait.
    ///
    /// So a bounded number of completed operations stay allocated, and some
    /// stay until the next watch: if operations stop being watched and their
    /// `Drop` releases something that matters (a permit, a channel, a large
    /// buffer), call this from time to time. [`advance_clock`](Self::advance_clock)
    /// and shutdown call it;
    /// [`watched_on`](Self::watched_on) and [`watched_keys`](Self::watched_keys)
    /// free the slots (for exact counts) but leave the dropping to watchers.
    /// Kafka's purge, by contrast, lets about a thousand completed operations
    /// linger per purgatory in its lists, then sweeps every list, O(all
    /// watched entries), and runs only on its reaper.
    pub fn purge(&self) {
        self.home.free_all_retired(true);
    }

    /// Number of watch-list entries under `key` (0 for an unknown key).
    /// Frees retired slots first (see [`purge`](Self::purge)), then takes
    /// that key's list lock briefly.
    pub fn watched_on(&self, key: &K) -> usize {
        self.home.free_all_retired(false);
        self.index.len_of(key)
    }

    /// Number of keys with at least one watched operation. Frees retired
    /// slots first (see [`purge`](Self::purge)).
    pub fn watched_keys(&self) -> usize {
        self.home.free_all_retired(false);
        self.index.keys()
    }

    /// Drives expiry by hand: waits up to `timeout` (real time) for the next
    /// timer bucket to come due, expires every operation due by the clock,
    /// and returns once their expiration callbacks have run. Returns whether
    /// anything was due. With a [`ManualClock`](timer::ManualClock) and no
    /// reaper, call it with `Duration::ZERO` after moving the clock.
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        let any = self.home.timer.advance_clock(timeout);
        self.home.timer.wait_for_executor();
        self.purge();
        any
    }

    /// Shuts the purgatory down: stops the reaper, stops the timer (letting
    /// expirations already under way finish), and handles every operation
    /// still pending by the [`ShutdownPolicy`]. Returns those operations.
    /// Afterwards nothing is watched or armed, and
    /// [`try_complete_else_watch`](Self::try_complete_else_watch) fails with
    /// [`PurgatoryError::Shutdown`]. Idempotent: later calls return nothing.
    /// Dropping the purgatory shuts it down too.
    pub fn shutdown(&self) -> Vec<Operation<Op>> {
        if self.home.mark_shut_down() {
            return Vec::new();
        }
        if let Some(reaper) = self.reaper.lock().take() {
            reaper.stop();
        }
        // Pending timer entries are dropped: their operations are all in
        // watch lists, and are handled from there.
        drop(self.home.timer.shutdown());
        // Free the retired slots first, so the drain copies only the pending.
        self.purge();
        let mut ops = Vec::new();
        self.index.drain(&mut ops);
        let mut pending = Vec::new();
        for op in ops {
            let ours = {
                let _guard = op.lock_for_purgatory();
                let ours = !op.is_completed() && op.is_claimed_by(&self.home);
                if ours {
                    self.apply_shutdown_policy(&op);
                }
                ours
            };
            if ours {
                pending.push(Operation(op));
            }
        }
        self.purge();
        log::debug!(
            "purgatory {}: shut down with {} pending operations ({:?} policy)",
            self.home.name,
            pending.len(),
            self.policy
        );
        pending
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    pub fn is_shut_down(&self) -> bool {
        self.home.is_shut_down()
    }

    /// The shutdown policy.
    pub fn shutdown_policy(&self) -> ShutdownPolicy {
        self.policy
    }

    /// The purgatory's name (also its timer's, and in its reaper thread's).
    pub fn name(&self) -> &str {
        &self.home.name
    }

    /// The clock timeouts are measured with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        self.home.timer.clock()
    }
}

impl<K: WatchKey, Op: DelayedOperation, S: KeyHasher> Drop for Purgatory<K, Op, S> {
    /// Shuts down (see [`Purgatory::shutdown`]); the pending operations are
    /// handled by the policy and dropped.
    fn drop(&mut self) {
        drop(self.shutdown());
        // Operations released by other threads while `shutdown` ran (a
        // racing check or expiry) after its last purge.
        self.purge();
    }
}

impl<K: WatchKey, Op: DelayedOperation, S: KeyHasher> fmt::Debug for Purgatory<K, Op, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purgatory")
            .field("name", &self.home.name)
            .field("watched", &self.watched())
            .field("delayed", &self.delayed())
            .field("keys", &self.index.keys())
            .field("shutdown_policy", &self.policy)
            .field("shut_down", &self.is_shut_down())
            .finish()
    }
}
