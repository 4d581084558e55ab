//! The one seam that owns shared state: the current snapshot (an `ArcSwap` the query path
//! loads without locking), the prober, the metrics totals, and the reload procedure every
//! trigger uses — file watcher, SIGHUP and the admin API alike.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;

use super::dnstap::Stats as DnstapStats;
use super::rrl::Limiter;
use super::totals::Totals;
use crate::config::{self, ConfigErrors, Loaded, Previous, ReloadCache};
use crate::model::snapshot::Dnstap;
use crate::model::{Listen, Snapshot};
use crate::probe::Prober;

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
    /// The counts of the dnstap writer, when `log.dnstap` was set at startup.
    pub dnstap: Option<Arc<DnstapStats>>,
    /// Serialises reloads; never taken by queries.
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
    /// `prober` must be probing `first`'s snapshot; `dnstap`: the counts of the query log
    /// started from it.
    pub fn new(
        config_path: PathBuf,
        first: Loaded,
        prober: Arc<Prober>,
        dnstap: Option<Arc<DnstapStats>>,
    ) -> Control {
        Control {
            config_path,
            running: Running::of(&first.snapshot),
            shared: Arc::new(ArcSwap::from_pointee(first.snapshot)),
            prober,
            limiter: Arc::default(),
            totals: Totals::default(),
            dnstap,
            reloading: Mutex::new(Reloading { cache: first.cache, retiring: None }),
        }
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
        let Loaded { snapshot: next, cache } = match config::load(&self.config_path, Some(previous))
        {
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
        // Probe state moves into the new health table before queries read it.
        self.prober.adopt(&next);
        let generation = next.generation;
        let (profiles, endpoints) = (next.profiles.len(), next.endpoint_count());
        self.shared.store(Arc::new(next));
        self.totals.retire(&current);
        state.cache = cache;
        state.retiring = retire_aside(current);
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

    /// The profiles directory of the running configuration.
    pub fn profiles_dir(&self) -> PathBuf {
        self.reloading.lock().unwrap_or_else(|e| e.into_inner()).cache.profiles_dir.clone()
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
