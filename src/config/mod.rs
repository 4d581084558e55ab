//! Loads `steerdns.yaml` and the profiles directory into one immutable `Snapshot`.
//!
//! Parse, then validate: YAML goes into `raw` structs that reject unknown keys; the
//! builders here give it meaning and collect every error with its FILE:LINE:COL. A load
//! either yields a complete snapshot or the full list of errors, never half of each. A
//! reload takes over the profiles of unchanged documents from the running snapshot
//! (`files`, `reuse`). Profile documents in the usual shapes are read by a quick reader
//! (`yaml`) that leaves everything else, errors included, to serde-saphyr. Run-time
//! overrides (`overrides`) are applied to every load; `patch` applies changed ones to
//! the running configuration without reading any file (`rebuild` does it the long way).

pub mod admin_tls;
mod check;
pub mod cluster;
mod cookies;
pub mod dnssec;
mod dnstap;
mod external;
mod files;
mod flatten;
mod geographic;
mod geoproximity;
mod host;
pub mod keyfile;
pub mod load;
mod monitor;
mod monitors;
mod notify;
pub mod overrides;
mod par;
mod probe;
mod probe_params;
mod profiles;
mod rate_limit;
pub mod raw;
pub mod remote;
mod reuse;
mod rules;
mod rum;
pub mod schema;
mod world;
mod xdp;
mod yaml;
mod zones;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::diag::{ConfigError, ConfigErrors};

use crate::diag::{self, Limit, Sink, yaml_errors};
use files::Doc;
pub use overrides::{Dropped, Override, Overrides};
use raw::{Loc, RawListen, RawServer};
use remote::RemoteProfiles;
use reuse::Reuse;

use crate::geo::World;
use crate::model::cluster::ClusterSettings;
use crate::model::flat::{FlatRules, FlatTable, FlattenSettings};
use crate::model::health::{HealthTable, Status};
use crate::model::load::{LoadRules, LoadTable};
use crate::model::snapshot::{
    AdminLimits, AdminTls, AdminToken, Listen, Snapshot, TcpLimits, TokenRole,
};
use crate::model::zone::{Zone, next_serial};
use crate::model::{Profile, Target};
use crate::wire::name::WireName;
use std::collections::HashMap;

/// What a load produced: the snapshot to serve, what the next reload reuses, and the
/// overrides it could not apply (the server logs them and rewrites the state file).
#[derive(Debug)]
pub struct Loaded {
    pub snapshot: Snapshot,
    pub cache: ReloadCache,
    pub dropped: Vec<Dropped>,
}

impl Loaded {
    /// This load as the previous one of a reload.
    pub fn previous(&self) -> Previous<'_> {
        Previous { snapshot: &self.snapshot, cache: &self.cache }
    }
}

/// What a reload needs of the load before it, besides its snapshot: the profiles directory
/// and the key directories (which the file watcher watches), when key timing next calls
/// for a load, and each profile file read, with the profiles it gave, so that the reload
/// can take over the unchanged ones; and the run-time overrides.
#[derive(Clone, Debug, Default)]
pub struct ReloadCache {
    /// The profiles directory; `None` when the profiles come from etcd.
    pub profiles_dir: Option<PathBuf>,
    pub keys: dnssec::KeyWatch,
    files: Vec<reuse::ProfileFile>,
    /// `state_file:`, resolved; `None`: overrides are kept in memory only.
    pub state_file: Option<PathBuf>,
    /// The overrides this load applied. Without a state file, the next load applies them
    /// again; with one, it reads the file.
    pub overrides: Overrides,
    /// In a cluster, once read from etcd: every override etcd holds, including those this
    /// configuration cannot apply (another replica's may). Every later load applies these
    /// instead of the state file's, which is then only their local copy.
    pub shared_overrides: Option<Overrides>,
}

/// The configuration a reload replaces.
#[derive(Clone, Copy, Debug)]
pub struct Previous<'a> {
    pub snapshot: &'a Snapshot,
    pub cache: &'a ReloadCache,
}

/// Loads and validates the configuration at `path`. `previous` (the configuration being
/// replaced, if any) keeps zone serials growing only when content changed, and lends the
/// profiles of documents that did not change (see `reuse`).
pub fn load(path: &Path, previous: Option<Previous<'_>>) -> Result<Loaded, ConfigErrors> {
    load_from(path, previous, ProfileSource::AsConfigured)
}

