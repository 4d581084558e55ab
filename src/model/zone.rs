//! Authoritative zone data: SOA, NS, static records and the names that profiles answer.
//!
//! Record data is encoded to wire format once at load time, so the responder only copies
//! bytes. Every ancestor of a name in the zone exists as a (possibly empty) node, which makes
//! empty non-terminals answer NODATA rather than NXDOMAIN.

use std::sync::Arc;

use crate::FastMap;
use crate::model::ProfileId;
use crate::model::dnssec::ZoneSigning;
use crate::wire::Rtype;
use crate::wire::name::WireName;

/// All records of one type at one name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RrSet {
    pub rtype: Rtype,
    pub ttl: u32,
    /// Encoded RDATA of each record, names uncompressed.
    pub rdata: Vec<Box<[u8]>>,
}

/// One name in the zone.
#[derive(Clone, Debug, Default)]
pub struct Node {
    pub rrsets: Vec<RrSet>,
    pub profile: Option<ProfileId>,
}

impl Node {
    pub fn rrset(&self, rtype: Rtype) -> Option<&RrSet> {
        self.rrsets.iter().find(|r| r.rtype == rtype)
    }
}

/// The SOA fields the operator sets; the serial is chosen at load time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Soa {
    pub mname: WireName,
    pub rname: WireName,
    pub refresh: u32,
    pub retry: u32,
    pub expire: u32,
    pub minimum: u32,
}

impl Soa {
    pub fn rdata(&self, serial: u32) -> Box<[u8]> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(self.mname.as_bytes());
        out.extend_from_slice(self.rname.as_bytes());
        for v in [serial, self.refresh, self.retry, self.expire, self.minimum] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.into_boxed_slice()
    }
}

#[derive(Clone, Debug)]
pub struct Zone {
    pub origin: WireName,
    pub soa: Soa,
    pub serial: u32,
    /// TTL of the SOA and NS records.
    pub ttl: u32,
    /// The SOA record's RDATA with the serial in place.
    pub soa_rdata: Box<[u8]>,
    /// Shared between snapshots: an override change gives the zone a new serial without
    /// copying every name.
    pub nodes: Arc<FastMap<WireName, Node>>,
    /// Hash of everything that decides the zone's answers, to know when the serial must grow.
    pub fingerprint: u64,
    /// The keys when the zone is signed (DNSSEC).
    pub dnssec: Option<ZoneSigning>,
}

impl Zone {
    /// Negative-answer TTL (RFC 2308): min(SOA TTL, SOA minimum).
    pub fn negative_ttl(&self) -> u32 {
        self.ttl.min(self.soa.minimum)
    }

    pub fn node(&self, name: &[u8]) -> Option<&Node> {
        self.nodes.get(name)
    }
}

/// The serial for a zone loaded now: unchanged when its content is unchanged, else the
/// larger of the clock and the previous serial plus one, so it always grows.
pub fn next_serial(previous: Option<(u32, u64)>, fingerprint: u64, now_unix: u64) -> u32 {
    let now = u32::try_from(now_unix).unwrap_or(u32::MAX);
    match previous {
        Some((serial, fp)) if fp == fingerprint => serial,
        Some((serial, _)) => now.max(serial.wrapping_add(1)),
        None => now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_table() {
        let cases = [
            (None, 7, 1000, 1000),
            (Some((1000, 7)), 7, 5000, 1000),
            (Some((1000, 7)), 8, 5000, 5000),
            (Some((9000, 7)), 8, 5000, 9001),
            (Some((5000, 7)), 8, 5000, 5001),
        ];
        for (i, (prev, fp, now, want)) in cases.into_iter().enumerate() {
            assert_eq!(next_serial(prev, fp, now), want, "case {i}");
        }
    }
}
