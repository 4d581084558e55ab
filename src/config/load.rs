//! `load:` (the control rules) and each endpoint's `load:` (its feed), checked at their
//! positions (`docs/load.md`). An endpoint's watermarks default to the top-level ones, so
//! the rules are built first and handed to the profile builder.

use std::time::Duration;

use super::check::duration_in;
use super::raw::{Loc, RawEndpointLoad, RawLoad};
use crate::diag::{Pos, Sink};
use crate::model::load::{FeedSource, LoadFeed, LoadRules, MetricSelector, OnStale};

/// The most a watermark may be: utilisation may exceed 1, but not by this much.
pub const MAX_WATERMARK: f64 = 10.0;

/// The top-level rules; the defaults without `load:`.
pub fn rules(sink: &mut Sink<'_>, raw: Option<&Loc<RawLoad>>) -> LoadRules {
    let d = LoadRules::default();
    let Some(raw) = raw.map(|r| &r.value) else { return d };
    let interval = raw
        .interval
        .as_ref()
        .and_then(|v| {
            duration_in(
                sink,
                v,
                "load.interval",
                Duration::from_millis(100),
                Duration::from_secs(3600),
            )
        })
        .unwrap_or(d.interval);
    let (low, high) =
        watermarks(sink, raw.low.as_ref(), raw.high.as_ref(), (d.low, d.high), "load");
    let max_step = match &raw.max_step {
        Some(v) if !(v.value > 0.0 && v.value <= 1.0) => {
            sink.on(v, format!("load.max_step must be above 0 and at most 1, got {}", v.value));
            d.max_step
        }
        Some(v) => v.value,
        None => d.max_step,
    };
    let deadband = match &raw.deadband {
        Some(v) if !(v.value >= 0.0 && v.value < 1.0) => {
            sink.on(v, format!("load.deadband must be at least 0 and below 1, got {}", v.value));
            d.deadband
        }
        Some(v) => v.value,
        None => d.deadband,
    };
    let stale_after = raw
        .stale_after
        .as_ref()
        .and_then(|v| duration_in(sink, v, "load.stale_after", interval, Duration::MAX))
        .unwrap_or(interval * 3);
    let on_stale = match &raw.on_stale {
        Some(v) => match v.value.trim() {
            "ignore" => OnStale::Ignore,
            "overloaded" => OnStale::Overloaded,
            other => {
                sink.on(v, format!("load.on_stale must be ignore or overloaded, got {other:?}"));
                d.on_stale
            }
        },
        None => d.on_stale,
    };
    let timeout = raw
        .timeout
        .as_ref()
        .and_then(|v| duration_in(sink, v, "load.timeout", Duration::from_millis(10), interval))
        .unwrap_or(d.timeout.min(interval));
    LoadRules { interval, low, high, max_step, deadband, stale_after, on_stale, timeout }
}

/// An endpoint's feed; `None` (errors recorded) when it is not valid.
pub fn feed(
    sink: &mut Sink<'_>,
    raw: &Loc<RawEndpointLoad>,
    rules: &LoadRules,
) -> Option<LoadFeed> {
    let r = &raw.value;
    let mut ok = true;
    let capacity = r.capacity.value;
    if !(capacity > 0.0 && capacity.is_finite()) {
        sink.on(&r.capacity, format!("load.capacity must be a number above 0, got {capacity}"));
        ok = false;
    }
    let (low, high) =
        watermarks(sink, r.low.as_ref(), r.high.as_ref(), (rules.low, rules.high), "load");
    let pushed = r.pushed.as_ref().filter(|p| p.value);
    let source = match (&r.url, pushed) {
        (Some(url), Some(p)) => {
            sink.on(p, "load: either url or pushed: true, not both");
            let _ = url;
            None
        }
        (Some(url), None) => pulled(sink, url, r),
        (None, Some(_)) => {
            for (key, at) in
                [("json_pointer", r.json_pointer.as_ref()), ("metric", r.metric.as_ref())]
            {
                if let Some(at) = at {
                    sink.on(at, format!("load.{key} applies to a pulled feed (url) only"));
                }
            }
            Some(FeedSource::Pushed)
        }
        (None, None) => {
            let at = r.pushed.as_ref().map_or(Pos::of(raw), Pos::of);
            sink.at(at, "load needs url (pulled) or pushed: true");
            None
        }
    };
    let source = source.filter(|_| ok)?;
    Some(LoadFeed { capacity, source, low, high })
}

