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

/// Drops a caught panic's payload. If its `Drop` panics, that second
/// payload is leaked rather than dropped: dropping it could panic again,
/// and a leak of a payload that misbehaves is the bounded outcome.
pub fn discard_panic(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct PanicsOnDrop;

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("payload dropped");
        }
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
