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
