//! The live state of one running probe, and where it publishes statuses.
//!
//! A probe's state machine, last result and last change sit behind a mutex that only the
//! probe's task, `Prober::adopt` and admin reads take; queries never do. Statuses reach the
//! query path by being stored into the atomic health slots of every endpoint using the
//! probe. The slots and the table they live in are swapped under the same mutex on reload,
//! so a result is never written to a table after a newer one has been adopted.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use super::check::Reason;
use super::plan::{ProbeKey, User};
use super::state::Machine;
use crate::model::Protocol;
use crate::model::events::{Event, Events, Kind};
use crate::model::health::{HealthTable, Status};

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
pub const KINDS: [&str; 9] =
    ["ok", "status", "body", "timeout", "refused", "tls", "resolve", "setup", "error"];

/// What `Live::view` shows of a probe.
#[derive(Clone, Debug)]
pub struct View {
    pub status: Status,
    pub last: Option<ProbeResult>,
    pub change: Option<StatusChange>,
    /// Results so far, by kind (indexed like `KINDS`).
    pub counts: [u64; KINDS.len()],
}

/// The endpoints a probe decides, and the health table their slots are in.
#[derive(Debug)]
pub struct Users {
    pub table: Arc<HealthTable>,
    pub list: Vec<User>,
}

pub struct Live {
    pub key: ProbeKey,
    inner: Mutex<Inner>,
    /// Where status changes are recorded, one event per endpoint.
    events: Arc<Events>,
}

struct Inner {
    machine: Machine,
    last: Option<ProbeResult>,
    change: Option<StatusChange>,
    counts: [u64; KINDS.len()],
    users: Arc<Users>,
}

impl Live {
    /// A new probe: `checking` until its first result. Its status changes are recorded in
    /// a list of its own.
    #[cfg(test)]
    pub fn new(key: ProbeKey, users: Users) -> Live {
        Live::reporting(key, users, Arc::default())
    }

    /// A new probe that records its status changes in `events`.
    pub fn reporting(key: ProbeKey, users: Users, events: Arc<Events>) -> Live {
        let live = Live {
            key,
            events,
            inner: Mutex::new(Inner {
                machine: Machine::default(),
                last: None,
                change: None,
                counts: [0; KINDS.len()],
                users: Arc::new(Users { table: users.table.clone(), list: Vec::new() }),
            }),
        };
        live.adopt(users);
        live
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the plain data inconsistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Points the probe at a new set of endpoints (a reload) and writes its current status
    /// into their slots.
    pub fn adopt(&self, users: Users) {
        let mut inner = self.lock();
        let status = inner.machine.status();
        for u in &users.list {
            users.table.set(u.slot, status);
        }
        inner.users = Arc::new(users);
    }

    pub fn view(&self) -> View {
        let inner = self.lock();
        View {
            status: inner.machine.status(),
            last: inner.last.clone(),
            change: inner.change.clone(),
            counts: inner.counts,
        }
    }

    /// Applies one result: updates the state machine, publishes a changed status to every
    /// user's slot, and logs.
    pub fn record(&self, result: Result<(), Reason>, latency: Duration) {
        let ok = result.is_ok();
        let reason = result.as_ref().err().map(ToString::to_string);
        let kind = result.as_ref().err().map_or("ok", Reason::kind);
        let last = ProbeResult { at: SystemTime::now(), ok, reason, kind, latency };
        let m = &self.key.monitor;
        tracing::debug!(
            target = %self.key.target,
            protocol = protocol_name(m.protocol),
            port = m.port,
            ok,
            reason = last.reason.as_deref().unwrap_or(""),
            latency_ms = latency.as_secs_f64() * 1000.0,
            "probe result"
        );
        if let Some((change, users)) = self.apply(last) {
            self.log_change(&change, &users);
        }
    }

    /// Updates the state under the lock; returns the change, if any, and who it affects.
    fn apply(&self, last: ProbeResult) -> Option<(StatusChange, Arc<Users>)> {
        let mut inner = self.lock();
        let change = inner.machine.apply(last.ok, self.key.monitor.tolerated_failures);
        if let Some(i) = KINDS.iter().position(|k| *k == last.kind) {
            inner.counts[i] += 1;
        }
        let (at, reason) = (last.at, last.reason.clone());
        inner.last = Some(last);
        let c = change?;
        // Published while still holding the lock, so `adopt` cannot swap the table between
        // the state change and the stores.
        for u in &inner.users.list {
            inner.users.table.set(u.slot, c.to);
        }
        let reason = reason.unwrap_or_else(|| "probe succeeded".to_string());
        let change = StatusChange { at, from: c.from, to: c.to, reason };
        inner.change = Some(change.clone());
        Some((change, inner.users.clone()))
    }

    /// One line and one event per endpoint: operators search logs by profile and
    /// endpoint, and a status page shows endpoints, not probes.
    fn log_change(&self, c: &StatusChange, users: &Users) {
        for u in &users.list {
            let event = Event::new(Kind::Status, &u.profile, &u.endpoint).change(c.from, c.to);
            self.events.record(Event { time: c.at, ..event.reason(c.reason.as_str()) });
            tracing::info!(
                profile = %u.profile,
                endpoint = %u.endpoint,
                target = %self.key.target,
                old = %c.from,
                new = %c.to,
                reason = c.reason,
                "endpoint status changed"
            );
        }
    }
}

pub fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Http => "http",
        Protocol::Https => "https",
        Protocol::Tcp => "tcp",
    }
}
