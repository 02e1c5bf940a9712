//! W1 on nexus-timer's `BoundedWheel<u64>` (the `nexus` feature).
//!
//! Written as its documentation recommends: the wheel's own defaults (tick
//! 1 ms, 64 slots per level, 7 levels), sized for the whole population up
//! front (a bounded slab of `n` entries, as the other implementations
//! reserve theirs), `schedule` returning a handle per task (any task may be
//! cancelled), and `poll_and_rebalance` in the expire phase, stepping the
//! clock to `next_deadline()` (a lower bound: a step may fire nothing).
//!
//! nexus-timer requires every handle to be consumed (`cancel` or `free`):
//! the cancel phase cancels the even tasks and frees the odd ones' handles
//! (they stay scheduled and fire as fire-and-forget timers), all inside the
//! timed phase, since a user pays for it there.
//!
//! The wheel takes `Instant`s; W1's virtual milliseconds are instants
//! `epoch + ms` for an epoch fixed at the start, and the wheel never reads a
//! clock itself.

use super::params::W1Params;
use super::result::W1Result;
use super::tally::Tally;
use crate::measure::rss::MemWindow;
use crate::progress::Progress;
use nexus_timer::{BoundedWheel, WheelBuilder};
use std::time::{Duration, Instant};

/// The virtual millisecond of `at`, rounded up.
fn ms_of(epoch: Instant, at: Instant) -> u64 {
    let ns = at.saturating_duration_since(epoch).as_nanos();
    u64::try_from(ns.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// W1 on nexus-timer's wheel.
pub fn run_nexus_timer(params: &W1Params, progress: &mut Progress) -> Result<W1Result, String> {
    let n = params.n;
    let mut tally = Tally::new(params);
    let epoch = Instant::now();
    let at = |ms: u64| epoch + Duration::from_millis(ms);

    // Add.
    progress.phase("add", params.n as u64);
    let mem = MemWindow::open();
    let t = Instant::now();
    let mut wheel: BoundedWheel<u64> = WheelBuilder::default()
        .bounded(n.max(1))
        .build(epoch)
        .map_err(|e| format!("nexus-timer: {e:?}"))?;
    let mut handles = Vec::with_capacity(n);
    for (i, &d) in tally.deadlines.iter().enumerate() {
        handles.push(wheel.schedule(at(d), i as u64));
    }
    let add = t.elapsed();
    let bytes_per_task = mem.bytes_per(n);

    // Cancel the even tasks; release the odd ones' handles.
    let mut failed_cancels = 0;
    progress.phase("cancel", params.n.div_ceil(2) as u64);
    let t = Instant::now();
    for (i, h) in handles.into_iter().enumerate() {
        if i % 2 == 0 {
            if wheel.cancel(h).is_none() {
                failed_cancels += 1;
            }
        } else {
            wheel.free(h);
        }
    }
    let cancel = t.elapsed();
    tally.mark_cancelled();
    tally.bad += failed_cancels;

    // Expire: step to the next deadline (a lower bound) until the horizon.
    let horizon = params.horizon_ms();
    let mut buf = Vec::new();
    let mut now = 0;
    progress.phase("expire", (params.n / 2) as u64);
    let t = Instant::now();
    while let Some(next) = wheel.next_deadline() {
        let next_ms = ms_of(epoch, next);
        if next_ms > horizon {
            break;
        }
        // A lower bound may stay put after a poll that fired nothing: move on
        // by a millisecond then, so the loop always advances.
        now = next_ms.max(now + 1).min(horizon);
        wheel.poll_and_rebalance(at(now), &mut buf);
        for id in buf.drain(..) {
            tally.fire(id, now);
        }
        if now == horizon {
            break;
        }
    }
    now = horizon;
    wheel.poll_and_rebalance(at(horizon), &mut buf);
    for id in buf.drain(..) {
        tally.fire(id, horizon);
    }
    let expire = t.elapsed();

    Ok(tally.into_result(
        "nexus_timer",
        params,
        [add, cancel, expire],
        bytes_per_task,
        wheel.len(),
        now,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::w1::testing::{assert_correct, small};

    #[test]
    fn nexus_timer_peer_is_correct() {
        let r = run_nexus_timer(&small(), &mut Progress::quiet()).unwrap();
        assert_correct(&r);
        assert_eq!(r.end_ms, 3_001);
    }
}