/// Where a load reads the profile files from.
#[derive(Clone, Copy, Debug)]
pub enum ProfileSource<'a> {
    /// What `profiles:` says; with `profiles: etcd` that is an error (nothing was fetched).
    AsConfigured,
    /// This directory, whatever `profiles:` says (`steerdns cluster push` checks one).
    Dir(&'a Path),
    /// These files fetched from etcd; `profiles:` must say `etcd`.
    Remote(&'a RemoteProfiles),
}

/// `load`, with the profile files from `source`.
pub fn load_from(
    path: &Path,
    previous: Option<Previous<'_>>,
    source: ProfileSource<'_>,
) -> Result<Loaded, ConfigErrors> {
    match load_with(path, previous, source, true) {
        // Taken-over profiles have no positions: find the errors again from the files.
        Err(Failed { reused: true, .. }) => load_with(path, previous, source, false),
        done => done,
    }
    .map_err(|f| f.errors)
}

/// Reads only `steerdns.yaml`'s `cluster:` block (`None` without one): a replica must
/// reach etcd before it can load profiles from there.
pub fn cluster_settings(path: &Path) -> Result<Option<ClusterSettings>, ConfigErrors> {
    let text = diag::read_file(path, CONFIG_FILE_LIMIT)?;
    let raw: RawServer =
        serde_saphyr::from_str(&text).map_err(|e| ConfigErrors(yaml_errors(path, &text, 0, &e)))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut errors = Vec::new();
    let settings = cluster::build(&mut Sink { file: path, errors: &mut errors }, &raw, &base);
    if errors.is_empty() { Ok(settings) } else { Err(ConfigErrors(errors)) }
}

/// A failed load, and whether it took profiles over from the previous snapshot.
struct Failed {
    errors: ConfigErrors,
    reused: bool,
}

impl From<ConfigErrors> for Failed {
    fn from(errors: ConfigErrors) -> Failed {
        Failed { errors, reused: false }
    }
}

fn load_with(
    path: &Path,
    previous: Option<Previous<'_>>,
    source: ProfileSource<'_>,
    allow_reuse: bool,
) -> Result<Loaded, Failed> {
    let mut errors = Vec::new();
    let text = diag::read_file(path, CONFIG_FILE_LIMIT)?;
    let raw: RawServer =
        serde_saphyr::from_str(&text).map_err(|e| ConfigErrors(yaml_errors(path, &text, 0, &e)))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut keys = dnssec::KeyWatch::default();
    let (listen, mut zones, world, profiles_dir, limits) =
        server(&mut Sink { file: path, errors: &mut errors }, &raw, &base, &mut keys);
    let cookies =
        cookies::build(&mut Sink { file: path, errors: &mut errors }, raw.cookies.as_ref(), &base);
    let rate_limit =
        rate_limit::build(&mut Sink { file: path, errors: &mut errors }, raw.rate_limit.as_ref());
    let cluster = cluster::build(&mut Sink { file: path, errors: &mut errors }, &raw, &base);
    let probe_source = probe::build(&mut Sink { file: path, errors: &mut errors }, &raw);
    let rum_sink = &mut Sink { file: path, errors: &mut errors };
    let top_state = raw.state_file.as_ref().map(|f| base.join(&f.value));
    let rum =
        rum::build(rum_sink, raw.rum.as_ref(), &world, &base, top_state.as_deref()).map(Arc::new);
    let load_rules = load::rules(&mut Sink { file: path, errors: &mut errors }, raw.load.as_ref());
    let server_name = cluster.as_ref().map_or_else(host::host_name, |c| c.node.clone());
    let notify_sink = &mut Sink { file: path, errors: &mut errors };
    let notify = notify::build(notify_sink, raw.notify.as_ref(), &base, &server_name).map(Arc::new);
    let flatten =
        flatten::build(&mut Sink { file: path, errors: &mut errors }, raw.flatten.as_ref());
    let from_etcd = cluster::profiles_from_etcd(&raw);
    let profiles_dir = match source {
        ProfileSource::Dir(dir) => Some(dir.to_path_buf()),
        ProfileSource::Remote(_) if !from_etcd => {
            let message = "profiles were fetched from etcd, but profiles: does not say etcd";
            errors.push(ConfigError {
                file: path.into(),
                pos: Default::default(),
                message: message.into(),
            });
            None
        }
        ProfileSource::AsConfigured if from_etcd => {
            if let Some(p) = raw.profiles.as_ref().filter(|_| raw.cluster.is_some()) {
                Sink { file: path, errors: &mut errors }.on(
                    p,
                    "profiles: etcd reads the profiles from etcd; this command reads files only",
                );
            }
            None
        }
        _ => (!from_etcd).then_some(profiles_dir),
    };
    // The overrides shared through etcd once they were read; else the state file when
    // there is one; the overrides in memory when there is none, or when it does not exist
    // yet (the server then writes it).
    let shared_overrides = previous.and_then(|p| p.cache.shared_overrides.clone());
    let state_file = raw.state_file.as_ref().map(|f| base.join(&f.value));
    let from_file = match (&raw.state_file, &state_file) {
        (Some(key), Some(state)) => {
            let mut sink = Sink { file: path, errors: &mut errors };
            if let Some(dir) = &profiles_dir {
                state_file_place(&mut sink, key, state, dir);
            }
            if shared_overrides.is_some() {
                None
            } else {
                overrides::read(state).unwrap_or_else(|e| {
                    errors.push(e);
                    Some(Overrides::default())
                })
            }
        }
        _ => None,
    };
    let overrides = shared_overrides
        .clone()
        .or(from_file)
        .unwrap_or_else(|| previous.map(|p| p.cache.overrides.clone()).unwrap_or_default());
    let dnstap =
        dnstap::build(&mut Sink { file: path, errors: &mut errors }, raw.log.as_ref(), &base);
    let reuse =
        previous.filter(|_| allow_reuse).and_then(|p| Reuse::new(p, &zones, &world, &load_rules));
    let previous = previous.map(|p| p.snapshot);
    let (sources, files) = match (source, &profiles_dir) {
        (ProfileSource::Remote(remote), _) => {
            files::read_remote(remote, reuse.as_ref(), &limits, &mut errors)
        }
        (_, Some(dir)) => files::read_dir(dir, reuse.as_ref(), &limits, &mut errors),
        (_, None) => Default::default(),
    };
    let reused = sources.iter().any(|s| matches!(s.doc, Doc::Reused(_)));
    let prev = previous.map_or(&[][..], |p| p.profiles.as_slice());
    let (mut profiles, origin_doc) =
        profiles::build_all(&sources, prev, &zones, &world, &load_rules, &mut errors);
    attach_profiles(&sources, &origin_doc, &profiles, &mut zones, &mut errors);
    if profiles.iter().flat_map(|p| &p.endpoints).any(|e| matches!(e.target, Target::Flat(_))) {
        let sink = &mut Sink { file: path, errors: &mut errors };
        flatten::check_resolvers(sink, raw.flatten.as_ref(), &flatten);
    }
    let dropping = drop_aside(sources);
    if !errors.is_empty() {
        errors.sort_by(|a, b| {
            (&a.file, a.pos.line, a.pos.col).cmp(&(&b.file, b.pos.line, b.pos.col))
        });
        errors.dedup();
        return Err(Failed { errors: ConfigErrors(errors), reused });
    }
    let (kept, dropped) = overrides::apply(&mut profiles, &overrides);
    let cluster = cluster.map(Arc::new);
    let world = Arc::new(world);
    let load_rules = Some(Arc::new(load_rules));
    let parts = Parts {
        listen,
        zones,
        world,
        cookies,
        rate_limit,
        dnstap,
        cluster,
        probe_source,
        rum,
        load_rules,
        notify,
        flatten: Some(Arc::new(flatten)),
    };
    let snapshot = assemble(parts, profiles, previous);
    // Joined so that the memory is free (for `malloc_trim`) once the load returns.
    if let Some(d) = dropping {
        let _ = d.join();
    }
    let cache =
        ReloadCache { profiles_dir, keys, files, state_file, overrides: kept, shared_overrides };
    Ok(Loaded { snapshot, cache, dropped })
}

/// The running configuration with `overrides` in place of its own: every profile is taken
/// over and nothing is read, so an override change never picks up a half-edited file (the
/// file watcher reloads those) and works while the files on disk are invalid. Health
/// slots, compiled mappings, zone serials and the generation are done as a load does them.
pub fn rebuild(previous: Previous<'_>, overrides: &Overrides) -> Loaded {
    let prev = previous.snapshot;
    let mut profiles: Vec<Profile> = prev.profiles.iter().map(|p| Profile::clone(p)).collect();
    let (kept, dropped) = overrides::apply(&mut profiles, overrides);
    let parts = Parts {
        listen: prev.listen.clone(),
        zones: prev.zones.clone(),
        world: prev.world.clone(),
        cookies: prev.cookies,
        rate_limit: prev.rate_limit.clone(),
        dnstap: prev.dnstap.clone(),
        cluster: prev.cluster.clone(),
        probe_source: prev.probe_source,
        rum: prev.rum.clone(),
        load_rules: prev.load_rules.clone(),
        notify: prev.notify.clone(),
        flatten: prev.flatten.clone(),
    };
    let snapshot = assemble(parts, profiles, Some(prev));
    let cache = ReloadCache { overrides: kept, ..previous.cache.clone() };
    Loaded { snapshot, cache, dropped }
}

/// `rebuild`, made by patching: only the profiles whose overrides differ from those the
/// running configuration applied are copied and set again, the rest is shared (see
/// `Snapshot::patched`). Serves the same answers as `rebuild` with the same overrides.
pub fn patch(previous: Previous<'_>, overrides: &Overrides) -> Loaded {
    let prev = previous.snapshot;
    let (mut replaced, kept, dropped) =
        overrides::patch(prev, &previous.cache.overrides, overrides);
    for (id, p) in &mut replaced {
        geographic::recompile(&prev.world, &prev.profiles[*id], p);
    }
    let snapshot = prev.patched(replaced, unix_now());
    let cache = ReloadCache { overrides: kept, ..previous.cache.clone() };
    Loaded { snapshot, cache, dropped }
}

/// What a snapshot holds besides its profiles.
struct Parts {
    listen: Listen,
    zones: Vec<Zone>,
    world: Arc<World>,
    cookies: crate::wire::cookie::Secrets,
    rate_limit: Option<crate::model::snapshot::RateLimit>,
    dnstap: Option<crate::model::snapshot::Dnstap>,
    cluster: Option<Arc<ClusterSettings>>,
    probe_source: crate::model::snapshot::ProbeSource,
    rum: Option<Arc<crate::geo::rum::RumSettings>>,
    /// `None` when the profiles have no load feed (set by `assemble`).
    load_rules: Option<Arc<LoadRules>>,
    notify: Option<Arc<crate::model::notify::NotifySettings>>,
    /// `None` when no endpoint is flattened (set by `assemble`).
    flatten: Option<Arc<FlattenSettings>>,
}

/// The snapshot of validated `profiles` (overrides applied): what is derived from them,
/// then the whole.
fn assemble(parts: Parts, mut profiles: Vec<Profile>, previous: Option<&Snapshot>) -> Snapshot {
    let Parts {
        listen,
        mut zones,
        world,
        cookies,
        rate_limit,
        dnstap,
        cluster,
        probe_source,
        rum,
        load_rules,
        notify,
        flatten,
    } = parts;
    crate::model::profile::compute_families(&mut profiles);
    let health = Arc::new(HealthTable::new(assign_slots(&mut profiles)));
    let flat_names = assign_flat_slots(&mut profiles);
    geographic::compile(&world, &mut profiles);
    set_serials(&mut zones, &profiles, previous);
    let mut snapshot = Snapshot::new(listen, zones, profiles, health, world);
    snapshot.generation = previous.map_or(1, |p| p.generation + 1);
    if let Some(p) = previous {
        snapshot.sign_counts = p.sign_counts.clone();
    }
    snapshot.cookies = cookies;
    snapshot.rate_limit = rate_limit;
    snapshot.dnstap = dnstap;
    snapshot.cluster = cluster;
    snapshot.probe_source = probe_source;
    snapshot.rum = rum;
    snapshot.notify = notify;
    let fed = snapshot.profiles.iter().flat_map(|p| &p.endpoints).any(|e| e.load.is_some());
    snapshot.load_rules = load_rules.filter(|_| fed);
    let prev_load = previous.map(|p| (p.profiles.as_slice(), &*p.load));
    let slots = snapshot.health.len();
    snapshot.load = Arc::new(LoadTable::carried_over(slots, &snapshot.profiles, prev_load));
    snapshot.flatten = flatten.filter(|_| !flat_names.is_empty());
    let rules = snapshot.flatten.as_ref().map_or_else(FlatRules::default, |f| f.rules);
    snapshot.flat = Arc::new(FlatTable::new(flat_names, rules, previous.map(|p| &*p.flat)));
    snapshot
}

/// Gives every flattened endpoint the slot of its host name (one per distinct name) and
/// returns the names by slot.
fn assign_flat_slots(profiles: &mut [Profile]) -> Vec<WireName> {
    let mut names: Vec<WireName> = Vec::new();
    let mut index: HashMap<WireName, usize> = HashMap::new();
    for ep in profiles.iter_mut().flat_map(|p| p.endpoints.iter_mut()) {
        ep.flat_slot = match &ep.target {
            Target::Flat(name) => Some(*index.entry(name.clone()).or_insert_with(|| {
                names.push(name.clone());
                names.len() - 1
            })),
            _ => None,
        };
    }
    names
}

/// The state file must not be read as a profile file, nor be written where operators
/// keep profiles under version control.
fn state_file_place(sink: &mut Sink<'_>, key: &Loc<String>, path: &Path, profiles_dir: &Path) {
    if path.parent() == Some(profiles_dir) {
        sink.on(key, "state_file must be outside the profiles directory");
    }
}

/// Everything `steerdns.yaml` itself defines: listeners, zones (without profiles; with
/// their keys, whose directories and timing go to `keys`), the location data, the profiles
/// directory and the file size limits.
fn server(
    sink: &mut Sink<'_>,
    raw: &RawServer,
    base: &Path,
    keys: &mut dnssec::KeyWatch,
) -> (Listen, Vec<Zone>, World, PathBuf, Limits) {
    let limits = limits(sink, raw);
    let mut listen = listen(sink, raw);
    listen.admin_tokens = admin_tokens(sink, raw, base);
    listen.admin_limits = admin_limits(sink, raw);
    listen.admin_tls = admin_tls(sink, raw, base);
    check_admin_exposure(sink, raw, &listen);
    let now = unix_now();
    let zones: Vec<Zone> = raw
        .zones
        .value
        .iter()
        .filter_map(|z| zones::build(sink, z, base, limits.zone_file, now, keys))
        .collect();
    if raw.zones.value.is_empty() {
        sink.on(&raw.zones, "at least one zone is needed");
    }
    check_zone_overlap(sink, raw, &zones);
    let profiles_dir = base.join(raw.profiles.as_ref().map_or("profiles", |p| p.value.as_str()));
    let world = world::build(sink, raw, base, &limits);
    (listen, zones, world, profiles_dir, limits)
}

/// The most each file a load reads may hold (`limits:`), so that a runaway or mistaken
/// file (a log, `/dev/zero`) fails the load instead of exhausting the server's memory.
/// Parsing takes many times a file's size in memory: the defaults leave room for ten
/// times the 100,000-profile benchmark configuration (16 MB in all, 160 KB a file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub profile_file: Limit,
    pub profiles_total: Limit,
    pub zone_file: Limit,
    pub latency_table: Limit,
    pub geo_database: Limit,
    pub asn_database: Limit,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            // The benchmark's 100,000 profiles fit in one file.
            profile_file: Limit { bytes: 16 << 20, set_by: "limits.profile_file" },
            profiles_total: Limit { bytes: 256 << 20, set_by: "limits.profiles_total" },
            zone_file: Limit { bytes: 64 << 20, set_by: "limits.zone_file" },
            latency_table: crate::geo::LatencyTable::DEFAULT_LIMIT,
            geo_database: crate::geo::GeoDb::DEFAULT_LIMIT,
            asn_database: crate::geo::AsnDb::DEFAULT_LIMIT,
        }
    }
}

