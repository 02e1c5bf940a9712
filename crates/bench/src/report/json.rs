//! A record as one line of flat JSON, and back.

use super::{Record, Value};
use std::fmt::Write as _;

impl Value {
    /// Writes the value; a float with three decimals, or `exact`ly (the
    /// shortest form that reads back the same, and still a float).
    fn write_json(&self, out: &mut String, exact: bool) {
        match self {
            Value::Str(s) => write_json_string(out, s),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Float(f) if f.is_finite() && exact => {
                let _ = write!(out, "{f:?}");
            }
            Value::Float(f) if f.is_finite() => {
                let _ = write!(out, "{f:.3}");
            }
            Value::Float(_) | Value::Null => out.push_str("null"),
        }
    }
}

impl Record {
    /// One line of JSON: `{"workload":"w1","impl":"timer",...}` (no newline),
    /// floats with three decimals.
    pub fn to_json(&self) -> String {
        self.json_line(false)
    }

    /// [`to_json`](Self::to_json) with floats as they are, for a child
    /// process's record: the parent's medians and ratios are then those of
    /// the figures measured, not of their rounding.
    pub fn to_json_exact(&self) -> String {
        self.json_line(true)
    }

    fn json_line(&self, exact: bool) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_json_string(&mut out, k);
            out.push(':');
            v.write_json(&mut out, exact);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::sample;

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
        // A child's record reads back exactly, its floats still floats.
        let fine = Record::new()
            .with("total_ms", 0.003_4)
            .with("two", 2.0)
            .with("tiny", 1e-7);
        assert_eq!(Record::parse(&fine.to_json_exact()).unwrap(), fine);
        assert_eq!(
            fine.to_json(),
            r#"{"total_ms":0.003,"two":2.000,"tiny":0.000}"#
        );
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
}
