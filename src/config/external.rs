//! The settings of `pushed` and `file` monitors (`missing`, `file`, `max_age`), and the
//! errors for those settings on a probe monitor.

use std::path::PathBuf;
use std::time::Duration;

use super::check::duration;
use super::monitor::pick;
use super::raw::{Loc, RawMonitor};
use crate::diag::{Pos, Sink};
use crate::model::{ExternalMonitor, MissingData, Protocol};

/// The settings of a `pushed` or `file` monitor. Probe fields the endpoint sets on it are
/// errors; the profile's `monitor` defaults do not apply to it.
pub fn resolve(
    sink: &mut Sink<'_>,
    ep: Option<&RawMonitor>,
    pr: Option<&RawMonitor>,
    protocol: Protocol,
    at: Pos,
) -> Option<ExternalMonitor> {
    if let Some(m) = ep {
        let probe_fields = [
            ("port", m.port.as_deref().map(Pos::of)),
            ("path", m.path.as_deref().map(Pos::of)),
            ("interval", m.interval.as_deref().map(Pos::of)),
            ("timeout", m.timeout.as_deref().map(Pos::of)),
            ("tolerated_failures", m.tolerated_failures.as_deref().map(Pos::of)),
            ("expected_status", m.expected_status.as_deref().map(Pos::of)),
            ("headers", m.headers.as_deref().map(Pos::of)),
            ("body_contains", m.body_contains.as_deref().map(Pos::of)),
            ("tls_verify", m.tls_verify.as_deref().map(Pos::of)),
        ];
        for (key, set) in probe_fields {
            if let Some(pos) = set {
                sink.at(pos, format!("{key} does not apply to a {} monitor", protocol.as_str()));
            }
        }
    }
    let missing = match pick(ep, pr, |m| m.missing.as_deref()) {
        None => Some(MissingData::Unhealthy),
        Some(v) => MissingData::parse(&v.value).or_else(|| {
            let msg =
                format!("missing must be healthy, unhealthy or last_known, got {:?}", v.value);
            sink.on(v, msg);
            None
        }),
    };
    let file = pick(ep, pr, |m| m.file.as_deref());
    let max_age = pick(ep, pr, |m| m.max_age.as_deref());
    let (file, max_age) = if protocol == Protocol::File {
        let file = file_path(sink, file, at);
        (file, max_age.map(|v| age(sink, v)))
    } else {
        for (key, v) in [("file", file), ("max_age", max_age)] {
            if let Some(v) = v {
                sink.on(v, format!("{key} applies to file monitors only"));
            }
        }
        (None, None)
    };
    Some(ExternalMonitor { missing: missing?, file, max_age: max_age.flatten() })
}

fn file_path(sink: &mut Sink<'_>, v: Option<&Loc<String>>, at: Pos) -> Option<PathBuf> {
    match v {
        None => {
            sink.at(at, "a file monitor needs a file");
            None
        }
        Some(v) if v.value.trim().is_empty() => {
            sink.on(v, "file must not be empty");
            None
        }
        Some(v) => Some(PathBuf::from(&v.value)),
    }
}

fn age(sink: &mut Sink<'_>, v: &Loc<String>) -> Option<Duration> {
    let d = duration(sink, v, "max_age")?;
    let range = Duration::from_secs(1)..=Duration::from_secs(7 * 86_400);
    if !range.contains(&d) {
        sink.on(v, "max_age must be between 1s and 7d");
        return None;
    }
    Some(d)
}

/// `file` and `max_age` set on a probe monitor are errors (`missing` is checked with the
/// probe settings: json and prometheus monitors take it).
pub fn not_on_a_probe(sink: &mut Sink<'_>, ep: Option<&RawMonitor>, protocol: Protocol) {
    let Some(m) = ep else { return };
    for (key, v) in [("file", &m.file), ("max_age", &m.max_age)] {
        if let Some(v) = v.as_deref() {
            let msg = format!("{key} does not apply to a {} monitor", protocol.as_str());
            sink.on(v, msg);
        }
    }
}
