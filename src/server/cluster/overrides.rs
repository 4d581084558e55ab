//! Run-time overrides shared by every replica through etcd (`<prefix>overrides/`, laid out
//! by `override_record`). A change through any replica's admin API is written to etcd
//! only; every replica, the writer included, applies it from its watch of the prefix, so
//! all of them apply the same overrides in the same order. While etcd is unreachable a
//! change is refused rather than made on one replica alone, and each replica keeps the
//! overrides it last applied.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd;
use super::mirror::{Consumer, Mirror};
use super::override_record::{Authors, Record, View, key};
use crate::server::control::Control;
use crate::server::overrides::{self, Change, OverrideError, OverrideState};
use crate::wire::name::WireName;

/// Longest wait for one etcd request of a change, or for the read that starts following
/// the prefix.
const ETCD_LIMIT: Duration = Duration::from_secs(5);

/// How long a change waits for this replica to apply what it wrote, so that a client
/// reading back sees it. Past that it answers anyway: etcd has the change, and the watch
/// applies it when it catches up.
const APPLY_LIMIT: Duration = Duration::from_secs(5);

/// How often a change reads and writes again when another replica changed the same
/// endpoint between its read and its write.
const ATTEMPTS: usize = 5;

/// Makes `change` to `endpoint` of `profile` by `by` in etcd, once it is checked against
/// the running configuration; returns once this replica applied it (or `APPLY_LIMIT`
/// passed). The write is a compare-and-swap on the key's revision, so that changes made
/// at once through several replicas (a drain here, a weight there) all count.
pub async fn change(
    control: &Control,
    session: &Session,
    profile: &WireName,
    endpoint: &str,
    change: Change,
    by: &str,
) -> Result<OverrideState, OverrideError> {
    let snapshot = control.snapshot();
    let (p, _) = overrides::check(&snapshot, profile, endpoint, change)?;
    let key = key(&session.settings.etcd.overrides_prefix(), &p.name, endpoint);
    let mut kv = session.client.kv_client();
    for _ in 0..ATTEMPTS {
        let got = ask(session, kv.get(key.clone(), None)).await?;
        let (before, revision) = match got.kvs().first() {
            // A value this replica cannot read is no override: the change replaces it.
            Some(kv) => (Record::decode(kv.value()).unwrap_or_default(), kv.mod_revision()),
            None => (Record::default(), 0),
        };
        let after = change.apply(before.overrides());
        let done = OverrideState {
            profile: p.name.clone(),
            endpoint: endpoint.to_string(),
            drained: after.drained,
            weight_override: after.weight,
            bias_override: after.bias,
        };
        if after == before.overrides() {
            return Ok(done);
        }
        // An emptied override is written before the key is deleted, so that every replica
        // learns who made the change from the value.
        let record = Record::new(after, by, SystemTime::now());
        let written = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
            .and_then([TxnOp::put(key.clone(), record.encode(), None)]);
        let written = ask(session, kv.txn(written)).await?;
        if !written.succeeded() {
            continue;
        }
        let revision = written.header().map_or(0, |h| h.revision());
        if after.is_empty() {
            let delete = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
                .and_then([TxnOp::delete(key.clone(), None)]);
            // Left in place, the empty record is harmless: it is no override.
            if let Err(e) = ask(session, kv.txn(delete)).await {
                tracing::debug!(%key, error = %e, "cannot delete an emptied override");
            }
        }
        if !control.wait_shared_overrides(revision, APPLY_LIMIT).await {
            tracing::warn!(%key, revision, limit = ?APPLY_LIMIT, "override written to etcd but not applied here yet");
        }
        return Ok(done);
    }
    Err(OverrideError::Contended)
}

/// One etcd request of a change, within `ETCD_LIMIT`; any failure means etcd is not
/// reachable enough to share the change.
async fn ask<T>(
    session: &Session,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, OverrideError> {
    let endpoints = || session.settings.etcd.endpoints.join(",");
    etcd::within(ETCD_LIMIT, request)
        .await
        .map_err(|e| OverrideError::Unavailable(e.at(&endpoints())))
}

/// Follows `<prefix>overrides/` for one replica and applies what etcd holds.
pub type Follower = Mirror<Applier>;

/// Applies the overrides etcd holds to this replica's configuration.
pub struct Applier {
    control: Arc<Control>,
}

/// Starts following the overrides etcd holds and applies the first read, waiting at most
/// `ETCD_LIMIT`: at startup, before the listeners open, so that a replica started later
/// never answers with an endpoint the others drained. When etcd does not answer in time it
/// says what applies instead; `run` applies etcd's as soon as it answers.
pub async fn follow(
    control: Arc<Control>,
    session: Arc<Session>,
    cancel: CancellationToken,
) -> Follower {
    let prefix = session.settings.etcd.overrides_prefix();
    let state_file = control.state_file();
    let mut f = Mirror::spawn(Applier { control }, session, &prefix, cancel);
    let Err(error) = f.first_read(ETCD_LIMIT).await else {
        return f;
    };
    match state_file {
        Some(path) => tracing::warn!(
            error,
            state_file = %path.display(),
            "cannot read the overrides from etcd at startup; applying the state file's copy until etcd answers"
        ),
        None => tracing::warn!(
            error,
            "cannot read the overrides from etcd at startup and there is no state_file with a copy: none apply until etcd answers"
        ),
    }
    f
}

impl Consumer for Applier {
    type Record = Record;
    const WHAT: &'static str = "overrides";
    const UNDER: &'static str = "overrides/";

    /// `Control::apply_shared_overrides` off the runtime's threads: a rebuild of a large
    /// configuration takes a while. Only what differs from what is applied is rebuilt.
    async fn apply(&mut self, view: &View, authors: Authors, revision: i64) {
        let (control, next) = (self.control.clone(), view.overrides());
        let applied = tokio::task::spawn_blocking(move || {
            control.apply_shared_overrides(next, &authors, revision)
        });
        if let Err(e) = applied.await {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}
