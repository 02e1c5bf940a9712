//! The peers our timer is measured against, written for this harness.
//!
//! These are the structures a user would reach for instead of a timing wheel:
//!
//! - [`binary_heap`]: `BinaryHeap<Reverse<(deadline, id)>>` with lazy
//!   cancellation (a per-task state byte), for W1.
//! - [`mutex_binary_heap`]: the same heap behind a `Mutex`, with a condvar
//!   reaper thread that sleeps until the earliest deadline, for W3.
//!
//! tokio-util's `DelayQueue` (the other W1 peer) is used as published; W1
//! drives it directly.

pub mod binary_heap;
pub mod mutex_binary_heap;
