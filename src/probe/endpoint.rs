//! One monitored endpoint's status: its monitors' results (probes report theirs, `pushed`
//! and `file` monitors read `External`) combined by its rule, a live push overriding an
//! endpoint without a `pushed` monitor, written into the endpoint's health slot.
//!
//! In a cluster the combined status is this replica's own view of the endpoint: it goes to
//! the `Consensus`, and the slot gets the verdict over every replica's view (a push still
//! overrides the verdict). So each replica applies the rule to its own monitors, and the
//! quorum is taken over those combined views, never over single monitors.
//!
//! Each reload makes new `EndpointHealth`s, seeded with the previous ones' statuses, so
//! that only real changes are logged and recorded as events. Until `ready`, while the
//! reload's probes report, nothing is published. The state sits behind a mutex that probes
//! (under their own), the admin API and the file watcher take; queries never.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use tokio::time::Instant;

use super::consensus::{Consensus, EndpointKey, OwnView};
use super::external::External;
use super::live::StatusChange;
use super::pushed::PushedHealth;
use crate::model::events::{Event, Events, Kind};
use crate::model::health::{HealthTable, Status};
use crate::model::monitor_rule::{MonitorResult, combine};
use crate::model::vantage::{self, Verdict};
use crate::model::{ExternalMonitor, MissingData, Monitor, MonitorRule, Protocol};

/// One monitor's current result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorState {
    pub name: String,
    pub protocol: Protocol,
    pub status: Status,
    pub reason: String,
    /// `pushed` and `file`: the settings, and the last status they had data for.
    external: Option<ExternalMonitor>,
    last_known: Option<(Status, String)>,
}

/// What the admin API shows of a monitored endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointView {
    pub status: Status,
    pub reason: String,
    pub rule: MonitorRule,
    pub monitors: Vec<MonitorState>,
    pub change: Option<StatusChange>,
    /// The live push overriding the monitors (an endpoint without a `pushed` monitor).
    pub overridden_by: Option<PushedHealth>,
    /// In a cluster: every vantage point's view and the verdict.
    pub vantage: Option<Vantage>,
}

/// How the replicas see an endpoint, and what they decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vantage {
    pub views: Vec<vantage::View>,
    /// The quorum's status (a live push may override it).
    pub status: Status,
    /// Why the quorum decided `status`.
    pub reason: String,
}

/// In a cluster: what decides the endpoint's status, and what its view is a view of.
struct Agreement {
    consensus: Arc<dyn Consensus>,
    key: EndpointKey,
}

/// Where the endpoint is and what its monitors are.
pub struct Spec<'a> {
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    pub target: String,
    pub slot: usize,
    pub rule: MonitorRule,
    pub monitors: &'a [Monitor],
}

pub struct EndpointHealth {
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    target: String,
    slot: usize,
    table: Arc<HealthTable>,
    rule: MonitorRule,
    has_pushed: bool,
    events: Arc<Events>,
    external: Arc<External>,
    agreement: Option<Agreement>,
    state: Mutex<State>,
}

struct State {
    monitors: Vec<MonitorState>,
    published: Status,
    reason: String,
    change: Option<StatusChange>,
    overridden_by: Option<PushedHealth>,
    /// In a cluster: this replica's view (the rule over its own monitors), and whether
    /// the consensus was told of it yet.
    own: OwnView,
    announced: bool,
    /// In a cluster: the last verdict, which `published` follows unless a push overrides.
    verdict: Option<Verdict>,
    /// Publishes only once every probe of a reload has reported.
    ready: bool,
    /// Taken over from an earlier `EndpointHealth`: its first status is a change to log.
    /// A new endpoint's first status is where it starts, as a new probe's `checking` is.
    seeded: bool,
    /// Replaced by a reload's: publishes nothing more.
    retired: bool,
}

