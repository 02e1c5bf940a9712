//! Command-line checks the programs share.
//!
//! Every flag is parsed by one of these functions, used as a clap
//! `value_parser`, so that a bad value is refused before anything runs, with
//! clap's usual usage error (exit code 2) naming the flag, followed by the
//! valid range: `invalid value '0' for '--consumers <CONSUMERS>': must be a
//! whole number from 1 to 10000000`. Checks that involve two flags return a
//! [`UsageError`] that the program prints the same way.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

/// The exit code of a refused command line (clap's own usage errors use it too).
pub const USAGE_EXIT_CODE: u8 = 2;

/// A whole number in `MIN..=MAX`: a count, a size or a time in milliseconds.
/// Negative numbers parse (so `-5` is refused for its range, not as "an
/// unexpected argument").
pub fn int_in<const MIN: u64, const MAX: u64>(value: &str) -> Result<u64, String> {
    let range = || format!("must be a whole number from {MIN} to {MAX}");
    let parsed: i128 = value.trim().parse().map_err(|_| range())?;
    match u64::try_from(parsed) {
        Ok(n) if (MIN..=MAX).contains(&n) => Ok(n),
        _ => Err(range()),
    }
}

/// Like [`int_in`], as a `usize` (counts of things held in memory).
pub fn count_in<const MIN: u64, const MAX: u64>(value: &str) -> Result<usize, String> {
    let n = int_in::<MIN, MAX>(value)?;
    usize::try_from(n).map_err(|_| format!("must be at most {}", usize::MAX))
}

/// A fraction in `[0, 1]` (a rate).
pub fn fraction(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        // Adding 0 turns `-0` into 0, which the summary would print signed.
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x + 0.0),
        _ => Err("must be a number from 0 to 1".to_string()),
    }
}

/// A time given in seconds that the program uses in whole milliseconds,
/// from `MIN_MS` to `MAX_MS`: returns the milliseconds. A value that is not
/// a whole number of milliseconds (`0.0001`, `1.0005`) is refused rather than
/// rounded.
pub fn secs_as_ms<const MIN_MS: u64, const MAX_MS: u64>(value: &str) -> Result<u64, String> {
    let range = || {
        format!(
            "must be a number of seconds from {} to {}, in whole milliseconds",
            MIN_MS as f64 / 1000.0,
            MAX_MS as f64 / 1000.0
        )
    };
    let secs: f64 = value.trim().parse().map_err(|_| range())?;
    if !secs.is_finite() {
        return Err(range());
    }
    let ms = secs * 1000.0;
    let whole = ms.round();
    // A decimal like 0.001 is not exact in binary; a relative slack of 1e-9
    // accepts it without accepting a real fraction of a millisecond.
    if (ms - whole).abs() > 1e-9 * whole.abs().max(1.0) {
        return Err(range());
    }
    if whole < MIN_MS as f64 || whole > MAX_MS as f64 {
        return Err(range());
    }
    Ok(whole as u64)
}

/// A command line refused by a check across flags; the message names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

impl UsageError {
    /// Prints `error: <message>` on stderr and gives the usage exit code.
    pub fn report(&self) -> ExitCode {
        crate::errln!("error: {self}");
        ExitCode::from(USAGE_EXIT_CODE)
    }
}

/// Writes `args` to stdout. A reader that has gone away (`| head -1`)
/// wants no more output: the program then ends quietly with exit code 0, as
/// a shell tool does, rather than panicking. Any other write error ends it
/// with a message and exit code 1.
pub fn write_stdout(args: fmt::Arguments<'_>) {
    if let Err(err) = io::stdout().lock().write_fmt(args) {
        if err.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        crate::errln!("error: cannot write to stdout: {err}");
        std::process::exit(1);
    }
}

/// Writes `args` to stderr: warnings and errors. One that cannot be
/// written (stderr closed, full, or a pipe whose reader has gone) is
/// dropped: a diagnostic never ends a program or changes its exit code.
pub fn write_stderr(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// `println!` through [`write_stdout`]: every line the programs print goes
/// through it, from whichever thread prints it.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` through [`write_stderr`].
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_and_their_range() {
        assert_eq!(int_in::<1, 10>("1"), Ok(1));
        assert_eq!(int_in::<1, 10>(" 10 "), Ok(10));
        for bad in ["0", "11", "-5", "1.5", "x", "", "99999999999999999999999"] {
            let err = int_in::<1, 10>(bad).unwrap_err();
            assert_eq!(err, "must be a whole number from 1 to 10", "{bad}");
        }
        assert_eq!(count_in::<0, { u64::MAX }>("0"), Ok(0));
    }

    #[test]
    fn fractions() {
        assert_eq!(fraction("0"), Ok(0.0));
        assert_eq!(fraction("1"), Ok(1.0));
        assert!(
            fraction("-0").unwrap().is_sign_positive(),
            "-0 kept its sign"
        );
        for bad in ["-0.1", "1.01", "NaN", "inf", "x"] {
            assert!(fraction(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn seconds_in_whole_milliseconds() {
        const MAX: u64 = 604_800_000;
        assert_eq!(secs_as_ms::<1, MAX>("15"), Ok(15_000));
        assert_eq!(secs_as_ms::<1, MAX>("0.001"), Ok(1));
        assert_eq!(secs_as_ms::<1, MAX>("1.5"), Ok(1_500));
        assert_eq!(secs_as_ms::<1, MAX>("604800"), Ok(MAX));
        for bad in [
            "0",
            "0.0001",
            "1.0005",
            "-1",
            "604800.001",
            "NaN",
            "inf",
            "x",
        ] {
            let err = secs_as_ms::<1, MAX>(bad).unwrap_err();
            assert_eq!(
                err, "must be a number of seconds from 0.001 to 604800, in whole milliseconds",
                "{bad}"
            );
        }
    }
}
