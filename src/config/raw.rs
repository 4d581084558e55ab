//! `Raw*` structs mirror the YAML exactly (contract §2 and §3) and reject unknown keys.
//! Values that later checks may complain about are `Spanned`, so every error can name its
//! FILE:LINE:COL. No meaning is given to anything here; `validate` does that.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

pub type S<T> = Spanned<T>;

// Optional values of the per-profile structs are boxed: `Spanned` carries two locations, and
// with a dozen absent keys per endpoint the unboxed form cost ~1.8 KB per endpoint while
// a configuration of 100k profiles is being loaded.

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
    pub ttl: Option<S<Int>>,
    #[serde(default)]
    pub records: Vec<S<String>>,
    pub file: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSoa {
    pub mname: Option<S<String>>,
    pub rname: S<String>,
    pub refresh: Option<S<Int>>,
    pub retry: Option<S<Int>>,
    pub expire: Option<S<Int>>,
    pub minimum: Option<S<Int>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    pub name: S<String>,
    pub ttl: Option<Box<S<Int>>>,
    pub enabled: Option<bool>,
    pub routing: S<String>,
    pub fail_open: Option<bool>,
    pub max_return: Option<Box<S<Int>>>,
    pub sticky: Option<Box<S<bool>>>,
    pub degraded_match: Option<Box<S<String>>>,
    pub safety_threshold: Option<Box<S<Int>>>,
    pub monitor: Option<Box<S<RawMonitor>>>,
    pub endpoints: Option<Box<S<Vec<S<RawEndpoint>>>>>,
    pub groups: Option<Box<S<Vec<S<RawGroup>>>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMonitor {
    pub protocol: Option<Box<S<String>>>,
    pub port: Option<Box<S<Int>>>,
    pub path: Option<Box<S<String>>>,
    pub interval: Option<Box<S<String>>>,
    pub timeout: Option<Box<S<String>>>,
    pub tolerated_failures: Option<Box<S<Int>>>,
    pub expected_status: Option<Box<S<Vec<S<StatusSpec>>>>>,
    pub headers: Option<Box<S<BTreeMap<String, String>>>>,
    pub body_contains: Option<Box<S<String>>>,
    pub tls_verify: Option<Box<S<bool>>>,
}

/// `expected_status` entries may be written as numbers (`200`) or strings (`"200-299"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StatusSpec {
    Code(Int),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEndpoint {
    pub name: S<String>,
    pub target: Option<Box<S<String>>>,
    pub profile: Option<Box<S<String>>>,
    pub enabled: Option<bool>,
    pub always_serve: Option<Box<S<bool>>>,
    pub priority: Option<Box<S<Int>>>,
    pub weight: Option<Box<S<Int>>>,
    pub location: Option<Box<S<String>>>,
    pub geo: Option<Box<S<Vec<S<String>>>>>,
    pub subnets: Option<Box<S<Vec<S<String>>>>>,
    pub zone: Option<Box<S<String>>>,
    pub monitor: Option<Box<S<RawMonitor>>>,
    pub min_child_endpoints: Option<Box<S<Int>>>,
    pub min_child_endpoints_ipv4: Option<Box<S<Int>>>,
    pub min_child_endpoints_ipv6: Option<Box<S<Int>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    pub name: S<String>,
    pub location: Option<Box<S<String>>>,
    pub traffic_dial: Option<Box<S<Int>>>,
    pub endpoints: S<Vec<S<RawEndpoint>>>,
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
