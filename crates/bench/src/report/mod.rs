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

mod aggregate;
mod json;
mod table;

pub use aggregate::aggregate;
pub use table::table;

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
}
