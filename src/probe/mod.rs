//! The health prober: runs one task per distinct probe and publishes endpoint statuses
//! into the health table the query path reads (rules in `docs/probing.md`).
//!
//! `plan` decides which probes a snapshot needs, `check` does one probe (over `http`, a
//! lean HTTP/1.1 GET, and `tls`, the shared TLS client configurations; or `dns`, `udp`,
//! `icmp`, `grpc`, and `feed` over `pull`, the feed reader the load feeds share, with
//! `exposition` for Prometheus text), `state` is the
//! pure status machine, `live` holds a running probe's state and publishes it, and
//! `schedule` is each probe's loop. `Prober` ties them together across reloads: `adopt`
//! keeps probes whose definition did not change (state and phase included), stops the ones
//! no longer used and starts new ones in `checking`. Each monitored endpoint's status is
//! its monitors' results combined by its rule (`endpoint`); `pushed` and `file` monitors
//! read `external`, which the admin API (`push_health`; in a cluster, the pushes etcd holds
//! through `apply_shared_push`) and the health-file watcher (`health_files`) fill. The
//! server calls `adopt` on every reload; the admin API reads `endpoint_states`, `stats` and
//! `durations`. In a cluster, a `Consensus` (`consensus`) turns each endpoint's own status
//! (the rule over this replica's monitors) into the verdict over every replica's view of
//! the endpoint, and `republish` applies the others' changes.

pub mod check;
mod consensus;
mod dns;
mod endpoint;
pub mod exposition;
mod external;
mod feed;
pub mod flatten;
mod grpc;
mod health_files;
mod http;
mod icmp;
mod live;
pub mod lookup;
pub mod plan;
pub mod pull;
pub mod pushed;
mod schedule;
pub mod state;
pub mod tls;
mod udp;

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arc_swap::ArcSwap;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use check::Reason;

/// The HTTP response reader, for the `probe_http` fuzz target in `fuzz/` alone: it feeds
/// the reader from memory and checks its limits.
#[doc(hidden)]
pub mod http_reader {
    pub use super::http::{HttpError, MAX_CHUNK_LINE, MAX_HEAD, MAX_INTERIM, read_response};
}
/// The bounded HTTP/1.1 GET that probes use, shared with the load feeds (`server::load`),
/// which read a small body with the same limits on the head.
pub mod http_get {
    pub use super::http::{HttpError, read_head, request};
}
pub use consensus::{Consensus, EndpointKey, OwnView};
pub use endpoint::{EndpointView, MonitorState, Vantage};
pub use live::{ProbeResult, StatusChange};
pub use plan::{ProbeKey, ProbeTarget};
pub use pushed::PushedHealth;
pub use schedule::{DURATION_BUCKETS, DurationHistogram, ProberStats};

use crate::model::events::Events;
use crate::model::health::{HealthTable, HealthView, Status};
use crate::model::snapshot::Snapshot;
use check::{Check, Clients};
use endpoint::{EndpointHealth, Spec};
use external::External;
use live::{KINDS, Live, Users};
use plan::{Placed, Plan, User};
use schedule::Stats;

/// What the admin API shows of one leaf endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointState {
    /// Absolute profile name.
    pub profile: String,
    pub endpoint: String,
    /// The address or host name probed.
    pub target: String,
    pub status: Status,
    /// False for endpoints that are never probed (disabled, always_serve, or in a disabled
    /// profile); their status comes from the configuration.
    pub probed: bool,
    pub last_probe: Option<ProbeResult>,
    pub last_change: Option<StatusChange>,
    /// How many probe results of each kind (`ok`, `timeout`, ...) so far; kinds never seen
    /// are left out. Shared probes show the same counts on every endpoint using them.
    pub results: Vec<(&'static str, u64)>,
    /// In a cluster, for a monitored endpoint: every replica's view of it and the verdict.
    pub vantage: Option<Vantage>,
    /// A monitored endpoint's monitors, rule and combined reason.
    pub monitors: Option<EndpointView>,
}

