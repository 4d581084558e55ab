//! Loads the location data named in `steerdns.yaml`: the geo and ASN databases, the latency table
//! and the availability zones (`topology.zones`: client networks per availability zone).

use std::path::Path;
use std::sync::Arc;

use super::Limits;
use super::raw::RawServer;
use crate::diag::{Pos, Sink};
use crate::geo::{AsnDb, GeoDb, LatencyTable, Regions, World};
use crate::netrange::{Range, RangeMap};

pub fn build(sink: &mut Sink<'_>, raw: &RawServer, base: &Path, limits: &Limits) -> World {
    let regions = Regions::builtin();
    let db = raw.geo.as_ref().and_then(|g| {
        match GeoDb::open_limited(&base.join(&g.database.value), limits.geo_database) {
            Ok(db) => Some(db),
            Err(e) => {
                sink.on(&g.database, e.to_string());
                None
            }
        }
    });
    let latency = raw.latency.as_ref().and_then(|l| {
        let path = base.join(&l.table.value);
        match LatencyTable::load_limited(&path, Arc::clone(&regions), limits.latency_table) {
            Ok(t) => Some(t),
            Err(errors) => {
                sink.errors.extend(errors.0);
                None
            }
        }
    });
    let (az_networks, az_names) = availability_zones(sink, raw);
    let asn = raw.asn.as_ref().and_then(|a| {
        match AsnDb::open_limited(&base.join(&a.database.value), limits.asn_database) {
            Ok(db) => Some(db),
            Err(e) => {
                sink.on(&a.database, e.to_string());
                None
            }
        }
    });
    let mut world = World::new(db, regions, latency, az_networks, az_names).with_asn(asn);
    world.asn_configured = raw.asn.is_some();
    world
}

/// `topology.zones`: each availability zone's networks; networks may not overlap across
/// availability zones.
fn availability_zones(sink: &mut Sink<'_>, raw: &RawServer) -> (RangeMap<usize>, Vec<String>) {
    let Some(t) = &raw.topology else { return (RangeMap::default(), Vec::new()) };
    let mut entries = Vec::new();
    let mut positions = Vec::new();
    let names: Vec<String> = t.zones.keys().cloned().collect();
    for (z, nets) in t.zones.values().enumerate() {
        for n in nets {
            match Range::parse(&n.value) {
                Ok(r) => {
                    entries.push((r, z));
                    positions.push((r, Pos::of(n)));
                }
                Err(e) => sink.on(n, e),
            }
        }
    }
    match RangeMap::new(entries) {
        Ok(map) => (map, names),
        Err(overlaps) => {
            for (a, b) in overlaps {
                let at = positions.iter().find(|(r, _)| *r == b).map_or(Pos::default(), |p| p.1);
                sink.at(at, format!("topology network {b} overlaps {a}"));
            }
            (RangeMap::default(), names)
        }
    }
}
