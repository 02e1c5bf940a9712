//! What waking up costs here: the CPU a thread is charged per wake-up, for
//! each way a program can wait for a moment or for another thread.
//!
//! W2 at low rates is paced like Kafka's tool: requests arrive at whole
//! milliseconds and the generator sleeps until the next one, so a run takes
//! about one timed wake-up per millisecond, plus one park of the completion
//! thread (woken by the clock thread, see `w2::completion_queue::CompletionQueue`). Whatever the
//! purgatory costs comes on top of that floor. This module measures the
//! floor's parts with every primitive worth trying, so that a machine's
//! floor can be read off before reading W2's figures (`purgatory-bench
//! wakeups`).
//!
//! Each primitive is measured in batches; the median batch is reported, as
//! a VM's wake-up costs drift. CPU is the calling thread's (for the park,
//! both threads', as in `measure::WakeupCost`).

use crate::measure::{thread_cpu, WakeupCost};
use crate::report::Record;
use crate::stats;
use std::time::{Duration, Instant};

/// Batches per primitive.
const BATCHES: usize = 5;

/// One primitive's cost.
#[derive(Debug, Clone, PartialEq)]
pub struct WakeupFigure {
    /// What was measured (`sleep_1ms`, `timerfd_periodic_1ms`, …).
    pub primitive: &'static str,
    /// CPU charged per wake-up, µs (median batch); `None` where it cannot
    /// be measured on this platform.
    pub cpu_us: Option<f64>,
    /// Wall time per wake-up, µs (median batch).
    pub wall_us: Option<f64>,
    /// Whether the primitive is a timed wait (as against a park woken by
    /// another thread, or a plain system call for reference).
    pub timed: bool,
}

impl WakeupFigure {
    /// The JSON record of this figure.
    pub fn to_record(&self) -> Record {
        let mut r = Record::new()
            .with("workload", "wakeups")
            .with("primitive", self.primitive)
            .with("kind", if self.timed { "timed" } else { "untimed" });
        if let Some(cpu) = self.cpu_us {
            r = r.with("cpu_us_per_wakeup", round3(cpu));
        }
        if let Some(wall) = self.wall_us {
            r = r.with("wall_us_per_wakeup", round3(wall));
        }
        r
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Runs `batch` (which performs `per_batch` wake-ups) [`BATCHES`] times and
/// returns the median CPU and wall time of one wake-up, µs.
fn measure(per_batch: u32, mut batch: impl FnMut()) -> (Option<f64>, Option<f64>) {
    let mut cpu = Vec::with_capacity(BATCHES);
    let mut wall = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let c0 = thread_cpu();
        let t0 = Instant::now();
        batch();
        wall.push(t0.elapsed().as_secs_f64() * 1e6 / f64::from(per_batch));
        if let (Some(a), Some(b)) = (c0, thread_cpu()) {
            cpu.push(b.saturating_sub(a).as_secs_f64() * 1e6 / f64::from(per_batch));
        }
    }
    let cpu = (cpu.len() == BATCHES)
        .then(|| stats::median(&cpu))
        .flatten();
    (cpu, stats::median(&wall))
}

/// Measures every primitive, `per_batch` wake-ups per batch (about
/// `per_batch × 5 × 8` ms in all).
pub fn run(per_batch: u32) -> Vec<WakeupFigure> {
    let per_batch = per_batch.max(1);
    let mut out = Vec::new();
    let mut push = |primitive, timed, (cpu_us, wall_us)| {
        out.push(WakeupFigure {
            primitive,
            cpu_us,
            wall_us,
            timed,
        })
    };

    push(
        "sleep_1ms",
        true,
        measure(per_batch, || sleeps(per_batch, 1)),
    );
    push(
        "sleep_4ms",
        true,
        measure(per_batch, || sleeps(per_batch, 4)),
    );
    push(
        "sleep_until_1ms_grid",
        true,
        measure(per_batch, || linux::sleep_on_grid(per_batch)),
    );
    push(
        "sleep_1ms_slack_1ns",
        true,
        measure(per_batch, || linux::sleep_with_least_slack(per_batch)),
    );
    push(
        "timerfd_periodic_1ms",
        true,
        measure(per_batch, || linux::timerfd_periodic(per_batch)),
    );
    let park = (0..BATCHES)
        .map(|_| WakeupCost::park_batch(per_batch).map(|d| d.as_secs_f64() * 1e6))
        .collect::<Option<Vec<f64>>>()
        .and_then(|v| stats::median(&v));
    // The park's wall time is the waker's millisecond sleep: not reported.
    push("park_woken_by_thread", false, (park, None));
    push(
        "yield",
        false,
        measure(per_batch * 100, || {
            for _ in 0..per_batch * 100 {
                std::thread::yield_now();
            }
        }),
    );
    out
}

/// `n` sleeps of `ms` milliseconds each (`thread::sleep`).
fn sleeps(n: u32, ms: u64) {
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// What one request carries of the wake-ups at `rate` requests/s, paced by
/// whole milliseconds: one timed wake-up (the cheapest measured) and one park
/// per millisecond, spread over the requests of that millisecond. `None`
/// when either cost is missing.
pub fn floor_us_per_request(figures: &[WakeupFigure], rate: f64) -> Option<f64> {
    let timed = figures
        .iter()
        .filter(|f| f.timed)
        .filter_map(|f| f.cpu_us)
        .min_by(f64::total_cmp)?;
    let park = figures
        .iter()
        .find(|f| f.primitive == "park_woken_by_thread")?
        .cpu_us?;
    // Wake-ups per second: one of each per millisecond, or one per request
    // when requests are rarer than that.
    let per_second = rate.clamp(0.0, 1000.0);
    (rate > 0.0).then(|| (timed + park) * per_second / rate)
}

#[cfg(target_os = "linux")]
mod linux {
    //! The Linux-only primitives. Each `unsafe` block is one libc call whose
    //! pointer arguments point at live locals of the right type.

    /// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` to each next whole
    /// millisecond of the monotonic clock, as a paced generator would.
    pub fn sleep_on_grid(n: u32) {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes one `timespec` through a pointer to a local.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_nsec -= ts.tv_nsec % 1_000_000;
        for _ in 0..n {
            ts.tv_nsec += 1_000_000;
            if ts.tv_nsec >= 1_000_000_000 {
                ts.tv_nsec -= 1_000_000_000;
                ts.tv_sec += 1;
            }
            // SAFETY: reads the local `timespec`; the remainder pointer may
            // be null for an absolute sleep.
            unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
        }
    }

    /// One-millisecond sleeps with the thread's timer slack at 1 ns (the
    /// default is 50 µs), restored afterwards.
    pub fn sleep_with_least_slack(n: u32) {
        // SAFETY: PR_GET_TIMERSLACK takes no pointer.
        let old = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        // SAFETY: PR_SET_TIMERSLACK takes its value by value.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        super::sleeps(n, 1);
        if old > 0 {
            // SAFETY: as above.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, old as libc::c_ulong, 0, 0, 0) };
        }
    }

    /// Blocking reads of a periodic 1 ms timerfd, which the kernel re-arms
    /// itself (so the thread never arms a timer).
    pub fn timerfd_periodic(n: u32) {
        // SAFETY: no pointer arguments.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
        if fd < 0 {
            return;
        }
        let ms = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        let spec = libc::itimerspec {
            it_interval: ms,
            it_value: ms,
        };
        // SAFETY: reads the local `itimerspec`; the old-value pointer may be
        // null.
        let armed = unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } == 0;
        let mut ticks = 0u64;
        while armed && ticks < u64::from(n) {
            let mut expirations = [0u8; 8];
            // SAFETY: reads at most 8 bytes into the local 8-byte buffer.
            let got = unsafe { libc::read(fd, expirations.as_mut_ptr().cast(), 8) };
            if got != 8 {
                break;
            }
            ticks += u64::from_ne_bytes(expirations);
        }
        // SAFETY: closes the descriptor this function opened.
        unsafe { libc::close(fd) };
    }
}

#[cfg(not(target_os = "linux"))]
mod linux {
    //! Elsewhere the Linux-only primitives fall back to plain sleeps.

