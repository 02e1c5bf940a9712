//! W1 on the peers: the `BinaryHeap` with lazy cancellation and tokio-util's
//! `DelayQueue`.

use super::params::W1Params;
use super::result::W1Result;
use super::tally::Tally;
use crate::measure::rss::MemWindow;
use crate::peers::binary_heap::LazyCancelHeap;
use crate::progress::Progress;
use std::time::{Duration, Instant};

/// W1 on the `BinaryHeap` + lazy cancellation peer.
pub fn run_binary_heap(params: &W1Params, progress: &mut Progress) -> W1Result {
    let n = params.n;
    let mut tally = Tally::new(params);

    progress.phase("add", params.n as u64);
    let mem = MemWindow::open();
    let t = Instant::now();
    let mut heap = LazyCancelHeap::with_capacity(n);
    for &d in &tally.deadlines {
        heap.add(d);
    }
    let add = t.elapsed();
    let bytes_per_task = mem.bytes_per(n);

    let mut failed_cancels = 0;
    progress.phase("cancel", params.n.div_ceil(2) as u64);
    let t = Instant::now();
    for id in (0..n as u64).step_by(2) {
        if !heap.cancel(id) {
            failed_cancels += 1;
        }
    }
    let cancel = t.elapsed();
    tally.mark_cancelled();
    tally.bad += failed_cancels;

    let horizon = params.horizon_ms();
    let mut now = 0;
    progress.phase("expire", (params.n / 2) as u64);
    let t = Instant::now();
    while let Some(next) = heap.next_deadline() {
        if next > horizon {
            break;
        }
        now = now.max(next);
        heap.expire(now, |id| tally.fire(id, now));
    }
    now = horizon;
    heap.expire(horizon, |id| tally.fire(id, horizon));
    let expire = t.elapsed();

    tally.into_result(
        "binary_heap",
        params,
        [add, cancel, expire],
        bytes_per_task,
        heap.len(),
        now,
    )
}

/// W1 on tokio-util's `DelayQueue<u64>` in a paused current-thread runtime.
pub fn run_tokio_delay_queue(
    params: &W1Params,
    progress: &mut Progress,
) -> Result<W1Result, String> {
    use tokio_util::time::DelayQueue;

    let n = params.n;
    let mut tally = Tally::new(params);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;

    rt.block_on(async move {
        let start = tokio::time::Instant::now();

        progress.phase("add", params.n as u64);
        let mem = MemWindow::open();
        let t = Instant::now();
        let mut queue = DelayQueue::with_capacity(n);
        let mut keys = Vec::with_capacity(n);
        for (i, &d) in tally.deadlines.iter().enumerate() {
            keys.push(queue.insert_at(i as u64, start + Duration::from_millis(d)));
        }
        let add = t.elapsed();
        let bytes_per_task = mem.bytes_per(n);

        let mut failed_cancels = 0;
        progress.phase("cancel", params.n.div_ceil(2) as u64);
        let t = Instant::now();
        for key in keys.iter().step_by(2) {
            if queue.try_remove(key).is_none() {
                failed_cancels += 1;
            }
        }
        let cancel = t.elapsed();
        drop(keys);
        tally.mark_cancelled();
        tally.bad += failed_cancels;

        // When nothing is due, `poll_expired` is pending and the paused
        // runtime jumps its clock to the queue's next timer.
        progress.phase("expire", (params.n / 2) as u64);
        let t = Instant::now();
        while let Some(expired) = std::future::poll_fn(|cx| queue.poll_expired(cx)).await {
            let now = (tokio::time::Instant::now() - start).as_millis() as u64;
            tally.fire(expired.into_inner(), now);
        }
        let expire = t.elapsed();
        let end_ms = (tokio::time::Instant::now() - start).as_millis() as u64;

        Ok(tally.into_result(
            "tokio_delay_queue",
            params,
            [add, cancel, expire],
            bytes_per_task,
            queue.len(),
            end_ms,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::w1::testing::{assert_correct, small};

    #[test]
    fn binary_heap_peer_is_correct() {
        let r = run_binary_heap(&small(), &mut Progress::quiet());
        assert_correct(&r);
        assert_eq!(r.end_ms, 3_001);
    }

    #[test]
    fn tokio_delay_queue_peer_is_correct() {
        let r = run_tokio_delay_queue(&small(), &mut Progress::quiet()).unwrap();
        assert_correct(&r);
        assert!(r.end_ms <= 3_000);
    }
}