/// A pulled feed: the URL and how its body is read.
fn pulled(sink: &mut Sink<'_>, url: &Loc<String>, r: &RawEndpointLoad) -> Option<FeedSource> {
    let text = url.value.trim();
    let ok_url = match text.split_once("://") {
        Some((scheme, rest)) => {
            matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https")
                && !rest.is_empty()
                && !rest.starts_with('/')
        }
        None => false,
    };
    if !ok_url {
        sink.on(url, format!("load.url must be an http or https URL, got {text:?}"));
    }
    let source = match (&r.json_pointer, &r.metric) {
        (Some(_), Some(m)) => {
            sink.on(m, "load: json_pointer or metric, not both");
            return None;
        }
        (Some(p), None) => match check_pointer(&p.value) {
            Ok(()) => FeedSource::Json { url: text.to_string(), pointer: Some(p.value.clone()) },
            Err(e) => {
                sink.on(p, format!("load.json_pointer: {e}"));
                return None;
            }
        },
        (None, Some(m)) => match parse_selector(&m.value) {
            Ok(metric) => FeedSource::Prometheus { url: text.to_string(), metric },
            Err(e) => {
                sink.on(m, format!("load.metric: {e}"));
                return None;
            }
        },
        (None, None) => FeedSource::Json { url: text.to_string(), pointer: None },
    };
    ok_url.then_some(source)
}

/// `low` and `high` (each defaulting to `defaults`) checked: 0 <= low < high <= 10.
fn watermarks(
    sink: &mut Sink<'_>,
    low: Option<&Loc<f64>>,
    high: Option<&Loc<f64>>,
    defaults: (f64, f64),
    prefix: &str,
) -> (f64, f64) {
    let mut in_range = |v: Option<&Loc<f64>>, key: &str, default: f64| match v {
        Some(v) if !(0.0..=MAX_WATERMARK).contains(&v.value) => {
            sink.on(
                v,
                format!("{prefix}.{key} must be between 0 and {MAX_WATERMARK}, got {}", v.value),
            );
            None
        }
        Some(v) => Some(v.value),
        None => Some(default),
    };
    let (l, h) = (in_range(low, "low", defaults.0), in_range(high, "high", defaults.1));
    let (Some(l), Some(h)) = (l, h) else { return defaults };
    if l >= h {
        // At the key written here; the other one may be the top level's.
        if let Some(at) = low.map(Pos::of).or(high.map(Pos::of)) {
            sink.at(at, format!("{prefix}.low ({l}) must be below {prefix}.high ({h})"));
        }
        return defaults;
    }
    (l, h)
}

/// An RFC 6901 JSON pointer: empty (the whole body) or `/`-separated tokens in which `~`
/// is only written as `~0` or `~1`.
pub fn check_pointer(text: &str) -> Result<(), String> {
    if !text.is_empty() && !text.starts_with('/') {
        return Err(format!("{text:?} must be empty or start with /"));
    }
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!("{text:?}: ~ must be followed by 0 or 1 (~0 is ~, ~1 is /)"));
        }
    }
    Ok(())
}

