//! Small located checks shared by the config builders: integer ranges, durations, sizes.

use std::time::Duration;

use super::raw::{Int, Loc, SizeText};
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

/// A duration (as `duration` reads it) within `lo..=hi`; `Duration::MAX` for no upper
/// bound. Out of range is an error naming the key, the range and the value written.
pub fn duration_in(
    sink: &mut Sink<'_>,
    v: &Loc<String>,
    key: &str,
    lo: Duration,
    hi: Duration,
) -> Option<Duration> {
    let d = duration(sink, v, key)?;
    if d < lo || d > hi {
        let lo = humantime::format_duration(lo);
        let got = v.value.trim();
        let message = if hi == Duration::MAX {
            format!("{key} must be at least {lo}, got {got}")
        } else {
            format!("{key} must be between {lo} and {}, got {got}", humantime::format_duration(hi))
        };
        sink.on(v, message);
        return None;
    }
    Some(d)
}

/// A size in bytes, written as a number of bytes or with a unit: `512KiB`, `16MiB`,
/// `1GiB` (powers of 1024) or `kB`, `MB`, `GB` (powers of 1000). At least 1 byte.
pub fn size(sink: &mut Sink<'_>, v: &Loc<SizeText>, key: &str) -> Option<u64> {
    let parsed = parse_size(&v.value.0);
    if parsed.is_none() {
        sink.on(
            v,
            format!(
                "{key}: invalid size {:?} (a number of bytes, or with a unit: 512KiB, 16MiB, 1GiB, kB, MB, GB)",
                v.value.0
            ),
        );
    }
    parsed
}

fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let unit: u64 = match unit.trim_start() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(unit).filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse_with_and_without_units() {
        let cases: &[(&str, Option<u64>)] = &[
            ("4096", Some(4096)),
            ("1KiB", Some(1024)),
            ("16MiB", Some(16 << 20)),
            ("16 MiB", Some(16 << 20)),
            ("1GiB", Some(1 << 30)),
            ("2kB", Some(2000)),
            ("3MB", Some(3_000_000)),
            ("0", None),
            ("", None),
            ("MiB", None),
            ("1.5MiB", None),
            ("-1", None),
            ("16mib", None),
            ("99999999999TiB", None),
        ];
        for (text, want) in cases {
            assert_eq!(super::parse_size(text), *want, "{text:?}");
        }
    }
}
