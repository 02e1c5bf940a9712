//! The samples a W2 run draws before it starts: the keys every request
//! watches, the arrival gaps and the latencies (Kafka's samplers).

use crate::rng::SplitMix64;

/// The 75th percentile of the standard normal distribution.
pub const Z75: f64 = 0.674_490;

/// Salts that split the seed into independent streams, so that the keys do
/// not depend on the number of requests and the latencies do not depend on
/// the intervals.
const KEY_STREAM: u64 = 0x6b65_7973_0000_0001;
const INTERVAL_STREAM: u64 = 0x6761_7073_0000_0002;
const LATENCY_STREAM: u64 = 0x6c61_7473_0000_0003;

/// A uniform draw in `[0, 1)` with 53 random bits.
fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The keys every request watches: `keys` names `"fakeKey<r>"`, `r` drawn
/// uniformly from `[0, key_space_size)`, duplicates allowed (Kafka's
/// `rand.nextInt(keySpaceSize)`).
pub fn choose_keys(seed: u64, keys: usize, key_space_size: u64) -> Vec<String> {
    let mut rng = SplitMix64::new(seed ^ KEY_STREAM);
    (0..keys)
        .map(|_| format!("fakeKey{}", rng.next_u64() % key_space_size.max(1)))
        .collect()
}

/// Kafka's latency distribution: log-normal with the given median and 75th
/// percentile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogNormal {
    /// `ln(pct50)`.
    pub mu: f64,
    /// `(ln(pct75) − mu) / 0.674490`.
    pub sigma: f64,
}

impl LogNormal {
    /// The distribution whose median is `pct50` and 75th percentile `pct75`
    /// (both in ms, positive).
    pub fn new(pct50: f64, pct75: f64) -> Self {
        let mu = pct50.ln();
        LogNormal {
            mu,
            sigma: (pct75.ln() - mu) / Z75,
        }
    }

    /// The latency for a standard-normal draw `z`: `exp(z·sigma + mu)`,
    /// truncated to whole ms (and to `u32`).
    pub fn at(&self, z: f64) -> u32 {
        let x = (z * self.sigma + self.mu).exp();
        // `as` saturates: NaN → 0, +∞ → u32::MAX.
        x as u32
    }
}

/// `n` latencies in whole ms from `dist`, seeded with `seed` (standard-normal
/// draws by Box–Muller, both halves of each pair used).
pub fn latencies_ms(seed: u64, n: usize, dist: LogNormal) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed ^ LATENCY_STREAM);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        // u1 in (0, 1] so that ln(u1) is finite.
        let u1 = 1.0 - uniform(&mut rng);
        let u2 = uniform(&mut rng);
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
        out.push(dist.at(r * c));
        if out.len() < n {
            out.push(dist.at(r * s));
        }
    }
    out
}

/// `n` inter-arrival gaps in whole ms for `rate` requests per second,
/// seeded with `seed`: Kafka's `IntervalSamples`, exponential with
/// `lambda = rate / 1000` per ms, `x = −ln(1 − U) / lambda + residue`, the
/// gap is `floor(x)` and `x − floor(x)` is carried to the next draw. The
/// gaps thus sum to within 1 ms of the exponential draws' sum.
pub fn intervals_ms(seed: u64, n: usize, rate: f64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed ^ INTERVAL_STREAM);
    let lambda = rate / 1000.0;
    let mut residue = 0.0;
    (0..n)
        .map(|_| {
            let x = -(1.0 - uniform(&mut rng)).ln() / lambda + residue;
            let whole = x.floor();
            residue = x - whole;
            whole as u32
        })
        .collect()
}

/// Summary of pre-drawn samples (Kafka's tool prints the same).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleSummary {
    /// Median latency sample, ms (nearest rank).
    pub latency_p50: u32,
    /// 75th-percentile latency sample, ms (nearest rank).
    pub latency_p75: u32,
    /// `1000 / mean gap`: the arrival rate the gaps amount to, per second.
    pub rate: f64,
}

