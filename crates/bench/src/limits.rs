//! What the runner accepts: the range of every count, rate, size and time
//! on its command line, and the parsers that refuse anything outside them
//! with a message naming the range (clap adds the flag's name and exits
//! with code 2 before anything runs).
//!
//! The upper bounds are where a run stops being meaningful on the machines
//! the runner is for (two cores, a few tens of GB): more tasks than fit in
//! memory with every implementation's per-task cost, rates no generator
//! can approach, delays that make a run last for hours.

/// Most tasks, requests or operations in one run.
pub const MAX_COUNT: u64 = 100_000_000;
/// Most pending operations in W4 (each implementation holds them all at
/// once, up to 640 bytes each for the tokio peer, in each of its phases).
pub const MAX_PENDING: u64 = 20_000_000;
/// Most rounds.
pub const MAX_ROUNDS: u64 = 1_000;
/// Longest delay, timeout or latency, ms (one hour).
pub const MAX_DELAY_MS: u64 = 3_600_000;
/// Longest a W2 run may take to issue its requests, s (one hour): its
/// `--num` over its `--rate`.
pub const MAX_ISSUE_S: f64 = 3_600.0;
/// Lowest target rate, requests per second.
pub const MIN_RATE: f64 = 1.0;
/// Highest target rate, requests per second (beyond any generator's reach;
/// the standard run's target of 3,000,000/s already measures saturation).
pub const MAX_RATE: f64 = 100_000_000.0;
/// Most keys one W2 request watches.
pub const MAX_KEYS_PER_REQUEST: u64 = 10_000;
/// Largest key space.
pub const MAX_KEY_SPACE: u64 = 1_000_000_000;
/// Most producer threads.
pub const MAX_PRODUCERS: u64 = 64;
/// Largest pace between timed sleeps, ms.
pub const MAX_PACE_MS: u64 = 1_000;
/// Most wake-ups per batch (`wakeups` takes about 40 ms per unit).
pub const MAX_PER_BATCH: u64 = 10_000;

/// A whole number in `[lo, hi]`.
///
/// # Errors
/// A message naming the range.
pub fn whole(s: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let range = format!("must be a whole number from {lo} to {hi}");
    let v: i128 = s
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{range}, got {s:?}"))?;
    if v < i128::from(lo) || v > i128::from(hi) {
        return Err(format!("{range}, got {v}"));
    }
    Ok(v as u64)
}

/// A number in `[lo, hi]`.
///
/// # Errors
/// A message naming the range.
pub fn number(s: &str, lo: f64, hi: f64, unit: &str) -> Result<f64, String> {
    let range = format!("must be a number from {lo} to {hi}{unit}");
    let v: f64 = s
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{range}, got {s:?}"))?;
    if !(v.is_finite() && (lo..=hi).contains(&v)) {
        return Err(format!("{range}, got {s}"));
    }
    Ok(v)
}

/// A PRNG seed: any `u64`.
pub fn seed(s: &str) -> Result<u64, String> {
    whole(s, 0, u64::MAX)
}

/// Tasks or requests: 1 to [`MAX_COUNT`].
pub fn count(s: &str) -> Result<usize, String> {
    whole(s, 1, MAX_COUNT).map(|v| v as usize)
}

/// W4's pending operations: 1 to [`MAX_PENDING`].
pub fn pending(s: &str) -> Result<usize, String> {
    whole(s, 1, MAX_PENDING).map(|v| v as usize)
}

/// W4's key count: 0 (every operation its own key) to [`MAX_PENDING`].
pub fn w4_keys(s: &str) -> Result<usize, String> {
    whole(s, 0, MAX_PENDING).map(|v| v as usize)
}

/// Rounds: 1 to [`MAX_ROUNDS`].
pub fn rounds(s: &str) -> Result<usize, String> {
    whole(s, 1, MAX_ROUNDS).map(|v| v as usize)
}

/// A delay or timeout in whole ms: 1 to [`MAX_DELAY_MS`].
pub fn delay_ms(s: &str) -> Result<u64, String> {
    whole(s, 1, MAX_DELAY_MS)
}

/// A latency percentile in ms: 1 to [`MAX_DELAY_MS`] (fractions allowed
/// above a whole millisecond).
pub fn latency_ms(s: &str) -> Result<f64, String> {
    number(s, 1.0, MAX_DELAY_MS as f64, " ms")
}

/// A target rate: [`MIN_RATE`] to [`MAX_RATE`] per second.
pub fn rate(s: &str) -> Result<f64, String> {
    number(s, MIN_RATE, MAX_RATE, " per second")
}

/// Keys per W2 request: 1 to [`MAX_KEYS_PER_REQUEST`].
pub fn keys_per_request(s: &str) -> Result<usize, String> {
    whole(s, 1, MAX_KEYS_PER_REQUEST).map(|v| v as usize)
}

/// Keys per W4 operation: 1 to [`MAX_KEYS_PER_REQUEST`].
pub fn w4_keys_per_op(s: &str) -> Result<usize, String> {
    whole(s, 1, MAX_KEYS_PER_REQUEST).map(|v| v as usize)
}

/// A key space: 1 to [`MAX_KEY_SPACE`].
pub fn key_space(s: &str) -> Result<u64, String> {
    whole(s, 1, MAX_KEY_SPACE)
}

/// Producer threads: 1 to [`MAX_PRODUCERS`].
pub fn producers(s: &str) -> Result<usize, String> {
    whole(s, 1, MAX_PRODUCERS).map(|v| v as usize)
}

/// The pace of timed sleeps, ms: 1 to [`MAX_PACE_MS`].
pub fn pace_ms(s: &str) -> Result<u64, String> {
    whole(s, 1, MAX_PACE_MS)
}

/// Wake-ups per batch: 1 to [`MAX_PER_BATCH`].
pub fn per_batch(s: &str) -> Result<u32, String> {
    whole(s, 1, MAX_PER_BATCH).map(|v| v as u32)
}

/// `items` joined with commas, or, past `keep` items, the first `keep`, an
/// ellipsis and the count (for headers: a list as long as the run is large
/// must not become the header).
pub fn abbreviate(items: &[String], keep: usize) -> String {
    if items.len() <= keep {
        return items.join(",");
    }
    format!("{},… ({} in all)", items[..keep].join(","), items.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_in_range_only() {
        assert_eq!(whole("5", 1, 10), Ok(5));
        assert_eq!(whole("1_000", 1, 10_000), Ok(1000));
        assert_eq!(
            whole("0", 1, 10).unwrap_err(),
            "must be a whole number from 1 to 10, got 0"
        );
        assert!(whole("-5", 1, 10).unwrap_err().contains("got -5"));
        assert!(whole("99999999999999999999999", 1, 10).is_err());
        assert!(whole("2.5", 1, 10).unwrap_err().contains("got \"2.5\""));
        assert_eq!(w4_keys("0"), Ok(0));
    }

    #[test]
    fn numbers_in_range_only() {
        assert_eq!(rate("10000"), Ok(10_000.0));
        assert!(rate("-5")
            .unwrap_err()
            .contains("from 1 to 100000000 per second"));
        assert!(rate("inf").is_err() && rate("NaN").is_err());
        assert!(rate("18446744073709551615").is_err());
        assert!(latency_ms("0.5").unwrap_err().contains("from 1 to"));
    }

    #[test]
    fn long_lists_are_abbreviated() {
        let v: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
        assert_eq!(abbreviate(&v[..3], 8), "k0,k1,k2");
        assert_eq!(abbreviate(&v, 2), "k0,k1,… (1000 in all)");
    }
}
