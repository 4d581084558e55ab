//! One replica of the cluster leads a named role (`load`: the one that runs the load
//! control step for everybody). The leader holds `<prefix>leaders/<role>`, written with a
//! create-if-absent transaction under its session lease; the others watch the key and
//! try again the moment it is deleted (a clean shutdown revokes the lease, a killed
//! replica's lease expires). A leader steps down the moment its lease is not renewed in
//! time or its watch of the key breaks, which is before that lease can expire and another
//! replica take the key; it takes the role back at once when the key is still under its
//! lease after the outage.
//!
//! Why not etcd's election API: `Campaign` is one request that blocks until the replica
//! leads, which the client's 10 s request timeout cuts (and a cut campaign resigns on
//! etcd's side), and it says nothing while it waits; the transaction and a watch of one
//! key say at every moment who leads, within bounded requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::{self, Backoff, EtcdError};

/// Longest wait for one request (the claim, opening the watch, resigning).
const REQUEST_LIMIT: Duration = Duration::from_secs(5);

/// What the key of a role holds: who leads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRecord {
    pub node: String,
}

/// This replica's part in one role: whether it leads, and who does.
#[derive(Clone, Debug)]
pub struct Leadership {
    key: Arc<str>,
    leading: watch::Receiver<bool>,
    leader: watch::Receiver<Option<String>>,
    claimed: Arc<AtomicI64>,
}

impl Leadership {
    /// Takes part in leading `role` until `cancel` (then resigns, so that another replica
    /// takes over at once).
    pub fn start(session: Arc<Session>, role: &str, cancel: CancellationToken) -> Leadership {
        let (leading_tx, leading) = watch::channel(false);
        let (leader_tx, leader) = watch::channel(None);
        let key = format!("{}{role}", session.settings.etcd.leaders_prefix());
        let claimed = Arc::new(AtomicI64::new(0));
        let campaign = Campaign {
            session,
            key: key.clone(),
            leading: leading_tx,
            leader: leader_tx,
            claimed: claimed.clone(),
        };
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => campaign.resign().await,
                _ = campaign.run() => {}
            }
        });
        Leadership { key: key.into(), leading, leader, claimed }
    }

    /// The key the leader holds, `<prefix>leaders/<role>`: writes only the leader may
    /// make compare its lease with their own, so that one that lost the role cannot make
    /// them.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether this replica leads the role now.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// The etcd revision at which this replica last took the role (0: never): whatever
    /// the leader before it wrote came before it, so a new leader that has read up to it
    /// continues from the last record.
    pub fn claimed_at(&self) -> i64 {
        self.claimed.load(Ordering::Relaxed)
    }

    /// "Am I the leader", watched.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// The leader's node name as last seen in etcd (`None`: nobody leads, or not known
    /// while etcd cannot be reached).
    pub fn leader(&self) -> Option<String> {
        self.leader.borrow().clone()
    }

    /// `leader`, watched.
    pub fn leader_changes(&self) -> watch::Receiver<Option<String>> {
        self.leader.clone()
    }
}

struct Campaign {
    session: Arc<Session>,
    key: String,
    leading: watch::Sender<bool>,
    leader: watch::Sender<Option<String>>,
    claimed: Arc<AtomicI64>,
}

/// Why holding or waiting for the role stopped.
enum Ended {
    /// The session lost etcd or its lease: no backoff, the session has its own.
    Session,
    Failed(EtcdError),
}

