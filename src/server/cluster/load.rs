//! Load shares in a cluster, under `<prefix>load/`. Only the replica leading the `load`
//! role runs the control step (it alone reads the pulled feeds); it writes the step's
//! entries of each profile to `load/shares/<profile>` and the step's number to
//! `load/step`, every write fenced by its hold of the leader key, so that a replica that
//! lost the role cannot overwrite its successor. A new leader first writes
//! `load/leader` and steps only once its watch brought that back, so that it steps on
//! from everything its predecessor wrote. Every replica, the leader included,
//! follows `load/` and applies what etcd holds (`Loads::apply`): all apply the same
//! shares, and a new leader steps on from the map it followed rather than from full
//! shares. Loads pushed through any replica's admin API are kept under
//! `load/pushed/<profile>/<endpoint>` with when they were pushed and their time to live;
//! every replica takes them into its `Pushed`, and the leader's steps read them there.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::{Backoff, EtcdError};
use super::follow::{self, Event, KeyRange};
use super::leader::Leadership;
use super::override_record::{self, escape};
use crate::model::Snapshot;
use crate::server::load::publisher::{Publishing, Pushing};
use crate::server::load::pushed::PushedLoad;
use crate::server::load::{LoadEntry, LoadMap, LoadPublisher, Loads, unix_ms};
use crate::wire::name::WireName;

/// The role whose leader runs the control step.
pub const ROLE: &str = "load";

/// Longest wait for one etcd request.
const REQUEST_LIMIT: Duration = Duration::from_secs(5);

/// Longest wait, after a step is written, for it to come back through this replica's
/// watch: the next step starts from what was applied.
const APPLY_LIMIT: Duration = Duration::from_secs(5);

/// Most operations in one transaction: below etcd's default `--max-txn-ops` (128).
const TXN_OPS: usize = 100;

/// Most bytes of keys and values in one transaction: below etcd's default
/// `--max-request-bytes` (1.5 MiB), with room for framing.
const TXN_BYTES: usize = 1 << 20;

/// What went wrong sharing loads through etcd.
#[derive(Debug, thiserror::Error)]
pub enum LoadShareError {
    /// The step was not written: another replica leads (or this one no longer holds the
    /// key, its lease lost).
    #[error("this replica does not lead the load role")]
    NotLeader,
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// One profile's record alone is larger than a transaction may be.
    #[error(
        "the load shares of profile {profile} take {bytes} bytes, more than the {limit} one etcd request may carry"
    )]
    TooLarge { profile: String, bytes: usize, limit: usize },
}

/// The value of `load/step`: which step the shares are of.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Counts the leaders' steps, continued by each new leader; 0: none written yet.
    pub step: u64,
    /// When it ran (Unix milliseconds).
    pub at_ms: u64,
    /// The node that wrote it.
    pub leader: String,
}

/// The value of `load/leader`: the node that took the role, and when (Unix milliseconds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LeaderMark {
    node: String,
    since_ms: u64,
}

/// The value of `load/shares/<profile>`: that profile's entries of the step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct ProfileRecord {
    entries: Vec<LoadEntry>,
}

/// The value of `load/pushed/<profile>/<endpoint>`: a load pushed through the admin API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PushedRecord {
    pub load: f64,
    /// When it was pushed (Unix milliseconds, the pushing replica's clock).
    pub at_ms: u64,
    /// How long it stays fresh.
    pub ttl_ms: u64,
    /// The name of the token that pushed it.
    pub by: String,
}

impl PushedRecord {
    pub fn of(p: &PushedLoad) -> PushedRecord {
        let ttl_ms = u64::try_from(p.ttl.as_millis()).unwrap_or(u64::MAX);
        PushedRecord { load: p.load, at_ms: unix_ms(p.at_wall), ttl_ms, by: p.by.clone() }
    }

