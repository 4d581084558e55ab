//! Where a client is, for the routing methods that care: the geo database, the region
//! hierarchy, the latency table and the zone topology, bundled in one immutable value that
//! travels with the snapshot. A client is located at most once per query, lazily, and only
//! when the profile's method needs it.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::geo::{
    ByRegion, Chain, Classes, GeoDb, LatencyTable, Location, Metric, Place, PlaceId, Regions,
    RowMatch,
};
use crate::model::{Profile, Rules};
use crate::netrange::RangeMap;

/// Distinct geographic mappings compiled per configuration. Each costs two 256 KiB jump
/// tables plus its nodes, and a few ms per load.
const MAX_COMPILED: usize = 64;

/// The location data of one configuration.
#[derive(Debug)]
pub struct World {
    pub db: Option<GeoDb>,
    pub regions: Arc<Regions>,
    pub latency: Option<LatencyTable>,
    /// `topology.zones`: client networks → zone index.
    pub topology: RangeMap<usize>,
    pub zone_names: Vec<String>,
    /// The region chain of every place of `db`, by place id: geographic routing walks it
    /// instead of looking codes up per query.
    chains: Vec<Chain>,
}

impl World {
    pub fn new(
        db: Option<GeoDb>,
        regions: Arc<Regions>,
        latency: Option<LatencyTable>,
        topology: RangeMap<usize>,
        zone_names: Vec<String>,
    ) -> World {
        let chains = db.as_ref().map_or_else(Vec::new, |db| {
            db.places().all().map(|place| regions.place_chain(place)).collect()
        });
        World { db, regions, latency, topology, zone_names, chains }
    }

    /// Compiles each geographic profile's mapping against the geo database (see
    /// `Classes`). Profiles with the same mapping share one compiled trie; past
    /// `MAX_COMPILED` distinct mappings the rest keep walking the region chain.
    pub fn compile_geographic(&self, profiles: &mut [Profile]) {
        let mut done: HashMap<ByRegion, Arc<Classes>> = HashMap::new();
        for p in profiles {
            let Rules::Geographic { by_region, fallback_on_degraded, compiled } = &mut p.rules
            else {
                continue;
            };
            // Every profile is set, also one taken over from the previous configuration,
            // whose trie was compiled against the previous database (or one now removed).
            compiled.0 = match (&self.db, done.get(by_region)) {
                _ if *fallback_on_degraded => None,
                (None, _) => None,
                (Some(_), Some(c)) => Some(Arc::clone(c)),
                (Some(_), None) if done.len() >= MAX_COMPILED => None,
                (Some(db), None) => {
                    let c = Arc::new(db.places().classify(&self.classes_of(by_region)));
                    done.insert(by_region.clone(), Arc::clone(&c));
                    Some(c)
                }
            };
        }
    }

    /// Per place id: 1 + the endpoint the first matching code of its chain maps to, or 0.
    fn classes_of(&self, by_region: &ByRegion) -> Vec<u32> {
        let first = |chain: &Chain| chain.ids().iter().find_map(|&id| by_region.get(id));
        self.chains.iter().map(|c| first(c).map_or(0, |i| i as u32 + 1)).collect()
    }

    /// No geo database, no latency table, no topology; the built-in region hierarchy.
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
    fn place(&self, addr: IpAddr) -> PlaceHit {
        match &self.db {
            Some(db) => {
                let (id, len) = db.places().lookup_id(addr);
                PlaceHit::Found { id, len }
            }
            None => PlaceHit::Known { place: None, len: 0 },
        }
    }
}

/// A client's place and how many address bits decided it.
#[derive(Clone, Copy, Debug)]
enum PlaceHit {
    /// Looked up in the database: `id` indexes the world's per-place tables.
    Found { id: PlaceId, len: u8 },
    /// Given with the client's location (`Client::at`), or no database to look in.
    Known { place: Option<Place>, len: u8 },
}

/// A client's location and how many address bits decided it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Located {
    pub location: Option<Location>,
    pub prefix: u8,
}

/// The client of one query: the ECS address when the query has one, else the source
/// address; `prefix` is how many leading bits of `addr` are known.
#[derive(Clone, Debug)]
pub struct Client {
    pub addr: IpAddr,
    pub prefix: u8,
    located: OnceCell<Located>,
    place: OnceCell<PlaceHit>,
    /// The location was given (`at`), not looked up: per-database tables do not apply.
    given: bool,
}

