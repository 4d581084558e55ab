//! The one seam that owns shared state: the current snapshot (an `ArcSwap` the query path
//! loads without locking), the prober, the metrics totals, the event list, and the
//! procedures that swap in a new snapshot: the reload every trigger asks for through the
//! `Reloader` (file watcher, SIGHUP, the admin API, key timing and etcd alike), a change of
//! run-time overrides, and in a cluster the overrides etcd holds.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::cluster::applied::Applied;
use super::cluster::health::HealthViews;
use super::cluster::override_record::{Authors, UNKNOWN_AUTHOR};
use super::cluster::{Session, profiles};
use super::dnstap::QueryLog;
use super::last_reload::LastReload;
use super::overrides::{self, Change, OverrideError, OverrideState};
use super::reloader::{Requests, Triggers};
use super::rrl::Limiter;
use super::totals::Totals;
use crate::config::overrides::save;
use crate::config::remote::RemoteProfiles;
use crate::config::{
    self, ConfigErrors, Dropped, Loaded, Overrides, Previous, ProfileSource, ReloadCache,
};
use crate::model::events::Events;
use crate::model::snapshot::DEFAULT_UDP_RECEIVE_BUFFER;
use crate::model::{Listen, Snapshot};
use crate::probe::Prober;
use crate::wire::name::WireName;

pub struct Control {
    pub config_path: PathBuf,
    /// What was set up at startup from the configuration and stays until a restart.
    running: Running,
    pub shared: Arc<ArcSwap<Snapshot>>,
    /// Probes the running snapshot's endpoints; a reload hands it the next snapshot first.
    pub prober: Arc<Prober>,
    /// The counts of response rate limiting, kept across reloads.
    pub limiter: Arc<Limiter>,
    /// What the AF_XDP fast path counted (all zero without `listen.xdp`).
    pub xdp_stats: Arc<super::xdp::worker::Stats>,
    pub totals: Totals,
    /// When the running configuration's key timing next changes its keys (Unix seconds),
    /// for the reload that applies it (`key_timing`).
    next_key_change: watch::Sender<Option<u64>>,
    /// Status changes and operator actions, for `GET /api/v1/events`.
    pub events: Arc<Events>,
    /// The query log (`log.dnstap`), which reloads start, stop and change.
    pub dnstap: Arc<QueryLog>,
    /// The reload requests waiting for the `Reloader`, and their counts.
    pub requests: Requests,
    /// Profiles just read from etcd, for the next reload (`Reloader` with `Trigger::Cluster`).
    incoming_remote: Mutex<Option<Arc<RemoteProfiles>>>,
    /// The session with etcd, when `cluster:` is set.
    pub cluster: Option<Arc<Session>>,
    /// The etcd revision up to which the overrides etcd holds are applied here (0 before
    /// the first read), so that a change made here answers once it applies here.
    shared_revision: Applied,
    /// The same for the pushed health etcd holds (`cluster::pushed`).
    pub pushed_revision: Applied,
    /// The profiles revision and the generation being served, for this replica's
    /// registration in etcd.
    served: watch::Sender<Served>,
    /// Every replica's health views, when `cluster:` is set (set once at startup).
    pub health_views: OnceLock<Arc<HealthViews>>,
    /// Real user measurements, when `rum:` was set at startup (set once).
    pub rum: OnceLock<Arc<super::rum::Rum>>,
    /// Webhook notifications of status changes (set once at startup).
    pub notify: OnceLock<Arc<super::notify::Notifier>>,
    /// Load feedback: the shares of the last control step, pushed loads, feed errors.
    pub load: Arc<super::load::Loads>,
    /// Serialises reloads and override changes; never taken by queries.
    reloading: Mutex<Reloading>,
    /// How the last reload ended, for `GET /api/v1/reload`.
    pub last_reload: LastReload,
}

/// The parts of the configuration applied once, at startup: the listen addresses (reloads
/// cannot rebind them).
struct Running {
    listen: Listen,
}

impl Running {
    fn of(s: &Snapshot) -> Running {
        Running { listen: s.listen.clone() }
    }
}