    use super::sleeps;

    pub fn sleep_on_grid(n: u32) {
        sleeps(n, 1)
    }
    pub fn sleep_with_least_slack(n: u32) {
        sleeps(n, 1)
    }
    pub fn timerfd_periodic(n: u32) {
        sleeps(n, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(primitive: &'static str, timed: bool, cpu: f64) -> WakeupFigure {
        WakeupFigure {
            primitive,
            cpu_us: Some(cpu),
            wall_us: None,
            timed,
        }
    }

    #[test]
    fn floor_takes_the_cheapest_timed_wakeup_and_a_park_per_millisecond() {
        let figures = [
            figure("sleep_1ms", true, 35.0),
            figure("timerfd_periodic_1ms", true, 25.0),
            figure("park_woken_by_thread", false, 10.0),
            figure("yield", false, 0.5),
        ];
        // 10 requests a millisecond share 25 + 10 µs.
        assert_eq!(floor_us_per_request(&figures, 10_000.0), Some(3.5));
        // Below 1,000/s each request has its own wake-ups.
        assert_eq!(floor_us_per_request(&figures, 500.0), Some(35.0));
        assert_eq!(floor_us_per_request(&figures, 0.0), None);
        assert_eq!(floor_us_per_request(&figures[..2], 10_000.0), None);
    }

    #[test]
    fn every_primitive_is_measured() {
        let figures = run(2);
        let names: Vec<_> = figures.iter().map(|f| f.primitive).collect();
        assert_eq!(
            names,
            [
                "sleep_1ms",
                "sleep_4ms",
                "sleep_until_1ms_grid",
                "sleep_1ms_slack_1ns",
                "timerfd_periodic_1ms",
                "park_woken_by_thread",
                "yield"
            ]
        );
        for f in &figures {
            let record = f.to_record().to_json();
            assert!(record.contains("\"workload\":\"wakeups\""), "{record}");
            if cfg!(target_os = "linux") {
                assert!(f.cpu_us.is_some_and(|c| c >= 0.0), "{f:?}");
            }
        }
        // A sleep of 1 ms takes at least 1 ms.
        assert!(figures[0].wall_us.is_some_and(|w| w >= 1000.0));
    }
}
