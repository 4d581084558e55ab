//! Health agreed across replicas: this replica publishes its view of every monitored
//! endpoint (its monitors' results combined by the endpoint's rule) under
//! `<prefix>health/<endpoint id>/<node>` (under its lease, so a dead replica's views vanish
//! with it), watches every replica's views, and gives the prober the verdict of the quorum
//! rule over the fresh ones (`Consensus`), so that every replica serves the same statuses.
//!
//! Views are written only when they change, in transactions of at most `MAX_OPS`
//! operations, and all of them again when a new lease replaces an expired one. While etcd
//! is unreachable, or before the views were first read, each endpoint's own view decides
//! alone; when etcd is back, the views are read again and every verdict re-evaluated.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use etcd_client::{PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::{Backoff, Entry};
use super::follow::{self, Change, Event, KeyRange};
use crate::model::cluster::Quorum;
use crate::model::vantage::{self, Verdict, View};
use crate::model::{Monitor, probe_params::ProbeParams};
use crate::probe::{Consensus, EndpointKey, OwnView, Prober};

/// etcd's default limit of operations in one transaction (`--max-txn-ops`).
pub const MAX_OPS: usize = 128;

/// How long the writer waits after a change for more to come, so that endpoints changing
/// together (a backend and its many endpoints failing) share a transaction.
const GATHER: Duration = Duration::from_millis(100);

/// How often the watcher looks at whether the session is connected: the session says so
/// through a flag, and a watch on a dead connection may take long to fail.
const CONNECTED_POLL: Duration = Duration::from_millis(200);

/// The longest readable part of an endpoint id; the hash after it keeps ids distinct.
const READABLE_MAX: usize = 100;

/// The views of every replica, and this replica's own, for the endpoints it monitors.
pub struct HealthViews {
    node: String,
    quorum: Quorum,
    /// `<prefix>health/`.
    prefix: String,
    state: Mutex<State>,
    /// Wakes the writer when a view is to be written or deleted.
    dirty: Notify,
}

#[derive(Default)]
struct State {
    /// Endpoint id of each endpoint monitored here.
    ids: HashMap<EndpointKey, String>,
    /// This replica's view of each endpoint monitored here, by endpoint id.
    own: HashMap<String, (EndpointKey, OwnView)>,
    /// Endpoint ids whose own view must be written, or deleted when it is no longer in
    /// `own`.
    dirty: HashSet<String>,
    /// The value of each own view as last written under the current lease.
    written: HashMap<String, String>,
    /// The other replicas' views: endpoint id → node → view.
    remote: HashMap<String, BTreeMap<String, View>>,
    /// Whether the remote views count: they were read and etcd is reachable.
    agreed: bool,
}

/// A view as stored in etcd (the node is the key's last part).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Stored {
    status: String,
    reason: String,
    /// RFC 3339, UTC.
    at: String,
}

impl HealthViews {
    pub fn new(session: &Session) -> Arc<HealthViews> {
        let settings = &session.settings;
        HealthViews::of(&settings.node, settings.quorum, settings.etcd.health_prefix())
    }

