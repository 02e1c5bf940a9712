//! A small index per thread, assigned round-robin on the thread's first use,
//! for spreading threads over shards or stripes, so that threads working at
//! the same time rarely take the same lock or write the same cache line.
//!
//! Invariant: a thread's index never changes; the first `n` threads to ask
//! get `0..n`.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    /// This thread's index, `usize::MAX` until assigned.
    static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Round-robin source of indices.
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's index (take it modulo the number of shards).
pub fn thread_index() -> usize {
    INDEX.with(|index| {
        if index.get() == usize::MAX {
            index.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        index.get()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_per_thread_and_distinct_across_threads() {
        let mine = thread_index();
        assert_eq!(thread_index(), mine);
        let other = std::thread::spawn(thread_index).join().unwrap();
        assert_ne!(other, mine);
    }
}
