//! The `fetch` command line: the scripted scenario's parameters.

use clap::Parser;

use crate::cli::{count_in, int_in, UsageError};

/// `max_bytes` of the script's fetches: `min_bytes` cannot exceed it.
pub const FETCH_MAX_BYTES: u64 = 1 << 20;

/// The most appends the script may make while a fetch waits (`max_wait`
/// divided by the append interval): more would print a wall of lines.
pub const MAX_APPENDS_PER_WAIT: u64 = 1_000;

/// A long-poll fetch waiting in the fetch purgatory for `min_bytes`: a
/// scripted timeline on a manual clock.
#[derive(Debug, Parser)]
#[command(name = "fetch", allow_negative_numbers = true)]
pub struct FetchArgs {
    /// The fetches' min_bytes, 1 to 1,048,576 (their max_bytes).
    #[arg(long, default_value = "1000", value_parser = int_in::<1, FETCH_MAX_BYTES>)]
    pub min_bytes: u64,
    /// The fetches' max_wait, 1 to 60,000 ms.
    #[arg(long, default_value = "500", value_parser = int_in::<1, 60_000>)]
    pub max_wait_ms: u64,
    /// Time between two appends of the producer, 1 to 60,000 ms.
    #[arg(long, default_value = "100", value_parser = int_in::<1, 60_000>)]
    pub append_interval_ms: u64,
    /// Records per append, 1 to 10,000.
    #[arg(long, default_value = "3", value_parser = count_in::<1, 10_000>)]
    pub records_per_append: usize,
    /// Size of each record, 1 to 1,048,576 bytes.
    #[arg(long, default_value = "100", value_parser = int_in::<1, FETCH_MAX_BYTES>)]
    pub record_bytes: u64,
}

impl FetchArgs {
    /// Checks across flags: a bounded number of appends per wait, and a
    /// first fetch that an append completes before its `max_wait` (the
    /// story of the script's first phase; its second shows `max_wait`
    /// passing first).
    pub fn check(&self) -> Result<(), UsageError> {
        let appends = self.max_wait_ms / self.append_interval_ms;
        if appends > MAX_APPENDS_PER_WAIT {
            return Err(UsageError(format!(
                "--max-wait-ms / --append-interval-ms ({} / {} = {appends} appends per wait) \
                 must be at most {MAX_APPENDS_PER_WAIT}",
                self.max_wait_ms, self.append_interval_ms
            )));
        }
        let completing = self.appends_to_min_bytes();
        let at = completing.saturating_mul(self.append_interval_ms);
        if at >= self.max_wait_ms {
            return Err(UsageError(format!(
                "--append-interval-ms × the appends that reach --min-bytes ({} × {completing} = {at} ms, \
                 at {} bytes per append of --records-per-append × --record-bytes) must be less than \
                 --max-wait-ms ({}), so that an append completes the first fetch before max_wait",
                self.append_interval_ms,
                self.bytes_per_append(),
                self.max_wait_ms
            )));
        }
        Ok(())
    }

    /// How many appends bring a fetch from an empty log to `min_bytes`.
    pub fn appends_to_min_bytes(&self) -> u64 {
        self.min_bytes.div_ceil(self.bytes_per_append())
    }

    /// Bytes one append writes.
    pub fn bytes_per_append(&self) -> u64 {
        self.records_per_append as u64 * self.record_bytes
    }

    /// The record size as the log stores it.
    pub fn record_bytes_u32(&self) -> u32 {
        u32::try_from(self.record_bytes).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<FetchArgs, String> {
        FetchArgs::try_parse_from(std::iter::once("fetch").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_todays_script() {
        let a = parse(&[]).unwrap();
        assert_eq!(
            (
                a.min_bytes,
                a.max_wait_ms,
                a.append_interval_ms,
                a.records_per_append,
                a.record_bytes
            ),
            (1000, 500, 100, 3, 100)
        );
        assert_eq!(a.check(), Ok(()));
    }

    #[test]
    fn bad_values_name_their_flag_and_range() {
        let cases: &[(&[&str], &str)] = &[
            (&["--min-bytes", "0"], "'--min-bytes <MIN_BYTES>': must be a whole number from 1 to 1048576"),
            (&["--min-bytes", "2000000"], "from 1 to 1048576"),
            (&["--max-wait-ms", "0"], "'--max-wait-ms <MAX_WAIT_MS>': must be a whole number from 1 to 60000"),
            (&["--append-interval-ms", "-100"], "'--append-interval-ms <APPEND_INTERVAL_MS>': must be a whole number from 1"),
            (&["--records-per-append", "0"], "'--records-per-append <RECORDS_PER_APPEND>': must be a whole number from 1 to 10000"),
            (&["--record-bytes", "0"], "'--record-bytes <RECORD_BYTES>': must be a whole number from 1 to 1048576"),
        ];
        for (args, expected) in cases {
            let err = parse(args).unwrap_err();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
        let err = parse(&["--max-wait-ms", "60000", "--append-interval-ms", "1"])
            .unwrap()
            .check()
            .unwrap_err();
        assert!(err.to_string().contains("--max-wait-ms / --append-interval-ms (60000 / 1 = 60000 appends per wait) must be at most 1000"), "{err}");
    }

    #[test]
    fn the_first_fetch_must_complete_by_an_append_before_max_wait() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--append-interval-ms", "60000", "--max-wait-ms", "1"],
                "--append-interval-ms × the appends that reach --min-bytes (60000 × 4 = 240000 ms, \
                 at 300 bytes per append of --records-per-append × --record-bytes) must be less than \
                 --max-wait-ms (1)",
            ),
            // One append reaches min_bytes, but only as max_wait passes.
            (
                &["--min-bytes", "300", "--append-interval-ms", "500", "--max-wait-ms", "500"],
                "(500 × 1 = 500 ms, at 300 bytes per append",
            ),
            (&["--min-bytes", "1000", "--max-wait-ms", "400"], "(100 × 4 = 400 ms"),
        ];
        for (args, expected) in cases {
            let err = parse(args).unwrap().check().unwrap_err().to_string();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
        for ok in [
            &["--min-bytes", "1000", "--max-wait-ms", "401"][..],
            &["--min-bytes", "5000", "--max-wait-ms", "2000"],
            &[
                "--min-bytes",
                "1",
                "--append-interval-ms",
                "1",
                "--max-wait-ms",
                "2",
            ],
        ] {
            assert_eq!(parse(ok).unwrap().check(), Ok(()), "{ok:?}");
        }
    }
}