    fn of(node: &str, quorum: Quorum, prefix: String) -> Arc<HealthViews> {
        Arc::new(HealthViews {
            node: node.to_string(),
            quorum,
            prefix,
            state: Mutex::new(State::default()),
            dirty: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many views of each replica count now (this one's: its monitored endpoints), by
    /// node; only this replica's while the others' do not count. Another replica's view
    /// counts when it is of an endpoint monitored here: views under another endpoint id
    /// (an endpoint defined differently, or not at all, here; keys of the layout before
    /// endpoint ids, which a replica of an older version writes during a rolling upgrade)
    /// are read but take part in no verdict.
    pub fn view_counts(&self) -> BTreeMap<String, usize> {
        let state = self.lock();
        let mut counts = BTreeMap::new();
        let used =
            state.remote.iter().filter(|(id, _)| state.agreed && state.own.contains_key(*id));
        for (_, nodes) in used {
            for node in nodes.keys() {
                *counts.entry(node.clone()).or_insert(0) += 1;
            }
        }
        counts.insert(self.node.clone(), state.own.len());
        counts
    }

    fn own_view(&self, own: &OwnView) -> View {
        View { node: self.node.clone(), status: own.status, reason: own.reason.clone(), at: own.at }
    }

    /// `key` of an endpoint's own view.
    fn key_of(&self, id: &str) -> String {
        format!("{}{id}/{}", self.prefix, self.node)
    }

    /// (endpoint id, node) of a key under the prefix.
    fn parse_key<'a>(&self, key: &'a str) -> Option<(&'a str, &'a str)> {
        key.strip_prefix(self.prefix.as_str())?.rsplit_once('/')
    }

    /// Replaces the other replicas' views with `entries` (a full read); returns the
    /// endpoints monitored here whose views changed.
    fn replace_remote(&self, entries: &[Entry]) -> Vec<EndpointKey> {
        let mut remote: HashMap<String, BTreeMap<String, View>> = HashMap::new();
        for e in entries {
            let Some((id, node)) = self.parse_key(&e.key) else { continue };
            if node == self.node {
                continue;
            }
            if let Some(view) = decode(node, &e.value) {
                remote.entry(id.to_string()).or_default().insert(node.to_string(), view);
            }
        }
        let mut state = self.lock();
        let old = std::mem::replace(&mut state.remote, remote);
        let affected = state
            .own
            .iter()
            .filter(|(id, _)| old.get(id.as_str()) != state.remote.get(id.as_str()));
        affected.map(|(_, (key, _))| key.clone()).collect()
    }

    /// Applies watched changes; returns the endpoints monitored here whose views changed.
    fn apply_changes(&self, changes: &[Change]) -> Vec<EndpointKey> {
        let mut state = self.lock();
        let mut ids = HashSet::new();
        for change in changes {
            let Some((id, node)) = self.parse_key(&change.key) else { continue };
            if node == self.node {
                continue;
            }
            match &change.value {
                Some(value) => {
                    let Some(view) = decode(node, value) else { continue };
                    state.remote.entry(id.to_string()).or_default().insert(node.to_string(), view);
                }
                None => {
                    if let Some(nodes) = state.remote.get_mut(id) {
                        nodes.remove(node);
                        if nodes.is_empty() {
                            state.remote.remove(id);
                        }
                    }
                }
            }
            ids.insert(id.to_string());
        }
        ids.iter().filter_map(|id| state.own.get(id).map(|(key, _)| key.clone())).collect()
    }

    /// Whether the other replicas' views count from now on; returns whether that changed.
    fn set_agreed(&self, agreed: bool) -> bool {
        std::mem::replace(&mut self.lock().agreed, agreed) != agreed
    }

    /// Marks every own view to be written again (the keys written under an expired lease
    /// are gone).
    fn rewrite_all(&self) {
        let mut state = self.lock();
        state.written.clear();
        let ids: Vec<String> = state.own.keys().cloned().collect();
        state.dirty.extend(ids);
    }

    /// Up to `MAX_OPS` pending writes and deletes: (endpoint id, value to write or `None`
    /// to delete). Views whose value is already written are dropped from the pending set.
    fn take_batch(&self) -> Vec<(String, Option<String>)> {
        let mut state = self.lock();
        let mut batch = Vec::new();
        let pending: Vec<String> = state.dirty.iter().cloned().collect();
        for id in pending {
            if batch.len() == MAX_OPS {
                break;
            }
            state.dirty.remove(&id);
            let value = state.own.get(&id).map(|(_, own)| encode(own));
            match (&value, state.written.get(&id)) {
                (Some(v), Some(w)) if v == w => continue,
                (None, None) => continue,
                _ => batch.push((id, value)),
            }
        }
        batch
    }

    /// Records a batch as written.
    fn written(&self, batch: Vec<(String, Option<String>)>) {
        let mut state = self.lock();
        for (id, value) in batch {
            match value {
                Some(v) => state.written.insert(id, v),
                None => state.written.remove(&id),
            };
        }
    }

    /// Puts a batch that could not be written back into the pending set.
    fn retry(&self, batch: Vec<(String, Option<String>)>) {
        let mut state = self.lock();
        state.dirty.extend(batch.into_iter().map(|(id, _)| id));
    }

    fn has_pending(&self) -> bool {
        !self.lock().dirty.is_empty()
    }

    /// Writes this replica's views to etcd as they change, under the session's lease,
    /// until `cancel`.
    pub async fn write(self: Arc<HealthViews>, session: Arc<Session>, cancel: CancellationToken) {
        let mut lease = session.lease();
        let mut written_under = None;
        let mut backoff = Backoff::default();
        loop {
            let current = *lease.borrow_and_update();
            if let Some(id) = current
                && written_under != Some(id)
            {
                self.rewrite_all();
                written_under = Some(id);
            }
            let Some(lease_id) = current.filter(|_| self.has_pending()) else {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = self.dirty.notified() => {}
                    _ = lease.changed() => {}
                }
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(GATHER) => {}
                }
                continue;
            };
            let batch = self.take_batch();
            if batch.is_empty() {
                continue;
            }
            let ops: Vec<TxnOp> = batch
                .iter()
                .map(|(id, value)| match value {
                    Some(v) => TxnOp::put(
                        self.key_of(id),
                        v.as_str(),
                        Some(PutOptions::new().with_lease(lease_id)),
                    ),
                    None => TxnOp::delete(self.key_of(id), None),
                })
                .collect();
            let mut kv = session.client.kv_client();
            match kv.txn(Txn::new().and_then(ops)).await {
                Ok(_) => {
                    tracing::debug!(views = batch.len(), "health views written");
                    self.written(batch);
                    backoff.reset();
                }
                Err(e) => {
                    tracing::debug!(error = %e, views = batch.len(), "cannot write health views; retrying");
                    self.retry(batch);
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                    }
                }
            }
        }
    }

