//! W1's parameters.

/// W1's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct W1Params {
    /// Number of tasks.
    pub n: usize,
    /// PRNG seed.
    pub seed: u64,
    /// Largest delay, in ms (delays are uniform in `[1, max_delay_ms]`).
    pub max_delay_ms: u64,
}

impl Default for W1Params {
    /// The reported defaults: 1,000,000 tasks, seed 42, delays up to 60 s.
    fn default() -> Self {
        W1Params {
            n: 1_000_000,
            seed: 42,
            max_delay_ms: 60_000,
        }
    }
}

impl W1Params {
    /// The virtual time the expire phase advances to.
    pub fn horizon_ms(&self) -> u64 {
        self.max_delay_ms + 1
    }

    /// Tasks that must fire: the odd indices.
    pub fn expected_fired(&self) -> usize {
        self.n / 2
    }
}
