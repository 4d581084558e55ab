//! Real user measurements shared by three replicas on a real etcd: reports posted to one
//! replica's listener and others to another's, and a network whose reports are split
//! between them so that only together they reach `min_samples`; once shared, all three
//! answer a `performance` query with ECS for each measured network with the same endpoint
//! and scope, and their admin APIs show the same rows, with the sample counts of both
//! replicas added up. etcd holds one key of figures per replica and one of the table.
//! Killing the replica that leads the merge keeps the table, and another replica takes
//! over: reports made after the kill are published by the new leader.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest wait for a table to reach every replica, or a new leader to publish.
const PATIENCE: Duration = Duration::from_secs(40);

const PREFIX: &str = "/rumshare/";

/// Replica `i` with the location fixtures and a RUM listener of its own; returns it and
/// its listener's address.
async fn replica(dir: &Path, i: usize, etcd: &str) -> (Replica, SocketAddr) {
    write_location_config(dir, &location_profiles());
    let rum = free_port(replica_ip(i));
    let block = format!(
        "{LOCATION_KEYS}rum:\n  listen: [\"{rum}\"]\n  targets:\n    \
         - {{ region: eu-west, url: \"http://127.0.0.1:9/a\" }}\n    \
         - {{ region: us-east, url: \"http://127.0.0.1:9/b\" }}\n  \
         min_samples: 3\n  burst: 1000\n  share_interval: 1s\n"
    );
    let (yaml, dns, admin) = replica_yaml(i, etcd, PREFIX, &block);
    let yaml = with_lease(&yaml, "4s");
    (Replica::start(dir, i, &yaml, dns, admin).await, rum)
}

/// A report of `(eu-west ms, us-east ms)` posted from `from` (a loopback address) to `to`.
async fn report(to: SocketAddr, from: Ipv4Addr, eu: f64, us: f64) {
    let body = format!(
        r#"{{"v":1,"m":[{{"region":"eu-west","ms":{eu}}},{{"region":"us-east","ms":{us}}}]}}"#
    );
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::from((from, 0))).expect("bind a loopback source");
    let mut s = sock.connect(to).await.expect("connect to the RUM listener");
    let req = format!(
        "POST /rum/v1/report HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\
         Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(HTTP_WAIT, s.read_to_end(&mut raw)).await;
    let status = parse_http(&raw).map(|h| h.status).unwrap_or_default();
    assert_eq!(status, 204, "report from {from} to {to}: {}", String::from_utf8_lossy(&raw));
}

/// The `fast` answer and ECS scope for the /24 of `net` over UDP.
async fn answer(dns: SocketAddr, net: &str) -> (String, u8) {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(dns).await.unwrap();
    let q = Q::new(&fq("fast"), T_A).edns().ecs(ip(net), 24).bytes();
    let r = Reply::new(udp_exchange(&sock, &q).await.unwrap());
    (r.single(), r.ecs().map_or(0, |e| e.2))
}

async fn row(admin: SocketAddr, addr: &str) -> Value {
    let r = http_get(admin, &format!("/api/v1/rum?addr={addr}"), None).await;
    if r.status == 200 { r.json() } else { Value::Null }
}

/// The samples `row` has for `region` (0 without a figure).
fn samples(row: &Value, region: &str) -> u64 {
    let regions = row["regions"].as_array().cloned().unwrap_or_default();
    let r = regions.iter().find(|r| r["region"] == region);
    r.and_then(|r| r["samples"].as_u64()).unwrap_or(0)
}

/// What one replica says about the measured networks: per network its row and its answer,
/// and the table's size.
async fn view(r: &Replica, nets: &[&str]) -> (Vec<(Value, (String, u8))>, Value) {
    let mut out = Vec::new();
    for net in nets {
        out.push((row(r.admin, net).await, answer(r.addr, net).await));
    }
    let summary = http_get(r.admin, "/api/v1/rum", None).await.json();
    (out, summary["rows"].clone())
}

