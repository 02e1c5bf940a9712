//! The W2 run: draw the samples, start the purgatory and the completion
//! thread, generate the load on the calling thread, wait for every request
//! to complete or expire, and gather the figures.
//!
//! The generator reads the clock once per request and, when the next
//! arrival is still ahead, sleeps until it (through the [`ClockThread`]): at
//! most one sleep per millisecond whatever the rate, none at all while it
//! is behind (at saturation). A request whose latency is below the timeout
//! goes, once watched, to the [`CompletionQueue`] (handed over once per
//! millisecond, or per [`HANDOVER_MAX`] requests); the others expire in the
//! purgatory (real clock, tick 1 ms, wheel 20, reaper running).

use super::clock_thread::ClockThread;
use super::completer::complete_loop;
use super::completion_queue::{CompletionQueue, Due};
use super::hasher::RunHasher;
use super::op::{Ctx, W2Op};
use super::params::W2Params;
use super::result::W2Result;
use super::samples::{choose_keys, intervals_ms, latencies_ms, LogNormal, SampleSummary};
use crate::measure::{cpu_since, process_cpu, rss, thread_cpu, WakeupCost};
use crate::progress::Progress;
use purgatory::{Operation, Purgatory};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

/// Most requests the generator buffers before handing them to the queue
/// (it hands them over at least once per millisecond).
const HANDOVER_MAX: usize = 4096;

/// What the generator did.
#[derive(Debug, Clone, Copy)]
struct Generated {
    /// When it issued the last request.
    end: Instant,
    /// Requests completed by `try_complete_else_watch` itself.
    immediate: u64,
    /// Requests `try_complete_else_watch` refused.
    rejected: u64,
    /// Timed sleeps of the clock thread (generator and tail).
    sleeps: u64,
    /// The generator's own CPU time.
    cpu: Option<Duration>,
}

impl Default for Generated {
    fn default() -> Self {
        Generated {
            end: Instant::now(),
            immediate: 0,
            rejected: 0,
            sleeps: 0,
            cpu: None,
        }
    }
}

