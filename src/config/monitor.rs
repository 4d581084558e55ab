//! Health monitors: the profile's `monitor` with an endpoint's `monitor` merged over it
//! field by field, validated after the merge (`docs/configuration.md`, "monitor").

use std::time::Duration;

use super::check::{duration, int_in};
use super::raw::{Int, Loc, RawMonitor, StatusSpec};
use crate::diag::{Pos, Sink};
use crate::model::{Monitor, Protocol};

/// The effective value of one field: the endpoint's when set, else the profile's.
pub(super) fn pick<'a, T>(
    ep: Option<&'a RawMonitor>,
    pr: Option<&'a RawMonitor>,
    f: impl Fn(&'a RawMonitor) -> Option<&'a T>,
) -> Option<&'a T> {
    ep.and_then(&f).or_else(|| pr.and_then(&f))
}

/// Merges and validates; `at` locates errors about missing fields (the endpoint).
pub fn resolve(
    sink: &mut Sink<'_>,
    profile: Option<&RawMonitor>,
    endpoint: Option<&RawMonitor>,
    at: Pos,
) -> Option<Monitor> {
    let before = sink.errors.len();
    let protocol = protocol(sink, pick(endpoint, profile, |m| m.protocol.as_deref()))?;
    let name = name(sink, pick(endpoint, profile, |m| m.name.as_deref()), protocol);
    if !protocol.is_probed() {
        let external = super::external::resolve(sink, endpoint, profile, protocol, at);
        // The profile's `monitor` gives no defaults to external monitors, so only the
        // endpoint's own keys are checked against the protocol.
        let params = super::probe_params::resolve(sink, endpoint, None, protocol, at);
        let monitor = Monitor {
            name,
            protocol,
            port: 0,
            path: String::new(),
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            tolerated_failures: 0,
            expected_status: Vec::new(),
            headers: Vec::new(),
            body_contains: None,
            tls_verify: false,
            params,
            external,
        };
        return (sink.errors.len() == before).then_some(monitor);
    }
    super::external::not_on_a_probe(sink, endpoint, protocol);
    let port = port(sink, pick(endpoint, profile, |m| m.port.as_deref()), protocol, at);
    let path = pick(endpoint, profile, |m| m.path.as_deref());
    if let (Some(p), false) = (path, matches!(protocol, Protocol::Http | Protocol::Https)) {
        sink.on(p, format!("path is not allowed on a {} monitor", Protocol::as_str(protocol)));
    }
    let path = path.map_or_else(|| "/".to_string(), |p| p.value.clone());
    if !path.starts_with('/') {
        sink.at(at, format!("path must start with '/', got {path:?}"));
    }
    let (interval, timeout) = timing(sink, endpoint, profile);
    let tolerated = pick(endpoint, profile, |m| m.tolerated_failures.as_deref())
        .map_or(Some(3), |v| int_in(sink, v, 0, 9, "tolerated_failures"));
    let expected = expected_status(sink, pick(endpoint, profile, |m| m.expected_status.as_deref()));
    let headers = headers(sink, pick(endpoint, profile, |m| m.headers.as_deref()));
    let params = super::probe_params::resolve(sink, endpoint, profile, protocol, at);
    let monitor = Monitor {
        name,
        protocol,
        port: port?,
        path,
        interval,
        timeout,
        tolerated_failures: tolerated?,
        expected_status: expected,
        headers,
        body_contains: pick(endpoint, profile, |m| m.body_contains.as_deref())
            .map(|b| b.value.clone()),
        tls_verify: pick(endpoint, profile, |m| m.tls_verify.as_deref()).is_some_and(|b| b.value),
        external: None,
        params,
    };
    (sink.errors.len() == before).then_some(monitor)
}

fn protocol(sink: &mut Sink<'_>, v: Option<&Loc<String>>) -> Option<Protocol> {
    match v.map(|s| s.value.as_str()) {
        None | Some("http") => Some(Protocol::Http),
        Some("https") => Some(Protocol::Https),
        Some("tcp") => Some(Protocol::Tcp),
        Some("dns") => Some(Protocol::Dns),
        Some("udp") => Some(Protocol::Udp),
        Some("icmp") => Some(Protocol::Icmp),
        Some("json") => Some(Protocol::Json),
        Some("prometheus") => Some(Protocol::Prometheus),
        Some("grpc") => Some(Protocol::Grpc),
        Some("pushed") => Some(Protocol::Pushed),
        Some("file") => Some(Protocol::File),
        Some(other) => {
            let known = "http, https, tcp, dns, udp, icmp, json, prometheus, grpc, pushed or file";
            sink.on(v?, format!("protocol must be {known}, got {other:?}"));
            None
        }
    }
}

