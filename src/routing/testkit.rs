//! Builders for routing unit tests: a small world of profiles without YAML.

use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::dns::name::WireName;
use crate::health::{HealthTable, Status};
use crate::model::{Endpoint, Families, Method, Nested, Profile, Target};

use super::Ctx;

pub struct World {
    pub profiles: Vec<Profile>,
    pub health: HealthTable,
    slots: usize,
}

impl World {
    pub fn new() -> World {
        World { profiles: Vec::new(), health: HealthTable::new([]), slots: 0 }
    }

    pub fn profile(&mut self, name: &str, method: Method) -> usize {
        let fqdn = format!("{name}.tm.example.test.");
        self.profiles.push(Profile {
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
            families: Families::default(),
            hash_seed: 0x5eed,
        });
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
            name_hash: crate::routing::weighted::hash_str(name),
            target,
            enabled: true,
            always_serve: false,
            priority: eps.len() as u32 + 1,
            weight: 1,
            health_slot: if nested { usize::MAX } else { self.slots },
            monitor: None,
        });
        if !nested {
            self.slots += 1;
        }
        eps.len() - 1
    }

    /// Computes families and builds a health table with every slot `checking`.
    pub fn finish(mut self) -> World {
        crate::config::compute_families(&mut self.profiles);
        self.health = HealthTable::new(std::iter::repeat_n(Status::Checking, self.slots));
        self
    }

    pub fn ctx(&self) -> Ctx<'_, HealthTable> {
        Ctx::new(&self.profiles, &self.health)
    }
}

pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}
