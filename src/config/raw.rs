//! `Raw*` structs mirror the YAML exactly (`docs/configuration.md`) and reject unknown keys.
//! Values that later checks may complain about are `Loc` (located), so every error can name
//! its FILE:LINE:COL. No meaning is given to anything here; `validate` does that.
//!
//! The same structs give the JSON Schema of the files (`schema`): their doc comments are
//! its descriptions, written for the people editing the YAML, and `#[schemars(with)]`
//! names the schema of a value kept as text here and parsed later.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::schema::{
    AsnNumber, DegradedMatch, DurationText, EndpointName, ListenAddress, MissingPolicy,
    MonitorRuleSpec, Network, OnStaleName, ProbeProtocol, RoutingMethod, SourceAddress, Target,
    TokenRoleName, WebhookFormatName,
};

use crate::diag::{Located, Pos};

// Optional values of the per-profile structs are boxed: with a dozen absent keys per
// endpoint, inline values would make every endpoint several times larger, and large
// configurations slower to load (more to move and to fault in).

/// Where to listen, which zones to serve and where the profiles are.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "steerdns.yaml")]
pub struct RawServer {
    /// The DNS and admin listeners and the limits of DNS over TCP.
    pub listen: Option<RawListen>,
    pub admin: Option<RawAdmin>,
    pub cookies: Option<RawCookies>,
    pub rate_limit: Option<Loc<RawRateLimit>>,
    /// Query logs.
    pub log: Option<RawLog>,
    /// The zones served authoritatively: at least one.
    pub zones: Loc<Vec<Loc<RawZone>>>,
    pub geo: Option<RawGeo>,
    pub asn: Option<RawAsn>,
    pub latency: Option<RawLatency>,
    pub topology: Option<RawTopology>,
    /// The profiles directory (default `profiles/`): every `*.yaml` and `*.yml` file
    /// directly in it is read, in name order. `etcd`: the profiles are the keys under
    /// `<cluster.etcd.prefix>profiles/` (a directory named `etcd` is `./etcd`).
    pub profiles: Option<Loc<String>>,
    /// Several replicas sharing profiles, health views and overrides through etcd.
    pub cluster: Option<RawCluster>,
    // Size limits of the files a load reads.
    pub limits: Option<RawLimits>,
    /// Where run-time overrides (drain, weight) are kept.
    pub state_file: Option<Loc<String>>,
    /// How health probes connect.
    pub probe: Option<RawProbe>,
    /// Real user measurements: a beacon in web pages measures each region's round trip.
    pub rum: Option<Loc<RawRum>>,
    /// Load feedback: the rules that turn endpoints' loads into shares of their traffic
    /// (docs/load.md). Applies to endpoints with a `load:` of their own.
    pub load: Option<Loc<RawLoad>>,
    /// How flattened host names (`flatten: true` on a profile or an endpoint) are
    /// resolved, and how long their addresses are served (docs/routing.md, "Flattening and
    /// the zone apex").
    pub flatten: Option<Loc<RawFlatten>>,
    /// Notifications of endpoint and profile status changes (docs/notifications.md).
    pub notify: Option<Loc<RawNotify>>,
}

/// `notify:`: where status changes are sent.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Notify")]
pub struct RawNotify {
    /// The webhooks every change is posted to, each on its own: at most 16.
    pub webhooks: Loc<Vec<Loc<RawWebhook>>>,
    /// How many messages each webhook's queue holds while it is slow or down; when full,
    /// the oldest is dropped: 1..100000 (default 1000).
    pub queue: Option<Loc<Int>>,
}

/// `notify.webhooks[]`: one receiver of status changes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Webhook")]
pub struct RawWebhook {
    /// Names the webhook in metrics and logs: unique, letters, digits, `-` and `_`.
    pub name: Loc<String>,
    /// `http://` or `https://` URL posted to. With `format: alertmanager`, the
    /// Alertmanager's address: `/api/v2/alerts` is added to its path.
    pub url: Loc<String>,
    /// The body: `generic` (JSON, one change), `slack` (an incoming webhook's `text`) or
    /// `alertmanager` (Alertmanager's v2 API) (default generic).
    #[schemars(with = "Option<WebhookFormatName>")]
    pub format: Option<Loc<String>>,
    /// How long one attempt may take, connecting and reading the response included:
    /// 100ms..1m (default 5s).
    #[schemars(with = "Option<DurationText>")]
    pub timeout: Option<Loc<String>>,
    /// Extra request headers: at most 16 (`Content-Type`, `Content-Length`, `Host` and,
    /// with `secret_file`, `Authorization` are set by steerdns).
    pub headers: Option<Loc<BTreeMap<String, String>>>,
    /// A file holding a token sent as `Authorization: Bearer <token>` (surrounding white
    /// space ignored; at most 4KiB). Read at every load.
    pub secret_file: Option<Loc<String>>,
    /// Attempts after the first when the receiver cannot be reached or answers other than
    /// 2xx, after 1s, 2s, 4s... (at most 60s) apart: 0..20 (default 5).
    pub retries: Option<Loc<Int>>,
    /// `format: alertmanager` only: how often the alerts still open are sent again, to stay
    /// within the Alertmanager's `resolve_timeout`: 1s..1h (default 1m).
    #[schemars(with = "Option<DurationText>")]
    pub refresh: Option<Loc<String>>,
}

