//! Running one implementation in a child process of the runner.
//!
//! The runner re-executes its own binary (`std::env::current_exe`) with a
//! hidden `--impl NAME --json` argument: the child runs that single
//! implementation once and prints one JSON line, which the parent parses back
//! into a [`Record`]. Each implementation thus starts from a fresh address
//! space, so that its memory figures are not polluted by what an earlier one
//! left in the allocator, while all of them still belong to the same run
//! (the parent interleaves them round by round).

use crate::report::Record;
use std::process::{Command, Stdio};

/// Runs this executable with `args` and returns the JSON records it printed
/// (lines starting with `{`). The child's standard error is passed through.
pub fn run_self(args: &[String]) -> Result<Vec<Record>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let out = Command::new(&exe)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "child `{} {}` failed: {}",
            exe.display(),
            args.join(" "),
            out.status
        ));
    }
    parse_lines(&String::from_utf8_lossy(&out.stdout))
}

/// Parses every line that starts with `{` as a record; other lines are
/// ignored.
pub fn parse_lines(text: &str) -> Result<Vec<Record>, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .map(Record::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_json_lines() {
        let recs = parse_lines("note\n{\"impl\":\"a\",\"x\":1}\n\n{\"impl\":\"b\"}\n").unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].str("impl"), Some("b"));
        assert!(parse_lines("{oops").is_err());
    }
}
