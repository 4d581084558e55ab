//! One immutable view of the whole configuration: zones, profiles and the health table.
//!
//! The server holds it in an `ArcSwap`; each query (or batch of queries) loads it once and
//! never sees a half-applied reload.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::cluster::ClusterSettings;
use super::counters::QueryCounters;
use super::flat::{FlatTable, FlattenSettings};
use super::health::HealthTable;
use super::load::{LoadRules, LoadTable};
use super::presigned::Presigned;
use super::profile::{Profile, ProfileId, Target, families_from_children};
use super::sign_counts::SignCounts;
use super::zone::{Zone, next_serial};
use crate::FastMap;
use crate::geo::World;
use crate::netrange::RangeMap;
use crate::wire::cookie::Secrets;
use crate::wire::name::{WireName, suffix_offset};

/// Where the server listens (from `listen:`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listen {
    pub dns: Vec<SocketAddr>,
    pub admin: Option<SocketAddr>,
    /// Bearer tokens the admin API accepts (`admin.token_file`, named `admin`, and
    /// `admin.tokens`); none: the API needs no token.
    pub admin_tokens: Vec<AdminToken>,
    /// UDP sockets (and threads) per `dns` address; `None`: one per core.
    pub udp_threads: Option<usize>,
    /// Bytes of each UDP socket's receive buffer; `None`: `DEFAULT_UDP_RECEIVE_BUFFER`.
    pub udp_receive_buffer: Option<usize>,
    pub tcp: TcpLimits,
    /// Limits of the admin listener (from `admin:`).
    pub admin_limits: AdminLimits,
    /// The admin API's certificate and key (`admin.tls`); `None`: plain HTTP.
    pub admin_tls: Option<AdminTls>,
    /// The AF_XDP fast path (`listen.xdp`); `None`: sockets only.
    pub xdp: Option<XdpListen>,
}

/// Each UDP socket's receive buffer unless `listen.udp_receive_buffer` says otherwise:
/// the kernel doubles it, and a small query takes about 830 bytes of that, so it holds
/// some 10,000 queries (60 ms at 170k queries/s) where the default 208 KiB holds 250.
pub const DEFAULT_UDP_RECEIVE_BUFFER: usize = 4 << 20;

/// What the AF_XDP fast path takes (`listen.xdp`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpListen {
    pub interface: String,
    /// `None`: every receive queue of the interface.
    pub queues: Option<Vec<u32>>,
    pub addresses: Vec<std::net::IpAddr>,
    pub port: u16,
}

/// The PEM files the admin API serves HTTPS with; read again when they change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminTls {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What an admin token may do: `Read` tokens may only look (GET and HEAD).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenRole {
    Read,
    /// The default, as before roles existed.
    #[default]
    Write,
}

impl TokenRole {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Read => "read",
            TokenRole::Write => "write",
        }
    }
}

/// A bearer token of the admin API and the name changes made with it are recorded under.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken {
    pub name: String,
    pub secret: String,
    pub role: TokenRole,
}

// Without the secret: listeners are logged with `{:?}`.
impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// What one DNS client may hold of the TCP front end (`listen.tcp_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpLimits {
    /// Connections at once over every `dns` address (before the file-descriptor cap).
    pub max_connections: usize,
    /// Connections at once from one IPv4 address or IPv6 /64.
    pub per_source: usize,
    /// A connection with no complete query for this long is closed.
    pub idle_timeout: Duration,
    /// A connection whose answer cannot be written within this long is closed.
    pub io_timeout: Duration,
}

impl Default for TcpLimits {
    fn default() -> TcpLimits {
        TcpLimits {
            max_connections: 1024,
            per_source: 64,
            idle_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(1),
        }
    }
}

/// What one admin API listener may hold (`admin.max_connections`, `admin.header_read_timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminLimits {
    /// Connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// How long a connection may take to send a request head, and may stay idle between
    /// requests, before it is closed.
    pub header_read_timeout: Duration,
}

/// The addresses health probes and load feeds connect from (`probe.source_address`): at
/// most one of each family; a family without one lets the system choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeSource {
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
}

impl ProbeSource {
    /// The address a probe to `target` binds before it connects, if any.
    pub fn for_target(&self, target: IpAddr) -> Option<IpAddr> {
        match target {
            IpAddr::V4(_) => self.v4.map(IpAddr::V4),
            IpAddr::V6(_) => self.v6.map(IpAddr::V6),
        }
    }
}

