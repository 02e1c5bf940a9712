//! What the purgatory reports through `log`: a panic in user code is caught
//! at the boundary and logged at error level, naming the purgatory and
//! what panicked, on the timeout path (the executor thread) as on a
//! caller's; a callback's panic is also counted in the purgatory's
//! `stats().panicked`. A test binary of its own: it installs the process's
//! logger.

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use purgatory::{DelayedOperation, ManualClock, Operation, Outcome, Purgatory};

/// Formats every record down to debug level (as a logger writing them
/// would), and keeps those at warn level or above.
struct Captured(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Captured {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Debug
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = record.args().to_string();
            if record.level() <= log::Level::Warn {
                self.0.lock().unwrap().push((record.level(), line));
            }
        }
    }
    fn flush(&self) {}
}

fn captured() -> &'static Captured {
    static LOGGER: OnceLock<&'static Captured> = OnceLock::new();
    LOGGER.get_or_init(|| {
        let logger: &'static Captured = Box::leak(Box::new(Captured(Mutex::new(Vec::new()))));
        log::set_logger(logger).expect("the only logger of this binary");
        log::set_max_level(log::LevelFilter::Debug);
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

/// Forces its own completion (through a handle to itself it is given) at
/// the point its `at` names; its `on_complete` panics.
struct Forces {
    me: Mutex<Option<Operation<Forces>>>,
    at: ForcedIn,
}

#[derive(PartialEq)]
enum ForcedIn {
    /// The first `try_complete`, as Kafka's operations complete.
    Try,
    /// `timeout`.
    Timeout,
    /// Not itself: the key iterator forces it.
    Keys,
}

impl Forces {
    /// Forces the operation it was given (itself, or another), once.
    fn force_if(&self, here: ForcedIn) {
        if self.at == here {
            if let Some(me) = self.me.lock().unwrap().take() {
                assert!(me.force_complete());
            }
        }
    }
}

impl DelayedOperation for Forces {
    fn timeout(&self) -> Duration {
        self.force_if(ForcedIn::Timeout);
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        self.force_if(ForcedIn::Try);
        false
    }
    fn on_complete(&self) {
        panic!("boom in a forced on_complete");
    }
}

/// Forced by user code its watch runs before the operation is attached
/// (its try, its timeout, the key iterator), the operation completes in
/// the watch, and a panic of its `on_complete` is this purgatory's.
#[test]
fn a_panic_of_an_operation_forced_during_its_watch_is_the_watching_purgatorys() {
    captured();
    let p: Purgatory<u32, Forces> = Purgatory::builder("forcing").reaper(false).build().unwrap();
    for (n, at) in [ForcedIn::Try, ForcedIn::Timeout, ForcedIn::Keys]
        .into_iter()
        .enumerate()
    {
        let keys_force = at == ForcedIn::Keys;
        let op = Operation::new(Forces {
            me: Mutex::new(None),
            at,
        });
        if !keys_force {
            *op.me.lock().unwrap() = Some(op.clone());
        }
        // The second key is taken under the lock, as the join goes.
        let inner = op.clone();
        let keys = (0..3u32).inspect(|&k| {
            if keys_force && k == 1 {
                assert!(inner.force_complete());
            }
        });
        assert_eq!(p.try_complete_else_watch(op.clone(), keys), Ok(true));
        assert_eq!(op.outcome(), Some(Outcome::Completed));
        assert_eq!(p.stats().completed, n + 1);
        assert_eq!(p.stats().panicked, n + 1, "case {n}");
        assert_eq!((p.watched(), p.delayed()), (0, 0));
    }
    assert!(logged(&[
        "purgatory forcing",
        "on_complete",
        "boom in a forced on_complete"
    ]));
    assert!(!logged(&["<unwatched>", "boom in a forced on_complete"]));
}

/// A key whose `Debug` panics.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Mute(u32);

impl fmt::Debug for Mute {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        panic!("Debug panics on purpose");
    }
}

/// Completes once its flag is set; its `Drop` panics, even while a panic
/// unwinds.
struct Breaks(Arc<AtomicBool>);

impl DelayedOperation for Breaks {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn try_complete(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {}
}

impl Drop for Breaks {
    fn drop(&mut self) {
        panic!("an operation's Drop panics on purpose");
    }
}

/// A check formats its key for its debug line only once it let go of what
/// it completed: a key's `Debug` that panics reaches the caller after the
/// operation was dropped (its `Drop` guarded) and its waiters woken.
#[test]
fn a_check_formats_its_key_only_after_letting_go() {
    captured();
    let p: Purgatory<Mute, Breaks> = Purgatory::builder("mute").reaper(false).build().unwrap();
    let ready = Arc::new(AtomicBool::new(false));
    let op = Operation::new(Breaks(ready.clone()));
    assert_eq!(p.try_complete_else_watch(op.clone(), [Mute(1)]), Ok(false));
    let mut done = op.completion();
    // The purgatory holds its only reference.
    drop(op);
    ready.store(true, Ordering::SeqCst);
    let check = catch_unwind(AssertUnwindSafe(|| p.check_and_complete(&Mute(1))));
    assert!(check.is_err(), "the key's Debug panic reaches the caller");
    assert_eq!(
        Pin::new(&mut done).poll(&mut Context::from_waker(Waker::noop())),
        Poll::Ready(Outcome::Completed)
    );
    assert_eq!(p.stats().completed, 1);
    assert_eq!((p.watched(), p.delayed()), (0, 0));
    assert!(logged(&["an operation's Drop", "panics on purpose"]));
}

/// Watches nest (a key iterator may watch other operations): a panic of an
/// operation forced in an inner watch is still its own watch's, and a
/// watch that refuses an operation forced before it does not take its
/// panic.
#[test]
fn a_panic_goes_to_its_operations_watch_when_watches_nest() {
    captured();
    let p: Purgatory<u32, Forces> = Purgatory::builder("outer").reaper(false).build().unwrap();
    let q: Purgatory<u32, Forces> = Purgatory::builder("inner").reaper(false).build().unwrap();

    // A's keys watch B in Q, whose first try forces A.
    let a = Operation::new(Forces {
        me: Mutex::new(None),
        at: ForcedIn::Keys,
    });
    let b = Operation::new(Forces {
        me: Mutex::new(Some(a.clone())),
        at: ForcedIn::Try,
    });
    let keys = (0..3u32).inspect(|&k| {
        if k == 1 {
            assert_eq!(q.try_complete_else_watch(b.clone(), [10]), Ok(false));
        }
    });
    assert_eq!(p.try_complete_else_watch(a.clone(), keys), Ok(true));
    assert_eq!((p.stats().completed, p.stats().panicked), (1, 1));
    assert_eq!((q.stats().completed, q.stats().panicked), (0, 0));

    // A's keys force A, then hand it to Q, which refuses it.
    let a = Operation::new(Forces {
        me: Mutex::new(None),
        at: ForcedIn::Keys,
    });
    let inner = a.clone();
    let keys = (0..3u32).inspect(|&k| {
        if k == 1 {
            assert!(inner.force_complete());
            assert_eq!(
                q.try_complete_else_watch(inner.clone(), [11]),
                Err(purgatory::PurgatoryError::AlreadyCompleted)
            );
        }
    });
    assert_eq!(p.try_complete_else_watch(a.clone(), keys), Ok(true));
    assert_eq!((p.stats().completed, p.stats().panicked), (2, 2));
    assert_eq!((q.stats().completed, q.stats().panicked), (0, 0));
    assert!(!logged(&[
        "purgatory inner",
        "boom in a forced on_complete"
    ]));
}
