//! `rum:`: real user measurements (`docs/rum.md`). Checks every key at its position and
//! names targets by latency-table region, so the measured table's columns line up with
//! the regions performance routing ranks.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;

use super::check::{duration_in, int_or, size};
use super::raw::{Loc, RawRum};
use crate::diag::Sink;
use crate::geo::World;
use crate::geo::rum::{Aggregation, RumSettings, RumTarget};

/// `rum:` checked; `base` is the configuration's directory, `state_file` the top-level
/// `state_file` resolved (the default state file of the samples is next to it).
pub fn build(
    sink: &mut Sink<'_>,
    raw: Option<&Loc<RawRum>>,
    world: &World,
    base: &Path,
    state_file: Option<&Path>,
) -> Option<RumSettings> {
    let raw = &raw?.value;
    let defaults = Aggregation::default();
    let mut listen = Vec::new();
    for a in &raw.listen.value {
        match a.value.parse::<SocketAddr>() {
            Ok(addr) if listen.contains(&addr) => {
                sink.on(a, format!("rum.listen: {addr} is listed twice"))
            }
            Ok(addr) => listen.push(addr),
            Err(_) => sink.on(a, format!("rum.listen: address {:?} must be IP:PORT", a.value)),
        }
    }
    if raw.listen.value.is_empty() {
        sink.on(&raw.listen, "rum.listen: at least one address is needed");
    }
    let targets = targets(sink, raw, world);
    let ipv4_prefix =
        int_or(sink, raw.ipv4_prefix.as_ref(), 8, 32, "rum.ipv4_prefix", defaults.ipv4_prefix);
    let ipv6_prefix =
        int_or(sink, raw.ipv6_prefix.as_ref(), 16, 128, "rum.ipv6_prefix", defaults.ipv6_prefix);
    let min_samples =
        int_or(sink, raw.min_samples.as_ref(), 1, 16, "rum.min_samples", defaults.min_samples);
    let window = raw
        .window
        .as_ref()
        .and_then(|w| duration_in(sink, w, "rum.window", Duration::from_secs(1), Duration::MAX))
        .unwrap_or(defaults.window);
    let half_life = raw
        .half_life
        .as_ref()
        .and_then(|h| duration_in(sink, h, "rum.half_life", Duration::from_secs(1), window))
        .unwrap_or(defaults.half_life.min(window));
    let max_networks = int_or(
        sink,
        raw.max_networks.as_ref(),
        1,
        10_000_000,
        "rum.max_networks",
        defaults.max_networks,
    );
    let mut trusted_proxies = Vec::new();
    for p in &raw.trusted_proxies {
        match p.value.parse::<IpNet>() {
            Ok(net) if net.trunc() == net => trusted_proxies.push(net),
            Ok(net) => sink
                .on(p, format!("rum.trusted_proxies: {net} has host bits set ({})", net.trunc())),
            Err(_) => match p.value.parse::<std::net::IpAddr>() {
                Ok(addr) => trusted_proxies.push(IpNet::from(addr)),
                Err(_) => sink.on(
                    p,
                    format!("rum.trusted_proxies: {:?} is not a CIDR or an address", p.value),
                ),
            },
        }
    }
    let reports_per_minute =
        int_or(sink, raw.reports_per_minute.as_ref(), 1, 100_000, "rum.reports_per_minute", 30u32);
    let burst = int_or(sink, raw.burst.as_ref(), 1, 100_000, "rum.burst", 10u32);
    let max_report_bytes = match &raw.max_report_size {
        Some(v) => match size(sink, v, "rum.max_report_size") {
            Some(n @ 64..=1_048_576) => n as usize,
            Some(n) => {
                sink.on(
                    v,
                    format!("rum.max_report_size must be between 64 bytes and 1MiB, got {n}"),
                );
                4096
            }
            None => 4096,
        },
        None => 4096,
    };
    let margin_ms =
        float_in(sink, raw.margin_ms.as_ref(), 0.0, 10_000.0, "rum.margin_ms", defaults.margin_ms);
    let margin_percent = float_in(
        sink,
        raw.margin_percent.as_ref(),
        0.0,
        100.0,
        "rum.margin_percent",
        defaults.margin_percent,
    );
    let publish_interval = raw
        .publish_interval
        .as_ref()
        .and_then(|p| {
            duration_in(
                sink,
                p,
                "rum.publish_interval",
                Duration::from_millis(100),
                Duration::from_secs(600),
            )
        })
        .unwrap_or(Duration::from_secs(5));
    let mut interval = |v: Option<&Loc<String>>, key: &str, lo: u64, hi: u64, default: u64| {
        v.and_then(|v| duration_in(sink, v, key, Duration::from_secs(lo), Duration::from_secs(hi)))
            .unwrap_or(Duration::from_secs(default))
    };
    let save_interval = interval(raw.save_interval.as_ref(), "rum.save_interval", 1, 3600, 60);
    let share_interval = interval(raw.share_interval.as_ref(), "rum.share_interval", 1, 600, 10);
    let state_file = match &raw.state_file {
        Some(f) if f.value.trim().is_empty() => {
            sink.on(f, "rum.state_file: a file name is needed");
            None
        }
        Some(f) => Some(base.join(&f.value)),
        None => state_file.map(|p| {
            let mut name = p.as_os_str().to_os_string();
            name.push(".rum");
            PathBuf::from(name)
        }),
    };
    let aggregation = Aggregation {
        ipv4_prefix,
        ipv6_prefix,
        min_samples,
        window,
        half_life,
        max_networks,
        margin_ms,
        margin_percent,
    };
    Some(RumSettings {
        listen,
        targets,
        aggregation,
        trusted_proxies,
        reports_per_minute,
        burst,
        max_report_bytes,
        publish_interval,
        state_file,
        save_interval,
        share_interval,
    })
}

