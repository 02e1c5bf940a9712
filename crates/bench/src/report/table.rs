//! Records laid out as a plain-text table.

use super::{Record, Value};
use std::fmt::Write as _;

/// Lays out `records` as a table with the given `(heading, field)` columns;
/// a column whose field is absent shows `-`. Numbers are right-aligned.
pub fn table(records: &[Record], columns: &[(&str, &str)]) -> String {
    let mut rows: Vec<Vec<String>> = vec![columns.iter().map(|(h, _)| h.to_string()).collect()];
    for r in records {
        rows.push(
            columns
                .iter()
                .map(|(_, f)| r.get(f).map_or_else(|| "-".to_string(), Value::cell))
                .collect(),
        );
    }
    let widths: Vec<usize> = (0..columns.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c == 0 {
                let _ = write!(line, "{cell:<w$}", w = widths[c]);
            } else {
                let _ = write!(line, "  {cell:>w$}", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if i == 0 {
            let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record::new()
            .with("workload", "w1")
            .with("impl", "timer")
            .with("n", 1_000_000usize)
            .with("add_ns", 41.6666)
            .with("bytes_per_task", None::<f64>)
            .with("early", 0u64)
    }

    #[test]
    fn tables_align() {
        let t = table(
            &[sample()],
            &[("impl", "impl"), ("add ns", "add_ns"), ("x", "nope")],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "impl   add ns  x");
        assert_eq!(lines[2], "timer  41.667  -");
    }
}
