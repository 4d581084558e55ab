//! Real user measurements shared by the replicas through etcd (`docs/rum.md`, "In a
//! cluster"). Every `rum.share_interval`:
//!
//! - each replica writes its figures per network (`geo::rum::shared::NodeRecord`) under
//!   `<prefix>rum/nodes/<node>/<NN>`, a few keys of at most 1 MB, not under its lease: a
//!   stopped replica's measurements count until they are a window old;
//! - the replica leading the role `rum` reads every replica's keys, merges them, builds
//!   the table with the preferences of the table published before (so a new leader goes
//!   on from where the last one was), and writes it under `<prefix>rum/table/<NN>`;
//! - every replica, the leader included, follows `<prefix>rum/table/` and publishes
//!   exactly that table to its query path, once all the keys of one table are in.
//!
//! So the replicas answer a network alike, whichever of them its browsers report to.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use etcd_client::DeleteOptions;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::{EtcdError, fetch_prefix, prefix_end};
use super::follow::{self, Event, KeyRange};
use crate::geo::rum::MeasuredLatency;
use crate::geo::rum::shared::{self, NodeRecord, TableChunk};
use crate::server::rum::Rum;

/// Longest wait for one etcd request.
const REQUEST_LIMIT: Duration = Duration::from_secs(5);

/// `<prefix>rum/nodes/`.
fn nodes_prefix(session: &Session) -> String {
    format!("{}rum/nodes/", session.settings.etcd.prefix)
}

/// `<prefix>rum/table/`.
fn table_prefix(session: &Session) -> String {
    format!("{}rum/table/", session.settings.etcd.prefix)
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()
}

/// Starts sharing: this replica's figures, the merge while `leading` says this replica
/// leads the role `rum`, and the published table's follower.
pub fn spawn(
    tasks: &mut JoinSet<()>,
    rum: Arc<Rum>,
    session: Arc<Session>,
    leading: watch::Receiver<bool>,
    cancel: CancellationToken,
) {
    let installed = Arc::new(AtomicU64::new(0));
    tasks.spawn(share(rum.clone(), session.clone(), cancel.clone()));
    tasks.spawn(lead(rum.clone(), session.clone(), leading, installed.clone(), cancel.clone()));
    tasks.spawn(follow_table(rum, session, installed, cancel));
}

/// Runs `request` within `REQUEST_LIMIT`.
async fn ask<T>(
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(REQUEST_LIMIT, request).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(EtcdError::Timeout(REQUEST_LIMIT)),
    }
}

/// Writes `chunks` as `<dir>00`, `<dir>01`, … and deletes the keys after them in `dir`.
async fn write_chunks(session: &Session, dir: &str, chunks: Vec<Vec<u8>>) -> Result<(), EtcdError> {
    let mut kv = session.client.kv_client();
    let n = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        ask(kv.put(format!("{dir}{i:02}"), chunk, None)).await?;
    }
    let from = format!("{dir}{n:02}");
    let options = DeleteOptions::new().with_range(prefix_end(dir.as_bytes()));
    ask(kv.delete(from, Some(options))).await?;
    Ok(())
}

/// Logs a failure to share once until sharing works again.
fn failed(what: &str, failing: &mut bool, e: &EtcdError) {
    if !*failing {
        tracing::warn!(error = %e, "{what}; trying again at the next interval");
    }
    *failing = true;
}

/// How long shutdown waits for the last write of this replica's figures.
const LAST_SHARE: Duration = Duration::from_secs(1);

/// Writes this replica's figures every `rum.share_interval` until `cancel`, then once more
/// (within `LAST_SHARE`), so that the reports taken since the last write count.
async fn share(rum: Arc<Rum>, session: Arc<Session>, cancel: CancellationToken) {
    let dir = format!("{}{}/", nodes_prefix(&session), session.settings.node);
    let mut tick = tokio::time::interval(rum.settings.share_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut failing, mut capped) = (false, false);
    loop {
        let stopping = tokio::select! {
            _ = cancel.cancelled() => true,
            _ = tick.tick() => false,
        };
        let r = rum.clone();
        let encoded = tokio::task::spawn_blocking(move || {
            let summaries = r.with_aggregate(|a, now| a.summaries(now));
            let (chunks, shared) =
                shared::encode_node(unix_now().as_secs(), &r.regions(), &summaries);
            (chunks, shared, summaries.len())
        })
        .await;
        let Ok((chunks, shared, held)) = encoded else {
            if stopping {
                return;
            }
            continue;
        };
        if shared < held && !capped {
            tracing::warn!(
                shared,
                held,
                "more client networks than the shared keys hold; the least recently reported are not shared"
            );
        }
        capped = shared < held;
        if stopping {
            let _ = tokio::time::timeout(LAST_SHARE, write_chunks(&session, &dir, chunks)).await;
            return;
        }
        match write_chunks(&session, &dir, chunks).await {
            Ok(()) => failing = false,
            Err(e) => failed("cannot share the real user measurements in etcd", &mut failing, &e),
        }
    }
}

