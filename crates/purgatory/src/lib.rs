//! A Kafka-style delayed-operation purgatory.
//!
//! A broker receives requests it cannot answer yet (a produce waiting for
//! its followers, a fetch waiting for data, a heartbeat expectation waiting
//! for the member's next heartbeat). Each becomes a *delayed operation*
//! ([`DelayedOperation`]) that completes as soon as its condition holds, or
//! expires when its timeout passes — exactly once either way. A
//! [`Purgatory`] holds them, watched under *keys* (a partition, a member):
//! when the state behind a key changes, [`Purgatory::check_and_complete`]
//! tries the operations watched under it. Timeouts run on a hierarchical
//! timing wheel (the `timer` crate), driven by a reaper thread or, in tests
//! and simulations, by hand.
//!
//! # Guarantees
//!
//! * `on_complete` runs exactly once per operation, whatever races (checks on
//!   several keys from many threads, the timeout, [`Operation::force_complete`]);
//!   `on_expiration` runs only when the timeout completed it, after
//!   `on_complete`. The callbacks and `try_complete` always run under the
//!   operation's (reentrant) lock, so never concurrently with each other.
//! * **The life of an operation.** It leaves the purgatory in exactly one
//!   way per stay, and [`Operation::outcome`] says which ([`Outcome`]):
//!   `Completed` (a check, a try, a force), `Expired` (its timeout, or a
//!   shutdown with [`ShutdownPolicy::Expire`]) or `Cancelled`
//!   ([`Purgatory::cancel`], [`Purgatory::cancel_for_key`], a shutdown with
//!   [`ShutdownPolicy::Drop`]; no callback runs). [`Operation::completion`]
//!   is a future of that outcome that works on any executor (this crate
//!   depends on no async runtime), [`Operation::wait_timeout`] blocks a
//!   thread on it. Waiters are woken by the call that ended the operation,
//!   before it returns, after the callbacks ran and the purgatory let go of
//!   it. [`Operation::outcome`] shows `Completed` or `Expired` once the
//!   callbacks ran (while they run, `is_completed()` is already true).
//!   Waiters of an operation dropped outside a stay (never watched, or its
//!   watch refused) are woken with `Cancelled` when it is dropped: after a
//!   refused watch, drop the operation or stop awaiting it.
//! * **Prompt release.** When the call that completed or cancelled an
//!   operation returns (for an expiry: once the timer's pass that ran it
//!   has; for a call made from inside a callback: when the outermost
//!   purgatory call on that thread returns), the purgatory holds no
//!   reference to it: its `Drop` runs then if the caller kept no handle,
//!   never while a purgatory lock or an operation lock is held (see
//!   [`DelayedOperation`]), unless a call on another thread holds a passing
//!   copy then (a check or `cancel_for_key` of another of its keys, a
//!   shutdown, its expiry firing): `Drop` then runs when that call lets go
//!   (see [`DelayedOperation`] on where operations are dropped). Its
//!   watch-list slots and timer entry, which
//!   point at it weakly, are freed in small per-thread batches (64 per
//!   stripe, one lock hold per shard and 16 slots), and its memory goes
//!   back mostly on threads that watch new operations; no sweep over every
//!   list is ever needed (see [`Purgatory::purge`]).
//! * A completed or cancelled operation stops being counted at once:
//!   [`Purgatory::stats`] (Kafka's `PurgatorySize` and
//!   `NumDelayedOperations`, and counts of each outcome), [`Purgatory::watched`]
//!   and [`Purgatory::delayed`] are O(1), lock-free reads. (One completed
//!   by user code a watch runs before attaching it, say its keys' iterator
//!   forcing it once the first key is taken, is counted when that code is
//!   done, before the watch returns.) With the `metrics`
//!   cargo feature the two gauges are published through the `metrics`
//!   facade, set by the reaper once per poll interval (and by `stats`,
//!   `advance_clock` and `shutdown`), and each expiration and each
//!   callback that panicked is counted. A purgatory registers these with
//!   the recorder installed when it is built (a purgatory built before the
//!   recorder publishes nothing): install the recorder first.
//! * No user callback runs while a purgatory lock is held, so callbacks may
//!   call back into the purgatory. Panics in callbacks (and in an
//!   operation's `Drop` when the purgatory lets go of it) are caught at the
//!   purgatory boundary and logged (`log::error!`), and the callbacks'
//!   counted ([`PurgatoryStats::panicked`]); a panicking
//!   `try_complete` counts as "not complete", a panicking `on_complete`
//!   still leaves the operation completed and unwatched. A key whose `Hash`
//!   or `Eq` panics leaves no partial watch; that panic reaches the caller.
//!   A key's `Drop` that panics when the purgatory lets go of the key (or
//!   of a key a refused or at once completed watch did not use, or that its
//!   iterator still held) is logged.
//!   A [`Clock`] that panics as a watch arms the operation's timeout is
//!   logged too, and the operation expires at once, as with a panicking
//!   `timeout`.
//! * Watch lists are sharded: unrelated keys do not contend.
//! * Shutdown handles pending operations by an explicit [`ShutdownPolicy`].
//! * Bad configuration (a shard count of 0 or above
//!   [`PurgatoryBuilder::MAX_SHARDS`], a zero tick, a zero reaper poll) is
//!   an error value from [`PurgatoryBuilder::build`], never a panic.
//!
//! Differences from Kafka, by design: completion removes operations from
//! every list in small bounded batches instead of a periodic purge that
//! sweeps every list once about 1,000 completed operations linger;
//! `cancel_for_key` also removes the operations from their other keys, and
//! [`Purgatory::cancel`] cancels one operation; `try_complete_else_watch`
//! rejects an operation that is already watched or completed
//! ([`PurgatoryError::AlreadyWatched`], [`PurgatoryError::AlreadyCompleted`]).
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use purgatory::{DelayedOperation, ManualClock, Operation, Purgatory};
//!
//! /// Waits until `acked` is set; counts its completions and expirations.
//! struct WaitForAcks {
//!     acked: Arc<AtomicBool>,
//!     completed: AtomicUsize,
//!     expired: AtomicUsize,
//! }
//!
//! impl DelayedOperation for WaitForAcks {
//!     fn timeout(&self) -> Duration {
//!         Duration::from_millis(100)
//!     }
//!     fn try_complete(&self) -> bool {
//!         self.acked.load(Ordering::Acquire)
//!     }
//!     fn on_complete(&self) {
//!         self.completed.fetch_add(1, Ordering::Relaxed);
//!     }
//!     fn on_expiration(&self) {
//!         self.expired.fetch_add(1, Ordering::Relaxed);
//!     }
//! }
//!
//! // Virtual time and no reaper: expiry happens only in advance_clock.
//! let clock = ManualClock::new();
//! let purgatory = Purgatory::builder("produce")
//!     .clock(clock.clone())
//!     .reaper(false)
//!     .build::<&str, WaitForAcks>()
//!     .unwrap();
//!
//! let acked = Arc::new(AtomicBool::new(false));
//! let new_op = || {
//!     Operation::new(WaitForAcks {
//!         acked: acked.clone(),
//!         completed: AtomicUsize::new(0),
//!         expired: AtomicUsize::new(0),
//!     })
//! };
//!
//! // Not complete yet: watched under both partitions, timer armed.
//! let op = new_op();
//! assert_eq!(purgatory.try_complete_else_watch(op.clone(), ["p0", "p1"]), Ok(false));
//! assert_eq!((purgatory.watched(), purgatory.delayed()), (2, 1));
//!
//! // The followers catch up on p0: a check on that key completes it, and it
//! // leaves p1's list too.
//! acked.store(true, Ordering::Release);
//! assert_eq!(purgatory.check_and_complete(&"p0"), 1);
//! assert!(op.is_completed() && !op.is_expired());
//! assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
//! assert_eq!(op.completed.load(Ordering::Relaxed), 1);
//!
//! // Another one times out.
//! acked.store(false, Ordering::Release);
//! let late = new_op();
//! assert_eq!(purgatory.try_complete_else_watch(late.clone(), ["p0"]), Ok(false));
//! clock.advance(Duration::from_millis(100));
//! purgatory.advance_clock(Duration::ZERO);
//! assert!(late.is_expired());
//! assert_eq!(late.completed.load(Ordering::Relaxed), 1);
//! assert_eq!(late.expired.load(Ordering::Relaxed), 1);
//! assert_eq!(purgatory.watched(), 0);
//! ```
//!
//! # Awaiting an operation
//!
//! A request handler that watches an operation can await its outcome on
//! any executor; here a minimal one, a thread parking between polls.
//!
//! ```
//! use std::future::Future;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//! use std::task::{Context, Poll, Wake, Waker};
//! use std::time::Duration;
//! use purgatory::{DelayedOperation, Operation, Outcome, Purgatory};
//!
//! struct Produce(AtomicBool);
//! impl DelayedOperation for Produce {
//!     fn timeout(&self) -> Duration { Duration::from_secs(30) }
//!     fn try_complete(&self) -> bool { self.0.load(Ordering::Acquire) }
//!     fn on_complete(&self) {}
//! }
//!
//! struct Unpark(std::thread::Thread);
//! impl Wake for Unpark {
//!     fn wake(self: Arc<Self>) { self.0.unpark() }
//! }
//! fn block_on<F: Future>(f: F) -> F::Output {
//!     let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
//!     let mut f = std::pin::pin!(f);
//!     loop {
//!         if let Poll::Ready(out) = f.as_mut().poll(&mut Context::from_waker(&waker)) {
//!             return out;
//!         }
//!         std::thread::park();
//!     }
//! }
//!
//! let purgatory = Arc::new(
//!     Purgatory::builder("produce").reaper(false).build::<&str, Produce>().unwrap(),
//! );
//! let op = Operation::new(Produce(AtomicBool::new(false)));
//! purgatory.try_complete_else_watch(op.clone(), ["p0"]).unwrap();
//! let done = op.completion(); // this stay's outcome; owned: Send + 'static
//!
//! let handler = std::thread::spawn(move || block_on(done));
//! op.0.store(true, Ordering::Release); // the followers caught up
//! purgatory.check_and_complete(&"p0");
//! assert_eq!(handler.join().unwrap(), Outcome::Completed);
//! assert_eq!(op.outcome(), Some(Outcome::Completed));
//! ```
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
// `unsafe` is allowed only where it is, each with its SAFETY note:
// `Shared::detach` and the reads of the operation's split lock and links
// (operation/), the links cell's `unsafe impl Sync` and its guard
// (operation/links.rs), the lock word and the own lock's unlock
// (oplock.rs), the expiry task's tagged pointer (release/mod.rs: `ExpiryTask`'s
// `unsafe impl Send`, `take`, `parts` and `Drop`) and the raw lock
// (sync.rs); the loom model's guarded cell is test-only.
#![deny(unsafe_code)]

mod builder;
mod cancel_on_drop;
mod error;
mod home;
mod key_eq;
mod maintenance;
mod members;
mod operation;
mod oplock;
mod outcome;
mod purgatory;
mod release;
mod retire;
mod stackbuf;
mod stats;
mod stripe;
mod sync;
mod watch;

pub use crate::builder::{PurgatoryBuilder, ShutdownPolicy};
pub use crate::cancel_on_drop::CancelOnDrop;
pub use crate::error::PurgatoryError;
pub use crate::operation::{DelayedOperation, Operation};
pub use crate::oplock::{new_operation_lock, OperationGuard, OperationLock};
pub use crate::outcome::{Completion, Outcome};
pub use crate::purgatory::Purgatory;
#[doc(hidden)]
pub use crate::purgatory::Unchosen;
pub use crate::stats::PurgatoryStats;
pub use crate::watch::{KeyHasher, WatchKey};
pub use timer::{Clock, ConfigError, ManualClock, SystemClock};
