//! What the CLI subcommands do, kept out of `main.rs` so tests can call them.

pub mod dnssec;

use std::net::IpAddr;
use std::path::Path;

use crate::config::schema::{self, Document};
use crate::config::{self, ConfigErrors};
use crate::model::health::Overlay;
use crate::responder::explain::{self, AllHealthy, Explanation};

/// `steerdns check`: the summary line on success, or every error.
pub fn check(path: &Path) -> Result<String, ConfigErrors> {
    let snap = config::load(path, None)?.snapshot;
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
    let snap = config::load(path, None)?.snapshot;
    let name = explain::absolute(&snap, name)?;
    let qtype = explain::parse_type(qtype)?;
    let overrides = explain::down_slots(&snap, down)?;
    let all = AllHealthy(&*snap.health);
    let health = Overlay { base: &all, overrides: &overrides };
    Ok(explain::explain(&snap, &health, &name, qtype, client))
}