/// Each target names a region of the latency table, once, and an http(s) URL.
fn targets(sink: &mut Sink<'_>, raw: &RawRum, world: &World) -> Vec<RumTarget> {
    let regions = world.latency.as_ref().map(|t| t.regions()).unwrap_or_default();
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    if raw.targets.value.is_empty() {
        sink.on(&raw.targets, "rum.targets: at least one target is needed");
    }
    for t in &raw.targets.value {
        let t = &t.value;
        let name = t.region.value.as_str();
        let Some(index) = regions.iter().position(|r| r.name == name) else {
            let known: Vec<&str> = regions.iter().map(|r| r.name.as_str()).collect();
            let message = if world.latency.is_none() {
                format!(
                    "rum.targets: region {name:?} needs the latency table (latency.table) that defines it"
                )
            } else {
                format!(
                    "rum.targets: unknown region {name:?} (the latency table has {})",
                    known.join(", ")
                )
            };
            sink.on(&t.region, message);
            continue;
        };
        if !seen.insert(name.to_string()) {
            sink.on(&t.region, format!("rum.targets: region {name:?} has a target already"));
            continue;
        }
        let url = t.url.value.trim();
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        if !scheme_ok
            || url.len() <= "https://".len()
            || url.chars().any(|c| c.is_whitespace() || c == '"')
        {
            sink.on(&t.url, format!("rum.targets: {url:?} is not an http or https URL"));
            continue;
        }
        out.push(RumTarget { region: name.to_string(), region_index: index, url: url.to_string() });
    }
    out
}

fn float_in(
    sink: &mut Sink<'_>,
    v: Option<&Loc<f64>>,
    lo: f64,
    hi: f64,
    key: &str,
    default: f64,
) -> f64 {
    match v {
        Some(x) if (lo..=hi).contains(&x.value) => x.value,
        Some(x) => {
            sink.on(x, format!("{key} must be between {lo} and {hi}, got {}", x.value));
            default
        }
        None => default,
    }
}
