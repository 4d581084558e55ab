//! The settings of dns, udp, icmp, json and prometheus monitors
//! (`docs/configuration.md`, "monitor"),
//! merged like the other monitor fields and validated into `ProbeParams`.

use std::net::IpAddr;
use std::time::Duration;

use super::check::{duration, int_in};
use super::monitor::pick;
use super::raw::{Loc, RawMonitor, StatusSpec};
use crate::diag::{Pos, Sink};
use crate::model::Protocol;
use crate::model::probe_params::{
    DnsParams, FeedParams, FeedValue, GrpcParams, IcmpParams, MissingData, ProbeParams, RCODES,
    ReplyPattern, Threshold, UdpParams,
};

/// The longest udp payload: one datagram that fits any path's MTU.
pub const MAX_SEND: usize = 512;

type Ep<'a> = Option<&'a RawMonitor>;

/// The settings of `protocol`; errors for fields of another protocol.
pub fn resolve(
    sink: &mut Sink<'_>,
    ep: Ep<'_>,
    pr: Ep<'_>,
    protocol: Protocol,
    at: Pos,
) -> ProbeParams {
    only(sink, ep, pr, protocol);
    match protocol {
        Protocol::Http | Protocol::Https | Protocol::Tcp => ProbeParams::None,
        // Not probed: their settings are `external`'s.
        Protocol::Pushed | Protocol::File => ProbeParams::None,
        Protocol::Dns => ProbeParams::Dns(dns(sink, ep, pr, at)),
        Protocol::Udp => ProbeParams::Udp(udp(sink, ep, pr, at)),
        Protocol::Icmp => ProbeParams::Icmp(icmp(sink, ep, pr)),
        Protocol::Json | Protocol::Prometheus => {
            ProbeParams::Feed(feed(sink, ep, pr, protocol, at))
        }
        Protocol::Grpc => {
            let service = pick(ep, pr, |m| m.service.as_deref());
            let tls = pick(ep, pr, |m| m.tls.as_deref());
            ProbeParams::Grpc(GrpcParams {
                service: service.map_or_else(String::new, |s| s.value.clone()),
                tls: tls.is_some_and(|t| t.value),
            })
        }
    }
}

/// Every field set for a protocol it does not belong to is an error where it is written.
fn only(sink: &mut Sink<'_>, ep: Ep<'_>, pr: Ep<'_>, protocol: Protocol) {
    let dns = protocol == Protocol::Dns;
    let udp = protocol == Protocol::Udp;
    let icmp = protocol == Protocol::Icmp;
    let json = protocol == Protocol::Json;
    let feed = json || protocol == Protocol::Prometheus;
    let mut check = |set: Option<Pos>, key: &str, fits: bool, what: &str| {
        if let (Some(pos), false) = (set, fits) {
            sink.at(pos, format!("{key} is only for {what} monitors"));
        }
    };
    let pos = |f: fn(&RawMonitor) -> Option<Pos>| pick_pos(ep, pr, f);
    check(pos(|m| m.query_name.as_deref().map(Pos::of)), "query_name", dns, "dns");
    check(pos(|m| m.query_type.as_deref().map(Pos::of)), "query_type", dns, "dns");
    check(pos(|m| m.expected_rcode.as_deref().map(Pos::of)), "expected_rcode", dns, "dns");
    check(pos(|m| m.answer_contains.as_deref().map(Pos::of)), "answer_contains", dns, "dns");
    check(pos(|m| m.send.as_deref().map(Pos::of)), "send", udp, "udp");
    check(pos(|m| m.expect.as_deref().map(Pos::of)), "expect", udp, "udp");
    check(pos(|m| m.count.as_deref().map(Pos::of)), "count", icmp, "icmp");
    check(pos(|m| m.max_loss.as_deref().map(Pos::of)), "max_loss", icmp, "icmp");
    check(pos(|m| m.max_rtt.as_deref().map(Pos::of)), "max_rtt", icmp, "icmp");
    let feeds = "json and prometheus";
    check(pos(|m| m.url.as_deref().map(Pos::of)), "url", feed, feeds);
    check(pos(|m| m.pointer.as_deref().map(Pos::of)), "pointer", json, "json");
    let prometheus = protocol == Protocol::Prometheus;
    check(pos(|m| m.metric.as_deref().map(Pos::of)), "metric", prometheus, "prometheus");
    check(pos(|m| m.healthy_when.as_deref().map(Pos::of)), "healthy_when", feed, feeds);
    let missing_fits = feed || !protocol.is_probed();
    let with_missing = "json, prometheus, pushed and file";
    check(pos(|m| m.missing.as_deref().map(Pos::of)), "missing", missing_fits, with_missing);
    let grpc = protocol == Protocol::Grpc;
    check(pos(|m| m.service.as_deref().map(Pos::of)), "service", grpc, "grpc");
    check(pos(|m| m.tls.as_deref().map(Pos::of)), "tls", grpc, "grpc");
}

