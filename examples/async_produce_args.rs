//! The `async_produce` command line: no parameters, only `--help`, so that a
//! mistyped flag is refused instead of being ignored by a run.

use clap::Parser;

/// Delayed produces awaited from async request handlers (tokio): 4,000
/// requests over 1.5 s, some replicated in time, some timing out on a
/// lagging partition, some cancelled by clients that go away. Prints how
/// many ended each way with latency percentiles, and exits 0 only when
/// every request resolved.
#[derive(Debug, Parser)]
#[command(name = "async_produce")]
pub struct AsyncProduceArgs {}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<AsyncProduceArgs, clap::Error> {
        AsyncProduceArgs::try_parse_from(
            std::iter::once("async_produce").chain(args.iter().copied()),
        )
    }

    #[test]
    fn takes_no_parameters_but_help() {
        assert!(parse(&[]).is_ok());
        assert_eq!(
            parse(&["--help"]).unwrap_err().kind(),
            ErrorKind::DisplayHelp
        );
        for bad in [&["--bogus-flag", "7"][..], &["7"], &["--requests", "10"]] {
            let err = parse(bad).unwrap_err();
            assert!(
                matches!(err.kind(), ErrorKind::UnknownArgument),
                "{bad:?}: {err}"
            );
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }
}
