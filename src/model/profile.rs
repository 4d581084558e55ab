//! The validated, immutable shape of a traffic-management profile.
//!
//! These types are what the routing core reads on every query. They are built once per
//! configuration load by `config::validate` and never mutated afterwards; anything that
//! changes at run time (endpoint health) lives in `health` and is addressed by slot.

use std::borrow::Borrow;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use crate::netrange::RangeMap;
use crate::wire::name::WireName;

/// Index of a profile in `Snapshot::profiles`.
pub type ProfileId = usize;

/// Most records one routing decision returns (multivalue's `max_return` is at most 10).
pub const MAX_ANSWERS: usize = 10;

/// How a profile chooses among its endpoints (`docs/routing.md`, "Routing methods").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Priority,
    Weighted,
    Multivalue,
    Performance,
    Geographic,
    Subnet,
    Groups,
    /// Same availability zone first (`routing: zone`).
    SameAz,
    /// By the client's network operator (`routing: asn`).
    Asn,
    /// The nearest endpoint by biased great-circle distance.
    Geoproximity,
}

impl Method {
    pub const ALL: [Method; 10] = [
        Method::Priority,
        Method::Weighted,
        Method::Performance,
        Method::Geographic,
        Method::Multivalue,
        Method::Subnet,
        Method::Groups,
        Method::SameAz,
        Method::Asn,
        Method::Geoproximity,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Priority => "priority",
            Method::Weighted => "weighted",
            Method::Multivalue => "multivalue",
            Method::Performance => "performance",
            Method::Geographic => "geographic",
            Method::Subnet => "subnet",
            Method::Groups => "groups",
            Method::SameAz => "zone",
            Method::Asn => "asn",
            Method::Geoproximity => "geoproximity",
        }
    }

    pub fn parse(s: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// A geographic mapping compiled against the running geo database
/// (at load, by `config`). Derived data: left out of the hash, so the zone
/// fingerprint only sees the mapping itself.
#[derive(Clone, Default)]
pub struct Compiled(pub Option<std::sync::Arc<crate::geo::Classes>>);

impl std::hash::Hash for Compiled {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

// Not the tries themselves: their jump tables alone are 2 x 65,536 entries.
impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(c) => write!(f, "Compiled({} nodes)", c.nodes()),
            None => f.write_str("Compiled(none)"),
        }
    }
}

/// The method-specific data of a profile, indexed by endpoint position.
#[derive(Clone, Debug, Default, Hash)]
pub enum Rules {
    /// priority, weighted, multivalue: everything is on the endpoints.
    #[default]
    Plain,
    Geographic {
        /// Region (`US-CA`, `GEO-EU`, … as ids of the world's hierarchy) → endpoint
        /// index; enabled endpoints only.
        by_region: crate::geo::ByRegion,
        /// `degraded_match: fallback`.
        fallback_on_degraded: bool,
        /// `by_region` compiled against the geo database, when the answer depends on the
        /// place alone (not with `fallback`); set for every load.
        compiled: Compiled,
        /// `AS64496` codes: client ASN → endpoint index, enabled endpoints only; a match
        /// here beats every region code.
        by_asn: crate::geo::ByAsn,
    },
    Subnet {
        /// Ranges of enabled endpoints → endpoint index.
        ranges: RangeMap<usize>,
        /// The endpoint without `subnets`, if any.
        fallback: Option<usize>,
        fallback_on_degraded: bool,
    },
    Performance {
        /// Latency-table region index of each endpoint.
        region: Vec<usize>,
    },
    Groups {
        groups: Vec<Group>,
    },
    SameAz {
        /// Availability-zone index (`topology.zones`) of each endpoint.
        az: Vec<usize>,
        /// Percent of serving endpoints the client's availability zone must hold to be
        /// preferred.
        safety_threshold: u8,
    },
    Asn {
        /// Each endpoint's `asns`, sorted; empty for a fallback endpoint.
        asns: Vec<Vec<u32>>,
    },
    Geoproximity {
        /// Coordinates of each endpoint.
        sites: Vec<Coordinates>,
    },
}

/// A point on the Earth in degrees, as an endpoint's `coordinates` (or its latency-table
/// region's) give it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coordinates {
    pub latitude: f64,
    pub longitude: f64,
}

// By bits: a moved endpoint changes the zone fingerprint like a changed address does.
impl Hash for Coordinates {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (self.latitude.to_bits(), self.longitude.to_bits()).hash(h);
    }
}

/// A Global Accelerator style endpoint group: a slice of the profile's endpoints.
#[derive(Clone, Debug, Hash)]
pub struct Group {
    pub name: String,
    /// Latency-table region index.
    pub region: usize,
    /// Percent of the traffic still unassigned that this group takes.
    pub dial: u8,
    pub endpoints: std::ops::Range<usize>,
}

