//! What the purgatory reports through `log`: a panic in user code is caught
//! at the boundary and logged at error level, naming the purgatory and
//! what panicked, on the timeout path (the executor thread) as on a
//! caller's. A test binary of its own: it installs the process's logger.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use purgatory::{DelayedOperation, ManualClock, Operation, Outcome, Purgatory};

/// Keeps every record at warn level or above.
struct Captured(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Captured {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = record.args().to_string();
            self.0.lock().unwrap().push((record.level(), line));
        }
    }
    fn flush(&self) {}
}

fn captured() -> &'static Captured {
    static LOGGER: OnceLock<&'static Captured> = OnceLock::new();
    LOGGER.get_or_init(|| {
        let logger: &'static Captured = Box::leak(Box::new(Captured(Mutex::new(Vec::new()))));
        log::set_logger(logger).expect("the only logger of this binary");
        log::set_max_level(log::LevelFilter::Warn);
        logger
    })
}

/// Whether an error-level line contains every one of `parts`.
fn logged(parts: &[&str]) -> bool {
    let lines = captured().0.lock().unwrap();
    lines
        .iter()
        .any(|(level, line)| *level == log::Level::Error && parts.iter().all(|p| line.contains(p)))
}

/// Panics in the callback its name says.
enum PanicsIn {
    Try,
    Complete,
    Expiration,
}

impl DelayedOperation for PanicsIn {
    fn timeout(&self) -> Duration {
        Duration::from_millis(5)
    }
    fn try_complete(&self) -> bool {
        match self {
            PanicsIn::Try => panic!("boom in try_complete"),
            PanicsIn::Complete => true,
            PanicsIn::Expiration => false,
        }
    }
    fn on_complete(&self) {
        if let PanicsIn::Complete = self {
            panic!("boom in on_complete");
        }
    }
    fn on_expiration(&self) {
        panic!("boom in on_expiration");
    }
}

#[test]
fn panics_in_callbacks_are_logged_with_the_purgatory_and_the_callback() {
    captured();
    let clock = ManualClock::new();
    let p: Purgatory<u32, PanicsIn> = Purgatory::builder("loud")
        .clock(clock.clone())
        .reaper(false)
        .build()
        .unwrap();

    // On the caller's thread: a try counts as "not yet", a completion
    // completes.
    let tried = Operation::new(PanicsIn::Try);
    assert_eq!(p.try_complete_else_watch(tried.clone(), [1]), Ok(false));
    assert!(logged(&[
        "purgatory loud",
        "try_complete",
        "boom in try_complete"
    ]));
    let completing = Operation::new(PanicsIn::Complete);
    assert_eq!(p.try_complete_else_watch(completing.clone(), [2]), Ok(true));
    assert_eq!(completing.outcome(), Some(Outcome::Completed));
    assert!(logged(&[
        "purgatory loud",
        "on_complete",
        "boom in on_complete"
    ]));

    // On the timeout path, on the executor thread.
    let expiring = Operation::new(PanicsIn::Expiration);
    assert_eq!(p.try_complete_else_watch(expiring.clone(), [3]), Ok(false));
    clock.advance_ms(5);
    p.advance_clock(Duration::ZERO);
    assert_eq!(expiring.outcome(), Some(Outcome::Expired));
    assert_eq!(tried.outcome(), Some(Outcome::Expired));
    assert!(logged(&[
        "purgatory loud",
        "on_expiration",
        "boom in on_expiration"
    ]));
}