    /// Follows every replica's views until `cancel`, re-evaluating the verdicts of the
    /// endpoints whose views change. The other replicas' views count while the session is
    /// connected and the follower holds them up to date.
    pub async fn watch(
        self: Arc<HealthViews>,
        session: Arc<Session>,
        prober: Arc<Prober>,
        cancel: CancellationToken,
    ) {
        let range = KeyRange::prefix(&self.prefix);
        let mut events = follow::spawn(session.clone(), range, None, cancel.clone());
        // Whether the follower holds the views: a snapshot came and the watch is not lost.
        let mut current = false;
        let mut poll = tokio::time::interval(CONNECTED_POLL);
        loop {
            let event = tokio::select! {
                () = cancel.cancelled() => return,
                _ = poll.tick() => None,
                event = events.recv() => match event {
                    Some(event) => Some(event),
                    None => return,
                },
            };
            let affected = match event {
                None => Vec::new(),
                Some(Event::Snapshot { entries, .. }) => {
                    current = true;
                    self.replace_remote(&entries)
                }
                Some(Event::Changes { changes, .. }) => self.apply_changes(&changes),
                Some(Event::Lost { error }) => {
                    tracing::debug!(%error, "health views not followed until etcd is back");
                    current = false;
                    Vec::new()
                }
                Some(Event::Resumed { .. }) => {
                    current = true;
                    Vec::new()
                }
            };
            let agreed = current && session.connected();
            if self.set_agreed(agreed) {
                if agreed {
                    tracing::info!("health verdicts from every replica's views again");
                } else {
                    tracing::info!(
                        "health verdicts from this replica's own views until etcd is back"
                    );
                }
                prober.republish_all();
            } else if agreed && !affected.is_empty() {
                prober.republish(&affected);
            }
        }
    }
}

impl Consensus for HealthViews {
    fn changed(&self, key: &EndpointKey, own: &OwnView) {
        let mut state = self.lock();
        let id = match state.ids.get(key) {
            Some(id) => id.clone(),
            None => {
                let id = endpoint_id(key);
                state.ids.insert(key.clone(), id.clone());
                id
            }
        };
        state.own.insert(id.clone(), (key.clone(), own.clone()));
        state.dirty.insert(id);
        drop(state);
        self.dirty.notify_one();
    }

