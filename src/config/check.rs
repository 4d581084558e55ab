//! Small located checks shared by the config builders: integer ranges and durations.

use std::time::Duration;

use super::raw::{Int, Loc};
use crate::diag::Sink;

/// The value when it lies in `lo..=hi`, else an error naming the key and the range.
pub fn int_in<T: TryFrom<i64>>(
    sink: &mut Sink<'_>,
    v: &Loc<Int>,
    lo: i64,
    hi: i64,
    key: &str,
) -> Option<T> {
    let Int(n) = v.value;
    if (lo..=hi).contains(&n) {
        T::try_from(n).ok()
    } else {
        sink.on(v, format!("{key} must be between {lo} and {hi}, got {n}"));
        None
    }
}

/// An optional integer in range, or `default` when absent. Out of range also yields the
/// default (the error is recorded), so one bad value does not hide later errors.
pub fn int_or<T: TryFrom<i64> + Copy>(
    sink: &mut Sink<'_>,
    v: Option<&Loc<Int>>,
    lo: i64,
    hi: i64,
    key: &str,
    default: T,
) -> T {
    v.and_then(|v| int_in(sink, v, lo, hi, key)).unwrap_or(default)
}

/// A duration written with a unit: `800ms`, `10s`, `5m`, `1h`.
pub fn duration(sink: &mut Sink<'_>, v: &Loc<String>, key: &str) -> Option<Duration> {
    let text = v.value.trim();
    let has_unit = text.chars().last().is_some_and(|c| c.is_ascii_alphabetic());
    match humantime::parse_duration(text) {
        Ok(d) if has_unit => Some(d),
        _ => {
            sink.on(
                v,
                format!(
                    "{key}: invalid duration {text:?} (write it with a unit: 800ms, 10s, 5m, 1h)"
                ),
            );
            None
        }
    }
}
