//! The live state of one running probe, and where it publishes statuses.
//!
//! A probe's state machine, last result and last change sit behind a mutex that only the
//! probe's task, `Prober::adopt` and admin reads take; queries never do. Statuses reach the
//! query path through the `EndpointHealth` of every endpoint monitor using the probe, which
//! combines them by the endpoint's rule into its health slot (in a cluster, into this
//! replica's view of the endpoint, which the replicas' quorum decides on). The endpoints
//! are swapped under the same mutex on reload, so a result is never written to an endpoint
//! after a newer one has been adopted.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use super::check::Reason;
use super::endpoint::EndpointHealth;
use super::plan::ProbeKey;
use super::state::Machine;
use crate::model::health::Status;

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
    /// The probe's status on this replica.
    pub status: Status,
    pub last: Option<ProbeResult>,
    /// The last change of `status`.
    pub change: Option<StatusChange>,
    /// Results so far, by kind (indexed like `KINDS`).
    pub counts: [u64; KINDS.len()],
}

/// The endpoint monitors a probe decides: each endpoint, and the monitor's position in it.
#[derive(Default)]
pub struct Users {
    pub list: Vec<(Arc<EndpointHealth>, usize)>,
}

pub struct Live {
    pub key: ProbeKey,
    inner: Mutex<Inner>,
}

struct Inner {
    machine: Machine,
    /// The status in the users' slots: the machine's.
    published: Status,
    /// The reason of its last change.
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
    pub fn new(key: ProbeKey, users: Users) -> Live {
        let live = Live {
            key,
            inner: Mutex::new(Inner {
                machine: Machine::default(),
                published: Status::Checking,
                reason: "not probed yet".to_string(),
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

    /// Stops publishing (the probe is no longer used), under the lock, so that a result
    /// still in flight changes nothing.
    pub fn stop(&self) {
        self.lock().stopped = true;
    }

    pub fn view(&self) -> View {
        let inner = self.lock();
        View {
            status: inner.published,
            last: inner.last.clone(),
            change: inner.change.clone(),
            counts: inner.counts,
        }
    }

    /// Applies one result: updates the state machine and publishes a changed status to
    /// every user's slot (which log and record what changes for the endpoints).
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
        self.apply(last, counted.is_some());
    }

    /// Updates the state under the lock, publishing a change to the endpoints. A result
    /// that does not `count` (no data, `missing: last_known`) is shown but leaves the
    /// status machine alone.
    fn apply(&self, last: ProbeResult, count: bool) {
        let mut inner = self.lock();
        if inner.stopped {
            return;
        }
        let tolerated = self.key.monitor.tolerated_failures;
        let change = if count { inner.machine.apply(last.ok, tolerated) } else { None };
        if let Some(i) = KINDS.iter().position(|k| *k == last.kind) {
            inner.counts[i] += 1;
        }
        let (at, reason) = (last.at, last.reason.clone());
        inner.last = Some(last);
        let Some(c) = change else { return };
        let reason = reason.unwrap_or_else(|| "probe succeeded".to_string());
        self.publish(&mut inner, c.to, reason, at);
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
}
