//! Loads `steerdns.yaml` and the profiles directory into one immutable `Snapshot`.
//!
//! Parse, then validate: YAML goes into `raw` structs that reject unknown keys; the
//! builders here give it meaning and collect every error with its FILE:LINE:COL. A load
//! either yields a complete snapshot or the full list of errors, never half of each.

mod check;
pub mod error;
mod monitor;
mod profiles;
pub mod raw;
mod rules;
mod world;
mod zones;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use error::{ConfigError, ConfigErrors};
pub use profiles::compute_families;

use error::{Pos, Sink, from_yaml};
use raw::RawServer;

use crate::health::{HealthTable, Status};
use crate::model::{Profile, Target};
use crate::snapshot::{Listen, Snapshot};
use crate::zone::{Zone, next_serial};

/// Loads and validates the configuration at `path`. `previous` (the snapshot being
/// replaced, if any) keeps zone serials growing only when content changed.
pub fn load(path: &Path, previous: Option<&Snapshot>) -> Result<Snapshot, ConfigErrors> {
    let mut errors = Vec::new();
    let text = error::read_file(path)?;
    let raw: RawServer =
        serde_saphyr::from_str(&text).map_err(|e| ConfigErrors(vec![from_yaml(path, &e)]))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut sink = Sink { file: path, errors: &mut errors };
    let mut listen = listen(&mut sink, &raw);
    listen.admin_token = admin_token(&mut sink, &raw, &base);
    let mut zones: Vec<Zone> =
        raw.zones.value.iter().filter_map(|z| zones::build(&mut sink, z, &base)).collect();
    if raw.zones.value.is_empty() {
        sink.on(&raw.zones, "at least one zone is needed");
    }
    check_zone_overlap(&mut sink, &raw, &zones);
    let profiles_dir = base.join(raw.profiles.as_ref().map_or("profiles", |p| p.value.as_str()));
    let world = world::build(&mut sink, &raw, &base);
    let sources = profiles::read_dir(&profiles_dir, &mut errors);
    let (mut profiles, origin_doc) = profiles::build_all(&sources, &zones, &world, &mut errors);
    attach_profiles(&sources, &origin_doc, &profiles, &mut zones, &mut errors);
    if !errors.is_empty() {
        errors.sort_by(|a, b| {
            (&a.file, a.pos.line, a.pos.col).cmp(&(&b.file, b.pos.line, b.pos.col))
        });
        errors.dedup();
        return Err(ConfigErrors(errors));
    }
    compute_families(&mut profiles);
    let health = Arc::new(HealthTable::new(assign_slots(&mut profiles)));
    set_serials(&mut zones, &profiles, previous);
    let generation = previous.map_or(1, |p| p.generation + 1);
    let mut snap = Snapshot::new(listen, zones, profiles, health, Arc::new(world), profiles_dir);
    snap.generation = generation;
    Ok(snap)
}

fn listen(sink: &mut Sink<'_>, raw: &RawServer) -> Listen {
    let mut out = Listen::default();
    let Some(l) = &raw.listen else {
        out.dns = vec!["0.0.0.0:53".parse().unwrap(), "[::]:53".parse().unwrap()];
        return out;
    };
    for a in &l.dns {
        match a.value.parse::<SocketAddr>() {
            Ok(addr) => out.dns.push(addr),
            Err(_) => {
                sink.on(a, format!("listen address {:?} must be IP:PORT ([IPv6]:PORT)", a.value))
            }
        }
    }
    if let Some(a) = &l.admin {
        match a.value.parse::<SocketAddr>() {
            Ok(addr) => out.admin = Some(addr),
            Err(_) => sink.on(a, format!("admin address {:?} must be IP:PORT", a.value)),
        }
    }
    out
}

