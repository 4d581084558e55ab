//! Pushed health shared by every replica through etcd (`<prefix>health_pushed/`, laid out by
//! `pushed_record`). A push or a clear through any replica's admin API is written to etcd
//! only; every replica, the writer included, applies it from its watch of the prefix into
//! its prober's pushed statuses, logs it and records its event with the `by` stored there,
//! as drains are. While etcd is unreachable a push or a clear is refused rather than made on
//! one replica alone; each replica keeps the pushes it applied last, which expire by its
//! own clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd;
use super::mirror::{Consumer, Mirror};
use super::override_record::{Authors, key};
use super::pushed_record::{Push, Record, Step, Target, View, steps};
use crate::probe::{PushError, PushedHealth};
use crate::server::control::Control;
use crate::server::pushes;

/// Longest wait for one etcd request of a push or a clear, or for the read that starts
/// following the prefix.
const ETCD_LIMIT: Duration = Duration::from_secs(5);

/// How long a push or a clear waits for this replica to apply what it wrote, so that a
/// client reading back sees it. Past that it answers anyway: etcd has it, and the watch
/// applies it when it catches up.
const APPLY_LIMIT: Duration = Duration::from_secs(5);

/// How often a clear reads and writes again when the key changed between its read and its
/// write (another replica pushed meanwhile).
const ATTEMPTS: usize = 5;

/// Why a push or a clear was not shared.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// The running configuration has no such endpoint to push to.
    #[error(transparent)]
    Refused(#[from] PushError),
    #[error(
        "etcd did not take the change ({0}); replicas share pushed health through etcd, so \
         none can be pushed or cleared while it is unreachable"
    )]
    Unavailable(String),
    #[error(
        "the endpoint's pushed health kept changing in etcd meanwhile; nothing was cleared, try again"
    )]
    Contended,
}

/// Writes `push` to `endpoint` of `profile` (absolute) into etcd, once the running
/// configuration takes it; returns once this replica applied it (or `APPLY_LIMIT` passed).
/// A push replaces whatever is there, as on one server.
pub async fn push(
    control: &Control,
    session: &Session,
    profile: &str,
    endpoint: &str,
    push: &PushedHealth,
) -> Result<(), ShareError> {
    control.prober.check_pushable(profile, endpoint)?;
    let key = key(&session.settings.etcd.pushed_prefix(), profile, endpoint);
    let value = Record::Push(Push::of(push)).encode();
    let mut kv = session.client.kv_client();
    let put = ask(session, kv.put(key.clone(), value, None)).await?;
    wait_applied(control, &key, put.header().map_or(0, |h| h.revision())).await;
    Ok(())
}

/// Clears the push to `endpoint` of `profile` (absolute) in etcd by `by`; whether there was
/// one. The key first holds who cleared it, so that every replica learns it, then is
/// deleted; both writes compare the key's revision, so that a push made meanwhile through
/// another replica is not cleared unseen.
pub async fn clear(
    control: &Control,
    session: &Session,
    profile: &str,
    endpoint: &str,
    by: &str,
) -> Result<bool, ShareError> {
    control.prober.check_pushable(profile, endpoint)?;
    let key = key(&session.settings.etcd.pushed_prefix(), profile, endpoint);
    let mut kv = session.client.kv_client();
    for _ in 0..ATTEMPTS {
        let got = ask(session, kv.get(key.clone(), None)).await?;
        let Some(found) = got.kvs().first() else {
            return Ok(false);
        };
        // A clear whose delete failed, or a value no replica reads: no push, only a key
        // to delete.
        let pushed = matches!(Record::decode(found.value()), Ok(Record::Push(_)));
        let mut revision = found.mod_revision();
        if pushed {
            let cleared = Record::Cleared { by: by.to_string() }.encode();
            let written = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
                .and_then([TxnOp::put(key.clone(), cleared, None)]);
            let written = ask(session, kv.txn(written)).await?;
            if !written.succeeded() {
                continue;
            }
            revision = written.header().map_or(0, |h| h.revision());
        }
        let delete = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
            .and_then([TxnOp::delete(key.clone(), None)]);
        // Left in place, a clear is harmless: it is no push.
        if let Err(e) = ask(session, kv.txn(delete)).await {
            tracing::debug!(%key, error = %e, "cannot delete a cleared push");
        }
        wait_applied(control, &key, revision).await;
        return Ok(pushed);
    }
    Err(ShareError::Contended)
}

