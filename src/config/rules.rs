//! Method-specific profile rules (`docs/configuration.md`, `docs/routing.md`): region codes for geographic,
//! ranges and the fallback for subnet, latency regions for performance, endpoint groups
//! with traffic dials, and topology zones for same-zone-first routing.

use std::collections::HashMap;

use super::check::int_or;
use super::profiles::Builder;
use super::raw::{Loc, RawEndpoint, RawGroup, RawProfile};
use crate::diag::Pos;
use crate::geo::{ByRegion, RegionId};
use crate::model::{Endpoint, Group, Method, Rules, Target};
use crate::netrange::{Range, RangeMap};

type RawEndpoints = Loc<Vec<Loc<RawEndpoint>>>;

impl Builder<'_, '_> {
    /// Rejects endpoint keys that the profile's method does not use (a likely mistake).
    pub(super) fn method_keys(&mut self, ep: &Loc<RawEndpoint>, method: Option<Method>) {
        let Some(method) = method else { return };
        let e = &ep.value;
        let keys = [
            (e.geo.as_deref().map(Pos::of), "geo", Method::Geographic),
            (e.subnets.as_deref().map(Pos::of), "subnets", Method::Subnet),
            (e.zone.as_deref().map(Pos::of), "zone", Method::SameAz),
            (e.asns.as_deref().map(Pos::of), "asns", Method::Asn),
            (e.coordinates.as_deref().map(Pos::of), "coordinates", Method::Geoproximity),
            (e.bias.as_deref().map(Pos::of), "bias", Method::Geoproximity),
        ];
        for (at, key, wanted) in keys {
            if let Some(at) = at
                && method != wanted
            {
                self.sink.at(at, format!("{key} applies to routing: {} only", wanted.as_str()));
            }
        }
        if let Some(l) = &e.location
            && !matches!(method, Method::Performance | Method::Geoproximity)
        {
            self.sink.on(
                l,
                "location applies to routing: performance and geoproximity only (groups set it per group)",
            );
        }
    }

    pub(super) fn rules(
        &mut self,
        raw: &RawProfile,
        eps: &RawEndpoints,
        endpoints: &[Endpoint],
        method: Method,
    ) -> Rules {
        let degraded_fallback = self.degraded_match(raw, method);
        if let Some(t) = &raw.safety_threshold
            && method != Method::SameAz
        {
            self.sink.on(t, "safety_threshold applies to routing: zone only");
        }
        match method {
            Method::Geographic => self.geographic(eps, endpoints, degraded_fallback),
            Method::Subnet => self.subnet(eps, endpoints, degraded_fallback),
            Method::Performance => self.performance(raw, eps),
            Method::SameAz => self.same_az(raw, eps),
            Method::Asn => self.asn(raw, eps),
            Method::Geoproximity => self.geoproximity(raw, eps),
            _ => Rules::Plain,
        }
    }

    fn degraded_match(&mut self, raw: &RawProfile, method: Method) -> bool {
        let Some(v) = &raw.degraded_match else { return false };
        if !matches!(method, Method::Geographic | Method::Subnet) {
            self.sink.on(v, "degraded_match applies to geographic and subnet routing only");
        }
        match v.value.as_str() {
            "serve" => false,
            "fallback" => true,
            other => {
                self.sink.on(v, format!("degraded_match must be serve or fallback, got {other:?}"));
                false
            }
        }
    }

