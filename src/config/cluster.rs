//! `cluster:`: this replica's name, how to reach etcd, the health quorum and the lease, and
//! whether the profiles come from etcd (`profiles: etcd`).

use std::path::Path;
use std::time::Duration;

use super::check;
use super::raw::{RawCluster, RawServer};
use crate::diag::{self, Limit, Sink};
use crate::model::cluster::{ClusterSettings, EtcdAuth, EtcdSettings, EtcdTls, Quorum};

/// What `profiles:` says to read the profiles from etcd.
pub const PROFILES_FROM_ETCD: &str = "etcd";

/// The cache file's name when `cluster.cache_file` is not set.
pub const DEFAULT_CACHE_FILE: &str = "cluster-cache.json";

const DEFAULT_PREFIX: &str = "/steerdns/";
const DEFAULT_LEASE: Duration = Duration::from_secs(10);
const LEASE_RANGE: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(600));

/// A password is a line of text; a larger file is a mistake.
const PASSWORD_FILE_LIMIT: Limit =
    Limit { bytes: 4 << 10, set_by: "the fixed limit for etcd password files" };

/// Whether `profiles:` names etcd.
pub fn profiles_from_etcd(raw: &RawServer) -> bool {
    raw.profiles.as_ref().is_some_and(|p| p.value == PROFILES_FROM_ETCD)
}

pub fn build(sink: &mut Sink<'_>, raw: &RawServer, base: &Path) -> Option<ClusterSettings> {
    let from_etcd = profiles_from_etcd(raw);
    let Some(c) = &raw.cluster else {
        if let Some(p) = raw.profiles.as_ref().filter(|_| from_etcd) {
            sink.on(p, "profiles: etcd needs a cluster: block saying where etcd is");
        }
        return None;
    };
    let node = match &c.node {
        Some(n) => {
            if !valid_node(&n.value) {
                sink.on(
                    n,
                    format!(
                        "node name {:?} must be 1 to 63 letters, digits, '-', '_' or '.'",
                        n.value
                    ),
                );
            }
            n.value.clone()
        }
        None => host_name(),
    };
    let etcd = etcd(sink, c, base);
    let quorum = match c.health.as_ref().and_then(|h| h.quorum.as_ref()) {
        Some(q) => Quorum::parse(q.value.trim()).unwrap_or_else(|| {
            sink.on(
                q,
                format!(
                    "cluster.health.quorum: {:?} is not one of any, majority, all or N% (1..100)",
                    q.value
                ),
            );
            Quorum::Majority
        }),
        None => Quorum::Majority,
    };
    let lease_ttl = match &c.lease {
        Some(l) => match check::duration(sink, l, "cluster.lease") {
            Some(d) if d < LEASE_RANGE.0 || d > LEASE_RANGE.1 => {
                sink.on(l, "cluster.lease must be between 2s and 10m");
                DEFAULT_LEASE
            }
            Some(d) => d,
            None => DEFAULT_LEASE,
        },
        None => DEFAULT_LEASE,
    };
    let cache_file =
        base.join(c.cache_file.as_ref().map_or(DEFAULT_CACHE_FILE, |f| f.value.as_str()));
    Some(ClusterSettings {
        node,
        etcd,
        quorum,
        lease_ttl,
        profiles_from_etcd: from_etcd,
        cache_file,
    })
}

fn etcd(sink: &mut Sink<'_>, c: &RawCluster, base: &Path) -> EtcdSettings {
    let e = &c.etcd.value;
    if e.endpoints.value.is_empty() {
        sink.on(&e.endpoints, "cluster.etcd.endpoints needs at least one URL");
    }
    let mut tls_needed = false;
    for url in &e.endpoints.value {
        match url.value.split_once("://") {
            Some(("http", rest)) | Some(("https", rest)) if !rest.is_empty() => {
                tls_needed |= url.value.starts_with("https://");
            }
            _ => sink.on(
                url,
                format!(
                    "etcd endpoint {:?} must be http://HOST:PORT or https://HOST:PORT",
                    url.value
                ),
            ),
        }
    }
    let prefix = match &e.prefix {
        Some(p) if !p.value.starts_with('/') || !p.value.ends_with('/') => {
            sink.on(p, format!("cluster.etcd.prefix {:?} must start and end with '/'", p.value));
            DEFAULT_PREFIX.to_string()
        }
        Some(p) => p.value.clone(),
        None => DEFAULT_PREFIX.to_string(),
    };
    let tls = e.tls.as_ref().map(|t| {
        let t = &t.value;
        let cert_key = match (&t.cert, &t.key) {
            (Some(c), Some(k)) => Some((base.join(&c.value), base.join(&k.value))),
            (Some(c), None) => {
                sink.on(c, "cluster.etcd.tls.cert needs key");
                None
            }
            (None, Some(k)) => {
                sink.on(k, "cluster.etcd.tls.key needs cert");
                None
            }
            (None, None) => None,
        };
        EtcdTls { ca: base.join(&t.ca.value), cert_key }
    });
    if tls_needed && tls.is_none() {
        sink.on(&e.endpoints, "https etcd endpoints need cluster.etcd.tls.ca");
    }
    if let Some(t) =
        e.tls.as_ref().filter(|_| e.endpoints.value.iter().any(|u| u.value.starts_with("http://")))
    {
        sink.on(t, "cluster.etcd.tls needs every endpoint to be https://");
    }
    let auth = match (&e.username, &e.password_file) {
        (Some(user), Some(file)) => {
            let path = base.join(&file.value);
            match diag::read_limited(&path, PASSWORD_FILE_LIMIT) {
                Ok(text) => {
                    Some(EtcdAuth { username: user.value.clone(), password: text.trim().into() })
                }
                Err(err) => {
                    sink.on(
                        file,
                        format!("cannot read the etcd password {}: {err}", path.display()),
                    );
                    None
                }
            }
        }
        (Some(user), None) => {
            sink.on(user, "cluster.etcd.username needs password_file");
            None
        }
        (None, Some(file)) => {
            sink.on(file, "cluster.etcd.password_file needs username");
            None
        }
        (None, None) => None,
    };
    EtcdSettings {
        endpoints: e.endpoints.value.iter().map(|u| u.value.clone()).collect(),
        prefix,
        tls,
        auth,
    }
}

fn valid_node(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The host name, cut to what a node name allows; `steerdns` when there is none.
fn host_name() -> String {
    let name: String = super::host::host_name()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .take(63)
        .collect();
    if name.is_empty() { "steerdns".into() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names() {
        for good in ["ams-1", "a", "node_2.example", &"x".repeat(63)] {
            assert!(valid_node(good), "{good}");
        }
        for bad in ["", "a/b", "ams 1", &"x".repeat(64), "é"] {
            assert!(!valid_node(bad), "{bad}");
        }
        assert!(valid_node(&host_name()));
    }
}
