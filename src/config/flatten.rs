//! `flatten:`: which resolvers look flattened host names up, and how long their addresses
//! are served (`docs/configuration.md`). Without `flatten.resolvers` the host's
//! `/etc/resolv.conf` names them, as for any program on the host.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use super::check::{duration, int_in};
use super::raw::{Loc, RawFlatten};
use crate::diag::{Limit, Pos, Sink};
use crate::model::flat::{FlatRules, FlattenSettings};

/// Most resolvers a configuration lists: each failed lookup may try every one.
pub const MAX_RESOLVERS: usize = 8;

/// Where the default resolvers are read from.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The settings, with the defaults for absent keys. The resolvers of `/etc/resolv.conf`
/// are read only when `flatten.resolvers` is absent.
pub fn build(sink: &mut Sink<'_>, raw: Option<&Loc<RawFlatten>>) -> FlattenSettings {
    let d = FlatRules::default();
    let mut out = FlattenSettings {
        resolvers: Vec::new(),
        resolvers_from: RESOLV_CONF.to_string(),
        timeout: Duration::from_secs(2),
        require_ad: false,
        max_in_flight: 16,
        rules: d,
    };
    let raw = raw.map(|r| &r.value);
    match raw.and_then(|r| r.resolvers.as_ref()) {
        Some(list) => {
            out.resolvers_from = "flatten.resolvers".to_string();
            if list.value.is_empty() || list.value.len() > MAX_RESOLVERS {
                let n = list.value.len();
                sink.on(
                    list,
                    format!("flatten.resolvers needs 1 to {MAX_RESOLVERS} addresses, got {n}"),
                );
            }
            for item in &list.value {
                match resolver_addr(&item.value) {
                    Some(a) => out.resolvers.push(a),
                    None => sink.on(
                        item,
                        format!(
                            "flatten.resolvers: {:?} is not an address or address:port ([v6]:port)",
                            item.value
                        ),
                    ),
                }
            }
        }
        None => out.resolvers = resolv_conf(Path::new(RESOLV_CONF)),
    }
    let Some(raw) = raw else { return out };
    if let Some(v) = &raw.timeout
        && let Some(t) = duration(sink, v, "flatten.timeout")
    {
        if (Duration::from_millis(100)..=Duration::from_secs(30)).contains(&t) {
            out.timeout = t;
        } else {
            sink.on(v, "flatten.timeout must be between 100ms and 30s");
        }
    }
    if let Some(v) = &raw.stale_for
        && let Some(t) = duration(sink, v, "flatten.stale_for")
    {
        if t <= Duration::from_secs(7 * 86_400) {
            out.rules.stale_for = t;
        } else {
            sink.on(v, "flatten.stale_for must be at most 7d");
        }
    }
    if let Some(v) = &raw.stale_ttl {
        out.rules.stale_ttl = int_in(sink, v, 1, 3600, "flatten.stale_ttl").unwrap_or(d.stale_ttl);
    }
    if let Some(v) = &raw.require_ad {
        out.require_ad = v.value;
    }
    if let Some(v) = &raw.max_in_flight {
        out.max_in_flight = int_in(sink, v, 1, 256, "flatten.max_in_flight").unwrap_or(16);
    }
    out
}

/// Says where a configuration that flattens names has no resolver to ask.
pub fn check_resolvers(sink: &mut Sink<'_>, raw: Option<&Loc<RawFlatten>>, s: &FlattenSettings) {
    if !s.resolvers.is_empty() {
        return;
    }
    let at = raw.map_or(Pos::default(), Pos::of);
    sink.at(
        at,
        format!(
            "flattened endpoints need a resolver: set flatten.resolvers ({RESOLV_CONF} names none)"
        ),
    );
}

/// `192.0.2.1`, `192.0.2.1:5353`, `2001:db8::1` or `[2001:db8::1]:5353`; port 53 unless
/// given, never 0.
fn resolver_addr(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    let addr = match text.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, 53),
        Err(_) => text.parse::<SocketAddr>().ok()?,
    };
    (addr.port() != 0 && !addr.ip().is_unspecified() && !addr.ip().is_multicast()).then_some(addr)
}

/// The `nameserver` lines of a resolv.conf, at most `MAX_RESOLVERS`; none when it cannot
/// be read.
fn resolv_conf(path: &Path) -> Vec<SocketAddr> {
    let limit = Limit { bytes: 64 * 1024, set_by: "the resolv.conf size limit" };
    let Ok(text) = crate::diag::read_limited(path, limit) else { return Vec::new() };
    parse_resolv_conf(&text)
}

fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next()).flatten()
        })
        // A link-local address with a zone (`fe80::1%eth0`) is not parsed: skipped.
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .take(MAX_RESOLVERS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolver_addresses() {
        let cases: &[(&str, Option<&str>)] = &[
            ("127.0.0.1", Some("127.0.0.1:53")),
            ("127.0.0.1:5300", Some("127.0.0.1:5300")),
            ("::1", Some("[::1]:53")),
            ("[::1]:5300", Some("[::1]:5300")),
            ("127.0.0.1:0", None),
            ("0.0.0.0", None),
            ("resolver.example.", None),
            ("127.0.0.1:99999", None),
        ];
        for (text, want) in cases {
            let want = want.map(|w| w.parse::<SocketAddr>().unwrap());
            assert_eq!(resolver_addr(text), want, "{text}");
        }
    }

    #[test]
    fn resolv_conf_nameservers() {
        let text = "# comment\nsearch example.com\nnameserver 192.0.2.53\nnameserver  2001:db8::53\noptions edns0\nnameserver fe80::1%eth0\n";
        let got = parse_resolv_conf(text);
        let want: Vec<SocketAddr> =
            vec!["192.0.2.53:53".parse().unwrap(), "[2001:db8::53]:53".parse().unwrap()];
        assert_eq!(got, want);
    }
}
