//! Lateness of fired timer tasks: each task records, when it runs, how long
//! after its deadline that was, into a slot of its own (no allocation, no
//! lock while tasks fire).

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::Instant;

/// Lateness slot of a task that has not fired.
const NOT_FIRED: i32 = i32::MIN;

/// Where fired tasks record their lateness.
#[derive(Debug)]
pub struct Recorder {
    origin: Instant,
    late_us: Box<[AtomicI32]>,
    fired: AtomicUsize,
    early: AtomicUsize,
    double: AtomicUsize,
}

impl Recorder {
    /// A recorder for `tasks` tasks, its clock starting now.
    pub fn new(tasks: usize) -> Self {
        Self::with_origin(tasks, Instant::now())
    }

    /// A recorder for `tasks` tasks whose clock counts from `origin` (a
    /// timer clock's origin, so that deadlines in that clock's milliseconds
    /// convert exactly).
    pub fn with_origin(tasks: usize, origin: Instant) -> Self {
        Recorder {
            origin,
            late_us: (0..tasks).map(|_| AtomicI32::new(NOT_FIRED)).collect(),
            fired: AtomicUsize::new(0),
            early: AtomicUsize::new(0),
            double: AtomicUsize::new(0),
        }
    }

    /// Nanoseconds since the recorder's origin.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant the recorder counts from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Task `idx`, due at `due_ns`, fires now.
    pub fn record(&self, idx: u32, due_ns: u64) {
        let late_ns = self.now_ns() as i64 - due_ns as i64;
        if late_ns < 0 {
            self.early.fetch_add(1, Ordering::Relaxed);
        }
        let late_us = late_ns
            .div_euclid(1000)
            .clamp(i64::from(NOT_FIRED) + 1, i64::from(i32::MAX)) as i32;
        match self.late_us.get(idx as usize) {
            Some(slot) if slot.swap(late_us, Ordering::Relaxed) == NOT_FIRED => {
                self.fired.fetch_add(1, Ordering::Release);
            }
            _ => {
                self.double.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Tasks fired so far (each counted once).
    pub fn fired(&self) -> usize {
        self.fired.load(Ordering::Acquire)
    }

    /// Tasks fired before their deadline.
    pub fn early(&self) -> usize {
        self.early.load(Ordering::Relaxed)
    }

    /// Second fires of one task (or fires of an unknown index).
    pub fn double(&self) -> usize {
        self.double.load(Ordering::Relaxed)
    }

    /// Lateness of every fired task in µs, sorted ascending.
    pub fn sorted_lateness_us(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self
            .late_us
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .filter(|&l| l != NOT_FIRED)
            .collect();
        v.sort_unstable();
        v
    }
}