/// `steerdns.yaml` is read before `limits:` is known, so its own limit is fixed.
const CONFIG_FILE_LIMIT: Limit =
    Limit { bytes: 16 << 20, set_by: "the fixed limit for the configuration file" };

/// A token is a line of text; a larger file is a mistake (`/dev/zero`, a log).
const TOKEN_FILE_LIMIT: Limit =
    Limit { bytes: 4 << 10, set_by: "the fixed limit for admin token files" };

fn limits(sink: &mut Sink<'_>, raw: &RawServer) -> Limits {
    let mut out = Limits::default();
    let Some(l) = &raw.limits else { return out };
    let keys = [
        (&l.profile_file, &mut out.profile_file),
        (&l.profiles_total, &mut out.profiles_total),
        (&l.zone_file, &mut out.zone_file),
        (&l.latency_table, &mut out.latency_table),
        (&l.geo_database, &mut out.geo_database),
        (&l.asn_database, &mut out.asn_database),
    ];
    for (value, limit) in keys {
        if let Some(v) = value
            && let Some(bytes) = check::size(sink, v, limit.set_by)
        {
            limit.bytes = bytes;
        }
    }
    out
}

/// Drops `value` on another thread, beside the remaining work: freeing many parsed
/// documents takes a noticeable time. Inline when no thread can be started.
fn drop_aside<T: Send + 'static>(value: T) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("config-drop".into()).spawn(move || drop(value)).ok()
}

