//! Load shares in a cluster, under `<prefix>load/`. Only the replica leading the `load`
//! role runs the control step (it alone reads the pulled feeds); it writes each profile's
//! endpoint loads to `load/shares/<profile>` and the step's generation to
//! `load/generation`, every write fenced by its hold of the leader key, so that a replica
//! that lost the role cannot overwrite its successor. Every replica, the leader included,
//! follows `load/` and applies what etcd holds to its snapshot's `LoadTable`: all apply
//! the same shares, and a new leader continues from the records it followed rather than
//! from full shares. Loads pushed through any replica's admin API are kept under
//! `load/pushed/<profile>/<endpoint>`, each under a lease of its time to live, so that
//! etcd forgets an expired push by itself; the leader reads them from the same view.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::EtcdError;
use super::follow::{self, Event, KeyRange};
use super::leader::Leadership;
use super::override_record::{self, escape};
use crate::model::Snapshot;
use crate::model::load::EndpointLoad;
use crate::wire::name::WireName;

/// The role whose leader runs the control step.
pub const ROLE: &str = "load";

/// Longest wait for one etcd request.
const REQUEST_LIMIT: Duration = Duration::from_secs(5);

/// Most operations in one transaction: below etcd's default `--max-txn-ops` (128).
const TXN_OPS: usize = 100;

/// Most bytes of values in one transaction: below etcd's default `--max-request-bytes`
/// (1.5 MiB), with room for keys and framing.
const TXN_BYTES: usize = 1 << 20;

/// How often the applier looks for a snapshot a reload swapped in since it last applied.
const RELOAD_CHECK: Duration = Duration::from_millis(250);

/// Each endpoint's controller state, by endpoint name.
pub type EndpointLoads = BTreeMap<String, EndpointLoad>;

/// Every fed endpoint's controller state, by profile name (absolute, as `Profile::name`).
pub type Shares = BTreeMap<String, EndpointLoads>;

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

/// The value of `load/generation`: which step the shares are of.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Counts the leader's steps across leaders; 0: none written yet.
    pub generation: u64,
    /// The node that wrote it.
    pub leader: String,
    /// RFC 3339, UTC.
    pub at: String,
}

/// The value of `load/shares/<profile>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct ProfileRecord {
    endpoints: EndpointLoads,
}

/// The value of `load/pushed/<profile>/<endpoint>`: a load pushed through the admin API
/// (one of `load` and `utilisation`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PushedRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilisation: Option<f64>,
    /// When etcd forgets it (the lease's time to live from `at`), RFC 3339, UTC.
    pub expires: String,
    /// Who pushed it (the admin token's name), and when (RFC 3339, UTC).
    pub by: String,
    pub at: String,
}

/// `load/` as one replica last read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadView {
    pub step: StepRecord,
    pub shares: Shares,
    /// Pushed loads not expired, by (profile, endpoint).
    pub pushed: BTreeMap<(String, String), PushedRecord>,
    /// The etcd revision of the last change taken (0 before the first read).
    pub revision: i64,
    /// Whether the view follows etcd now (false before the first read and while etcd
    /// cannot be reached: then it holds what was last read).
    pub following: bool,
}

/// The keys under `load/`.
#[derive(Clone, Debug)]
struct Keys {
    prefix: String,
    shares: String,
    pushed: String,
    generation: String,
}

