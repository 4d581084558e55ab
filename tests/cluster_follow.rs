//! The etcd follower (`server::cluster::follow`) against a real etcd: a consumer mirrors a
//! key prefix from its events and must end up holding what etcd holds after a compaction
//! while it was cut off, after etcd restarts (every change delivered exactly once), and
//! after its login token expired while it was cut off.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use etcd_client::{Client, CompactionOptions, GetOptions};
use steerdns::model::cluster::EtcdAuth;
use steerdns::server::cluster::follow::{self, Event, KeyRange};
use tokio_util::sync::CancellationToken;

/// Longest wait for the follower to catch up; generous for a loaded 2-core runner.
const CATCH_UP: Duration = Duration::from_secs(30);

/// What a consumer built from the follower's events.
#[derive(Default)]
struct Mirror {
    keys: BTreeMap<String, Vec<u8>>,
    snapshots: usize,
    /// The revision of every change delivered, in delivery order.
    changes: Vec<i64>,
    lost: usize,
    resumed: usize,
}

/// Follows `prefix` through `url` (as `user` when given) into a shared `Mirror`.
async fn follow(
    url: &str,
    prefix: &str,
    user: Option<(&str, &str)>,
    cancel: &CancellationToken,
) -> Arc<Mutex<Mirror>> {
    let mut settings = cluster_settings("follower", url, prefix, Duration::from_secs(10));
    settings.etcd.auth = user.map(|(u, p)| EtcdAuth { username: u.into(), password: p.into() });
    let session = connect(settings).await;
    session.log_in().await.unwrap();
    let mut events = follow::spawn(session, KeyRange::prefix(prefix), None, cancel.clone());
    let mirror = Arc::new(Mutex::new(Mirror::default()));
    let m = mirror.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let mut m = m.lock().unwrap();
            match event {
                Event::Snapshot { entries, .. } => {
                    m.snapshots += 1;
                    m.keys = entries.into_iter().map(|e| (e.key, e.value)).collect();
                }
                Event::Changes { changes, .. } => {
                    for c in changes {
                        m.changes.push(c.mod_revision);
                        match c.value {
                            Some(v) => m.keys.insert(c.key, v),
                            None => m.keys.remove(&c.key),
                        };
                    }
                }
                Event::Lost { .. } => m.lost += 1,
                Event::Resumed { .. } => m.resumed += 1,
            }
        }
    });
    mirror
}

/// Every key under `prefix` as etcd holds it now.
async fn stored(client: &mut Client, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    let got = client.get(prefix, Some(GetOptions::new().with_prefix())).await.unwrap();
    got.kvs().iter().map(|kv| (kv.key_str().unwrap().to_string(), kv.value().to_vec())).collect()
}

async fn converged(mirror: &Mutex<Mirror>, client: &mut Client, prefix: &str) -> bool {
    let want = stored(client, prefix).await;
    mirror.lock().unwrap().keys == want
}

#[tokio::test]
async fn a_compaction_while_cut_off_makes_the_follower_read_everything_again() {
    let Some(etcd) = Etcd::start() else { return };
    let mut client = Client::connect([&etcd.url], None).await.unwrap();
    client.put("/f/a", "1", None).await.unwrap();
    client.put("/f/b", "2", None).await.unwrap();
    client.put("/g/outside", "x", None).await.unwrap();
    let proxy = Proxy::start(etcd.client).await;
    let cancel = CancellationToken::new();
    let mirror = follow(&proxy.url, "/f/", None, &cancel).await;
    eventually(CATCH_UP, "the first snapshot", async || {
        converged(&mirror, &mut client, "/f/").await
    })
    .await;
    client.put("/f/c", "3", None).await.unwrap();
    eventually(CATCH_UP, "a change followed", async || {
        converged(&mirror, &mut client, "/f/").await
    })
    .await;

    proxy.cut();
    eventually(CATCH_UP, "the follower lost etcd", async || mirror.lock().unwrap().lost == 1).await;
    client.put("/f/d", "4", None).await.unwrap();
    client.delete("/f/a", None).await.unwrap();
    let last = client.put("/f/b", "22", None).await.unwrap().header().unwrap().revision();
    client.compact(last, Some(CompactionOptions::new().with_physical())).await.unwrap();
    proxy.restore();

    eventually(CATCH_UP, "a second snapshot after the compaction", async || {
        mirror.lock().unwrap().snapshots == 2 && converged(&mirror, &mut client, "/f/").await
    })
    .await;
    client.put("/f/e", "5", None).await.unwrap();
    eventually(CATCH_UP, "following on after the snapshot", async || {
        converged(&mirror, &mut client, "/f/").await
    })
    .await;
    let m = mirror.lock().unwrap();
    assert_eq!(m.keys.keys().collect::<Vec<_>>(), ["/f/b", "/f/c", "/f/d", "/f/e"]);
    cancel.cancel();
}