/// A running probe task.
struct Running {
    live: Arc<Live>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// A running probe's state, found by its key.
#[derive(Clone)]
struct ByKey(Arc<Live>);

impl PartialEq for ByKey {
    fn eq(&self, other: &ByKey) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ByKey {}

impl Hash for ByKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl Borrow<ProbeKey> for ByKey {
    fn borrow(&self) -> &ProbeKey {
        &self.0.key
    }
}

/// The adopted snapshot's plan, health table and running probes, for `endpoint_states`
/// and the next reload's plan.
struct Adopted {
    plan: Plan,
    table: Arc<HealthTable>,
    /// The running probes; rebuilt only when probes start or stop.
    lives: Arc<HashSet<ByKey>>,
    /// The status of every monitored endpoint of an enabled profile, by health slot.
    endpoints: HashMap<usize, Arc<EndpointHealth>>,
}

/// Runs the probes of the current snapshot. Queries never wait on it: they read the health
/// table, which the prober writes with atomic stores.
pub struct Prober {
    runtime: Handle,
    cancel: CancellationToken,
    clients: Arc<Clients>,
    stats: Arc<Stats>,
    /// Where the grid runs start on begins (`schedule::GRID`).
    epoch: tokio::time::Instant,
    /// Taken by `adopt`, `stats` and `wait`; never by queries or probe tasks.
    running: Mutex<HashMap<ProbeKey, Running>>,
    /// Shared with the health-file watchers and push timers, which find endpoints in it.
    adopted: Arc<ArcSwap<Adopted>>,
    /// The watcher of each health file read, by path; changed with the probes.
    files: Mutex<HashMap<PathBuf, CancellationToken>>,
    /// Where probes record status changes.
    events: Arc<Events>,
    /// Where probes connect from, from the adopted snapshot.
    sources: check::Sources,
    /// In a cluster: what turns the replicas' views of each endpoint into its status.
    consensus: Option<Arc<dyn Consensus>>,
    /// Pushed statuses and health files, for `pushed` and `file` monitors.
    external: Arc<External>,
    /// Whether pushes are shared through etcd (`share_pushes`).
    pushes_shared: AtomicBool,
}

impl Prober {
    /// Starts probing `snap`, recording status changes in `events`. Must be called inside
    /// a tokio runtime, whose tasks run the probes; cancelling `cancel` stops them all.
    pub fn start(snap: &Snapshot, cancel: CancellationToken, events: Arc<Events>) -> Prober {
        Prober::start_with(snap, cancel, events, None)
    }

