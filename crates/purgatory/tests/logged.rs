//! What the purgatory reports through `log`: a panic in user code is caught
//! at the boundary and logged at error level, naming the purgatory and
//! what panicked, on the timeout path (the executor thread) as on a
//! caller's; a callback's panic is also counted in the purgatory's
//! `stats().panicked`. A test binary of its own: it installs the process's
//! logger.

use std::sync::atomic::{AtomicBool, Ordering};
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
    assert_eq!(p.stats().panicked, 2, "the watch's two tries");
    assert_eq!(p.check_and_complete(&1), 0);
    assert_eq!(p.stats().panicked, 3, "and the check's");
    let completing = Operation::new(PanicsIn::Complete);
    assert_eq!(p.try_complete_else_watch(completing.clone(), [2]), Ok(true));
    assert_eq!(completing.outcome(), Some(Outcome::Completed));
    assert!(logged(&[
        "purgatory loud",
        "on_complete",
        "boom in on_complete"
    ]));
    assert_eq!(p.stats().panicked, 4);

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
    assert_eq!(p.stats().panicked, 6, "both expirations");
}

/// Completes once told to; its `on_complete` panics.
struct Flip(AtomicBool);

impl DelayedOperation for Flip {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {
        panic!("boom in a flipped on_complete");
    }
}

#[test]
fn a_panic_is_reported_by_the_purgatory_that_ran_the_callback() {
    captured();
    let p: Purgatory<u32, Flip> = Purgatory::builder("joining").reaper(false).build().unwrap();

    // Completed by a check of a key it joined while its watch still joins
    // the others: no purgatory owns it yet, the checking one runs it.
    let op = Operation::new(Flip(AtomicBool::new(false)));
    let inner = op.clone();
    let keys = (0..3u32).inspect(|&k| {
        if k == 1 {
            inner.0.store(true, Ordering::SeqCst);
            assert_eq!(p.check_and_complete(&0), 1);
        }
    });
    assert_eq!(p.try_complete_else_watch(op.clone(), keys), Ok(true));
    assert!(logged(&[
        "purgatory joining",
        "on_complete",
        "boom in a flipped on_complete"
    ]));
    assert_eq!(p.stats().panicked, 1);

    // Forced by its owner while watched here: still this purgatory's.
    let forced = Operation::new(Flip(AtomicBool::new(false)));
    assert_eq!(p.try_complete_else_watch(forced.clone(), [7]), Ok(false));
    assert!(forced.force_complete());
    assert_eq!(p.stats().panicked, 2);

    // Forced before any watch: no purgatory ran it, none counts it.
    let unwatched = Operation::new(Flip(AtomicBool::new(false)));
    assert!(unwatched.force_complete());
    assert!(logged(&["purgatory <unwatched>", "on_complete"]));
    assert_eq!(p.stats().panicked, 2);
}
