//! The live state of one running probe, and where it publishes statuses.
//!
//! A probe's state machine, last result and last change sit behind a mutex that only the
//! probe's task, `Prober::adopt` and admin reads take; queries never do. Statuses reach the
//! query path through the `EndpointHealth` of every endpoint monitor using the probe, which
//! combines them by the endpoint's rule into its health slot. The endpoints are swapped
//! under the same mutex on reload, so a result is never written to an endpoint after a
//! newer one has been adopted.
//!
//! The status published is the probe's own, or with a `Consensus` (a cluster) the verdict
//! over every replica's view, which is evaluated again when this replica's view changes
//! and when the others' do (`reevaluate`).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use super::check::Reason;
use super::consensus::{Consensus, OwnView};
use super::endpoint::EndpointHealth;
use super::plan::ProbeKey;
use super::state::Machine;
use crate::model::health::Status;
use crate::model::vantage;

/// The outcome of the most recent run of a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    pub at: SystemTime,
    pub ok: bool,
    /// Why it failed (`None` on success).
    pub reason: Option<String>,
    /// `ok`, or the failure's `Reason::kind` (for metrics).
    pub kind: &'static str,
    /// How long the check took (the timeout, for a timeout).
    pub latency: Duration,
}

/// The most recent status change of a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusChange {
    pub at: SystemTime,
    pub from: Status,
    pub to: Status,
    pub reason: String,
}

/// Every `ProbeResult::kind`, in the order `EndpointState::results` counts them.
pub const KINDS: [&str; 18] = [
    "ok", "status", "body", "timeout", "refused", "tls", "resolve", "setup", "error", "rcode",
    "answer", "reply", "loss", "rtt", "feed", "nodata", "value", "grpc",
];

/// What `Live::view` shows of a probe.
#[derive(Clone, Debug)]
pub struct View {
    /// The status its endpoints have (the verdict, in a cluster).
    pub status: Status,
    pub last: Option<ProbeResult>,
    /// The last change of `status`.
    pub change: Option<StatusChange>,
    /// Results so far, by kind (indexed like `KINDS`).
    pub counts: [u64; KINDS.len()],
    /// In a cluster: every vantage point's view and the verdict's reason.
    pub vantage: Option<Vantage>,
}

/// How the replicas see a probe, and what they decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vantage {
    pub views: Vec<vantage::View>,
    /// Why the endpoints have their status.
    pub reason: String,
}

/// The endpoint monitors a probe decides: each endpoint, and the monitor's position in it.
#[derive(Default)]
pub struct Users {
    pub list: Vec<(Arc<EndpointHealth>, usize)>,
}

pub struct Live {
    pub key: ProbeKey,
    inner: Mutex<Inner>,
    /// With several replicas: what decides the published status.
    consensus: Option<Arc<dyn Consensus>>,
}

struct Inner {
    machine: Machine,
    /// This replica's view: the machine's status with the reason of its last change.
    own: OwnView,
    /// The status in the users' slots.
    published: Status,
    /// Why `published` is what it is (a cluster's verdict reason).
    reason: String,
    last: Option<ProbeResult>,
    change: Option<StatusChange>,
    counts: [u64; KINDS.len()],
    users: Arc<Users>,
    /// Set when the prober stops the probe: a result still in flight changes nothing.
    stopped: bool,
}

impl Live {
    /// A new probe: `checking` until its first result.
    #[cfg(test)]
    pub fn new(key: ProbeKey, users: Users) -> Live {
        Live::reporting(key, users, None)
    }