/// What an endpoint answers with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
    /// A host name, answered as a CNAME.
    Host(WireName),
    /// A host name answered with its addresses, as a resolver last gave them
    /// (`flatten: true`; `model::flat`).
    Flat(WireName),
    /// Another profile, resolved recursively for the same query.
    Nested(Nested),
}

impl Target {
    /// What an address or host-name target answers (nothing for a nested one: that is the
    /// child profile's, computed through it).
    pub fn leaf_families(&self) -> Families {
        match self {
            Target::V4(_) => Families { v4: true, ..Families::default() },
            Target::V6(_) => Families { v6: true, ..Families::default() },
            Target::Host(_) => Families { host: true, ..Families::default() },
            Target::Flat(_) => Families { v4: true, v6: true, host: false },
            Target::Nested(_) => Families::default(),
        }
    }
}

/// The parent-side settings of a nested endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Nested {
    pub child: ProfileId,
    pub min_child: u32,
    pub min_child_v4: u32,
    pub min_child_v6: u32,
}

/// Which query types a target (or a whole profile, recursively) can answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Families {
    pub v4: bool,
    pub v6: bool,
    pub host: bool,
}

impl Families {
    pub fn union(self, other: Families) -> Families {
        Families { v4: self.v4 || other.v4, v6: self.v6 || other.v6, host: self.host || other.host }
    }

    /// Whether something of these families can answer a query of `want`.
    #[inline]
    pub fn answers(self, want: Want) -> bool {
        match want {
            Want::A => self.v4 || self.host,
            Want::Aaaa => self.v6 || self.host,
            Want::Cname => self.host,
            Want::Any => self.v4 || self.v6 || self.host,
            Want::V4Address => self.v4,
            Want::V6Address => self.v6,
        }
    }

    /// Both host-name and address endpoints: whether the name answers with a CNAME is
    /// decided per client, once for every query type (`routing::route_name`).
    #[inline]
    pub fn is_mixed(self) -> bool {
        self.host && (self.v4 || self.v6)
    }
}

/// Which endpoints may answer, by what they answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// IPv4 addresses and host names (an A query).
    A,
    /// IPv6 addresses and host names (an AAAA query).
    Aaaa,
    /// Host names only.
    Cname,
    /// Any endpoint: decides whether a mixed name is a CNAME for the client.
    Any,
    /// IPv4 addresses only: an A query at a mixed name that answers with addresses.
    V4Address,
    /// IPv6 addresses only.
    V6Address,
}

/// A resolved health monitor (profile monitor with the endpoint's overrides merged).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Monitor {
    /// Unique among the endpoint's monitors; a single `monitor:` is named after its
    /// protocol.
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub tolerated_failures: u8,
    pub expected_status: Vec<(u16, u16)>,
    pub headers: Vec<(String, String)>,
    pub body_contains: Option<String>,
    pub tls_verify: bool,
    /// What dns, udp and icmp probes send and expect.
    pub params: super::probe_params::ProbeParams,
    /// `pushed` and `file` monitors: where their results come from; `None` for probes.
    pub external: Option<super::external::ExternalMonitor>,
}

impl Monitor {
    /// Whether a probe decides it (not an external source).
    pub fn is_probed(&self) -> bool {
        self.protocol.is_probed()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    Http,
    Https,
    Tcp,
    Dns,
    Udp,
    Icmp,
    Json,
    Prometheus,
    Grpc,
    /// Results pushed through the admin API.
    Pushed,
    /// Results read from a watched file.
    File,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Https => "https",
            Protocol::Tcp => "tcp",
            Protocol::Dns => "dns",
            Protocol::Udp => "udp",
            Protocol::Icmp => "icmp",
            Protocol::Json => "json",
            Protocol::Prometheus => "prometheus",
            Protocol::Grpc => "grpc",
            Protocol::Pushed => "pushed",
            Protocol::File => "file",
        }
    }

    pub fn is_probed(self) -> bool {
        !matches!(self, Protocol::Pushed | Protocol::File)
    }
}

