//! One monitored endpoint's status: its monitors' results (probes report theirs, `pushed`
//! and `file` monitors read `External`) combined by its rule, a live push overriding an
//! endpoint without a `pushed` monitor, written into the endpoint's health slot.
//!
//! Each reload makes new `EndpointHealth`s, seeded with the previous ones' statuses, so
//! that only real changes are logged and recorded as events. Until `ready`, while the
//! reload's probes report, nothing is published. The state sits behind a mutex that probes
//! (under their own), the admin API and the file watcher take; queries never.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use tokio::time::Instant;

use super::external::External;
use super::live::StatusChange;
use super::pushed::PushedHealth;
use crate::model::events::{Event, Events, Kind};
use crate::model::health::{HealthTable, Status};
use crate::model::monitor_rule::{MonitorResult, combine};
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
    state: Mutex<State>,
}

struct State {
    monitors: Vec<MonitorState>,
    published: Status,
    reason: String,
    change: Option<StatusChange>,
    overridden_by: Option<PushedHealth>,
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
    /// reload) had: the published status, its last change, and each monitor's last known
    /// result by name.
    pub fn new(
        spec: Spec<'_>,
        table: Arc<HealthTable>,
        events: Arc<Events>,
        external: Arc<External>,
        previous: Option<&EndpointHealth>,
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
        drop(before);
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
            state: Mutex::new(State {
                monitors,
                published,
                reason,
                change,
                overridden_by: None,
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

    /// Reads the external results again (a push, a file changed, a push expired).
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
        EndpointView {
            status: st.published,
            reason: st.reason.clone(),
            rule: self.rule,
            monitors: st.monitors.clone(),
            change: st.change.clone(),
            overridden_by: st.overridden_by.clone(),
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

    /// The status the rule gives now, and why; keeps the reason and the overriding push.
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
        st.overridden_by = None;
        if let Some(p) = live.filter(|_| !self.has_pushed) {
            status = if p.healthy { Status::Online } else { Status::Degraded };
            reason = format!("{} (overrides the monitors until the push expires)", p.describe());
            st.overridden_by = Some(p);
        }
        st.reason.clone_from(&reason);
        (status, reason)
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

/// The status of an endpoint `p./e` at slot 0 of `table` with `monitor` alone, for tests.
#[cfg(test)]
pub fn alone(
    monitor: &Monitor,
    table: Arc<HealthTable>,
    events: Arc<Events>,
) -> Arc<EndpointHealth> {
    let monitors = std::slice::from_ref(monitor);
    let spec = Spec {
        profile: "p.".into(),
        endpoint: "e".into(),
        target: "192.0.2.1".into(),
        slot: 0,
        rule: MonitorRule::All,
        monitors,
    };
    Arc::new(EndpointHealth::new(spec, table, events, Arc::default(), None))
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