/// The admin token, read from `admin.token_file` (surrounding whitespace ignored).
fn admin_token(sink: &mut Sink<'_>, raw: &RawServer, base: &Path) -> Option<String> {
    let file = raw.admin.as_ref()?.token_file.as_ref()?;
    match std::fs::read_to_string(base.join(&file.value)) {
        Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
        Ok(_) => {
            sink.on(file, "the admin token file is empty");
            None
        }
        Err(e) => {
            sink.on(file, format!("cannot read the admin token file: {e}"));
            None
        }
    }
}

fn check_zone_overlap(sink: &mut Sink<'_>, raw: &RawServer, zones: &[Zone]) {
    for (i, z) in zones.iter().enumerate() {
        if zones[..i].iter().any(|o| o.origin == z.origin) {
            sink.on(
                &raw.zones.value[i].value.origin,
                format!("zone {} is configured twice", z.origin),
            );
        }
    }
}

/// Puts each profile on its zone node; a name cannot be a profile and static records.
fn attach_profiles(
    sources: &[profiles::Source],
    origin_doc: &[usize],
    profiles: &[Profile],
    zones: &mut [Zone],
    errors: &mut Vec<ConfigError>,
) {
    for (id, p) in profiles.iter().enumerate() {
        let zone = &mut zones[p.zone];
        let node = zone.nodes.entry(p.wire.clone()).or_default();
        if !node.rrsets.is_empty() {
            let src = &sources[origin_doc[id]];
            errors.push(ConfigError {
                file: src.file.clone(),
                pos: Pos::of(&src.raw.name),
                message: format!(
                    "{} has static records in the zone; a name is either a profile or records",
                    p.name
                ),
            });
        }
        node.profile = Some(id);
        let origin = zone.origin.clone();
        for anc in p.wire.ancestors_below(&origin) {
            zone.nodes.entry(anc).or_default();
        }
    }
}

/// Gives every leaf endpoint a health slot and returns the initial status of each:
/// checking until probed, unmonitored for `always_serve`, disabled when disabled.
fn assign_slots(profiles: &mut [Profile]) -> Vec<Status> {
    let mut statuses = Vec::new();
    for ep in profiles.iter_mut().flat_map(|p| p.endpoints.iter_mut()) {
        if matches!(ep.target, Target::Nested(_)) {
            continue;
        }
        ep.health_slot = statuses.len();
        statuses.push(match (ep.enabled, ep.always_serve) {
            (false, _) => Status::Disabled,
            (true, true) => Status::Unmonitored,
            (true, false) => Status::Checking,
        });
    }
    statuses
}

fn set_serials(zones: &mut [Zone], profiles: &[Profile], previous: Option<&Snapshot>) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for (i, zone) in zones.iter_mut().enumerate() {
        zone.fingerprint = fingerprint(zone, profiles.iter().filter(|p| p.zone == i));
        let prev = previous
            .and_then(|s| s.zones.iter().find(|z| z.origin == zone.origin))
            .map(|z| (z.serial, z.fingerprint));
        zone.serial = next_serial(prev, zone.fingerprint, now);
        zone.soa_rdata = zone.soa.rdata(zone.serial);
    }
}

/// A hash of everything that decides a zone's answers (health slots excluded).
fn fingerprint<'a>(zone: &Zone, profiles: impl Iterator<Item = &'a Profile>) -> u64 {
    let mut h = DefaultHasher::new();
    (zone.ttl, &zone.soa).hash(&mut h);
    let mut names: Vec<_> = zone.nodes.iter().collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    for (name, node) in names {
        (name, &node.rrsets).hash(&mut h);
    }
    for p in profiles {
        (&p.wire, p.ttl, p.enabled, p.method.as_str(), p.fail_open, p.max_return, p.sticky)
            .hash(&mut h);
        for e in &p.endpoints {
            (
                &e.name,
                format!("{:?}", e.target),
                e.enabled,
                e.always_serve,
                e.priority,
                e.weight,
                &e.monitor,
            )
                .hash(&mut h);
        }
    }
    h.finish()
}
