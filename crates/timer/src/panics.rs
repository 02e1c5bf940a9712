//! Caught panics: what their payload says, and how to be rid of it.
//!
//! A thread that must outlive the user code it runs (the executor, the
//! reaper, a purgatory's callbacks) catches a panic, logs it and goes on.
//! Dropping the caught payload runs its `Drop`, which is user code too: a
//! payload whose `Drop` panics would unwind from outside the catch and end
//! the thread, so payloads go through [`discard_panic`].

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The message of a panic payload, for logging.
pub fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "<non-string panic payload>"
    }
}

/// How many payloads in a row [`discard_panic`] drops, each left by the
/// `Drop` of the one before, before it leaks the next.
const DROPS_IN_A_ROW: usize = 4;

/// Drops a caught panic's payload. If its `Drop` panics, the payload of
/// that panic is dropped in turn (usually a message, whose drop cannot
/// panic), and so on; only a chain of more than `DROPS_IN_A_ROW`
/// payloads, each panicking as it is dropped, is cut by leaking the next,
/// so that discarding always ends.
pub fn discard_panic(payload: Box<dyn Any + Send>) {
    let mut payload = payload;
    for _ in 0..DROPS_IN_A_ROW {
        match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(again) => payload = again,
        }
    }
    std::mem::forget(payload);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    struct PanicsOnDrop;

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("payload dropped");
        }
    }

    /// Counts its drops.
    struct Counted(&'static AtomicUsize);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Panics, as it is dropped, with a payload that counts its drop.
    struct PanicsWithCounted(&'static AtomicUsize);

    impl Drop for PanicsWithCounted {
        fn drop(&mut self) {
            std::panic::panic_any(Counted(self.0));
        }
    }

    /// Panics, as it is dropped, with another of itself: for ever.
    struct PanicsForEver;

    impl Drop for PanicsForEver {
        fn drop(&mut self) {
            std::panic::panic_any(PanicsForEver);
        }
    }

    #[test]
    fn the_payload_a_payloads_drop_panics_with_is_dropped_too() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        let caught = catch_unwind(|| std::panic::panic_any(PanicsWithCounted(&DROPS))).unwrap_err();
        discard_panic(caught);
        assert_eq!(DROPS.load(Ordering::SeqCst), 1, "not leaked");
        // A chain that never ends is cut.
        discard_panic(Box::new(PanicsForEver));
    }

    #[test]
    fn a_payload_whose_drop_panics_is_discarded_without_unwinding() {
        let caught = catch_unwind(|| std::panic::panic_any(PanicsOnDrop)).unwrap_err();
        assert_eq!(panic_message(&*caught), "<non-string panic payload>");
        discard_panic(caught);
        let caught = catch_unwind(|| panic!("plain {}", 1)).unwrap_err();
        assert_eq!(panic_message(&*caught), "plain 1");
        discard_panic(caught);
    }
}