    /// The pushed load as this replica's loop reads it: as old on its clock as the wall
    /// clocks say (a push stamped ahead of this clock counts as made now).
    pub fn pushed_load(&self, now: tokio::time::Instant, now_wall: SystemTime) -> PushedLoad {
        let at_wall = SystemTime::UNIX_EPOCH + Duration::from_millis(self.at_ms);
        let age = now_wall.duration_since(at_wall).unwrap_or_default();
        PushedLoad {
            load: self.load,
            at: now.checked_sub(age).unwrap_or(now),
            at_wall,
            ttl: Duration::from_millis(self.ttl_ms),
            by: self.by.clone(),
        }
    }

    fn live_at(&self, now_wall: SystemTime) -> bool {
        unix_ms(now_wall) < self.at_ms.saturating_add(self.ttl_ms)
    }
}

/// `load/` as one replica last read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadView {
    pub step: StepRecord,
    /// The node that last took the role, as `load/leader` says.
    pub leader: Option<String>,
    /// Each profile's entries, by absolute profile name.
    pub profiles: BTreeMap<String, Vec<LoadEntry>>,
    /// Pushed loads, by (profile, endpoint).
    pub pushed: BTreeMap<(String, String), PushedRecord>,
    /// The etcd revision of the last change taken (0 before the first read).
    pub revision: i64,
    /// Whether the view follows etcd now (false before the first read and while etcd
    /// cannot be reached: then it holds what was last read).
    pub following: bool,
}

impl LoadView {
    /// The map every replica applies: the step's entries, sorted by profile and endpoint.
    pub fn map(&self) -> LoadMap {
        let mut entries: Vec<LoadEntry> = self.profiles.values().flatten().cloned().collect();
        entries.sort_by(|a, b| (&a.profile, &a.endpoint).cmp(&(&b.profile, &b.endpoint)));
        LoadMap { step: self.step.step, at_ms: self.step.at_ms, entries }
    }

    /// Takes in one key's new value (`None`: deleted). `Err` says why a key is ignored.
    fn take(&mut self, keys: &Keys, key: &str, value: Option<&[u8]>) -> Result<(), String> {
        if key == keys.leader {
            self.leader = match value {
                Some(v) => {
                    let r: LeaderMark =
                        serde_json::from_slice(v).map_err(|e| format!("not a leader: {e}"))?;
                    Some(r.node)
                }
                None => None,
            };
        } else if key == keys.step {
            self.step = match value {
                Some(v) => serde_json::from_slice(v).map_err(|e| format!("not a step: {e}"))?,
                None => StepRecord::default(),
            };
        } else if key.starts_with(&keys.shares) {
            let profile = parse_profile(keys, key)?;
            let Some(v) = value else {
                self.profiles.remove(&profile);
                return Ok(());
            };
            match serde_json::from_slice::<ProfileRecord>(v) {
                // Entries of another profile would apply twice.
                Ok(mut r) => {
                    r.entries.retain(|e| e.profile == profile);
                    self.profiles.insert(profile, r.entries);
                }
                Err(e) => {
                    self.profiles.remove(&profile);
                    return Err(format!("not a profile's load shares: {e}"));
                }
            }
        } else if key.starts_with(&keys.pushed) {
            let target = override_record::parse_key(&keys.pushed, key)?;
            let Some(v) = value else {
                self.pushed.remove(&target);
                return Ok(());
            };
            match serde_json::from_slice::<PushedRecord>(v) {
                Ok(r) => {
                    self.pushed.insert(target, r);
                }
                Err(e) => {
                    self.pushed.remove(&target);
                    return Err(format!("not a pushed load: {e}"));
                }
            }
        } else {
            return Err("not a key steerdns writes under load/".into());
        }
        Ok(())
    }
}

/// The keys under `load/`.
#[derive(Clone, Debug)]
struct Keys {
    prefix: String,
    shares: String,
    pushed: String,
    step: String,
    leader: String,
}

impl Keys {
    fn new(load_prefix: &str) -> Keys {
        Keys {
            prefix: load_prefix.to_string(),
            shares: format!("{load_prefix}shares/"),
            pushed: format!("{load_prefix}pushed/"),
            step: format!("{load_prefix}step"),
            leader: format!("{load_prefix}leader"),
        }
    }

    fn shares(&self, profile: &str) -> String {
        format!("{}{}", self.shares, escape(profile))
    }