/// Where the effective value of a field is written: the endpoint's, else the profile's.
fn pick_pos(ep: Ep<'_>, pr: Ep<'_>, f: fn(&RawMonitor) -> Option<Pos>) -> Option<Pos> {
    ep.and_then(f).or_else(|| pr.and_then(f))
}

fn dns(sink: &mut Sink<'_>, ep: Ep<'_>, pr: Ep<'_>, at: Pos) -> DnsParams {
    let query_name = match pick(ep, pr, |m| m.query_name.as_deref()) {
        None => {
            sink.at(at, "a dns monitor needs a query_name");
            String::new()
        }
        Some(v) => match crate::wire::name::WireName::parse(&v.value) {
            Ok(name) => name.to_string(),
            Err(e) => {
                sink.on(v, format!("query_name: invalid name {:?}: {e}", v.value));
                String::new()
            }
        },
    };
    let query_type = pick(ep, pr, |m| m.query_type.as_deref()).map_or(1, |v| query_type(sink, v));
    let expected_rcode =
        pick(ep, pr, |m| m.expected_rcode.as_deref()).map_or(0, |v| rcode(sink, v));
    let answer_contains = pick(ep, pr, |m| m.answer_contains.as_deref()).map(|v| {
        if v.value.is_empty() {
            sink.on(v, "answer_contains must not be empty");
        }
        // An address in its canonical form, so that `::0001` finds `::1`.
        v.value.parse::<IpAddr>().map_or_else(|_| v.value.clone(), |ip| ip.to_string())
    });
    DnsParams { query_name, query_type, expected_rcode, answer_contains }
}

fn query_type(sink: &mut Sink<'_>, v: &Loc<String>) -> u16 {
    use hickory_proto::rr::RecordType;
    match v.value.to_ascii_uppercase().parse::<RecordType>() {
        Ok(t) if !matches!(t, RecordType::Unknown(_) | RecordType::ZERO | RecordType::OPT) => {
            u16::from(t)
        }
        _ => {
            sink.on(v, format!("query_type: unknown record type {:?}", v.value));
            1
        }
    }
}

fn rcode(sink: &mut Sink<'_>, v: &Loc<StatusSpec>) -> u16 {
    let code = match &v.value {
        StatusSpec::Code(n) => u16::try_from(n.0).ok().filter(|c| *c <= 4095),
        StatusSpec::Text(t) => {
            let t = t.trim().to_ascii_uppercase();
            RCODES
                .iter()
                .find(|(n, _)| *n == t)
                .map(|(_, c)| *c)
                .or_else(|| t.parse::<u16>().ok().filter(|c| *c <= 4095))
        }
    };
    code.unwrap_or_else(|| {
        sink.on(v, "expected_rcode must be an RCODE name (NOERROR, NXDOMAIN, ...) or 0..4095");
        0
    })
}

fn udp(sink: &mut Sink<'_>, ep: Ep<'_>, pr: Ep<'_>, at: Pos) -> UdpParams {
    let send = match pick(ep, pr, |m| m.send.as_deref()) {
        None => {
            sink.at(at, "a udp monitor needs a payload to send");
            Vec::new()
        }
        Some(v) => {
            let bytes = bytes(sink, v, "send");
            if bytes.is_empty() || bytes.len() > MAX_SEND {
                sink.on(v, format!("send must be 1 to {MAX_SEND} bytes, got {}", bytes.len()));
            }
            bytes
        }
    };
    let expect = pick(ep, pr, |m| m.expect.as_deref()).and_then(|v| {
        let len = v.value.len();
        if len > MAX_SEND {
            sink.on(v, format!("expect must be at most {MAX_SEND} bytes, got {len}"));
            return None;
        }
        match ReplyPattern::new(&v.value) {
            Ok(pattern) => Some(pattern),
            Err(e) => {
                sink.on(v, format!("expect: {e}"));
                None
            }
        }
    });
    UdpParams { send, expect }
}

/// Text with the escapes `\n`, `\r`, `\t`, `\0`, `\\` and `\xHH` as bytes.
fn bytes(sink: &mut Sink<'_>, v: &Loc<String>, key: &str) -> Vec<u8> {
    match unescape(&v.value) {
        Ok(b) => b,
        Err(e) => {
            sink.on(v, format!("{key}: {e}"));
            Vec::new()
        }
    }
}

/// The bytes `text` stands for, or what is wrong with one of its escapes.
pub fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some((&e, tail)) = rest.split_first() else {
            return Err("a lone \\ at the end (write \\\\ for a backslash)".to_string());
        };
        rest = tail;
        out.push(match e {
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'0' => 0,
            b'\\' => b'\\',
            b'x' => {
                let hex = rest.get(..2).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
                let Some(byte) = byte else {
                    return Err("\\x must be followed by two hex digits".to_string());
                };
                rest = &rest[2..];
                byte
            }
            other => {
                let c = char::from(other);
                return Err(format!("unknown escape \\{c} (known: \\n \\r \\t \\0 \\\\ \\xHH)"));
            }
        });
    }
    Ok(out)
}