impl Client {
    pub fn new(addr: IpAddr, prefix: u8) -> Client {
        Client { addr, prefix, located: OnceCell::new(), place: OnceCell::new(), given: false }
    }

    /// A full-length client address (no ECS).
    pub fn from_addr(addr: IpAddr) -> Client {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Client::new(addr, prefix)
    }

    /// A client whose location is given rather than looked up (tests, `explain`).
    pub fn at(addr: IpAddr, located: Located) -> Client {
        let mut c = Client::from_addr(addr);
        c.given = true;
        let _ = c.located.set(located);
        let place = located.location.map(|l| l.place());
        let _ = c.place.set(PlaceHit::Known { place, len: located.prefix });
        c
    }

    /// The client's location, looked up on first use. The prefix never exceeds what the
    /// client told us (an ECS /24 cannot justify a /28 scope).
    pub fn located(&self, world: &World) -> Located {
        let mut l = *self.located.get_or_init(|| world.locate(self.addr));
        l.prefix = l.prefix.min(self.prefix);
        l
    }

    /// The region ids to try for the client's place (looked up on first use), most
    /// specific first, and how many address bits decided the place (never more than the
    /// client told us).
    pub fn region_chain(&self, world: &World) -> (Chain, u8) {
        let (chain, len) = match self.place_hit(world) {
            PlaceHit::Found { id, len } => (world.chains[id as usize], len),
            PlaceHit::Known { place, len } => (world.regions.place_chain(place), len),
        };
        (chain, len.min(self.prefix))
    }

    /// The address to look up in tables compiled from the geo database; `None` when the
    /// client's location was given instead.
    pub fn looked_up_addr(&self) -> Option<IpAddr> {
        (!self.given).then_some(self.addr)
    }

    fn place_hit(&self, world: &World) -> PlaceHit {
        *self.place.get_or_init(|| world.place(self.addr))
    }
}

/// Latency-table regions ranked for one client, nearest first.
pub type RegionOrder = smallvec::SmallVec<[(usize, Metric); 16]>;

impl World {
    /// Ranks every latency-table region for `client` into `out` (nearest first; ties keep
    /// file order) and returns the ECS scope the ranking depended on. Without a latency
    /// table nothing is ranked and the scope is 0.
    pub fn region_order(&self, client: &Client, out: &mut RegionOrder) -> u8 {
        out.clear();
        let Some(table) = &self.latency else { return 0 };
        let located = client.located(self);
        let loc = located.location.as_ref();
        let row = table.row_for(client.addr, loc);
        out.extend((0..table.regions().len()).map(|r| (r, table.metric(&row, loc, r))));
        // Stable, and allocation-free for the handful of regions a table has.
        out.sort_by_key(|a| a.1);
        let scope = match row {
            RowMatch::Cidr { .. } => row.scope(),
            _ => row.scope().max(located.prefix),
        };
        scope.min(client.prefix)
    }

    pub fn region_name(&self, region: usize) -> &str {
        self.latency.as_ref().and_then(|t| t.regions().get(region)).map_or("?", |r| r.name.as_str())
    }
}

/// A metric for traces: "12 ms", "8342 km", "unknown".
pub fn metric_text(m: Metric) -> String {
    match m {
        Metric::RttMs(v) => format!("{v} ms"),
        Metric::Km(v) => format!("{v:.0} km"),
        Metric::Unknown => "unknown".to_string(),
    }
}

impl World {
    /// For traces: where the client is and which latency row ranks the regions for it.
    pub fn describe_latency(&self, client: &Client) -> String {
        let located = client.located(self);
        let place = crate::routing::describe_location(&located);
        let Some(table) = &self.latency else {
            return format!("{place}; no latency table");
        };
        let row = table.row_for(client.addr, located.location.as_ref());
        let how = match row.row().map(|r| &table.rows()[r].from) {
            Some(crate::geo::RowFrom::Cidr(net)) => format!("latency row {net}"),
            Some(crate::geo::RowFrom::Region(code)) => format!("latency row {code}"),
            None => "no latency row: great-circle distance".to_string(),
        };
        format!("{place}; {how}")
    }
}
