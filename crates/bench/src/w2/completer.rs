//! The completion thread: takes due requests from the completion queue and
//! completes them, by force or through `check_and_complete`.

use super::completion_queue::{CompletionQueue, Due};
use super::hasher::RunHasher;
use super::op::{Ctx, W2Op};
use crate::measure::{cpu_since, thread_cpu};
use purgatory::Purgatory;
use std::time::Duration;

/// What the completion thread did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CompleterStats {
    /// Requests this thread completed.
    pub(crate) completed: u64,
    /// `check_and_complete` calls (check mode).
    pub(crate) checks: u64,
    /// Largest `now − due` at the time a request was taken, ms.
    pub(crate) lag_max_ms: u64,
    /// Times it parked waiting for a due request.
    pub(crate) parks: u64,
    /// Its own CPU time.
    pub(crate) cpu: Option<Duration>,
}

/// The completion thread: takes due requests in due order and completes them
/// by force or through `check_and_complete`, until the queue is closed and
/// empty.
pub(crate) fn complete_loop(
    ctx: &'static Ctx,
    queue: &CompletionQueue,
    purgatory: &Purgatory<&'static str, W2Op, RunHasher>,
    keys: &[&'static str],
    check: bool,
) -> CompleterStats {
    let cpu0 = thread_cpu();
    let mut stats = CompleterStats::default();
    let mut batch: Vec<Due> = Vec::new();
    while let Some(now) = queue.pop_due(ctx, &mut batch, &mut stats.parks) {
        ctx.publish_ms(now);
        if let Some(first) = batch.first() {
            stats.lag_max_ms = stats.lag_max_ms.max(now.saturating_sub(first.due_ms));
        }
        for Due { op, .. } in batch.drain(..) {
            if check {
                for key in keys {
                    if op.is_completed() {
                        break;
                    }
                    stats.completed += purgatory.check_and_complete(key) as u64;
                    stats.checks += 1;
                }
            } else if op.force_complete() {
                stats.completed += 1;
            }
        }
    }
    stats.cpu = cpu_since(cpu0, thread_cpu());
    stats
}