/// Where DNS is served when `listen.dns` is not given: every address, port 53.
fn default_dns() -> Vec<SocketAddr> {
    vec!["0.0.0.0:53".parse().unwrap(), "[::]:53".parse().unwrap()]
}

fn listen(sink: &mut Sink<'_>, raw: &RawServer) -> Listen {
    let mut out = Listen::default();
    let Some(l) = &raw.listen else {
        out.dns = default_dns();
        return out;
    };
    let dns = match &l.dns {
        None => {
            out.dns = default_dns();
            &[][..]
        }
        Some(list) if list.value.is_empty() => {
            sink.on(list, "listen.dns needs at least one address (leave it out for port 53)");
            &[][..]
        }
        Some(list) => &list.value[..],
    };
    for a in dns {
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
    out.udp_threads = l
        .udp_threads
        .as_ref()
        .and_then(|n| check::int_in(sink, n, 1, MAX_UDP_THREADS, "listen.udp_threads"));
    out.udp_receive_buffer = l.udp_receive_buffer.as_ref().and_then(|v| {
        let key = "listen.udp_receive_buffer";
        let bytes = check::size(sink, v, key)?;
        if (MIN_UDP_RECEIVE_BUFFER..=MAX_UDP_RECEIVE_BUFFER).contains(&bytes) {
            return usize::try_from(bytes).ok();
        }
        sink.on(v, format!("{key} must be between 64KiB and 256MiB, got {bytes} bytes"));
        None
    });
    out.tcp = tcp_limits(sink, l);
    out.xdp = l.xdp.as_ref().and_then(|x| xdp::listen(sink, &x.value));
    out
}

/// `listen.tcp_*`; each absent or invalid key keeps its default.
fn tcp_limits(sink: &mut Sink<'_>, l: &RawListen) -> TcpLimits {
    let d = TcpLimits::default();
    let max = l.tcp_max_connections.as_ref();
    let per_source = l.tcp_per_source.as_ref();
    let mut within = |v: Option<&Loc<String>>, key: &str, lo: Duration, hi: Duration| {
        let v = v?;
        let got = check::duration(sink, v, key)?;
        if (lo..=hi).contains(&got) {
            return Some(got);
        }
        let (lo, hi) = (humantime::format_duration(lo), humantime::format_duration(hi));
        sink.on(v, format!("{key} must be between {lo} and {hi}"));
        None
    };
    let ms = Duration::from_millis;
    let idle =
        within(l.tcp_idle_timeout.as_ref(), "listen.tcp_idle_timeout", ms(100), ms(3_600_000));
    let io = within(l.tcp_io_timeout.as_ref(), "listen.tcp_io_timeout", ms(10), ms(60_000));
    TcpLimits {
        max_connections: check::int_or(
            sink,
            max,
            1,
            1_000_000,
            "listen.tcp_max_connections",
            d.max_connections,
        ),
        per_source: check::int_or(
            sink,
            per_source,
            1,
            1_000_000,
            "listen.tcp_per_source",
            d.per_source,
        ),
        idle_timeout: idle.unwrap_or(d.idle_timeout),
        io_timeout: io.unwrap_or(d.io_timeout),
    }
}

/// More UDP threads than this only adds wakeups: the kernel spreads clients over the
/// sockets, and each thread needs a core to be worth having.
const MAX_UDP_THREADS: i64 = 1024;

/// Below this a UDP receive buffer holds too few queries to absorb any burst; above, it
/// only pins memory (the kernel charges it per socket, and there is one per thread).
const MIN_UDP_RECEIVE_BUFFER: u64 = 64 << 10;
const MAX_UDP_RECEIVE_BUFFER: u64 = 256 << 20;

/// The name of the `admin.token_file` token.
pub const TOKEN_FILE_NAME: &str = "admin";

/// What changes are recorded as made by when the admin API has no token: on a loopback
/// listener, and on another one (`admin.allow_unauthenticated`).
pub const NO_TOKEN_NAMES: [&str; 2] = ["loopback", "unauthenticated"];

/// The admin tokens: `admin.token_file` (named `admin`), then `admin.tokens`. Names are
/// unique and so are tokens, so that every change is recorded under one name.
fn admin_tokens(sink: &mut Sink<'_>, raw: &RawServer, base: &Path) -> Vec<AdminToken> {
    let Some(admin) = raw.admin.as_ref() else { return Vec::new() };
    let mut out: Vec<AdminToken> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    if let Some(file) = &admin.token_file {
        names.push(TOKEN_FILE_NAME);
        if let Some(secret) = admin_token(sink, file, base) {
            out.push(AdminToken { name: TOKEN_FILE_NAME.into(), secret, role: TokenRole::Write });
        }
    }
    for t in admin.tokens.iter().flat_map(|list| &list.value) {
        let name = &t.value.name;
        let valid = !name.value.is_empty()
            && name.value.len() <= 64
            && name.value.bytes().all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b));
        if !valid {
            sink.on(
                name,
                format!(
                    "token name {:?} must be 1 to 64 letters, digits, '.', '_', '@' or '-'",
                    name.value
                ),
            );
        } else if NO_TOKEN_NAMES.contains(&name.value.as_str()) {
            sink.on(name, format!("token name {:?} is what changes are recorded under without a token; choose another", name.value));
        } else if names.contains(&name.value.as_str()) {
            let why = if name.value == TOKEN_FILE_NAME && admin.token_file.is_some() {
                " (the token of admin.token_file is named admin)"
            } else {
                ""
            };
            sink.on(name, format!("two admin tokens are named {:?}{why}", name.value));
        }
        names.push(&name.value);
        let role = token_role(sink, t.value.role.as_ref());
        let Some(secret) = admin_token(sink, &t.value.file, base) else { continue };
        if let Some(same) = out.iter().find(|o| o.secret == secret) {
            sink.on(
                &t.value.file,
                format!("this token is also the token of {:?}; each name needs its own", same.name),
            );
            continue;
        }
        out.push(AdminToken { name: name.value.clone(), secret, role });
    }
    out
}