/// What the reload procedure keeps between reloads.
struct Reloading {
    /// What the next load reuses of the running configuration.
    cache: ReloadCache,
    /// The thread freeing the snapshot the last reload replaced.
    retiring: Option<JoinHandle<()>>,
    /// The overrides the last load or rebuild could not apply. In a cluster they stay in
    /// etcd and come back at every load: each is reported once, not at every load.
    dropped: Vec<Dropped>,
    /// The profiles from etcd the running configuration was loaded with (`profiles:
    /// etcd`), and the revision it serves.
    remote: Option<Arc<RemoteProfiles>>,
    /// The profiles last read from etcd, applied or refused: what every reload loads, so
    /// that a refused set is taken once `steerdns.yaml` is fixed.
    latest: Option<Arc<RemoteProfiles>>,
}

/// What this replica serves, as its registration in etcd says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// The profiles revision in etcd (0 when the profiles come from files).
    pub revision: i64,
    /// The running configuration's generation.
    pub generation: u64,
}

impl Control {
    /// `prober` must be probing `first`'s snapshot and recording into `events`; `dnstap`:
    /// the query log started from it.
    pub fn new(
        config_path: PathBuf,
        first: Loaded,
        prober: Arc<Prober>,
        events: Arc<Events>,
        dnstap: Arc<QueryLog>,
        cluster: Option<Arc<Session>>,
    ) -> Control {
        let Loaded { snapshot, cache, dropped } = first;
        let served = Served { revision: 0, generation: snapshot.generation };
        let control = Control {
            config_path,
            running: Running::of(&snapshot),
            shared: Arc::new(ArcSwap::from_pointee(snapshot)),
            prober,
            limiter: Arc::default(),
            xdp_stats: Arc::default(),
            totals: Totals::default(),
            next_key_change: watch::Sender::new(cache.keys.next_change),
            events,
            dnstap,
            requests: Requests::default(),
            incoming_remote: Mutex::new(None),
            cluster,
            health_views: OnceLock::new(),
            last_reload: LastReload::started(served.generation),
            rum: OnceLock::new(),
            notify: OnceLock::new(),
            load: Arc::default(),
            shared_revision: Applied::default(),
            pushed_revision: Applied::default(),
            served: watch::Sender::new(served),
            reloading: Mutex::new(Reloading {
                cache,
                retiring: None,
                dropped: Vec::new(),
                remote: None,
                latest: None,
            }),
        };
        let mut state = control.reloading.lock().unwrap_or_else(|e| e.into_inner());
        control.report_dropped(&mut state, dropped, "startup");
        drop(state);
        control
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.load_full()
    }

    /// The configuration was loaded from profiles of etcd: `(applied, latest)`, the ones
    /// it was loaded with and the ones last read from etcd (which reloads load; not the
    /// same when etcd's were refused at startup and the cache file's served instead).
    pub fn with_remote(
        self,
        remote: Option<(Arc<RemoteProfiles>, Arc<RemoteProfiles>)>,
    ) -> Control {
        let revision = remote.as_ref().map_or(0, |(applied, _)| applied.revision);
        self.served.send_modify(|s| s.revision = revision);
        let mut state = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        (state.remote, state.latest) = remote.map(|(a, l)| (Some(a), Some(l))).unwrap_or_default();
        drop(state);
        self
    }

    /// The one reload procedure, run by the `Reloader` for every request coalesced into
    /// `triggers`: loads and validates the whole configuration off the query path, then
    /// swaps it in at once; the result is known here and nowhere else. On error the running
    /// configuration stays and every error is logged. With `profiles: etcd`, the profiles
    /// are those last read from etcd, as the files on disk are for a profiles directory;
    /// when etcd alone asked, the configuration is reloaded only when their files differ
    /// from the running ones (otherwise only a moved revision is recorded), and the
    /// running generation is returned.
    pub(super) fn reload(&self, triggers: Triggers) -> Result<u64, ConfigErrors> {
        let trigger = triggers.to_string();
        let mut state = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let incoming = self.incoming_remote.lock().unwrap_or_else(|e| e.into_inner()).take();
        match incoming.or_else(|| state.latest.clone()) {
            Some(latest) => {
                let always = !triggers.only_cluster();
                let loaded = self.take_remote(&mut state, &trigger, latest, always)?;
                Ok(loaded.unwrap_or_else(|| self.snapshot().generation))
            }
            None => self.reload_locked(&mut state, &trigger, None),
        }
    }

