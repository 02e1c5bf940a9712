//! A hint that starts moving a cache line into this core's caches before
//! the line is needed.
//!
//! Free lists are LIFO: the slot reused next is the one freed last, often
//! just written by another thread (a purgatory's completing thread frees
//! timer entries and watch-list slots that the adding threads reuse), so reusing it
//! waits for its line to come over from the other core. A free list that
//! pops a slot prefetches the next one, whose transfer then overlaps the
//! work done until the next insert.

/// Starts fetching the cache line holding `value` into every cache level
/// of this core. Does nothing on targets other than x86-64.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    prefetch_addr(value as *const T);
}

/// [`prefetch`] of the line holding the byte at `addr`, which need not be
/// valid to dereference: for what a reference cannot name, such as the
/// reference counts in front of a `Weak`'s value. Does nothing on targets
/// other than x86-64.
#[inline(always)]
pub fn prefetch_addr<T>(addr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint to the cache: it never faults and
    // neither reads nor writes memory the program can observe, whatever the
    // address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(addr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