impl Campaign {
    async fn run(&self) {
        let mut connection = self.session.connection();
        let mut leases = self.session.lease();
        let mut backoff = Backoff::default();
        loop {
            self.step_down("");
            // Only with a lease being renewed: a key under a lease that may be expiring
            // could be taken by another replica while this one still believes it leads.
            let lease = loop {
                let lease = *leases.borrow_and_update();
                if *connection.borrow_and_update()
                    && let Some(id) = lease
                {
                    break id;
                }
                tokio::select! {
                    _ = connection.changed() => {}
                    _ = leases.changed() => {}
                }
            };
            let ended = tokio::select! {
                ended = self.hold(lease, &mut backoff) => ended,
                _ = connection.wait_for(|c| !*c) => Ended::Session,
                _ = leases.wait_for(|l| *l != Some(lease)) => Ended::Session,
            };
            // Who leads is not known until etcd answers again.
            self.leader.send_replace(None);
            match ended {
                Ended::Session => self.step_down("the lease is not renewed"),
                Ended::Failed(e) => {
                    self.step_down(&e.to_string());
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    /// Claims the role under `lease`, or waits for it to be free, until something fails.
    async fn hold(&self, lease: i64, backoff: &mut Backoff) -> Ended {
        loop {
            let (holder, revision) = match self.claim(lease).await {
                Ok(claimed) => claimed,
                Err(e) => return Ended::Failed(e),
            };
            backoff.reset();
            let mine = holder.lease == lease;
            self.leader.send_replace(Some(holder.node.clone()));
            if mine {
                self.lead(revision);
            } else {
                self.step_down("another replica leads");
            }
            // Every change of the key after the claim, until it is deleted.
            let options = WatchOptions::new().with_start_revision(revision + 1);
            let mut watches = self.session.client.watch_client();
            let opened =
                etcd::within(REQUEST_LIMIT, watches.watch(self.key.as_str(), Some(options)));
            let mut stream = match opened.await {
                Ok(stream) => stream,
                Err(e) => return Ended::Failed(e),
            };
            'watch: loop {
                let resp = match etcd::next_response(&mut stream).await {
                    Ok(resp) => resp,
                    Err(e) => return Ended::Failed(e),
                };
                // Compacted past the claim: claim again, which reads the key anew.
                if resp.compact_revision() > 0 {
                    break 'watch;
                }
                if resp.canceled() {
                    let reason = resp.cancel_reason().to_string();
                    return Ended::Failed(EtcdError::Refused(format!(
                        "the watch was cancelled: {reason}"
                    )));
                }
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    match ev.event_type() {
                        // Deleted by hand, or its lease gone: claim it again, leading
                        // meanwhile only if it comes back.
                        EventType::Delete => {
                            self.step_down("the key was deleted");
                            break 'watch;
                        }
                        // Written by hand, or by another lease: whoever holds it now leads.
                        EventType::Put => {
                            let node = LeaderRecord::decode(kv.value());
                            self.leader.send_replace(Some(node));
                            if kv.lease() == lease {
                                self.lead(kv.mod_revision());
                            } else {
                                self.step_down("another replica holds the key");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Writes the key under `lease` unless it exists; returns who holds it then (with
    /// their lease) and the revision it was read at.
    async fn claim(&self, lease: i64) -> Result<(Holder, i64), EtcdError> {
        let node = self.session.settings.node.clone();
        let value = serde_json::to_vec(&LeaderRecord { node: node.clone() })
            .expect("a leader record serialises");
        let put = TxnOp::put(self.key.as_str(), value, Some(PutOptions::new().with_lease(lease)));
        let txn = Txn::new()
            .when([Compare::create_revision(self.key.as_str(), CompareOp::Equal, 0)])
            .and_then([put])
            .or_else([TxnOp::get(self.key.as_str(), None)]);
        let mut kv = self.session.client.kv_client();
        let resp = match tokio::time::timeout(REQUEST_LIMIT, kv.txn(txn)).await {
            Ok(r) => r?,
            Err(_) => return Err(EtcdError::Timeout(REQUEST_LIMIT)),
        };
        let revision = resp.header().map_or(0, |h| h.revision());
        if resp.succeeded() {
            return Ok((Holder { node, lease }, revision));
        }
        let held = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .map(|kv| Holder { node: LeaderRecord::decode(kv.value()), lease: kv.lease() }),
            _ => None,
        });
        // Existing at the comparison, the key is in the same transaction's read.
        held.map(|h| (h, revision)).ok_or_else(|| {
            EtcdError::Refused("the leader key vanished within a transaction".into())
        })
    }

    fn lead(&self, revision: i64) {
        if !*self.leading.borrow() {
            self.claimed.store(revision, Ordering::Relaxed);
        }
        if !self.leading.send_replace(true) {
            tracing::info!(key = %self.key, node = %self.session.settings.node, "leading");
        }
    }

    fn step_down(&self, why: &str) {
        if self.leading.send_replace(false) {
            tracing::info!(key = %self.key, why, "no longer leading");
        }
    }

    /// Steps down and deletes the key if this replica holds it, so that another replica
    /// leads at once rather than when the lease expires.
    async fn resign(&self) {
        self.step_down("shutting down");
        let Some(lease) = *self.session.lease().borrow() else { return };
        let txn = Txn::new()
            .when([Compare::lease(self.key.as_str(), CompareOp::Equal, lease)])
            .and_then([TxnOp::delete(self.key.as_str(), None)]);
        let mut kv = self.session.client.kv_client();
        let _ = tokio::time::timeout(Duration::from_secs(1), kv.txn(txn)).await;
    }
}

/// Who holds the key, and under which lease.
struct Holder {
    node: String,
    lease: i64,
}

impl LeaderRecord {
    /// The node named by a key's value; a value written by hand that is no record names
    /// itself, so that status shows what is there.
    fn decode(value: &[u8]) -> String {
        match serde_json::from_slice::<LeaderRecord>(value) {
            Ok(r) => r.node,
            Err(_) => String::from_utf8_lossy(value).into_owned(),
        }
    }
}