#[tokio::test]
async fn after_etcd_restarts_every_change_arrives_exactly_once() {
    let Some(mut etcd) = Etcd::start() else { return };
    let mut client = Client::connect([&etcd.url], None).await.unwrap();
    client.put("/r/before", "0", None).await.unwrap();
    let cancel = CancellationToken::new();
    let mirror = follow(&etcd.url, "/r/", None, &cancel).await;
    eventually(CATCH_UP, "the first snapshot", async || {
        converged(&mirror, &mut client, "/r/").await
    })
    .await;
    let mut written = Vec::new();
    for i in 0..10 {
        let put = client.put(format!("/r/k{i:02}"), format!("v{i}"), None).await.unwrap();
        written.push(put.header().unwrap().revision());
    }
    etcd.stop();
    eventually(CATCH_UP, "the follower lost etcd", async || mirror.lock().unwrap().lost == 1).await;
    etcd.start_again();
    let mut client = Client::connect([&etcd.url], None).await.unwrap();
    for i in 10..20 {
        let put = client.put(format!("/r/k{i:02}"), format!("v{i}"), None).await.unwrap();
        written.push(put.header().unwrap().revision());
    }
    client.delete("/r/k03", None).await.unwrap();
    eventually(CATCH_UP, "every change after the restart", async || {
        converged(&mirror, &mut client, "/r/").await
    })
    .await;
    let m = mirror.lock().unwrap();
    // One snapshot: the follower resumed where it was, and etcd's own revisions (read
    // from its replies to the writes) are each delivered once, in order.
    assert_eq!(m.snapshots, 1);
    assert_eq!(m.resumed, 1);
    let (delete, changes) = m.changes.split_last().unwrap();
    assert_eq!(changes, written.as_slice());
    assert!(*delete > *written.last().unwrap());
    cancel.cancel();
}

const ROOT_PASSWORD: &str = "root secret";

#[tokio::test]
async fn an_expired_token_is_replaced_without_a_restart() {
    // Simple tokens unused for a second are forgotten.
    let Some(etcd) = Etcd::start_with(&["--auth-token", "simple", "--auth-token-ttl", "1"]) else {
        return;
    };
    let mut root = Client::connect([&etcd.url], None).await.unwrap();
    root.user_add("root", ROOT_PASSWORD, None).await.unwrap();
    root.user_grant_role("root", "root").await.unwrap();
    root.auth_enable().await.unwrap();
    let login = etcd_client::ConnectOptions::new().with_user("root", ROOT_PASSWORD);
    let refreshing = login.clone().with_auto_token_refresh(true);
    let mut root = Client::connect([&etcd.url], Some(refreshing)).await.unwrap();
    root.put("/t/a", "1", None).await.unwrap();

    let proxy = Proxy::start(etcd.client).await;
    let cancel = CancellationToken::new();
    let mirror = follow(&proxy.url, "/t/", Some(("root", ROOT_PASSWORD)), &cancel).await;
    eventually(CATCH_UP, "the first snapshot", async || converged(&mirror, &mut root, "/t/").await)
        .await;
    // A client logged in now, idle while the follower is cut off: etcd refuses its token
    // afterwards, as it refuses the follower's.
    let mut idle = Client::connect([&etcd.url], Some(login)).await.unwrap();
    proxy.cut();
    eventually(CATCH_UP, "the follower lost etcd", async || mirror.lock().unwrap().lost == 1).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut stream = idle.watch("/t/", None).await.unwrap();
    let refused = stream.message().await.unwrap().expect("a watch response");
    assert!(refused.canceled(), "etcd still takes a token idle for 4s: {refused:?}");

    root.put("/t/b", "2", None).await.unwrap();
    proxy.restore();
    eventually(CATCH_UP, "the change made while cut off", async || {
        converged(&mirror, &mut root, "/t/").await
    })
    .await;
    root.put("/t/c", "3", None).await.unwrap();
    eventually(CATCH_UP, "following on", async || converged(&mirror, &mut root, "/t/").await).await;
    assert_eq!(mirror.lock().unwrap().snapshots, 1);
    cancel.cancel();
}
