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
//! * A completed or cancelled operation stops being counted at once
//!   ([`Purgatory::watched`] and [`Purgatory::delayed`] are O(1) and count
//!   only pending operations), and leaves every watch list and the timer in
//!   O(1) per key, batched: its slots are freed with the next 63 released
//!   on the same thread stripe, one lock hold per shard and 16 slots. Its
//!   memory is then freed two at a time by the calls that watch new
//!   operations, so it returns to the allocator on a thread that allocates.
//!   So a bounded number of completed operations stay allocated (at most 63
//!   per stripe and 512 more, whatever the keys, plus what calls in
//!   progress hold back; the last ones until the next watch or
//!   [`Purgatory::purge`]), and no sweep over every list is ever needed.
//!   The purgatory never drops an operation while it holds an operation
//!   lock. `cancel_for_key` removes the operations it returns from
//!   their other keys' lists too.
//! * No user callback runs while a purgatory lock is held, so callbacks may
//!   call back into the purgatory. Panics in callbacks are caught at the
//!   purgatory boundary and logged (`log::error!`); a panicking
//!   `try_complete` counts as "not complete", a panicking `on_complete`
//!   still leaves the operation completed and unwatched.
//! * Watch lists are sharded: unrelated keys do not contend.
//! * Shutdown handles pending operations by an explicit [`ShutdownPolicy`].
//!
//! Differences from Kafka, by design: completion removes operations from
//! every list in small bounded batches instead of a periodic purge that
//! sweeps every list once about 1,000 completed operations linger;
//! `cancel_for_key` also
//! removes the operations from their other keys; `try_complete_else_watch`
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
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod builder;
mod error;
mod home;
mod maintenance;
mod members;
mod operation;
mod outcome;
mod purgatory;
mod release;
mod retire;
mod stats;
mod stripe;
mod sync;
mod watch;

pub use crate::builder::{PurgatoryBuilder, ShutdownPolicy};
pub use crate::error::PurgatoryError;
pub use crate::operation::{
    new_operation_lock, DelayedOperation, Operation, OperationGuard, OperationLock,
};
pub use crate::outcome::{Completion, Outcome};
pub use crate::purgatory::Purgatory;
#[doc(hidden)]
pub use crate::purgatory::Unchosen;
pub use crate::stats::PurgatoryStats;
pub use crate::watch::{KeyHasher, WatchKey};
pub use timer::{Clock, ConfigError, ManualClock, SystemClock};
