//! The coordinator's request-handler pool, as the simulation drives it.
//!
//! A broker answers requests on a pool of handler threads (Kafka's
//! `num.io.threads`). The engine decides which consumers heartbeat now (or,
//! at the start, join) and queues their requests here; [`Handlers::run`]
//! handles them on every handler at once and returns when all are done. The
//! engine's own thread is handler 0; the others are threads of the pool.
//!
//! - Requests are spread by group: each group's go to one handler, in the
//!   engine's order, so a group's lines stay in one core's cache and
//!   handlers rarely meet on a lock. A handler claims its requests in chunks
//!   of [`CHUNK`]; one that has finished its own takes unclaimed heartbeat
//!   chunks of the others, so a handler that starts late (the kernel had not
//!   scheduled it yet) does not hold the run up. One run's heartbeats
//!   commute: all are handled at one coordinator time, each for a different
//!   consumer, and a heartbeat's answer depends only on whether its member
//!   is still in the group, which no other heartbeat of the run changes.
//! - Joins are never taken over: each group's joins run on its handler in
//!   the engine's order, so each group's tokens and generations are the same
//!   for any number of handlers.
//!
//! Which consumers heartbeat, and when, is decided by the engine alone (its
//! seeded draws never depend on a handler's answer), and the answers only
//! say which consumers must rejoin, which the engine applies after the run
//! in consumer order; so the summary is the same for any number of handlers.
//!
//! Between runs a pool thread stays awake for a while, spinning briefly and
//! then yielding its core (the engine's next run usually follows within a
//! few hundred microseconds in virtual time, and waking a parked thread
//! costs a system call and a scheduling delay), then parks until the engine
//! wakes it.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::config::MAX_HANDLER_THREADS;
use super::prefetch::{prefetch, prefetch_ahead};
use crate::coordinator::GroupCoordinator;
use crate::error::ErrorCode;
use crate::group::Group;
use crate::id::MemberId;

/// What a consumer heartbeats with: its group, kept from the start as a
/// client's connection keeps its coordinator, and its member id.
#[derive(Debug, Clone)]
pub(super) struct ConsumerIds {
    pub(super) group: Arc<Group>,
    pub(super) member: MemberId,
}

/// What the engine and the handlers share: the coordinator, every
/// consumer's current ids (written by the engine only between runs), and
/// the session timeout members join with.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) coordinator: GroupCoordinator,
    pub(super) ids: RwLock<Vec<ConsumerIds>>,
    pub(super) session_timeout: Duration,
}

/// What the queued requests of a run are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Request {
    /// Each consumer heartbeats.
    Heartbeat,
    /// Each consumer joins its group (the groups forming at the start).
    Join,
}

// One bit per handler in `Pool::heartbeat_handlers`.
const _: () = assert!(MAX_HANDLER_THREADS <= u64::BITS as usize);

/// Below this many queued requests, [`Handlers::run`] handles them all on
/// the calling thread.
const MIN_REQUESTS_TO_SHARE: usize = 64;

/// Requests a handler claims at a time: few, so that a handler the kernel
/// preempts holds few of them back from the others (claiming costs one
/// atomic add on a line its owner mostly has to itself).
const CHUNK: usize = 4;

/// Spin-wait iterations before a waiting thread starts yielding its core
/// between looks: a run (or the end of one) usually comes within them, and
/// on a machine with more runnable threads than cores, the thread it waits
/// for may need this very core.
const SPINS_BEFORE_YIELDING: u32 = 256;

/// One run's requests, written by the engine only while no run is on.
#[derive(Debug)]
struct Batch {
    request: Request,
    /// The consumers whose requests each handler has (by group).
    queues: Vec<Vec<u32>>,
}

/// A cursor on its own cache line, so that handlers claiming from their
/// own queues do not slow each other down.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Cursor(AtomicUsize);

