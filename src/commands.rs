//! What the CLI subcommands do, kept out of `main.rs` so tests can call them.

pub mod cluster;
pub mod dnssec;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hickory_proto::rr::Name;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::config::ConfigErrors;
use crate::config::schema::{self, Document};
use crate::model::flat::Family;
use crate::model::health::Overlay;
use crate::model::{Snapshot, Target};
use crate::probe::lookup::{Ask, lookup};
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

/// `steerdns explain`: the answer for one query with every endpoint healthy but `down`,
/// each monitor shown as configured (none runs), and each flattened host name the name
/// leads to looked up once at the `flatten` resolvers, as the server's background resolver
/// would, before the answer.
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
    let failed = look_up_flattened(&snap, &name)?;
    let mut e = explain::explain(&snap, &health, &name, qtype, client, None, None);
    e.trace.splice(0..0, failed);
    e.monitors = explain::configured_monitors(&snap, &health, &overrides, &name);
    Ok(e)
}

/// Looks up, once, every flattened host name of the profiles `name` leads to, both
/// families, at the configured resolvers (as `probe::flatten` does: each bounded by
/// `flatten.timeout` per resolver, at most `flatten.max_in_flight` at once), and stores
/// what each found in `snap`'s flat table for the responder to read. Returns a trace line
/// for each lookup that failed, saying why.
fn look_up_flattened(snap: &Snapshot, name: &Name) -> anyhow::Result<Vec<String>> {
    let Some(settings) = snap.flatten.clone() else { return Ok(Vec::new()) };
    let mut slots: Vec<usize> = explain::profiles_reached(snap, name)
        .into_iter()
        .flat_map(|id| snap.profiles[id].endpoints.iter())
        .filter(|ep| matches!(ep.target, Target::Flat(_)))
        .filter_map(|ep| ep.flat_slot)
        .collect();
    slots.sort_unstable();
    slots.dedup();
    if slots.is_empty() {
        return Ok(Vec::new());
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let looked_up = runtime.block_on(async {
        let in_flight = Arc::new(Semaphore::new(settings.max_in_flight));
        let mut tasks = JoinSet::new();
        for (i, (&slot, family)) in
            slots.iter().flat_map(|s| [(s, Family::V4), (s, Family::V6)]).enumerate()
        {
            let host = snap.flat.slots[slot].name.clone();
            let (settings, in_flight) = (settings.clone(), in_flight.clone());
            tasks.spawn(async move {
                let _permit = in_flight.acquire_owned().await;
                let ask = Ask {
                    name: &host,
                    family,
                    timeout: settings.timeout,
                    require_ad: settings.require_ad,
                };
                (slot, family, lookup(ask, &settings.resolvers, i, unix_now).await)
            });
        }
        tasks.join_all().await
    });
    let mut failed = Vec::new();
    for (slot, family, result) in looked_up {
        let flat = &snap.flat.slots[slot];
        match result {
            Ok(found) => flat.store(family, found),
            Err(e) => failed.push(format!(
                "flattened {} {}: the lookup failed (resolvers of {}): {e}",
                flat.name,
                family.as_str(),
                settings.resolvers_from
            )),
        }
    }
    for &slot in &slots {
        snap.flat.slots[slot].update_usable(unix_now(), settings.rules);
    }
    failed.sort();
    Ok(failed)
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
