//! The completion thread: takes due requests from the completion queue and
//! completes them, by force or through `check_and_complete`.

use super::completion_queue::{CompletionQueue, Due};
use super::engine::Engine;
use super::op::Ctx;
use crate::measure::{cpu_since, thread_cpu};
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
pub(crate) fn complete_loop<E: Engine>(
    ctx: &'static Ctx,
    queue: &CompletionQueue<E::Handle>,
    engine: &E,
    check: bool,
) -> CompleterStats {
    let cpu0 = thread_cpu();
    let mut stats = CompleterStats::default();
    let mut batch: Vec<Due<E::Handle>> = Vec::new();
    while let Some(now) = queue.pop_due(ctx, &mut batch, &mut stats.parks) {
        ctx.publish_ms(now);
        if let Some(first) = batch.first() {
            stats.lag_max_ms = stats.lag_max_ms.max(now.saturating_sub(first.due_ms));
        }
        for Due { op, .. } in batch.drain(..) {
            if check {
                for key in 0..engine.keys() {
                    if engine.is_completed(&op) {
                        break;
                    }
                    stats.completed += engine.check(key) as u64;
                    stats.checks += 1;
                }
            } else if engine.force(&op) {
                stats.completed += 1;
            }
        }
    }
    stats.cpu = cpu_since(cpu0, thread_cpu());
    stats
}
