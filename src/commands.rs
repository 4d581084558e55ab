//! What the CLI subcommands do, kept out of `main.rs` so tests can call them.

pub mod cluster;
pub mod dnssec;

use std::net::IpAddr;
use std::path::Path;

use crate::config::ConfigErrors;
use crate::config::schema::{self, Document};
use crate::model::health::Overlay;
use crate::responder::explain::{self, AllHealthy, Explanation};

/// `steerdns check`: the summary line on success, or every error. With `profiles: etcd`
/// the profiles are read from etcd.
pub fn check(path: &Path) -> Result<String, ConfigErrors> {
    let snap = cluster::load_configured(path)?.snapshot;
    Ok(format!("ok: {} profiles, {} endpoints", snap.profiles.len(), snap.endpoint_count()))
}

/// `steerdns schema`: the JSON Schema of `steerdns.yaml` or of a profile document.
pub fn schema(document: Document) -> String {
    schema::render(document)
}

/// `steerdns explain`: the answer for one query with every endpoint healthy but `down`.
pub fn explain(
    path: &Path,
    name: &str,
    qtype: &str,
    client: IpAddr,
    down: &[String],
) -> anyhow::Result<Explanation> {
    let snap = cluster::load_configured(path)?.snapshot;
    let name = explain::absolute(&snap, name)?;
    let qtype = explain::parse_type(qtype)?;
    let overrides = explain::down_slots(&snap, down)?;
    let all = AllHealthy(&*snap.health);
    let health = Overlay { base: &all, overrides: &overrides };
    Ok(explain::explain(&snap, &health, &name, qtype, client, None))
}