impl Keys {
    fn new(load_prefix: &str) -> Keys {
        Keys {
            prefix: load_prefix.to_string(),
            shares: format!("{load_prefix}shares/"),
            pushed: format!("{load_prefix}pushed/"),
            generation: format!("{load_prefix}generation"),
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

impl LoadView {
    /// Takes in one key's new value (`None`: deleted). `Err` says why a key is ignored.
    fn take(&mut self, keys: &Keys, key: &str, value: Option<&[u8]>) -> Result<(), String> {
        if key == keys.generation {
            self.step = match value {
                Some(v) => serde_json::from_slice(v).map_err(|e| format!("not a step: {e}"))?,
                None => StepRecord::default(),
            };
        } else if key.starts_with(&keys.shares) {
            let profile = parse_profile(keys, key)?;
            match value {
                Some(v) => {
                    let record: ProfileRecord = serde_json::from_slice(v).map_err(|e| {
                        self.shares.remove(&profile);
                        format!("not a profile's load shares: {e}")
                    })?;
                    self.shares.insert(profile, record.endpoints);
                }
                None => {
                    self.shares.remove(&profile);
                }
            }
        } else if key.starts_with(&keys.pushed) {
            let target = override_record::parse_key(&keys.pushed, key)?;
            match value {
                Some(v) => {
                    let record: PushedRecord = serde_json::from_slice(v).map_err(|e| {
                        self.pushed.remove(&target);
                        format!("not a pushed load: {e}")
                    })?;
                    self.pushed.insert(target, record);
                }
                None => {
                    self.pushed.remove(&target);
                }
            }
        } else {
            return Err("not a key steerdns writes under load/".into());
        }
        Ok(())
    }
}

/// Sets every fed endpoint's slot of `snapshot.load` from `shares`: the share etcd holds,
/// or full when it holds none for the endpoint (a profile the leader does not serve yet).
/// Returns how many slots were set.
pub fn apply(snapshot: &Snapshot, shares: &Shares) -> usize {
    let mut set = 0;
    for p in &snapshot.profiles {
        let recorded = shares.get(&p.name);
        for ep in p.endpoints.iter().filter(|e| e.load.is_some()) {
            let Some(slot) = ep.health_slot else { continue };
            match recorded.and_then(|r| r.get(&ep.name)) {
                Some(l) => snapshot.load.set(slot, l.share, l.above_high),
                None => snapshot.load.set(slot, 1.0, false),
            }
            set += 1;
        }
    }
    set
}

/// This replica's part in sharing loads through etcd.
pub struct ClusterLoad {
    session: Arc<Session>,
    leadership: Leadership,
    keys: Keys,
    view: watch::Receiver<Arc<LoadView>>,
    /// The last generation this replica wrote: its own write may not have come back
    /// through the watch by the next step.
    written: AtomicU64,
}

impl ClusterLoad {
    /// Follows `<prefix>load/` until `cancel` and applies its shares to every snapshot
    /// `shared` holds (the one served now, and each one a reload swaps in).
    pub fn start(
        session: Arc<Session>,
        leadership: Leadership,
        shared: Arc<ArcSwap<Snapshot>>,
        cancel: CancellationToken,
    ) -> Arc<ClusterLoad> {
        let keys = Keys::new(&session.settings.etcd.load_prefix());
        let (tx, view) = watch::channel(Arc::new(LoadView::default()));
        let events =
            follow::spawn(session.clone(), KeyRange::prefix(&keys.prefix), None, cancel.clone());
        tokio::spawn(follow_view(keys.clone(), events, tx, cancel.clone()));
        tokio::spawn(apply_view(view.clone(), shared, cancel));
        Arc::new(ClusterLoad { session, leadership, keys, view, written: AtomicU64::new(0) })
    }

    /// Whether this replica runs the control step now.
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }

    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// What etcd holds, as last read: the shares every replica applies, the step they
    /// are of, and the pushed loads.
    pub fn view(&self) -> Arc<LoadView> {
        self.view.borrow().clone()
    }

    /// `view`, watched.
    pub fn changes(&self) -> watch::Receiver<Arc<LoadView>> {
        self.view.clone()
    }

    /// Writes one step's `shares` (every fed endpoint of every profile) as the next
    /// generation, if this replica leads; returns the generation. Profiles etcd holds
    /// and `shares` lacks are deleted. Written in as few transactions as etcd's default
    /// limits allow (one, unless there are many large profiles), the generation last.
    pub async fn publish(&self, shares: &Shares) -> Result<u64, LoadShareError> {
        let lease = *self.session.lease().borrow();
        let Some(lease) = lease.filter(|_| self.is_leader()) else {
            return Err(LoadShareError::NotLeader);
        };
        let view = self.view();
        let generation = view.step.generation.max(self.written.load(Ordering::Relaxed)) + 1;
        let mut ops = Vec::new();
        for (profile, endpoints) in shares {
            let value = serde_json::to_vec(&ProfileRecord { endpoints: endpoints.clone() })
                .expect("load shares serialise");
            if value.len() > TXN_BYTES {
                let (profile, bytes) = (profile.clone(), value.len());
                return Err(LoadShareError::TooLarge { profile, bytes, limit: TXN_BYTES });
            }
            ops.push((self.keys.shares(profile), Some(value)));
        }
        for gone in view.shares.keys().filter(|p| !shares.contains_key(*p)) {
            ops.push((self.keys.shares(gone), None));
        }
        let step = StepRecord {
            generation,
            leader: self.session.settings.node.clone(),
            at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        };
        let step = serde_json::to_vec(&step).expect("a step record serialises");
        ops.push((self.keys.generation.clone(), Some(step)));
        for chunk in chunks(&ops) {
            self.write_fenced(lease, chunk).await?;
        }
        self.written.fetch_max(generation, Ordering::Relaxed);
        Ok(generation)
    }

    /// One transaction of `ops`, applied only while the leader key is under `lease`.
    async fn write_fenced(&self, lease: i64, ops: &[Op]) -> Result<(), LoadShareError> {
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
        if resp.succeeded() { Ok(()) } else { Err(LoadShareError::NotLeader) }
    }

    /// Keeps `pushed` for `endpoint` of `profile` in etcd for `ttl` (rounded up to whole
    /// seconds; etcd may lengthen a very short one to its minimum lease).
    pub async fn push(
        &self,
        profile: &str,
        endpoint: &str,
        pushed: &PushedRecord,
        ttl: Duration,
    ) -> Result<(), LoadShareError> {
        let key = self.keys.pushed(profile, endpoint);
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let seconds = i64::try_from(seconds.max(1)).unwrap_or(i64::MAX);
        let value = serde_json::to_vec(pushed).expect("a pushed load serialises");
        let client = &self.session.client;
        let write = async {
            let lease = client.lease_client().grant(seconds, None).await?.id();
            let options = PutOptions::new().with_lease(lease);
            client.kv_client().put(key.as_str(), value, Some(options)).await
        };
        match tokio::time::timeout(REQUEST_LIMIT, write).await {
            Ok(r) => r.map(drop).map_err(|e| EtcdError::from(e).into()),
            Err(_) => Err(EtcdError::Timeout(REQUEST_LIMIT).into()),
        }
    }

    /// Forgets the load pushed for `endpoint` of `profile`.
    pub async fn clear(&self, profile: &str, endpoint: &str) -> Result<(), LoadShareError> {
        let key = self.keys.pushed(profile, endpoint);
        let mut kv = self.session.client.kv_client();
        match tokio::time::timeout(REQUEST_LIMIT, kv.delete(key.as_str(), None)).await {
            Ok(r) => r.map(drop).map_err(|e| EtcdError::from(e).into()),
            Err(_) => Err(EtcdError::Timeout(REQUEST_LIMIT).into()),
        }
    }
}

/// One write of a step: a key and its new value (`None`: delete it).
type Op = (String, Option<Vec<u8>>);

/// `ops` in transactions of at most `TXN_OPS` operations and `TXN_BYTES` bytes of values.
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

/// Keeps `tx` holding `load/` as etcd holds it, from the follower's events.
async fn follow_view(
    keys: Keys,
    mut events: tokio::sync::mpsc::Receiver<Event>,
    tx: watch::Sender<Arc<LoadView>>,
    cancel: CancellationToken,
) {
    let mut view = LoadView::default();
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => return,
            event = events.recv() => match event { Some(e) => e, None => return },
        };
        match event {
            Event::Snapshot { revision, entries } => {
                view = LoadView { revision, following: true, ..LoadView::default() };
                for e in &entries {
                    if let Err(why) = view.take(&keys, &e.key, Some(&e.value)) {
                        tracing::warn!(key = %e.key, why, "etcd key under load/ ignored");
                    }
                }
            }
            Event::Changes { revision, changes } => {
                for c in &changes {
                    if let Err(why) = view.take(&keys, &c.key, c.value.as_deref()) {
                        tracing::warn!(key = %c.key, why, "etcd key under load/ ignored");
                    }
                }
                view.revision = revision;
            }
            Event::Lost { error } => {
                tracing::debug!(%error, "load shares not followed until etcd is back");
                view.following = false;
            }
            Event::Resumed { .. } => view.following = true,
        }
        tx.send_replace(Arc::new(view.clone()));
    }
}

