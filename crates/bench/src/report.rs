//! Result records: one flat JSON object per implementation and round.
//!
//! A [`Record`] is an ordered list of `(field, value)` pairs whose values are
//! strings, integers, floats or null. It is written as one line of JSON (by
//! hand: the format is flat, so no serde), read back by [`Record::parse`] (the
//! runner reads its child processes' lines), merged across rounds by
//! [`aggregate`], and laid out as a plain-text table by [`table`].
//!
//! Aggregation across rounds takes the median of every numeric field, except
//! for counts of faults, where the worst round is reported: `early`, `bad`,
//! `missing` and `pending` take the maximum, `fired` the minimum. Selected
//! headline fields also get `<field>_min` and `<field>_max` so that the noise
//! of the run shows.

use crate::stats;
use std::fmt::Write as _;

/// One value of a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string (implementation and workload names).
    Str(String),
    /// An integer (counts, rates).
    Int(i64),
    /// A float, written with three decimals.
    Float(f64),
    /// A figure that could not be measured (e.g. no `/proc`).
    Null,
}

impl Value {
    /// The value as a number, if it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }

    fn write_json(&self, out: &mut String) {
        match self {
            Value::Str(s) => write_json_string(out, s),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Float(f) if f.is_finite() => {
                let _ = write!(out, "{f:.3}");
            }
            Value::Float(_) | Value::Null => out.push_str("null"),
        }
    }

    /// The value as a table cell.
    pub fn cell(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) if f.is_finite() => {
                if f.abs() >= 100.0 {
                    format!("{f:.1}")
                } else {
                    format!("{f:.3}")
                }
            }
            Value::Float(_) | Value::Null => "-".to_string(),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}
impl From<u64> for Value {
    fn from(i: u64) -> Self {
        Value::Int(i64::try_from(i).unwrap_or(i64::MAX))
    }
}
impl From<usize> for Value {
    fn from(i: usize) -> Self {
        Value::from(i as u64)
    }
}
impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// An ordered, flat set of named values: one implementation's figures.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    fields: Vec<(String, Value)>,
}