impl SampleSummary {
    /// Summarises `latencies` and `intervals` (copies the latencies to find
    /// their percentiles).
    pub fn of(latencies: &[u32], intervals: &[u32]) -> Self {
        let mut l = latencies.to_vec();
        let mut pick = |p: f64| -> u32 {
            if l.is_empty() {
                return 0;
            }
            let rank = ((p / 100.0) * l.len() as f64).ceil() as usize;
            let i = rank.clamp(1, l.len()) - 1;
            *l.select_nth_unstable(i).1
        };
        let (latency_p50, latency_p75) = (pick(50.0), pick(75.0));
        let total: u64 = intervals.iter().map(|&g| u64::from(g)).sum();
        SampleSummary {
            latency_p50,
            latency_p75,
            rate: if total == 0 {
                f64::INFINITY
            } else {
                intervals.len() as f64 * 1000.0 / total as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;

    #[test]
    fn log_normal_hits_its_percentiles() {
        let n = 200_000;
        let mut l = latencies_ms(42, n, LogNormal::new(50.0, 75.0));
        assert_eq!(l.len(), n);
        l.sort_unstable();
        let p50 = stats::percentile(&l, 50.0).unwrap();
        let p75 = stats::percentile(&l, 75.0).unwrap();
        // Truncation to whole ms puts the continuous 50 and 75 at 49|50 and
        // 74|75; the sampling error on 200k draws is well below 1 ms.
        assert!((49..=50).contains(&p50), "p50 = {p50}");
        assert!((74..=75).contains(&p75), "p75 = {p75}");
        // sigma = ln(1.5) / 0.67449.
        let d = LogNormal::new(50.0, 75.0);
        assert!((d.sigma - 0.601_13).abs() < 1e-4, "{d:?}");
        assert!((49..=50).contains(&d.at(0.0)));
        // exp(ln 50), exp(ln 75) may land a hair either side in floating point.
        assert!((74..=75).contains(&d.at(Z75)));
        assert!(d.at(-1.0) < 50 && d.at(1.0) > 75);
        assert_eq!(latencies_ms(42, 1000, d), latencies_ms(42, 1000, d));
        assert_eq!(
            latencies_ms(42, 999, d)[..],
            latencies_ms(42, 1000, d)[..999]
        );
    }

    #[test]
    fn exponential_gaps_have_the_right_mean() {
        for (rate, n) in [(1000.0, 200_000), (100.0, 100_000), (1_000_000.0, 100_000)] {
            let g = intervals_ms(7, n, rate);
            let total: u64 = g.iter().map(|&x| u64::from(x)).sum();
            let mean = total as f64 / n as f64;
            let expected = 1000.0 / rate;
            // Mean of n exponentials: relative s.d. 1/sqrt(n) (≤ 0.32 %);
            // the carried residue adds at most 1 ms in all.
            assert!(
                (mean - expected).abs() <= 0.02 * expected + 1.0 / n as f64,
                "rate {rate}: mean gap {mean} ms, expected {expected}"
            );
            let s = SampleSummary::of(&[1, 2, 3], &g);
            assert!((s.rate - rate).abs() <= 0.02 * rate, "{s:?}");
        }
        // At 100/s the gaps vary (exponential, not constant): some are
        // shorter than a third of the mean, some longer than twice it.
        let g = intervals_ms(7, 10_000, 100.0);
        assert!(g.iter().any(|&x| x < 3) && g.iter().any(|&x| x > 20));
        assert_eq!(g, intervals_ms(7, 10_000, 100.0));
        assert_ne!(g, intervals_ms(8, 10_000, 100.0));
    }

    #[test]
    fn keys_are_chosen_once_and_deterministically() {
        let a = choose_keys(42, 3, 100);
        assert_eq!(a, choose_keys(42, 3, 100));
        assert_eq!(a.len(), 3);
        for k in &a {
            let r: u64 = k.strip_prefix("fakeKey").unwrap().parse().unwrap();
            assert!(r < 100, "{k}");
        }
        // The keys do not depend on anything but the seed and the space.
        let others: Vec<_> = (0..20).map(|s| choose_keys(s, 3, 100)).collect();
        assert!(others.iter().any(|o| *o != a));
        // A key space of one: all duplicates.
        assert_eq!(choose_keys(1, 3, 1), ["fakeKey0"; 3]);
        // Over many draws every key of a small space shows up.
        let many = choose_keys(5, 1000, 10);
        for r in 0..10 {
            assert!(many.contains(&format!("fakeKey{r}")));
        }
    }
}
