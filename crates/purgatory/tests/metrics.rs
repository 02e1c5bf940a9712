//! With the `metrics` feature, a purgatory publishes Kafka's gauges and its
//! expiration count through the `metrics` facade, labelled with its name:
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

impl Registry {
    fn cell(&self, key: &MetricKey) -> Arc<Cell> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        self.0.lock().unwrap().entry(name).or_default().clone()
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
        Gauge::from_arc(self.cell(key))
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
