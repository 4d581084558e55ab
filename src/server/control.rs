//! The one seam that owns shared state: the current snapshot (an `ArcSwap` the query path
//! loads without locking), the prober, the metrics totals, the event list, and the two
//! procedures that swap in a new snapshot: the reload every trigger uses (file watcher,
//! SIGHUP and the admin API alike), and a change of run-time overrides.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::cluster::Session;
use super::cluster::health::HealthViews;
use super::dnstap::Stats as DnstapStats;
use super::overrides::{self, Change, OverrideError, OverrideState};
use super::rrl::Limiter;
use super::totals::Totals;
use crate::config::overrides::{check_weight, save};
use crate::config::{self, ConfigErrors, Dropped, Loaded, Previous, ReloadCache};
use crate::model::events::Events;
use crate::model::snapshot::Dnstap;
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
    pub totals: Totals,
    /// When the running configuration's key timing next changes its keys (Unix seconds),
    /// for the reload that applies it (`key_timing`).
    next_key_change: watch::Sender<Option<u64>>,
    /// Status changes and operator actions, for `GET /api/v1/events`.
    pub events: Arc<Events>,
    /// The counts of the dnstap writer, when `log.dnstap` was set at startup.
    pub dnstap: Option<Arc<DnstapStats>>,
    /// The session with etcd, when `cluster:` is set.
    pub cluster: Option<Arc<Session>>,
    /// Every replica's health views, when `cluster:` is set (set once at startup).
    pub health_views: OnceLock<Arc<HealthViews>>,
    /// Serialises reloads and override changes; never taken by queries.
    reloading: Mutex<Reloading>,
}

/// The parts of the configuration applied once, at startup: the listen addresses (reloads
/// cannot rebind them) and the query log.
struct Running {
    listen: Listen,
    dnstap: Option<Dnstap>,
}

impl Running {
    fn of(s: &Snapshot) -> Running {
        Running { listen: s.listen.clone(), dnstap: s.dnstap.clone() }
    }
}

/// What the reload procedure keeps between reloads.
struct Reloading {
    /// What the next load reuses of the running configuration.
    cache: ReloadCache,
    /// The thread freeing the snapshot the last reload replaced.
    retiring: Option<JoinHandle<()>>,
}

impl Control {
    /// `prober` must be probing `first`'s snapshot and recording into `events`; `dnstap`:
    /// the counts of the query log started from it.
    pub fn new(
        config_path: PathBuf,
        first: Loaded,
        prober: Arc<Prober>,
        events: Arc<Events>,
        dnstap: Option<Arc<DnstapStats>>,
        cluster: Option<Arc<Session>>,
    ) -> Control {
        let Loaded { snapshot, cache, dropped } = first;
        let control = Control {
            config_path,
            running: Running::of(&snapshot),
            shared: Arc::new(ArcSwap::from_pointee(snapshot)),
            prober,
            limiter: Arc::default(),
            totals: Totals::default(),
            next_key_change: watch::Sender::new(cache.keys.next_change),
            events,
            dnstap,
            cluster,
            health_views: OnceLock::new(),
            reloading: Mutex::new(Reloading { cache, retiring: None }),
        };
        let state = control.reloading.lock().unwrap_or_else(|e| e.into_inner());
        control.report_dropped(&state.cache, &dropped, "startup");
        drop(state);
        control
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.load_full()
    }

    /// Loads and validates the whole configuration off the query path, then swaps it in
    /// at once. On error the running configuration stays and every error is logged.
    pub fn reload(&self, trigger: &str) -> Result<u64, ConfigErrors> {
        let mut state = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        // At most one replaced snapshot is still being freed while the next one is built.
        if let Some(previous) = state.retiring.take() {
            let _ = previous.join();
        }
        let current = self.shared.load_full();
        let started = std::time::Instant::now();
        let previous = Previous { snapshot: &current, cache: &state.cache };
        let Loaded { snapshot: next, cache, dropped } = match config::load(
            &self.config_path,
            Some(previous),
        ) {
            Ok(loaded) => loaded,
            Err(errors) => {
                self.totals.reload_failures.fetch_add(1, Ordering::Relaxed);
                for e in &errors.0 {
                    tracing::error!(trigger, error = %e, "reload rejected; the running configuration stays");
                }
                return Err(errors);
            }
        };
        warn_restart_needed(&self.running, &next);
        let generation = next.generation;
        let (profiles, endpoints) = (next.profiles.len(), next.endpoint_count());
        self.swap(&mut state, current, next, cache);
        self.report_dropped(&state.cache, &dropped, trigger);
        self.totals.reloads.fetch_add(1, Ordering::Relaxed);
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
        // Probe state moves into the new health table before queries read it.
        self.prober.adopt(&next);
        self.shared.store(Arc::new(next));
        self.totals.retire(&current);
        self.next_key_change.send_replace(cache.keys.next_change);
        state.cache = cache;
        state.retiring = retire_aside(current);
    }

