//! Load shares through etcd (`server::cluster::load`) against a real etcd: replicas, each
//! with its own session through a proxy, follow what the leader of the `load` role
//! writes. Only the leader writes a step; every replica reads the same shares and
//! generation; a load pushed through any replica reaches the leader and goes when its
//! time to live ends; a new leader continues the generation and the shares it followed.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use common::*;
use serde_json::Value;
use steerdns::geo::World;
use steerdns::model::health::HealthTable;
use steerdns::model::load::{EndpointLoad, Reading};
use steerdns::model::{Listen, Snapshot};
use steerdns::server::cluster::leader::Leadership;
use steerdns::server::cluster::load::{self, ClusterLoad, LoadShareError};
use steerdns::server::load::pushed::PushedLoad;
use steerdns::server::load::{LoadEntry, LoadMap, Loads};
use tokio_util::sync::CancellationToken;

/// Longest wait for etcd to carry a change to every replica; generous for a loaded
/// 2-core runner.
const CATCH_UP: Duration = Duration::from_secs(30);

const LEASE: Duration = Duration::from_secs(2);

const WWW: &str = "www.tm.example.test.";

struct Member {
    proxy: Proxy,
    load: Arc<ClusterLoad>,
    loads: Arc<Loads>,
    stop: CancellationToken,
}

async fn member(etcd: &Etcd, node: &str) -> Member {
    let stop = CancellationToken::new();
    let (proxy, session) = proxied_session(etcd, node, "/shares/", LEASE, &stop).await;
    let leadership = Leadership::start(session.clone(), load::ROLE, stop.clone());
    let empty = Snapshot::new(
        Listen::default(),
        vec![],
        vec![],
        Arc::new(HealthTable::new([])),
        Arc::new(World::empty()),
    );
    let shared = Arc::new(ArcSwap::from_pointee(empty));
    let loads = Arc::new(Loads::default());
    let load = ClusterLoad::start(session, leadership, loads.clone(), shared, stop.clone());
    Member { proxy, load, loads, stop }
}

/// A step's map: `www`'s endpoints `eu` and `us` at these shares.
fn map(step: u64, eu: f64, us: f64) -> LoadMap {
    let entry = |endpoint: &str, share: f64| LoadEntry {
        profile: WWW.into(),
        endpoint: endpoint.into(),
        state: EndpointLoad {
            load: Some(930.0),
            utilisation: Some(0.93),
            target: share,
            share,
            stale: false,
            above_high: share < 0.5,
        },
        read_at_ms: Some(1_800_000_000_000 + step),
        error: None,
    };
    LoadMap {
        step,
        at_ms: 1_800_000_000_000 + step,
        entries: vec![entry("eu", eu), entry("us", us)],
    }
}

async fn one_leader(members: &[Member], among: &[usize]) -> usize {
    eventually(CATCH_UP, "one member leads", async || {
        among.iter().filter(|&&i| members[i].load.leads()).count() == 1
    })
    .await;
    *among.iter().find(|&&i| members[i].load.leads()).unwrap()
}

/// Waits until every member of `among` has applied `want`.
async fn all_apply(members: &[Member], among: &[usize], want: &LoadMap) {
    eventually(CATCH_UP, &format!("every member applies step {}", want.step), async || {
        among.iter().all(|&i| *members[i].loads.current() == *want)
    })
    .await;
}

