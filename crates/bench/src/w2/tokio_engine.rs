//! The `tokio_notify` peer in W2's place: a task per request on a 2-worker
//! runtime ([`crate::peers::tokio_notify::watch_many`]) watching the
//! request's keys' `Notify`s, its own force `Notify` and
//! `sleep_until(creation + timeout)`. A check is the key's
//! `notify_waiters()`: every request waiting on it wakes and checks its
//! due time. Completions happen on the runtime's workers, after the
//! completion thread's call returns, so they are counted from the tasks;
//! a request due by the clock of the last check counts as completed for
//! the completion thread, which therefore checks its other keys only if
//! it is not (as it does for a purgatory whose check completes at once).
//! That holds because every request watches the same keys: the last
//! check, of any key, woke it.

use super::engine::{Engine, Watched};
use super::op::Ctx;
use crate::peers::tokio_notify::{watch_many, Outcome};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::sync::Notify;

/// What the completion thread holds of a request.
#[derive(Debug, Default)]
pub(crate) struct Request {
    force: Notify,
    done: AtomicBool,
    due_ms: u64,
}

/// The runtime, the keys' `Notify`s and the count of waiting tasks.
pub(crate) struct TokioEngine {
    rt: Runtime,
    ctx: &'static Ctx,
    /// One per key of a request (a duplicate key repeats its `Notify`).
    keys: &'static [&'static Notify],
    timeout: Duration,
    waiting: &'static AtomicU64,
    /// The published clock when the last check began: a request waiting
    /// then, or registering later, and due by it is bound to complete (it
    /// checks its due time once woken, or after registering).
    checked_ms: AtomicU64,
}

impl TokioEngine {
    /// A runtime with 2 workers and a `Notify` per distinct key name.
    pub(crate) fn new(ctx: &'static Ctx, names: &[&'static str]) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
        let mut by_name: HashMap<&str, &'static Notify> = HashMap::new();
        let keys: Vec<&'static Notify> = names
            .iter()
            .map(|n| {
                *by_name
                    .entry(n)
                    .or_insert_with(|| Box::leak(Box::default()))
            })
            .collect();
        Ok(TokioEngine {
            rt,
            ctx,
            keys: Box::leak(keys.into_boxed_slice()),
            timeout: ctx.timeout(),
            waiting: Box::leak(Box::default()),
            checked_ms: AtomicU64::new(0),
        })
    }
}

impl Engine for TokioEngine {
    type Handle = Arc<Request>;
    const COUNTS_COMPLETIONS: bool = false;

    fn watch(&self, due_ms: u64, keep: bool) -> Watched<Arc<Request>> {
        let request = Arc::new(Request {
            due_ms,
            ..Request::default()
        });
        let handle = keep.then(|| request.clone());
        let (ctx, keys, waiting) = (self.ctx, self.keys, self.waiting);
        let deadline = tokio::time::Instant::now() + self.timeout;
        waiting.fetch_add(1, Ordering::Relaxed);
        self.rt.spawn(async move {
            let ready = || ctx.published_ms() >= due_ms;
            let outcome = watch_many(keys, &request.force, deadline, ready).await;
            request.done.store(true, Ordering::Release);
            waiting.fetch_sub(1, Ordering::Relaxed);
            ctx.record_complete();
            if outcome == Outcome::Expired {
                ctx.record_expiration();
            }
        });
        Watched::Pending(handle)
    }

    fn force(&self, handle: &Arc<Request>) -> bool {
        handle.force.notify_one();
        false
    }

    fn is_completed(&self, handle: &Arc<Request>) -> bool {
        handle.done.load(Ordering::Acquire)
            || handle.due_ms <= self.checked_ms.load(Ordering::Relaxed)
    }

    fn keys(&self) -> usize {
        self.keys.len()
    }

    fn check(&self, key: usize) -> usize {
        // Only the completion thread checks: a plain store keeps the latest.
        self.checked_ms
            .store(self.ctx.published_ms(), Ordering::Relaxed);
        self.keys[key].notify_waiters();
        0
    }

    fn leftovers(&self) -> (usize, usize) {
        // A waiting task is both watched and armed.
        let w = self.waiting.load(Ordering::Relaxed) as usize;
        (w, w)
    }
}
