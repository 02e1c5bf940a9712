//! The purgatory's counts, housekeeping, clock and shutdown.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use timer::Clock;

use crate::builder::ShutdownPolicy;
use crate::key_eq;
use crate::operation::{DelayedOperation, Operation};
use crate::purgatory::Purgatory;
use crate::release::{self, let_go};
use crate::stats::PurgatoryStats;
use crate::watch::{KeyHasher, WatchKey};

impl<K: WatchKey, Op: DelayedOperation, S: KeyHasher> Purgatory<K, Op, S> {
    /// A snapshot of the purgatory's gauges and counts: O(1) (sums of a
    /// few per-thread counters, at most 64 each) and lock-free. With the
    /// `metrics` feature it also sets the published gauges (which the
    /// reaper sets once per poll interval, and
    /// [`advance_clock`](Self::advance_clock) and
    /// [`shutdown`](Self::shutdown) each time).
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatory::{DelayedOperation, ManualClock, Operation, Purgatory};
    ///
    /// struct Ack(bool);
    /// impl DelayedOperation for Ack {
    ///     fn timeout(&self) -> Duration { Duration::from_millis(50) }
    ///     fn try_complete(&self) -> bool { self.0 }
    ///     fn on_complete(&self) {}
    /// }
    ///
    /// let clock = ManualClock::new();
    /// let purgatory = Purgatory::builder("produce")
    ///     .clock(clock.clone())
    ///     .reaper(false)
    ///     .build::<&str, Ack>()
    ///     .unwrap();
    /// purgatory.try_complete_else_watch(Ack(true), ["p0"]).unwrap();
    /// purgatory.try_complete_else_watch(Ack(false), ["p0", "p1"]).unwrap();
    /// let stats = purgatory.stats();
    /// assert_eq!((stats.watched, stats.delayed, stats.completed), (2, 1, 1));
    ///
    /// clock.advance(Duration::from_millis(50));
    /// purgatory.advance_clock(Duration::ZERO);
    /// let stats = purgatory.stats();
    /// assert_eq!((stats.watched, stats.delayed, stats.expired), (0, 0, 1));
    /// ```
    pub fn stats(&self) -> PurgatoryStats {
        self.home.stats()
    }

    /// Number of watch-list entries (an operation watched under three keys
    /// counts three times). O(1): a sum of a few per-thread counters (at
    /// most 64), independent of the number of operations. Completed and
    /// cancelled operations stop being counted at once, even before their
    /// slots are freed (see [`purge`](Self::purge)); read while operations
    /// leave, see [`PurgatoryStats`].
    pub fn watched(&self) -> usize {
        self.home.watched()
    }

    /// Number of operations with an armed timer. O(1): a sum of a few
    /// per-thread counters (at most 64), independent of the number of
    /// operations. An operation stops being counted as soon as it completes
    /// or is cancelled, even before its timer entry is removed (see
    /// [`purge`](Self::purge)). One whose timeout has passed is counted
    /// until its expiry has run on the timer's executor, where Kafka's
    /// count (its timer's size) drops it as its bucket is flushed.
    pub fn delayed(&self) -> usize {
        self.home.delayed()
    }

    /// Frees now the watch-list slots and timer entries of every operation
    /// that has left and is not freed yet, and returns the memory of those
    /// nobody holds any more.
    ///
    /// The purgatory lets go of an operation when it leaves (see
    /// [`DelayedOperation`]: its value is dropped then if nobody else holds
    /// it), and frees what remains, memory only, by itself in two stages,
    /// never sweeping its lists as Kafka's purge does:
    ///
    /// * Its slots and timer entry, which point at it weakly, are freed in
    ///   batches of 64 per thread stripe (two stripes per CPU): one lock
    ///   hold per shard and 16 slots instead of one per key and operation.
    ///   At most 63 per stripe wait.
    ///   A [`check_and_complete`](Self::check_and_complete) that completed
    ///   anything frees what its own thread released before returning. A cancelled operation's
    ///   slots and timer entry ([`cancel`](Self::cancel),
    ///   [`cancel_for_key`](Self::cancel_for_key)) are freed as it is
    ///   cancelled, since it may be watched again at once (one cancelled
    ///   from its own watch's key iterator: by that watch, before it
    ///   returns).
    /// * Its memory is then returned by the threads that watch new
    ///   operations, two per
    ///   [`try_complete_else_watch`](Self::try_complete_else_watch), so that
    ///   it goes back to the allocator where it was allocated. A bounded
    ///   number (eight retired batches' worth) wait.
    ///
    /// So a bounded amount of memory lingers, and nothing that a `Drop`
    /// releases. Shutdown calls this; [`advance_clock`](Self::advance_clock)
    /// frees the same but leaves the shards' spare storage (below);
    /// [`watched_on`](Self::watched_on) and
    /// [`watched_keys`](Self::watched_keys) free the slots (for exact
    /// counts) but leave the memory to watchers.
    /// Kafka's purge, by contrast, lets about a thousand completed operations
    /// linger per purgatory in its lists, then sweeps every list, O(all
    /// watched entries), and runs only on its reaper.
    ///
    /// It also drops the storage of emptied lists that each shard keeps
    /// for its next lists (a few small slabs per shard, reused when keys
    /// come and go): they would pin scattered pages after a peak. What it
    /// keeps is small room reused in steady state: per shard, up to 64
    /// list ids and their key table's room (a shard that had more gives
    /// theirs back once all its lists are freed), and per timer bucket up
    /// to 1,024 entries' room (larger arrays shrink as they empty).
    pub fn purge(&self) {
        key_eq::not_from_key_eq("purge");
        self.purge_all();
    }