/// Response rate limiting of UDP answers (`rate_limit:`).
#[derive(Clone, Debug, Default)]
pub struct RateLimit {
    /// Answers per second to one client network, once its burst is spent.
    pub rate: u32,
    /// Answers a client network may get at once after a quiet time (at least `rate`).
    pub burst: u32,
    /// Every `slip`-th answer over the rate goes out truncated; 0: all are dropped.
    pub slip: u32,
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
    /// Networks never limited.
    pub exempt: RangeMap<()>,
}

/// Query logging in dnstap (`log.dnstap`).
#[derive(Clone, Debug, PartialEq)]
pub struct Dnstap {
    pub output: DnstapOutput,
    /// The fraction of exchanges logged, in (0, 1].
    pub sample: f64,
    /// The `identity` and `version` fields of every message.
    pub identity: String,
    pub version: String,
}

/// Where dnstap messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnstapOutput {
    /// A Frame Streams reader listening on this unix socket.
    Socket(PathBuf),
    /// A Frame Streams file, created anew at start.
    File(PathBuf),
}

impl Default for AdminLimits {
    fn default() -> AdminLimits {
        AdminLimits { max_connections: 256, header_read_timeout: Duration::from_secs(10) }
    }
}

#[derive(Debug)]
pub struct Snapshot {
    pub generation: u64,
    pub listen: Listen,
    pub zones: Vec<Zone>,
    zone_index: FastMap<WireName, usize>,
    /// Each behind its own `Arc`, so that a patched snapshot shares every profile it did
    /// not change (ids, and so zone nodes and counters, stay valid).
    pub profiles: Vec<Arc<Profile>>,
    pub health: Arc<HealthTable>,
    /// Geo database, region hierarchy, latency table and topology.
    pub world: Arc<World>,
    /// Query-path counters for this configuration's profiles, zones and endpoints; a
    /// patched snapshot counts on in its predecessor's.
    pub counters: Arc<QueryCounters>,
    /// The keys of DNS cookies.
    pub cookies: Secrets,
    /// Response rate limiting; `None`: off.
    pub rate_limit: Option<RateLimit>,
    /// Signatures of the signed zones' answers, made after the load (`presigned`).
    pub signatures: Presigned,
    /// The server's DNSSEC signing counts, handed on from snapshot to snapshot.
    pub sign_counts: Arc<SignCounts>,
    /// Query logging in dnstap; `None`: off.
    pub dnstap: Option<Dnstap>,
    /// `cluster:`; `None`: a replica on its own.
    pub cluster: Option<Arc<ClusterSettings>>,
    /// Where health probes connect from.
    pub probe_source: ProbeSource,
    /// `rum:`: real user measurements; `None`: off.
    pub rum: Option<Arc<crate::geo::rum::RumSettings>>,
    /// `load:`; `None` when no endpoint has a load feed.
    pub load_rules: Option<Arc<LoadRules>>,
    /// `notify:`: the webhooks status changes are posted to.
    pub notify: Option<Arc<crate::model::notify::NotifySettings>>,
    /// Each endpoint's effective share, by health slot (full without load feedback).
    pub load: Arc<LoadTable>,
    /// `flatten:`, when some endpoint is flattened: how its host name is resolved.
    pub flatten: Option<Arc<FlattenSettings>>,
    /// The addresses of every flattened host name, by `Endpoint::flat_slot`.
    pub flat: Arc<FlatTable>,
}

impl Snapshot {
    pub fn new(
        listen: Listen,
        zones: Vec<Zone>,
        profiles: Vec<Profile>,
        health: Arc<HealthTable>,
        world: Arc<World>,
    ) -> Snapshot {
        let zone_index = zones.iter().enumerate().map(|(i, z)| (z.origin.clone(), i)).collect();
        let counters = Arc::new(QueryCounters::new(profiles.len(), zones.len(), health.len()));
        let load = Arc::new(LoadTable::new(health.len()));
        let profiles = profiles.into_iter().map(Arc::new).collect();
        let cookies = Secrets::of_this_process();
        let rate_limit = None;
        let dnstap = None;
        let cluster = None;
        Snapshot {
            generation: 0,
            listen,
            zones,
            zone_index,
            profiles,
            health,
            world,
            counters,
            cookies,
            rate_limit,
            signatures: Presigned::default(),
            sign_counts: Arc::default(),
            dnstap,
            cluster,
            probe_source: ProbeSource::default(),
            rum: None,
            load_rules: None,
            notify: None,
            load,
            flatten: None,
            flat: Arc::default(),
        }
    }