/// One endpoint of a profile.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub name: String,
    /// Stable hash of `name`, for sticky (rendezvous) picks.
    pub name_hash: u64,
    pub target: Target,
    /// Takes answers: enabled in the configuration and not drained. Routing reads only
    /// this, so a drained endpoint is routed exactly as a disabled one.
    pub enabled: bool,
    pub always_serve: bool,
    pub priority: u32,
    /// The weight routing uses: the run-time override when there is one.
    pub weight: u32,
    /// `enabled` and `weight` as the configuration says, before run-time overrides: what
    /// a load starts from, so that an override cleared since the last load is undone.
    pub configured_enabled: bool,
    pub configured_weight: u32,
    /// Drained at run time (admin API): takes no answers until undrained, but is still
    /// probed, so its health is known when it comes back.
    pub drained: bool,
    /// The weight set at run time, if any.
    pub weight_override: Option<u32>,
    /// `routing: geoproximity`: grows (+) or shrinks (−) the area the endpoint serves,
    /// -99..=99; the run-time override when there is one.
    pub bias: i8,
    /// `bias` as the configuration says.
    pub configured_bias: i8,
    /// The bias set at run time, if any.
    pub bias_override: Option<i8>,
    /// Slot in the health table; `None` for nested endpoints, whose status comes from their
    /// child profile.
    pub health_slot: Option<usize>,
    /// Slot in the snapshot's flat table (`model::flat`) for a `Target::Flat`.
    pub flat_slot: Option<usize>,
    /// The monitors deciding the status, in configuration order; empty for nested and
    /// `always_serve` endpoints, which are never probed.
    pub monitors: Vec<Monitor>,
    /// How `monitors` make one status.
    pub monitor_rule: super::monitor_rule::MonitorRule,
    /// `load:`: where the endpoint's load is read; `None` without one (and for nested
    /// endpoints). Boxed: it is read only when feeds are planned, and inline it would be
    /// most of the endpoint's size in every snapshot.
    pub load: Option<Box<super::load::LoadFeed>>,
}

impl Endpoint {
    #[inline]
    pub fn families(&self, profiles: &[Arc<Profile>]) -> Families {
        match &self.target {
            Target::Nested(n) => profiles[n.child].families,
            leaf => leaf.leaf_families(),
        }
    }

    #[inline]
    pub fn can_answer(&self, want: Want, profiles: &[Arc<Profile>]) -> bool {
        self.families(profiles).answers(want)
    }
}

/// A profile: one DNS name and the method that picks its answer.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Absolute, as written by the operator (for logs and the admin API).
    pub name: String,
    pub wire: WireName,
    pub zone: usize,
    pub ttl: u32,
    pub enabled: bool,
    pub method: Method,
    pub fail_open: bool,
    pub max_return: u8,
    pub sticky: bool,
    /// Stable hash of the name, so sticky picks of different profiles are independent.
    pub hash_seed: u64,
    pub endpoints: Vec<Endpoint>,
    pub rules: Rules,
    /// Union of what the enabled endpoints can answer, through nested children.
    pub families: Families,
}

impl Profile {
    /// A hash of everything of this profile that decides its zone's answers (health slots
    /// excluded). A zone's fingerprint adds these up, so that a patch of one profile
    /// updates it without visiting the others.
    pub fn answer_hash(&self) -> u64 {
        let mut h = DefaultHasher::new();
        let p = self;
        (&p.wire, p.ttl, p.enabled, p.method.as_str(), p.fail_open, p.max_return, p.sticky)
            .hash(&mut h);
        // The method's rules decide answers too: a geo code or subnet moved to another
        // endpoint must bump the serial like an address change does.
        p.rules.hash(&mut h);
        for e in &p.endpoints {
            (&e.name, &e.target, e.enabled, e.always_serve, e.priority, e.weight, &e.monitors)
                .hash(&mut h);
            e.monitor_rule.hash(&mut h);
            e.bias.hash(&mut h);
        }
        h.finish()
    }
}

/// Fills `Profile::families` bottom-up through nested children (no cycles by now).
pub fn compute_families(profiles: &mut [Profile]) {
    let all = all_families(profiles);
    for (p, f) in profiles.iter_mut().zip(all) {
        p.families = f;
    }
}

/// The families of every profile, bottom-up through nested children.
pub fn all_families<P: Borrow<Profile>>(profiles: &[P]) -> Vec<Families> {
    let mut memo: Vec<Option<Families>> = vec![None; profiles.len()];
    for id in 0..profiles.len() {
        families_of(profiles, id, &mut memo);
    }
    memo.into_iter().map(Option::unwrap_or_default).collect()
}

fn families_of<P: Borrow<Profile>>(
    profiles: &[P],
    id: usize,
    memo: &mut [Option<Families>],
) -> Families {
    if let Some(f) = memo[id] {
        return f;
    }
    memo[id] = Some(Families::default()); // guards against cycles in unvalidated input
    let mut f = Families::default();
    for ep in profiles[id].borrow().endpoints.iter().filter(|e| e.enabled) {
        f = f.union(match &ep.target {
            Target::Nested(n) if n.child < profiles.len() => families_of(profiles, n.child, memo),
            leaf => leaf.leaf_families(),
        });
    }
    memo[id] = Some(f);
    f
}

/// The families of `profiles[id]` from its enabled endpoints and the families its nested
/// children hold now: one step of `all_families`, for a snapshot patched in place.
pub fn families_from_children(profiles: &[Arc<Profile>], id: ProfileId) -> Families {
    let p = &profiles[id];
    let enabled = p.endpoints.iter().filter(|e| e.enabled);
    enabled.fold(Families::default(), |f, ep| f.union(ep.families(profiles)))
}