    /// Hands over profiles just read from etcd, for the next reload (which the caller
    /// asks for with `Trigger::Cluster`). A later set replaces one not yet taken.
    pub fn offer_remote(&self, next: Arc<RemoteProfiles>) {
        *self.incoming_remote.lock().unwrap_or_else(|e| e.into_inner()) = Some(next);
    }

    /// Takes profiles read from etcd: a reload with them when their files differ from the
    /// running ones or when `always` (`Ok(Some(generation))`); when only the revision
    /// moved, the revision is recorded without a reload (`Ok(None)`). A refused set leaves
    /// the running configuration and its revision. Each revision taken is written to the
    /// cache file.
    fn take_remote(
        &self,
        state: &mut Reloading,
        trigger: &str,
        next: Arc<RemoteProfiles>,
        always: bool,
    ) -> Result<Option<u64>, ConfigErrors> {
        state.latest = Some(next.clone());
        let same =
            state.remote.as_ref().map(|r| (r.revision == next.revision, r.same_files(&next)));
        let generation = match same {
            Some((true, true)) if !always => return Ok(None),
            Some((false, true)) if !always => {
                tracing::info!(
                    trigger,
                    revision = next.revision,
                    "profiles revision moved without a change of the profiles; nothing to reload"
                );
                None
            }
            _ => Some(self.reload_locked(state, trigger, Some(&next))?),
        };
        if same != Some((true, true)) {
            self.served.send_modify(|s| s.revision = next.revision);
            if let Some(session) = &self.cluster {
                profiles::save_cache(&session.settings, &next);
            }
        }
        state.remote = Some(next);
        Ok(generation)
    }

    /// Counts and logs a refused configuration; the running one stays.
    pub fn refused(&self, trigger: &str, errors: &ConfigErrors) {
        self.totals.reload_failures.fetch_add(1, Ordering::Relaxed);
        let list = errors.0.iter().map(ToString::to_string).collect();
        self.last_reload.set(trigger, self.snapshot().generation, list);
        for e in &errors.0 {
            tracing::error!(trigger, error = %e, "reload rejected; the running configuration stays");
        }
    }

    /// What this replica serves, and every change of it.
    pub fn served(&self) -> watch::Receiver<Served> {
        self.served.subscribe()
    }

    fn reload_locked(
        &self,
        state: &mut Reloading,
        trigger: &str,
        remote: Option<&RemoteProfiles>,
    ) -> Result<u64, ConfigErrors> {
        // At most one replaced snapshot is still being freed while the next one is built.
        if let Some(previous) = state.retiring.take() {
            let _ = previous.join();
        }
        let current = self.shared.load_full();
        let started = std::time::Instant::now();
        let previous = Previous { snapshot: &current, cache: &state.cache };
        let source = remote.map_or(ProfileSource::AsConfigured, ProfileSource::Remote);
        let Loaded { snapshot: next, cache, dropped } =
            match config::load_from(&self.config_path, Some(previous), source) {
                Ok(loaded) => loaded,
                Err(errors) => {
                    self.refused(trigger, &errors);
                    return Err(errors);
                }
            };
        warn_restart_needed(&self.running, &next);
        let generation = next.generation;
        let (profiles, endpoints) = (next.profiles.len(), next.endpoint_count());
        let dnstap = next.dnstap.clone();
        self.swap(state, current, next, cache);
        if let Err(e) = self.dnstap.apply(dnstap.as_ref()) {
            tracing::error!(trigger, error = %e, "log.dnstap not applied; the running query log stays");
        }
        self.report_dropped(state, dropped, trigger);
        self.totals.reloads.fetch_add(1, Ordering::Relaxed);
        self.last_reload.set(trigger, generation, Vec::new());
        tracing::info!(
            trigger,
            generation,
            profiles,
            endpoints,
            took_ms = started.elapsed().as_millis() as u64,
            "configuration reloaded"
        );
        Ok(generation)
    }

