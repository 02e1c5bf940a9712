//! W1 on this project's timing wheel.

use super::params::W1Params;
use super::result::W1Result;
use super::tally::Tally;
use crate::measure::rss::MemWindow;
use crate::progress::Progress;
use std::time::Instant;
use timer::{Insertion, TimingWheel};

/// W1 on this project's `timer::TimingWheel<u64>`.
pub fn run_timer(params: &W1Params, progress: &mut Progress) -> Result<W1Result, String> {
    let n = params.n;
    let mut tally = Tally::new(params);
    let mut wheel = TimingWheel::<u64>::new(1, 20, 0).map_err(|e| e.to_string())?;

    // Add.
    progress.phase("add", params.n as u64);
    let mem = MemWindow::open();
    let t = Instant::now();
    wheel.reserve(n);
    let mut handles = Vec::with_capacity(n);
    // Tasks handed back at insertion (none in W1: every delay is ≥ 1 tick).
    let mut expired_at_add: Vec<u64> = Vec::new();
    for (i, &d) in tally.deadlines.iter().enumerate() {
        match wheel.insert(d, i as u64) {
            Insertion::Scheduled(h) => handles.push(h),
            Insertion::Expired(task) => expired_at_add.push(task),
        }
    }
    let add = t.elapsed();
    let bytes_per_task = mem.bytes_per(n);

    // Cancel. `handles` holds the scheduled tasks in index order; when none
    // was handed back, task i's handle is handles[i].
    let mut failed_cancels = 0;
    progress.phase("cancel", params.n.div_ceil(2) as u64);
    let t = Instant::now();
    if expired_at_add.is_empty() {
        for h in handles.iter().step_by(2) {
            if wheel.cancel(*h).is_none() {
                failed_cancels += 1;
            }
        }
    } else {
        for i in (0..n as u64).step_by(2) {
            if let Err(skipped) = expired_at_add.binary_search(&i) {
                if wheel.cancel(handles[i as usize - skipped]).is_none() {
                    failed_cancels += 1;
                }
            }
        }
    }
    let cancel = t.elapsed();
    drop(handles);
    // A task handed back at insertion runs at time 0: early, since every
    // W1 deadline is ≥ 1, and counted as bad too.
    for &task in &expired_at_add {
        tally.fire(task, 0);
    }
    tally.mark_cancelled();
    tally.bad += failed_cancels + expired_at_add.len();

    // Expire: jump from due bucket to due bucket.
    let horizon = params.horizon_ms();
    let mut now = 0;
    let mut stalled = 0;
    progress.phase("expire", (params.n / 2) as u64);
    let t = Instant::now();
    while let Some(next) = wheel.next_expiration() {
        if next > horizon {
            break;
        }
        now = now.max(next);
        let fired = wheel.advance(now, |task| tally.fire(task, now));
        // A bucket emptied by cancels fires nothing but leaves the queue;
        // the same head three times in a row means the loop is stuck.
        if fired == 0 && wheel.next_expiration() == Some(next) {
            stalled += 1;
            if stalled == 3 {
                tally.bad += 1;
                break;
            }
        } else {
            stalled = 0;
        }
    }
    if stalled < 3 {
        now = horizon;
        wheel.advance(horizon, |task| tally.fire(task, horizon));
    }
    let expire = t.elapsed();

    Ok(tally.into_result(
        "timer",
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
    fn our_timing_wheel_is_correct() {
        let r = run_timer(&small(), &mut Progress::quiet()).unwrap();
        assert_correct(&r);
        assert_eq!(r.end_ms, 3_001);
    }
}
