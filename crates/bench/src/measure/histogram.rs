//! Lateness of many expiries, kept as a histogram (a few MB whatever the
//! count), for workloads whose operations carry no index of their own.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Width of one bucket, µs.
const BUCKET_US: i64 = 100;
/// Buckets: lateness from 0 up to 60 s; later ones land in the last.
const BUCKETS: usize = 600_001;

/// Lateness (run time minus deadline) of expiries, at 0.1 ms resolution,
/// with the exact minimum and maximum and a count of early ones.
#[derive(Debug)]
pub struct LatenessHistogram {
    buckets: Box<[AtomicU32]>,
    count: AtomicU64,
    early: AtomicU64,
    min_ns: AtomicI64,
    max_ns: AtomicI64,
}

impl Default for LatenessHistogram {
    fn default() -> Self {
        LatenessHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            count: AtomicU64::new(0),
            early: AtomicU64::new(0),
            min_ns: AtomicI64::new(i64::MAX),
            max_ns: AtomicI64::new(i64::MIN),
        }
    }
}

impl LatenessHistogram {
    /// Records one expiry `late_ns` after its deadline (negative: early).
    pub fn record(&self, late_ns: i64) {
        if late_ns < 0 {
            self.early.fetch_add(1, Ordering::Relaxed);
        }
        let bucket = (late_ns.max(0) / 1000 / BUCKET_US).min(BUCKETS as i64 - 1) as usize;
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.min_ns.fetch_min(late_ns, Ordering::Relaxed);
        self.max_ns.fetch_max(late_ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Expiries recorded.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Expiries before their deadline.
    pub fn early(&self) -> u64 {
        self.early.load(Ordering::Relaxed)
    }

    /// The earliest lateness, ms (`None` when empty).
    pub fn min_ms(&self) -> Option<f64> {
        (self.count() > 0).then(|| self.min_ns.load(Ordering::Relaxed) as f64 / 1e6)
    }

    /// The largest lateness, ms (`None` when empty).
    pub fn max_ms(&self) -> Option<f64> {
        (self.count() > 0).then(|| self.max_ns.load(Ordering::Relaxed) as f64 / 1e6)
    }

    /// The `p`-th percentile by nearest rank, ms: the upper edge of its
    /// bucket, capped by the maximum (`None` when empty).
    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((p / 100.0) * n as f64).ceil().clamp(1.0, n as f64) as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += u64::from(b.load(Ordering::Relaxed));
            if seen >= rank {
                if i == BUCKETS - 1 {
                    return self.max_ms();
                }
                let edge = ((i as i64 + 1) * BUCKET_US) as f64 / 1e3;
                return Some(edge.min(self.max_ms()?));
            }
        }
        self.max_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_min_max_and_early() {
        let h = LatenessHistogram::default();
        assert_eq!(h.percentile_ms(99.0), None);
        for us in 1..=1000i64 {
            h.record(us * 1000);
        }
        h.record(-5_000);
        assert_eq!(h.count(), 1001);
        assert_eq!(h.early(), 1);
        assert_eq!(h.min_ms(), Some(-0.005));
        assert_eq!(h.max_ms(), Some(1.0));
        let p50 = h.percentile_ms(50.0).unwrap();
        assert!((0.4..=0.6).contains(&p50), "{p50}");
        assert_eq!(h.percentile_ms(100.0), Some(1.0));
        h.record(3_600_000_000_000);
        assert_eq!(h.percentile_ms(100.0), Some(3_600_000.0));
    }
}