    /// [`purge`](Self::purge), unchecked (see `Drop`).
    fn purge_all(&self) {
        self.home.free_all_retired(true);
        self.index.drop_spares();
    }

    /// Number of watch-list entries under `key` (0 for an unknown key).
    /// Frees retired slots first (see [`purge`](Self::purge)), then takes
    /// that key's list lock briefly. `key` may be any borrowed form of the
    /// key type (see [`check_and_complete`](Purgatory::check_and_complete)).
    pub fn watched_on<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> usize
    where
        K: Borrow<Q>,
    {
        key_eq::not_from_key_eq("watched_on");
        self.home.free_all_retired(false);
        self.index.len_of(key)
    }

    /// Number of keys with at least one watched operation. Frees retired
    /// slots first (see [`purge`](Self::purge)).
    pub fn watched_keys(&self) -> usize {
        key_eq::not_from_key_eq("watched_keys");
        self.home.free_all_retired(false);
        self.index.keys()
    }

    /// Drives expiry by hand: waits up to `timeout` (real time) for the next
    /// timer bucket to come due, expires every operation due by the clock,
    /// and returns once their expiration callbacks have run. Returns whether
    /// anything was due. With a [`ManualClock`](timer::ManualClock) and no
    /// reaper, call it with `Duration::ZERO` after moving the clock.
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        key_eq::not_from_key_eq("advance_clock");
        let any = self.home.timer.advance_clock(timeout);
        self.home.timer.wait_for_executor();
        // A purge, but the shards keep their emptied lists' storage: a
        // simulation advancing the clock every tick keeps reusing it.
        self.home.free_all_retired(true);
        self.home.publish();
        any
    }

    /// Shuts the purgatory down: stops the reaper, stops the timer (letting
    /// expirations already under way finish), and handles every operation
    /// still pending by the [`ShutdownPolicy`]. Returns those operations.
    /// Afterwards nothing is watched or armed, and
    /// [`try_complete_else_watch`](Self::try_complete_else_watch) fails with
    /// [`PurgatoryError::Shutdown`](crate::PurgatoryError::Shutdown).
    /// Idempotent: later calls return nothing. A call made while another is
    /// under way first waits for it to finish, so that it too returns to a
    /// purgatory that is shut down; one made from a callback (which that
    /// call may be waiting for) returns at once. So call it holding no lock
    /// the first call may need: no operation's lock (it takes each pending
    /// operation's), and none that callbacks or timer tasks take. Dropping
    /// the purgatory shuts it down too.
    pub fn shutdown(&self) -> Vec<Operation<Op>> {
        key_eq::not_from_key_eq("shutdown");
        self.shut_down()
    }

    /// [`shutdown`](Self::shutdown), unchecked (see `Drop`).
    fn shut_down(&self) -> Vec<Operation<Op>> {
        let Some(_finishing) = self.home.shutdown_gate.enter() else {
            if !release::in_callback() {
                self.home.shutdown_gate.wait_finished();
                // A first call made on the timer's executor (from an expiry's
                // callback) could not wait for the expiries queued behind
                // it: the timer's own later call does.
                drop(self.home.timer.shutdown());
            }
            return Vec::new();
        };
        self.home.mark_shut_down();
        if let Some(reaper) = self.reaper.lock().take() {
            reaper.stop();
        }
        // Pending timer entries are dropped: their operations are all in
        // watch lists, and are handled from there.
        drop(self.home.timer.shutdown());
        // Free the retired slots first, so the drain copies only the pending.
        self.purge_all();
        let mut ops = Vec::new();
        self.index.drain(&mut ops);
        let mut pending = Vec::new();
        let mut released = Vec::new();
        // Whatever stay each was found in, only one still claimed here is
        // handled: one cancelled meanwhile may be watched elsewhere.
        for (op, _) in ops {
            let token = {
                let _guard = op.lock();
                if !op.is_completed() && op.is_claimed_by(self.home.addr()) {
                    self.apply_shutdown_policy(&op)
                } else {
                    None
                }
            };
            match token {
                Some(token) => {
                    released.push(token);
                    pending.push(Operation(op));
                }
                None => let_go(op),
            }
        }
        self.purge_all();
        for token in released {
            let_go(token);
        }
        release::flush();
        // The reaper is gone: the gauges' last values are these.
        self.home.publish();
        log::debug!(
            "purgatory {}: shut down with {} pending operations ({:?} policy)",
            self.home.name(),
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
        self.home.name()
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
        // Unchecked: one dropped from a key's `Eq` is not the purgatory
        // whose lock that `Eq` runs under (the call running it borrows
        // that one), and a panic here would leave its operations pending
        // for good. Through `let_go`, so that a panicking `Drop` of an
        // operation is logged, as everywhere the purgatory lets go of one,
        // rather than escaping here (or aborting a thread that is already
        // unwinding).
        for op in self.shut_down() {
            let_go(op);
        }
        release::flush();
        // Operations released by other threads while `shutdown` ran (a
        // racing check or expiry) after its last purge.
        self.purge_all();
    }
}

impl<K: WatchKey, Op: DelayedOperation, S: KeyHasher> fmt::Debug for Purgatory<K, Op, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purgatory")
            .field("name", &self.home.name())
            .field("stats", &self.stats())
            .field("keys", &self.index.keys())
            .field("shutdown_policy", &self.policy)
            .field("shut_down", &self.is_shut_down())
            .finish()
    }
}