#[tokio::test]
async fn every_replica_applies_the_leaders_step_and_a_new_leader_continues_it() {
    let Some(etcd) = Etcd::start() else { return };
    let mut members = Vec::new();
    for node in ["node-0", "node-1", "node-2"] {
        members.push(member(&etcd, node).await);
    }
    let first = one_leader(&members, &[0, 1, 2]).await;
    let follower = (first + 1) % 3;

    // Only the leader writes a step; every member applies it, the leader included, and
    // says who wrote it.
    let refused = members[follower].load.write(&map(1, 0.4, 1.0)).await;
    assert!(matches!(refused, Err(LoadShareError::NotLeader)), "{refused:?}");
    members[first].load.write(&map(1, 0.4, 1.0)).await.unwrap();
    all_apply(&members, &[0, 1, 2], &map(1, 0.4, 1.0)).await;
    members[first].load.write(&map(2, 0.3, 1.0)).await.unwrap();
    all_apply(&members, &[0, 1, 2], &map(2, 0.3, 1.0)).await;
    assert_eq!(members[follower].load.view().step.leader, format!("node-{first}"));

    // A load pushed through a follower reaches the leader's loop, fresh until its time to
    // live ends; cleared, it is gone.
    let push = |ttl: Duration| PushedLoad {
        load: 870.0,
        at: tokio::time::Instant::now(),
        at_wall: SystemTime::now(),
        ttl,
        by: "alice".into(),
    };
    let began = members[follower].load.push(WWW, "eu", &push(LEASE)).await.unwrap();
    assert!(began, "the first push begins a run");
    let reading = |m: &Member| m.loads.pushed.reading(WWW, "eu", tokio::time::Instant::now());
    eventually(CATCH_UP, "the leader reads the pushed load", async || {
        matches!(reading(&members[first]), (Reading::Fresh { load }, Some(p)) if load == 870.0 && p.by == "alice")
    })
    .await;
    eventually(CATCH_UP, "the pushed load goes stale", async || {
        reading(&members[first]).0 == Reading::Stale
    })
    .await;
    members[follower].load.push(WWW, "eu", &push(CATCH_UP)).await.unwrap();
    eventually(CATCH_UP, "pushed again", async || {
        matches!(reading(&members[first]).0, Reading::Fresh { .. })
    })
    .await;
    assert!(members[follower].load.clear(WWW, "eu").await.unwrap());
    eventually(CATCH_UP, "a cleared push is gone", async || {
        reading(&members[first]).0 == Reading::NoFeed
    })
    .await;

    // Cut off, the leader loses the role; the next one has applied the last step.
    members[first].proxy.cut();
    let rest: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let second = one_leader(&members, &rest).await;
    assert_eq!(*members[second].loads.current(), map(2, 0.3, 1.0));
    let refused = members[first].load.write(&map(3, 1.0, 1.0)).await;
    assert!(matches!(refused, Err(LoadShareError::NotLeader)), "{refused:?}");
    // A profile no longer fed is deleted.
    let emptied = LoadMap { step: 3, at_ms: 1_800_000_000_003, entries: vec![] };
    members[second].load.write(&emptied).await.unwrap();
    all_apply(&members, &rest, &emptied).await;

    members[first].proxy.restore();
    all_apply(&members, &[0, 1, 2], &emptied).await;
    for m in &members {
        m.stop.cancel();
    }
}

/// A load feed for the replicas: `GET /<endpoint>` answers `{"load": N}` with the load set
/// last for that endpoint.
struct FeedServer {
    addr: std::net::SocketAddr,
    loads: Arc<std::sync::Mutex<std::collections::HashMap<String, f64>>>,
}

impl FeedServer {
    async fn start() -> FeedServer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let loads = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let table = loads.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let table = table.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request);
                    let path = text.split(' ').nth(1).unwrap_or("/").trim_start_matches('/');
                    let load = table.lock().unwrap().get(path).copied();
                    let reply = match load {
                        Some(load) => {
                            let body = format!("{{\"load\": {load}}}");
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            )
                        }
                        None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
                    };
                    let _ = conn.write_all(reply.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        FeedServer { addr, loads }
    }

    fn set(&self, endpoint: &str, load: f64) {
        self.loads.lock().unwrap().insert(endpoint.to_string(), load);
    }
}

const TOKEN: &str = "alice-t0ken-for-tests";