/// `flatten:`: the resolvers of flattened host names and the serve-stale rules (every key
/// optional).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Flatten")]
pub struct RawFlatten {
    /// Recursive resolvers, `address` or `address:port` (`[v6]:port`), 1 to 8, tried in
    /// turn (default the `nameserver` lines of /etc/resolv.conf).
    pub resolvers: Option<Loc<Vec<Loc<String>>>>,
    /// How long one resolver may take to answer one lookup: 100ms..30s (default 2s).
    #[schemars(with = "Option<DurationText>")]
    pub timeout: Option<Loc<String>>,
    /// How long addresses are served past their records' expiry while the name does not
    /// resolve (RFC 8767): 0s..7d (default 1d).
    #[schemars(with = "Option<DurationText>")]
    pub stale_for: Option<Loc<String>>,
    /// TTL of a stale answer, 1..3600 (default 30).
    pub stale_ttl: Option<Loc<Int>>,
    /// Only answers the resolver validated (AD set) count; others are failures (default
    /// false).
    pub require_ad: Option<Loc<bool>>,
    /// Lookups running at once: 1..256 (default 16).
    pub max_in_flight: Option<Loc<Int>>,
}

/// `load:`: the control rules of load feedback (every key optional).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Load")]
pub struct RawLoad {
    /// One control step per interval; pulled feeds are read once per step: 100ms..1h
    /// (default 5s).
    #[schemars(with = "Option<DurationText>")]
    pub interval: Option<Loc<String>>,
    /// Utilisation at or below which an endpoint takes its full share: 0 <= low < high
    /// (default 0.7).
    pub low: Option<Loc<f64>>,
    /// Utilisation at or above which an endpoint's share aims at 0: low < high <= 10
    /// (default 0.9).
    pub high: Option<Loc<f64>>,
    /// The most a share moves in one step: above 0, at most 1 (default 0.1).
    pub max_step: Option<Loc<f64>>,
    /// Target moves smaller than this are ignored: 0 <= deadband < 1 (default 0.02).
    pub deadband: Option<Loc<f64>>,
    /// A reading older than this is stale: at least `interval` (default 3 x interval).
    #[schemars(with = "Option<DurationText>")]
    pub stale_after: Option<Loc<String>>,
    /// What a stale reading means: `ignore` (the share returns to 1) or `overloaded` (the
    /// share aims at 0) (default ignore).
    #[schemars(with = "Option<OnStaleName>")]
    pub on_stale: Option<Loc<String>>,
    /// How long one pulled feed request may take: 10ms..interval (default 2s, or the
    /// interval when shorter).
    #[schemars(with = "Option<DurationText>")]
    pub timeout: Option<Loc<String>>,
}

/// `probe:`: settings of every health probe.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Probe")]
pub struct RawProbe {
    /// The address probes (and pulled load feeds) connect from: an IPv4 address, an IPv6
    /// address, or a list of at most one of each. Probes to an address of the other family
    /// let the system choose. Applies from each probe's next check after a reload.
    #[schemars(with = "Option<SourceAddress>")]
    pub source_address: Option<Loc<SourceAddresses>>,
}

/// `probe.source_address`: one address, or a list of them (each located).
#[derive(Debug)]
pub enum SourceAddresses {
    One(String),
    Many(Vec<Loc<String>>),
}

