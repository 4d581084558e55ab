//! Run-time overrides shared by every replica through etcd (`<prefix>overrides/`, laid out
//! by `override_record`). A change through any replica's admin API is written to etcd
//! only; every replica, the writer included, applies it from its watch of the prefix, so
//! all of them apply the same overrides in the same order. While etcd is unreachable a
//! change is refused rather than made on one replica alone, and each replica keeps the
//! overrides it last applied.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, EventType, Txn, TxnOp, WatchOptions};
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::{Backoff, MAX_MESSAGE, fetch_prefix};
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
        let got = ask(kv.get(key.clone(), None)).await?;
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
        let written = ask(kv.txn(written)).await?;
        if !written.succeeded() {
            continue;
        }
        let revision = written.header().map_or(0, |h| h.revision());
        if after.is_empty() {
            let delete = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
                .and_then([TxnOp::delete(key.clone(), None)]);
            // Left in place, the empty record is harmless: it is no override.
            if let Err(e) = ask(kv.txn(delete)).await {
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
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, OverrideError> {
    match tokio::time::timeout(ETCD_LIMIT, request).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(OverrideError::Unavailable(e.to_string())),
        Err(_) => Err(OverrideError::Unavailable(format!("no answer within {ETCD_LIMIT:?}"))),
    }
}

const WARNED_KEYS: usize = 10_000;

/// Follows `<prefix>overrides/` for one replica: what it last read there, and from which
/// revision on it watches.
pub struct Follower {
    control: Arc<Control>,
    session: Arc<Session>,
    prefix: String,
    /// The prefix as read, and its revision, until the watch starts from there.
    read: Option<(View, i64)>,
    backoff: Backoff,
    /// Keys already warned about, so that a key that stays wrong is logged once (at most
    /// `WARNED_KEYS`; then forgotten, so that warnings come again rather than memory grow).
    warned: HashSet<String>,
}

impl Follower {
    /// Reads the overrides etcd holds and applies them, within `ETCD_LIMIT`: at startup,
    /// before the listeners open, so that a replica started later never answers with an
    /// endpoint the others drained. When etcd does not answer in time it says what
    /// applies instead; `run` applies etcd's as soon as it answers.
    pub async fn start(control: Arc<Control>, session: Arc<Session>) -> Follower {
        let prefix = session.settings.etcd.overrides_prefix();
        let mut f = Follower {
            control,
            session,
            prefix,
            read: None,
            backoff: Backoff::default(),
            warned: HashSet::new(),
        };
        if let Err(error) = f.read().await {
            match f.control.state_file() {
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
        }
        f
    }

    /// Follows the prefix until `cancel`: watches it from the revision after the last
    /// read and applies every batch of changes. When the watch breaks (etcd unreachable,
    /// or its revision compacted away) it reads the prefix again, after a backoff unless
    /// the revision was compacted, and applies only what differs from what is applied: a
    /// replica back from an outage rebuilds once at most.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let stopped = tokio::select! {
                _ = cancel.cancelled() => return,
                stopped = self.follow() => stopped,
            };
            tracing::debug!(why = %stopped.why, "following the overrides in etcd again");
            if !stopped.compacted {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(self.backoff.next_delay()) => {}
                }
            }
        }
    }

    /// Reads the whole prefix and applies it; keeps it for the watch.
    async fn read(&mut self) -> Result<(), String> {
        let fetched = fetch_prefix(&self.session.client, &self.prefix);
        let fetched = match tokio::time::timeout(ETCD_LIMIT, fetched).await {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("no answer within {ETCD_LIMIT:?}")),
        };
        let mut view = View::new(&self.prefix);
        for e in &fetched.entries {
            if let Err(why) = view.put(&e.key, &e.value) {
                self.warn(&e.key, why);
            }
        }
        apply(&self.control, &view, view.authors(), fetched.revision).await;
        self.read = Some((view, fetched.revision));
        Ok(())
    }

    fn warn(&mut self, key: &str, why: String) {
        if self.warned.len() >= WARNED_KEYS {
            self.warned.clear();
        }
        if self.warned.insert(key.to_string()) {
            tracing::warn!(%key, why, "etcd key under overrides/ ignored");
        }
    }

    /// Reads the prefix (unless `start` just did), then watches it until the watch breaks.
    async fn follow(&mut self) -> Stopped {
        let (mut view, read_at) = match self.read.take() {
            Some(read) => read,
            None => match self.read().await {
                Ok(()) => self.read.take().expect("just read"),
                Err(why) => return Stopped::broken(why),
            },
        };
        let options = WatchOptions::new().with_prefix().with_start_revision(read_at + 1);
        let mut watches = self.session.client.watch_client().max_decoding_message_size(MAX_MESSAGE);
        let mut stream = match watches.watch(self.prefix.as_str(), Some(options)).await {
            Ok(s) => s,
            Err(e) => return Stopped::broken(e),
        };
        self.backoff.reset();
        loop {
            let resp = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return Stopped::broken("etcd ended the watch"),
                Err(e) => return Stopped::broken(e),
            };
            if resp.compact_revision() > 0 {
                let why = format!("revision {} was compacted", read_at + 1);
                return Stopped { why, compacted: true };
            }
            if resp.canceled() {
                let why = format!("etcd cancelled the watch: {}", resp.cancel_reason());
                return Stopped::broken(why);
            }
            let mut revision = 0;
            // Who made each change of this batch: an emptied override's author is in the
            // value written just before its key was deleted, perhaps in the same batch.
            let mut authors = Authors::new();
            for event in resp.events() {
                let Some(kv) = event.kv() else { continue };
                revision = revision.max(kv.mod_revision());
                let Ok(k) = kv.key_str() else { continue };
                match event.event_type() {
                    EventType::Put => match view.put(k, kv.value()) {
                        Ok((target, record)) if !record.by.is_empty() => {
                            authors.insert(target.clone(), record.by.clone());
                        }
                        Ok(_) => {}
                        Err(why) => self.warn(k, why),
                    },
                    EventType::Delete => view.delete(k),
                }
            }
            if revision > 0 {
                let mut all = view.authors();
                all.append(&mut authors);
                apply(&self.control, &view, all, revision).await;
            }
        }
    }
}

/// Why `follow` stopped.
struct Stopped {
    why: String,
    /// The watch's revision is gone from etcd's history: read the prefix again at once.
    compacted: bool,
}

impl Stopped {
    fn broken(why: impl ToString) -> Stopped {
        Stopped { why: why.to_string(), compacted: false }
    }
}

/// `Control::apply_shared_overrides` off the runtime's threads: a rebuild of a large
/// configuration takes a while.
async fn apply(control: &Arc<Control>, view: &View, authors: Authors, revision: i64) {
    let (control, next) = (control.clone(), view.overrides());
    let applied = tokio::task::spawn_blocking(move || {
        control.apply_shared_overrides(next, &authors, revision)
    });
    if let Err(e) = applied.await {
        std::panic::resume_unwind(e.into_panic());
    }
}
