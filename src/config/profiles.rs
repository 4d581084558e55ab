//! Validates each profile read from `profiles/*.yaml` (see `files`): names, endpoints,
//! targets, per-method rules, monitors and nesting (`docs/configuration.md`).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;

use super::check::{int_in, int_or};
use super::files::{Doc, Source};
use super::monitors;
use super::par;
use super::raw::{Loc, RawEndpoint, RawProfile};
use super::reuse;
use super::zones::parse_name;
use crate::diag::{ConfigError, Pos, Sink};
use crate::geo::World;
use crate::hash::hash_str;
use crate::model::load::LoadRules;
use crate::model::zone::Zone;
use crate::model::{Endpoint, Families, Method, Nested, Profile, Rules, Target};
use crate::wire::name::WireName;

/// Deepest allowed chain of nested profiles.
pub const MAX_NESTING: usize = 10;

/// The largest endpoint `weight` (`routing: weighted`; other methods accept and ignore it).
pub const MAX_WEIGHT: u32 = 1000;

/// The largest endpoint `weight` inside a group (`routing: groups`), as Global Accelerator.
pub const MAX_GROUP_WEIGHT: u32 = 255;

/// The weights a method's answers depend on, as the range a weight must be in; `None` for
/// methods that do not read weights.
pub fn weight_range(method: Method) -> Option<std::ops::RangeInclusive<u32>> {
    match method {
        Method::Weighted => Some(0..=MAX_WEIGHT),
        Method::Groups => Some(0..=MAX_GROUP_WEIGHT),
        _ => None,
    }
}

/// A profile name resolved to its absolute form and zone.
struct Named {
    wire: WireName,
    zone: usize,
}

/// Resolves a profile name: absolute ("www.tm.example.test.") or, with exactly one zone,
/// relative to it ("www").
/// `sole_origin` is the one zone's origin as a `Name`, made once per load rather than per
/// profile.
fn resolve_name(
    sink: &mut Sink<'_>,
    v: &Loc<String>,
    zones: &[Zone],
    sole_origin: Option<&Name>,
) -> Option<Named> {
    let text = v.value.trim();
    let origin = sole_origin.filter(|_| !text.ends_with('.'));
    if !text.ends_with('.') && sole_origin.is_none() {
        sink.on(
            v,
            format!(
                "relative name {text:?} needs exactly one zone; write it absolute, ending in '.'"
            ),
        );
        return None;
    }
    let wire = parse_name(sink, v, origin)?;
    let zone = zones
        .iter()
        .enumerate()
        .filter(|(_, z)| wire.is_within(&z.origin))
        .max_by_key(|(_, z)| z.origin.as_bytes().len());
    match zone {
        // A profile at the apex answers A and AAAA beside the apex's own records.
        Some((i, _)) => Some(Named { wire, zone: i }),
        None => {
            sink.on(v, format!("{wire} is outside every zone"));
            None
        }
    }
}

/// Validates every profile. Ids are positions in the returned vector. `prev` holds the
/// profiles `Doc::Reused` documents refer to. Also returns, for each profile, the index of
/// its source document.
pub fn build_all(
    sources: &[Source],
    prev: &[Arc<Profile>],
    zones: &[Zone],
    world: &World,
    load_rules: &LoadRules,
    errors: &mut Vec<ConfigError>,
) -> (Vec<Profile>, Vec<usize>) {
    let sole_origin = (zones.len() == 1).then(|| zones[0].origin.to_name());
    let sole_origin = sole_origin.as_ref();
    let Names { named, ids, rejected } = name_all(sources, prev, zones, sole_origin, errors);
    let ctx = Context { prev, zones, sole_origin, world, ids: &ids, load_rules };
    let profiles = build_parallel(&ctx, sources, &named, errors);
    // Profiles whose name was rejected are still checked, so all their errors show at once.
    let placeholder = Named { wire: WireName::root(), zone: 0 };
    for i in rejected {
        drop(ctx.build(&sources[i], &placeholder, errors));
    }
    check_nesting(sources, &named, &profiles, errors);
    (profiles, named.iter().map(|(i, _)| *i).collect())
}

/// What building one profile reads besides its own document.
struct Context<'a> {
    prev: &'a [Arc<Profile>],
    zones: &'a [Zone],
    sole_origin: Option<&'a Name>,
    world: &'a World,
    ids: &'a HashMap<WireName, usize>,
    load_rules: &'a LoadRules,
}

