//! With the `metrics` feature, a purgatory publishes Kafka's gauges, its
//! expiration count and its count of callbacks that panicked through the
//! `metrics` facade, labelled with its name:
//! `cargo test -p purgatory --features metrics --test metrics`.
#![cfg(feature = "metrics")]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key as MetricKey, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use purgatory::{ManualClock, Purgatory};

/// A value a handle writes to: a counter's count, or a gauge's bits.
#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, value: f64) {
        self.0.store(value as u64, Ordering::SeqCst);
    }
}

/// Records each metric registered, by name and labels.
#[derive(Default)]
struct Registry(Mutex<BTreeMap<String, Arc<Cell>>>);

/// What a gauge reads before anything set it.
const UNSET: u64 = u64::MAX;

impl Registry {
    fn cell(&self, key: &MetricKey) -> Arc<Cell> {
        self.cell_from(key, 0)
    }

    fn cell_from(&self, key: &MetricKey, initial: u64) -> Arc<Cell> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        self.0
            .lock()
            .unwrap()
            .entry(name)
            .or_insert_with(|| Arc::new(Cell(AtomicU64::new(initial))))
            .clone()
    }

    fn get(&self, name: &str) -> Option<u64> {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .map(|c| c.0.load(Ordering::SeqCst))
    }
}

impl Recorder for Registry {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &MetricKey, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &MetricKey, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell_from(key, UNSET))
    }
    fn register_histogram(&self, _: &MetricKey, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[test]
fn gauges_and_expirations_are_published_under_kafkas_names() {
    let registry = Registry::default();
    let clock = ManualClock::new();
    let p: Purgatory<Key, MockOp> = metrics::with_local_recorder(&registry, || {
        Purgatory::builder("Produce")
            .clock(clock.clone())
            .reaper(false)
            .build()
            .unwrap()
    });
    for timeout in [10, 10, 1_000] {
        p.try_complete_else_watch(op(timeout), [key("a"), key("b")])
            .unwrap();
    }
    p.stats();
    assert_eq!(
        registry.get("PurgatorySize{delayedOperation=Produce}"),
        Some(6)
    );
    assert_eq!(
        registry.get("NumDelayedOperations{delayedOperation=Produce}"),
        Some(3)
    );
    assert_eq!(
        registry.get("ExpiresPerSec{delayedOperation=Produce}"),
        Some(0)
    );
    clock.advance(Duration::from_millis(10));
    p.advance_clock(Duration::ZERO);
    assert_eq!(
        registry.get("ExpiresPerSec{delayedOperation=Produce}"),
        Some(2)
    );
    p.stats();
    assert_eq!(
        registry.get("PurgatorySize{delayedOperation=Produce}"),
        Some(2)
    );
    assert_eq!(
        registry.get("NumDelayedOperations{delayedOperation=Produce}"),
        Some(1)
    );
}

const SIZE: &str = "PurgatorySize{delayedOperation=Fetch}";
const DELAYED: &str = "NumDelayedOperations{delayedOperation=Fetch}";

#[test]
fn the_gauges_follow_the_counts_without_anyone_asking_for_stats() {
    let registry = Registry::default();
    let clock = ManualClock::new();
    let p: Purgatory<Key, MockOp> = metrics::with_local_recorder(&registry, || {
        Purgatory::builder("Fetch")
            .clock(clock.clone())
            .reaper(false)
            .build()
            .unwrap()
    });
    // Set from the start, as Kafka registers them when it builds one.
    assert_eq!(
        (registry.get(SIZE), registry.get(DELAYED)),
        (Some(0), Some(0))
    );
    for timeout in [10, 10, 1_000] {
        p.try_complete_else_watch(op(timeout), [key("a"), key("b")])
            .unwrap();
    }
    // Driving the clock by hand sets them, as the reaper would.
    p.advance_clock(Duration::ZERO);
    assert_eq!(
        (registry.get(SIZE), registry.get(DELAYED)),
        (Some(6), Some(3))
    );
    clock.advance(Duration::from_millis(10));
    p.advance_clock(Duration::ZERO);
    assert_eq!(
        (registry.get(SIZE), registry.get(DELAYED)),
        (Some(2), Some(1))
    );
    // After shutdown nothing is pending, and the gauges say so.
    assert_eq!(p.shutdown().len(), 1);
    assert_eq!(
        (registry.get(SIZE), registry.get(DELAYED)),
        (Some(0), Some(0))
    );
}

/// Waits (real time, bounded) until `name` reads `want`; the reaper sets it
/// once per poll interval.
fn eventually(registry: &Registry, name: &str, want: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while registry.get(name) != Some(want) {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} stayed at {:?}, not {want}",
            registry.get(name)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_reaper_sets_the_gauges_once_per_poll_interval() {
    let registry = Registry::default();
    let p: Purgatory<Key, MockOp> = metrics::with_local_recorder(&registry, || {
        Purgatory::builder("Fetch")
            .reaper_poll_interval(Duration::from_millis(1))
            .build()
            .unwrap()
    });
    let ops: Vec<_> = (0..4).map(|_| op(60_000)).collect();
    for op in &ops {
        p.try_complete_else_watch(op.clone(), [key("a"), key("b")])
            .unwrap();
    }
    eventually(&registry, SIZE, 8);
    eventually(&registry, DELAYED, 4);
    for op in &ops {
        op.completable.store(true, Ordering::Release);
    }
    assert_eq!(p.check_and_complete(&key("a")), 4);
    eventually(&registry, SIZE, 0);
    eventually(&registry, DELAYED, 0);
}

#[test]
fn callback_panics_are_counted_under_a_name_of_ours() {
    let registry = Registry::default();
    let p: Purgatory<Key, MockOp> = metrics::with_local_recorder(&registry, || {
        Purgatory::builder("Loud").reaper(false).build().unwrap()
    });
    const PANICS: &str = "CallbackPanicsPerSec{delayedOperation=Loud}";
    assert_eq!(registry.get(PANICS), Some(0));
    let bad = op_with(|o| o.panic_in_complete = true);
    p.try_complete_else_watch(bad.clone(), [key("a")]).unwrap();
    bad.set_completable();
    assert_eq!(p.check_and_complete(&key("a")), 1);
    assert_eq!(registry.get(PANICS), Some(1));
    assert_eq!(p.stats().panicked, 1);
}
