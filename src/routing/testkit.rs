//! Builders for routing unit tests: a small world of profiles without YAML.

use std::sync::Arc;

use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::model::health::{HealthTable, Status};
use crate::model::{Endpoint, Families, Method, Nested, Profile, Target};
use crate::wire::name::WireName;

use super::Ctx;
use crate::geo::World;

pub struct Lab {
    pub profiles: Profiles,
    pub health: HealthTable,
    pub world: World,
    /// The load shares, when an endpoint has a feed (`fed`); set them with `share`.
    pub load: Option<crate::model::LoadTable>,
    slots: usize,
}

impl Lab {
    pub fn new() -> Lab {
        Lab {
            profiles: Profiles::default(),
            health: HealthTable::new([]),
            world: World::empty(),
            load: None,
            slots: 0,
        }
    }

    pub fn profile(&mut self, name: &str, method: Method) -> usize {
        let fqdn = format!("{name}.tm.example.test.");
        self.profiles.push(Arc::new(Profile {
            wire: WireName::parse(&fqdn).unwrap(),
            name: fqdn,
            zone: 0,
            ttl: 30,
            enabled: true,
            method,
            fail_open: true,
            max_return: 2,
            sticky: false,
            endpoints: Vec::new(),
            rules: crate::model::Rules::Plain,
            families: Families::default(),
            hash_seed: 0x5eed,
        }));
        self.profiles.len() - 1
    }

    pub fn ep(&mut self, p: usize, name: &str, target: &str) -> usize {
        let target = match target.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(a)) => Target::V4(a),
            Ok(std::net::IpAddr::V6(a)) => Target::V6(a),
            Err(_) => Target::Host(WireName::parse(target).unwrap()),
        };
        self.push(p, name, target)
    }

    pub fn nested(&mut self, p: usize, name: &str, child: usize, mins: [u32; 3]) -> usize {
        let target = Target::Nested(Nested {
            child,
            min_child: mins[0],
            min_child_v4: mins[1],
            min_child_v6: mins[2],
        });
        self.push(p, name, target)
    }

    fn push(&mut self, p: usize, name: &str, target: Target) -> usize {
        let eps = &mut self.profiles[p].endpoints;
        let nested = matches!(target, Target::Nested(_));
        eps.push(Endpoint {
            name: name.to_string(),
            name_hash: crate::hash::hash_str(name),
            target,
            enabled: true,
            always_serve: false,
            priority: eps.len() as u32 + 1,
            weight: 1,
            configured_enabled: true,
            configured_weight: 1,
            drained: false,
            weight_override: None,
            bias: 0,
            configured_bias: 0,
            bias_override: None,
            health_slot: (!nested).then_some(self.slots),
            monitors: Vec::new(),
            monitor_rule: Default::default(),
            flat_slot: None,
            load: None,
        });
        if !nested {
            self.slots += 1;
        }
        eps.len() - 1
    }

    /// Computes families and builds a health table as a load does: `checking`, or
    /// `unmonitored` for `always_serve` endpoints.
    pub fn finish(mut self) -> Lab {
        let families = crate::model::profile::all_families(&self.profiles);
        for (p, f) in self.profiles.iter_mut().zip(families) {
            Arc::make_mut(p).families = f;
        }
        let mut statuses = vec![Status::Checking; self.slots];
        for ep in self.profiles.iter().flat_map(|p| &p.endpoints) {
            if let (true, Some(slot)) = (ep.always_serve, ep.health_slot) {
                statuses[slot] = Status::Unmonitored;
            }
        }
        self.health = HealthTable::new(statuses);
        let fed = self.profiles.iter().flat_map(|p| &p.endpoints).any(|e| e.load.is_some());
        self.load = fed.then(|| crate::model::LoadTable::new(self.slots));
        self
    }

    pub fn ctx(&self) -> Ctx<'_, HealthTable> {
        let mut ctx = Ctx::new(&self.profiles, &self.health, &self.world);
        ctx.load = self.load.as_ref();
        ctx
    }

    /// Gives endpoint `e` of profile `p` a pushed load feed of capacity 100 (before or
    /// after `finish`).
    pub fn fed(&mut self, p: usize, e: usize) {
        let slots = self.slots;
        self.load.get_or_insert_with(|| crate::model::LoadTable::new(slots));
        self.profiles[p].endpoints[e].load = Some(Box::new(crate::model::load::LoadFeed {
            capacity: 100.0,
            source: crate::model::load::FeedSource::Pushed,
            low: 0.7,
            high: 0.9,
        }));
    }

    /// Sets the load share of endpoint `e` of profile `p` (after `finish`).
    pub fn share(&self, p: usize, e: usize, share: f64, above_high: bool) {
        let slot = self.profiles[p].endpoints[e].health_slot.expect("a leaf endpoint");
        self.load.as_ref().expect("an endpoint is fed").set(slot, share, above_high);
    }
}