    /// Logs and records the overrides a load could not apply, and writes the state file
    /// without them. Also writes a state file that did not exist yet while overrides are
    /// kept in memory (`state_file:` was just set): they are not lost at the next restart.
    fn report_dropped(&self, cache: &ReloadCache, dropped: &[Dropped], trigger: &str) {
        for d in dropped {
            let reason = overrides::dropped_reason(d);
            tracing::warn!(trigger, profile = %d.profile, endpoint = %d.endpoint, reason, "run-time override dropped");
            self.events.record(overrides::dropped_event(d));
        }
        let Some(path) = &cache.state_file else { return };
        let missing = !cache.overrides.is_empty() && !path.exists();
        if (!dropped.is_empty() || missing)
            && let Err(e) = save(path, &cache.overrides)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the state file");
        }
    }

    /// Applies one operator change to `endpoint` of profile `profile`: checked against the
    /// running configuration, written to the state file (when there is one) before anything
    /// else, then swapped in as a rebuild of the running configuration with the new
    /// overrides (no file is read). A change that changes nothing is not recorded.
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
        let id = current
            .profile_by_name(profile)
            .ok_or_else(|| OverrideError::NoProfile(profile.to_string()))?;
        let p = &current.profiles[id];
        let ep = p.endpoints.iter().find(|e| e.name == endpoint).ok_or_else(|| {
            OverrideError::NoEndpoint { profile: p.name.clone(), endpoint: endpoint.to_string() }
        })?;
        if let Change::Weight(w) = change {
            check_weight(p.method, w).map_err(OverrideError::Weight)?;
        }
        let before = state.cache.overrides.get(&p.name, endpoint);
        let after = change.apply(before);
        let done = OverrideState {
            profile: p.name.clone(),
            endpoint: endpoint.to_string(),
            drained: after.drained,
            weight_override: after.weight,
        };
        if after == before {
            return Ok(done);
        }
        let weights = (ep.weight, after.weight.unwrap_or(ep.configured_weight));
        let mut next = state.cache.overrides.clone();
        next.set(&p.name, endpoint, after);
        if let Some(path) = &state.cache.state_file {
            save(path, &next)
                .map_err(|source| OverrideError::Save { path: path.clone(), source })?;
        }
        let previous = Previous { snapshot: &current, cache: &state.cache };
        let Loaded { snapshot, cache, .. } = config::rebuild(previous, &next);
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

    /// The key directories of the running configuration.
    pub fn key_dirs(&self) -> Vec<PathBuf> {
        self.reloading.lock().unwrap_or_else(|e| e.into_inner()).cache.keys.dirs.clone()
    }

    /// When key timing next changes the running configuration's keys, and every change
    /// of that time.
    pub fn next_key_change(&self) -> watch::Receiver<Option<u64>> {
        self.next_key_change.subscribe()
    }

    /// Configuration keys whose change needs a restart (listeners are bound once, the
    /// query log is opened once).
    pub fn restart_needed(&self) -> Vec<&'static str> {
        let mut keys = restart_keys(&self.running.listen, &self.snapshot().listen);
        if self.running.dnstap != self.snapshot().dnstap {
            keys.push("log.dnstap");
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
    if running.admin_limits.max_connections != configured.admin_limits.max_connections {
        keys.push("admin.max_connections");
    }
    if running.admin_limits.header_read_timeout != configured.admin_limits.header_read_timeout {
        keys.push("admin.header_read_timeout");
    }
    keys
}

/// Listeners are bound and the query log opened once at startup; say clearly, on every
/// reload, when the configuration asks for others.
fn warn_restart_needed(running: &Running, next: &Snapshot) {
    if running.dnstap != next.dnstap {
        tracing::warn!(running = ?running.dnstap, configured = ?next.dnstap, "log.dnstap changed: restart steerdns to apply it (the running query log stays)");
    }
    let (running, next) = (&running.listen, &next.listen);
    for key in restart_keys(running, next) {
        tracing::warn!(key, running = ?running.dns, running_admin = ?running.admin, configured = ?next.dns, configured_admin = ?next.admin, running_udp_threads = ?running.udp_threads, configured_udp_threads = ?next.udp_threads, "{key} changed: restart steerdns to apply it (the running listeners stay)");
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