    /// `start`, with the statuses decided by `consensus` when one is given (a cluster).
    pub fn start_with(
        snap: &Snapshot,
        cancel: CancellationToken,
        events: Arc<Events>,
        consensus: Option<Arc<dyn Consensus>>,
    ) -> Prober {
        let prober = Prober {
            runtime: Handle::current(),
            cancel,
            clients: Arc::new(Clients::default()),
            stats: Arc::new(Stats::default()),
            epoch: tokio::time::Instant::now(),
            running: Mutex::new(HashMap::new()),
            adopted: Arc::new(ArcSwap::from_pointee(Adopted {
                plan: Plan::default(),
                table: snap.health.clone(),
                lives: Arc::default(),
                endpoints: HashMap::new(),
            })),
            files: Mutex::new(HashMap::new()),
            events,
            sources: Arc::new(ArcSwap::from_pointee(snap.probe_source)),
            consensus,
            external: Arc::default(),
            pushes_shared: AtomicBool::new(false),
        };
        let (_, started, _) = prober.switch(snap);
        tracing::info!(probes = started, "health prober started");
        prober
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ProbeKey, Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves probing to `next`, before it is swapped in: unchanged probes keep their state
    /// and schedule and write their status into `next.health`; probes no longer used stop;
    /// new ones start `checking`. From now on results go to `next.health`.
    pub fn adopt(&self, next: &Snapshot) {
        let (kept, started, stopped) = self.switch(next);
        tracing::info!(kept, started, stopped, "probes moved to the new configuration");
    }

    /// `adopt`, returning how many probes were kept, started and stopped.
    fn switch(&self, next: &Snapshot) -> (usize, usize, usize) {
        // Planning under the lock keeps concurrent switches from planning against the
        // same previous plan.
        let mut running = self.lock();
        let previous = self.adopted.load_full();
        if **self.sources.load() != next.probe_source {
            tracing::info!(source = ?next.probe_source, "probes connect from new source addresses from their next check");
            self.sources.store(Arc::new(next.probe_source));
        }
        let plan = plan::plan(next, &previous.plan);
        for slot in plan.stopped() {
            next.health.set(slot, Status::Stopped);
        }
        let before = running.len();
        let endpoints = self.endpoints(&plan, &next.health, &previous.endpoints);
        let kept = self.move_probes(&mut running, plan.probes(), &endpoints);
        endpoints.values().for_each(|e| e.ready());
        let started = rekey(&previous.endpoints, &endpoints);
        let lives = if running.len() == kept && kept == before {
            previous.lives.clone()
        } else {
            Arc::new(running.values().map(|r| ByKey(r.live.clone())).collect())
        };
        let table = next.health.clone();
        let files: HashSet<PathBuf> = endpoints.values().flat_map(|e| e.files()).collect();
        self.adopted.store(Arc::new(Adopted { plan, table, lives, endpoints }));
        self.watch_files(files);
        if !self.pushes_shared.load(Ordering::Relaxed) {
            self.external.pushed.retain(|p, e| self.adopted.load().named(p, e).is_some());
        }
        // A new endpoint took its first verdict before `republish` could find it: views
        // that changed in between are taken into account now.
        started.iter().for_each(|e| e.refresh());
        self.retire(previous);
        (kept, running.len() - kept, before - kept)
    }

    /// The status of every monitored endpoint of `plan`, writing into `table`, each taking
    /// over the endpoint of the same name in `previous`, which stops publishing.
    fn endpoints(
        &self,
        plan: &Plan,
        table: &Arc<HealthTable>,
        previous: &HashMap<usize, Arc<EndpointHealth>>,
    ) -> HashMap<usize, Arc<EndpointHealth>> {
        let mut before: HashMap<(&str, &str), &EndpointHealth> = HashMap::new();
        for e in previous.values() {
            e.retire();
            before.insert((&e.profile, &e.endpoint), e);
        }
        let mut out = HashMap::new();
        for placed in plan.profiles.iter().filter(|p| p.monitored && p.leaves.enabled) {
            for (i, leaf) in placed.leaves.leaves.iter().enumerate() {
                if !leaf.is_monitored() {
                    continue;
                }
                let monitors: Vec<_> = leaf.monitors.iter().map(|m| m.monitor.clone()).collect();
                let spec = Spec {
                    profile: placed.leaves.name.clone(),
                    endpoint: leaf.endpoint.clone(),
                    target: leaf.target.to_string(),
                    slot: placed.slot(i),
                    rule: leaf.rule,
                    monitors: &monitors,
                };
                let old = before.get(&(&*placed.leaves.name, &*leaf.endpoint)).copied();
                let (events, external) = (self.events.clone(), self.external.clone());
                let consensus = self.consensus.clone();
                let e = EndpointHealth::new(spec, table.clone(), events, external, old, consensus);
                out.insert(placed.slot(i), Arc::new(e));
            }
        }
        out
    }

    /// Stops the running probes `probes` no longer has, points the others at their new
    /// users and starts the new ones; returns how many were kept.
    fn move_probes(
        &self,
        running: &mut HashMap<ProbeKey, Running>,
        probes: HashMap<&ProbeKey, Vec<User>>,
        endpoints: &HashMap<usize, Arc<EndpointHealth>>,
    ) -> usize {
        running.retain(|key, r| {
            let keep = probes.contains_key(key);
            if !keep {
                r.cancel.cancel();
                r.live.stop();
                tracing::debug!(target = %key.target, port = key.monitor.port, "probe stopped");
            }
            keep
        });
        let kept = running.len();
        for (key, list) in probes {
            let list =
                list.iter().filter_map(|u| Some((endpoints.get(&u.slot)?.clone(), u.monitor)));
            let users = Users { list: list.collect() };
            match running.get(key) {
                Some(r) => r.live.adopt(users),
                None => {
                    let r = self.spawn(key.clone(), users);
                    running.insert(key.clone(), r);
                }
            }
        }
        kept
    }

    /// Starts a watcher for each health file in `files` not watched yet, and stops the
    /// watchers of the others.
    fn watch_files(&self, files: HashSet<PathBuf>) {
        let mut watching = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        watching.retain(|path, cancel| {
            let keep = files.contains(path);
            if !keep {
                cancel.cancel();
            }
            keep
        });
        self.external.files.retain(|p| files.contains(p));
        for path in files {
            if watching.contains_key(&path) {
                continue;
            }
            let cancel = self.cancel.child_token();
            let adopted = self.adopted.clone();
            let watched = path.clone();
            let changed = move || adopted.load().refresh_readers(&watched);
            let task =
                health_files::watch(path.clone(), self.external.clone(), changed, cancel.clone());
            self.runtime.spawn(task);
            watching.insert(path, cancel);
        }
    }

    /// Pushes a health status to an endpoint of the current configuration (absolute
    /// profile name); returns the push it replaces. The endpoint is evaluated again now,
    /// and again when the push expires.
    pub fn push_health(
        &self,
        profile: &str,
        endpoint: &str,
        push: PushedHealth,
    ) -> Result<Option<PushedHealth>, PushError> {
        self.adopted.load().pushable(profile, endpoint)?;
        Ok(self.keep_push(profile, endpoint, push))
    }

    /// Clears the push to an endpoint; returns it.
    pub fn clear_health(
        &self,
        profile: &str,
        endpoint: &str,
    ) -> Result<Option<PushedHealth>, PushError> {
        let adopted = self.adopted.load();
        let e = adopted.pushable(profile, endpoint)?;
        let before = self.external.pushed.clear(profile, endpoint);
        e.refresh();
        Ok(before)
    }

    /// Whether `endpoint` of `profile` takes pushes in the current configuration, or why
    /// not (checked before a push is shared with the other replicas).
    pub fn check_pushable(&self, profile: &str, endpoint: &str) -> Result<(), PushError> {
        self.adopted.load().pushable(profile, endpoint).map(|_| ())
    }

    /// In a cluster, pushes are etcd's: kept across reloads whether or not this
    /// configuration has their endpoint (one that appears later applies its push), and
    /// forgotten only through `apply_shared_push`.
    pub fn share_pushes(&self) {
        self.pushes_shared.store(true, Ordering::Relaxed);
    }

    /// Keeps (`Some`) or forgets (`None`) the push etcd holds for `endpoint` of `profile`,
    /// whether or not this configuration has the endpoint; returns the push it replaces.
    pub fn apply_shared_push(
        &self,
        profile: &str,
        endpoint: &str,
        push: Option<PushedHealth>,
    ) -> Option<PushedHealth> {
        match push {
            Some(push) => self.keep_push(profile, endpoint, push),
            None => {
                let before = self.external.pushed.clear(profile, endpoint);
                if let Some(e) = self.adopted.load().named(profile, endpoint) {
                    e.refresh();
                }
                before
            }
        }
    }

    /// Keeps `push`, evaluates the endpoint again (when configured) now and when the push
    /// expires; returns the push it replaces.
    fn keep_push(&self, profile: &str, endpoint: &str, push: PushedHealth) -> Option<PushedHealth> {
        let expires = push.expires;
        let before = self.external.pushed.set(profile, endpoint, push);
        if let Some(e) = self.adopted.load().named(profile, endpoint) {
            e.refresh();
        }
        let adopted = self.adopted.clone();
        let cancel = self.cancel.clone();
        let (p, ep) = (profile.to_string(), endpoint.to_string());
        let timer = self.runtime.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                // A moment after the end, so that the push is no longer live when read.
                () = tokio::time::sleep_until(expires + std::time::Duration::from_millis(1)) => {
                    if let Some(e) = adopted.load().named(&p, &ep) {
                        e.refresh();
                    }
                }
            }
        });
        self.external.pushed.set_timer(profile, endpoint, timer.abort_handle());
        before
    }