    /// A new probe. With a `consensus`, its endpoints start with the verdict over the views
    /// there are, its own `checking` one included.
    pub fn reporting(key: ProbeKey, users: Users, consensus: Option<Arc<dyn Consensus>>) -> Live {
        let own = OwnView::starting();
        let (published, reason) = match &consensus {
            Some(c) => {
                c.changed(&key, &own);
                let v = c.verdict(&key, &own);
                (v.status, v.reason)
            }
            None => (own.status, own.reason.clone()),
        };
        let live = Live {
            key,
            consensus,
            inner: Mutex::new(Inner {
                machine: Machine::default(),
                own,
                published,
                reason,
                last: None,
                change: None,
                counts: [0; KINDS.len()],
                users: Arc::new(Users::default()),
                stopped: false,
            }),
        };
        live.adopt(users);
        live
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the plain data inconsistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Points the probe at a new set of endpoints (a reload) and gives them its current
    /// status.
    pub fn adopt(&self, users: Users) {
        let mut inner = self.lock();
        for (e, i) in &users.list {
            e.set(*i, inner.published, &inner.reason);
        }
        inner.users = Arc::new(users);
    }

    /// Stops publishing (the probe is no longer used): withdraws this replica's view from
    /// the consensus, under the lock, so that a result still in flight cannot bring it back.
    pub fn stop(&self) {
        let mut inner = self.lock();
        inner.stopped = true;
        if let Some(c) = &self.consensus {
            c.stopped(&self.key);
        }
    }

    pub fn view(&self) -> View {
        let inner = self.lock();
        let vantage = self.consensus.as_ref().map(|c| Vantage {
            views: c.views(&self.key, &inner.own),
            reason: inner.reason.clone(),
        });
        View {
            status: inner.published,
            last: inner.last.clone(),
            change: inner.change.clone(),
            counts: inner.counts,
            vantage,
        }
    }

    /// Applies one result: updates the state machine, publishes a changed status to every
    /// user's slot, and logs.
    pub fn record(&self, result: Result<(), Reason>, latency: Duration) {
        let no_data = matches!(result, Err(Reason::NoData(_)));
        let counted =
            super::state::counted(result.is_ok(), no_data, self.key.monitor.params.missing());
        let ok = counted == Some(true);
        let reason = result.as_ref().err().map(ToString::to_string);
        let kind = result.as_ref().err().map_or("ok", Reason::kind);
        let last = ProbeResult { at: SystemTime::now(), ok, reason, kind, latency };
        let m = &self.key.monitor;
        tracing::debug!(
            target = %self.key.target,
            protocol = m.protocol.as_str(),
            port = m.port,
            ok,
            reason = last.reason.as_deref().unwrap_or(""),
            latency_ms = latency.as_secs_f64() * 1000.0,
            "probe result"
        );
        if let Some((from, own)) = self.apply(last, counted.is_some()) {
            self.log_own_change(from, &own);
        }
    }

    /// Updates the state under the lock, publishing a change to the endpoints; returns
    /// this replica's own change in a cluster (the status before, and the view now).
    /// A result that does not `count` (no data, `missing: last_known`) is shown but leaves
    /// the status machine alone.
    fn apply(&self, last: ProbeResult, count: bool) -> Option<(Status, OwnView)> {
        let mut inner = self.lock();
        if inner.stopped {
            return None;
        }
        let tolerated = self.key.monitor.tolerated_failures;
        let change = if count { inner.machine.apply(last.ok, tolerated) } else { None };
        if let Some(i) = KINDS.iter().position(|k| *k == last.kind) {
            inner.counts[i] += 1;
        }
        let (at, reason) = (last.at, last.reason.clone());
        inner.last = Some(last);
        let c = change?;
        let reason = reason.unwrap_or_else(|| "probe succeeded".to_string());
        inner.own = OwnView { status: c.to, reason: reason.clone(), at };
        let Some(consensus) = &self.consensus else {
            self.publish(&mut inner, c.to, reason, at);
            return None;
        };
        consensus.changed(&self.key, &inner.own);
        let v = consensus.verdict(&self.key, &inner.own);
        self.publish(&mut inner, v.status, v.reason, at);
        Some((c.from, inner.own.clone()))
    }

    /// Evaluates the verdict again (the other replicas' views changed) and publishes it
    /// when it changed; logs and records as a probe result would.
    pub fn reevaluate(&self) {
        let Some(consensus) = &self.consensus else { return };
        let mut inner = self.lock();
        if inner.stopped {
            return;
        }
        let v = consensus.verdict(&self.key, &inner.own);
        self.publish(&mut inner, v.status, v.reason, SystemTime::now());
    }

    /// Gives `status` to every endpoint monitor when it differs from what they hold (they
    /// log and record what changes for the endpoints). Called under the lock, so `adopt`
    /// cannot swap the endpoints between the decision and the updates.
    fn publish(&self, inner: &mut Inner, status: Status, reason: String, at: SystemTime) {
        let from = inner.published;
        inner.reason = reason.clone();
        if from == status {
            return;
        }
        for (e, i) in &inner.users.list {
            e.set(*i, status, &reason);
        }
        inner.published = status;
        inner.change = Some(StatusChange { at, from, to: status, reason });
    }

    /// In a cluster, this replica's own view changing is not an endpoint's status change
    /// (the verdict may stay): one line per probe says what this replica saw.
    fn log_own_change(&self, from: Status, own: &OwnView) {
        let m = &self.key.monitor;
        tracing::info!(
            target = %self.key.target,
            protocol = m.protocol.as_str(),
            port = m.port,
            old = %from,
            new = %own.status,
            reason = own.reason,
            "probe view of this replica changed"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::model::events::Events;
    use crate::model::health::HealthTable;
    use crate::model::vantage::{Verdict, View as VantageView};
    use crate::model::{Monitor, MonitorRule, Protocol};
    use crate::probe::endpoint::Spec;
    use crate::probe::plan::ProbeTarget;

    /// A consensus whose verdict the test sets, recording the own views it is told of.
    #[derive(Default)]
    struct Fixed {
        verdict: Mutex<Option<Status>>,
        told: Mutex<Vec<Status>>,
        stopped: AtomicBool,
    }

    impl Consensus for Fixed {
        fn changed(&self, _: &ProbeKey, own: &OwnView) {
            self.told.lock().unwrap().push(own.status);
        }
        fn stopped(&self, _: &ProbeKey) {
            self.stopped.store(true, Ordering::SeqCst);
        }
        fn verdict(&self, _: &ProbeKey, own: &OwnView) -> Verdict {
            let status = self.verdict.lock().unwrap().unwrap_or(own.status);
            Verdict { status, reason: format!("decided {status}") }
        }
        fn views(&self, _: &ProbeKey, own: &OwnView) -> Vec<VantageView> {
            let at = own.at;
            vec![VantageView {
                node: "me".into(),
                status: own.status,
                reason: own.reason.clone(),
                at,
            }]
        }
    }

    fn key() -> ProbeKey {
        let monitor = Monitor {
            name: "tcp".into(),
            protocol: Protocol::Tcp,
            port: 80,
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
        };
        ProbeKey { target: ProbeTarget::Ip([192, 0, 2, 1].into()), monitor }
    }

    /// The endpoints get the consensus's verdict, not the probe's own status; own changes
    /// are reported, verdict changes recorded as events, and a stopped probe is withdrawn
    /// and changes nothing more.
    #[test]
    fn a_consensus_decides_what_the_endpoints_get() {
        use crate::model::health::HealthView;
        let fixed = Arc::new(Fixed::default());
        *fixed.verdict.lock().unwrap() = Some(Status::Online);
        let table = Arc::new(HealthTable::new([Status::Checking]));
        let events = Arc::new(Events::default());
        let monitors = [key().monitor];
        let spec = Spec {
            profile: "p.".into(),
            endpoint: "e".into(),
            target: "192.0.2.1".into(),
            slot: 0,
            rule: MonitorRule::All,
            monitors: &monitors,
        };
        let endpoint = Arc::new(EndpointHealth::new(
            spec,
            table.clone(),
            events.clone(),
            Arc::default(),
            None,
        ));
        let users = Users { list: vec![(endpoint.clone(), 0)] };
        let consensus = fixed.clone() as Arc<dyn Consensus>;
        let live = Live::reporting(key(), users, Some(consensus));
        endpoint.ready();
        // Others see it online: served online before this replica's first result.
        assert_eq!(table.status(0), Status::Online);
        live.record(Err(Reason::Refused), Duration::from_millis(1));
        assert_eq!(*fixed.told.lock().unwrap(), vec![Status::Checking, Status::Degraded]);
        assert_eq!(table.status(0), Status::Online, "the verdict stays");
        assert!(events.since(0).0.is_empty());
        let v = live.view();
        let vantage = v.vantage.unwrap();
        assert_eq!((v.status, vantage.reason.as_str()), (Status::Online, "decided online"));
        assert_eq!(vantage.views[0].status, Status::Degraded);

        *fixed.verdict.lock().unwrap() = Some(Status::Degraded);
        live.reevaluate();
        assert_eq!(table.status(0), Status::Degraded);
        let (recorded, _) = events.since(0);
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].reason.as_deref(), Some("decided degraded"));
        let change = live.view().change.unwrap();
        assert_eq!((change.from, change.to), (Status::Online, Status::Degraded));

        live.stop();
        assert!(fixed.stopped.load(Ordering::SeqCst));
        *fixed.verdict.lock().unwrap() = None;
        live.record(Ok(()), Duration::from_millis(1));
        live.reevaluate();
        assert_eq!(table.status(0), Status::Degraded);
        assert_eq!(fixed.told.lock().unwrap().len(), 2);
    }
}