/// A Prometheus sample selector: a metric name, then optionally `{label="value",...}`
/// with equality matchers only (values in double quotes, `\\`, `\"` and `\n` escaped).
pub fn parse_selector(text: &str) -> Result<MetricSelector, String> {
    let text = text.trim();
    let name_end = text.find('{').unwrap_or(text.len());
    let name = text[..name_end].trim_end();
    if !is_metric_name(name) {
        return Err(format!("{name:?} is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"));
    }
    let mut labels = Vec::new();
    let rest = &text[name_end..];
    if rest.is_empty() {
        return Ok(MetricSelector { name: name.to_string(), labels });
    }
    let mut chars = rest[1..].chars().peekable();
    loop {
        skip_space(&mut chars);
        if chars.peek() == Some(&'}') {
            chars.next();
            break;
        }
        let mut label = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_ascii_alphanumeric() || c == '_' {
                label.push(c);
                chars.next();
            } else {
                break;
            }
        }
        if label.is_empty() || label.starts_with(|c: char| c.is_ascii_digit()) {
            return Err("expected a label name ([a-zA-Z_][a-zA-Z0-9_]*)".to_string());
        }
        skip_space(&mut chars);
        match (chars.next(), chars.peek()) {
            (Some('='), Some('~')) => {
                return Err(format!("label {label}: only = matchers are supported, not =~"));
            }
            (Some('='), _) => {}
            (Some('!'), _) => {
                return Err(format!("label {label}: only = matchers are supported, not != or !~"));
            }
            _ => return Err(format!("label {label}: expected =\"value\"")),
        }
        skip_space(&mut chars);
        if chars.next() != Some('"') {
            return Err(format!("label {label}: the value must be in double quotes"));
        }
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c @ ('\\' | '"')) => value.push(c),
                    _ => return Err(format!("label {label}: bad escape in the value")),
                },
                Some(c) => value.push(c),
                None => return Err(format!("label {label}: the value has no closing quote")),
            }
        }
        if labels.iter().any(|(l, _)| *l == label) {
            return Err(format!("label {label} is matched twice"));
        }
        labels.push((label, value));
        skip_space(&mut chars);
        match chars.next() {
            Some(',') => continue,
            Some('}') => break,
            _ => return Err("expected , or } after a label matcher".to_string()),
        }
    }
    if chars.any(|c| !c.is_whitespace()) {
        return Err("text after the closing }".to_string());
    }
    Ok(MetricSelector { name: name.to_string(), labels })
}

fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

fn skip_space(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.next_if(|c| c.is_whitespace()).is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse_as_prometheus_writes_them() {
        let sel = |name: &str, labels: &[(&str, &str)]| MetricSelector {
            name: name.to_string(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let ok: &[(&str, MetricSelector)] = &[
            ("app_inflight", sel("app_inflight", &[])),
            ("app:requests_total{}", sel("app:requests_total", &[])),
            (r#"app_inflight{pool="eu"}"#, sel("app_inflight", &[("pool", "eu")])),
            (
                r#" app_inflight { pool = "eu" , zone="a\"b\\c" , } "#,
                sel("app_inflight", &[("pool", "eu"), ("zone", "a\"b\\c")]),
            ),
        ];
        for (text, want) in ok {
            assert_eq!(parse_selector(text).as_ref(), Ok(want), "{text}");
        }
        let bad: &[(&str, &str)] = &[
            ("", "\"\" is not a metric name"),
            ("9lives", "is not a metric name"),
            ("a-b", "is not a metric name"),
            (r#"m{pool=~"e.*"}"#, "only = matchers are supported, not =~"),
            (r#"m{pool!="eu"}"#, "only = matchers are supported, not != or !~"),
            ("m{pool=eu}", "must be in double quotes"),
            (r#"m{pool="eu"#, "no closing quote"),
            (r#"m{pool="eu" zone="a"}"#, "expected , or }"),
            (r#"m{pool="a",pool="b"}"#, "matched twice"),
            (r#"m{pool="a"} x"#, "text after the closing }"),
            (r#"m{="a"}"#, "expected a label name"),
        ];
        for (text, want) in bad {
            let e = parse_selector(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn pointers_follow_rfc_6901() {
        // The pointers of RFC 6901 section 5.
        for p in
            ["", "/foo", "/foo/0", "/", "/a~1b", "/c%d", "/e^f", "/g|h", "/i\\j", "/ ", "/m~0n"]
        {
            assert_eq!(check_pointer(p), Ok(()), "{p}");
        }
        for p in ["foo", "/a~2b", "/a~"] {
            assert!(check_pointer(p).is_err(), "{p}");
        }
    }
}
