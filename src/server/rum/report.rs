//! A beacon's report: `{"v":1,"m":[{"region":"eu-west","ms":23.4}]}`, checked whole before
//! anything of it is stored, so a refused report stores nothing, not even its valid
//! entries.

use serde::Deserialize;

use crate::geo::rum::RumSettings;

/// Entries one report may hold.
pub const MAX_ENTRIES: usize = 64;

/// The longest round trip believed, in ms: a minute.
pub const MAX_MS: f64 = 60_000.0;

/// Why a report was refused; each maps to its HTTP status and metric label.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("malformed report: {0}")]
    Malformed(String),
    #[error("report larger than {0} bytes")]
    Oversized(usize),
    #[error("unknown region {0:?}")]
    UnknownRegion(String),
    #[error("absurd time {0} ms for {1:?} (above 0, at most 60000)")]
    Absurd(f64, String),
    #[error("too many reports from this address")]
    RateLimited,
}

impl Refusal {
    /// The `result` label of `steerdns_rum_reports_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::Oversized(_) => "oversized",
            Refusal::UnknownRegion(_) | Refusal::Absurd(..) => "invalid",
            Refusal::RateLimited => "rate_limited",
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            Refusal::Malformed(_) => 400,
            Refusal::Oversized(_) => 413,
            Refusal::UnknownRegion(_) | Refusal::Absurd(..) => 422,
            Refusal::RateLimited => 429,
        }
    }
}

#[derive(Deserialize)]
struct Body {
    v: u32,
    m: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    region: String,
    ms: f64,
}

/// The `(target column, ms)` pairs of a report body, or why it is refused.
pub fn parse(body: &[u8], settings: &RumSettings) -> Result<Vec<(usize, f32)>, Refusal> {
    if body.len() > settings.max_report_bytes {
        return Err(Refusal::Oversized(settings.max_report_bytes));
    }
    let body: Body = serde_json::from_slice(body).map_err(|e| Refusal::Malformed(e.to_string()))?;
    if body.v != 1 {
        return Err(Refusal::Malformed(format!("version {} (this server reads 1)", body.v)));
    }
    if body.m.is_empty() || body.m.len() > MAX_ENTRIES {
        return Err(Refusal::Malformed(format!("m must hold 1 to {MAX_ENTRIES} entries")));
    }
    body.m
        .into_iter()
        .map(|e| {
            let column = settings
                .column_of(&e.region)
                .ok_or_else(|| Refusal::UnknownRegion(e.region.clone()))?;
            if !(e.ms.is_finite() && e.ms > 0.0 && e.ms <= MAX_MS) {
                return Err(Refusal::Absurd(e.ms, e.region));
            }
            Ok((column, e.ms as f32))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::geo::rum::{Aggregation, RumTarget};

    fn settings() -> RumSettings {
        let target = |region: &str, i| RumTarget {
            region: region.into(),
            region_index: i,
            url: format!("https://{region}.example.com/r.gif"),
        };
        RumSettings {
            listen: vec![],
            targets: vec![target("eu-west", 2), target("us-east", 0)],
            aggregation: Aggregation::default(),
            trusted_proxies: vec![],
            reports_per_minute: 30,
            burst: 10,
            max_report_bytes: 200,
            publish_interval: Duration::from_secs(5),
            state_file: None,
            save_interval: Duration::from_secs(60),
            share_interval: Duration::from_secs(10),
        }
    }

    #[test]
    fn reports_are_read_or_refused_whole() {
        let s = settings();
        let ok = |b: &str| parse(b.as_bytes(), &s);
        assert_eq!(
            ok(r#"{"v":1,"m":[{"region":"eu-west","ms":23.4},{"region":"us-east","ms":90}]}"#),
            Ok(vec![(0, 23.4), (1, 90.0)])
        );
        // Unknown fields are ignored, for newer beacons.
        assert_eq!(
            ok(r#"{"v":1,"m":[{"region":"us-east","ms":1,"x":2}],"page":"/"}"#),
            Ok(vec![(1, 1.0)])
        );
        let big =
            format!(r#"{{"v":1,"m":[{{"region":"eu-west","ms":1}}],"pad":"{}"}}"#, "x".repeat(200));
        let many = format!(
            r#"{{"v":1,"m":[{}]}}"#,
            vec![r#"{"region":"eu-west","ms":1}"#; MAX_ENTRIES + 1].join(",")
        );
        let refused: &[(&str, &str)] = &[
            ("", "malformed"),
            ("not json", "malformed"),
            (r#"{"v":2,"m":[{"region":"eu-west","ms":1}]}"#, "malformed"),
            (r#"{"v":1,"m":[]}"#, "malformed"),
            (r#"{"v":1}"#, "malformed"),
            (r#"{"v":1,"m":[{"region":"eu-west","ms":"fast"}]}"#, "malformed"),
            (r#"{"v":1,"m":[{"region":"eu-west","ms":1e999}]}"#, "malformed"),
            (r#"{"v":1,"m":[{"region":"eu-west","ms":5},{"region":"mars","ms":5}]}"#, "invalid"),
            (r#"{"v":1,"m":[{"region":"eu-west","ms":5},{"region":"us-east","ms":0}]}"#, "invalid"),
            (r#"{"v":1,"m":[{"region":"eu-west","ms":-3}]}"#, "invalid"),
            (r#"{"v":1,"m":[{"region":"eu-west","ms":60000.5}]}"#, "invalid"),
            (&big, "oversized"),
        ];
        for (body, label) in refused {
            let got = ok(body).expect_err(body);
            assert_eq!(got.label(), *label, "{body}: {got}");
        }
        let s = RumSettings { max_report_bytes: 1 << 20, ..settings() };
        assert_eq!(parse(many.as_bytes(), &s).unwrap_err().label(), "malformed");
        assert_eq!(ok(r#"{"v":1,"m":[{"region":"eu-west","ms":60000}]}"#), Ok(vec![(0, 60000.0)]));
    }
}