fn feed(sink: &mut Sink<'_>, ep: Ep<'_>, pr: Ep<'_>, protocol: Protocol, at: Pos) -> FeedParams {
    let json = protocol == Protocol::Json;
    let what = if json { "json" } else { "prometheus" };
    let url = match pick(ep, pr, |m| m.url.as_deref()) {
        None => {
            sink.at(at, format!("a {what} monitor needs a url"));
            String::new()
        }
        Some(v) => {
            if let Err(why) = check_url(&v.value) {
                sink.on(v, format!("url: {why}"));
            }
            v.value.clone()
        }
    };
    let value = if json {
        match pick(ep, pr, |m| m.pointer.as_deref()) {
            None => {
                sink.at(at, "a json monitor needs a pointer (\"\" for the whole document)");
                FeedValue::Pointer(String::new())
            }
            Some(v) => {
                if let Err(e) = super::load::check_pointer(&v.value) {
                    sink.on(v, format!("pointer: {e}"));
                }
                FeedValue::Pointer(v.value.clone())
            }
        }
    } else {
        match pick(ep, pr, |m| m.metric.as_deref()) {
            None => {
                sink.at(at, "a prometheus monitor needs a metric");
                FeedValue::Metric { name: String::new(), labels: Vec::new() }
            }
            Some(v) => match super::load::parse_selector(&v.value) {
                Ok(s) => FeedValue::Metric { name: s.name, labels: s.labels },
                Err(e) => {
                    sink.on(v, format!("metric: {e}"));
                    FeedValue::Metric { name: String::new(), labels: Vec::new() }
                }
            },
        }
    };
    let healthy_when = match pick(ep, pr, |m| m.healthy_when.as_deref()) {
        None if !json => {
            sink.at(at, "a prometheus monitor needs healthy_when (\">= 1\", \"< 0.8\", ...)");
            None
        }
        None => None,
        Some(v) => {
            let t = Threshold::parse(&v.value);
            if t.is_none() {
                sink.on(
                    v,
                    "healthy_when must be a comparison (<, <=, >, >=, ==, !=) and a number, \
                     such as \"< 0.8\"",
                );
            }
            t
        }
    };
    let missing = match pick(ep, pr, |m| m.missing.as_deref()) {
        None => MissingData::LastKnown,
        Some(v) => MissingData::parse(&v.value).unwrap_or_else(|| {
            let got = &v.value;
            sink.on(v, format!("missing must be healthy, unhealthy or last_known, got {got:?}"));
            MissingData::LastKnown
        }),
    };
    FeedParams { url, value, healthy_when, missing }
}

/// What the feed reader needs of a URL: http or https, a host, no user information.
fn check_url(text: &str) -> Result<(), String> {
    let uri: http::Uri =
        text.parse().map_err(|e: http::uri::InvalidUri| format!("{text:?}: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!("{text:?} must start with http:// or https://"));
    }
    match uri.authority() {
        None => Err(format!("{text:?} has no host")),
        Some(a) if a.as_str().contains('@') => {
            Err(format!("{text:?}: user information is not supported"))
        }
        Some(a) if a.host().is_empty() => Err(format!("{text:?} has no host")),
        Some(_) => Ok(()),
    }
}

fn icmp(sink: &mut Sink<'_>, ep: Ep<'_>, pr: Ep<'_>) -> IcmpParams {
    let count = pick(ep, pr, |m| m.count.as_deref())
        .map_or(Some(3), |v| int_in(sink, v, 1, 10, "count"))
        .unwrap_or(3);
    let max_loss_percent = pick(ep, pr, |m| m.max_loss.as_deref())
        .map_or(Some(67), |v| int_in(sink, v, 0, 99, "max_loss"))
        .unwrap_or(67);
    let max_rtt = pick(ep, pr, |m| m.max_rtt.as_deref()).and_then(|v| {
        let d = duration(sink, v, "max_rtt")?;
        if d.is_zero() || d > Duration::from_secs(60) {
            sink.on(v, "max_rtt must be above 0 and at most 1m");
        }
        Some(d)
    });
    IcmpParams { count, max_loss_percent, max_rtt }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_table() {
        let cases: &[(&str, Result<&[u8], &str>)] = &[
            ("PING", Ok(b"PING")),
            ("a\\r\\nb", Ok(b"a\r\nb")),
            ("\\x00\\xffz\\t\\0\\\\", Ok(b"\x00\xffz\t\0\\")),
            ("\\x4", Err("\\x must be followed by two hex digits")),
            ("\\xg0", Err("\\x must be followed by two hex digits")),
            ("end\\", Err("a lone \\ at the end (write \\\\ for a backslash)")),
            ("\\q", Err("unknown escape \\q (known: \\n \\r \\t \\0 \\\\ \\xHH)")),
        ];
        for (text, want) in cases {
            let got = unescape(text);
            assert_eq!(got.as_deref().map_err(String::as_str), *want, "{text:?}");
        }
    }
}
