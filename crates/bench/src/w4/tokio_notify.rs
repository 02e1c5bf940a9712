//! W4 on the `tokio_notify` peer: one task per operation on a 2-worker
//! multi-thread runtime ([`crate::peers::tokio_notify::watch_one`]), a
//! `Notify` per key, a force `Notify` per operation (`Arc`-shared with
//! whoever may force it; nobody does in W4).
//!
//! A watch has taken effect when its task first ran (its notifications
//! registered): phase A's time runs until every task has. The key table is
//! built inside phase A (timed, and counted in its memory), as the
//! purgatory builds its watch lists there.

use super::phase::{draw_keys, key_count, Phase, LONG_TIMEOUT_NS};
use super::{Memory, W4Params, W4Result, GIVE_UP};
use crate::peers::tokio_notify::{watch_one, Outcome};
use crate::progress::{wait_for, Progress};
use std::sync::Arc;
use std::time::Instant;
use tokio::runtime::Runtime;
use tokio::sync::Notify;

/// Spawns one waiting task per operation of `phase`, operation `i` on
/// `table[keys[i]]`, its timeout given by `timeout_ns(now_ns)`.
fn fill(
    rt: &Runtime,
    table: &'static [Notify],
    phase: &'static Phase,
    keys: &[u64],
    progress: &mut Progress,
    timeout_ns: impl Fn(u64) -> u64,
) {
    for (i, &key) in keys.iter().enumerate() {
        if i % 65_536 == 0 {
            progress.update(i as u64);
        }
        let now = phase.now_ns();
        let deadline_ns = now + timeout_ns(now);
        let deadline = tokio::time::Instant::from_std(phase.instant_at(deadline_ns));
        let force = Arc::new(Notify::new());
        let key = &table[key as usize];
        rt.spawn(async move {
            let started = || {
                phase
                    .started
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
            };
            match watch_one(key, &force, deadline, || phase.ready(), started).await {
                Outcome::Completed | Outcome::Forced => phase.complete(),
                Outcome::Expired => {
                    phase.complete();
                    phase.expire(deadline_ns);
                }
            }
        });
    }
}

/// Runs W4 on the tokio peer.
pub fn run(params: &W4Params, progress: &mut Progress) -> Result<W4Result, String> {
    let n = params.pending;
    if params.keys_per_op != 1 {
        return Err(format!(
            "tokio_notify watches one key per operation, not {}",
            params.keys_per_op
        ));
    }
    let keys = draw_keys(params.seed, n, params.keys);
    let origin = Instant::now();
    let [a, c, d, e] = [(); 4].map(|_| Phase::leak(origin));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .map_err(|err| format!("cannot start the tokio runtime: {err}"))?;
    let mut result = W4Result::new("tokio_notify", params);
    let mut memory = Memory::baseline();

    progress.phase("A fill", n as u64);
    let t = Instant::now();
    let table: &'static [Notify] = Box::leak(
        (0..key_count(n, params.keys))
            .map(|_| Notify::new())
            .collect::<Box<[Notify]>>(),
    );
    fill(&rt, table, a, &keys, progress, |_| LONG_TIMEOUT_NS);
    wait_for(n, Instant::now() + GIVE_UP, progress, || {
        Phase::count(&a.started)
    });
    result.watch = t.elapsed();
    memory.filled();

    progress.phase("B check", n as u64);
    let t = Instant::now();
    a.flag.store(true, std::sync::atomic::Ordering::Release);
    for key in table {
        key.notify_waiters();
    }
    wait_for(n, Instant::now() + GIVE_UP, progress, || {
        Phase::count(&a.completed)
    });
    result.check = t.elapsed();
    result.completed = Phase::count(&a.completed);
    // A task still waiting is both watched and armed.
    let waiting = Phase::count(&a.started) - result.completed;
    (result.watched_after, result.delayed_after) = (waiting, waiting);
    memory.completed();
    memory.trimmed();
    result.memory = memory;

    super::expiry_and_burst(params, [c, d], &mut result, progress, |p, pr, t| {
        fill(&rt, table, p, &keys, pr, t);
        0
    });

    progress.phase("E shutdown", n as u64);
    fill(&rt, table, e, &keys, progress, |_| LONG_TIMEOUT_NS);
    wait_for(n, Instant::now() + GIVE_UP, progress, || {
        Phase::count(&e.started)
    });
    let t = Instant::now();
    drop(rt);
    result.shutdown = t.elapsed();
    result.shutdown_pending = Phase::count(&e.started) - Phase::count(&e.completed);
    result.finish(c, d);
    Ok(result)
}
