//! W2's parameters: one run, one request count at one rate.

use super::hasher::W2Hasher;

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
    /// requests at 1,000,000/s, timeout 1000 ms, latency pct50 50 ms and
    /// pct75 75 ms, 3 keys out of 100, seed 42.
    fn default() -> Self {
        W2Params {
            num: 1_000_000,
            rate: 1_000_000.0,
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
    /// The two standard runs of `BENCHMARKS.md`: 1,000,000 requests at
    /// 1,000,000/s (saturation) and 100,000 at 10,000/s, with `self`'s other
    /// parameters.
    pub fn standard_runs(&self) -> [W2Params; 2] {
        [
            W2Params {
                num: 1_000_000,
                rate: 1_000_000.0,
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
        if self.num == 0 {
            return Err("--num must be at least 1".into());
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(format!("--rate must be positive, got {}", self.rate));
        }
        if !(self.pct50.is_finite() && self.pct50 > 0.0) {
            return Err(format!("--pct50 must be positive, got {}", self.pct50));
        }
        if !(self.pct75.is_finite() && self.pct75 >= self.pct50) {
            return Err(format!(
                "--pct75 must be at least --pct50 ({}), got {}",
                self.pct50, self.pct75
            ));
        }
        if self.keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        if self.key_space_size == 0 {
            return Err("--key-space-size must be at least 1".into());
        }
        if self.pace_ms == 0 {
            return Err("--pace-ms must be at least 1".into());
        }
        Ok(())
    }
}
