//! W2's parameters: one run, one request count at one rate.

use super::hasher::W2Hasher;
use crate::limits;

/// W2's parameters (one run: one request count at one rate).
#[derive(Debug, Clone, PartialEq)]
pub struct W2Params {
    /// Number of requests.
    pub num: usize,
    /// Target arrival rate, requests per second.
    pub rate: f64,
    /// Request timeout, ms.
    pub timeout_ms: u64,
    /// Median latency, ms.
    pub pct50: f64,
    /// 75th-percentile latency, ms.
    pub pct75: f64,
    /// Keys per request (all requests watch the same ones).
    pub keys: usize,
    /// Size of the key space the keys are drawn from.
    pub key_space_size: u64,
    /// PRNG seed.
    pub seed: u64,
    /// Smallest interval between two timed sleeps of the run's clock
    /// thread, ms (see [`CompletionQueue`](super::completion_queue::CompletionQueue)). 1, the default, is Kafka's
    /// millisecond clock: requests are issued and completed in their own
    /// millisecond. A larger value lets requests be issued and completed up
    /// to that many milliseconds late, trading timeliness for fewer
    /// wake-ups.
    pub pace_ms: u64,
    /// The purgatory's key hasher.
    pub hasher: W2Hasher,
}

impl Default for W2Params {
    /// Kafka's tool's defaults and the reported parameters: 1,000,000
    /// requests at a target of 3,000,000/s (`BENCHMARKS.md`: saturation;
    /// a target of 1,000,000/s would cap the rate there), timeout 1000 ms,
    /// latency pct50 50 ms and pct75 75 ms, 3 keys out of 100, seed 42.
    fn default() -> Self {
        W2Params {
            num: 1_000_000,
            rate: 3_000_000.0,
            timeout_ms: 1000,
            pct50: 50.0,
            pct75: 75.0,
            keys: 3,
            key_space_size: 100,
            seed: 42,
            pace_ms: 1,
            hasher: W2Hasher::Std,
        }
    }
}

impl W2Params {
    /// The two standard runs of `BENCHMARKS.md`: 1,000,000 requests at a
    /// target of 3,000,000/s (saturation) and 100,000 at 10,000/s, with
    /// `self`'s other parameters.
    pub fn standard_runs(&self) -> [W2Params; 2] {
        [
            W2Params {
                num: 1_000_000,
                rate: 3_000_000.0,
                ..self.clone()
            },
            W2Params {
                num: 100_000,
                rate: 10_000.0,
                ..self.clone()
            },
        ]
    }

    /// Checks that the parameters make sense.
    ///
    /// # Errors
    /// A message naming the offending parameter.
    pub fn validate(&self) -> Result<(), String> {
        let whole = |flag: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{flag} must be a whole number from {lo} to {hi}, got {v}"
                ))
            }
        };
        let number = |flag: &str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{flag} must be a number from {lo} to {hi}, got {v}"
                ))
            }
        };
        whole("--num", self.num as u64, 1, limits::MAX_COUNT)?;
        number("--rate", self.rate, limits::MIN_RATE, limits::MAX_RATE)?;
        let issue_s = self.num as f64 / self.rate;
        if issue_s > limits::MAX_ISSUE_S {
            return Err(format!(
                "--num over --rate must be at most {} s of issuing, got {} requests at {}/s: {issue_s:.0} s",
                limits::MAX_ISSUE_S,
                self.num,
                self.rate
            ));
        }
        whole("--timeout", self.timeout_ms, 1, limits::MAX_DELAY_MS)?;
        let max_ms = limits::MAX_DELAY_MS as f64;
        number("--pct50", self.pct50, 1.0, max_ms)?;
        number("--pct75", self.pct75, 1.0, max_ms)?;
        if self.pct75 < self.pct50 {
            return Err(format!(
                "--pct75 must be from --pct50 ({}) to {max_ms}, got {}",
                self.pct50, self.pct75
            ));
        }
        whole("--keys", self.keys as u64, 1, limits::MAX_KEYS_PER_REQUEST)?;
        whole(
            "--key-space-size",
            self.key_space_size,
            1,
            limits::MAX_KEY_SPACE,
        )?;
        whole("--pace-ms", self.pace_ms, 1, limits::MAX_PACE_MS)?;
        Ok(())
    }
}