    /// The zone holding `qname` (lower-case wire format): the longest matching origin, as
    /// (index, zone, byte offset where the origin starts inside `qname`).
    pub fn find_zone(&self, qname: &[u8]) -> Option<(usize, &Zone, usize)> {
        if let [zone] = self.zones.as_slice() {
            // One zone, the common case: compare its origin with the name's tail rather
            // than hash every suffix of the name.
            return suffix_offset(qname, zone.origin.as_bytes()).map(|pos| (0, zone, pos));
        }
        let mut pos = 0;
        while pos < qname.len() {
            if let Some(&i) = self.zone_index.get(&qname[pos..]) {
                return Some((i, &self.zones[i], pos));
            }
            if qname[pos] == 0 {
                return None;
            }
            pos += qname[pos] as usize + 1;
        }
        None
    }

    /// A profile by absolute name (case-insensitive).
    pub fn profile_by_name(&self, name: &WireName) -> Option<usize> {
        let (_, zone, _) = self.find_zone(name.as_bytes())?;
        zone.node(name.as_bytes())?.profile
    }

    /// The load table routing applies: `None` when no endpoint has a load feed.
    #[inline]
    pub fn load_table(&self) -> Option<&LoadTable> {
        self.load_rules.as_ref().map(|_| &*self.load)
    }

    pub fn endpoint_count(&self) -> usize {
        self.profiles.iter().map(|p| p.endpoints.len()).sum()
    }

    /// This snapshot with the profiles of `replaced` (by id) in place of its own: the next
    /// generation, sharing every other profile, the zones' names, the health table and the
    /// counters. Only what an endpoint's `enabled` and `weight` decide may differ (run-time
    /// overrides, applied by `config::patch`): the families of the replaced profiles and
    /// of the profiles nesting them, and the serials of their zones, are updated here, so
    /// the cost grows with the profiles replaced, not with the configuration.
    pub fn patched(&self, replaced: Vec<(ProfileId, Profile)>, now_unix: u64) -> Snapshot {
        let mut profiles = self.profiles.clone();
        let mut zones = self.zones.clone();
        let mut fingerprints: Vec<u64> = zones.iter().map(|z| z.fingerprint).collect();
        let mut touched = Vec::with_capacity(replaced.len());
        for (id, p) in replaced {
            let zone = p.zone;
            let (before, after) = (profiles[id].answer_hash(), p.answer_hash());
            fingerprints[zone] = fingerprints[zone].wrapping_sub(before).wrapping_add(after);
            profiles[id] = Arc::new(p);
            touched.push(id);
        }
        update_families(&mut profiles, touched);
        for (zone, fingerprint) in zones.iter_mut().zip(fingerprints) {
            if fingerprint != zone.fingerprint {
                zone.serial =
                    next_serial(Some((zone.serial, zone.fingerprint)), fingerprint, now_unix);
                zone.fingerprint = fingerprint;
                zone.soa_rdata = zone.soa.rdata(zone.serial);
            }
        }
        Snapshot {
            generation: self.generation + 1,
            listen: self.listen.clone(),
            zones,
            zone_index: self.zone_index.clone(),
            profiles,
            health: self.health.clone(),
            world: self.world.clone(),
            counters: self.counters.clone(),
            cookies: self.cookies,
            rate_limit: self.rate_limit.clone(),
            // Signed again by the pre-signer, as after a reload.
            signatures: Presigned::default(),
            dnstap: self.dnstap.clone(),
            cluster: self.cluster.clone(),
            probe_source: self.probe_source,
            sign_counts: self.sign_counts.clone(),
            rum: self.rum.clone(),
            load_rules: self.load_rules.clone(),
            notify: self.notify.clone(),
            load: self.load.clone(),
            flatten: self.flatten.clone(),
            flat: self.flat.clone(),
        }
    }
}

/// Recomputes the families of the profiles `from` and, while they change, of the
/// profiles nesting them. Who nests whom is found only when a family changed (draining the
/// last endpoint of a kind), by one pass over every endpoint.
fn update_families(profiles: &mut [Arc<Profile>], from: Vec<ProfileId>) {
    let mut parents: Option<FastMap<ProfileId, Vec<ProfileId>>> = None;
    let mut work = from;
    while let Some(id) = work.pop() {
        let families = families_from_children(profiles, id);
        if families == profiles[id].families {
            continue;
        }
        Arc::make_mut(&mut profiles[id]).families = families;
        let parents = parents.get_or_insert_with(|| nesting(profiles));
        work.extend(parents.get(&id).into_iter().flatten().copied());
    }
}

/// The profiles that nest each child profile.
fn nesting(profiles: &[Arc<Profile>]) -> FastMap<ProfileId, Vec<ProfileId>> {
    let mut out: FastMap<ProfileId, Vec<ProfileId>> = FastMap::default();
    for (id, p) in profiles.iter().enumerate() {
        for ep in &p.endpoints {
            if let Target::Nested(n) = &ep.target {
                out.entry(n.child).or_default().push(id);
            }
        }
    }
    out
}