    /// The last push to an endpoint, live or not.
    pub fn pushed_health(&self, profile: &str, endpoint: &str) -> Option<PushedHealth> {
        self.external.pushed.get(profile, endpoint)
    }

    /// Frees the replaced plan on a blocking thread: when much of the configuration
    /// changed, that is many small frees the reload need not wait for.
    fn retire(&self, previous: Arc<Adopted>) {
        drop(self.runtime.spawn_blocking(move || drop(previous)));
    }

    fn spawn(&self, key: ProbeKey, users: Users) -> Running {
        let check = Check::new(&key, &self.clients, self.sources.clone());
        if let Some(e) = check.setup_error() {
            tracing::warn!(target = %key.target, error = e, "probe cannot run; it will fail every time");
        }
        tracing::debug!(
            target = %key.target,
            protocol = key.monitor.protocol.as_str(),
            port = key.monitor.port,
            "probe started"
        );
        let first = schedule::first_run(self.epoch, &key);
        let live = Arc::new(Live::new(key, users));
        let cancel = self.cancel.child_token();
        let task = self.runtime.spawn(schedule::run(
            live.clone(),
            check,
            first,
            cancel.clone(),
            self.stats.clone(),
        ));
        Running { live, cancel, task: Some(task) }
    }

    /// Every leaf (non-nested) endpoint of the current configuration, in profile and
    /// endpoint order, with its status and probe history.
    pub fn endpoint_states(&self) -> Vec<EndpointState> {
        let adopted = self.adopted.load();
        let profiles = adopted.plan.profiles.iter();
        let all = profiles.flat_map(|p| (0..p.leaves.leaves.len()).map(move |i| (p, i)));
        all.map(|(p, i)| adopted.state(p, i)).collect()
    }

