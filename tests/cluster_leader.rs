//! Leadership of a role (`server::cluster::leader`) against a real etcd: three sessions,
//! each through its own proxy so that one can be cut off while etcd stays up. Exactly one
//! leads; a leader cut off steps down and another takes over once its lease expires; a
//! leader shutting down hands over at once. A watcher reads every session's flag at each
//! change of any of them and records a moment when two lead at once.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use steerdns::server::cluster::Session;
use steerdns::server::cluster::leader::Leadership;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Longest wait for a change of leader; generous for a loaded 2-core runner.
const CATCH_UP: Duration = Duration::from_secs(30);

/// The shortest lease `cluster.lease` allows, so that a lost leader's key expires soon.
const LEASE: Duration = Duration::from_secs(2);

struct Candidate {
    node: String,
    proxy: Proxy,
    session: Arc<Session>,
    leadership: Leadership,
    session_stop: CancellationToken,
    role_stop: CancellationToken,
}

async fn candidate(etcd: &Etcd, node: &str) -> Candidate {
    let session_stop = CancellationToken::new();
    let (proxy, session) = proxied_session(etcd, node, "/lead/", LEASE, &session_stop).await;
    let role_stop = CancellationToken::new();
    let leadership = Leadership::start(session.clone(), "load", role_stop.clone());
    Candidate { node: node.into(), proxy, session, leadership, session_stop, role_stop }
}

/// Counts the moments two or more flags read `true` together, read at each change of any.
fn watch_overlaps(flags: Vec<watch::Receiver<bool>>) -> Arc<AtomicUsize> {
    let overlaps = Arc::new(AtomicUsize::new(0));
    let (tx, mut changed) = tokio::sync::mpsc::unbounded_channel();
    for mut flag in flags.clone() {
        let tx = tx.clone();
        tokio::spawn(async move {
            while flag.changed().await.is_ok() {
                if tx.send(()).is_err() {
                    return;
                }
            }
        });
    }
    let o = overlaps.clone();
    tokio::spawn(async move {
        while changed.recv().await.is_some() {
            if flags.iter().filter(|f| *f.borrow()).count() > 1 {
                o.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    overlaps
}

fn leaders(candidates: &[Candidate]) -> Vec<usize> {
    (0..candidates.len()).filter(|&i| candidates[i].leadership.is_leader()).collect()
}

/// The one leader, once exactly one leads and every other candidate names it.
async fn one_leader(candidates: &[Candidate], among: &[usize], what: &str) -> usize {
    eventually(CATCH_UP, what, async || {
        let l = leaders(candidates);
        l.len() == 1
            && among.contains(&l[0])
            && among.iter().all(|&i| {
                candidates[i].leadership.leader().as_deref() == Some(&candidates[l[0]].node)
            })
    })
    .await;
    leaders(candidates)[0]
}

#[tokio::test]
async fn one_leads_and_another_takes_over_when_it_is_lost() {
    let Some(etcd) = Etcd::start() else { return };
    let mut candidates = Vec::new();
    for node in ["node-0", "node-1", "node-2"] {
        candidates.push(candidate(&etcd, node).await);
    }
    let overlaps =
        watch_overlaps(candidates.iter().map(|c| c.leadership.leading()).collect::<Vec<_>>());
    let first = one_leader(&candidates, &[0, 1, 2], "one of three leads").await;

    // Cut off from etcd, the leader cannot renew its lease: it steps down, and another
    // candidate leads once that lease expired.
    let cut_lease = *candidates[first].session.lease().borrow();
    candidates[first].proxy.cut();
    eventually(CATCH_UP, "the cut-off leader steps down", async || {
        !candidates[first].leadership.is_leader()
    })
    .await;
    let others: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let second = one_leader(&candidates, &others, "another leads after the lease expired").await;
    assert_ne!(second, first);

    // Back in touch, the old leader's session takes a new lease (the old one expired with
    // its key) and it follows the new leader.
    candidates[first].proxy.restore();
    eventually(CATCH_UP, "the old leader names the new one", async || {
        candidates[first].leadership.leader().as_deref() == Some(&candidates[second].node)
    })
    .await;
    let session = &candidates[first].session;
    assert!(session.connected());
    assert_ne!(*session.lease().borrow(), cut_lease);
    assert_eq!(leaders(&candidates), [second]);

    // A clean shutdown resigns: the last candidate leads, and the old one's lease is not
    // what it waits for (that lease is still being renewed).
    candidates[second].role_stop.cancel();
    let last: Vec<usize> = (0..3).filter(|&i| i != second).collect();
    let third = one_leader(&candidates, &last, "another leads after a resignation").await;
    assert_ne!(third, second);

    assert_eq!(overlaps.load(Ordering::Relaxed), 0, "two candidates led at once");
    for c in &candidates {
        c.role_stop.cancel();
        c.session_stop.cancel();
    }
}

#[tokio::test]
async fn a_key_deleted_by_hand_goes_to_the_candidate_that_claims_it() {
    let Some(etcd) = Etcd::start() else { return };
    let a = candidate(&etcd, "node-a").await;
    eventually(CATCH_UP, "the only candidate leads", async || a.leadership.is_leader()).await;
    let b = candidate(&etcd, "node-b").await;
    eventually(CATCH_UP, "the second names the first", async || {
        b.leadership.leader().as_deref() == Some("node-a")
    })
    .await;

    // Deleted by hand, the key goes to whichever candidate claims it first; the old
    // leader learns of the deletion from its watch, a moment after etcd made it, so this
    // is no test of two leading at once.
    let mut client = etcd_client::Client::connect([&etcd.url], None).await.unwrap();
    let deleted = client.delete("/lead/leaders/load", None).await.unwrap();
    let deleted = deleted.header().unwrap().revision();
    let all = [a, b];
    let mut holder = String::new();
    eventually(CATCH_UP, "the key claimed again", async || {
        let got = client.get("/lead/leaders/load", None).await.unwrap();
        let Some(kv) = got.kvs().first().filter(|kv| kv.create_revision() > deleted) else {
            return false;
        };
        let value: serde_json::Value = serde_json::from_slice(kv.value()).unwrap();
        holder = value["node"].as_str().unwrap().to_string();
        true
    })
    .await;
    let leader = one_leader(&all, &[0, 1], "the holder leads, named by both").await;
    assert_eq!(all[leader].node, holder);
    for c in &all {
        c.role_stop.cancel();
        c.session_stop.cancel();
    }
}