    /// Puts `next` in place of `current`, which the reload or override change started from.
    fn swap(
        &self,
        state: &mut Reloading,
        current: Arc<Snapshot>,
        next: Snapshot,
        cache: ReloadCache,
    ) {
        // Probe state moves into the new health table before queries read it. A patched
        // snapshot (an override change) shares the table and the endpoints' probes, and
        // counts on in the same counters.
        if !Arc::ptr_eq(&current.health, &next.health) {
            self.prober.adopt(&next);
        }
        let generation = next.generation;
        let replaced = !Arc::ptr_eq(&current.counters, &next.counters);
        // The last control step's shares go into a new table before queries see it.
        let load_applied = self.load.prepare_swap(&next);
        self.shared.store(Arc::new(next));
        drop(load_applied);
        self.served.send_modify(|s| s.generation = generation);
        if replaced {
            self.totals.retire(&current);
        }
        self.next_key_change.send_replace(cache.keys.next_change);
        state.cache = cache;
        // A patch frees a profile or a few and the list of profiles: at once, rather than
        // on a thread the next change would wait for.
        state.retiring = if replaced { retire_aside(current) } else { None };
    }

    /// Logs and records the overrides a load could not apply, and writes the state file
    /// without them. Also writes a state file that did not exist yet while overrides are
    /// kept in memory (`state_file:` was just set): they are not lost at the next restart.
    /// In a cluster the overrides stay in etcd (another replica may apply them), so an
    /// override the last load dropped already is not reported again, and the state file is
    /// left to `apply_shared_overrides`.
    fn report_dropped(&self, state: &mut Reloading, dropped: Vec<Dropped>, trigger: &str) {
        let shared = self.cluster.is_some();
        for d in &dropped {
            if shared && state.dropped.contains(d) {
                continue;
            }
            let reason = overrides::dropped_reason(d);
            tracing::warn!(trigger, profile = %d.profile, endpoint = %d.endpoint, reason, "run-time override dropped");
            self.events.record(overrides::dropped_event(d));
        }
        let cache = &state.cache;
        if let Some(path) = cache.state_file.as_ref().filter(|_| !shared) {
            let missing = !cache.overrides.is_empty() && !path.exists();
            if (!dropped.is_empty() || missing)
                && let Err(e) = self.save_state(path, &cache.overrides)
            {
                tracing::warn!(path = %path.display(), error = %e, "cannot write the state file");
            }
        }
        state.dropped = dropped;
    }

    /// Applies one operator change to `endpoint` of profile `profile`: checked against the
    /// running configuration, written to the state file (when there is one) before anything
    /// else, then swapped in as the running configuration patched with the new overrides
    /// (no file is read; only the changed profile is copied). A change that changes
    /// nothing is not recorded.
    pub fn change_override(
        &self,
        profile: &WireName,
        endpoint: &str,
        change: Change,
        by: &str,
    ) -> Result<OverrideState, OverrideError> {
        let mut state = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(previous) = state.retiring.take() {
            let _ = previous.join();
        }
        let current = self.shared.load_full();
        let started = std::time::Instant::now();
        let (p, ep) = overrides::check(&current, profile, endpoint, change)?;
        let before = state.cache.overrides.get(&p.name, endpoint);
        let after = change.apply(before);
        let done = OverrideState {
            profile: p.name.clone(),
            endpoint: endpoint.to_string(),
            drained: after.drained,
            weight_override: after.weight,
            bias_override: after.bias,
        };
        if after == before {
            return Ok(done);
        }
        let weights = change.values(
            (ep.weight, ep.bias),
            (
                after.weight.unwrap_or(ep.configured_weight),
                after.bias.unwrap_or(ep.configured_bias),
            ),
        );
        let mut next = state.cache.overrides.clone();
        next.set(&p.name, endpoint, after);
        if let Some(path) = &state.cache.state_file {
            self.save_state(path, &next)
                .map_err(|source| OverrideError::Save { path: path.clone(), source })?;
        }
        let previous = Previous { snapshot: &current, cache: &state.cache };
        let Loaded { snapshot, cache, .. } = config::patch(previous, &next);
        let generation = snapshot.generation;
        self.swap(&mut state, current.clone(), snapshot, cache);
        overrides::log(change, &done, weights, by);
        self.events.record(overrides::event(change, &done, weights, by));
        tracing::debug!(
            generation,
            took_ms = started.elapsed().as_millis() as u64,
            "override applied"
        );
        Ok(done)
    }

