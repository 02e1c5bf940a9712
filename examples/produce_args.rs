//! The `produce` command line: the scripted scenario's parameters.

use clap::Parser;

use crate::cli::{count_in, int_in, UsageError};

/// The most bytes a follower fetch in the script reads at once: one
/// produce's records must fit, or the followers never catch up.
pub const FOLLOWER_FETCH_MAX_BYTES: u64 = 1 << 20;

/// When the script's followers have fetched produce #1's records: the
/// timeout must come later, so that two partitions complete before it.
pub const LAST_FOLLOWER_FETCH_MS: u64 = 25;

/// A produce with `acks=-1` waiting in the produce purgatory for the
/// followers: a scripted timeline on a manual clock.
#[derive(Debug, Parser)]
#[command(name = "produce", allow_negative_numbers = true)]
pub struct ProduceArgs {
    /// Timeout of every produce, 30 to 60,000 ms (the followers fetch
    /// produce #1's records by 25 ms).
    #[arg(long, default_value = "100", value_parser = int_in::<{ LAST_FOLLOWER_FETCH_MS + 5 }, 60_000>)]
    pub timeout_ms: u64,
    /// Records written to each partition by produce #1 (produce #2 writes
    /// half as many, produce #3 one), 1 to 10,000.
    #[arg(long, default_value = "10", value_parser = count_in::<1, 10_000>)]
    pub records: usize,
    /// Size of each record, 1 to 1,048,576 bytes.
    #[arg(long, default_value = "100", value_parser = int_in::<1, FOLLOWER_FETCH_MAX_BYTES>)]
    pub record_bytes: u64,
}

impl ProduceArgs {
    /// Checks across flags: one produce's records fit in a follower fetch.
    pub fn check(&self) -> Result<(), UsageError> {
        let bytes = self.records as u64 * self.record_bytes;
        if bytes > FOLLOWER_FETCH_MAX_BYTES {
            return Err(UsageError(format!(
                "--records × --record-bytes ({} × {} = {bytes}) must be at most {FOLLOWER_FETCH_MAX_BYTES}, \
                 what a follower fetches at once",
                self.records, self.record_bytes
            )));
        }
        Ok(())
    }

    /// The record size as the log stores it.
    pub fn record_bytes_u32(&self) -> u32 {
        u32::try_from(self.record_bytes).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ProduceArgs, String> {
        ProduceArgs::try_parse_from(std::iter::once("produce").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_todays_script() {
        let args = parse(&[]).unwrap();
        assert_eq!(
            (args.timeout_ms, args.records, args.record_bytes),
            (100, 10, 100)
        );
        assert_eq!(args.check(), Ok(()));
    }

    #[test]
    fn bad_values_name_their_flag_and_range() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--timeout-ms", "25"],
                "'--timeout-ms <TIMEOUT_MS>': must be a whole number from 30 to 60000",
            ),
            (&["--timeout-ms", "-1"], "from 30 to 60000"),
            (
                &["--records", "0"],
                "'--records <RECORDS>': must be a whole number from 1 to 10000",
            ),
            (
                &["--record-bytes", "0"],
                "'--record-bytes <RECORD_BYTES>': must be a whole number from 1 to 1048576",
            ),
        ];
        for (args, expected) in cases {
            let err = parse(args).unwrap_err();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
        let err = parse(&["--records", "10000", "--record-bytes", "1000"])
            .unwrap()
            .check()
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "--records × --record-bytes (10000 × 1000 = 10000000) must be at most 1048576"
            ),
            "{err}"
        );
    }
}