/// The profiles of a `Lab`, as a snapshot holds them; indexing gives the profile itself,
/// so that tests can change it in place.
#[derive(Default)]
pub struct Profiles(Vec<Arc<Profile>>);

impl std::ops::Deref for Profiles {
    type Target = Vec<Arc<Profile>>;
    fn deref(&self) -> &Vec<Arc<Profile>> {
        &self.0
    }
}

impl std::ops::DerefMut for Profiles {
    fn deref_mut(&mut self) -> &mut Vec<Arc<Profile>> {
        &mut self.0
    }
}

impl std::ops::Index<usize> for Profiles {
    type Output = Profile;
    fn index(&self, id: usize) -> &Profile {
        &self.0[id]
    }
}

impl std::ops::IndexMut<usize> for Profiles {
    fn index_mut(&mut self, id: usize) -> &mut Profile {
        Arc::make_mut(&mut self.0[id])
    }
}

pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

impl Lab {
    /// Loads a latency table from YAML text (the format of `docs/configuration.md`, "Latency table").
    pub fn latency(&mut self, yaml: &str) {
        let table = crate::geo::LatencyTable::parse(
            yaml,
            std::path::Path::new("latency.yaml"),
            self.world.regions.clone(),
        )
        .expect("test latency table is valid");
        self.world.latency = Some(table);
    }

    pub fn region(&self, name: &str) -> usize {
        self.world.latency.as_ref().unwrap().region(name).unwrap()
    }

    /// Sets the availability zones (`topology.zones`).
    pub fn availability_zones(&mut self, zones: &[(&str, &[&str])]) {
        let mut entries = Vec::new();
        for (z, (name, nets)) in zones.iter().enumerate() {
            self.world.az_names.push(name.to_string());
            for n in *nets {
                entries.push((crate::netrange::Range::parse(n).unwrap(), z));
            }
        }
        self.world.az_networks = crate::netrange::RangeMap::new(entries).unwrap();
    }
}

/// A client at a known place: country, subdivision (without the country prefix),
/// coordinates and the geo network's prefix length.
pub fn client_in(
    addr: &str,
    country: &str,
    sub: &str,
    coords: Option<(f64, f64)>,
    prefix: u8,
) -> crate::geo::Client {
    use crate::geo::{Code, Location};
    let location = Location {
        continent: None,
        country: Code::new(country),
        subdivision: Code::new(sub),
        lat: coords.map(|c| c.0),
        lon: coords.map(|c| c.1),
        prefix_len: prefix,
    };
    let located = crate::geo::Located { location: Some(location), prefix };
    crate::geo::Client::at(addr.parse().unwrap(), located)
}

/// The names a decision answers with (empty for NODATA) and its scope.
pub fn names(d: &super::Decision<'_>) -> (Vec<String>, u8) {
    match d {
        super::Decision::Answer { endpoints, scope } => {
            (endpoints.iter().map(|e| e.name.clone()).collect(), *scope)
        }
        super::Decision::NoData { scope } => (Vec::new(), *scope),
    }
}

/// A performance profile over `LATENCY`'s regions: bj-1 (beijing), sh-1 and sh-2
/// (shanghai), eu-1 (eu-west); with `fed`, each endpoint has a pushed load feed.
pub fn performance_lab(fed: bool) -> Lab {
    let mut w = Lab::new();
    w.latency(LATENCY);
    let p = w.profile("perf", crate::model::Method::Performance);
    let mut region = Vec::new();
    for (i, (name, r)) in [
        ("bj-1", "cn-beijing"),
        ("sh-1", "cn-shanghai"),
        ("sh-2", "cn-shanghai"),
        ("eu-1", "eu-west"),
    ]
    .iter()
    .enumerate()
    {
        w.ep(p, name, &format!("192.0.2.{}", i + 1));
        region.push(w.region(r));
        if fed {
            w.fed(p, i);
        }
    }
    w.profiles[p].rules = crate::model::Rules::Performance { region };
    w.finish()
}

/// Three regions; a CIDR row, a country row for CN; the rest by distance.
pub const LATENCY: &str = r#"
regions:
  cn-beijing: { lat: 39.90, lon: 116.40 }
  cn-shanghai: { lat: 31.23, lon: 121.47 }
  eu-west: { lat: 48.85, lon: 2.35 }
rtt:
  - from: "203.0.113.0/24"
    to: { cn-beijing: 40, cn-shanghai: 12, eu-west: 200 }
  - from: CN
    to: { cn-beijing: 20, cn-shanghai: 30, eu-west: 180 }
"#;

pub const PARIS: Option<(f64, f64)> = Some((48.86, 2.35));
pub const BEIJING: Option<(f64, f64)> = Some((39.9, 116.4));