    /// The state of every leaf endpoint of one profile (absolute name), in endpoint order:
    /// for a profile's details, one lookup rather than one per endpoint.
    pub fn profile_states(&self, profile: &str) -> Vec<EndpointState> {
        let adopted = self.adopted.load();
        let Some(&id) = adopted.plan.index.get(profile) else { return Vec::new() };
        let p = &adopted.plan.profiles[id];
        (0..p.leaves.leaves.len()).map(|i| adopted.state(p, i)).collect()
    }

    /// Evaluates the verdicts of `keys` again, after other replicas' views of them changed;
    /// keys not monitored here (or monitored differently) are skipped. Not under any lock
    /// the consensus holds: each endpoint takes its own mutex, then asks the consensus.
    pub fn republish<'a>(&self, keys: impl IntoIterator<Item = &'a EndpointKey>) {
        let adopted = self.adopted.load();
        for key in keys {
            let e = adopted.named(&key.profile, &key.endpoint);
            if let Some(e) = e.filter(|e| e.key() == Some(key)) {
                e.refresh();
            }
        }
    }

    /// `republish` of every monitored endpoint (etcd went away or came back).
    pub fn republish_all(&self) {
        let adopted = self.adopted.load();
        adopted.endpoints.values().for_each(|e| e.refresh());
    }

    /// Check durations so far, one histogram per protocol.
    pub fn durations(&self) -> Vec<DurationHistogram> {
        self.stats.durations()
    }

    /// Run counters; `max_lag` is the largest lag since the previous call.
    pub fn stats(&self) -> ProberStats {
        let probes = self.lock().len();
        self.stats.read(probes)
    }

    /// Probe runs discarded because this host lacked a resource; unlike `stats`, reading it
    /// resets nothing.
    pub fn skipped_local(&self) -> u64 {
        self.stats.skipped_local()
    }

    /// Waits for every probe task to end, once the cancellation token has fired.
    pub async fn wait(&self) {
        let tasks: Vec<JoinHandle<()>> =
            self.lock().values_mut().filter_map(|r| r.task.take()).collect();
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// In a cluster: withdraws the views of the `previous` endpoints that are gone or now
/// monitored differently (new keys), and returns the `next` endpoints with new keys.
fn rekey(
    previous: &HashMap<usize, Arc<EndpointHealth>>,
    next: &HashMap<usize, Arc<EndpointHealth>>,
) -> Vec<Arc<EndpointHealth>> {
    let keys: HashSet<&EndpointKey> = next.values().filter_map(|e| e.key()).collect();
    let old: HashSet<&EndpointKey> = previous.values().filter_map(|e| e.key()).collect();
    let gone = previous.values().filter(|e| e.key().is_some_and(|k| !keys.contains(k)));
    gone.for_each(|e| e.withdraw());
    let new = next.values().filter(|e| e.key().is_some_and(|k| !old.contains(k)));
    new.cloned().collect()
}

/// Why a push was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    #[error("no profile named {0}")]
    NoProfile(String),
    #[error("profile {profile} has no endpoint {endpoint:?}")]
    NoEndpoint { profile: String, endpoint: String },
    #[error(
        "endpoint {endpoint:?} of {profile} has no monitors (it is nested, always_serve, disabled or in a disabled profile): there is no status to push"
    )]
    NotMonitored { profile: String, endpoint: String },
}

