//! The seeded pseudo-random generator every workload draws from.
//!
//! SplitMix64 (Steele, Lea and Flood, 2014; the seeding generator of the
//! xoshiro family): a 64-bit counter advanced by the golden-ratio constant and
//! passed through a finaliser. It is tiny, fast, has no dependencies, and is
//! what the reference measurements used, so W1's delays here are the very
//! delays the reference figures were measured with.
//!
//! Delays are drawn as `1 + x % max_ms`, uniform in `[1, max_ms]` up to a
//! modulo bias below 2^-47 for the workloads' ranges (negligible).

/// The SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A delay in whole milliseconds, uniform in `[1, max_ms]`
    /// (`1 + x % max_ms`). `max_ms` must be at least 1.
    pub fn delay_ms(&mut self, max_ms: u64) -> u64 {
        1 + self.next_u64() % max_ms.max(1)
    }
}

/// `n` delays in `[1, max_ms]` from a generator seeded with `seed`: task `i`
/// gets the `i`-th draw.
pub fn delays_ms(seed: u64, n: usize, max_ms: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.delay_ms(max_ms)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_splitmix64_sequence() {
        // First outputs for seed 1234567, as printed by the reference C code
        // (xoshiro's splitmix64.c).
        let mut rng = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }

    #[test]
    fn delays_are_deterministic_and_in_range() {
        let a = delays_ms(42, 10_000, 60_000);
        let b = delays_ms(42, 10_000, 60_000);
        assert_eq!(a, b);
        assert_ne!(a, delays_ms(43, 10_000, 60_000));
        assert!(a.iter().all(|&d| (1..=60_000).contains(&d)));
        // Small range: every value shows up.
        let small = delays_ms(7, 1000, 3);
        for v in 1..=3 {
            assert!(small.contains(&v));
        }
    }
}
