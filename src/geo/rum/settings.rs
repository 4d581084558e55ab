//! The `rum:` block once validated (`config::rum` builds it): where the listener is, what
//! the beacon measures, and how samples become a table.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

/// Everything `rum:` sets. A change needs a restart (the listener and the aggregate are
/// made once, at start).
#[derive(Clone, Debug, PartialEq)]
pub struct RumSettings {
    /// Addresses of the public listener the beacon talks to.
    pub listen: Vec<SocketAddr>,
    /// The measurement URLs; a target's index is its column in the aggregate and the table.
    pub targets: Vec<RumTarget>,
    pub aggregation: Aggregation,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Reports one client address may send per minute once its burst is spent.
    pub reports_per_minute: u32,
    /// Reports one client address may send at once after a quiet time.
    pub burst: u32,
    /// The largest report body accepted, in bytes.
    pub max_report_bytes: usize,
    /// How often the table the query path reads is rebuilt.
    pub publish_interval: Duration,
    /// Where the samples are kept across restarts; `None`: in memory only.
    pub state_file: Option<PathBuf>,
    /// How often the samples are written to `state_file` (and at shutdown).
    pub save_interval: Duration,
    /// In a cluster, how often this replica writes its figures to etcd and the leading
    /// replica merges everyone's into the shared table.
    pub share_interval: Duration,
}

/// One measurement URL and the latency-table region it measures.
#[derive(Clone, Debug, PartialEq)]
pub struct RumTarget {
    /// The region's name, as in the latency table and in reports.
    pub region: String,
    /// The region's index in the latency table (`LatencyTable::regions`).
    pub region_index: usize,
    pub url: String,
}

impl RumSettings {
    /// The column of the target measuring `region`, by name.
    pub fn column_of(&self, region: &str) -> Option<usize> {
        self.targets.iter().position(|t| t.region == region)
    }
}

/// How samples are grouped, weighed and published.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Aggregation {
    /// Prefix length of the IPv4 networks samples are kept for.
    pub ipv4_prefix: u8,
    /// Prefix length of the IPv6 networks samples are kept for.
    pub ipv6_prefix: u8,
    /// Samples in the window a (network, region) needs before it is published.
    pub min_samples: u32,
    /// Samples older than this count for nothing and are forgotten.
    pub window: Duration,
    /// A sample's weight in the median halves every `half_life` of age.
    pub half_life: Duration,
    /// The most networks kept; one more evicts the least recently reported.
    pub max_networks: usize,
    /// A network's preferred region changes only when another is faster by at least this
    /// many ms ...
    pub margin_ms: f64,
    /// ... and by at least this percentage of the preferred region's time.
    pub margin_percent: f64,
}

impl Default for Aggregation {
    fn default() -> Aggregation {
        Aggregation {
            ipv4_prefix: 24,
            ipv6_prefix: 48,
            min_samples: 5,
            window: Duration::from_secs(24 * 3600),
            half_life: Duration::from_secs(3600),
            max_networks: 100_000,
            margin_ms: 10.0,
            margin_percent: 10.0,
        }
    }
}