/// Every key under `prefix` in etcd and its value's size.
async fn keys(etcd: &Etcd, prefix: &str) -> Vec<(String, usize)> {
    let mut client = etcd_client::Client::connect([etcd.url.as_str()], None).await.unwrap();
    let got = client.get(prefix, Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    got.kvs().iter().map(|kv| (kv.key_str().unwrap().to_string(), kv.value().len())).collect()
}

async fn leader(etcd: &Etcd) -> Option<String> {
    let mut client = etcd_client::Client::connect([etcd.url.as_str()], None).await.unwrap();
    let got = client.get(format!("{PREFIX}leaders/rum"), None).await.unwrap();
    let kv = got.kvs().first()?;
    let v: Value = serde_json::from_slice(kv.value()).ok()?;
    v["node"].as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_measurements_and_answer_alike() {
    let Some(etcd) = Etcd::start() else { return };
    let _heavy = one_heavy_test_at_a_time().await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    let mut listeners = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let (r, l) = replica(dir.path(), i, &etcd.url).await;
        replicas.push(r);
        listeners.push(l);
    }
    let (a, b) = (listeners[0], listeners[1]);
    let src = |x: u8, y: u8| Ipv4Addr::new(127, 0, x, y);
    // 127.0.1.0/24 reports to A only, 127.0.2.0/24 to B only, 127.0.3.0/24 twice to each:
    // 4 samples together, short of min_samples (3) on either alone.
    for y in 1..=3 {
        report(a, src(1, y), 15.0, 100.0).await;
        report(b, src(2, y), 140.0, 9.0).await;
    }
    for y in 1..=2 {
        report(a, src(3, y), 50.0, 20.0).await;
        report(b, src(3, 10 + y), 50.0, 20.0).await;
    }
    let nets = ["127.0.1.0", "127.0.2.0", "127.0.3.0"];
    for r in &replicas {
        eventually(PATIENCE, &format!("{} publishes the split network", r.node), async || {
            samples(&row(r.admin, "127.0.3.1").await, "us-east") == 4
        })
        .await;
    }
    let first = view(&replicas[0], &nets).await;
    // (answer, scope) per network: A's network prefers eu-west, B's and the split one
    // us-east, each at the /24's scope.
    let answers: Vec<(String, u8)> = first.0.iter().map(|(_, a)| a.clone()).collect();
    let want = [("A 192.0.2.41", 24), ("A 192.0.2.42", 24), ("A 192.0.2.42", 24)]
        .map(|(a, s)| (a.to_string(), s));
    assert_eq!(answers, want, "{first:?}");
    assert_eq!(first.0[0].0["preferred"], "eu-west");
    assert_eq!((samples(&first.0[0].0, "eu-west"), samples(&first.0[1].0, "us-east")), (3, 3));
    // Three /24 rows and their /16 aggregate.
    assert_eq!(first.1, 4, "{first:?}");
    for r in &replicas[1..] {
        assert_eq!(view(r, &nets).await, first, "{} differs from {}", r.node, replicas[0].node);
    }
    let path = format!("/api/v1/explain?name={}&type=A&client=127.0.3.1", fq("fast"));
    let explained = http_get(replicas[2].admin, &path, None).await.text();
    assert!(explained.contains("median of 4 samples"), "{explained}");

    // What etcd holds: one key of figures per replica (the third has none to share but
    // writes its empty record), one of the table.
    let stored = keys(&etcd, &format!("{PREFIX}rum/")).await;
    let names: Vec<&str> = stored.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "/rumshare/rum/nodes/node-0/00",
            "/rumshare/rum/nodes/node-1/00",
            "/rumshare/rum/nodes/node-2/00",
            "/rumshare/rum/table/00",
        ]
    );
    eprintln!("etcd value sizes (2 targets; A: 2 /24s, B: 2 /24s, table: 4 rows): {stored:?}");

    // Kill the leader (no resignation: its lease expires); the others keep the table and
    // one of them takes over: a network reported after the kill is published.
    let leading = leader(&etcd).await.expect("a replica leads the merge");
    let at = replicas.iter().position(|r| r.node == leading).unwrap();
    replicas[at].kill();
    let survivors: Vec<usize> = (0..3).filter(|&i| i != at).collect();
    for &i in &survivors {
        let (rows, _) = view(&replicas[i], &nets).await;
        assert_eq!(rows, first.0, "{} after the leader was killed", replicas[i].node);
    }
    let to = listeners[survivors[0]];
    for y in 1..=3 {
        report(to, src(4, y), 30.0, 200.0).await;
    }
    for &i in &survivors {
        let r = &replicas[i];
        eventually(PATIENCE, &format!("{} gets a table from the new leader", r.node), async || {
            samples(&row(r.admin, "127.0.4.1").await, "eu-west") == 3
        })
        .await;
        let (rows, count) = view(r, &nets).await;
        assert_eq!((rows, count), (first.0.clone(), Value::from(5)), "{}", r.node);
        assert_eq!(answer(r.addr, "127.0.4.0").await, ("A 192.0.2.41".to_string(), 24));
    }
    assert_ne!(leader(&etcd).await.as_deref(), Some(leading.as_str()));
}