/// The run: draw the samples, start the purgatory and the completion
/// thread, generate the requests on this thread, wait for every request to
/// complete or expire (or for the timeout plus 30 s after the last request),
/// and gather the figures.
pub(crate) fn drive(
    impl_name: &'static str,
    params: &W2Params,
    check: bool,
    progress: &mut Progress,
) -> W2Result {
    let n = params.num;
    let keys_owned = choose_keys(params.seed, params.keys, params.key_space_size);
    let keys: Vec<&'static str> = keys_owned
        .iter()
        .map(|k| &*Box::leak(k.clone().into_boxed_str()))
        .collect();
    let latencies = latencies_ms(params.seed, n, LogNormal::new(params.pct50, params.pct75));
    let intervals = intervals_ms(params.seed, n, params.rate);
    let samples = SampleSummary::of(&latencies, &intervals);
    progress.phase("measure wake-up costs", 0);
    let wakeup_cost = WakeupCost::measure();
    rss::reset_peak();

    let timeout_ms = params.timeout_ms;
    let purgatory: Purgatory<&'static str, W2Op, RunHasher> = Purgatory::builder("fake purgatory")
        .hasher(params.hasher.build())
        .build()
        .unwrap_or_else(|e| panic!("cannot start the purgatory: {e}"));
    // Requests are due within the timeout of their creation; twice that
    // leaves room for a completion thread running behind.
    let queue = CompletionQueue::new(2 * timeout_ms);
    let ctx: &'static Ctx = Box::leak(Box::new(Ctx::new(Duration::from_millis(timeout_ms))));
    // Requests handed to the queue once per millisecond (or per this many).
    let mut handover: Vec<Due> = Vec::with_capacity(HANDOVER_MAX);
    let cpu0 = process_cpu();
    let start = Instant::now();

    let (gen, completer, tail_cpu) = thread::scope(|s| {
        let completer = thread::Builder::new()
            .name("w2-completion".into())
            .spawn_scoped(s, || complete_loop(ctx, &queue, &purgatory, &keys, check))
            .expect("cannot spawn the completion thread");

        let gen_cpu0 = thread_cpu();
        let mut clock = ClockThread {
            ctx,
            queue: &queue,
            pace_ms: params.pace_ms.max(1),
            last_wake_ms: 0,
            sleeps: 0,
        };
        let mut gen = Generated::default();
        let mut arrival_ms = ctx.read_clock_ms();
        let mut last_ms = u64::MAX;
        progress.phase("issue", n as u64);
        for (issued, (&gap, &latency)) in intervals.iter().zip(&latencies).enumerate() {
            arrival_ms += u64::from(gap);
            let mut now_ms = ctx.read_clock_ms();
            if arrival_ms > now_ms {
                // Ahead: hand over, then sleep until the arrival (a whole
                // millisecond), waking the completion thread on the way.
                queue.push_all(&mut handover);
                while now_ms < arrival_ms {
                    now_ms = clock.sleep(arrival_ms, now_ms);
                }
            }
            if now_ms != last_ms {
                // A new millisecond: publish it, hand over the requests of
                // the previous one, and wake the completion thread if due.
                ctx.publish_ms(now_ms);
                queue.push_all(&mut handover);
                queue.wake_if_due(now_ms);
                last_ms = now_ms;
                progress.update(issued as u64);
            }
            let latency = u64::from(latency);
            let due_ms = now_ms + latency;
            let op = Operation::new(W2Op::new(ctx, due_ms));
            let handle = (latency < timeout_ms).then(|| op.clone());
            match purgatory.try_complete_else_watch(op, keys.iter().copied()) {
                Ok(false) => {
                    if let Some(op) = handle {
                        handover.push(Due { due_ms, op });
                        if handover.len() >= HANDOVER_MAX {
                            queue.push_all(&mut handover);
                        }
                    }
                }
                Ok(true) => gen.immediate += 1,
                Err(_) => gen.rejected += 1,
            }
        }
        gen.end = Instant::now();
        gen.cpu = cpu_since(gen_cpu0, thread_cpu());

        // Keep the clock going for the completion thread until its queue
        // is empty, then let it finish.
        progress.phase("complete the last due requests", 0);
        let tail_cpu0 = thread_cpu();
        queue.push_all(&mut handover);
        queue.close();
        let mut now_ms = ctx.read_clock_ms();
        loop {
            queue.wake_if_due(now_ms);
            let head = queue.head_ms();
            if head == u64::MAX {
                break;
            }
            now_ms = clock.sleep(head, now_ms);
        }
        let completer = completer.join().expect("completion thread panicked");
        gen.sleeps = clock.sleeps;
        (gen, completer, tail_cpu0)
    });

    // Whatever was not completed must expire.
    let completed = gen.immediate + completer.completed;
    let target = n as u64 - gen.rejected;
    let give_up = gen.end + Duration::from_millis(timeout_ms) + Duration::from_secs(30);
    progress.phase("wait for expirations", 0);
    ctx.wait_for_expirations(target.saturating_sub(completed), give_up);
    let elapsed = start.elapsed();
    let cpu = cpu_since(cpu0, process_cpu());
    let tail_cpu = cpu_since(tail_cpu, thread_cpu());
    let watched_after = purgatory.watched();
    let delayed_after = purgatory.delayed();
    let expired = ctx.expired();
    let on_complete = ctx.on_complete.0.load(Ordering::Acquire);
    let peak_rss_mb = rss::peak_rss_kb().map(|kb| kb as f64 / 1024.0);
    drop(purgatory);

    W2Result {
        impl_name,
        params: params.clone(),
        keys: keys_owned,
        samples,
        enqueue: gen.end.saturating_duration_since(start),
        elapsed,
        cpu,
        cpu_generator: gen.cpu,
        cpu_completer: completer.cpu,
        cpu_tail: tail_cpu,
        wakeup_cost,
        completed,
        expired,
        bad: on_complete.abs_diff(completed + expired),
        double: ctx.double.0.load(Ordering::Relaxed),
        rejected: gen.rejected,
        checks: completer.checks,
        completion_lag_max_ms: completer.lag_max_ms,
        clock_sleeps: gen.sleeps,
        completer_parks: completer.parks,
        watched_after,
        delayed_after,
        peak_rss_mb,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::w2::{run, targets, W2Hasher, REQUIRED_FIELDS};

    fn tiny(n: usize) -> W2Params {
        W2Params {
            num: n,
            rate: 1_000_000.0,
            timeout_ms: 20,
            pct50: 5.0,
            pct75: 8.0,
            ..W2Params::default()
        }
    }

    fn assert_sound(r: &W2Result) {
        let n = r.params.num as u64;
        assert_eq!(r.completed + r.expired, n, "{r:?}");
        assert_eq!((r.bad, r.double, r.rejected), (0, 0, 0), "{r:?}");
        assert_eq!(r.watched_after, 0, "{r:?}");
        // With latencies of 5–8 ms and a 20 ms timeout, a few per cent of
        // the requests expire and the rest complete.
        assert!(r.completed > n / 2 && r.expired > 0, "{r:?}");
    }

    #[test]
    fn force_mode_end_to_end() {
        let r = run("purgatory", &tiny(2_000), &mut Progress::quiet()).unwrap();
        assert_sound(&r);
        assert_eq!(r.checks, 0);
        let rec = r.to_record();
        for f in REQUIRED_FIELDS {
            assert!(rec.get(f).is_some(), "missing {f}");
        }
        assert_eq!(rec.str("workload"), Some("w2"));
        assert_eq!(rec.num("requests"), Some(2000.0));
        // The correctness checks pass (the rate check is a measurement, not
        // asserted in a test build).
        let checks = targets(&[rec]);
        assert_eq!(checks.len(), 3, "{checks:?}");
        assert!(
            checks[..2].iter().all(|c| c.met == Some(true)),
            "{checks:?}"
        );
        assert!(checks[2].description.contains("actual rate"));
    }

    #[test]
    fn fx_hasher_end_to_end_and_hasher_names() {
        let params = W2Params {
            hasher: W2Hasher::Fx,
            ..tiny(2_000)
        };
        let r = run("purgatory_check", &params, &mut Progress::quiet()).unwrap();
        assert_sound(&r);
        assert_eq!(r.to_record().str("hasher"), Some("fx"));
        for h in [W2Hasher::Std, W2Hasher::Fx] {
            assert_eq!(W2Hasher::parse(h.name()), Ok(h));
        }
        assert!(W2Hasher::parse("sip").unwrap_err().contains("std or fx"));
    }

    #[test]
    fn check_mode_end_to_end() {
        let r = run("purgatory_check", &tiny(2_000), &mut Progress::quiet()).unwrap();
        assert_sound(&r);
        assert!(r.checks > 0);
        assert!(run("nope", &tiny(1), &mut Progress::quiet()).is_err());
        let no_keys = W2Params { keys: 0, ..tiny(1) };
        assert!(run("purgatory", &no_keys, &mut Progress::quiet()).is_err());
    }
}