/// The monitor's name: as written, else its protocol's.
fn name(sink: &mut Sink<'_>, v: Option<&Loc<String>>, protocol: Protocol) -> String {
    let Some(v) = v else { return protocol.as_str().to_string() };
    let ok = !v.value.is_empty()
        && v.value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_".contains(&b));
    if !ok {
        sink.on(v, format!("monitor name {:?} must match [a-z0-9_-]+", v.value));
    }
    v.value.clone()
}

fn port(sink: &mut Sink<'_>, v: Option<&Loc<Int>>, protocol: Protocol, at: Pos) -> Option<u16> {
    match (v, protocol) {
        (Some(v), Protocol::Icmp | Protocol::Json | Protocol::Prometheus) => {
            let message = match protocol {
                Protocol::Icmp => "port is not allowed on an icmp monitor".to_string(),
                _ => format!(
                    "port is not allowed on a {} monitor: the url gives it",
                    Protocol::as_str(protocol)
                ),
            };
            sink.on(v, message);
            None
        }
        (Some(v), _) => int_in(sink, v, 1, 65535, "port"),
        (None, Protocol::Http) => Some(80),
        (None, Protocol::Https) => Some(443),
        (None, Protocol::Dns) => Some(53),
        (None, Protocol::Tcp | Protocol::Udp | Protocol::Grpc) => {
            sink.at(at, format!("a {} monitor needs a port", Protocol::as_str(protocol)));
            None
        }
        (None, Protocol::Pushed | Protocol::File) => Some(0),
        // Echoes have no port; 0 keeps the probe key's field meaningless but equal.
        (None, Protocol::Icmp | Protocol::Json | Protocol::Prometheus) => Some(0),
    }
}

/// A second less than the interval, at most 10 s; for intervals under 2 s, half of it (a
/// second less than a 1 s interval would be no time at all).
fn default_timeout(interval: Duration) -> Duration {
    let second_less = interval.saturating_sub(Duration::from_secs(1));
    Duration::from_secs(10).min(second_less.max(interval / 2))
}

fn timing(
    sink: &mut Sink<'_>,
    ep: Option<&RawMonitor>,
    pr: Option<&RawMonitor>,
) -> (Duration, Duration) {
    let interval_v = pick(ep, pr, |m| m.interval.as_deref());
    let interval =
        interval_v.and_then(|v| duration(sink, v, "interval")).unwrap_or(Duration::from_secs(30));
    if let Some(v) = interval_v
        && !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&interval)
    {
        sink.on(v, "interval must be between 1s and 1h");
    }
    let default_timeout = default_timeout(interval);
    let timeout_v = pick(ep, pr, |m| m.timeout.as_deref());
    let timeout = timeout_v.and_then(|v| duration(sink, v, "timeout")).unwrap_or(default_timeout);
    if let Some(v) = timeout_v
        && (timeout >= interval || timeout.is_zero())
    {
        sink.on(
            v,
            format!(
                "timeout must be above 0 and below the interval ({})",
                humantime::format_duration(interval)
            ),
        );
    }
    (interval, timeout)
}

fn expected_status(sink: &mut Sink<'_>, v: Option<&Loc<Vec<Loc<StatusSpec>>>>) -> Vec<(u16, u16)> {
    let Some(list) = v else {
        return vec![(200, 299)];
    };
    if list.value.is_empty() || list.value.len() > 8 {
        sink.on(list, "expected_status must hold 1 to 8 codes or ranges");
    }
    list.value.iter().filter_map(|s| status_range(sink, s)).collect()
}

fn status_range(sink: &mut Sink<'_>, s: &Loc<StatusSpec>) -> Option<(u16, u16)> {
    let parsed = match &s.value {
        StatusSpec::Code(c) => u16::try_from(c.0).ok().map(|c| (c, c)),
        StatusSpec::Text(t) => match t.split_once('-') {
            Some((a, b)) => a.trim().parse().ok().zip(b.trim().parse().ok()),
            None => t.trim().parse().ok().map(|c| (c, c)),
        },
    };
    match parsed {
        Some((a, b)) if (100..=599).contains(&a) && (100..=599).contains(&b) && a <= b => {
            Some((a, b))
        }
        _ => {
            sink.on(
                s,
                "expected_status entries are codes 100-599 (\"200\") or ranges (\"200-299\")",
            );
            None
        }
    }
}

fn headers(
    sink: &mut Sink<'_>,
    v: Option<&Loc<std::collections::BTreeMap<String, String>>>,
) -> Vec<(String, String)> {
    let Some(map) = v else { return Vec::new() };
    if map.value.len() > 8 {
        sink.on(map, "at most 8 headers");
    }
    map.value.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_timeout_table() {
        let ms = Duration::from_millis;
        let cases = [(1000, 500), (1500, 750), (2000, 1000), (5000, 4000), (30_000, 10_000)];
        for (interval, want) in cases {
            assert_eq!(default_timeout(ms(interval)), ms(want), "interval {interval} ms");
        }
    }
}
