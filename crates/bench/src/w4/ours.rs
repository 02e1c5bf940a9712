//! W4 on this project's purgatory (`purgatory`).
//!
//! The user's operation is [`W4Op`], 24 bytes: the phase it belongs to, its
//! deadline and its timeout. Default configuration: real clock, tick 1 ms,
//! 20 buckets, reaper running, `ShutdownPolicy::Drop`.

use super::phase::{draw_keys, key_count, Phase, LONG_TIMEOUT_NS};
use super::{Memory, W4Params, W4Result, GIVE_UP};
use crate::measure::rss;
use crate::progress::{wait_for, Progress};
use purgatory::{DelayedOperation, Operation, Purgatory};
use std::time::{Duration, Instant};

/// The W4 operation: completes once its phase's flag is set.
#[derive(Debug)]
pub struct W4Op {
    phase: &'static Phase,
    /// Its deadline, ns after the run's origin (for lateness).
    deadline_ns: u64,
    timeout_ns: u64,
}

impl DelayedOperation for W4Op {
    fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns)
    }
    fn try_complete(&self) -> bool {
        self.phase.ready()
    }
    fn on_complete(&self) {
        self.phase.complete();
    }
    fn on_expiration(&self) {
        self.phase.expire(self.deadline_ns);
    }
}

/// Watches `n` operations of `phase`, operation `i` under the `i`th chunk
/// of `per_op` keys of `keys`, its timeout given by `timeout_ns(now_ns)`. Returns the operations the
/// purgatory refused or completed at once (none expected).
fn fill(
    purgatory: &Purgatory<u64, W4Op>,
    phase: &'static Phase,
    keys: &[u64],
    per_op: usize,
    progress: &mut Progress,
    timeout_ns: impl Fn(u64) -> u64,
) -> u64 {
    let mut bad = 0;
    for (i, op_keys) in keys.chunks(per_op).enumerate() {
        if i % 65_536 == 0 {
            progress.update(i as u64);
        }
        let now = phase.now_ns();
        let timeout_ns = timeout_ns(now);
        let op = Operation::new(W4Op {
            phase,
            deadline_ns: now + timeout_ns,
            timeout_ns,
        });
        if purgatory.try_complete_else_watch(op, op_keys.iter().copied()) != Ok(false) {
            bad += 1;
        }
    }
    bad
}

/// Runs W4 on the purgatory.
pub fn run(params: &W4Params, progress: &mut Progress) -> Result<W4Result, String> {
    let n = params.pending;
    let per_op = params.keys_per_op.max(1);
    let keys = draw_keys(params.seed, n * per_op, params.keys);
    let origin = Instant::now();
    let [a, c, d, e] = [(); 4].map(|_| Phase::leak(origin));
    let purgatory: Purgatory<u64, W4Op> = Purgatory::builder("w4")
        .build()
        .map_err(|err| format!("cannot start the purgatory: {err}"))?;
    let mut result = W4Result::new("purgatory", params);
    let mut memory = Memory::baseline();

    progress.phase("A fill", n as u64);
    let t = Instant::now();
    result.bad += fill(&purgatory, a, &keys, per_op, progress, |_| LONG_TIMEOUT_NS);
    result.watch = t.elapsed();
    memory.filled();

    progress.phase("B check", n as u64);
    let t = Instant::now();
    a.flag.store(true, std::sync::atomic::Ordering::Release);
    for key in 0..key_count(n * per_op, params.keys) as u64 {
        purgatory.check_and_complete(&key);
    }
    wait_for(n, Instant::now() + GIVE_UP, progress, || {
        Phase::count(&a.completed)
    });
    result.check = t.elapsed();
    result.completed = Phase::count(&a.completed);
    result.watched_after = purgatory.watched();
    result.delayed_after = purgatory.delayed();
    memory.completed();
    purgatory.purge();
    memory.trimmed();
    result.memory = memory;

    super::expiry_and_burst(params, [c, d], &mut result, progress, |p, pr, t| {
        fill(&purgatory, p, &keys, per_op, pr, t)
    });

    progress.phase("E shutdown", n as u64);
    result.bad += fill(&purgatory, e, &keys, per_op, progress, |_| LONG_TIMEOUT_NS);
    let t = Instant::now();
    let pending = purgatory.shutdown();
    result.shutdown_pending = pending.len();
    drop(pending);
    drop(purgatory);
    result.shutdown = t.elapsed();
    result.finish(c, d);
    rss::trim();
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operation_is_24_bytes() {
        assert_eq!(std::mem::size_of::<W4Op>(), 24);
    }
}