impl<'de> Deserialize<'de> for SourceAddresses {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SourceAddresses, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SourceAddresses;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an IP address or a list of IP addresses")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SourceAddresses, E> {
                Ok(SourceAddresses::One(v.to_string()))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SourceAddresses, A::Error> {
                let mut out = Vec::new();
                while let Some(a) = seq.next_element::<Loc<String>>()? {
                    out.push(a);
                }
                Ok(SourceAddresses::Many(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// `cluster:`. A change of any key needs a restart.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Cluster")]
pub struct RawCluster {
    /// This replica's name among the replicas (default the host name): letters, digits,
    /// `-`, `_` and `.`, at most 63 characters.
    pub node: Option<Loc<String>>,
    pub etcd: Loc<RawEtcd>,
    pub health: Option<RawClusterHealth>,
    /// How long this replica's registration and health views outlive it: 2s..10m
    /// (default 10s). It renews them every third of that.
    #[schemars(with = "Option<DurationText>")]
    pub lease: Option<Loc<String>>,
    /// The copy of the profiles last applied from etcd, from which a replica starts while
    /// etcd is down (default `cluster-cache.json` next to this file).
    pub cache_file: Option<Loc<String>>,
}

/// `cluster.etcd:`: how to reach etcd.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Etcd")]
pub struct RawEtcd {
    /// `http://HOST:PORT` or `https://HOST:PORT` of etcd's client URLs: at least one.
    pub endpoints: Loc<Vec<Loc<String>>>,
    /// Every key starts with it (default `/steerdns/`); ends with `/`.
    pub prefix: Option<Loc<String>>,
    pub tls: Option<Loc<RawEtcdTls>>,
    /// etcd user name; needs `password_file`.
    pub username: Option<Loc<String>>,
    /// File holding the etcd user's password (surrounding white space ignored).
    pub password_file: Option<Loc<String>>,
}

/// `cluster.etcd.tls:`: PEM files.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "EtcdTls")]
pub struct RawEtcdTls {
    /// The CA certificates etcd's server certificate must chain to.
    pub ca: Loc<String>,
    /// Client certificate; needs `key`.
    pub cert: Option<Loc<String>>,
    /// The client certificate's private key; needs `cert`.
    pub key: Option<Loc<String>>,
}

/// `cluster.health:`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ClusterHealth")]
pub struct RawClusterHealth {
    /// How many fresh vantage points must see an endpoint failing to fail it over: `any`,
    /// `majority` (more than half; the default), `all`, or `N%` (at least N percent).
    pub quorum: Option<Loc<String>>,
}

/// `listen:`. A change of any key needs a restart.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Listen")]
pub struct RawListen {
    /// `IP:PORT` (`[IPv6]:PORT`) addresses serving DNS over UDP and TCP, at least one
    /// (default `["0.0.0.0:53", "[::]:53"]`); port 0 picks a free port.
    #[schemars(with = "Option<Vec<ListenAddress>>")]
    pub dns: Option<Loc<Vec<Loc<String>>>>,
    /// `IP:PORT` of the admin HTTP API; no admin API when unset.
    #[schemars(with = "Option<ListenAddress>")]
    pub admin: Option<Loc<String>>,
    /// UDP sockets, each with its own thread, per DNS address: 1..1024 (default one per
    /// core).
    pub udp_threads: Option<Loc<Int>>,
    /// Receive buffer of each UDP socket, which absorbs bursts of queries: 64KiB..256MiB
    /// (default 4MiB). Set past `net.core.rmem_max` where the server has CAP_NET_ADMIN;
    /// otherwise capped by it, with a warning.
    pub udp_receive_buffer: Option<Loc<SizeText>>,
    /// DNS TCP connections open at once over every address: 1..1000000 (default 1024;
    /// capped by the open-file limit). A full table evicts the connection idle longest.
    pub tcp_max_connections: Option<Loc<Int>>,
    /// DNS TCP connections at once from one IPv4 address or IPv6 /64: 1..1000000
    /// (default 64).
    pub tcp_per_source: Option<Loc<Int>>,
    /// A TCP connection without a complete query for this long is closed: 100ms..1h
    /// (default 10s).
    #[schemars(with = "Option<DurationText>")]
    pub tcp_idle_timeout: Option<Loc<String>>,
    /// A TCP connection whose answers cannot be written within this long is closed:
    /// 10ms..60s (default 1s).
    #[schemars(with = "Option<DurationText>")]
    pub tcp_io_timeout: Option<Loc<String>>,
    /// Answer UDP queries for some addresses in AF_XDP sockets on one interface, before
    /// the kernel's network stack (Linux only; needs CAP_NET_ADMIN, CAP_BPF and
    /// CAP_NET_RAW). Every other packet reaches the kernel as before.
    pub xdp: Option<Loc<RawXdp>>,
}

/// `listen.xdp:`: the AF_XDP fast path.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ListenXdp")]
pub struct RawXdp {
    /// The network interface, e.g. `eth0`.
    pub interface: Loc<String>,
    /// Receive queues to serve, one socket and thread each: 0..1023 (default every
    /// receive queue of the interface).
    pub queues: Option<Loc<Vec<Loc<Int>>>>,
    /// Destination IP addresses whose UDP queries are taken, at least one; they should
    /// also be among `listen.dns` so TCP and anything XDP passes are served.
    pub addresses: Loc<Vec<Loc<String>>>,
    /// Destination UDP port taken: 1..65535 (default 53).
    pub port: Option<Loc<Int>>,
}

/// `admin:`: access to and limits of the admin API.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Admin")]
pub struct RawAdmin {
    /// File holding the bearer token every admin call but `/healthz` needs (surrounding
    /// white space ignored). Read at every load, so a reload applies a new token.
    pub token_file: Option<Loc<String>>,
    /// Named tokens, so that the admin API can say who made a change.
    pub tokens: Option<Loc<Vec<Loc<RawToken>>>>,
    // Exposure and limits of the admin listener.
    /// Allow `listen.admin` on an address other than loopback without `token_file`
    /// (default false: that is an error).
    pub allow_unauthenticated: Option<Loc<bool>>,
    /// Admin API connections open at once: 1..65536 (default 256).
    pub max_connections: Option<Loc<Int>>,
    /// How long an admin connection may take to send a request head, or stay idle
    /// between requests (default 10s).
    #[schemars(with = "Option<DurationText>")]
    pub header_read_timeout: Option<Loc<String>>,
    /// Serve the admin API over HTTPS with this certificate and key (PEM files, read
    /// again when they change).
    pub tls: Option<Loc<RawAdminTls>>,
}

/// `admin.tls:`: the admin API's certificate and key.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "AdminTls")]
pub struct RawAdminTls {
    /// PEM file holding the certificate chain, the server's certificate first.
    pub cert: Loc<String>,
    /// PEM file holding the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Loc<String>,
}

/// One of `admin.tokens`: a name and the file holding its token.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Token")]
pub struct RawToken {
    /// Who holds the token: the name the admin API records with each change it makes.
    pub name: Loc<String>,
    /// File holding the token (surrounding white space ignored).
    pub file: Loc<String>,
    /// `read`: the token may only look (GET calls); `write` (the default): it may also
    /// drain, set weights and reload.
    #[schemars(with = "Option<TokenRoleName>")]
    pub role: Option<Loc<String>>,
}

/// `rate_limit:`: response rate limiting of UDP answers.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "RateLimit")]
pub struct RawRateLimit {
    /// UDP answers per second to one client network once its burst is spent:
    /// 1..1000000 (default 100).
    pub rate: Option<Loc<Int>>,
    /// Answers a client network may get at once after a quiet time: `rate`..16000000
    /// (default `rate`).
    pub burst: Option<Loc<Int>>,
    /// Every `slip`-th answer over the rate goes out truncated, the others are dropped:
    /// 0..100 (default 2; 0 drops them all).
    pub slip: Option<Loc<Int>>,
    /// Prefix length of the IPv4 client networks counted together: 8..32 (default 24).
    pub ipv4_prefix: Option<Loc<Int>>,
    /// Prefix length of the IPv6 client networks counted together: 16..128 (default 56).
    pub ipv6_prefix: Option<Loc<Int>>,
    /// Networks never limited: CIDRs or `start-end` ranges, not overlapping.
    #[serde(default)]
    #[schemars(with = "Vec<Network>")]
    pub exempt: Vec<Loc<String>>,
}

/// `log:`: query logs.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Log")]
pub struct RawLog {
    /// Log queries and responses in dnstap (Frame Streams) to a socket or a file.
    pub dnstap: Option<Loc<RawDnstap>>,
}

/// `log.dnstap:`: query logs in dnstap, to a socket or a file (exactly one of them).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Dnstap")]
pub struct RawDnstap {
    /// Unix socket of a Frame Streams reader (bidirectional), e.g. `fstrm_capture -u`.
    pub socket: Option<Loc<String>>,
    /// File written in Frame Streams (unidirectional), relative to steerdns.yaml.
    pub file: Option<Loc<String>>,
    /// The fraction of queries logged: above 0, at most 1 (default 1).
    pub sample: Option<Loc<f64>>,
    /// The messages' identity field (default: the host name).
    pub identity: Option<Loc<String>>,
    /// The messages' version field (default: `steerdns` and its version).
    pub version: Option<Loc<String>>,
}

/// `cookies:`: the DNS cookie secrets, shared by replicas.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Cookies")]
pub struct RawCookies {
    /// File holding the DNS cookie secret: 32 hexadecimal digits.
    pub secret_file: Loc<String>,
    /// File holding the secret before the last rotation: cookies made with it stay valid.
    pub previous_secret_file: Option<Loc<String>>,
}

/// `geo:`: where clients are.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Geo")]
pub struct RawGeo {
    /// MaxMind DB file (GeoIP2/GeoLite2 City or Country, or one from `steerdns geo build`).
    pub database: Loc<String>,
}

/// `asn:`: which network operator clients belong to, for `routing: asn` and `AS` codes in
/// `geo:`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Asn")]
pub struct RawAsn {
    /// MaxMind DB in the GeoLite2-ASN layout (GeoLite2-ASN, or one from
    /// `steerdns geo build --asn`); read whole into memory; a change reloads.
    pub database: Loc<String>,
}

/// `latency:`: the latency table, needed by `performance` and `groups` routing.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Latency")]
pub struct RawLatency {
    /// The latency table file: `regions:` with coordinates and `rtt:` rows.
    pub table: Loc<String>,
}

/// `rum:`: real user measurements (docs/rum.md). A change needs a restart.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Rum")]
pub struct RawRum {
    /// Addresses of the public, unauthenticated HTTP listener serving the beacon, its
    /// configuration and the reports: at least one IP:PORT.
    #[schemars(with = "Vec<ListenAddress>")]
    pub listen: Loc<Vec<Loc<String>>>,
    /// The URLs the beacon times, one per region of the latency table (at least one).
    pub targets: Loc<Vec<Loc<RawRumTarget>>>,
    /// Prefix length of the IPv4 client networks measured together: 8..32 (default 24).
    pub ipv4_prefix: Option<Loc<Int>>,
    /// Prefix length of the IPv6 client networks measured together: 16..128 (default 48).
    pub ipv6_prefix: Option<Loc<Int>>,
    /// Samples a network needs for a region within the window before its time is used:
    /// 1..16 (default 5).
    pub min_samples: Option<Loc<Int>>,
    /// How long a sample counts (default 24h; at least 1s).
    #[schemars(with = "Option<DurationText>")]
    pub window: Option<Loc<String>>,
    /// A sample's weight halves every half-life of age (default 1h; 1s..window).
    #[schemars(with = "Option<DurationText>")]
    pub half_life: Option<Loc<String>>,
    /// The most client networks kept: 1..10000000 (default 100000). One more evicts the
    /// network least recently reported.
    pub max_networks: Option<Loc<Int>>,
    /// Proxies (CIDRs) whose `X-Forwarded-For` header names the client; from any other
    /// peer the header is ignored.
    #[serde(default)]
    #[schemars(with = "Vec<Network>")]
    pub trusted_proxies: Vec<Loc<String>>,
    /// Reports one client address may send per minute once its burst is spent:
    /// 1..100000 (default 30).
    pub reports_per_minute: Option<Loc<Int>>,
    /// Reports one client address may send at once: 1..100000 (default 10).
    pub burst: Option<Loc<Int>>,
    /// The largest report body: 64 bytes..1MiB (default 4KiB).
    pub max_report_size: Option<Loc<SizeText>>,
    /// A network's preferred region changes only when another is faster by at least this
    /// many milliseconds (and by `margin_percent`): 0..10000 (default 10).
    pub margin_ms: Option<Loc<f64>>,
    /// ... and by at least this percentage of the preferred region's time: 0..100
    /// (default 10).
    pub margin_percent: Option<Loc<f64>>,
    /// How often the measured table is rebuilt (default 5s; 100ms..10m).
    #[schemars(with = "Option<DurationText>")]
    pub publish_interval: Option<Loc<String>>,
    /// The file the samples are kept in across restarts, relative to this file (default:
    /// the top-level `state_file` with `.rum` appended; none without it: memory only).
    pub state_file: Option<Loc<String>>,
    /// How often the samples are written to the state file, and at shutdown (default 1m;
    /// 1s..1h).
    #[schemars(with = "Option<DurationText>")]
    pub save_interval: Option<Loc<String>>,
    /// In a cluster: how often each replica writes its figures to etcd and the leading
    /// replica merges them into the shared table (default 10s; 1s..10m).
    #[schemars(with = "Option<DurationText>")]
    pub share_interval: Option<Loc<String>>,
}

/// One measurement URL of `rum.targets`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "RumTarget")]
pub struct RawRumTarget {
    /// The region measured: a region of the latency table.
    pub region: Loc<String>,
    /// An http or https URL the browser fetches (a small, uncached object in that region).
    pub url: Loc<String>,
}

/// `topology:`: the client networks of each zone, for `routing: zone`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Topology")]
pub struct RawTopology {
    /// `zone-name: [CIDRs or start-end ranges]`; networks may not overlap.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Vec<Network>>")]
    pub zones: BTreeMap<String, Vec<Loc<String>>>,
}

/// `limits:`: sizes written with a unit (`16MiB`) or as a number of bytes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Limits")]
pub struct RawLimits {
    /// The most one profile file may hold (default 16MiB).
    pub profile_file: Option<Loc<SizeText>>,
    /// The most all profile files together may hold (default 256MiB).
    pub profiles_total: Option<Loc<SizeText>>,
    /// The most a `zones[].file` may hold (default 64MiB).
    pub zone_file: Option<Loc<SizeText>>,
    /// The most the latency table may hold (default 128MiB).
    pub latency_table: Option<Loc<SizeText>>,
    /// The most the geo database may hold (default 512MiB); it is read whole into memory.
    pub geo_database: Option<Loc<SizeText>>,
    /// The most the ASN database may hold (default 128MiB); it is read whole into memory.
    pub asn_database: Option<Loc<SizeText>>,
}

/// A size as written, a number or a string; `check::size` gives it meaning.
#[derive(Debug)]
pub struct SizeText(pub String);

impl<'de> Deserialize<'de> for SizeText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SizeText, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SizeText;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a size such as 16MiB")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A zone served authoritatively.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Zone")]
pub struct RawZone {
    /// Absolute zone name (`tm.example.com.`).
    pub origin: Loc<String>,
    /// Name servers, absolute or relative to the origin: at least one.
    pub ns: Loc<Vec<Loc<String>>>,
    pub soa: Loc<RawSoa>,
    /// TTL of SOA, NS and static records without their own (default 3600).
    pub ttl: Option<Loc<Int>>,
    /// Static records in zone-file syntax, names relative to the origin
    /// (`"ns1 A 192.0.2.53"`); not SOA or NS.
    #[serde(default)]
    pub records: Vec<Loc<String>>,
    /// RFC 1035 master file with more static records.
    pub file: Option<Loc<String>>,
    /// Sign the zone's answers (DNSSEC) with the keys in a directory.
    pub dnssec: Option<Loc<RawDnssec>>,
}

/// `zones[].dnssec:`: where the zone's keys are, and how long signatures last.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Dnssec")]
pub struct RawDnssec {
    /// Directory of BIND-format key pairs (`K<zone>.+<alg>+<tag>.key` / `.private`), relative
    /// to steerdns.yaml.
    pub keys: Loc<String>,
    /// How long a signature is valid from its inception (default 7d; 1h..365d).
    #[schemars(with = "Option<DurationText>")]
    pub signature_validity: Option<Loc<String>>,
    /// How far before the signing time a signature's inception is set, for clients whose
    /// clocks are behind (default 1h; 0s..7d).
    #[schemars(with = "Option<DurationText>")]
    pub inception_offset: Option<Loc<String>>,
}

/// The zone's SOA record; the serial is set automatically. Timers: 0..2147483647 seconds.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Soa")]
pub struct RawSoa {
    /// Primary name server (default the first of `ns`).
    pub mname: Option<Loc<String>>,
    /// Mailbox of the person responsible, as a name (`hostmaster.example.com.`).
    pub rname: Loc<String>,
    /// Default 14400.
    pub refresh: Option<Loc<Int>>,
    /// Default 3600.
    pub retry: Option<Loc<Int>>,
    /// Default 1209600.
    pub expire: Option<Loc<Int>>,
    /// Default 300; negative answers are cached for min(ttl, minimum).
    pub minimum: Option<Loc<Int>>,
}

/// One profile document: a name answered by running a routing method over its endpoints.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "steerdns profile")]
pub struct RawProfile {
    /// The name answered: relative to the zone when exactly one zone is configured, else
    /// absolute (`www.tm.example.test.`).
    pub name: Loc<String>,
    /// TTL of the answers: 0..2147483647 (default 30).
    pub ttl: Option<Box<Loc<Int>>>,
    /// false: the name answers NXDOMAIN and its endpoints are not probed (default true).
    pub enabled: Option<bool>,
    /// The routing method.
    #[schemars(with = "RoutingMethod")]
    pub routing: Loc<String>,
    /// With no serving endpoint, degraded ones serve (default true); false: NODATA.
    pub fail_open: Option<bool>,
    /// multivalue: how many addresses an answer holds, 1..10 (default 2).
    pub max_return: Option<Box<Loc<Int>>>,
    /// weighted, groups, zone: pick by a hash of the client /24 (IPv6 /56) (default false).
    pub sticky: Option<Box<Loc<bool>>>,
    /// geographic, subnet: `serve` answers the matched endpoint whatever its health;
    /// `fallback` continues up the hierarchy or to the fallback endpoint (default serve).
    #[schemars(with = "Option<DegradedMatch>")]
    pub degraded_match: Option<Box<Loc<String>>>,
    /// zone: the client's zone answers while it holds at least this percentage of the
    /// serving endpoints, 0..100 (default 20).
    pub safety_threshold: Option<Box<Loc<Int>>>,
    /// The default monitor of every endpoint; with `monitors`, default values for the
    /// fields of every probe monitor in them.
    pub monitor: Option<Box<Loc<RawMonitor>>>,
    /// The default monitors of every endpoint (each needs a `name`), combined by
    /// `monitor_rule`; an endpoint's own `monitors` replaces this list as a whole.
    pub monitors: Option<Box<Loc<Vec<Loc<RawMonitor>>>>>,
    /// How an endpoint's `monitors` make its status: `all` (default), `any` or
    /// `{at_least: N}`; an endpoint's own `monitor_rule` wins.
    #[schemars(with = "Option<MonitorRuleSpec>")]
    pub monitor_rule: Option<Box<Loc<RawMonitorRule>>>,
    /// The endpoints (may be empty: the name then answers NODATA); groups routing has
    /// `groups` instead.
    pub endpoints: Option<Box<Loc<Vec<Loc<RawEndpoint>>>>>,
    /// groups: the endpoint groups, instead of `endpoints`.
    pub groups: Option<Box<Loc<Vec<Loc<RawGroup>>>>>,
    /// Every host-name endpoint answers with its host name's addresses instead of a CNAME
    /// (default false); needed for host-name endpoints at a zone apex.
    pub flatten: Option<Box<Loc<bool>>>,
}

/// A health monitor. An endpoint's keys are merged over the profile's, key by key.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Monitor")]
pub struct RawMonitor {
    /// In `monitors`: required, unique in the list, [a-z0-9_-]+ (a single `monitor` is
    /// named after its protocol).
    #[schemars(with = "Option<EndpointName>")]
    pub name: Option<Box<Loc<String>>>,
    /// Default http. `pushed`: results set through the admin API; `file`: results read
    /// from `file`.
    #[schemars(with = "Option<ProbeProtocol>")]
    pub protocol: Option<Box<Loc<String>>>,
    /// 1..65535 (default 80 for http, 443 for https; required for tcp).
    pub port: Option<Box<Loc<Int>>>,
    /// http(s) only: the path requested, starting with `/` (default `/`).
    pub path: Option<Box<Loc<String>>>,
    /// Time between probes: 1s..1h (default 30s).
    #[schemars(with = "Option<DurationText>")]
    pub interval: Option<Box<Loc<String>>>,
    /// A probe not done within this long fails; below the interval (default
    /// min(10s, max(interval - 1s, interval / 2))).
    #[schemars(with = "Option<DurationText>")]
    pub timeout: Option<Box<Loc<String>>>,
    /// Failures in a row still counted online: 0..9 (default 3).
    pub tolerated_failures: Option<Box<Loc<Int>>>,
    /// http(s): 1 to 8 status codes (`301`) or ranges (`"200-299"`) within 100..599
    /// (default `["200-299"]`).
    pub expected_status: Option<Box<Loc<Vec<Loc<StatusSpec>>>>>,
    /// http(s): at most 8 request headers; one named like a default header (`Host`,
    /// `User-Agent`, `Accept`, `Connection`) replaces it.
    pub headers: Option<Box<Loc<BTreeMap<String, String>>>>,
    /// http(s): text that must appear in the first 5120 bytes of the body.
    pub body_contains: Option<Box<Loc<String>>>,
    /// https: validate the certificate (default false).
    pub tls_verify: Option<Box<Loc<bool>>>,
    /// dns: the name asked (required on dns monitors).
    pub query_name: Option<Box<Loc<String>>>,
    /// dns: the query type, a mnemonic such as A, AAAA, TXT, SOA (default A).
    pub query_type: Option<Box<Loc<String>>>,
    /// dns: the RCODE the answer must have, a name (NOERROR, NXDOMAIN, ...) or a number
    /// 0..4095 (default NOERROR).
    pub expected_rcode: Option<Box<Loc<StatusSpec>>>,
    /// dns: an address equal to an A or AAAA answer, or text found in the presentation
    /// form of an answer's RDATA.
    pub answer_contains: Option<Box<Loc<String>>>,
    /// udp: the datagram sent, text with escapes (`\n`, `\r`, `\t`, `\0`, `\\`, `\xHH`), at most
    /// 512 bytes (required on udp monitors).
    pub send: Option<Box<Loc<String>>>,
    /// udp: a regular expression the reply must match somewhere, over its bytes (`\xHH` is
    /// a byte; escape literal metacharacters: `SIP/2\.0 200`), at most 512 bytes (default:
    /// any reply).
    pub expect: Option<Box<Loc<String>>>,
    /// icmp: echo requests per check, 1..10 (default 3).
    pub count: Option<Box<Loc<Int>>>,
    /// icmp: the most echoes that may go unanswered, a percentage 0..99 (default 67).
    pub max_loss: Option<Box<Loc<Int>>>,
    /// icmp: the longest round trip accepted (default: no limit but the timeout).
    #[schemars(with = "Option<DurationText>")]
    pub max_rtt: Option<Box<Loc<String>>>,
    /// json, prometheus: the feed's `http://` or `https://` URL (required).
    pub url: Option<Box<Loc<String>>>,
    /// json: an RFC 6901 pointer to the status or number (required; `""` for the whole
    /// document).
    pub pointer: Option<Box<Loc<String>>>,
    /// prometheus: the sample, `name` or `name{label="value",...}` (required).
    pub metric: Option<Box<Loc<String>>>,
    /// json, prometheus: when the number read is healthy, `< 0.8`, `>= 1`, `== 0`, ...
    /// (required on prometheus; on json, without it the value is a status word).
    pub healthy_when: Option<Box<Loc<String>>>,
    /// grpc: the service name asked about (default "", the whole server).
    pub service: Option<Box<Loc<String>>>,
    /// grpc: call over TLS (ALPN h2) instead of plaintext h2c (default false); the
    /// certificate is validated when `tls_verify` is true.
    pub tls: Option<Box<Loc<bool>>>,
    /// pushed, file, json, prometheus: what the monitor counts as without data (no live
    /// push, no line for the endpoint, a stale file, a feed without the value): `healthy`,
    /// `unhealthy` or `last_known` (default `unhealthy` for pushed and file, `last_known`
    /// for json and prometheus).
    #[schemars(with = "Option<MissingPolicy>")]
    pub missing: Option<Box<Loc<String>>>,
    /// file: the file of `PROFILE/ENDPOINT STATUS [REASON]` lines (required).
    pub file: Option<Box<Loc<String>>>,
    /// file: data in a file not modified for longer than this counts as missing,
    /// 1s..7d (default: no limit).
    #[schemars(with = "Option<DurationText>")]
    pub max_age: Option<Box<Loc<String>>>,
}

/// `monitor_rule`: a name (`all`, `any`) or `{at_least: N}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawMonitorRule {
    Name(String),
    AtLeast(RawAtLeast),
}

/// `{at_least: N}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAtLeast {
    pub at_least: Int,
}

