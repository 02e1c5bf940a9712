//! The criterion settings every micro-benchmark here shares: 20 samples of
//! 2 s after a 0.5 s warm-up, so that each bench file runs in about a
//! minute. Each bench file is its own crate and includes this module.

use criterion::Criterion;
use std::time::Duration;

/// Criterion configured for quick runs.
pub fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}
