//! The reaper: a background thread that drives a [`Timer`]'s clock.
//!
//! It loops on [`Timer::advance_clock`] with the poll interval as the
//! timeout. Inside that call it sleeps until the earliest bucket is due (or
//! the interval passes), so an idle timer costs one wake-up per poll interval
//! and a busy one no empty ticks. Expired tasks run on the timer's executor,
//! never on the reaper, so a slow or panicking task cannot stall it. A call
//! of the reaper's also stops expiring once the poll interval has passed
//! (the timer goes on with it in the next call), so the loop comes round
//! about once per interval even while the executor is behind.
//!
//! Invariants:
//! - The thread stops within one wake-up after [`Reaper::stop`] (or drop):
//!   stopping wakes it out of its wait or its hold for the executor at
//!   once, ends its call after the chunk of due tasks (at most 1,024) it
//!   is handing over, and joins it. Due tasks not handed over stay in the
//!   timer, for its `shutdown` to hand back.
//! - It also stops by itself once the timer is shut down.
//! - A panic inside the loop (only a user `Clock` could raise one) is logged
//!   and the loop goes on, after a pause (1 ms, doubling while the clock
//!   keeps panicking, up to the poll interval) so that a clock that always
//!   panics does not spin it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::panics::{discard_panic, panic_message};
use crate::{Timer, TimerTask};

/// The reaper's first pause after its clock panicked.
const FIRST_PAUSE: Duration = Duration::from_millis(1);

/// A running expiration reaper; stops and joins its thread on
/// [`stop`](Reaper::stop) or drop.
///
/// ```
/// use std::sync::{mpsc, Arc};
/// use std::time::Duration;
/// use timer::{Reaper, Timer};
///
/// let timer: Arc<Timer> = Arc::new(Timer::new());
/// let reaper = Reaper::start(timer.clone());
/// let (tx, rx) = mpsc::channel();
/// timer.add(Duration::from_millis(5), Box::new(move || tx.send(()).unwrap())).unwrap();
/// rx.recv_timeout(Duration::from_secs(5)).unwrap();
/// reaper.stop();
/// ```
pub struct Reaper {
    stop: Arc<AtomicBool>,
    wake: Box<dyn Fn() + Send + Sync>,
    thread: Option<JoinHandle<()>>,
    name: String,
}

impl Reaper {
    /// Kafka's reaper poll interval.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(200);

    /// Starts a reaper for `timer` with the default poll interval: 200 ms,
    /// or the timer's tick if that is longer.
    ///
    /// # Panics
    /// If the thread cannot be spawned; see [`Reaper::try_start`].
    pub fn start<T: TimerTask>(timer: Arc<Timer<T>>) -> Reaper {
        let poll = Self::default_poll_interval(timer.tick_ms());
        Self::with_poll_interval(timer, poll)
    }

    /// The poll interval [`start`](Self::start) uses for a timer whose tick
    /// is `tick_ms`: [`DEFAULT_POLL_INTERVAL`](Self::DEFAULT_POLL_INTERVAL),
    /// or the tick if that is longer (a shorter poll is refused).
    pub fn default_poll_interval(tick_ms: u64) -> Duration {
        Self::DEFAULT_POLL_INTERVAL.max(Duration::from_millis(tick_ms))
    }

    /// Starts a reaper that waits at most `poll` per `advance_clock` call.
    ///
    /// # Panics
    /// If `poll` is shorter than the timer's tick or the thread cannot be
    /// spawned; see [`Reaper::try_start`].
    pub fn with_poll_interval<T: TimerTask>(timer: Arc<Timer<T>>, poll: Duration) -> Reaper {
        match Self::try_start(timer, poll) {
            Ok(reaper) => reaper,
            Err(e) => panic!("cannot start the expiration reaper thread: {e}"),
        }
    }

    /// Starts a reaper, reporting a failure to spawn its thread as an error.
    /// The thread is named `ExpirationReaper-<timer name>`, as in Kafka
    /// (whose names also carry the broker id).
    /// A `poll` shorter than the timer's tick is refused (`InvalidInput`):
    /// the reaper would wake that often for nothing on an idle timer (at
    /// 1 µs, a quarter of a CPU), and spin at zero.
    pub fn try_start<T: TimerTask>(
        timer: Arc<Timer<T>>,
        poll: Duration,
    ) -> std::io::Result<Reaper> {
        Self::try_start_with(timer, poll, || {})
    }