    /// Applies the overrides etcd holds as of `revision` (`cluster::overrides` reads them):
    /// a patch of the running configuration, as for a change made here, when they differ
    /// from those applied. Each endpoint whose overrides changed gets its log line and
    /// event, by the author etcd names (`authors`); the state file, when there is one, gets
    /// a copy of them all for a start while etcd is unreachable.
    pub fn apply_shared_overrides(&self, next: Overrides, authors: &Authors, revision: i64) {
        let mut state = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        if state.cache.shared_overrides.as_ref() != Some(&next) {
            if let Some(previous) = state.retiring.take() {
                let _ = previous.join();
            }
            let before = state.cache.shared_overrides.take();
            let before = before.unwrap_or_else(|| state.cache.overrides.clone());
            state.cache.shared_overrides = Some(next.clone());
            let targets: BTreeSet<(String, String)> = (before.iter().chain(next.iter()))
                .filter(|&(p, e, _)| before.get(p, e) != next.get(p, e))
                .map(|(p, e, _)| (p.to_string(), e.to_string()))
                .collect();
            // The local copy first: whoever sees the change served finds it there too.
            if let Some(path) = &state.cache.state_file
                && let Err(e) = self.save_state(path, &next)
            {
                tracing::warn!(path = %path.display(), error = %e, "cannot write the state file");
            }
            if !targets.is_empty() {
                self.rebuild_shared(&mut state, &next, &targets, authors);
            }
        }
        self.shared_revision.advance(revision);
    }

    /// The patch of `apply_shared_overrides`, and the log lines and events of what it
    /// changed at `targets` (what could not apply is reported as dropped instead).
    fn rebuild_shared(
        &self,
        state: &mut Reloading,
        next: &Overrides,
        targets: &BTreeSet<(String, String)>,
        authors: &Authors,
    ) {
        let started = std::time::Instant::now();
        let current = self.shared.load_full();
        let previous = Previous { snapshot: &current, cache: &state.cache };
        let Loaded { snapshot, cache, dropped } = config::patch(previous, next);
        let endpoint = |s: &Snapshot, p: &str, e: &str| {
            let id = s.profile_by_name(&WireName::parse(p).ok()?)?;
            s.profiles[id].endpoints.iter().find(|ep| ep.name == e).cloned()
        };
        let mut changes = Vec::new();
        for (p, e) in targets {
            let (Some(old), Some(new)) = (endpoint(&current, p, e), endpoint(&snapshot, p, e))
            else {
                continue;
            };
            let before = config::Override {
                drained: old.drained,
                weight: old.weight_override,
                bias: old.bias_override,
            };
            let after = config::Override {
                drained: new.drained,
                weight: new.weight_override,
                bias: new.bias_override,
            };
            let by = authors.get(&(p.clone(), e.clone())).map_or(UNKNOWN_AUTHOR, String::as_str);
            let done = OverrideState {
                profile: p.clone(),
                endpoint: e.clone(),
                drained: after.drained,
                weight_override: after.weight,
                bias_override: after.bias,
            };
            for change in Change::between(before, after) {
                let values = change.values((old.weight, old.bias), (new.weight, new.bias));
                changes.push((change, done.clone(), values, by.to_string()));
            }
        }
        let generation = snapshot.generation;
        self.swap(state, current, snapshot, cache);
        for (change, done, weights, by) in changes {
            overrides::log(change, &done, weights, &by);
            self.events.record(overrides::event(change, &done, weights, &by));
        }
        self.report_dropped(state, dropped, "etcd");
        tracing::debug!(
            generation,
            took_ms = started.elapsed().as_millis() as u64,
            "overrides from etcd applied"
        );
    }

