//! Percentiles and medians.
//!
//! Percentiles use the nearest-rank method: the `p`-th percentile of `n`
//! sorted values is the value at rank `ceil(p/100 · n)` (1-based), so it is
//! always one of the observed values and p100 is the maximum.

/// The `p`-th percentile (0 < p ≤ 100) of `sorted` (ascending), by nearest
/// rank; `None` for an empty slice.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// The median of `values` (the mean of the two middle values for an even
/// count); `None` when empty. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.1), Some(1));
        let w = [10, 20, 30, 40, 50];
        assert_eq!(percentile(&w, 50.0), Some(30));
        assert_eq!(percentile(&w, 99.0), Some(50));
        assert_eq!(percentile(&w, 20.0), Some(10));
        assert_eq!(percentile(&w, 21.0), Some(20));
        assert_eq!(percentile::<u32>(&[], 50.0), None);
        assert_eq!(percentile(&[7], 1.0), Some(7));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }
}