/// Applies the followed shares to the snapshot served: at every change of them, and to
/// each snapshot a reload swaps in (its table carried the shares over from the one
/// before, which may have missed the last change).
async fn apply_view(
    mut view: watch::Receiver<Arc<LoadView>>,
    shared: Arc<ArcSwap<Snapshot>>,
    cancel: CancellationToken,
) {
    let mut applied_to: Option<Arc<crate::model::load::LoadTable>> = None;
    let mut tick = tokio::time::interval(RELOAD_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let changed = tokio::select! {
            _ = cancel.cancelled() => return,
            c = view.changed() => { if c.is_err() { return } true }
            _ = tick.tick() => false,
        };
        let snapshot = shared.load_full();
        let same_table = applied_to.as_ref().is_some_and(|t| Arc::ptr_eq(t, &snapshot.load));
        if !changed && same_table {
            continue;
        }
        let current = view.borrow_and_update().clone();
        // Before the first read there is nothing to apply: the table keeps what the
        // configuration carried over.
        if current.revision > 0 {
            apply(&snapshot, &current.shares);
            applied_to = Some(snapshot.load.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::new("/s/load/")
    }

    fn share(s: f64) -> EndpointLoad {
        EndpointLoad { share: s, target: s, ..EndpointLoad::FULL }
    }

    #[test]
    fn a_view_follows_every_kind_of_key() {
        let k = keys();
        let mut v = LoadView::default();
        let record = ProfileRecord { endpoints: [("eu".to_string(), share(0.4))].into() };
        let shares_key = k.shares("www.tm.example.test.");
        assert_eq!(shares_key, "/s/load/shares/www.tm.example.test.");
        v.take(&k, &shares_key, Some(&serde_json::to_vec(&record).unwrap())).unwrap();
        assert_eq!(v.shares["www.tm.example.test."]["eu"].share, 0.4);
        let step = br#"{"generation": 7, "leader": "node-1", "at": "2026-12-02T07:00:00Z"}"#;
        v.take(&k, "/s/load/generation", Some(step)).unwrap();
        assert_eq!((v.step.generation, v.step.leader.as_str()), (7, "node-1"));
        let pushed = br#"{"load": 870, "expires": "x", "by": "alice", "at": "y"}"#;
        let pushed_key = k.pushed("www.tm.example.test.", "e/1");
        assert_eq!(pushed_key, "/s/load/pushed/www.tm.example.test./e%2F1");
        v.take(&k, &pushed_key, Some(pushed)).unwrap();
        let target = ("www.tm.example.test.".to_string(), "e/1".to_string());
        assert_eq!(v.pushed[&target].load, Some(870.0));
        // Deletions, and values that do not read, take the entry out.
        v.take(&k, &pushed_key, None).unwrap();
        assert!(v.pushed.is_empty());
        assert!(v.take(&k, &shares_key, Some(b"{")).is_err());
        assert!(v.shares.is_empty());
        v.take(&k, "/s/load/generation", None).unwrap();
        assert_eq!(v.step, StepRecord::default());
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
        assert_eq!(k.shares("a b.t."), "/s/load/shares/a%20b.t.");
        let spaced = parse_profile(&k, "/s/load/shares/a%20b.t.");
        assert!(spaced.unwrap_err().starts_with("invalid name \"a b.t.\""));
        assert_eq!(parse_profile(&k, "/s/load/shares/WWW.T."), Ok("www.t.".to_string()));
    }

    #[test]
    fn shares_apply_to_fed_endpoints_and_a_missing_one_is_full() {
        use crate::model::load::{FeedSource, LoadFeed, Share};
        let mut lab = crate::routing::testkit::Lab::new();
        let p = lab.profile("www", crate::model::Method::Weighted);
        for (name, addr) in [("eu", "192.0.2.1"), ("us", "192.0.2.2"), ("asia", "192.0.2.3")] {
            lab.ep(p, name, addr);
        }
        let feed = LoadFeed { capacity: 1000.0, source: FeedSource::Pushed, low: 0.7, high: 0.9 };
        for e in 0..2 {
            lab.profiles[p].endpoints[e].load = Some(Box::new(feed.clone()));
        }
        let lab = lab.finish();
        let profiles = lab.profiles.iter().map(|p| (**p).clone()).collect();
        let health = Arc::new(lab.health);
        let snapshot = Snapshot::new(
            crate::model::Listen::default(),
            vec![],
            profiles,
            health,
            Arc::new(crate::geo::World::empty()),
        );
        snapshot.load.set(1, 0.3, false);
        snapshot.load.set(2, 0.5, false);
        let loaded = EndpointLoad { above_high: true, ..share(0.4) };
        let shares = [("www.tm.example.test.".to_string(), [("eu".to_string(), loaded)].into())];
        assert_eq!(apply(&snapshot, &shares.into()), 2);
        assert_eq!(snapshot.load.get(0), Share::of(0.4, true));
        assert_eq!(snapshot.load.get(1), Share::FULL, "no record: full");
        assert_eq!(snapshot.load.get(2), Share::of(0.5, false), "no feed: not touched");
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
        // A value alone above the limit still goes, alone (publish refuses it first).
        assert_eq!(sizes(&[op(10), op(2 << 20), op(10)]), [1, 1, 1]);
    }
}
