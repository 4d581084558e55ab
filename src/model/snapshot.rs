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
use super::health::HealthTable;
use super::presigned::Presigned;
use super::profile::Profile;
use super::zone::Zone;
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
    pub tcp: TcpLimits,
    /// Limits of the admin listener (from `admin:`).
    pub admin_limits: AdminLimits,
}

/// A bearer token of the admin API and the name changes made with it are recorded under.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken {
    pub name: String,
    pub secret: String,
}

// Without the secret: listeners are logged with `{:?}`.
impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken").field("name", &self.name).finish_non_exhaustive()
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

/// The addresses health probes connect from (`probe.source_address`): at most one of
/// each family; a family without one lets the system choose.
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
    pub profiles: Vec<Profile>,
    pub health: Arc<HealthTable>,
    /// Geo database, region hierarchy, latency table and topology.
    pub world: Arc<World>,
    /// Query-path counters for this configuration's profiles, zones and endpoints.
    pub counters: QueryCounters,
    /// The keys of DNS cookies.
    pub cookies: Secrets,
    /// Response rate limiting; `None`: off.
    pub rate_limit: Option<RateLimit>,
    /// Signatures of the signed zones' answers, made after the load (`presigned`).
    pub signatures: Presigned,
    /// Query logging in dnstap; `None`: off.
    pub dnstap: Option<Dnstap>,
    /// `cluster:`; `None`: a replica on its own.
    pub cluster: Option<Arc<ClusterSettings>>,
    /// Where health probes connect from.
    pub probe_source: ProbeSource,
    /// `rum:`: real user measurements; `None`: off.
    pub rum: Option<Arc<crate::geo::rum::RumSettings>>,
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
        let counters = QueryCounters::new(profiles.len(), zones.len(), health.len());
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
            dnstap,
            cluster,
            probe_source: ProbeSource::default(),
            rum: None,
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

    pub fn endpoint_count(&self) -> usize {
        self.profiles.iter().map(|p| p.endpoints.len()).sum()
    }
}