impl Context<'_> {
    fn build(&self, src: &Source, n: &Named, errors: &mut Vec<ConfigError>) -> Profile {
        let mut sink = Sink { file: &src.file, errors };
        let (zones, ids, world, load_rules) = (self.zones, self.ids, self.world, self.load_rules);
        match &src.doc {
            Doc::Raw(raw) => {
                let sole_origin = self.sole_origin;
                let apex = zones.get(n.zone).is_some_and(|z| z.origin == n.wire);
                let flatten = None;
                Builder {
                    sink: &mut sink,
                    zones,
                    sole_origin,
                    ids,
                    world,
                    load_rules,
                    apex,
                    flatten,
                }
                .profile(raw, n)
            }
            Doc::Reused(old) => reuse::take_over(self.prev, *old, ids).unwrap_or_else(|e| {
                sink.at(Pos::default(), e);
                Profile::clone(&self.prev[*old])
            }),
        }
    }
}

/// Builds the named profiles in parallel (see `in_chunks`): each profile depends only on
/// its document and the shared context. Parsed documents are freed only after all are
/// built: freeing each one as its profile is built scatters the profiles over the freed
/// space and leaves the memory after the load higher.
fn build_parallel(
    ctx: &Context<'_>,
    sources: &[Source],
    named: &[(usize, Named)],
    errors: &mut Vec<ConfigError>,
) -> Vec<Profile> {
    let build = |part: &[(usize, Named)], errs: &mut Vec<ConfigError>| -> Vec<Profile> {
        part.iter().map(|(i, n)| ctx.build(&sources[*i], n, errs)).collect()
    };
    in_chunks(named, errors, build)
}

/// `work` over chunks of `items` on all cores (see `par`), errors kept in order.
fn in_chunks<T: Sync, R: Send>(
    items: &[T],
    errors: &mut Vec<ConfigError>,
    work: impl Fn(&[T], &mut Vec<ConfigError>) -> Vec<R> + Sync,
) -> Vec<R> {
    // Small configurations are not worth a thread.
    let parts = par::chunked(items, 1024, |part| {
        let mut errs = Vec::new();
        (work(part, &mut errs), errs)
    });
    let mut out = Vec::with_capacity(items.len());
    for (done, errs) in parts {
        out.extend(done);
        errors.extend(errs);
    }
    out
}

/// Every profile's resolved name.
struct Names {
    /// (document, name) of the accepted profiles, in id order.
    named: Vec<(usize, Named)>,
    ids: HashMap<WireName, usize>,
    /// Documents with a bad or duplicate name.
    rejected: Vec<usize>,
}

fn name_all(
    sources: &[Source],
    prev: &[Arc<Profile>],
    zones: &[Zone],
    sole_origin: Option<&Name>,
    errors: &mut Vec<ConfigError>,
) -> Names {
    // Parsing the names is most of the work: it runs on all cores, the duplicate check
    // after it in document order.
    let resolved = in_chunks(sources, errors, |part, errs| {
        let name = |src: &Source| match &src.doc {
            Doc::Raw(raw) => {
                let mut sink = Sink { file: &src.file, errors: errs };
                resolve_name(&mut sink, &raw.name, zones, sole_origin)
            }
            Doc::Reused(old) => {
                Some(Named { wire: prev[*old].wire.clone(), zone: prev[*old].zone })
            }
        };
        part.iter().map(name).collect()
    });
    let mut named: Vec<(usize, Named)> = Vec::with_capacity(sources.len());
    let mut ids: HashMap<WireName, usize> = HashMap::with_capacity(sources.len());
    let mut rejected = Vec::new();
    for (i, (src, n)) in sources.iter().zip(resolved).enumerate() {
        let Some(n) = n else {
            rejected.push(i);
            continue;
        };
        match ids.entry(n.wire.clone()) {
            Entry::Occupied(_) => {
                let mut sink = Sink { file: &src.file, errors };
                sink.at(src.name_pos(), format!("two profiles are named {}", n.wire));
                rejected.push(i);
            }
            Entry::Vacant(slot) => {
                slot.insert(named.len());
                named.push((i, n));
            }
        }
    }
    Names { named, ids, rejected }
}