/// What the engine shares with the pool threads.
struct Pool {
    shared: Arc<Shared>,
    batch: RwLock<Batch>,
    /// Bumped by the engine to start a run.
    epoch: AtomicU64,
    /// Per handler queue: its first request no handler has claimed yet.
    next: Vec<Cursor>,
    /// Requests of the batch handled so far.
    done: AtomicUsize,
    /// Consumers refused with `UNKNOWN_MEMBER_ID` by the pool threads.
    rejoins: Mutex<Vec<u32>>,
    /// Whether pool thread `n` (handler `n + 1`) is parked or about to be.
    sleeping: Vec<AtomicBool>,
    /// Bit `n` is set once handler `n` has handled a heartbeat.
    heartbeat_handlers: AtomicU64,
    stop: AtomicBool,
    /// How long a pool thread spins for the next run before it parks.
    spin: Duration,
}

/// The pool (see the module docs).
pub(super) struct Handlers {
    pool: Arc<Pool>,
    threads: Vec<(Thread, Option<JoinHandle<()>>)>,
    /// Requests queued for the next run, and a spare batch to swap in.
    queued: Batch,
    rejoins: Vec<u32>,
}

impl Handlers {
    /// A pool of `threads` handlers (the calling thread is one of them);
    /// between runs its threads spin for `spin` before they park.
    pub(super) fn new(shared: Arc<Shared>, threads: usize, spin: Duration) -> Self {
        let threads = threads.clamp(1, MAX_HANDLER_THREADS);
        let empty = || Batch {
            request: Request::Heartbeat,
            queues: vec![Vec::new(); threads],
        };
        let pool = Arc::new(Pool {
            shared,
            batch: RwLock::new(empty()),
            epoch: AtomicU64::new(0),
            next: (0..threads).map(|_| Cursor::default()).collect(),
            done: AtomicUsize::new(0),
            rejoins: Mutex::new(Vec::new()),
            sleeping: (1..threads).map(|_| AtomicBool::new(false)).collect(),
            heartbeat_handlers: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            spin,
        });
        let threads = (1..threads)
            .map(|handler| {
                let pool = Arc::clone(&pool);
                let thread = std::thread::Builder::new()
                    .name(format!("request-handler-{handler}"))
                    .spawn(move || pool.serve(handler))
                    .expect("a request-handler thread starts");
                (thread.thread().clone(), Some(thread))
            })
            .collect();
        Handlers {
            pool,
            threads,
            queued: empty(),
            rejoins: Vec::new(),
        }
    }

    /// Queues a request of consumer `index`, a member of group number
    /// `group`.
    pub(super) fn queue(&mut self, group: usize, index: u32) {
        let n = self.queued.queues.len();
        self.queued.queues[group % n].push(index);
    }

    /// Handles every queued request as a `request`; returns the consumers
    /// whose heartbeat was refused with `UNKNOWN_MEMBER_ID` (they must
    /// rejoin), in order.
    pub(super) fn run(&mut self, request: Request) -> &[u32] {
        self.rejoins.clear();
        self.queued.request = request;
        let total = self.queued.queues.iter().map(Vec::len).sum();
        if total < MIN_REQUESTS_TO_SHARE || self.threads.is_empty() {
            // Waking a handler costs more than these requests: handle them
            // here (which thread handles a request changes no outcome).
            let ids = self.pool.shared.ids.read();
            for queue in &self.queued.queues {
                handle(
                    &self.pool.shared,
                    &ids,
                    request,
                    queue,
                    0..queue.len(),
                    &mut self.rejoins,
                );
            }
            drop(ids);
            if request == Request::Heartbeat && total > 0 {
                self.pool.note_heartbeats_by(0);
            }
            self.finish();
            return &self.rejoins;
        }
        {
            let mut batch = self.pool.batch.write();
            std::mem::swap(&mut *batch, &mut self.queued);
            for next in &self.pool.next {
                next.0.store(0, Ordering::Relaxed);
            }
            self.pool.done.store(0, Ordering::Relaxed);
        }
        self.pool.epoch.fetch_add(1, Ordering::SeqCst);
        for (n, (thread, _)) in self.threads.iter().enumerate() {
            if self.pool.sleeping[n].load(Ordering::SeqCst) {
                thread.unpark();
            }
        }
        self.pool.work(0, &mut self.rejoins);
        self.wait_until_done(total);
        std::mem::swap(&mut *self.pool.batch.write(), &mut self.queued);
        self.rejoins.append(&mut self.pool.rejoins.lock());
        self.finish();
        &self.rejoins
    }