    fn pushed(&self, profile: &str, endpoint: &str) -> String {
        override_record::key(&self.pushed, profile, endpoint)
    }
}

/// The profile named by `load/shares/<profile>`, as `Profile::name` spells it.
fn parse_profile(keys: &Keys, key: &str) -> Result<String, String> {
    let rest = key.strip_prefix(&keys.shares).ok_or("outside load/shares/")?;
    let profile = percent_decode_str(rest)
        .decode_utf8()
        .map_err(|_| "an escaped part is not UTF-8".to_string())?;
    if !profile.ends_with('.') {
        return Err(format!("profile {profile:?} must be absolute (end in '.')"));
    }
    Ok(WireName::parse(&profile)?.to_string())
}

/// One write of a step: a key and its new value (`None`: delete it).
type Op = (String, Option<Vec<u8>>);

/// `ops` in transactions of at most `TXN_OPS` operations and `TXN_BYTES` bytes.
fn chunks(ops: &[Op]) -> Vec<&[Op]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, (key, value)) in ops.iter().enumerate() {
        let size = key.len() + value.as_ref().map_or(0, Vec::len);
        if i > start && (i - start >= TXN_OPS || bytes + size > TXN_BYTES) {
            out.push(&ops[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < ops.len() {
        out.push(&ops[start..]);
    }
    out
}

/// This replica's part in sharing loads through etcd: the `LoadPublisher` of a cluster.
pub struct ClusterLoad {
    session: Arc<Session>,
    leadership: Leadership,
    keys: Keys,
    view: watch::Receiver<Arc<LoadView>>,
    /// Whether the last publication failed, so that a run of failures warns once.
    failing: AtomicBool,
    /// The claim (`Leadership::claimed_at`) `load/leader` was last written for, and the
    /// revision of that write: the view must reach it before this replica steps.
    marked: (AtomicI64, AtomicI64),
}

impl ClusterLoad {
    /// Follows `<prefix>load/` until `cancel`: every change is applied through `loads`
    /// to the snapshot `shared` holds, and its pushed loads kept in `loads.pushed`.
    pub fn start(
        session: Arc<Session>,
        leadership: Leadership,
        loads: Arc<Loads>,
        shared: Arc<ArcSwap<Snapshot>>,
        cancel: CancellationToken,
    ) -> Arc<ClusterLoad> {
        let keys = Keys::new(&session.settings.etcd.load_prefix());
        let (tx, view) = watch::channel(Arc::new(LoadView::default()));
        let events =
            follow::spawn(session.clone(), KeyRange::prefix(&keys.prefix), None, cancel.clone());
        let applier = Applier { keys: keys.clone(), loads, shared, tx };
        tokio::spawn(applier.run(events, cancel.clone()));
        let failing = AtomicBool::new(false);
        let marked = (AtomicI64::new(0), AtomicI64::new(0));
        let load = Arc::new(ClusterLoad { session, leadership, keys, view, failing, marked });
        tokio::spawn(load.clone().mark(cancel));
        load
    }

    /// Writes `load/leader` each time this replica takes the role.
    async fn mark(self: Arc<ClusterLoad>, cancel: CancellationToken) {
        let mut leading = self.leadership.leading();
        let mut backoff = Backoff::default();
        loop {
            let claimed = self.leadership.claimed_at();
            let due =
                *leading.borrow_and_update() && self.marked.0.load(Ordering::Relaxed) != claimed;
            let lease = *self.session.lease().borrow();
            let retry = match (due, lease) {
                (true, Some(lease)) => {
                    let node = self.session.settings.node.clone();
                    let mark = LeaderMark { node, since_ms: unix_ms(SystemTime::now()) };
                    let value = serde_json::to_vec(&mark).expect("a leader mark serialises");
                    let op = [(self.keys.leader.clone(), Some(value))];
                    match self.write_fenced(lease, &op).await {
                        Ok(revision) => {
                            self.marked.1.store(revision, Ordering::Relaxed);
                            self.marked.0.store(claimed, Ordering::Relaxed);
                            backoff.reset();
                            None
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "cannot mark the load leader in etcd");
                            Some(backoff.next_delay())
                        }
                    }
                }
                _ => None,
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = leading.changed(), if retry.is_none() => if changed.is_err() { return },
                _ = tokio::time::sleep(retry.unwrap_or_default()), if retry.is_some() => {}
            }
        }
    }

    /// Whether this replica runs the next step: it leads, and its watch brought back the
    /// mark it wrote on taking the role, so it has applied the last step of the leader
    /// before it.
    pub fn leads(&self) -> bool {
        let view = self.view.borrow();
        self.leadership.is_leader()
            && self.marked.0.load(Ordering::Relaxed) == self.leadership.claimed_at()
            && view.following
            && view.revision >= self.marked.1.load(Ordering::Relaxed)
    }

    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// What etcd holds, as last read.
    pub fn view(&self) -> Arc<LoadView> {
        self.view.borrow().clone()
    }

    /// Writes `map` (one step: every fed endpoint) if this replica leads. Profiles etcd
    /// holds and `map` lacks are deleted. Written in as few transactions as etcd's
    /// default limits allow (one, unless there are many or large profiles), the step
    /// record last; returns once this replica's watch brought it back (or `APPLY_LIMIT`
    /// passed).
    pub async fn write(&self, map: &LoadMap) -> Result<(), LoadShareError> {
        let lease = *self.session.lease().borrow();
        let Some(lease) = lease.filter(|_| self.leadership.is_leader()) else {
            return Err(LoadShareError::NotLeader);
        };
        let mut by_profile: BTreeMap<&str, Vec<LoadEntry>> = BTreeMap::new();
        for e in &map.entries {
            by_profile.entry(e.profile.as_str()).or_default().push(e.clone());
        }
        let mut ops = Vec::new();
        for (profile, entries) in by_profile.iter_mut() {
            let record = ProfileRecord { entries: std::mem::take(entries) };
            let value = serde_json::to_vec(&record).expect("load entries serialise");
            if value.len() > TXN_BYTES {
                let (profile, bytes) = (profile.to_string(), value.len());
                return Err(LoadShareError::TooLarge { profile, bytes, limit: TXN_BYTES });
            }
            ops.push((self.keys.shares(profile), Some(value)));
        }
        let view = self.view();
        for gone in view.profiles.keys().filter(|p| !by_profile.contains_key(p.as_str())) {
            ops.push((self.keys.shares(gone), None));
        }
        let node = self.session.settings.node.clone();
        let step = StepRecord { step: map.step, at_ms: map.at_ms, leader: node };
        let step = serde_json::to_vec(&step).expect("a step record serialises");
        ops.push((self.keys.step.clone(), Some(step)));
        let mut revision = 0;
        for chunk in chunks(&ops) {
            revision = self.write_fenced(lease, chunk).await?;
        }
        let mut view = self.view.clone();
        let applied = view.wait_for(|v| v.revision >= revision);
        if tokio::time::timeout(APPLY_LIMIT, applied).await.is_err() {
            tracing::debug!(revision, "load step written to etcd but not applied here yet");
        }
        Ok(())
    }

    /// One transaction of `ops`, applied only while the leader key is under `lease`;
    /// returns its revision.
    async fn write_fenced(&self, lease: i64, ops: &[Op]) -> Result<i64, LoadShareError> {
        let leader_key = self.leadership.key();
        let txn_ops = ops.iter().map(|(key, value)| match value {
            Some(v) => TxnOp::put(key.as_str(), v.clone(), None),
            None => TxnOp::delete(key.as_str(), None),
        });
        let txn = Txn::new()
            .when([Compare::lease(leader_key, CompareOp::Equal, lease)])
            .and_then(txn_ops.collect::<Vec<_>>());
        let mut kv = self.session.client.kv_client();
        let resp = match tokio::time::timeout(REQUEST_LIMIT, kv.txn(txn)).await {
            Ok(r) => r.map_err(EtcdError::from)?,
            Err(_) => return Err(EtcdError::Timeout(REQUEST_LIMIT).into()),
        };
        if !resp.succeeded() {
            return Err(LoadShareError::NotLeader);
        }
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Keeps `load` pushed to `endpoint` of `profile` in etcd, for every replica (the
    /// leader steps with it); whether it begins a run of pushes (none was live).
    pub async fn push(
        &self,
        profile: &str,
        endpoint: &str,
        load: &PushedLoad,
    ) -> Result<bool, LoadShareError> {
        let target = (profile.to_string(), endpoint.to_string());
        let live = self.view().pushed.get(&target).is_some_and(|p| p.live_at(load.at_wall));
        let key = self.keys.pushed(profile, endpoint);
        let value = serde_json::to_vec(&PushedRecord::of(load)).expect("a push serialises");
        let mut kv = self.session.client.kv_client();
        match tokio::time::timeout(REQUEST_LIMIT, kv.put(key.as_str(), value, None)).await {
            Ok(r) => r.map_err(EtcdError::from)?,
            Err(_) => return Err(EtcdError::Timeout(REQUEST_LIMIT).into()),
        };
        Ok(!live)
    }

    /// Forgets the load pushed to `endpoint` of `profile`; whether there was one.
    pub async fn clear(&self, profile: &str, endpoint: &str) -> Result<bool, LoadShareError> {
        let key = self.keys.pushed(profile, endpoint);
        let mut kv = self.session.client.kv_client();
        let resp = match tokio::time::timeout(REQUEST_LIMIT, kv.delete(key.as_str(), None)).await {
            Ok(r) => r.map_err(EtcdError::from)?,
            Err(_) => return Err(EtcdError::Timeout(REQUEST_LIMIT).into()),
        };
        Ok(resp.deleted() > 0)
    }

    fn endpoints(&self) -> String {
        self.session.settings.etcd.endpoints.join(",")
    }
}

impl LoadPublisher for ClusterLoad {
    fn leads(&self) -> bool {
        ClusterLoad::leads(self)
    }

    fn publish(&self, map: Arc<LoadMap>) -> Publishing<'_> {
        Box::pin(async move {
            match self.write(&map).await {
                Ok(()) => {
                    if self.failing.swap(false, Ordering::Relaxed) {
                        tracing::info!(step = map.step, "load steps written to etcd again");
                    }
                }
                Err(LoadShareError::NotLeader) => {
                    tracing::info!(step = map.step, "load step not written: no longer leading");
                }
                Err(e) => {
                    let error = match e {
                        LoadShareError::Etcd(e) => e.at(&self.endpoints()),
                        e => e.to_string(),
                    };
                    if !self.failing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(step = map.step, %error, "cannot write the load step to etcd; replicas keep the last shares written");
                    }
                }
            }
        })
    }

    fn leader(&self) -> Option<Option<String>> {
        Some(self.leadership.leader())
    }

    fn push(&self, profile: &str, endpoint: &str, load: PushedLoad) -> Pushing<'_> {
        let (profile, endpoint) = (profile.to_string(), endpoint.to_string());
        Box::pin(async move {
            let pushed = ClusterLoad::push(self, &profile, &endpoint, &load).await;
            pushed.map_err(|e| self.refused(e))
        })
    }

    fn clear(&self, profile: &str, endpoint: &str) -> Pushing<'_> {
        let (profile, endpoint) = (profile.to_string(), endpoint.to_string());
        Box::pin(async move {
            let cleared = ClusterLoad::clear(self, &profile, &endpoint).await;
            cleared.map_err(|e| self.refused(e))
        })
    }
}

