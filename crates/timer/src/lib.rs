//! A Kafka-style hierarchical timing wheel.
//!
//! Millions of timeouts can be pending at once, most of them cancelled long
//! before they fire (a request answered before its timeout), so this crate
//! makes add and cancel O(1) and never scans pending tasks: the clock jumps
//! from one due bucket to the next.
//!
//! # Usage
//!
//! ```
//! use std::sync::{mpsc, Arc};
//! use std::time::Duration;
//! use timer::{Reaper, Timer};
//!
//! // Kafka's defaults: tick 1 ms, 20 buckets per level, real time.
//! let timer: Arc<Timer> = Arc::new(Timer::new());
//! let reaper = Reaper::start(timer.clone()); // drives the clock in the background
//!
//! let (tx, rx) = mpsc::channel();
//! let answered = timer.add(Duration::from_secs(30), Box::new(|| unreachable!())).unwrap();
//! timer.add(Duration::from_millis(10), Box::new(move || tx.send("timed out").unwrap())).unwrap();
//!
//! assert!(timer.cancel(&answered)); // O(1); the task never runs
//! assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok("timed out"));
//! reaper.stop();
//! timer.shutdown();
//! ```
//!
//! Tests and simulations use a [`ManualClock`] and drive the timer by hand
//! with [`Timer::advance_clock`], so nothing sleeps:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use timer::{ManualClock, Timer, TimerBuilder};
//!
//! let clock = ManualClock::new();
//! let timer: Timer = TimerBuilder::new().clock(clock.clone()).build().unwrap();
//! let fired = Arc::new(AtomicUsize::new(0));
//! let f = fired.clone();
//! timer.add(Duration::from_millis(500), Box::new(move || { f.fetch_add(1, Ordering::SeqCst); })).unwrap();
//!
//! clock.advance_ms(499);
//! timer.advance_clock(Duration::ZERO);
//! timer.wait_for_executor();
//! assert_eq!(fired.load(Ordering::SeqCst), 0); // never early
//!
//! clock.advance_ms(1);
//! timer.advance_clock(Duration::ZERO);
//! timer.wait_for_executor();
//! assert_eq!(fired.load(Ordering::SeqCst), 1);
//! ```
//!
//! # Layers
//!
//! Each layer is its own module, usable and tested on its own:
//!
//! 1. [`Clock`]: monotonic time; [`SystemClock`] and [`ManualClock`].
//! 2. Buckets (arrays of entry indices) over an arena of entries: O(1)
//!    append, O(1) removal of any entry through a generation-checked
//!    [`TimerHandle`], no allocation per task once the arena and the
//!    buckets have grown (28 bytes per pending `u64` task: a 24-byte slot
//!    and its index in a bucket).
//! 3. [`TimingWheel`]: Kafka's levels, bucket rule
//!    `(expiration / tick) % wheel_size`, lazily created overflow levels and
//!    cascading; single-threaded, it never reads a clock.
//! 4. [`DelayQueue`]: the queue of buckets keyed by expiration that drives the
//!    clock, with a blocking poll that wakes early for an earlier bucket.
//! 5. [`Timer`]: thread-safe add / cancel / `advance_clock` / `len`, with an
//!    executor thread for expired tasks.
//! 6. [`Reaper`]: the background thread that drives `advance_clock`.
//!
//! `docs/ARCHITECTURE.md` in the repository draws the wheel and walks through
//! a worked example.
//!
//! # Semantics (and where they differ from Kafka)
//!
//! - A task never runs before its deadline: deadlines are rounded *up* to the
//!   millisecond and the tick (Kafka truncates, and fires up to a tick early).
//! - A zero delay, or a deadline already passed, runs the task promptly on the
//!   executor, never on the caller's thread.
//! - Each task that is not cancelled runs exactly once, until
//!   [`Timer::shutdown`] hands the pending ones back; `cancel` returns true
//!   iff it stopped the task, even when racing the task's expiry.
//! - Huge delays saturate (`Duration::MAX` never fires), where Kafka's
//!   `delay + now` overflows into the past and fires at once.
//! - [`Timer::shutdown`] hands pending tasks back instead of silently dropping
//!   them, and runs those already handed to the executor.
//! - Expiring a large bucket releases the shard's lock every 1,024 entries,
//!   so adders are not held up by a long cascade; a coarse bucket gets an
//!   early pass half its tick *before* its range starts and a final pass at
//!   its start, in slices that yield to due buckets, so a big cascade does
//!   not make due tasks late; and a cascade
//!   that runs behind hands the due tasks it finds to the executor at once.
//! - The timer is sharded: threads adding at once use separate wheels and
//!   locks (Kafka's timer has one global lock taken by every add).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_op_in_unsafe_fn)]

mod bucket;
mod clock;
mod delay_queue;
mod entries;
mod error;
mod executor;
mod panics;
mod prefetch;
mod reaper;
mod shutdown_gate;
mod spin_lock;
mod thread_index;
mod timer;
mod wheel;

pub use clock::{Clock, ManualClock, OnMove, SystemClock};
pub use delay_queue::DelayQueue;
pub use entries::TimerHandle;
pub use error::{ConfigError, ShutdownError};
pub use reaper::Reaper;
pub use timer::{Timer, TimerBuilder, TimerTask};
pub use wheel::{Insertion, TimingWheel, MAX_DEADLINE_MS, MAX_TICK_MS, MAX_WHEEL_SIZE};

/// Not API: what the `purgatory` and `broker` crates borrow from this one
/// (a spinning lock, a per-thread index, a prefetch hint, the handling of
/// caught panics, and the once-only shutdown). It may change or go in any
/// release; nothing outside this workspace should use it.
#[doc(hidden)]
pub mod internal {
    pub use crate::panics::{discard_panic, panic_message};
    pub use crate::prefetch::{prefetch, prefetch_addr};
    pub use crate::shutdown_gate::{Finishing, ShutdownGate};
    pub use crate::spin_lock::lock_spinning;
    pub use crate::thread_index::thread_index;
}