/// Validates one profile. It always returns a profile (so ids stay positions); the load
/// fails as a whole when any error was recorded.
pub(super) struct Builder<'s, 'f> {
    pub(super) sink: &'s mut Sink<'f>,
    pub(super) zones: &'s [Zone],
    /// The one zone's origin, when there is exactly one (relative names resolve to it).
    pub(super) sole_origin: Option<&'s Name>,
    pub(super) ids: &'s HashMap<WireName, usize>,
    pub(super) world: &'s World,
    /// The top-level `load:` rules: an endpoint's watermarks default to theirs.
    pub(super) load_rules: &'s LoadRules,
    /// The profile is at its zone's apex, which cannot be a CNAME.
    pub(super) apex: bool,
    /// The profile's `flatten:`, set by `profile` for its endpoints.
    pub(super) flatten: Option<&'s Loc<bool>>,
}

impl<'s> Builder<'s, '_> {
    fn profile(&mut self, raw: &'s RawProfile, n: &Named) -> Profile {
        self.flatten = raw.flatten.as_deref();
        let method = self.method(&raw.routing);
        let sticky = raw.sticky.as_ref().is_some_and(|s| s.value);
        if let (Some(s), Some(m)) = (&raw.sticky, method)
            && s.value
            && !matches!(m, Method::Weighted | Method::Groups | Method::SameAz)
        {
            self.sink.on(s, "sticky applies to weighted, groups and zone routing only");
        }
        let max_return = match (&raw.max_return, method) {
            (Some(v), Some(Method::Multivalue)) => {
                int_in(self.sink, v, 1, 10, "max_return").unwrap_or(2)
            }
            (Some(v), _) => {
                self.sink.on(v, "max_return applies to multivalue routing only");
                2
            }
            (None, _) => 2,
        };
        let (endpoints, rules) = self.endpoints_and_rules(raw, method);
        let name = n.wire.to_string();
        Profile {
            hash_seed: hash_str(&name),
            name,
            wire: n.wire.clone(),
            zone: n.zone,
            ttl: int_or(self.sink, raw.ttl.as_deref(), 0, 2_147_483_647, "ttl", 30),
            enabled: raw.enabled.unwrap_or(true),
            method: method.unwrap_or(Method::Priority),
            fail_open: raw.fail_open.unwrap_or(true),
            max_return,
            sticky,
            endpoints,
            rules,
            families: Families::default(),
        }
    }

    /// `groups:` for `routing: groups`, `endpoints:` for every other method.
    fn endpoints_and_rules(
        &mut self,
        raw: &RawProfile,
        method: Option<Method>,
    ) -> (Vec<Endpoint>, Rules) {
        if method == Some(Method::Groups) {
            if let Some(e) = &raw.endpoints {
                self.sink.on(e, "routing: groups takes groups:, not endpoints:");
            }
            return self.groups(raw);
        }
        if let Some(g) = &raw.groups {
            self.sink.on(g, "groups: is only used with routing: groups");
        }
        let Some(eps) = &raw.endpoints else {
            self.sink.on(&raw.name, "a profile needs endpoints:");
            return (Vec::new(), Rules::Plain);
        };
        let endpoints = self.endpoints(raw, eps, method);
        let rules = method.map_or(Rules::Plain, |m| self.rules(raw, eps, &endpoints, m));
        (endpoints, rules)
    }

    fn method(&mut self, v: &Loc<String>) -> Option<Method> {
        let m = Method::parse(v.value.as_str());
        if m.is_none() {
            let all: Vec<&str> = Method::ALL.iter().map(|m| m.as_str()).collect();
            self.sink.on(v, format!("unknown routing method {:?} ({})", v.value, all.join(", ")));
        }
        m
    }

    pub(super) fn endpoints(
        &mut self,
        raw: &RawProfile,
        eps: &Loc<Vec<Loc<RawEndpoint>>>,
        method: Option<Method>,
    ) -> Vec<Endpoint> {
        let mut names = HashSet::new();
        let mut priorities = HashSet::new();
        let mut out = Vec::with_capacity(eps.value.len());
        for (pos, ep) in eps.value.iter().enumerate() {
            let e = self.endpoint(raw, ep, pos, method);
            self.method_keys(ep, method);
            if !names.insert(e.name.clone()) {
                self.sink.on(&ep.value.name, format!("duplicate endpoint name {:?}", e.name));
            }
            if !priorities.insert(e.priority) {
                let at = ep.value.priority.as_deref().map_or(Pos::of(ep), Pos::of);
                self.sink.at(
                    at,
                    format!("duplicate priority {} (each endpoint needs its own)", e.priority),
                );
            }
            out.push(e);
        }
        out
    }

    pub(super) fn endpoint(
        &mut self,
        raw: &RawProfile,
        ep: &Loc<RawEndpoint>,
        pos: usize,
        method: Option<Method>,
    ) -> Endpoint {
        let e = &ep.value;
        let name = e.name.value.clone();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            self.sink.on(&e.name, format!("endpoint name {name:?} must match [a-z0-9_-]+"));
        }
        let target = self.target(ep);
        let target = self.flattened(ep, target);
        let nested = matches!(target, Target::Nested(_));
        let always_serve = e.always_serve.as_deref().is_some_and(|a| a.value);
        if nested {
            for (set, key) in [
                (e.always_serve.as_deref().map(Pos::of), "always_serve"),
                (e.monitor.as_deref().map(Pos::of), "monitor"),
                (e.monitors.as_deref().map(Pos::of), "monitors"),
                (e.monitor_rule.as_deref().map(Pos::of), "monitor_rule"),
                (e.load.as_deref().map(Pos::of), "load"),
            ] {
                if let Some(at) = set {
                    self.sink.at(at, format!("{key} does not apply to a nested endpoint (its status comes from the child profile)"));
                }
            }
        }
        if method == Some(Method::Multivalue) && !matches!(target, Target::V4(_) | Target::V6(_)) {
            self.sink.on(ep, "multivalue endpoints must have IP address targets");
        }
        let (monitors, monitor_rule) =
            if nested { Default::default() } else { monitors::resolve(self.sink, raw, ep) };
        let load = match e.load.as_deref() {
            Some(raw) if !nested => super::load::feed(self.sink, raw, self.load_rules),
            _ => None,
        };
        let enabled = e.enabled.unwrap_or(true);
        let (max_weight, default_weight) = match method {
            Some(Method::Groups) => (MAX_GROUP_WEIGHT, 128),
            _ => (MAX_WEIGHT, 1),
        };
        let weight =
            int_or(self.sink, e.weight.as_deref(), 0, max_weight.into(), "weight", default_weight);
        let bias = int_or(self.sink, e.bias.as_deref(), -99, 99, "bias", 0);
        Endpoint {
            name_hash: hash_str(&name),
            name,
            target,
            enabled,
            always_serve,
            priority: int_or(self.sink, e.priority.as_deref(), 1, 1000, "priority", pos as u32 + 1),
            weight,
            configured_enabled: enabled,
            configured_weight: weight,
            drained: false,
            weight_override: None,
            bias,
            configured_bias: bias,
            bias_override: None,
            health_slot: None,
            monitors: if always_serve { Vec::new() } else { monitors },
            monitor_rule,
            flat_slot: None,
            load: load.map(Box::new),
        }
    }

    /// A host-name target as `flatten:` says (the endpoint's, else the profile's); at a
    /// zone apex a host name must be flattened.
    fn flattened(&mut self, ep: &Loc<RawEndpoint>, target: Target) -> Target {
        let own = ep.value.flatten.as_deref();
        let flatten = own.or(self.flatten).is_some_and(|f| f.value);
        match target {
            Target::Host(name) if flatten => Target::Flat(name),
            Target::Host(name) => {
                if self.apex {
                    let at = ep.value.target.as_deref().map_or(Pos::of(ep), Pos::of);
                    self.sink.at(
                        at,
                        format!("{name} is a host name at the zone apex, which cannot be a CNAME: flatten it (flatten: true)"),
                    );
                }
                Target::Host(name)
            }
            other => {
                if let Some(f) = own.filter(|f| f.value) {
                    self.sink.on(f, "flatten applies to host-name targets only");
                }
                other
            }
        }
    }

    fn target(&mut self, ep: &Loc<RawEndpoint>) -> Target {
        let e = &ep.value;
        match (&e.target, &e.profile) {
            (Some(t), None) => self.address_or_host(t),
            (None, Some(p)) => Target::Nested(Nested {
                child: self.child(p),
                min_child: int_or(
                    self.sink,
                    e.min_child_endpoints.as_deref(),
                    1,
                    1000,
                    "min_child_endpoints",
                    1,
                ),
                min_child_v4: int_or(
                    self.sink,
                    e.min_child_endpoints_ipv4.as_deref(),
                    0,
                    1000,
                    "min_child_endpoints_ipv4",
                    0,
                ),
                min_child_v6: int_or(
                    self.sink,
                    e.min_child_endpoints_ipv6.as_deref(),
                    0,
                    1000,
                    "min_child_endpoints_ipv6",
                    0,
                ),
            }),
            (Some(t), Some(_)) => {
                self.sink.on(t, "an endpoint has either target: or profile:, not both");
                Target::V4(std::net::Ipv4Addr::UNSPECIFIED)
            }
            (None, None) => {
                self.sink.on(
                    ep,
                    "an endpoint needs target: (address or host name) or profile: (nested)",
                );
                Target::V4(std::net::Ipv4Addr::UNSPECIFIED)
            }
        }
    }

    fn address_or_host(&mut self, t: &Loc<String>) -> Target {
        let text = t.value.trim();
        if let Ok(ip) = text.parse::<IpAddr>() {
            return match ip {
                IpAddr::V4(a) => Target::V4(a),
                IpAddr::V6(a) => Target::V6(a),
            };
        }
        match Name::from_ascii(text) {
            Ok(n) if text.ends_with('.') && n.num_labels() > 0 => {
                Target::Host(WireName::from_name(&n))
            }
            _ => {
                self.sink.on(t, format!("target {text:?} is neither an IP address nor an absolute host name (ending in '.')"));
                Target::V4(std::net::Ipv4Addr::UNSPECIFIED)
            }
        }
    }

    fn child(&mut self, p: &Loc<String>) -> usize {
        let Some(n) = resolve_name(self.sink, p, self.zones, self.sole_origin) else {
            return usize::MAX;
        };
        match self.ids.get(&n.wire) {
            Some(&id) => id,
            None => {
                self.sink.on(p, format!("nested profile {} does not exist", n.wire));
                usize::MAX
            }
        }
    }
}