    /// [`try_start`](Self::try_start), also running `after_each` on the
    /// reaper thread after every `advance_clock` call: at least once per
    /// `poll` (plus, when the call's time is up, the chunk of at most 1,024
    /// due tasks it is handing over and a wait of at most 20 ms for a busy
    /// executor), and after each call that found something due (one call
    /// expires every bucket due by then, if it has the time). Housekeeping
    /// that should follow the clock without a thread of its own goes there
    /// (a purgatory publishes its gauges from it). A panic in `after_each`
    /// is logged, and the loop goes on.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use timer::{Reaper, Timer};
    ///
    /// let timer: Arc<Timer> = Arc::new(Timer::new());
    /// let loops = Arc::new(AtomicUsize::new(0));
    /// let counted = loops.clone();
    /// let reaper = Reaper::try_start_with(timer, Duration::from_millis(1), move || {
    ///     counted.fetch_add(1, Ordering::Relaxed);
    /// })
    /// .unwrap();
    /// while loops.load(Ordering::Relaxed) < 3 {
    ///     std::thread::yield_now();
    /// }
    /// reaper.stop();
    /// ```
    pub fn try_start_with<T: TimerTask, F>(
        timer: Arc<Timer<T>>,
        poll: Duration,
        mut after_each: F,
    ) -> std::io::Result<Reaper>
    where
        F: FnMut() + Send + 'static,
    {
        let tick = Duration::from_millis(timer.tick_ms());
        if poll < tick {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the reaper's poll interval ({poll:?}) must be at least the timer's tick \
                     ({tick:?}): shorter, the reaper wakes for nothing (zero: it spins)"
                ),
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let name = format!("ExpirationReaper-{}", timer.name());
        let thread = {
            let stop = stop.clone();
            let timer = timer.clone();
            thread::Builder::new().name(name.clone()).spawn(move || {
                let mut pause = Duration::ZERO;
                while !stop.load(Ordering::Acquire) && !timer.is_shut_down() {
                    let advanced =
                        catch_unwind(AssertUnwindSafe(|| timer.advance_clock_bounded(poll)));
                    match advanced {
                        Ok(_) => pause = Duration::ZERO,
                        Err(panic) => {
                            log_panic("advancing the clock", panic);
                            // A clock that panics again at once would spin
                            // the loop. Stopping unparks the thread.
                            pause = pause.saturating_mul(2).max(FIRST_PAUSE).min(poll);
                            thread::park_timeout(pause);
                        }
                    }
                    if let Err(panic) = catch_unwind(AssertUnwindSafe(&mut after_each)) {
                        log_panic("the reaper's hook", panic);
                    }
                }
            })?
        };
        let wake = Box::new(move || timer.wake());
        Ok(Reaper {
            stop,
            wake,
            thread: Some(thread),
            name,
        })
    }

    /// The reaper thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops the thread and waits for it to finish.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() == thread::current().id() {
                return; // dropped from its own thread: it is already stopping
            }
            // A wake-up that lands between the loop's check of `stop` and the
            // start of its wait would be missed, so keep waking until the
            // thread has left the loop.
            while !thread.is_finished() {
                (self.wake)();
                thread.thread().unpark();
                thread::sleep(Duration::from_micros(200));
            }
            if thread.join().is_err() {
                log::error!("{}: reaper thread ended with a panic", self.name);
            }
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl std::fmt::Debug for Reaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reaper")
            .field("name", &self.name)
            .field("running", &self.thread.is_some())
            .finish()
    }
}

/// Logs a panic caught in the reaper's loop (`what` panicked), on its thread.
fn log_panic(what: &str, panic: Box<dyn std::any::Any + Send>) {
    log::error!(
        "{}: {what} panicked: {}",
        thread::current().name().unwrap_or("reaper"),
        panic_message(&*panic)
    );
    discard_panic(panic);
}