/// `expected_status` entries may be written as numbers (`200`) or strings (`"200-299"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StatusSpec {
    Code(Int),
    Text(String),
}

/// An endpoint: an address or host name, or another profile (nested).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Endpoint")]
pub struct RawEndpoint {
    /// Unique in the profile.
    #[schemars(with = "EndpointName")]
    pub name: Loc<String>,
    /// An IPv4 address (A), IPv6 address (AAAA) or absolute host name ending in `.`
    /// (CNAME). Exactly one of `target` and `profile`.
    #[schemars(with = "Option<Target>")]
    pub target: Option<Box<Loc<String>>>,
    /// Nested: the name of another profile, whose answer this endpoint gives.
    pub profile: Option<Box<Loc<String>>>,
    /// false: never probed, never served (default true).
    pub enabled: Option<bool>,
    /// Not probed, always counted online (default false); not on nested endpoints.
    pub always_serve: Option<Box<Loc<bool>>>,
    /// priority: 1..1000, unique in the profile (default the position: 1, 2, ...).
    pub priority: Option<Box<Loc<Int>>>,
    /// weighted: 0..1000 (default 1); in groups 0..255 (default 128).
    pub weight: Option<Box<Loc<Int>>>,
    /// performance, geoproximity: a region of the latency table.
    pub location: Option<Box<Loc<String>>>,
    /// geoproximity: where the endpoint is (instead of `location`).
    pub coordinates: Option<Box<Loc<RawCoordinates>>>,
    /// geoproximity: grows (1..99) or shrinks (-1..-99) the area the endpoint serves: its
    /// distance to a client counts as distance × (1 − bias/100) (default 0).
    pub bias: Option<Box<Loc<Int>>>,
    /// geographic: region codes (`WORLD`, `GEO-EU`, `FR`, `US-CA`, ...) and ASNs
    /// (`AS64496`), which beat every region code.
    pub geo: Option<Box<Loc<Vec<Loc<String>>>>>,
    /// asn: the client ASNs this endpoint answers (`[64496, 64497]`); the first eligible
    /// endpoint listing the client's ASN answers, an endpoint without `asns` is the
    /// fallback.
    #[schemars(with = "Option<Vec<AsnNumber>>")]
    pub asns: Option<Box<Loc<Vec<Loc<Int>>>>>,
    /// subnet: CIDRs or `start-end` ranges; the endpoint without `subnets` is the fallback.
    #[schemars(with = "Option<Vec<Network>>")]
    pub subnets: Option<Box<Loc<Vec<Loc<String>>>>>,
    /// zone: a zone of `topology.zones`.
    pub zone: Option<Box<Loc<String>>>,
    /// Keys merged over the profile's `monitor`; not on nested endpoints.
    pub monitor: Option<Box<Loc<RawMonitor>>>,
    /// Several named monitors combined by `monitor_rule` (instead of `monitor`; replaces
    /// the profile's `monitors`); not on nested endpoints.
    pub monitors: Option<Box<Loc<Vec<Loc<RawMonitor>>>>>,
    /// How `monitors` make the endpoint's status: `all` (default), `any` or
    /// `{at_least: N}`.
    #[schemars(with = "Option<MonitorRuleSpec>")]
    pub monitor_rule: Option<Box<Loc<RawMonitorRule>>>,
    /// Where the endpoint's load is read, and what it can take (docs/load.md); not on
    /// nested endpoints.
    pub load: Option<Box<Loc<RawEndpointLoad>>>,
    /// A host-name target answers with the name's addresses, resolved in the background,
    /// instead of a CNAME (default: the profile's `flatten`).
    pub flatten: Option<Box<Loc<bool>>>,
    /// Nested: the child counts online with at least this many online endpoints, 1..1000
    /// (default 1).
    pub min_child_endpoints: Option<Box<Loc<Int>>>,
    /// Nested: and at least this many serving IPv4 endpoints, 0..1000 (default 0).
    pub min_child_endpoints_ipv4: Option<Box<Loc<Int>>>,
    /// Nested: and at least this many serving IPv6 endpoints, 0..1000 (default 0).
    pub min_child_endpoints_ipv6: Option<Box<Loc<Int>>>,
}