impl Adopted {
    /// The status of a monitored endpoint, by name.
    fn named(&self, profile: &str, endpoint: &str) -> Option<&Arc<EndpointHealth>> {
        let placed = &self.plan.profiles[*self.plan.index.get(profile)?];
        let i = placed.leaves.leaves.iter().position(|l| *l.endpoint == *endpoint)?;
        self.endpoints.get(&placed.slot(i))
    }

    /// The endpoint a push goes to, or why there is none.
    fn pushable(&self, profile: &str, endpoint: &str) -> Result<&Arc<EndpointHealth>, PushError> {
        let Some(&id) = self.plan.index.get(profile) else {
            return Err(PushError::NoProfile(profile.to_string()));
        };
        let placed = &self.plan.profiles[id];
        let names = (profile.to_string(), endpoint.to_string());
        if !placed.leaves.leaves.iter().any(|l| *l.endpoint == *endpoint) {
            return Err(PushError::NoEndpoint { profile: names.0, endpoint: names.1 });
        }
        self.named(profile, endpoint)
            .ok_or(PushError::NotMonitored { profile: names.0, endpoint: names.1 })
    }

    /// Evaluates again every endpoint whose `file` monitor reads `path`.
    fn refresh_readers(&self, path: &std::path::Path) {
        self.endpoints.values().filter(|e| e.reads(path)).for_each(|e| e.refresh());
    }

    /// The state of `p`'s leaf at position `i`.
    fn state(&self, p: &Placed, i: usize) -> EndpointState {
        let leaf = &p.leaves.leaves[i];
        // The first probe's history: an endpoint with one monitor shows it as it always
        // did; the others show every monitor in `monitors`.
        let first = p.monitors(leaf).iter().find_map(|m| m.probe.as_ref());
        let live = first.and_then(|k| self.lives.get(k)).map(|b| &b.0);
        let combined = self.endpoints.get(&p.slot(i)).map(|e| e.view());
        let (mut status, last_probe, mut last_change, results) = match live {
            Some(live) => {
                let v = live.view();
                let results =
                    KINDS.iter().zip(v.counts).filter(|(_, n)| *n > 0).map(|(k, n)| (*k, n));
                (v.status, v.last, v.change, results.collect())
            }
            None => (self.table.status(p.slot(i)), None, None, Vec::new()),
        };
        if let Some(c) = &combined {
            status = c.status;
            last_change.clone_from(&c.change);
        }
        let vantage = combined.as_ref().and_then(|c| c.vantage.clone());
        EndpointState {
            profile: p.leaves.name.to_string(),
            endpoint: leaf.endpoint.to_string(),
            target: leaf.target.to_string(),
            status,
            probed: combined.is_some(),
            last_probe,
            last_change,
            results,
            vantage,
            monitors: combined,
        }
    }
}