impl EndpointHealth {
    /// A new endpoint status, taking over what `previous` (the same endpoint before a
    /// reload) had: the published status, its last change, this replica's own view, and
    /// each monitor's last known result by name. With a `consensus`, the slot gets the
    /// verdict over every replica's view.
    pub fn new(
        spec: Spec<'_>,
        table: Arc<HealthTable>,
        events: Arc<Events>,
        external: Arc<External>,
        previous: Option<&EndpointHealth>,
        consensus: Option<Arc<dyn Consensus>>,
    ) -> EndpointHealth {
        let before = previous.map(|p| p.lock());
        let monitors = spec
            .monitors
            .iter()
            .map(|m| {
                let old =
                    before.as_ref().and_then(|b| b.monitors.iter().find(|o| o.name == m.name));
                MonitorState {
                    name: m.name.clone(),
                    protocol: m.protocol,
                    status: Status::Checking,
                    reason: "not probed yet".to_string(),
                    external: m.external.clone(),
                    last_known: old
                        .filter(|o| o.protocol == m.protocol)
                        .and_then(|o| o.last_known.clone()),
                }
            })
            .collect();
        let seeded = before.is_some();
        let (published, reason, change) = match &before {
            Some(b) => (b.published, b.reason.clone(), b.change.clone()),
            None => (Status::Checking, "not probed yet".to_string(), None),
        };
        let own = before.as_ref().map_or_else(OwnView::starting, |b| b.own.clone());
        drop(before);
        let agreement = consensus.map(|consensus| Agreement {
            consensus,
            key: EndpointKey {
                profile: spec.profile.clone(),
                endpoint: spec.endpoint.clone(),
                target: spec.target.clone(),
                rule: spec.rule,
                monitors: spec.monitors.into(),
            },
        });
        EndpointHealth {
            has_pushed: spec.monitors.iter().any(|m| m.protocol == Protocol::Pushed),
            profile: spec.profile,
            endpoint: spec.endpoint,
            target: spec.target,
            slot: spec.slot,
            table,
            rule: spec.rule,
            events,
            external,
            agreement,
            state: Mutex::new(State {
                monitors,
                published,
                reason,
                change,
                overridden_by: None,
                own,
                announced: false,
                verdict: None,
                ready: false,
                seeded,
                retired: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the plain data inconsistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The probe of monitor `index` has `status` now, for `reason`.
    pub fn set(&self, index: usize, status: Status, reason: &str) {
        let mut st = self.lock();
        if let Some(m) = st.monitors.get_mut(index) {
            m.status = status;
            m.reason = reason.to_string();
        }
        if st.ready {
            self.publish(&mut st);
        }
    }

    /// Every probe has reported: publishes from now on, starting with the slot.
    pub fn ready(&self) {
        let mut st = self.lock();
        st.ready = true;
        if !st.seeded {
            st.published = self.evaluate(&mut st).0;
        }
        self.table.set(self.slot, st.published);
        self.publish(&mut st);
    }

    /// A reload replaced it: it publishes nothing more.
    pub fn retire(&self) {
        self.lock().retired = true;
    }

    /// In a cluster, what this endpoint's view is a view of.
    pub fn key(&self) -> Option<&EndpointKey> {
        self.agreement.as_ref().map(|a| &a.key)
    }

    /// Withdraws this replica's view from the consensus (the endpoint is no longer
    /// monitored, or monitored differently): under the lock, after `retire`, so that no
    /// evaluation still running can bring it back.
    pub fn withdraw(&self) {
        let st = self.lock();
        if let Some(a) = self.agreement.as_ref().filter(|_| st.retired) {
            a.consensus.stopped(&a.key);
        }
    }

    /// Evaluates again: the external results (a push, a file changed, a push expired) and,
    /// in a cluster, the verdict (the other replicas' views changed).
    pub fn refresh(&self) {
        let mut st = self.lock();
        if st.ready {
            self.publish(&mut st);
        }
    }

    /// The files its `file` monitors read.
    pub fn files(&self) -> Vec<std::path::PathBuf> {
        let st = self.lock();
        let files = st.monitors.iter().filter_map(|m| m.external.as_ref()?.file.clone());
        files.collect()
    }

    /// Whether a `file` monitor of this endpoint reads `path`.
    pub fn reads(&self, path: &std::path::Path) -> bool {
        let st = self.lock();
        st.monitors
            .iter()
            .any(|m| m.external.as_ref().and_then(|e| e.file.as_deref()) == Some(path))
    }

    pub fn view(&self) -> EndpointView {
        let st = self.lock();
        let vantage = self.agreement.as_ref().zip(st.verdict.as_ref()).map(|(a, v)| Vantage {
            views: a.consensus.views(&a.key, &st.own),
            status: v.status,
            reason: v.reason.clone(),
        });
        EndpointView {
            status: st.published,
            reason: st.reason.clone(),
            rule: self.rule,
            monitors: st.monitors.clone(),
            change: st.change.clone(),
            overridden_by: st.overridden_by.clone(),
            vantage,
        }
    }

    /// Evaluates the rule and stores a changed status into the slot, logging it and
    /// recording an event.
    fn publish(&self, st: &mut State) {
        if st.retired {
            return;
        }
        let (status, reason) = self.evaluate(st);
        let from = st.published;
        if from == status {
            return;
        }
        st.published = status;
        self.table.set(self.slot, status);
        let at = SystemTime::now();
        let change = StatusChange { at, from, to: status, reason };
        let event = Event::new(Kind::Status, &self.profile, &self.endpoint).change(from, status);
        self.events.record(Event { time: at, ..event.reason(change.reason.as_str()) });
        tracing::info!(
            profile = %self.profile,
            endpoint = %self.endpoint,
            target = %self.target,
            old = %from,
            new = %status,
            reason = change.reason,
            "endpoint status changed"
        );
        st.change = Some(change);
    }

    /// The status the rule gives now (in a cluster, the verdict over every replica's view),
    /// and why; keeps the reason and the overriding push.
    fn evaluate(&self, st: &mut State) -> (Status, String) {
        let push = self.external.pushed.get(&self.profile, &self.endpoint);
        let live = push.filter(|p| p.is_live(Instant::now()));
        self.read_external(st, live.as_ref());
        let results: Vec<MonitorResult<'_>> = st
            .monitors
            .iter()
            .map(|m| MonitorResult { name: &m.name, status: m.status, reason: &m.reason })
            .collect();
        let (mut status, mut reason) = combine(self.rule, &results);
        if let Some(a) = &self.agreement {
            let verdict = self.agree(a, st, status, reason);
            (status, reason) = (verdict.status, verdict.reason.clone());
            st.verdict = Some(verdict);
        }
        st.overridden_by = None;
        if let Some(p) = live.filter(|_| !self.has_pushed) {
            status = if p.healthy { Status::Online } else { Status::Degraded };
            reason = format!("{} (overrides the monitors until the push expires)", p.describe());
            st.overridden_by = Some(p);
        }
        st.reason.clone_from(&reason);
        (status, reason)
    }

    /// Makes `status` (the rule over this replica's monitors) this replica's view, telling
    /// the consensus when it changes (or was never told), and returns the verdict.
    fn agree(&self, a: &Agreement, st: &mut State, status: Status, reason: String) -> Verdict {
        let from = st.own.status;
        if status != from {
            st.own = OwnView { status, reason, at: SystemTime::now() };
            // Not the endpoint's status changing (the verdict may stay): what this
            // replica sees of it.
            tracing::info!(
                profile = %self.profile,
                endpoint = %self.endpoint,
                target = %self.target,
                old = %from,
                new = %status,
                reason = st.own.reason,
                "endpoint view of this replica changed"
            );
        }
        if status != from || !st.announced {
            a.consensus.changed(&a.key, &st.own);
            st.announced = true;
        }
        a.consensus.verdict(&a.key, &st.own)
    }

    /// Sets the results of the `pushed` and `file` monitors from their sources, applying
    /// `missing` where there is no data.
    fn read_external(&self, st: &mut State, live: Option<&PushedHealth>) {
        let now = SystemTime::now();
        for m in &mut st.monitors {
            let Some(ext) = &m.external else { continue };
            let data = match m.protocol {
                Protocol::Pushed => live.map(|p| (p.healthy, p.describe())),
                Protocol::File => ext.file.as_deref().and_then(|path| {
                    let loaded = self.external.files.get(path)?;
                    if loaded.is_stale(ext.max_age, now) {
                        return None;
                    }
                    let s = loaded.file.lookup(&self.profile, &self.endpoint)?;
                    let word = if s.healthy { "up" } else { "down" };
                    let reason = match s.reason.is_empty() {
                        true => format!("{word} in {}", path.display()),
                        false => format!("{word} in {}: {}", path.display(), s.reason),
                    };
                    Some((s.healthy, reason))
                }),
                _ => None,
            };
            // A push that expired before this endpoint saw it live is known all the same.
            if m.protocol == Protocol::Pushed {
                m.last_known = m
                    .last_known
                    .take()
                    .or_else(|| self.external.pushed.known(&self.profile, &self.endpoint));
            }
            let (status, reason) = match data {
                Some((healthy, reason)) => {
                    let status = if healthy { Status::Online } else { Status::Degraded };
                    m.last_known = Some((status, reason.clone()));
                    (status, reason)
                }
                None => missing(m.protocol, ext.missing, m.last_known.as_ref()),
            };
            m.status = status;
            m.reason = reason;
        }
    }
}

#[cfg(test)]
impl<'a> Spec<'a> {
    /// Endpoint `p./e` (target 192.0.2.1) at slot 0 with `monitors` under `rule`, for tests.
    pub fn test(rule: MonitorRule, monitors: &'a [Monitor]) -> Spec<'a> {
        Spec {
            profile: "p.".into(),
            endpoint: "e".into(),
            target: "192.0.2.1".into(),
            slot: 0,
            rule,
            monitors,
        }
    }
}

/// The status of an endpoint `p./e` at slot 0 of `table` with `monitor` alone, for tests.
#[cfg(test)]
pub fn alone(
    monitor: &Monitor,
    table: Arc<HealthTable>,
    events: Arc<Events>,
) -> Arc<EndpointHealth> {
    let spec = Spec::test(MonitorRule::All, std::slice::from_ref(monitor));
    Arc::new(EndpointHealth::new(spec, table, events, Arc::default(), None, None))
}

/// What a monitor without data counts as under its `missing` policy.
fn missing(
    protocol: Protocol,
    policy: MissingData,
    last: Option<&(Status, String)>,
) -> (Status, String) {
    let none = match protocol {
        Protocol::Pushed => "no live push",
        _ => "no data in the file",
    };
    match (policy, last) {
        (MissingData::Healthy, _) => (Status::Online, format!("{none} (missing: healthy)")),
        (MissingData::Unhealthy, _) => (Status::Degraded, format!("{none} (missing: unhealthy)")),
        (MissingData::LastKnown, Some((s, r))) => (*s, format!("{none}; last known: {r}")),
        (MissingData::LastKnown, None) => (Status::Checking, format!("{none} and none before")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::model::health::HealthView;
    use crate::model::vantage::View as VantageView;
    use crate::probe::Reason;
    use crate::probe::live::{Live, Users};
    use crate::probe::plan::{ProbeKey, ProbeTarget};

    /// A consensus whose verdict the test sets, recording the own views it is told of.
    #[derive(Default)]
    struct Fixed {
        verdict: Mutex<Option<Status>>,
        told: Mutex<Vec<(Status, String)>>,
        stopped: AtomicBool,
    }

    impl Consensus for Fixed {
        fn changed(&self, _: &EndpointKey, own: &OwnView) {
            self.told.lock().unwrap().push((own.status, own.reason.clone()));
        }
        fn stopped(&self, _: &EndpointKey) {
            self.stopped.store(true, Ordering::SeqCst);
        }
        fn verdict(&self, _: &EndpointKey, own: &OwnView) -> Verdict {
            let status = self.verdict.lock().unwrap().unwrap_or(own.status);
            Verdict { status, reason: format!("decided {status}") }
        }
        fn views(&self, _: &EndpointKey, own: &OwnView) -> Vec<VantageView> {
            let (status, reason, at) = (own.status, own.reason.clone(), own.at);
            vec![VantageView { node: "me".into(), status, reason, at }]
        }
    }

    fn monitor(name: &str, protocol: Protocol, port: u16) -> Monitor {
        Monitor {
            name: name.into(),
            protocol,
            port,
            path: "/".into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            tolerated_failures: 0,
            expected_status: vec![(200, 299)],
            headers: vec![],
            body_contains: None,
            tls_verify: false,
            external: None,
            params: Default::default(),
        }
    }

    fn probe(m: &Monitor) -> ProbeKey {
        let monitor = Monitor { name: String::new(), ..m.clone() };
        ProbeKey { target: ProbeTarget::Ip([192, 0, 2, 1].into()), monitor }
    }

    /// In a cluster the endpoint's own view is its monitors combined by the rule, and the
    /// slot gets the consensus's verdict on it: own changes are told (not the monitors'
    /// own), verdict changes are recorded as events, a live push overrides the verdict,
    /// and a withdrawn endpoint is stopped and changes nothing more.
    #[test]
    fn the_consensus_decides_over_the_combined_view() {
        let fixed = Arc::new(Fixed::default());
        *fixed.verdict.lock().unwrap() = Some(Status::Online);
        let table = Arc::new(HealthTable::new([Status::Checking]));
        let events = Arc::new(Events::default());
        let external = Arc::new(External::default());
        let monitors = [monitor("web", Protocol::Http, 80), monitor("db", Protocol::Tcp, 5432)];
        let spec = Spec::test(MonitorRule::All, &monitors);
        let consensus = fixed.clone() as Arc<dyn Consensus>;
        let endpoint = Arc::new(EndpointHealth::new(
            spec,
            table.clone(),
            events.clone(),
            external.clone(),
            None,
            Some(consensus),
        ));
        let key = endpoint.key().unwrap();
        assert_eq!((&*key.profile, &*key.endpoint, key.rule), ("p.", "e", MonitorRule::All));
        assert_eq!(&*key.monitors, &monitors);
        let web = Live::new(probe(&monitors[0]), Users { list: vec![(endpoint.clone(), 0)] });
        let db = Live::new(probe(&monitors[1]), Users { list: vec![(endpoint.clone(), 1)] });
        endpoint.ready();
        // Others see it online: served online before this replica's first result.
        assert_eq!(table.status(0), Status::Online);
        assert_eq!(*fixed.told.lock().unwrap(), [(Status::Checking, "not probed yet".to_string())]);

        // One monitor up, the other still checking: the combined view stays checking.
        web.record(Ok(()), Duration::from_millis(1));
        assert_eq!(fixed.told.lock().unwrap().len(), 1);
        db.record(Err(Reason::Refused), Duration::from_millis(1));
        let failing = "1 of 2 monitors failing: db (connection refused); rule all";
        assert_eq!(fixed.told.lock().unwrap()[1], (Status::Degraded, failing.to_string()));
        assert_eq!(table.status(0), Status::Online, "the verdict stays");
        assert!(events.since(0).0.is_empty());
        let v = endpoint.view();
        let vantage = v.vantage.unwrap();
        assert_eq!((v.status, v.reason.as_str()), (Status::Online, "decided online"));
        assert_eq!((vantage.status, vantage.reason.as_str()), (Status::Online, "decided online"));
        assert_eq!(
            (vantage.views[0].status, vantage.views[0].reason.as_str()),
            (Status::Degraded, failing)
        );

        // The other replicas' views changed: evaluated again.
        *fixed.verdict.lock().unwrap() = Some(Status::Degraded);
        endpoint.refresh();
        assert_eq!(table.status(0), Status::Degraded);
        let (recorded, _) = events.since(0);
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].reason.as_deref(), Some("decided degraded"));
        let change = endpoint.view().change.unwrap();
        assert_eq!((change.from, change.to), (Status::Online, Status::Degraded));
        // A second failing monitor leaves the view degraded: nothing new to tell.
        web.record(Err(Reason::Refused), Duration::from_millis(1));
        assert_eq!(fixed.told.lock().unwrap().len(), 2);
        assert_eq!(endpoint.view().vantage.unwrap().views[0].reason, failing);

        // A live push overrides the verdict, which stays what the quorum decided.
        let push = PushedHealth::new(
            true,
            "maintenance over".into(),
            "ops".into(),
            Duration::from_secs(60),
        );
        external.pushed.set("p.", "e", push);
        endpoint.refresh();
        assert_eq!(table.status(0), Status::Online);
        let v = endpoint.view();
        assert!(v.overridden_by.is_some());
        assert_eq!(v.vantage.unwrap().status, Status::Degraded);
        assert_eq!(fixed.told.lock().unwrap().len(), 2, "a push is not this replica's view");
        external.pushed.clear("p.", "e");
        endpoint.refresh();
        assert_eq!(table.status(0), Status::Degraded);

        // Withdrawn only once retired; then nothing changes any more.
        endpoint.withdraw();
        assert!(!fixed.stopped.load(Ordering::SeqCst));
        endpoint.retire();
        endpoint.withdraw();
        assert!(fixed.stopped.load(Ordering::SeqCst));
        *fixed.verdict.lock().unwrap() = None;
        web.record(Ok(()), Duration::from_millis(1));
        db.record(Ok(()), Duration::from_millis(1));
        endpoint.refresh();
        assert_eq!(table.status(0), Status::Degraded);
        assert_eq!(fixed.told.lock().unwrap().len(), 2);
    }

    /// Without a consensus the combined status goes into the slot as it is, and there are
    /// no vantage points.
    #[test]
    fn alone_the_combined_status_is_the_slot_status() {
        let table = Arc::new(HealthTable::new([Status::Checking]));
        let events = Arc::new(Events::default());
        let monitors = [monitor("web", Protocol::Http, 80), monitor("db", Protocol::Tcp, 5432)];
        let spec = Spec::test(MonitorRule::Any, &monitors);
        let endpoint =
            Arc::new(EndpointHealth::new(spec, table.clone(), events, Arc::default(), None, None));
        assert!(endpoint.key().is_none());
        let web = Live::new(probe(&monitors[0]), Users { list: vec![(endpoint.clone(), 0)] });
        let db = Live::new(probe(&monitors[1]), Users { list: vec![(endpoint.clone(), 1)] });
        endpoint.ready();
        web.record(Err(Reason::Refused), Duration::from_millis(1));
        assert_eq!(table.status(0), Status::Checking);
        db.record(Ok(()), Duration::from_millis(1));
        assert_eq!(table.status(0), Status::Online);
        let v = endpoint.view();
        assert!(v.vantage.is_none());
        assert_eq!(v.reason, "1 of 2 monitors failing: web (connection refused); rule any");
    }
}