    fn geographic(&mut self, eps: &RawEndpoints, endpoints: &[Endpoint], fallback: bool) -> Rules {
        let regions = &self.world.regions;
        let mut by_region = Vec::new();
        let mut owner: HashMap<RegionId, &str> = HashMap::new();
        let mut by_asn = Vec::new();
        let mut asn_owner: HashMap<u32, &str> = HashMap::new();
        for (i, ep) in eps.value.iter().enumerate() {
            let Some(codes) = &ep.value.geo else {
                self.sink.on(ep, "geographic endpoints need geo: (region codes)");
                continue;
            };
            for code in &codes.value {
                if let Some(asn) = crate::geo::asn::parse_code(code.value.trim()) {
                    let asn = match asn {
                        Ok(asn) => asn,
                        Err(e) => {
                            self.sink.on(code, e);
                            continue;
                        }
                    };
                    if !self.world.asn_configured {
                        self.sink.on(
                            code,
                            format!("AS{asn} needs an ASN database: asn: {{ database: ... }} in steerdns.yaml"),
                        );
                    }
                    if let Some(other) = asn_owner.get(&asn) {
                        self.sink
                            .on(code, format!("AS{asn} is already mapped to endpoint {other}"));
                        continue;
                    }
                    asn_owner.insert(asn, &ep.value.name.value);
                    if endpoints[i].enabled {
                        by_asn.push((asn, i));
                    }
                    continue;
                }
                let Some(id) = regions.id(code.value.trim()) else {
                    self.sink.on(code, format!("unknown region code {:?}", code.value));
                    continue;
                };
                if let Some(other) = owner.get(&id) {
                    let canon = regions.code(id);
                    self.sink.on(
                        code,
                        format!("region code {canon} is already mapped to endpoint {other}"),
                    );
                    continue;
                }
                owner.insert(id, &ep.value.name.value);
                if endpoints[i].enabled {
                    by_region.push((id, i));
                }
            }
        }
        Rules::Geographic {
            by_region: ByRegion::new(by_region),
            fallback_on_degraded: fallback,
            compiled: Default::default(),
            by_asn: crate::geo::ByAsn::new(by_asn),
        }
    }

    /// `routing: asn`: each endpoint's `asns` (none: a fallback endpoint).
    fn asn(&mut self, raw: &RawProfile, eps: &RawEndpoints) -> Rules {
        if !self.world.asn_configured {
            self.sink.on(
                &raw.routing,
                "routing: asn needs an ASN database: asn: { database: ... } in steerdns.yaml",
            );
        }
        let mut asns = Vec::with_capacity(eps.value.len());
        for ep in &eps.value {
            let mut list: Vec<u32> = Vec::new();
            for n in ep.value.asns.as_deref().map_or(&[][..], |l| &l.value[..]) {
                match u32::try_from(n.value.0).ok().filter(|&a| a != 0) {
                    Some(a) if list.contains(&a) => {
                        self.sink.on(n, format!("ASN {a} is listed twice"));
                    }
                    Some(a) => list.push(a),
                    None => self.sink.on(
                        n,
                        format!("an ASN is a number from 1 to 4294967295, got {}", n.value.0),
                    ),
                }
            }
            list.sort_unstable();
            asns.push(list);
        }
        Rules::Asn { asns }
    }

    fn subnet(
        &mut self,
        eps: &RawEndpoints,
        endpoints: &[Endpoint],
        fallback_on_degraded: bool,
    ) -> Rules {
        let mut all: Vec<(Range, (usize, Pos))> = Vec::new();
        let mut fallback = None;
        for (i, ep) in eps.value.iter().enumerate() {
            let Some(list) = ep.value.subnets.as_deref().filter(|l| !l.value.is_empty()) else {
                match fallback {
                    None => fallback = Some(i),
                    Some(f) => self.sink.on(
                        ep,
                        format!(
                            "more than one fallback endpoint (without subnets): {} and {}",
                            endpoints[f].name, endpoints[i].name
                        ),
                    ),
                }
                continue;
            };
            for r in &list.value {
                match Range::parse(&r.value) {
                    Ok(range) => all.push((range, (i, Pos::of(r)))),
                    Err(e) => self.sink.on(r, e),
                }
            }
        }
        let positions: HashMap<Range, Pos> = all.iter().map(|(r, (_, p))| (*r, *p)).collect();
        if let Err(overlaps) = RangeMap::new(all.clone()) {
            for (a, b) in overlaps {
                self.sink.at(positions[&b], format!("range {b} overlaps {a}"));
            }
        }
        let enabled = all
            .into_iter()
            .filter(|(_, (i, _))| endpoints[*i].enabled)
            .map(|(r, (i, _))| (r, i))
            .collect();
        let ranges = RangeMap::new(enabled).unwrap_or_default();
        Rules::Subnet { ranges, fallback, fallback_on_degraded }
    }