/// Rejects nesting cycles and chains deeper than `MAX_NESTING`.
fn check_nesting(
    sources: &[Source],
    named: &[(usize, Named)],
    profiles: &[Profile],
    errors: &mut Vec<ConfigError>,
) {
    let mut depth: Vec<Option<usize>> = vec![None; profiles.len()];
    for start in 0..profiles.len() {
        let mut path = Vec::new();
        if let Err(cycle) = nest_depth(profiles, start, &mut depth, &mut path) {
            let src = &sources[named[cycle[0]].0];
            let chain: Vec<&str> = cycle.iter().map(|&i| profiles[i].name.as_str()).collect();
            errors.push(ConfigError {
                file: src.file.to_path_buf(),
                pos: src.name_pos(),
                message: format!("nesting cycle: {}", chain.join(" -> ")),
            });
            return;
        }
    }
    for (id, d) in depth.iter().enumerate() {
        if *d == Some(MAX_NESTING + 1) {
            let src = &sources[named[id].0];
            errors.push(ConfigError {
                file: src.file.to_path_buf(),
                pos: src.name_pos(),
                message: format!(
                    "nesting deeper than {MAX_NESTING} levels below {}",
                    profiles[id].name
                ),
            });
        }
    }
}

/// Longest chain of nested hops below `id`; `Err(cycle)` when a profile nests itself.
fn nest_depth(
    profiles: &[Profile],
    id: usize,
    memo: &mut [Option<usize>],
    path: &mut Vec<usize>,
) -> Result<usize, Vec<usize>> {
    if let Some(d) = memo[id] {
        return Ok(d);
    }
    if let Some(at) = path.iter().position(|&p| p == id) {
        let mut cycle = path[at..].to_vec();
        cycle.push(id);
        return Err(cycle);
    }
    path.push(id);
    let mut d = 0;
    for ep in &profiles[id].endpoints {
        if let Target::Nested(n) = &ep.target
            && n.child < profiles.len()
        {
            d = d.max(1 + nest_depth(profiles, n.child, memo, path)?);
        }
    }
    path.pop();
    memo[id] = Some(d);
    Ok(d)
}