/// While this replica leads, merges every replica's figures into the shared table every
/// `rum.share_interval`.
async fn lead(
    rum: Arc<Rum>,
    session: Arc<Session>,
    mut leading: watch::Receiver<bool>,
    installed: Arc<AtomicU64>,
    cancel: CancellationToken,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = leading.wait_for(|l| *l) => if r.is_err() { return },
        }
        // What this term wrote last: a table that has not changed is not written again.
        let mut written = None;
        let mut tick = tokio::time::interval(rum.settings.share_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while *leading.borrow() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = leading.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => return,
                },
                _ = tick.tick() => {}
            }
            match merge_once(&rum, &session, &installed, &mut written).await {
                Ok(()) => failing = false,
                Err(e) => failed("cannot publish the shared measured table", &mut failing, &e),
            }
        }
    }
}

/// The rows a leader wrote last (the table's bytes as of generation 0), and the generation
/// it wrote them as.
type Written = Option<(Vec<Vec<u8>>, u64)>;

/// Reads every replica's figures, builds the table and writes it, unless it is the one
/// written last and every replica follows that one already (as this one does).
async fn merge_once(
    rum: &Arc<Rum>,
    session: &Session,
    installed: &AtomicU64,
    written: &mut Written,
) -> Result<(), EtcdError> {
    let prefix = nodes_prefix(session);
    let fetched = tokio::time::timeout(REQUEST_LIMIT * 6, fetch_prefix(&session.client, &prefix))
        .await
        .map_err(|_| EtcdError::Timeout(REQUEST_LIMIT * 6))??;
    let (r, now) = (rum.clone(), unix_now());
    let built = tokio::task::spawn_blocking(move || {
        // Per replica (by name, in order), its keys' records.
        let mut nodes: BTreeMap<String, Vec<NodeRecord>> = BTreeMap::new();
        for e in &fetched.entries {
            let node = e.key.strip_prefix(&prefix).and_then(|k| k.split('/').next()).unwrap_or("");
            match shared::decode_node(&e.value) {
                Ok(rec) => nodes.entry(node.to_string()).or_default().push(rec),
                Err(why) => {
                    tracing::debug!(key = %e.key, %why, "etcd key under rum/nodes/ ignored")
                }
            }
        }
        let params = &r.settings.aggregation;
        let regions = r.regions();
        let merged = shared::merge(
            nodes.values().map(Vec::as_slice),
            &regions,
            params.half_life,
            params.window,
            now.as_secs(),
        );
        let previous = r.table();
        MeasuredLatency::build(params, r.columns(), merged.into_iter(), Some(&previous))
    })
    .await
    .map_err(|_| EtcdError::Refused("the table could not be built".into()))?;
    let (rows, _) = shared::encode_table(&built, 0);
    let current = installed.load(Ordering::Relaxed);
    if written.as_ref().is_some_and(|(last, generation)| *last == rows && *generation == current) {
        return Ok(());
    }
    let generation = (now.as_millis() as u64).max(current + 1);
    let (chunks, published) = shared::encode_table(&built, generation);
    if published < built.len() {
        tracing::warn!(
            published,
            rows = built.len(),
            "the measured table is larger than its keys hold; rows left out"
        );
    }
    write_chunks(session, &table_prefix(session), chunks).await?;
    *written = Some((rows, generation));
    Ok(())
}

/// Follows `<prefix>rum/table/` and publishes each complete table until `cancel`.
async fn follow_table(
    rum: Arc<Rum>,
    session: Arc<Session>,
    installed: Arc<AtomicU64>,
    cancel: CancellationToken,
) {
    let prefix = table_prefix(&session);
    let mut events = follow::spawn(session, KeyRange::prefix(&prefix), None, cancel.clone());
    let mut chunks: BTreeMap<String, TableChunk> = BTreeMap::new();
    let take = |chunks: &mut BTreeMap<String, TableChunk>, key: &str, value: Option<&[u8]>| {
        chunks.remove(key);
        if let Some(v) = value {
            match shared::decode_table(v) {
                Ok(c) => {
                    chunks.insert(key.to_string(), c);
                }
                Err(why) => tracing::debug!(%key, %why, "etcd key under rum/table/ ignored"),
            }
        }
    };
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => return,
            e = events.recv() => match e { Some(e) => e, None => return },
        };
        match event {
            Event::Snapshot { entries, .. } => {
                chunks.clear();
                for e in &entries {
                    take(&mut chunks, &e.key, Some(&e.value));
                }
            }
            Event::Changes { changes, .. } => {
                for c in &changes {
                    take(&mut chunks, &c.key, c.value.as_deref());
                }
            }
            Event::Lost { .. } | Event::Resumed { .. } => continue,
        }
        let regions = rum.regions();
        let Some((generation, rows)) = shared::assemble(chunks.values(), &regions) else {
            continue;
        };
        if generation == installed.load(Ordering::Relaxed) {
            continue;
        }
        let table = MeasuredLatency::from_rows(&rum.settings.aggregation, rum.columns(), rows);
        rum.install(table);
        installed.store(generation, Ordering::Relaxed);
        // Chunks of older tables are left by a leader that was cut off mid-write.
        chunks.retain(|_, c| c.generation >= generation);
    }
}