    fn stopped(&self, key: &EndpointKey) {
        let mut state = self.lock();
        // Keys differing only in what the id leaves out (a health file's path) share an
        // id: the view stays when a new key already took it over.
        if let Some(id) = state.ids.remove(key)
            && state.own.get(&id).is_some_and(|(k, _)| k == key)
        {
            state.own.remove(&id);
            state.dirty.insert(id);
        }
        drop(state);
        self.dirty.notify_one();
    }

    fn verdict(&self, key: &EndpointKey, own: &OwnView) -> Verdict {
        let state = self.lock();
        if !state.agreed {
            let reason = format!("own view only (etcd unreachable): {}", own.reason);
            return Verdict { status: own.status, reason };
        }
        vantage::verdict(self.quorum, &views(&state, &self.node, key, self.own_view(own)))
    }

    fn views(&self, key: &EndpointKey, own: &OwnView) -> Vec<View> {
        let state = self.lock();
        let mut all = views(&state, &self.node, key, self.own_view(own));
        if !state.agreed {
            all.retain(|v| v.node == self.node);
        }
        all.sort_by(|a, b| a.node.cmp(&b.node));
        all
    }
}

/// `own` and the other replicas' views of `key`.
fn views(state: &State, node: &str, key: &EndpointKey, own: View) -> Vec<View> {
    let others = state.ids.get(key).and_then(|id| state.remote.get(id));
    let others = others.into_iter().flat_map(|m| m.values()).filter(|v| v.node != node);
    std::iter::once(own).chain(others.cloned()).collect()
}

fn encode(own: &OwnView) -> String {
    let stored = Stored {
        status: own.status.as_str().to_string(),
        reason: own.reason.clone(),
        at: humantime::format_rfc3339_millis(own.at).to_string(),
    };
    serde_json::to_string(&stored).expect("a view encodes")
}

/// A stored view of `node`; `None` (and a debug line) when it is not one.
fn decode(node: &str, value: &[u8]) -> Option<View> {
    let parsed = serde_json::from_slice::<Stored>(value).ok().and_then(|s| {
        let status = vantage::view_status(&s.status)?;
        let at = humantime::parse_rfc3339_weak(&s.at).ok()?;
        Some(View { node: node.to_string(), status, reason: s.reason, at })
    });
    if parsed.is_none() {
        tracing::debug!(node, value = %String::from_utf8_lossy(value), "ignoring a health view that is not one");
    }
    parsed
}

/// An endpoint's id: the same on every replica whose configuration defines the endpoint's
/// view the same way. A readable part (profile and endpoint name) for people listing the
/// keys, then a hash of the whole definition (target, rule and every monitor), so that
/// replicas monitoring an endpoint differently (during a rolling change) do not count each
/// other's views. Only letters, digits and `.:-_[]` are kept as they are; every other byte
/// is percent-encoded, so an id never holds `/`.
fn endpoint_id(key: &EndpointKey) -> String {
    let readable = format!("{}:{}", key.profile, key.endpoint);
    let mut id = String::new();
    for b in readable.bytes() {
        if id.len() >= READABLE_MAX {
            break;
        }
        if b.is_ascii_alphanumeric() || b".:-_[]".contains(&b) {
            id.push(char::from(b));
        } else {
            id.push_str(&format!("%{b:02X}"));
        }
    }
    format!("{id}~{:016x}", crate::hash::hash_str(&definition(key)))
}

/// Every field of what decides an endpoint's view, each with its length, so that no two
/// definitions give the same text.
fn definition(key: &EndpointKey) -> String {
    let mut fields = vec![
        key.profile.to_string(),
        key.endpoint.to_string(),
        key.target.clone(),
        key.rule.to_string(),
    ];
    for m in key.monitors.iter() {
        fields.push(format!("m{}", m.name));
        monitor_fields(m, &mut fields);
    }
    fields.iter().map(|f| format!("{}:{f};", f.len())).collect()
}

