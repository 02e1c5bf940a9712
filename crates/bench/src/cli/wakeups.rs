//! `purgatory-bench wakeups`.

use super::args::WakeupsArgs;
use crate::{report, wakeups};

/// Measures and prints the wake-up costs (`wakeups`).
pub(crate) fn run(a: &WakeupsArgs) -> Result<(), String> {
    if !(a.rate.is_finite() && a.rate > 0.0) {
        return Err(format!("--rate must be a positive number, not {}", a.rate));
    }
    if a.per_batch == 0 {
        return Err("--per-batch must be at least 1".into());
    }
    crate::progress::Progress::new("wakeups").phase("measure every primitive", 0);
    let figures = wakeups::run(a.per_batch);
    let floor = wakeups::floor_us_per_request(&figures, a.rate);
    let us = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    if a.json {
        for f in &figures {
            outln!("{}", f.to_record().to_json());
        }
        let mut r = report::Record::new()
            .with("workload", "wakeups_floor")
            .with("rate", a.rate);
        if let Some(floor) = floor {
            r = r.with("floor_us_per_request", (floor * 1000.0).round() / 1000.0);
        }
        outln!("{}", r.to_json());
    } else {
        outln!(
            "CPU charged per wake-up ({} per batch, median of 5 batches)",
            a.per_batch
        );
        outln!(
            "{:<24} {:>6} {:>10} {:>10}",
            "primitive",
            "timed",
            "cpu µs",
            "wall µs"
        );
        for f in &figures {
            outln!(
                "{:<24} {:>6} {:>10} {:>10}",
                f.primitive,
                if f.timed { "yes" } else { "no" },
                us(f.cpu_us),
                us(f.wall_us)
            );
        }
        outln!(
            "floor at {} requests/s issued at whole milliseconds (cheapest timed wake-up + one park per ms): {} µs/request",
            a.rate,
            us(floor)
        );
    }
    Ok(())
}
