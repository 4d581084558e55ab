//! `Raw*` structs mirror the YAML exactly (contract §2 and §3) and reject unknown keys.
//! Values that later checks may complain about are `Spanned`, so every error can name its
//! FILE:LINE:COL. No meaning is given to anything here; `validate` does that.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

pub type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<RawListen>,
    pub admin: Option<RawAdmin>,
    pub zones: S<Vec<S<RawZone>>>,
    pub geo: Option<RawGeo>,
    pub latency: Option<RawLatency>,
    pub topology: Option<RawTopology>,
    pub profiles: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    #[serde(default)]
    pub dns: Vec<S<String>>,
    pub admin: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub token_file: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGeo {
    pub database: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLatency {
    pub table: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTopology {
    #[serde(default)]
    pub zones: BTreeMap<String, Vec<S<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawZone {
    pub origin: S<String>,
    pub ns: S<Vec<S<String>>>,
    pub soa: S<RawSoa>,
    pub ttl: Option<S<i64>>,
    #[serde(default)]
    pub records: Vec<S<String>>,
    pub file: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSoa {
    pub mname: Option<S<String>>,
    pub rname: S<String>,
    pub refresh: Option<S<i64>>,
    pub retry: Option<S<i64>>,
    pub expire: Option<S<i64>>,
    pub minimum: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    pub name: S<String>,
    pub ttl: Option<S<i64>>,
    pub enabled: Option<bool>,
    pub routing: S<String>,
    pub fail_open: Option<bool>,
    pub max_return: Option<S<i64>>,
    pub sticky: Option<S<bool>>,
    pub degraded_match: Option<S<String>>,
    pub safety_threshold: Option<S<i64>>,
    pub monitor: Option<S<RawMonitor>>,
    pub endpoints: Option<S<Vec<S<RawEndpoint>>>>,
    pub groups: Option<S<Vec<S<RawGroup>>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMonitor {
    pub protocol: Option<S<String>>,
    pub port: Option<S<i64>>,
    pub path: Option<S<String>>,
    pub interval: Option<S<String>>,
    pub timeout: Option<S<String>>,
    pub tolerated_failures: Option<S<i64>>,
    pub expected_status: Option<S<Vec<S<StatusSpec>>>>,
    pub headers: Option<S<BTreeMap<String, String>>>,
    pub body_contains: Option<S<String>>,
    pub tls_verify: Option<S<bool>>,
}

/// `expected_status` entries may be written as numbers (`200`) or strings (`"200-299"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StatusSpec {
    Code(i64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEndpoint {
    pub name: S<String>,
    pub target: Option<S<String>>,
    pub profile: Option<S<String>>,
    pub enabled: Option<bool>,
    pub always_serve: Option<S<bool>>,
    pub priority: Option<S<i64>>,
    pub weight: Option<S<i64>>,
    pub location: Option<S<String>>,
    pub geo: Option<S<Vec<S<String>>>>,
    pub subnets: Option<S<Vec<S<String>>>>,
    pub zone: Option<S<String>>,
    pub monitor: Option<S<RawMonitor>>,
    pub min_child_endpoints: Option<S<i64>>,
    pub min_child_endpoints_ipv4: Option<S<i64>>,
    pub min_child_endpoints_ipv6: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    pub name: S<String>,
    pub location: Option<S<String>>,
    pub traffic_dial: Option<S<i64>>,
    pub endpoints: S<Vec<S<RawEndpoint>>>,
}
