//! Test helpers: a mock operation that records its callbacks and checks the
//! purgatory's locking promises, and a purgatory on a manual clock.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use purgatory::{
    new_operation_lock, DelayedOperation, ManualClock, Operation, OperationLock, Purgatory,
};

/// Key type of the tests (Kafka's tests use `MockKey(String)`).
pub type Key = String;

pub fn key(s: &str) -> Key {
    s.to_owned()
}

/// Kafka's `MockDelayedOperation`, instrumented.
#[derive(Debug, Default)]
pub struct MockOp {
    pub timeout: Duration,
    /// What `try_complete` answers.
    pub completable: AtomicBool,
    pub tries: AtomicUsize,
    pub completions: AtomicUsize,
    pub expirations: AtomicUsize,
    /// `on_expiration` ran before `on_complete`.
    pub expired_before_complete: AtomicBool,
    /// Two callbacks of this operation overlapped.
    pub overlap: AtomicBool,
    /// A callback ran without the operation lock (checked when `lock` is set).
    pub unlocked_call: AtomicBool,
    pub busy: AtomicBool,
    /// The shared lock the operation was created with, to check it is held.
    pub lock: Option<OperationLock>,
    /// Yield this many times inside `try_complete`, to widen race windows.
    pub spin: usize,
    pub panic_in_try: AtomicBool,
    pub panic_in_complete: bool,
    pub panic_in_expiration: bool,
    /// Counts the operation being dropped (freed).
    pub drops: DropCounter,
}

/// Counts its own drop into a shared counter.
#[derive(Debug, Default)]
pub struct DropCounter(pub Option<Arc<AtomicUsize>>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            d.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl MockOp {
    fn enter(&self) {
        if self.busy.swap(true, Ordering::AcqRel) {
            self.overlap.store(true, Ordering::Relaxed);
        }
        if let Some(lock) = &self.lock {
            if !lock.is_owned_by_current_thread() {
                self.unlocked_call.store(true, Ordering::Relaxed);
            }
        }
    }

    fn leave(&self) {
        self.busy.store(false, Ordering::Release);
    }

    pub fn set_completable(&self) {
        self.completable.store(true, Ordering::Release);
    }

    pub fn completions(&self) -> usize {
        self.completions.load(Ordering::Acquire)
    }

    pub fn expirations(&self) -> usize {
        self.expirations.load(Ordering::Acquire)
    }

    /// Every promise the purgatory makes about callbacks held.
    pub fn assert_sound(&self) {
        assert!(
            !self.overlap.load(Ordering::Relaxed),
            "callbacks overlapped"
        );
        assert!(
            !self.unlocked_call.load(Ordering::Relaxed),
            "a callback ran without the operation lock"
        );
        assert!(
            !self.expired_before_complete.load(Ordering::Relaxed),
            "on_expiration ran before on_complete"
        );
        assert!(
            self.completions() <= 1,
            "on_complete ran {} times",
            self.completions()
        );
        assert!(self.expirations() <= self.completions());
    }
}

impl DelayedOperation for MockOp {
    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn try_complete(&self) -> bool {
        self.enter();
        self.tries.fetch_add(1, Ordering::Relaxed);
        let answer = self.completable.load(Ordering::Acquire);
        for _ in 0..self.spin {
            std::thread::yield_now();
        }
        let panic = self.panic_in_try.load(Ordering::Relaxed);
        self.leave();
        if panic {
            panic!("try_complete panics on purpose");
        }
        answer
    }

    fn on_complete(&self) {
        self.enter();
        self.completions.fetch_add(1, Ordering::AcqRel);
        self.leave();
        if self.panic_in_complete {
            panic!("on_complete panics on purpose");
        }
    }

    fn on_expiration(&self) {
        self.enter();
        if self.completions.load(Ordering::Acquire) == 0 {
            self.expired_before_complete.store(true, Ordering::Relaxed);
        }
        self.expirations.fetch_add(1, Ordering::AcqRel);
        self.leave();
        if self.panic_in_expiration {
            panic!("on_expiration panics on purpose");
        }
    }
}

/// A mock operation with its own lock.
pub fn op(timeout_ms: u64) -> Operation<MockOp> {
    Operation::new(MockOp {
        timeout: Duration::from_millis(timeout_ms),
        ..MockOp::default()
    })
}

/// A mock operation whose lock is supplied, so callbacks check it is held.
pub fn locked_op(timeout_ms: u64) -> Operation<MockOp> {
    op_under(&new_operation_lock(), timeout_ms)
}

/// A mock operation under `lock` (which others may share, or a test hold),
/// its callbacks checking it is held.
pub fn op_under(lock: &OperationLock, timeout_ms: u64) -> Operation<MockOp> {
    Operation::with_lock(
        MockOp {
            timeout: Duration::from_millis(timeout_ms),
            lock: Some(lock.clone()),
            ..MockOp::default()
        },
        lock.clone(),
    )
}

/// A mock operation built from a template.
pub fn op_with(f: impl FnOnce(&mut MockOp)) -> Operation<MockOp> {
    let mut op = MockOp::default();
    f(&mut op);
    Operation::new(op)
}

/// A purgatory on a manual clock with no reaper: expiry only through
/// `advance_clock`.
pub fn manual() -> (Purgatory<Key, MockOp>, ManualClock) {
    let clock = ManualClock::new();
    let p = Purgatory::builder("mock")
        .clock(clock.clone())
        .reaper(false)
        .build()
        .expect("purgatory");
    (p, clock)
}

/// Moves the clock and runs every expiration due.
pub fn advance(p: &Purgatory<Key, MockOp>, clock: &ManualClock, ms: u64) {
    clock.advance_ms(ms);
    p.advance_clock(Duration::ZERO);
}

/// Lets `log` output show with `RUST_LOG=...` (once per process).
pub fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// The value of `future` if it is ready at its first poll.
pub fn ready_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(value) => Some(value),
        std::task::Poll::Pending => None,
    }
}
