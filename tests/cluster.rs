//! The cluster against a real etcd: a replica's session (lease, connected state).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Polls `check` until it holds or `limit` passes.
async fn eventually(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_replica_reports_whether_it_reaches_etcd() {
    let Some(mut etcd) = Etcd::start() else { return };
    let keys = format!(
        "cluster:\n  node: one\n  lease: 2s\n  etcd:\n    endpoints: [\"{}\"]\n    prefix: /t/\n",
        etcd.url
    );
    let h = Harness::with_admin_and_keys(DEFAULT_PROFILES, &keys).await;
    let connected = async || scrape(h.admin(), None).await.sum("steerdns_cluster_connected", &[]);
    eventually(Duration::from_secs(10), "connected", async || connected().await == 1.0).await;
    etcd.stop();
    eventually(Duration::from_secs(10), "disconnected", async || connected().await == 0.0).await;
    // Queries are still answered.
    assert_eq!(h.udp(&Q::new("www.tm.example.test.", T_A)).await.rcode(), 0);
    etcd.start_again();
    eventually(Duration::from_secs(15), "connected again", async || connected().await == 1.0).await;
    h.stop().await;
}

#[tokio::test]
async fn three_replicas_start_and_connect() {
    let Some(etcd) = Etcd::start() else { return };
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let (yaml, dns, admin) = replica_yaml(i, &etcd.url, "/three/", "");
        for (name, text) in DEFAULT_PROFILES {
            std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
            std::fs::write(dir.path().join("profiles").join(name), text).unwrap();
        }
        replicas.push(Replica::start(dir.path(), i, &yaml, dns, admin).await);
    }
    for r in &replicas {
        let connected = async || scrape(r.admin, None).await.sum("steerdns_cluster_connected", &[]);
        eventually(Duration::from_secs(10), "connected", async || connected().await == 1.0).await;
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(r.addr).await.unwrap();
        let raw = udp_exchange(&sock, &Q::new("www.tm.example.test.", T_A).bytes()).await.unwrap();
        assert_eq!(Reply::new(raw).rcode(), 0, "{}", r.node);
    }
}