/// geoproximity: a point in degrees.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Coordinates")]
pub struct RawCoordinates {
    /// -90..90 (north positive).
    pub latitude: Loc<f64>,
    /// -180..180 (east positive).
    pub longitude: Loc<f64>,
}

/// An endpoint's `load:`: a pulled `url` or `pushed: true`, and the capacity.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "EndpointLoad")]
pub struct RawEndpointLoad {
    /// utilisation = load / capacity: a number above 0.
    pub capacity: Loc<f64>,
    /// http or https URL read once per `load.interval`; the body is JSON (a number, or
    /// one at `json_pointer`) or a Prometheus text exposition (with `metric`). Exactly one
    /// of `url` and `pushed`.
    pub url: Option<Loc<String>>,
    /// true: the load is only set through the admin API.
    pub pushed: Option<Loc<bool>>,
    /// With `url`: the RFC 6901 pointer of the number in the JSON body (`/load`); absent:
    /// the body is the number.
    pub json_pointer: Option<Loc<String>>,
    /// With `url`: the Prometheus sample to read, `name` or `name{label="value",...}`
    /// (equality matchers only). Not with `json_pointer`.
    pub metric: Option<Loc<String>>,
    /// This endpoint's own low watermark (default `load.low`).
    pub low: Option<Loc<f64>>,
    /// This endpoint's own high watermark (default `load.high`).
    pub high: Option<Loc<f64>>,
}

