//! Fetching the lines of the next requests' consumers before they are
//! handled.
//!
//! Each consumer heartbeats every few seconds, so by then its entry in the
//! consumer table, its group's lines and its member id have left the
//! caches; a handler that meets those misses one request after another
//! waits for each in turn.

/// How many requests ahead a handler starts fetching a consumer's entry;
/// half as far ahead, it fetches what the entry points to.
const PREFETCH_AHEAD: usize = 4;

/// Before the request at `at` of `queue` (indices into `table`): starts
/// fetching the entry of the request [`PREFETCH_AHEAD`] later, and lets
/// `pointees` fetch what the entry half as far ahead points to (its line
/// was fetched two requests ago). The misses then overlap the requests in
/// between instead of following one another.
pub(super) fn prefetch_ahead<T>(table: &[T], queue: &[u32], at: usize, pointees: impl FnOnce(&T)) {
    if let Some(&far) = queue.get(at + PREFETCH_AHEAD) {
        prefetch(table.as_ptr().wrapping_add(far as usize));
    }
    if let Some(&near) = queue.get(at + PREFETCH_AHEAD / 2) {
        if let Some(entry) = table.get(near as usize) {
            pointees(entry);
        }
    }
}

/// Starts moving the cache line holding `at` into this core's caches. A
/// hint only: it never faults, whatever the address, and nothing observes it.
#[inline(always)]
pub(super) fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetch` needs SSE, which every x86-64 target has; and a
    // prefetch never faults nor reads or writes memory the program can
    // observe, whatever the address.
    #[allow(unsafe_code)]
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
