//! This replica's registration: `<prefix>nodes/<node>` holds a JSON `NodeRecord` of what it
//! serves (profiles revision, generation), its version, start time and addresses, under
//! the session's lease, so that it vanishes with the replica. It is rewritten when what
//! it serves changes and when a new lease replaces an expired one.
//!
//! Two replicas configured with the same node name cannot both register: the key stays
//! with the lease that wrote it first. The other one keeps serving (refusing to answer DNS
//! over a naming mistake would be worse), is not listed, and says so in its log: at warn
//! while the key could still be a previous run's waiting for its lease to expire, then at
//! error once that lease has outlived its time to live, being renewed by a live replica.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::{self, Backoff, EtcdError};
use crate::model::cluster::EtcdSettings;
use crate::server::control::Control;

/// What a replica registers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node: String,
    /// The profiles revision it serves; 0 when its profiles come from files.
    pub revision: i64,
    /// Its running configuration's generation (local: it counts this replica's reloads).
    pub generation: u64,
    /// steerdns's version.
    pub version: String,
    /// When it started, RFC 3339 in UTC.
    pub started: String,
    /// The addresses it answers DNS on.
    pub dns: Vec<String>,
    /// Its admin API, when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
}

/// Every replica registered, in node order.
#[derive(Clone, Debug, Default)]
pub struct Listed {
    pub nodes: Vec<NodeRecord>,
    /// Keys under `nodes/` whose value is no `NodeRecord`, with why.
    pub unreadable: Vec<(String, String)>,
}

/// Reads every registration.
pub async fn list(client: &Client, etcd: &EtcdSettings) -> Result<Listed, EtcdError> {
    let fetched = etcd::fetch_prefix(client, &etcd.nodes_prefix()).await?;
    let mut out = Listed::default();
    for e in fetched.entries {
        match serde_json::from_slice::<NodeRecord>(&e.value) {
            Ok(record) => out.nodes.push(record),
            Err(err) => out.unreadable.push((e.key, err.to_string())),
        }
    }
    out.nodes.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(out)
}

/// Keeps this replica registered until `cancel`: `record` with the revision and
/// generation `control` serves. The key goes with the lease (revoked on a clean
/// shutdown).
pub async fn run(
    control: Arc<Control>,
    session: Arc<Session>,
    record: NodeRecord,
    cancel: CancellationToken,
) {
    let mut leases = session.lease();
    let mut served = control.served();
    let key = format!("{}{}", session.settings.etcd.nodes_prefix(), record.node);
    let mut written: Option<(i64, NodeRecord)> = None;
    let mut backoff = Backoff::default();
    let mut conflict: Option<Conflict> = None;
    loop {
        let lease = *leases.borrow_and_update();
        let now = *served.borrow_and_update();
        let next =
            NodeRecord { revision: now.revision, generation: now.generation, ..record.clone() };
        let mut retry = None;
        if let Some(lease) = lease
            && written.as_ref() != Some(&(lease, next.clone()))
        {
            match register(&session.client, &key, lease, &next).await {
                Ok(Registered::Done) => {
                    if conflict.take().is_some() {
                        tracing::info!(node = %next.node, "registered in etcd");
                    }
                    written = Some((lease, next));
                    backoff.reset();
                }
                Ok(Registered::HeldBy(holder)) => {
                    report(&session, &mut conflict, &next.node, holder).await;
                    retry = Some(session.settings.lease_ttl / 3);
                }
                Ok(Registered::Raced) => retry = Some(backoff.next_delay()),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot register in etcd; retrying");
                    retry = Some(backoff.next_delay());
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = leases.changed() => if changed.is_err() { return },
            changed = served.changed() => if changed.is_err() { return },
            _ = sleep(retry) => {}
        }
    }
}

/// What an attempt to register came to.
enum Registered {
    Done,
    /// Another lease holds the key.
    HeldBy(i64),
    /// The key changed between the comparisons: try again.
    Raced,
}

/// Writes `record` at `key` under `lease` unless another lease holds the key.
async fn register(
    client: &Client,
    key: &str,
    lease: i64,
    record: &NodeRecord,
) -> Result<Registered, EtcdError> {
    let value = serde_json::to_vec(record).expect("a node record serialises");
    let put = || TxnOp::put(key, value.clone(), Some(PutOptions::new().with_lease(lease)));
    let mut kv = client.kv_client();
    // Ours already, or nobody's: write it.
    for guard in [
        Compare::lease(key, CompareOp::Equal, lease),
        Compare::create_revision(key, CompareOp::Equal, 0),
    ] {
        let txn = Txn::new().when([guard]).and_then([put()]).or_else([TxnOp::get(key, None)]);
        let resp = kv.txn(txn).await?;
        if resp.succeeded() {
            return Ok(Registered::Done);
        }
        let holder = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.lease()),
            _ => None,
        });
        // Absent (or ours by now): the next comparison decides.
        if let Some(holder) = holder
            && holder != lease
        {
            return Ok(Registered::HeldBy(holder));
        }
    }
    Ok(Registered::Raced)
}

/// Another lease holding this node's key since `since`.
struct Conflict {
    holder: i64,
    since: Instant,
    /// The holder's time to live as granted: held longer, it is being renewed.
    granted: Duration,
    loud: bool,
}

async fn report(session: &Session, conflict: &mut Option<Conflict>, node: &str, holder: i64) {
    if conflict.as_ref().is_none_or(|c| c.holder != holder) {
        let granted = match session.client.lease_client().time_to_live(holder, None).await {
            Ok(t) if t.granted_ttl() > 0 => Duration::from_secs(t.granted_ttl() as u64),
            _ => session.settings.lease_ttl,
        };
        tracing::warn!(
            node,
            lease = format!("{holder:x}"),
            waiting = ?granted,
            "another lease holds this replica's registration: a previous run of it (until that lease expires), or another replica with the same cluster.node; this replica serves but is not registered"
        );
        *conflict = Some(Conflict { holder, since: Instant::now(), granted, loud: false });
    }
    let Some(c) = conflict else { return };
    // A second of margin over the holder's time to live: past it, the lease is renewed.
    if !c.loud && c.since.elapsed() > c.granted + Duration::from_secs(1) {
        tracing::error!(
            node,
            lease = format!("{:x}", c.holder),
            "two replicas run as the same node: give each its own cluster.node; this one serves but stays unregistered, so cluster status does not list it"
        );
        c.loud = true;
    }
}

async fn sleep(retry: Option<Duration>) {
    match retry {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