/// The fields of one monitor's definition. The file a `file` monitor reads is left out:
/// each replica may keep it in a place of its own.
fn monitor_fields(m: &Monitor, fields: &mut Vec<String>) {
    fields.extend([
        m.protocol.as_str().to_string(),
        m.port.to_string(),
        m.path.clone(),
        m.interval.as_millis().to_string(),
        m.timeout.as_millis().to_string(),
        m.tolerated_failures.to_string(),
        m.tls_verify.to_string(),
        m.body_contains.clone().map_or_else(|| "-".to_string(), |b| format!("+{b}")),
    ]);
    fields.extend(m.expected_status.iter().map(|(lo, hi)| format!("s{lo}-{hi}")));
    fields.extend(m.headers.iter().flat_map(|(k, v)| [format!("h{k}"), v.clone()]));
    if m.params != ProbeParams::None {
        fields.push(format!("p{:?}", m.params));
    }
    if let Some(x) = &m.external {
        let max_age = x.max_age.map_or(0, |a| a.as_millis());
        fields.push(format!("x{:?}/{max_age}", x.missing));
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::model::health::Status;
    use crate::model::{MonitorRule, Protocol};

    fn monitor(name: &str, protocol: Protocol, port: u16, path: &str) -> Monitor {
        Monitor {
            name: name.into(),
            protocol,
            port,
            path: path.into(),
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            tolerated_failures: 3,
            expected_status: vec![(200, 299)],
            headers: vec![],
            body_contains: None,
            tls_verify: false,
            external: None,
            params: Default::default(),
        }
    }

    /// Endpoint `endpoint` of `profile` at 192.0.2.1 with one HTTP monitor.
    fn key(profile: &str, endpoint: &str) -> EndpointKey {
        EndpointKey {
            profile: profile.into(),
            endpoint: endpoint.into(),
            target: "192.0.2.1".into(),
            rule: MonitorRule::All,
            monitors: vec![monitor("http", Protocol::Http, 80, "/health")].into(),
        }
    }

    #[test]
    fn endpoint_ids_are_readable_stable_and_distinct() {
        let k = key("www.tm.example.test.", "eu-1");
        let id = endpoint_id(&k);
        assert!(id.starts_with("www.tm.example.test.:eu-1~"), "{id}");
        assert_eq!(id, endpoint_id(&k.clone()));
        // Pinned: replicas of different builds must agree.
        assert_eq!(id, "www.tm.example.test.:eu-1~e11f98f07c26d0f9");
        let odd = endpoint_id(&key("a/b c.example.", "e"));
        assert!(odd.starts_with("a%2Fb%20c.example.:e~"), "{odd}");
        assert!(!odd.contains('/'));
        // Whatever decides the view makes another id: the target, the rule, any field of
        // any monitor, a monitor more, the monitors' names.
        let mut changes: Vec<EndpointKey> = Vec::new();
        let mut target = k.clone();
        target.target = "192.0.2.2".into();
        changes.push(target);
        let mut rule = k.clone();
        rule.rule = MonitorRule::Any;
        changes.push(rule);
        let mut slower = monitor("http", Protocol::Http, 80, "/health");
        slower.interval = Duration::from_secs(11);
        changes.push(EndpointKey { monitors: vec![slower].into(), ..k.clone() });
        let mut header = monitor("http", Protocol::Http, 80, "/health");
        header.headers = vec![("Host".into(), "a".into())];
        changes.push(EndpointKey { monitors: vec![header].into(), ..k.clone() });
        let renamed = monitor("web", Protocol::Http, 80, "/health");
        changes.push(EndpointKey { monitors: vec![renamed].into(), ..k.clone() });
        let two = vec![
            monitor("http", Protocol::Http, 80, "/health"),
            monitor("db", Protocol::Tcp, 5432, "/"),
        ];
        changes.push(EndpointKey { monitors: two.into(), ..k.clone() });
        let mut pushed = monitor("ops", Protocol::Pushed, 0, "/");
        pushed.external = Some(crate::model::ExternalMonitor {
            missing: crate::model::MissingData::Healthy,
            file: None,
            max_age: None,
        });
        let mut unhealthy = pushed.clone();
        unhealthy.external.as_mut().unwrap().missing = crate::model::MissingData::Unhealthy;
        changes.push(EndpointKey { monitors: vec![pushed].into(), ..k.clone() });
        changes.push(EndpointKey { monitors: vec![unhealthy].into(), ..k.clone() });
        let mut ids: Vec<String> = changes.iter().map(endpoint_id).collect();
        ids.push(id);
        let distinct: HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{ids:?}");
        // Where a replica keeps a health file is its own business.
        let file = |path: &str| {
            let mut m = monitor("ext", Protocol::File, 0, "/");
            m.external = Some(crate::model::ExternalMonitor {
                missing: crate::model::MissingData::Unhealthy,
                file: Some(path.into()),
                max_age: None,
            });
            EndpointKey { monitors: vec![m].into(), ..k.clone() }
        };
        assert_eq!(endpoint_id(&file("/a/health")), endpoint_id(&file("/b/health")));
        let long = endpoint_id(&key(&"x".repeat(200), "e"));
        assert!(long.len() < READABLE_MAX + 30, "{long}");
    }

    #[test]
    fn stored_views_round_trip() {
        let own = OwnView {
            status: Status::Degraded,
            reason: "HTTP 503, expected 200-299".into(),
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        };
        let text = encode(&own);
        assert_eq!(
            text,
            r#"{"status":"degraded","reason":"HTTP 503, expected 200-299","at":"2023-11-14T22:13:20.123Z"}"#
        );
        let view = decode("node-1", text.as_bytes()).unwrap();
        assert_eq!(
            (view.node.as_str(), view.status, view.reason.as_str(), view.at),
            ("node-1", Status::Degraded, own.reason.as_str(), own.at)
        );
        assert!(
            decode("n", br#"{"status":"stopped","reason":"","at":"2023-11-14T22:13:20Z"}"#)
                .is_none()
        );
        assert!(decode("n", b"not json").is_none());
    }

    fn own(status: Status, reason: &str) -> OwnView {
        OwnView { status, reason: reason.into(), at: SystemTime::UNIX_EPOCH }
    }

    fn entry(key: &str, value: &str) -> Entry {
        Entry { key: key.into(), value: value.as_bytes().to_vec(), mod_revision: 1 }
    }

    /// Changed views go out in batches of at most `MAX_OPS`, a view already written is
    /// not written again, a stopped endpoint's view is deleted, and a new lease rewrites all.
    #[test]
    fn views_are_written_on_change_in_bounded_batches() {
        let views = HealthViews::of("node-0", Quorum::Majority, "/p/health/".into());
        let keys: Vec<EndpointKey> =
            (0..300u16).map(|i| key("p.example.", &format!("e{i}"))).collect();
        for k in &keys {
            views.changed(k, &own(Status::Checking, "not probed yet"));
        }
        let mut sizes = Vec::new();
        loop {
            let batch = views.take_batch();
            if batch.is_empty() {
                break;
            }
            sizes.push(batch.len());
            assert!(
                batch.iter().all(|(_, v)| v.as_deref().is_some_and(|v| v.contains("checking")))
            );
            views.written(batch);
        }
        assert_eq!(sizes, vec![128, 128, 44]);
        // The same view again: nothing to write. A changed one and a stopped one: two ops.
        views.changed(&keys[0], &own(Status::Checking, "not probed yet"));
        views.changed(&keys[1], &own(Status::Online, "probe succeeded"));
        views.stopped(&keys[2]);
        let mut batch = views.take_batch();
        batch.sort();
        let id = |k: &EndpointKey| endpoint_id(k);
        assert_eq!(batch.len(), 2, "{batch:?}");
        assert!(batch.contains(&(id(&keys[2]), None)));
        assert!(
            batch
                .iter()
                .any(|(i, v)| *i == id(&keys[1])
                    && v.as_deref().is_some_and(|v| v.contains("online")))
        );
        views.written(batch);
        assert_eq!(views.view_counts().get("node-0"), Some(&299));
        // A failed write is retried; a new lease rewrites every view.
        views.changed(&keys[3], &own(Status::Degraded, "connection refused"));
        let failed = views.take_batch();
        views.retry(failed);
        assert_eq!(views.take_batch().len(), 1);
        views.rewrite_all();
        let total: usize =
            std::iter::from_fn(|| Some(views.take_batch()).filter(|b| !b.is_empty()))
                .map(|b| b.len())
                .sum();
        assert_eq!(total, 299);
        assert_eq!(views.key_of(&id(&keys[0])), format!("/p/health/{}/node-0", id(&keys[0])));
    }

    /// A reload that moves a health file gives the endpoint a new key with the same id: the
    /// old key stopping after the new one started leaves the view in place.
    #[test]
    fn a_new_key_with_the_same_id_keeps_the_view() {
        let views = HealthViews::of("node-0", Quorum::Majority, "/p/health/".into());
        let file = |path: &str| {
            let mut m = monitor("ext", Protocol::File, 0, "/");
            m.external = Some(crate::model::ExternalMonitor {
                missing: crate::model::MissingData::Unhealthy,
                file: Some(path.into()),
                max_age: None,
            });
            EndpointKey { monitors: vec![m].into(), ..key("p.example.", "e") }
        };
        let (before, after) = (file("/a/health"), file("/b/health"));
        views.changed(&before, &own(Status::Online, "up in /a/health"));
        views.written(views.take_batch());
        views.changed(&after, &own(Status::Online, "up in /b/health"));
        views.stopped(&before);
        let batch = views.take_batch();
        assert_eq!(batch.len(), 1, "{batch:?}");
        assert!(batch[0].1.as_deref().is_some_and(|v| v.contains("/b/health")), "{batch:?}");
        assert_eq!(views.view_counts().get("node-0"), Some(&1));
        views.stopped(&after);
        assert_eq!(views.take_batch(), vec![(endpoint_id(&after), None)]);
    }

    /// Until the views are read, an endpoint's own view decides; then every fresh view counts
    /// (this replica's own keys in etcd are not read back: its own view is in memory).
    #[test]
    fn verdicts_count_the_views_read() {
        let views = HealthViews::of("node-0", Quorum::Majority, "/p/health/".into());
        let k = key("p.example.", "e");
        let mine = own(Status::Degraded, "HTTP 503, expected 200-299");
        views.changed(&k, &mine);
        let alone = views.verdict(&k, &mine);
        assert_eq!(alone.status, Status::Degraded);
        assert_eq!(alone.reason, "own view only (etcd unreachable): HTTP 503, expected 200-299");
        let id = endpoint_id(&k);
        let online =
            r#"{"status":"online","reason":"probe succeeded","at":"2024-01-01T00:00:00Z"}"#;
        let entries = vec![
            entry(&format!("/p/health/{id}/node-1"), online),
            entry(&format!("/p/health/{id}/node-2"), online),
            entry(&format!("/p/health/{id}/node-0"), online),
            entry("/p/health/other~0/node-1", online),
            entry(&format!("/p/health/{id}/node-3"), "garbage"),
        ];
        let affected = views.replace_remote(&entries);
        assert_eq!(affected, vec![k.clone()]);
        assert_eq!(views.verdict(&k, &mine).status, Status::Degraded, "not counted yet");
        assert!(views.set_agreed(true));
        let v = views.verdict(&k, &mine);
        assert_eq!(v.status, Status::Online);
        assert_eq!(
            v.reason,
            "1 of 3 vantage points failing, not enough for quorum majority: node-0: HTTP 503, expected 200-299"
        );
        let nodes: Vec<String> = views.views(&k, &mine).into_iter().map(|v| v.node).collect();
        assert_eq!(nodes, ["node-0", "node-1", "node-2"]);
        // node-1's view of `other~0`, an endpoint not monitored here, counts in nothing.
        let counts = views.view_counts();
        assert_eq!((counts["node-0"], counts["node-1"], counts["node-2"]), (1, 1, 1));
        // The same views again affect nothing; without etcd only the own view counts.
        assert!(views.replace_remote(&entries).is_empty());
        assert!(views.set_agreed(false));
        assert_eq!(views.verdict(&k, &mine).status, Status::Degraded);
        assert_eq!(views.views(&k, &mine).len(), 1);
    }
}