    /// How many handlers have handled at least one heartbeat so far: the
    /// engine's thread alone while every run is too small to share, and a
    /// pool thread only once it took a share of a run (a thread the kernel
    /// did not schedule in time may never have).
    pub(super) fn heartbeat_threads(&self) -> usize {
        self.pool
            .heartbeat_handlers
            .load(Ordering::Relaxed)
            .count_ones() as usize
    }

    /// Waits (spinning, then yielding) until `total` requests are handled.
    /// Panics if a pool thread has died (a request handler panicked), as
    /// its requests would never be handled.
    fn wait_until_done(&self, total: usize) {
        let mut spins = 0u32;
        while self.pool.done.load(Ordering::Acquire) < total {
            spins = spins.saturating_add(1);
            if spins < SPINS_BEFORE_YIELDING {
                std::hint::spin_loop();
                continue;
            }
            let died = self
                .threads
                .iter()
                .any(|(_, handle)| handle.as_ref().is_some_and(JoinHandle::is_finished));
            assert!(
                !died,
                "a request-handler thread died in the middle of a run"
            );
            std::thread::yield_now();
        }
    }

    /// Empties the handled queues and sorts the refused consumers.
    fn finish(&mut self) {
        for queue in &mut self.queued.queues {
            queue.clear();
        }
        self.rejoins.sort_unstable();
    }
}

impl Pool {
    /// A pool thread's life: handle each run's share, until stopped.
    fn serve(&self, handler: usize) {
        let mut seen = 0;
        let mut rejoins = Vec::new();
        while let Some(epoch) = self.wait_for_run(seen, handler) {
            seen = epoch;
            self.work(handler, &mut rejoins);
        }
    }

    /// Waits until the engine starts a run after `seen` (its epoch) or
    /// stops the pool (`None`): spins a little, then yields its core until
    /// [`Pool::spin`] has passed, then parks.
    fn wait_for_run(&self, seen: u64, handler: usize) -> Option<u64> {
        let sleeping = &self.sleeping[handler - 1];
        let mut since = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            let epoch = self.epoch.load(Ordering::Acquire);
            if epoch != seen {
                return Some(epoch);
            }
            spins = spins.saturating_add(1);
            if spins < SPINS_BEFORE_YIELDING {
                std::hint::spin_loop();
                continue;
            }
            if since.elapsed() < self.spin {
                std::thread::yield_now();
                continue;
            }
            // Announce the nap before the last look, so that the engine
            // either sees the flag (and unparks) or this look sees its run.
            sleeping.store(true, Ordering::SeqCst);
            if self.epoch.load(Ordering::SeqCst) == seen && !self.stop.load(Ordering::SeqCst) {
                std::thread::park();
            }
            sleeping.store(false, Ordering::SeqCst);
            since = Instant::now();
            spins = 0;
        }
    }

    /// Handles handler `handler`'s share of the current batch: its own
    /// queue, then (heartbeats only) what is left of the others'. Refused
    /// consumers go to `rejoins` on the engine's thread (handler 0), else to
    /// the pool's list.
    fn work(&self, handler: usize, rejoins: &mut Vec<u32>) {
        let batch = self.batch.read();
        let ids = self.shared.ids.read();
        let handlers = batch.queues.len();
        let takers = match batch.request {
            Request::Heartbeat => handlers,
            Request::Join => 1,
        };
        let mut handled = false;
        for owner in (handler..handler + takers).map(|n| n % handlers) {
            let queue = &batch.queues[owner];
            loop {
                let start = self.next[owner].0.fetch_add(CHUNK, Ordering::Relaxed);
                let end = queue.len().min(start.saturating_add(CHUNK));
                if start >= end {
                    break;
                }
                handle(
                    &self.shared,
                    &ids,
                    batch.request,
                    queue,
                    start..end,
                    rejoins,
                );
                if handler != 0 && !rejoins.is_empty() {
                    self.rejoins.lock().append(rejoins);
                }
                self.done.fetch_add(end - start, Ordering::Release);
                handled = true;
            }
        }
        if handled && batch.request == Request::Heartbeat {
            self.note_heartbeats_by(handler);
        }
    }

    /// Records that `handler` has handled heartbeats. Read first: after its
    /// first run a handler only reads the shared word, so runs do not pass
    /// its cache line between the handlers' cores.
    fn note_heartbeats_by(&self, handler: usize) {
        let bit = 1 << handler;
        if self.heartbeat_handlers.load(Ordering::Relaxed) & bit == 0 {
            self.heartbeat_handlers.fetch_or(bit, Ordering::Relaxed);
        }
    }
}

