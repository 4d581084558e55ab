//! The location data of one configuration — geo database, region hierarchy, latency table
//! and availability-zone topology — bundled in one immutable value that travels with the
//! snapshot, and the questions routing asks of it.

use std::net::IpAddr;
use std::sync::Arc;

use super::client::{Client, Located, PlaceHit};
use super::{
    AsnDb, AsnHit, ByRegion, Chain, GeoDb, LatencyTable, Metric, PlaceId, Regions, RowFrom,
    RowMatch,
};
use crate::netrange::RangeMap;

/// The location data of one configuration.
#[derive(Debug)]
pub struct World {
    pub db: Option<GeoDb>,
    /// `asn.database`: which network operator a client address belongs to.
    pub asn: Option<AsnDb>,
    /// `asn.database` is set, even if it could not be opened: profiles that need it are
    /// not also told that it is missing.
    pub asn_configured: bool,
    pub regions: Arc<Regions>,
    pub latency: Option<LatencyTable>,
    /// `topology.zones`: client networks → availability-zone index.
    pub az_networks: RangeMap<usize>,
    /// Availability-zone names, by index.
    pub az_names: Vec<String>,
    /// The region chain of every place of `db`, by place id: geographic routing walks it
    /// instead of looking codes up per query.
    chains: Vec<Chain>,
}

impl World {
    pub fn new(
        db: Option<GeoDb>,
        regions: Arc<Regions>,
        latency: Option<LatencyTable>,
        az_networks: RangeMap<usize>,
        az_names: Vec<String>,
    ) -> World {
        let chains = db.as_ref().map_or_else(Vec::new, |db| {
            db.places().all().map(|place| regions.place_chain(place)).collect()
        });
        World {
            db,
            asn: None,
            asn_configured: false,
            regions,
            latency,
            az_networks,
            az_names,
            chains,
        }
    }

    /// The same world with `asn` as its ASN database.
    pub fn with_asn(self, asn: Option<AsnDb>) -> World {
        World { asn_configured: asn.is_some(), asn, ..self }
    }

    /// Looks `addr` up in the ASN database: its ASN, if any, and the prefix length of the
    /// database network that decided it (0 without a database).
    pub fn asn_of(&self, addr: IpAddr) -> AsnHit {
        self.asn.as_ref().map_or_else(AsnHit::default, |db| db.lookup(addr))
    }

    /// Per place id: 1 + the endpoint the first matching code of its chain maps to, or 0.
    pub fn classes_of(&self, by_region: &ByRegion) -> Vec<u32> {
        let first = |chain: &Chain| chain.ids().iter().find_map(|&id| by_region.get(id));
        self.chains.iter().map(|c| first(c).map_or(0, |i| i as u32 + 1)).collect()
    }

    /// No geo database, no latency table, no availability zones; the built-in region
    /// hierarchy.
    pub fn empty() -> World {
        World::new(None, Regions::builtin(), None, RangeMap::default(), Vec::new())
    }

    /// Looks `addr` up in the geo database: the location and the prefix length of the
    /// database network that decided it (0 without a database).
    pub fn locate(&self, addr: IpAddr) -> Located {
        match &self.db {
            Some(db) => {
                let (location, prefix) = db.lookup_scoped(addr);
                Located { location, prefix }
            }
            None => Located { location: None, prefix: 0 },
        }
    }

    /// The place of `addr` and the widest block around it at that place (0 bits without a
    /// database).
    pub(super) fn place(&self, addr: IpAddr) -> PlaceHit {
        match &self.db {
            Some(db) => {
                let (id, len) = db.places().lookup_id(addr);
                PlaceHit::Found { id, len }
            }
            None => PlaceHit::Known { place: None, len: 0 },
        }
    }

    /// The region chain of a place of the database.
    pub(super) fn chain(&self, place: PlaceId) -> Chain {
        self.chains[place as usize]
    }
}

impl World {
    /// Ranks every latency-table region for `client` into `out` (nearest first; ties keep
    /// file order) and returns the ECS scope the ranking depended on. Without a latency
    /// table nothing is ranked and the scope is 0.
    pub fn region_order(&self, client: &Client, out: &mut Vec<(usize, Metric)>) -> u8 {
        out.clear();
        let Some(table) = &self.latency else { return 0 };
        let located = client.located(self);
        let loc = located.location.as_ref();
        let row = table.row_for(client.addr, loc);
        out.extend((0..table.regions().len()).map(|r| (r, table.metric(&row, loc, r))));
        // Ties in file order; an unstable sort on (metric, region) gives that order without
        // the buffer a stable sort of many regions allocates.
        out.sort_unstable_by_key(|&(r, m)| (m, r));
        match row {
            RowMatch::Cidr { .. } => row.scope(),
            _ => row.scope().max(located.prefix),
        }
    }

    pub fn region_name(&self, region: usize) -> &str {
        self.latency.as_ref().and_then(|t| t.regions().get(region)).map_or("?", |r| r.name.as_str())
    }
}

impl World {
    /// For traces: where the client is and which latency row ranks the regions for it.
    pub fn describe_latency(&self, client: &Client) -> String {
        let located = client.located(self);
        let Some(table) = &self.latency else {
            return format!("{located}; no latency table");
        };
        let row = table.row_for(client.addr, located.location.as_ref());
        let how = match row.row().map(|r| &table.rows()[r].from) {
            Some(RowFrom::Cidr(net)) => format!("latency row {net}"),
            Some(RowFrom::Region(code)) => format!("latency row {code}"),
            None => "no latency row: great-circle distance".to_string(),
        };
        format!("{located}; {how}")
    }
}