/// One etcd request of a push or a clear, within `ETCD_LIMIT`; any failure means etcd is
/// not reachable enough to share it.
async fn ask<T>(
    session: &Session,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, ShareError> {
    let endpoints = || session.settings.etcd.endpoints.join(",");
    etcd::within(ETCD_LIMIT, request).await.map_err(|e| ShareError::Unavailable(e.at(&endpoints())))
}

async fn wait_applied(control: &Control, key: &str, revision: i64) {
    if !control.pushed_revision.wait(revision, APPLY_LIMIT).await {
        tracing::warn!(%key, revision, limit = ?APPLY_LIMIT, "pushed health written to etcd but not applied here yet");
    }
}

/// Follows `<prefix>health_pushed/` for one replica and applies the pushes etcd holds.
pub type Follower = Mirror<Applier>;

/// Applies the pushes etcd holds to this replica's prober.
pub struct Applier {
    control: Arc<Control>,
    /// The pushes applied to the prober, as etcd held them.
    applied: BTreeMap<Target, Push>,
}

/// Starts following the pushes etcd holds and applies the first read, waiting at most
/// `ETCD_LIMIT`: at startup, before the listeners open, so that a replica started after a
/// push answers with it from its first query. From now on the prober keeps pushes for
/// endpoints this configuration lacks (they apply when one appears).
pub async fn follow(
    control: Arc<Control>,
    session: Arc<Session>,
    cancel: CancellationToken,
) -> Follower {
    control.prober.share_pushes();
    let prefix = session.settings.etcd.pushed_prefix();
    let applier = Applier { control, applied: BTreeMap::new() };
    let mut f = Mirror::spawn(applier, session, &prefix, cancel);
    if let Err(error) = f.first_read(ETCD_LIMIT).await {
        tracing::warn!(
            error,
            "cannot read the pushed health from etcd at startup: none applies until etcd answers"
        );
    }
    f
}

impl Consumer for Applier {
    type Record = Record;
    const WHAT: &'static str = "pushed health";
    const UNDER: &'static str = "health_pushed/";

    /// Brings the prober's pushes to the view's, as of `revision`: each new push is
    /// logged and recorded by its `by` (unless it expired before it got here), each clear
    /// by who made it (`authors`: the clears in this batch or still in etcd).
    async fn apply(&mut self, view: &View, authors: Authors, revision: i64) {
        let next = view.pushes();
        let (now, now_wall) = (Instant::now(), SystemTime::now());
        let (prober, events) = (&self.control.prober, &self.control.events);
        for step in steps(&self.applied, &next, &authors) {
            match step {
                Step::Set((profile, endpoint), push) => {
                    let applied = push.applied(now, now_wall);
                    let live = applied.is_live(now);
                    prober.apply_shared_push(&profile, &endpoint, Some(applied.clone()));
                    if live {
                        pushes::pushed(events, &profile, &endpoint, &applied);
                    } else {
                        tracing::debug!(%profile, %endpoint, by = %push.by, "pushed health read from etcd had expired already");
                    }
                }
                Step::Clear((profile, endpoint), by) => {
                    if prober.apply_shared_push(&profile, &endpoint, None).is_some() {
                        pushes::cleared(events, &profile, &endpoint, &by);
                    }
                }
            }
        }
        self.applied = next;
        self.control.pushed_revision.advance(revision);
    }
}
