//! Where a client is: the location data behind geographic, performance, groups and
//! availability-zone routing (rules in `docs/routing.md`, "Where the client is").
//!
//! The data files, each usable on its own: `regions` (the WORLD → grouping → country →
//! subdivision hierarchy shipped in `geo-data/regions.yaml`), `db` and `places` (a
//! memory-mapped MaxMind database answering "which network, continent, country,
//! subdivision, coordinates"), `latency` (the operator's latency table: longest-prefix CIDR
//! rows, region-code rows and great-circle distances) and `build` (`steerdns geo build`:
//! CSV → GeoIP2-City-layout MMDB). `asn` is the ASN database (GeoLite2-ASN layout: which
//! network operator an address belongs to) and `asn_build` its builder (`geo build --asn`). `world` bundles one configuration's data, and `client`
//! is one query's client, located lazily against it. `rum` aggregates what real users'
//! browsers measure into a table of measured latency per client network.
//! Everything on the query path is allocation-free: codes are small inline values and the
//! lookups are binary searches or hash probes.

pub mod asn;
pub mod asn_build;
pub mod build;
pub mod client;
pub mod db;
pub mod latency;
pub mod places;
pub mod regions;
pub mod rum;
pub mod world;

use std::fmt;

pub use asn::{AsnDb, AsnError, AsnHit, ByAsn};
pub use build::{BuildError, BuildSummary, build};
pub use client::{Client, Located};
pub use db::{DbInfo, GeoDb, GeoError, Location};
pub use latency::{LatencyTable, Metric, Region, Row, RowFrom, RowMatch, great_circle_km};
pub use places::{Classes, Place, PlaceId, Places};
pub use regions::{ByRegion, Chain, RegionId, RegionKind, Regions};
pub use world::World;

/// A short region code held inline (continent `EU`, country `FR`, subdivision `ENG`), so a
/// `Location` is `Copy` and looking one up never allocates. Always upper case ASCII.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Code {
    len: u8,
    bytes: [u8; Code::MAX],
}

impl Code {
    /// Longest code kept: ISO 3166-2 subdivision parts are at most 3 characters, but some
    /// databases carry longer local codes; anything longer than this is dropped as unknown.
    pub const MAX: usize = 7;

    /// The code for `s` (upper-cased), or `None` when it is empty, too long or not
    /// alphanumeric ASCII.
    pub fn new(s: &str) -> Option<Code> {
        let b = s.as_bytes();
        if b.is_empty() || b.len() > Self::MAX || !b.iter().all(u8::is_ascii_alphanumeric) {
            return None;
        }
        let mut bytes = [0u8; Self::MAX];
        for (d, s) in bytes.iter_mut().zip(b) {
            *d = s.to_ascii_uppercase();
        }
        Some(Code { len: b.len() as u8, bytes })
    }

    pub fn as_str(&self) -> &str {
        // Only upper-cased ASCII alphanumerics are ever stored.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A YAML mapping read in document order with every entry kept (duplicates included), so
/// validation can name the line of each key; `BTreeMap` would sort and silently merge.
#[derive(Debug)]
pub(crate) struct Entries<K, V>(pub Vec<(K, V)>);

impl<'de, K: serde::Deserialize<'de>, V: serde::Deserialize<'de>> serde::Deserialize<'de>
    for Entries<K, V>
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<K, V>(std::marker::PhantomData<(K, V)>);
        impl<'de, K: serde::Deserialize<'de>, V: serde::Deserialize<'de>> serde::de::Visitor<'de>
            for Visit<K, V>
        {
            type Value = Entries<K, V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = m.next_entry()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}