/// groups: an endpoint group with a traffic dial.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Group")]
pub struct RawGroup {
    /// Unique in the profile.
    pub name: Loc<String>,
    /// A region of the latency table.
    pub location: Option<Box<Loc<String>>>,
    /// The percentage of the traffic left that this group takes while healthy, 0..100
    /// (default 100).
    pub traffic_dial: Option<Box<Loc<Int>>>,
    /// Endpoints with a `target` (no nested profiles); `weight` 0..255, default 128.
    pub endpoints: Loc<Vec<Loc<RawEndpoint>>>,
}

/// An integer that reports a readable error ("expected an integer, got \"abc\"") where
/// the YAML has something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int(pub i64);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Int, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Int;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Int, E> {
                i64::try_from(v).map(Int).map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Int, E> {
                v.trim()
                    .parse()
                    .map(Int)
                    .map_err(|_| E::custom(format!("expected an integer, got {v:?}")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Int, E> {
                Err(E::custom(format!("expected an integer, got {v}")))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Int, E> {
                Err(E::custom(format!("expected an integer, got {v}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A value and where it was written (the use site: for an alias, the alias).
///
/// serde-saphyr's own `Spanned` reads the same positions, but through a synthetic map of
/// four entries whose two locations are maps of their own, with a `String` allocated for
/// the first key, and it keeps two full locations (56 bytes) where only line and column
/// are used.
#[derive(Debug)]
pub struct Loc<T> {
    pub value: T,
    pub pos: Pos,
}

impl<T> Located for Loc<T> {
    fn pos(&self) -> Pos {
        self.pos
    }
}

/// serde-saphyr's names for its span protocol (see `serde_saphyr::Spanned`'s
/// `Deserialize`): asking for this newtype makes it present the next node as the struct
/// below, where `referenced` is a struct with `line` and `column`.
pub(super) const SPANNED_NEWTYPE: &str = "__yaml_spanned";
pub(super) const SPANNED_MARKER: &str = "__serde_saphyr_private_spanned";
const SPANNED_FIELDS: &[&str] = &[SPANNED_MARKER, "value", "referenced", "defined"];
const LOCATION_FIELDS: &[&str] = &["line", "column", "span", "source_id"];

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Loc<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Loc<T>, D::Error> {
        d.deserialize_newtype_struct(SPANNED_NEWTYPE, LocVisitor(PhantomData))
    }
}

struct LocVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for LocVisitor<T> {
    type Value = Loc<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML node")
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Loc<T>, D::Error> {
        d.deserialize_struct("Spanned", SPANNED_FIELDS, self)
    }

    /// Reads `value` and `referenced`, in the order serde-saphyr gives them, and leaves
    /// `defined` unread.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loc<T>, A::Error> {
        // Without the marker this is not serde-saphyr's span protocol (e.g. a value
        // buffered for an untagged enum): there is no position to read.
        if map.next_key::<Key>()? != Some(Key::Marker) {
            return Err(de::Error::custom("internal: a located value read without positions"));
        }
        map.next_value::<IgnoredAny>()?;
        let mut value = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Value => value = Some(map.next_value()?),
                Key::Referenced => {
                    let pos = map.next_value_seed(PosSeed)?;
                    let value = value.ok_or_else(|| de::Error::missing_field("value"))?;
                    return Ok(Loc { value, pos });
                }
                Key::Marker | Key::Line | Key::Column | Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Err(de::Error::missing_field("referenced"))
    }
}

/// The keys of the span protocol, read without allocating.
#[derive(PartialEq, Eq)]
enum Key {
    Marker,
    Value,
    Referenced,
    Line,
    Column,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    SPANNED_MARKER => Key::Marker,
                    "value" => Key::Value,
                    "referenced" => Key::Referenced,
                    "line" => Key::Line,
                    "column" => Key::Column,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

thread_local! {
    /// Lines of the file before the text being parsed: profile files are parsed a piece
    /// at a time (see `files`), and positions name lines of the whole file.
    static LINE_BASE: Cell<u32> = const { Cell::new(0) };
}

/// Runs a parse whose positions are `lines_before` lines further down the file. The outer
/// base comes back even if the parse panics (a caller catching that on the same thread
/// would otherwise shift every later position).
pub fn with_line_base<R>(lines_before: u32, parse: impl FnOnce() -> R) -> R {
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            LINE_BASE.set(self.0);
        }
    }
    let _restore = Restore(LINE_BASE.replace(lines_before));
    parse()
}

/// Reads line and column of a location and stops there (the span is not needed).
struct PosSeed;

impl<'de> DeserializeSeed<'de> for PosSeed {
    type Value = Pos;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Pos, D::Error> {
        d.deserialize_struct("Location", LOCATION_FIELDS, self)
    }
}

impl<'de> Visitor<'de> for PosSeed {
    type Value = Pos;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a location")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pos, A::Error> {
        let (mut line, mut col): (Option<u32>, Option<u32>) = (None, None);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Line => line = Some(map.next_value()?),
                Key::Column => col = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if let (Some(line), Some(col)) = (line, col) {
                let base = if line > 0 { LINE_BASE.get() } else { 0 };
                return Ok(Pos { line: line + base, col });
            }
        }
        Err(de::Error::missing_field("line"))
    }
}

#[cfg(test)]
mod tests {
    use serde_saphyr::Spanned;

    use super::*;

    /// `Loc` speaks serde-saphyr's internal span protocol; this pins its positions to what
    /// `Spanned` reports, so a serde-saphyr release that changes the protocol fails here.
    #[test]
    fn loc_positions_match_spanned() {
        #[derive(Deserialize)]
        struct Ours {
            a: Loc<String>,
            b: Vec<Loc<Int>>,
            c: Option<Box<Loc<BTreeMap<String, String>>>>,
            d: Loc<String>,
        }
        #[derive(Deserialize)]
        struct Theirs {
            a: Spanned<String>,
            b: Vec<Spanned<Int>>,
            c: Option<Box<Spanned<BTreeMap<String, String>>>>,
            d: Spanned<String>,
        }
        let text = "a: &x hello\nb: [1,   2]\nc:\n  k: v\nd: *x\n";
        let ours: Ours = serde_saphyr::from_str(text).unwrap();
        let theirs: Theirs = serde_saphyr::from_str(text).unwrap();
        let ours_c = ours.c.as_deref().unwrap();
        let theirs_c = theirs.c.as_deref().unwrap();
        let ours_pos = [Pos::of(&ours.a), Pos::of(&ours.b[1]), Pos::of(ours_c), Pos::of(&ours.d)];
        let theirs_pos =
            [Pos::of(&theirs.a), Pos::of(&theirs.b[1]), Pos::of(theirs_c), Pos::of(&theirs.d)];
        assert_eq!(ours_pos, theirs_pos);
        assert_eq!(ours.d.value, "hello");
        assert_eq!(ours.d.pos, Pos { line: 5, col: 4 });
    }
}