impl Record {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value` (replacing an earlier value, keeping its place).
    pub fn set(&mut self, name: &str, value: impl Into<Value>) -> &mut Self {
        let value = value.into();
        match self.fields.iter_mut().find(|(k, _)| k == name) {
            Some((_, v)) => *v = value,
            None => self.fields.push((name.to_string(), value)),
        }
        self
    }

    /// Builder form of [`Record::set`].
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.set(name, value);
        self
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// The value of `name` as a number.
    pub fn num(&self, name: &str) -> Option<f64> {
        self.get(name).and_then(Value::as_f64)
    }

    /// The value of `name` as a string.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The fields in order.
    pub fn fields(&self) -> &[(String, Value)] {
        &self.fields
    }

    /// One line of JSON: `{"workload":"w1","impl":"timer",...}` (no newline).
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_json_string(&mut out, k);
            out.push(':');
            v.write_json(&mut out);
        }
        out.push('}');
        out
    }

    /// Parses one flat JSON object as written by [`Record::to_json`]
    /// (strings, numbers, `null`, `true`/`false` as 1/0; no nesting).
    pub fn parse(line: &str) -> Result<Record, String> {
        let mut p = Parser {
            s: line.trim().as_bytes(),
            i: 0,
        };
        let mut rec = Record::new();
        p.expect(b'{')?;
        p.ws();
        if p.peek() == Some(b'}') {
            p.i += 1;
            return p.end(rec);
        }
        loop {
            p.ws();
            let key = p.string()?;
            p.ws();
            p.expect(b':')?;
            p.ws();
            let value = p.value()?;
            rec.set(&key, value);
            p.ws();
            match p.next() {
                Some(b',') => continue,
                Some(b'}') => return p.end(rec),
                other => return Err(p.err(&format!("expected ',' or '}}', got {other:?}"))),
            }
        }
    }
}

fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A cursor over one line of JSON.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let c = self.peek();
        self.i += 1;
        c
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }
    fn err(&self, what: &str) -> String {
        format!("bad JSON record at byte {}: {what}", self.i)
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.next() == Some(c) {
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", c as char)))
        }
    }
    fn end(&mut self, rec: Record) -> Result<Record, String> {
        self.ws();
        if self.i == self.s.len() {
            Ok(rec)
        } else {
            Err(self.err("trailing characters"))
        }
    }
    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            match self.next() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => break,
                Some(b'\\') => match self.next() {
                    Some(b'"') => out.push(b'"'),
                    Some(b'\\') => out.push(b'\\'),
                    Some(b'/') => out.push(b'/'),
                    Some(b'n') => out.push(b'\n'),
                    Some(b't') => out.push(b'\t'),
                    Some(b'r') => out.push(b'\r'),
                    Some(b'u') => {
                        let hex = self
                            .s
                            .get(self.i..self.i + 4)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u32::from_str_radix(h, 16).ok())
                            .and_then(char::from_u32)
                            .ok_or_else(|| self.err("bad \\u escape"))?;
                        self.i += 4;
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(hex.encode_utf8(&mut buf).as_bytes());
                    }
                    _ => return Err(self.err("bad escape")),
                },
                Some(c) => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("invalid UTF-8"))
    }
    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'n') => self.word("null", Value::Null),
            Some(b't') => self.word("true", Value::Int(1)),
            Some(b'f') => self.word("false", Value::Int(0)),
            _ => {
                let start = self.i;
                while matches!(
                    self.peek(),
                    Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                ) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                if let Ok(i) = text.parse::<i64>() {
                    Ok(Value::Int(i))
                } else {
                    text.parse::<f64>()
                        .map(Value::Float)
                        .map_err(|_| self.err(&format!("bad number {text:?}")))
                }
            }
        }
    }
    fn word(&mut self, w: &str, v: Value) -> Result<Value, String> {
        if self.s[self.i..].starts_with(w.as_bytes()) {
            self.i += w.len();
            Ok(v)
        } else {
            Err(self.err("bad literal"))
        }
    }
}

/// How a numeric field is merged across rounds.
fn merge_rule(field: &str) -> MergeRule {
    match field {
        "early" | "bad" | "missing" | "pending" | "double" => MergeRule::Max,
        "fired" => MergeRule::Min,
        _ => MergeRule::Median,
    }
}

enum MergeRule {
    Median,
    Max,
    Min,
}

/// Merges several rounds of the same implementation into one record.
///
/// Field order follows the first round. Strings come from the first round;
/// numbers are merged per the module rules; a field that is null in every
/// round stays null. `spread` names fields that also get `_min`/`_max`
/// companions. A `rounds` field records how many rounds were merged.
pub fn aggregate(rounds: &[Record], spread: &[&str]) -> Option<Record> {
    let first = rounds.first()?;
    let mut out = Record::new();
    for (name, value) in first.fields() {
        let nums: Vec<f64> = rounds.iter().filter_map(|r| r.num(name)).collect();
        let merged = match value {
            Value::Str(_) => value.clone(),
            _ if nums.is_empty() => Value::Null,
            _ => {
                let all_int = rounds
                    .iter()
                    .all(|r| matches!(r.get(name), Some(Value::Int(_)) | None));
                let x = match merge_rule(name) {
                    MergeRule::Median => stats::median(&nums).unwrap_or(f64::NAN),
                    MergeRule::Max => nums.iter().copied().fold(f64::MIN, f64::max),
                    MergeRule::Min => nums.iter().copied().fold(f64::MAX, f64::min),
                };
                if all_int && x.fract() == 0.0 {
                    Value::Int(x as i64)
                } else {
                    Value::Float(x)
                }
            }
        };
        out.set(name, merged);
        if spread.contains(&name.as_str()) && !nums.is_empty() {
            let lo = nums.iter().copied().fold(f64::MAX, f64::min);
            let hi = nums.iter().copied().fold(f64::MIN, f64::max);
            let as_value = |x: f64| match value {
                Value::Int(_) => Value::Int(x as i64),
                _ => Value::Float(x),
            };
            out.set(&format!("{name}_min"), as_value(lo));
            out.set(&format!("{name}_max"), as_value(hi));
        }
    }
    out.set("rounds", rounds.len());
    Some(out)
}

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
    fn json_line_format() {
        let line = sample().to_json();
        assert_eq!(
            line,
            r#"{"workload":"w1","impl":"timer","n":1000000,"add_ns":41.667,"bytes_per_task":null,"early":0}"#
        );
        assert!(!line.contains('\n'));
        let back = Record::parse(&line).unwrap();
        assert_eq!(back.str("impl"), Some("timer"));
        assert_eq!(back.get("n"), Some(&Value::Int(1_000_000)));
        assert_eq!(back.get("add_ns"), Some(&Value::Float(41.667)));
        assert_eq!(back.get("bytes_per_task"), Some(&Value::Null));
        assert_eq!(back.to_json(), line);
    }

    #[test]
    fn strings_are_escaped_and_parsed_back() {
        let r = Record::new().with("s", "a \"q\" \\ b\n\u{1}é");
        let line = r.to_json();
        assert_eq!(line, r#"{"s":"a \"q\" \\ b\n\u0001é"}"#);
        assert_eq!(Record::parse(&line).unwrap(), r);
        assert!(Record::parse(r#"{"a":1,}"#).is_err());
        assert!(Record::parse(r#"{"a":1} x"#).is_err());
        assert!(Record::parse("not json").is_err());
        assert_eq!(Record::parse("{}").unwrap(), Record::new());
        assert_eq!(
            Record::parse(r#" { "a" : -1.5e3 , "b" : true } "#).unwrap(),
            Record::new().with("a", -1500.0).with("b", 1i64)
        );
    }

    #[test]
    fn aggregation_takes_medians_and_worst_counts() {
        let round = |t: f64, early: u64, fired: u64| {
            Record::new()
                .with("impl", "timer")
                .with("total_ms", t)
                .with("early", early)
                .with("fired", fired)
                .with("n", 10u64)
                .with("mem", None::<f64>)
        };
        let rs = [round(3.0, 0, 5), round(1.0, 2, 4), round(2.0, 0, 5)];
        let a = aggregate(&rs, &["total_ms"]).unwrap();
        assert_eq!(a.str("impl"), Some("timer"));
        assert_eq!(a.num("total_ms"), Some(2.0));
        assert_eq!(a.num("total_ms_min"), Some(1.0));
        assert_eq!(a.num("total_ms_max"), Some(3.0));
        assert_eq!(a.get("early"), Some(&Value::Int(2)));
        assert_eq!(a.get("fired"), Some(&Value::Int(4)));
        assert_eq!(a.get("n"), Some(&Value::Int(10)));
        assert_eq!(a.get("mem"), Some(&Value::Null));
        assert_eq!(a.get("rounds"), Some(&Value::Int(3)));
        assert!(aggregate(&[], &[]).is_none());
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
