//! The purgatory's gauges and counts ([`PurgatoryStats`]) and, with the
//! `metrics` feature, their publication through the `metrics` crate facade
//! under Kafka's names (and one of ours, for callbacks that panicked).

use crate::sync::{AtomicUsize, Ordering};

/// A snapshot of a purgatory's gauges and counts; see
/// [`Purgatory::stats`](crate::Purgatory::stats).
///
/// The outcome counts count how operations left *this* purgatory: a
/// cancelled operation completed afterwards by
/// [`Operation::force_complete`](crate::Operation::force_complete) (also
/// a force made by its own `try_complete` after cancelling it; a plain
/// `true` from that try completes nothing) counts as cancelled here,
/// though its [`outcome`](crate::Operation::outcome) ends `Completed`,
/// unless it completes during a new watch of it, before that watch
/// attached it (forced by the watch's tries, `timeout` or key iterator
/// once the first key is taken): that watch's purgatory counts the
/// completion, when the watch's user code is done, before the watch
/// returns.
///
/// Read while other threads work, the fields are not read at the same
/// moment. Each is exact if no operation leaves during the call; if some
/// do, `watched` and `delayed` may still count a few of them (never fewer
/// than were pending at some moment of the call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PurgatoryStats {
    /// Watch-list entries of pending operations (an operation watched under
    /// three keys counts three times): Kafka's `PurgatorySize`.
    pub watched: usize,
    /// Pending operations with an armed timer: Kafka's
    /// `NumDelayedOperations`.
    pub delayed: usize,
    /// Operations that completed ([`Outcome::Completed`](crate::Outcome)),
    /// since the purgatory was built.
    pub completed: usize,
    /// Operations that expired ([`Outcome::Expired`](crate::Outcome)),
    /// since the purgatory was built; Kafka's `ExpiresPerSec` is its rate.
    pub expired: usize,
    /// Operations cancelled ([`Outcome::Cancelled`](crate::Outcome)), since
    /// the purgatory was built.
    pub cancelled: usize,
    /// Operation callbacks (`timeout`, `try_complete`, `on_complete`,
    /// `on_expiration`) that panicked while this purgatory ran them, since
    /// it was built. The purgatory catches such a panic, logs it at `error`
    /// and goes on (see the crate docs); this count is what to alert on.
    /// It includes callbacks run by an
    /// [`Operation::force_complete`](crate::Operation::force_complete) of an
    /// operation watched here, but not panics in an operation's or a key's
    /// `Drop`, or in a waker, which are only logged.
    pub panicked: usize,
}

/// On whose behalf user callbacks run: a purgatory's name, for the log if
/// one panics, and its count of those that did (see
/// [`PurgatoryStats::panicked`]), which with the `metrics` feature also
/// goes to a counter. `release::guarded` is handed it as one pointer
/// (`None` only when no purgatory runs the callback: a `force_complete` of
/// an operation not watched anywhere). Panics are rare: one plain atomic
/// does.
pub(crate) struct Site {
    pub(crate) name: String,
    panicked: AtomicUsize,
    #[cfg(feature = "metrics")]
    counter: metrics::Counter,
}

impl Site {
    pub(crate) fn new(name: String) -> Self {
        Site {
            #[cfg(feature = "metrics")]
            counter: metrics::counter!(
                "CallbackPanicsPerSec",
                &[("delayedOperation", name.clone())]
            ),
            name,
            panicked: AtomicUsize::new(0),
        }
    }

    /// Counts one callback that panicked.
    pub(crate) fn count_panic(&self) {
        self.panicked.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.counter.increment(1);
    }

    pub(crate) fn panicked(&self) -> usize {
        self.panicked.load(Ordering::Relaxed)
    }
}

/// Where the figures are published: nowhere without the `metrics` feature.
#[cfg(not(feature = "metrics"))]
pub(crate) struct Metrics;

#[cfg(not(feature = "metrics"))]
impl Metrics {
    /// Whether the figures go anywhere.
    pub(crate) const ENABLED: bool = false;

    pub(crate) fn new(_name: &str) -> Self {
        Metrics
    }

    #[inline]
    pub(crate) fn expired(&self) {}

    #[inline]
    pub(crate) fn publish(&self, _watched: usize, _delayed: usize) {}
}

/// The handles of the purgatory's metrics, labelled
/// `delayedOperation = <name>` as Kafka tags them. They are bound to the
/// recorder installed when the purgatory is built.
#[cfg(feature = "metrics")]
pub(crate) struct Metrics {
    size: metrics::Gauge,
    delayed: metrics::Gauge,
    expires: metrics::Counter,
}

#[cfg(feature = "metrics")]
impl Metrics {
    /// Whether the figures go anywhere.
    pub(crate) const ENABLED: bool = true;

    pub(crate) fn new(name: &str) -> Self {
        let labels = [("delayedOperation", name.to_owned())];
        Metrics {
            size: metrics::gauge!("PurgatorySize", &labels),
            delayed: metrics::gauge!("NumDelayedOperations", &labels),
            expires: metrics::counter!("ExpiresPerSec", &labels),
        }
    }

    /// Counts one expiration.
    #[inline]
    pub(crate) fn expired(&self) {
        self.expires.increment(1);
    }

    /// Sets the gauges.
    pub(crate) fn publish(&self, watched: usize, delayed: usize) {
        self.size.set(watched as f64);
        self.delayed.set(delayed as f64);
    }
}