    fn performance(&mut self, raw: &RawProfile, eps: &RawEndpoints) -> Rules {
        let region = eps
            .value
            .iter()
            .map(|ep| self.region(raw, ep.value.location.as_deref(), Pos::of(ep)))
            .collect();
        Rules::Performance { region }
    }

    /// A latency-table region by name; errors name what is missing.
    pub(super) fn region(&mut self, raw: &RawProfile, loc: Option<&Loc<String>>, at: Pos) -> usize {
        let Some(table) = &self.world.latency else {
            self.sink.on(
                &raw.routing,
                "this routing method needs latency: { table: ... } in steerdns.yaml",
            );
            return 0;
        };
        let Some(loc) = loc else {
            self.sink.at(at, "location: (a latency-table region) is required");
            return 0;
        };
        table.region(loc.value.trim()).unwrap_or_else(|| {
            self.sink
                .on(loc, format!("location {:?} is not a region of the latency table", loc.value));
            0
        })
    }

    /// `routing: zone`: each endpoint's availability zone (`zone:`, from `topology.zones`).
    fn same_az(&mut self, raw: &RawProfile, eps: &RawEndpoints) -> Rules {
        let safety_threshold =
            int_or(self.sink, raw.safety_threshold.as_deref(), 0, 100, "safety_threshold", 20);
        let mut az = Vec::with_capacity(eps.value.len());
        for ep in &eps.value {
            let z = match &ep.value.zone {
                None => {
                    self.sink.on(ep, "zone routing endpoints need zone:");
                    0
                }
                Some(z) => {
                    self.world.az_names.iter().position(|n| *n == z.value).unwrap_or_else(|| {
                        self.sink.on(z, format!("zone {:?} is not in topology.zones", z.value));
                        0
                    })
                }
            };
            az.push(z);
        }
        Rules::SameAz { az, safety_threshold }
    }

    /// `routing: groups`: endpoints of every group, flattened, and the groups as slices.
    pub(super) fn groups(&mut self, raw: &RawProfile) -> (Vec<Endpoint>, Rules) {
        let Some(raw_groups) = &raw.groups else {
            self.sink.on(&raw.routing, "routing: groups needs groups:");
            return (Vec::new(), Rules::Groups { groups: Vec::new() });
        };
        let mut endpoints: Vec<Endpoint> = Vec::new();
        let mut groups = Vec::new();
        for g in &raw_groups.value {
            if groups.iter().any(|x: &Group| x.name == g.value.name.value) {
                self.sink
                    .on(&g.value.name, format!("duplicate group name {:?}", g.value.name.value));
            }
            groups.push(self.group(raw, g, &mut endpoints));
        }
        (endpoints, Rules::Groups { groups })
    }

    fn group(
        &mut self,
        raw: &RawProfile,
        g: &Loc<RawGroup>,
        endpoints: &mut Vec<Endpoint>,
    ) -> Group {
        let start = endpoints.len();
        for ep in &g.value.endpoints.value {
            let e = self.endpoint(raw, ep, endpoints.len(), Some(Method::Groups));
            if matches!(e.target, Target::Nested(_)) {
                self.sink.on(
                    ep,
                    "group endpoints need a target (nested profiles are not allowed in groups)",
                );
            }
            if endpoints.iter().any(|x| x.name == e.name) {
                self.sink.on(&ep.value.name, format!("duplicate endpoint name {:?}", e.name));
            }
            if let Some(l) = &ep.value.location {
                self.sink.on(l, "location is set per group, not per endpoint");
            }
            endpoints.push(e);
        }
        Group {
            name: g.value.name.value.clone(),
            region: self.region(raw, g.value.location.as_deref(), Pos::of(g)),
            dial: int_or(self.sink, g.value.traffic_dial.as_deref(), 0, 100, "traffic_dial", 100),
            endpoints: start..endpoints.len(),
        }
    }
}