/// `admin.tokens[].role`: `write` when absent, as every token was before roles existed.
fn token_role(sink: &mut Sink<'_>, role: Option<&Loc<String>>) -> TokenRole {
    match role.map(|r| (r, r.value.as_str())) {
        None | Some((_, "write")) => TokenRole::Write,
        Some((_, "read")) => TokenRole::Read,
        Some((r, other)) => {
            sink.on(r, format!("token role {other:?} must be read or write"));
            TokenRole::Write
        }
    }
}

/// `admin.tls`: the paths, resolved, once the pair in them is known to load, so that a
/// start or a reload with a broken pair fails with the file named.
fn admin_tls(sink: &mut Sink<'_>, raw: &RawServer, base: &Path) -> Option<AdminTls> {
    let tls = &raw.admin.as_ref()?.tls.as_ref()?.value;
    let out = AdminTls { cert: base.join(&tls.cert.value), key: base.join(&tls.key.value) };
    match admin_tls::load_pair(&out.cert, &out.key) {
        Ok(_) => {}
        Err(e) => {
            let at = if e.in_key() { &tls.key } else { &tls.cert };
            sink.on(at, e.to_string());
        }
    }
    Some(out)
}

/// An admin token read from `file` (surrounding whitespace ignored).
fn admin_token(sink: &mut Sink<'_>, file: &Loc<String>, base: &Path) -> Option<String> {
    let path = base.join(&file.value);
    match diag::read_limited(&path, TOKEN_FILE_LIMIT) {
        Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
        Ok(_) => {
            sink.on(file, "the admin token file is empty");
            None
        }
        Err(e) => {
            sink.on(file, format!("cannot read the admin token file {}: {e}", path.display()));
            None
        }
    }
}