    /// Waits until the overrides etcd holds are applied here up to `revision`, at most
    /// `limit`; whether they are.
    pub async fn wait_shared_overrides(&self, revision: i64, limit: Duration) -> bool {
        self.shared_revision.wait(revision, limit).await
    }

    /// Writes the state file: `overrides` and the newest events.
    fn save_state(&self, path: &std::path::Path, overrides: &Overrides) -> std::io::Result<()> {
        let (events, newest) = self.events.to_save();
        save(path, overrides, &events)?;
        self.events.saved(newest);
        Ok(())
    }

    /// Writes the events recorded since the state file was last written into it, with the
    /// overrides it holds (in a cluster, once those etcd holds are known). Nothing without
    /// a state file.
    pub fn save_events(&self) {
        if !self.events.unsaved() {
            return;
        }
        let state = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let cache = &state.cache;
        let overrides = match (&self.cluster, &cache.shared_overrides) {
            (None, _) => &cache.overrides,
            (Some(_), Some(shared)) => shared,
            (Some(_), None) => return,
        };
        if let Some(path) = &cache.state_file
            && let Err(e) = self.save_state(path, overrides)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the state file");
        }
    }

    /// Whether the admin API listens on a loopback address (what a change is recorded as
    /// made by when the API has no token).
    pub fn admin_is_loopback(&self) -> bool {
        self.running.listen.admin.is_some_and(|a| a.ip().is_loopback())
    }

    /// The profiles directory of the running configuration; `None` when the profiles come
    /// from etcd.
    pub fn profiles_dir(&self) -> Option<PathBuf> {
        self.reloading.lock().unwrap_or_else(|e| e.into_inner()).cache.profiles_dir.clone()
    }

    /// `state_file:` of the running configuration.
    pub fn state_file(&self) -> Option<PathBuf> {
        self.reloading.lock().unwrap_or_else(|e| e.into_inner()).cache.state_file.clone()
    }

    /// The key directories of the running configuration.
    pub fn key_dirs(&self) -> Vec<PathBuf> {
        self.reloading.lock().unwrap_or_else(|e| e.into_inner()).cache.keys.dirs.clone()
    }

    /// When key timing next changes the running configuration's keys, and every change
    /// of that time.
    pub fn next_key_change(&self) -> watch::Receiver<Option<u64>> {
        self.next_key_change.subscribe()
    }

    /// Configuration keys whose change needs a restart (listeners are bound once).
    pub fn restart_needed(&self) -> Vec<&'static str> {
        let mut keys = restart_keys(&self.running.listen, &self.snapshot().listen);
        if self.rum.get().map(|r| &*r.settings) != self.snapshot().rum.as_deref() {
            keys.push("rum");
        }
        keys
    }
}

fn restart_keys(running: &Listen, configured: &Listen) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if running.dns != configured.dns {
        keys.push("listen.dns");
    }
    if running.admin != configured.admin {
        keys.push("listen.admin");
    }
    if running.udp_threads != configured.udp_threads {
        keys.push("listen.udp_threads");
    }
    if running.udp_receive_buffer != configured.udp_receive_buffer {
        keys.push("listen.udp_receive_buffer");
    }
    if running.admin_limits.max_connections != configured.admin_limits.max_connections {
        keys.push("admin.max_connections");
    }
    if running.admin_limits.header_read_timeout != configured.admin_limits.header_read_timeout {
        keys.push("admin.header_read_timeout");
    }
    if running.admin_tls.is_some() != configured.admin_tls.is_some() {
        keys.push("admin.tls");
    }
    if running.xdp != configured.xdp {
        keys.push("listen.xdp");
    }
    keys
}

