//! `probe:`: settings shared by every health probe, today the address probes connect
//! from (`probe.source_address`), which gives each replica on a multi-homed host its own
//! vantage point.

use std::net::IpAddr;

use super::raw::{RawServer, SourceAddresses};
use crate::diag::{Located, Sink};
use crate::model::snapshot::ProbeSource;

pub fn build(sink: &mut Sink<'_>, raw: &RawServer) -> ProbeSource {
    let mut out = ProbeSource::default();
    let Some(list) = raw.probe.as_ref().and_then(|p| p.source_address.as_ref()) else {
        return out;
    };
    // A single address is located at the key's value, a list's at each element.
    let texts: Vec<(&str, _)> = match &list.value {
        SourceAddresses::One(text) => vec![(text.as_str(), list.pos())],
        SourceAddresses::Many(items) => {
            if items.is_empty() {
                let message =
                    "probe.source_address needs an address (leave it out to let the system choose)";
                sink.on(list, message);
            }
            items.iter().map(|a| (a.value.as_str(), a.pos())).collect()
        }
    };
    for (text, pos) in texts {
        match text.parse::<IpAddr>() {
            Err(_) => {
                sink.at(pos, format!("probe.source_address: {text:?} is not an IP address"))
            }
            Ok(ip) if ip.is_unspecified() || ip.is_multicast() => sink.at(
                pos,
                format!("probe.source_address: {ip} cannot be a source address (leave it out to let the system choose)"),
            ),
            Ok(IpAddr::V4(ip)) if out.v4.is_some() => sink.at(
                pos,
                format!("probe.source_address: {ip} is a second IPv4 address (at most one of each family)"),
            ),
            Ok(IpAddr::V6(ip)) if out.v6.is_some() => sink.at(
                pos,
                format!("probe.source_address: {ip} is a second IPv6 address (at most one of each family)"),
            ),
            Ok(IpAddr::V4(ip)) => out.v4 = Some(ip),
            Ok(IpAddr::V6(ip)) => out.v6 = Some(ip),
        }
    }
    out
}