// Exposure and limits of the admin listener (`admin:` besides `token_file`).

/// `admin.max_connections` and `admin.header_read_timeout`, defaults where absent.
fn admin_limits(sink: &mut Sink<'_>, raw: &RawServer) -> AdminLimits {
    let mut out = AdminLimits::default();
    let Some(a) = &raw.admin else { return out };
    out.max_connections = check::int_or(
        sink,
        a.max_connections.as_ref(),
        1,
        MAX_ADMIN_CONNECTIONS,
        "admin.max_connections",
        out.max_connections,
    );
    if let Some(t) = &a.header_read_timeout
        && let Some(d) = check::duration(sink, t, "admin.header_read_timeout")
    {
        if d.is_zero() {
            sink.on(t, "admin.header_read_timeout must be above 0");
        } else {
            out.header_read_timeout = d;
        }
    }
    out
}

/// Each admin connection holds a descriptor and buffers; this many is far beyond what
/// operators and scrapers need.
const MAX_ADMIN_CONNECTIONS: i64 = 65_536;

/// An admin API reachable beyond this host must have a token, unless the operator says
/// otherwise: it can reload the configuration.
fn check_admin_exposure(sink: &mut Sink<'_>, raw: &RawServer, listen: &Listen) {
    let (Some(addr), Some(loc)) =
        (listen.admin, raw.listen.as_ref().and_then(|l| l.admin.as_ref()))
    else {
        return;
    };
    let admin = raw.admin.as_ref();
    let has_token = admin.is_some_and(|a| {
        a.token_file.is_some() || a.tokens.as_ref().is_some_and(|t| !t.value.is_empty())
    });
    let allowed = admin.and_then(|a| a.allow_unauthenticated.as_ref()).is_some_and(|a| a.value);
    if !addr.ip().is_loopback() && !has_token && !allowed {
        sink.on(
            loc,
            format!(
                "the admin API on {addr} is reachable from other hosts without a token: set \
                 admin.token_file, listen on a loopback address, or set \
                 admin.allow_unauthenticated: true"
            ),
        );
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
    sources: &[files::Source],
    origin_doc: &[usize],
    profiles: &[Profile],
    zones: &mut [Zone],
    errors: &mut Vec<ConfigError>,
) {
    for (id, p) in profiles.iter().enumerate() {
        let zone = &mut zones[p.zone];
        let nodes = Arc::make_mut(&mut zone.nodes);
        let node = nodes.entry(p.wire.clone()).or_default();
        // The apex keeps its records (NS and the rest); the profile answers its addresses.
        let at_apex = p.wire == zone.origin;
        let clash = |t: crate::wire::Rtype| {
            !at_apex
                || matches!(
                    t,
                    crate::wire::Rtype::A | crate::wire::Rtype::AAAA | crate::wire::Rtype::CNAME
                )
        };
        if let Some(set) = node.rrsets.iter().find(|s| clash(s.rtype)) {
            let what =
                if at_apex { format!("{} records", set.rtype) } else { "static records".into() };
            let src = &sources[origin_doc[id]];
            errors.push(ConfigError {
                file: src.file.to_path_buf(),
                pos: src.name_pos(),
                message: format!(
                    "{} has {what} in the zone; a name is either a profile or records",
                    p.name
                ),
            });
        }
        node.profile = Some(id);
        for anc in p.wire.ancestors_below(&zone.origin) {
            nodes.entry(anc).or_default();
        }
    }
    check_apex_cnames(sources, origin_doc, profiles, zones, errors);
}

/// A profile at a zone apex must not answer with a CNAME through a nested profile either
/// (its own host names are checked where they are written).
fn check_apex_cnames(
    sources: &[files::Source],
    origin_doc: &[usize],
    profiles: &[Profile],
    zones: &[Zone],
    errors: &mut Vec<ConfigError>,
) {
    let at_apex = |p: &Profile| zones.get(p.zone).is_some_and(|z| z.origin == p.wire);
    if !profiles.iter().any(at_apex) {
        return;
    }
    let families = crate::model::profile::all_families(profiles);
    for (id, p) in profiles.iter().enumerate() {
        let nests = p.endpoints.iter().any(|e| matches!(e.target, Target::Nested(_)));
        if at_apex(p) && nests && families[id].host {
            let src = &sources[origin_doc[id]];
            errors.push(ConfigError {
                file: src.file.to_path_buf(),
                pos: src.name_pos(),
                message: format!(
                    "{} is a zone apex, which cannot be a CNAME, but a nested profile answers with a host name: flatten it there",
                    p.name
                ),
            });
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
        ep.health_slot = Some(statuses.len());
        // A drained endpoint is still probed: it starts as any enabled one.
        statuses.push(match (ep.configured_enabled, ep.always_serve) {
            (false, _) => Status::Disabled,
            (true, true) => Status::Unmonitored,
            (true, false) => Status::Checking,
        });
    }
    statuses
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn set_serials(zones: &mut [Zone], profiles: &[Profile], previous: Option<&Snapshot>) {
    let now = unix_now();
    for (i, zone) in zones.iter_mut().enumerate() {
        zone.fingerprint = fingerprint(zone, profiles.iter().filter(|p| p.zone == i));
        let prev = previous
            .and_then(|s| s.zones.iter().find(|z| z.origin == zone.origin))
            .map(|z| (z.serial, z.fingerprint));
        zone.serial = next_serial(prev, zone.fingerprint, now);
        zone.soa_rdata = zone.soa.rdata(zone.serial);
    }
}

/// A hash of everything that decides a zone's answers (health slots excluded). Only ever
/// compared within one process, so the encoding may change between versions.
fn fingerprint<'a>(zone: &Zone, profiles: impl Iterator<Item = &'a Profile>) -> u64 {
    let mut h = DefaultHasher::new();
    (zone.ttl, &zone.soa).hash(&mut h);
    // Order-independent (a sum of per-node hashes), so the names need no sorting.
    let nodes = zone.nodes.iter().fold(0u64, |sum, (name, node)| {
        let mut nh = DefaultHasher::new();
        (name, &node.rrsets).hash(&mut nh);
        sum.wrapping_add(nh.finish())
    });
    (zone.nodes.len(), nodes).hash(&mut h);
    // The keys decide the DNSKEY RRset and the signatures.
    if let Some(s) = &zone.dnssec {
        (s.validity, s.inception_offset, s.keys.len()).hash(&mut h);
        for k in &s.keys {
            let t = k.timing;
            (k.flags, k.algorithm, &k.public_key, k.signer.is_some()).hash(&mut h);
            (t.publish, t.activate, t.inactive, t.delete).hash(&mut h);
        }
    }
    // Order-independent too, so that a patch of one profile can update it.
    let profiles = profiles.fold(0u64, |sum, p| sum.wrapping_add(p.answer_hash()));
    h.finish().wrapping_add(profiles)
}