impl ClusterLoad {
    /// Why a pushed load could not be kept, for the admin API's answer.
    fn refused(&self, e: LoadShareError) -> String {
        let why = match e {
            LoadShareError::Etcd(e) => e.at(&self.endpoints()),
            e => e.to_string(),
        };
        format!(
            "etcd did not take the pushed load ({why}); replicas share pushed loads through etcd, so none can change while it is unreachable"
        )
    }
}

/// Keeps the view of `load/` and applies it.
struct Applier {
    keys: Keys,
    loads: Arc<Loads>,
    shared: Arc<ArcSwap<Snapshot>>,
    tx: watch::Sender<Arc<LoadView>>,
}

impl Applier {
    async fn run(self, mut events: tokio::sync::mpsc::Receiver<Event>, cancel: CancellationToken) {
        let mut view = LoadView::default();
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => return,
                event = events.recv() => match event { Some(e) => e, None => return },
            };
            let changed = match event {
                Event::Snapshot { revision, entries } => {
                    view = LoadView { revision, following: true, ..LoadView::default() };
                    for e in &entries {
                        self.take(&mut view, &e.key, Some(&e.value));
                    }
                    true
                }
                Event::Changes { revision, changes } => {
                    for c in &changes {
                        self.take(&mut view, &c.key, c.value.as_deref());
                    }
                    view.revision = revision;
                    true
                }
                Event::Lost { error } => {
                    tracing::debug!(%error, "load shares not followed until etcd is back");
                    view.following = false;
                    false
                }
                Event::Resumed { .. } => {
                    view.following = true;
                    false
                }
            };
            if changed {
                self.apply(&view);
            }
            self.tx.send_replace(Arc::new(view.clone()));
        }
    }

    fn take(&self, view: &mut LoadView, key: &str, value: Option<&[u8]>) {
        if let Err(why) = view.take(&self.keys, key, value) {
            tracing::warn!(%key, why, "etcd key under load/ ignored");
        }
    }

    /// Applies the step etcd holds and takes its pushed loads in.
    fn apply(&self, view: &LoadView) {
        self.loads.apply(Arc::new(view.map()), &self.shared);
        let (now, now_wall) = (tokio::time::Instant::now(), SystemTime::now());
        let pushed = &self.loads.pushed;
        pushed.retain(|p, e| view.pushed.contains_key(&(p.to_string(), e.to_string())));
        for ((profile, endpoint), record) in &view.pushed {
            pushed.set(profile, endpoint, record.pushed_load(now, now_wall));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::load::EndpointLoad;

    fn keys() -> Keys {
        Keys::new("/s/load/")
    }

    fn entry(profile: &str, endpoint: &str, share: f64) -> LoadEntry {
        LoadEntry {
            profile: profile.into(),
            endpoint: endpoint.into(),
            state: EndpointLoad { share, target: share, ..EndpointLoad::FULL },
            read_at_ms: Some(1_800_000_000_000),
            error: None,
        }
    }

    fn record(entries: Vec<LoadEntry>) -> Vec<u8> {
        serde_json::to_vec(&ProfileRecord { entries }).unwrap()
    }

    #[test]
    fn a_view_follows_every_kind_of_key() {
        let k = keys();
        let mut v = LoadView::default();
        let www = "www.tm.example.test.";
        let shares_key = k.shares(www);
        assert_eq!(shares_key, "/s/load/shares/www.tm.example.test.");
        let entries = vec![entry(www, "us", 1.0), entry(www, "eu", 0.4)];
        v.take(&k, &shares_key, Some(&record(entries))).unwrap();
        let api = k.shares("api.tm.example.test.");
        // An entry of another profile under this profile's key is left out.
        let stray = vec![entry("api.tm.example.test.", "a", 0.5), entry(www, "x", 0.1)];
        v.take(&k, &api, Some(&record(stray))).unwrap();
        let step = br#"{"step": 7, "at_ms": 1800000000000, "leader": "node-1"}"#;
        v.take(&k, "/s/load/step", Some(step)).unwrap();
        let mark = br#"{"node": "node-2", "since_ms": 1800000000000}"#;
        v.take(&k, "/s/load/leader", Some(mark)).unwrap();
        assert_eq!(v.leader.as_deref(), Some("node-2"));
        v.take(&k, "/s/load/leader", None).unwrap();
        assert_eq!(v.leader, None);
        let map = v.map();
        assert_eq!((map.step, map.at_ms), (7, 1_800_000_000_000));
        let order: Vec<(&str, &str, f64)> = map
            .entries
            .iter()
            .map(|e| (e.profile.as_str(), e.endpoint.as_str(), e.state.share))
            .collect();
        assert_eq!(
            order,
            [("api.tm.example.test.", "a", 0.5), (www, "eu", 0.4), (www, "us", 1.0)],
            "sorted by profile and endpoint, as LoadMap::get searches"
        );
        assert_eq!(map.get(www, "eu").map(|e| e.state.share), Some(0.4));

        let pushed = br#"{"load": 870, "at_ms": 1800000000000, "ttl_ms": 30000, "by": "alice"}"#;
        let pushed_key = k.pushed(www, "e/1");
        assert_eq!(pushed_key, "/s/load/pushed/www.tm.example.test./e%2F1");
        v.take(&k, &pushed_key, Some(pushed)).unwrap();
        let target = (www.to_string(), "e/1".to_string());
        assert_eq!(v.pushed[&target].load, 870.0);
        // Deletions, and values that do not read, take the entry out.
        v.take(&k, &pushed_key, None).unwrap();
        assert!(v.pushed.is_empty());
        assert!(v.take(&k, &shares_key, Some(b"{")).is_err());
        assert_eq!(v.profiles.keys().collect::<Vec<_>>(), ["api.tm.example.test."]);
        v.take(&k, &api, None).unwrap();
        v.take(&k, "/s/load/step", None).unwrap();
        assert_eq!(v.map(), LoadMap::default());
        let bad = [
            ("/s/load/other", "not a key steerdns writes under load/"),
            ("/s/load/shares/www", "profile \"www\" must be absolute (end in '.')"),
            ("/s/load/shares/%FF.", "an escaped part is not UTF-8"),
        ];
        for (key, want) in bad {
            assert_eq!(v.take(&k, key, Some(b"{}")), Err(want.to_string()), "{key}");
        }
    }

    #[test]
    fn profile_names_read_back_as_profiles_spell_them() {
        let k = keys();
        assert_eq!(parse_profile(&k, &k.shares("_lb.www.t.")), Ok("_lb.www.t.".to_string()));
        assert_eq!(parse_profile(&k, "/s/load/shares/WWW.T."), Ok("www.t.".to_string()));
        assert_eq!(k.shares("a b.t."), "/s/load/shares/a%20b.t.");
        let spaced = parse_profile(&k, "/s/load/shares/a%20b.t.");
        assert!(spaced.unwrap_err().starts_with("invalid name \"a b.t.\""));
    }

    #[test]
    fn a_pushed_load_ages_by_the_wall_clocks() {
        let pushed_at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let now = tokio::time::Instant::now();
        let p = PushedLoad {
            load: 870.0,
            at: now,
            at_wall: pushed_at,
            ttl: Duration::from_secs(30),
            by: "alice".into(),
        };
        let r = PushedRecord::of(&p);
        assert_eq!((r.at_ms, r.ttl_ms), (1_800_000_000_000, 30_000));
        let later = pushed_at + Duration::from_secs(12);
        let read = r.pushed_load(now, later);
        assert_eq!(read.at_wall, pushed_at);
        assert_eq!(now.duration_since(read.at), Duration::from_secs(12));
        assert!(r.live_at(later));
        assert!(!r.live_at(pushed_at + Duration::from_secs(30)));
        // Stamped ahead of this clock: made now, not in the future.
        let earlier = pushed_at - Duration::from_secs(5);
        assert_eq!(r.pushed_load(now, earlier).at, now);
    }

    #[test]
    fn steps_are_split_within_etcds_limits() {
        let op = |size: usize| ("k".to_string(), Some(vec![0u8; size]));
        let sizes = |ops: &[Op]| -> Vec<usize> { chunks(ops).iter().map(|c| c.len()).collect() };
        assert_eq!(sizes(&[]), Vec::<usize>::new());
        assert_eq!(sizes(&vec![op(10); 3]), [3]);
        assert_eq!(sizes(&vec![op(10); 250]), [100, 100, 50]);
        // 400 KiB values: two fit in 1 MiB, a third does not.
        assert_eq!(sizes(&vec![op(400 << 10); 5]), [2, 2, 1]);
        // A value alone above the limit still goes, alone (`write` refuses it first).
        assert_eq!(sizes(&[op(10), op(2 << 20), op(10)]), [1, 1, 1]);
    }
}