/// The running and the configured value of a listener key of `restart_keys`, as plain
/// text for the log (`127.0.0.1:8053`, `none`, `one per core`).
fn restart_values(key: &str, running: &Listen, configured: &Listen) -> (String, String) {
    fn addr(a: Option<std::net::SocketAddr>) -> String {
        a.map_or_else(|| "none".to_string(), |a| a.to_string())
    }
    let of = |l: &Listen| match key {
        "listen.dns" => l.dns.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        "listen.admin" => addr(l.admin),
        "listen.udp_threads" => l.udp_threads.map_or("one per core".into(), |n| n.to_string()),
        "listen.udp_receive_buffer" => {
            format!("{} bytes", l.udp_receive_buffer.unwrap_or(DEFAULT_UDP_RECEIVE_BUFFER))
        }
        "admin.max_connections" => l.admin_limits.max_connections.to_string(),
        "admin.header_read_timeout" => {
            humantime::format_duration(l.admin_limits.header_read_timeout).to_string()
        }
        "admin.tls" => if l.admin_tls.is_some() { "on" } else { "off" }.to_string(),
        "listen.xdp" => l.xdp.as_ref().map_or("off".into(), |x| {
            let addrs: Vec<String> = x.addresses.iter().map(ToString::to_string).collect();
            let queues =
                x.queues.as_ref().map_or("every queue".into(), |q| format!("queues {q:?}"));
            format!("{} {queues}, {} port {}", x.interface, addrs.join(", "), x.port)
        }),
        _ => String::new(),
    };
    (of(running), of(configured))
}

/// Listeners are bound once at startup; say clearly, on every reload, when the
/// configuration asks for others.
fn warn_restart_needed(running: &Running, next: &Snapshot) {
    let (running, next) = (&running.listen, &next.listen);
    for key in restart_keys(running, next) {
        let (running, configured) = restart_values(key, running, next);
        tracing::warn!(
            key,
            running = %running,
            configured = %configured,
            "{key} changed: restart steerdns to apply it (the running listeners stay)"
        );
    }
}

/// Frees a replaced snapshot and trims the heap (the parser's garbage too) on another
/// thread, so that the reload answers as soon as the new snapshot is live: for a large
/// configuration both take a noticeable time. Queries still holding the old snapshot keep
/// it alive until they finish.
fn retire_aside(old: Arc<Snapshot>) -> Option<JoinHandle<()>> {
    let spawned = std::thread::Builder::new().name("snapshot-retire".into()).spawn(move || {
        drop(old);
        release_free_memory();
    });
    spawned
        .inspect_err(|e| {
            // The closure (and the snapshot in it) was dropped inline; trim inline too.
            tracing::warn!(error = %e, "cannot start a thread to free the old configuration");
            release_free_memory();
        })
        .ok()
}

/// Hands memory freed by a retired snapshot back to the OS. glibc keeps freed heap pages,
/// so without this the RSS after a reload of a large configuration stays at the peak of
/// two snapshots plus the parser's garbage.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the kernel; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_warnings_print_plain_values() {
        let running = Listen {
            dns: vec!["127.0.0.1:53".parse().unwrap(), "[::1]:53".parse().unwrap()],
            admin: Some("127.0.0.1:8053".parse().unwrap()),
            ..Listen::default()
        };
        let mut next = running.clone();
        next.dns.truncate(1);
        next.admin = None;
        next.udp_threads = Some(4);
        next.admin_limits.header_read_timeout = Duration::from_secs(30);
        next.admin_tls = Some(crate::model::AdminTls { cert: "c".into(), key: "k".into() });
        next.xdp = Some(crate::model::snapshot::XdpListen {
            interface: "eth0".into(),
            queues: Some(vec![0, 1]),
            addresses: vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()],
            port: 53,
        });
        let cases = [
            ("listen.dns", "127.0.0.1:53, [::1]:53", "127.0.0.1:53"),
            ("listen.admin", "127.0.0.1:8053", "none"),
            ("listen.udp_threads", "one per core", "4"),
            ("admin.header_read_timeout", "10s", "30s"),
            ("admin.tls", "off", "on"),
            ("listen.xdp", "off", "eth0 queues [0, 1], 192.0.2.1, 2001:db8::1 port 53"),
        ];
        let keys: Vec<&str> = cases.iter().map(|c| c.0).collect();
        assert_eq!(restart_keys(&running, &next), keys);
        for (key, was, now) in cases {
            let (r, c) = restart_values(key, &running, &next);
            assert_eq!((r.as_str(), c.as_str()), (was, now), "{key}");
        }
    }
}