/// `www`: two weighted endpoints whose loads the feed server gives (capacity 1000 each);
/// `pushed`: an endpoint whose load is pushed, and one without a feed.
fn load_profiles(feed: std::net::SocketAddr) -> String {
    format!(
        "\
name: www
routing: weighted
endpoints:
  - name: eu
    target: 192.0.2.1
    always_serve: true
    load: {{ capacity: 1000, url: \"http://{feed}/eu\", json_pointer: /load }}
  - name: us
    target: 192.0.2.2
    always_serve: true
    load: {{ capacity: 1000, url: \"http://{feed}/us\", json_pointer: /load }}
---
name: pushed
routing: weighted
endpoints:
  - {{ name: a, target: 192.0.2.11, always_serve: true, load: {{ capacity: 100, pushed: true }} }}
  - {{ name: b, target: 192.0.2.12, always_serve: true }}
"
    )
}

async fn load_replica(dir: &Path, i: usize, etcd: &str, feed: std::net::SocketAddr) -> Replica {
    let extra = "admin:\n  tokens:\n    - { name: alice, file: alice.token }\n\
                 load:\n  interval: 500ms\n  max_step: 1\n";
    let (yaml, dns, admin) = replica_yaml(i, etcd, "/loads/", extra);
    let yaml = with_lease(&yaml, "3s");
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("profiles/p.yaml"), load_profiles(feed)).unwrap();
    std::fs::write(dir.join("alice.token"), format!("{TOKEN}\n")).unwrap();
    Replica::start(dir, i, &yaml, dns, admin).await
}

async fn api(admin: std::net::SocketAddr, method: &str, path: &str, body: &str) -> Value {
    let auth = format!("Bearer {TOKEN}");
    let r = http_with_body(admin, method, path, &[("Authorization", &auth)], body.as_bytes()).await;
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    r.json()
}

/// `GET /api/v1/load` of a replica, with `age` (which differs by when it is asked) left
/// out: what must be the same on every replica.
async fn shown(r: &Replica) -> Value {
    let mut v = api(r.admin, "GET", "/api/v1/load", "").await;
    for e in v["endpoints"].as_array_mut().unwrap() {
        e.as_object_mut().unwrap().remove("age");
    }
    v
}

/// The row of `endpoint` of `profile` (relative) in a `shown` answer.
fn row<'a>(v: &'a Value, profile: &str, endpoint: &str) -> &'a Value {
    let rows = v["endpoints"].as_array().unwrap();
    let found = rows.iter().find(|e| e["profile"] == fq(profile) && e["endpoint"] == endpoint);
    found.unwrap_or_else(|| panic!("no {profile}/{endpoint} in {v}"))
}

/// What every replica of `replicas` shows once they all show the same and `done` holds
/// for it.
async fn agreed(replicas: &[Replica], what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut seen = Value::Null;
    eventually(CATCH_UP, what, async || {
        let mut all = Vec::new();
        for r in replicas {
            all.push(shown(r).await);
        }
        seen = all[0].clone();
        all.iter().all(|v| *v == all[0]) && done(&all[0])
    })
    .await;
    seen
}

/// How many of `n` A answers of `www` from `r` are eu's address.
async fn eu_answers(r: &Replica, n: usize) -> usize {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(r.addr).await.unwrap();
    let mut eu = 0;
    for _ in 0..n {
        let raw = udp_exchange(&sock, &Q::new(&fq("www"), T_A).bytes()).await.unwrap();
        let addrs = Reply::new(raw).addrs();
        assert_eq!(addrs.len(), 1, "{addrs:?}");
        eu += usize::from(addrs[0].to_string() == "192.0.2.1");
    }
    eu
}

#[tokio::test]
async fn three_replicas_apply_the_shares_their_leader_computes() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(etcd) = Etcd::start() else { return };
    let feed = FeedServer::start().await;
    feed.set("eu", 100.0);
    feed.set("us", 100.0);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        replicas.push(load_replica(d.path(), i, &etcd.url, feed.addr).await);
    }
    let start = agreed(&replicas, "one leader and its first steps", |v| {
        v["leader"].is_string() && v["step"].as_u64() > Some(0)
    })
    .await;
    let leader = start["leader"].as_str().unwrap().to_string();
    for r in &replicas {
        let cluster = api(r.admin, "GET", "/api/v1/cluster", "").await;
        assert_eq!(cluster["cluster"]["leaders"]["load"], leader.as_str(), "{}", r.node);
    }

    // eu at 850 of 1000, between the watermarks: its share falls step by step until the
    // next target is within the deadband, then stays; every replica shows the same step
    // and shares, and answers in the same proportion: eu's weight is scaled by its share.
    feed.set("eu", 850.0);
    let eu_share = |v: &Value| row(v, "www", "eu")["share"].as_f64().unwrap();
    let mut seen = agreed(&replicas, "eu's share falls", |v| eu_share(v) < 0.9).await;
    let mut settled = Value::Null;
    eventually(CATCH_UP, "eu's share settled for two steps", async || {
        let since = seen["step"].as_u64().unwrap();
        let next = agreed(&replicas, "two steps on", |v| v["step"].as_u64() >= Some(since + 2));
        let next = next.await;
        let still = eu_share(&next) == eu_share(&seen);
        (seen, settled) = (next.clone(), next);
        still
    })
    .await;
    let share = row(&settled, "www", "eu")["share"].as_f64().unwrap();
    // Where docs/load.md's rule stops, from full share at utilisation 0.85 (low 0.7, high
    // 0.9, max_step 1, deadband 0.02): each step aims at high / (high − low + u / share).
    let mut rule = 1.0_f64;
    loop {
        let target = 0.9 / (0.9 - 0.7 + 0.85 / rule);
        if (target - rule).abs() < 0.02 {
            break;
        }
        rule = target;
    }
    assert!((share - rule).abs() < 1e-3, "eu's share settled at {share}, the rule says {rule}");
    let expected = share / (share + 1.0);
    const QUERIES: usize = 400;
    for r in &replicas {
        let got = eu_answers(r, QUERIES).await as f64 / QUERIES as f64;
        // 4 standard deviations of a binomial count of 400 at most (p near 0.3).
        assert!((got - expected).abs() < 0.1, "{}: eu {got}, expected {expected}", r.node);
    }

    // Past high: eu takes no new answers on any replica.
    feed.set("eu", 2000.0);
    let high = agreed(&replicas, "eu above high everywhere", |v| {
        row(v, "www", "eu")["above_high"] == true
    })
    .await;
    for r in &replicas {
        assert_eq!(eu_answers(r, 100).await, 0, "{}", r.node);
    }

    // A load pushed through a replica that does not lead reaches the leader's steps.
    let other = replicas.iter().position(|r| r.node != leader).unwrap();
    let path = "/api/v1/profiles/pushed.tm.example.test./endpoints/a/load";
    api(replicas[other].admin, "PUT", path, r#"{"load": 95, "ttl": "60s"}"#).await;
    let by_leader = agreed(&replicas, "the pushed load stepped by the leader", |v| {
        row(v, "pushed", "a")["load"] == 95.0
    })
    .await;
    assert_eq!(by_leader["leader"], leader.as_str());
    assert_eq!(row(&by_leader, "pushed", "a")["above_high"], true);

    // The leader dies: another leads once its lease expired, and steps on from the last
    // record: the step number goes on, and eu's share does not jump back to full.
    let step_before = high["step"].as_u64().unwrap().max(by_leader["step"].as_u64().unwrap());
    let eu_before = row(&by_leader, "www", "eu")["share"].as_f64().unwrap();
    let dead = replicas.iter().position(|r| r.node == leader).unwrap();
    drop(replicas.remove(dead));
    // Watched all along the takeover: the step number never falls back (a leader starting
    // afresh would count from 1) and eu's share never rises (it would start full).
    let mut last_step = vec![step_before; replicas.len()];
    eventually(CATCH_UP, "a new leader steps", async || {
        let mut moved_on = true;
        for (r, last_step) in replicas.iter().zip(&mut last_step) {
            let v = shown(r).await;
            let step = v["step"].as_u64().unwrap();
            let eu = row(&v, "www", "eu")["share"].as_f64().unwrap();
            assert!(step >= *last_step, "{}: step {step} after {last_step}", r.node);
            assert!(eu <= eu_before, "{}: eu's share {eu} after {eu_before}", r.node);
            *last_step = step;
            moved_on &=
                v["leader"].is_string() && v["leader"] != leader.as_str() && step > step_before + 2;
        }
        moved_on
    })
    .await;
    let after =
        agreed(&replicas, "the survivors agree", |v| v["step"].as_u64() > Some(step_before)).await;
    let eu = row(&after, "www", "eu");
    assert!(eu["share"].as_f64().unwrap() <= eu_before, "{eu} after {eu_before}");
    assert_eq!(eu["above_high"], true);
    assert_eq!(row(&after, "pushed", "a")["load"], 95.0, "the push outlives the leader");
    for r in &replicas {
        assert_eq!(eu_answers(r, 100).await, 0, "{}", r.node);
    }
}