impl Drop for Handlers {
    fn drop(&mut self) {
        self.pool.stop.store(true, Ordering::SeqCst);
        for (thread, handle) in &mut self.threads {
            thread.unpark();
            if let Some(handle) = handle.take() {
                let _ = handle.join();
            }
        }
    }
}

/// Handles the requests of the consumers in `queue[range]` (the rest of
/// `queue` is only looked ahead at, see [`prefetch_ahead`]).
fn handle(
    shared: &Shared,
    ids: &[ConsumerIds],
    request: Request,
    queue: &[u32],
    range: Range<usize>,
    rejoins: &mut Vec<u32>,
) {
    if request == Request::Join {
        for &index in &queue[range] {
            let consumer = &ids[index as usize];
            shared
                .coordinator
                .join_group(
                    consumer.group.id(),
                    &consumer.member,
                    shared.session_timeout,
                )
                .expect("the coordinator admits the configured session timeout");
        }
        return;
    }
    for at in range {
        let index = queue[at];
        prefetch_ahead(ids, queue, at, |consumer| {
            let group: *const Group = Arc::as_ptr(&consumer.group);
            prefetch(group);
            prefetch(group.cast::<u8>().wrapping_add(64));
            prefetch(consumer.member.as_str().as_ptr());
        });
        let consumer = &ids[index as usize];
        match shared
            .coordinator
            .heartbeat_in(&consumer.group, &consumer.member)
        {
            Ok(()) => {}
            Err(ErrorCode::UnknownMemberId) => rejoins.push(index),
            Err(other) => log::warn!("heartbeat of {} refused: {other}", consumer.member),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use timer::ManualClock;

    /// A pool over `consumers` consumers in `groups` groups that have
    /// joined, on a manual clock.
    fn pool(
        consumers: usize,
        groups: usize,
        threads: usize,
        spin: Duration,
    ) -> (ManualClock, Handlers) {
        let clock = ManualClock::new();
        let coordinator = GroupCoordinator::with_manual_clock(&clock).unwrap();
        let kept: Vec<_> = (0..groups)
            .map(|g| coordinator.add_group(crate::GroupId::new(format!("group-{g}"))))
            .collect();
        let ids = (0..consumers)
            .map(|i| ConsumerIds {
                group: Arc::clone(&kept[i % groups]),
                member: MemberId::new(format!("consumer-{i}-0")),
            })
            .collect();
        let shared = Arc::new(Shared {
            coordinator,
            ids: RwLock::new(ids),
            session_timeout: Duration::from_millis(100),
        });
        let mut handlers = Handlers::new(shared, threads, spin);
        for i in 0..consumers {
            handlers.queue(i % groups, i as u32);
        }
        assert!(handlers.run(Request::Join).is_empty());
        (clock, handlers)
    }

    #[test]
    fn every_heartbeat_is_handled_once_by_a_pool_of_any_size() {
        for threads in [1, 2, 3] {
            let (_clock, mut handlers) = pool(1_000, 10, threads, Duration::from_millis(1));
            let coordinator = &handlers.pool.shared.coordinator;
            assert_eq!(coordinator.alive_members(), 1_000);
            for round in 1..=20u64 {
                // Runs of every size around the sharing threshold and the
                // chunk size, many of them back to back.
                let n = (round as usize * 53) % 1_000;
                for i in 0..n {
                    handlers.queue(i % 10, i as u32);
                }
                let before = handlers.pool.shared.coordinator.heartbeats_handled();
                assert!(handlers.run(Request::Heartbeat).is_empty());
                let after = handlers.pool.shared.coordinator.heartbeats_handled();
                assert_eq!(after - before, n as u64, "{threads} threads, round {round}");
            }
        }
    }

    #[test]
    fn only_the_threads_that_handled_heartbeats_are_counted() {
        let (_clock, mut handlers) = pool(1_000, 10, 3, Duration::from_millis(1));
        // The joins are no heartbeats.
        assert_eq!(handlers.heartbeat_threads(), 0);
        // Runs too small to share stay on the calling thread.
        for i in 0..MIN_REQUESTS_TO_SHARE - 1 {
            handlers.queue(i % 10, i as u32);
        }
        assert!(handlers.run(Request::Heartbeat).is_empty());
        assert_eq!(handlers.heartbeat_threads(), 1);
        // Shared runs: the pool threads take part, none beyond the pool.
        for _ in 0..50 {
            for i in 0..1_000 {
                handlers.queue(i % 10, i as u32);
            }
            assert!(handlers.run(Request::Heartbeat).is_empty());
        }
        let used = handlers.heartbeat_threads();
        assert!((1..=3).contains(&used), "{used}");
    }

    #[test]
    fn refused_consumers_come_back_sorted_from_every_handler() {
        let (clock, mut handlers) = pool(500, 7, 3, Duration::from_millis(1));
        // Every member's expectation expires; then all heartbeat.
        clock.set_ms(1_000);
        while handlers
            .pool
            .shared
            .coordinator
            .advance_clock(Duration::ZERO)
        {}
        for i in (0..500).rev() {
            handlers.queue(i as usize % 7, i);
        }
        let refused = handlers.run(Request::Heartbeat).to_vec();
        assert_eq!(refused, (0..500).collect::<Vec<u32>>());
        // Nothing queued: an empty run, nothing refused.
        assert!(handlers.run(Request::Heartbeat).is_empty());
    }

    #[test]
    #[should_panic(expected = "request-handler thread died")]
    fn a_handler_that_dies_fails_the_run_instead_of_hanging_it() {
        let (_clock, mut handlers) = pool(100, 2, 2, Duration::ZERO);
        // Group 1's joins go to the pool thread; a consumer beyond the
        // table makes it panic there.
        for i in 0..100 {
            handlers.queue(i % 2, i as u32);
        }
        handlers.queue(1, 1_000);
        handlers.run(Request::Join);
    }

    #[test]
    fn parked_handlers_wake_for_the_next_run() {
        // No spinning: the pool thread parks between runs, and each run
        // must wake it (or find it awake) without losing the wake-up.
        let (_clock, mut handlers) = pool(200, 4, 2, Duration::ZERO);
        for round in 1..=50u64 {
            for i in 0..200 {
                handlers.queue(i as usize % 4, i);
            }
            assert!(handlers.run(Request::Heartbeat).is_empty());
            let handled = handlers.pool.shared.coordinator.heartbeats_handled();
            assert_eq!(handled, 200 * round);
        }
    }
}
