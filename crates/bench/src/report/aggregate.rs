//! Merging the rounds of one implementation into one record.

use super::{Record, Value};
use crate::stats;

/// How a numeric field is merged across rounds.
fn merge_rule(field: &str) -> MergeRule {
    match field {
        // Counts that must be zero: the worst round.
        "early" | "bad" | "missing" | "pending" | "double" | "rejected" | "watched_after"
        | "delayed_after" | "burst_filled_late" => MergeRule::Max,
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // A count that must be zero takes the worst round, not the median.
        let left = |w: u64| Record::new().with("watched_after", w);
        let a = aggregate(&[left(0), left(7), left(0)], &[]).unwrap();
        assert_eq!(a.get("watched_after"), Some(&Value::Int(7)));
    }
}
