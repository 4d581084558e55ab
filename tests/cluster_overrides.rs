//! Run-time overrides shared by replicas through a real etcd: a drain, a weight or an
//! undrain made through any replica's admin API applies on all of them; a replica started
//! later applies them before it answers; with etcd down a change is refused with 503 and
//! serving goes on; the state file is the local copy a start with etcd down applies; an
//! override this configuration cannot apply stays in etcd and is reported once; a
//! geoproximity bias is shared the same way.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::replicas::as_alice as api;
use common::*;
use serde_json::{Value, json};

const PROFILES: &str = OVERRIDE_PROFILES;

/// Longest wait for a change to reach another replica.
const PATIENCE: Duration = Duration::from_secs(15);

/// Starts replica `i` in `dir` with the test profiles, the named token `alice` for its
/// admin API, and `extra` (top-level YAML).
async fn replica(dir: &Path, i: usize, etcd: &str, prefix: &str, extra: &str) -> Replica {
    Replica::with_alice(dir, i, etcd, prefix, PROFILES, extra).await
}

/// An override call that must succeed; returns its JSON answer.
async fn change(admin: SocketAddr, method: &str, path: &str, body: &str) -> Value {
    let r = api(admin, method, path, body).await;
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    r.json()
}

async fn drain(admin: SocketAddr, profile: &str, ep: &str) -> Value {
    change(admin, "POST", &format!("/api/v1/profiles/{profile}/endpoints/{ep}/drain"), "").await
}

async fn undrain(admin: SocketAddr, profile: &str, ep: &str) -> Value {
    change(admin, "POST", &format!("/api/v1/profiles/{profile}/endpoints/{ep}/undrain"), "").await
}

async fn get(admin: SocketAddr, path: &str) -> Value {
    let r = api(admin, "GET", path, "").await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r.json()
}

/// The run-time overrides `GET /api/v1/profiles` lists for `profile`.
async fn listed(admin: SocketAddr, profile: &str) -> Value {
    let v = get(admin, "/api/v1/profiles").await;
    let p = v["profiles"].as_array().unwrap().iter().find(|p| p["name"] == fq(profile));
    p.unwrap_or_else(|| panic!("no {profile} in {v}"))["overrides"].clone()
}

/// (kind, profile/endpoint, by) of the operator events numbered above `since`.
async fn actions(admin: SocketAddr) -> Vec<String> {
    let v = get(admin, "/api/v1/events?since=0").await;
    let field = |e: &Value, k: &str| e[k].as_str().unwrap_or("-").to_string();
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] != "status")
        .map(|e| {
            let (kind, p, ep, by) =
                (field(e, "kind"), field(e, "profile"), field(e, "endpoint"), field(e, "by"));
            format!("{kind} {p}/{ep} by {by}")
        })
        .collect()
}

/// The value of `key` in etcd, as JSON (`None` when there is no such key).
async fn stored(etcd: &Etcd, key: &str) -> Option<Value> {
    let mut client = etcd_client::Client::connect([etcd.url.as_str()], None).await.unwrap();
    let got = client.get(key, None).await.unwrap();
    got.kvs().first().map(|kv| serde_json::from_slice(kv.value()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_made_on_any_replica_applies_on_every_replica() {
    let Some(etcd) = Etcd::start() else { return };
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    for (i, dir) in dirs.iter().take(3).enumerate() {
        replicas.push(replica(dir.path(), i, &etcd.url, "/shared/", "").await);
    }
    for r in &replicas {
        assert_eq!(a_answer(r.addr, "prio").await, "192.0.2.1", "{}", r.node);
    }

    // Drained through replica 0: it answers without a once the call returns, the others
    // follow, and etcd holds who did it.
    let v = drain(replicas[0].admin, "prio", "a").await;
    let want = json!({
        "profile": fq("prio"), "endpoint": "a", "drained": true,
        "weight_override": null, "bias_override": null
    });
    assert_eq!(v, want);
    assert_eq!(a_answer(replicas[0].addr, "prio").await, "192.0.2.2");
    for r in &replicas {
        eventually(PATIENCE, &format!("{} drains prio/a", r.node), async || {
            a_answer(r.addr, "prio").await == "192.0.2.2"
        })
        .await;
    }
    let record = stored(&etcd, &format!("/shared/overrides/{}/a", fq("prio"))).await.unwrap();
    assert_eq!(
        (&record["drained"], &record["weight"], &record["by"]),
        (&json!(true), &Value::Null, &json!("alice"))
    );
    assert!(record["at"].as_str().unwrap().ends_with('Z'), "{record}");

    // A weight set through replica 1 shows in every replica's profile list and metrics,
    // and routes: b at weight 0 is a standby.
    let path = "/api/v1/profiles/split/endpoints/b/weight";
    change(replicas[1].admin, "PUT", path, r#"{"weight": 0}"#).await;
    let labels = [("profile", fq("split")), ("endpoint", "b".to_string())];
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for r in &replicas {
        let want = json!([{"endpoint": "b", "drained": false, "weight_override": 0}]);
        eventually(PATIENCE, &format!("{} lists the weight", r.node), async || {
            listed(r.admin, "split").await == want
        })
        .await;
        let m = scrape(r.admin, Some(ALICE)).await;
        assert_eq!(m.select("steerdns_endpoint_weight_override", &labels).len(), 1, "{}", r.node);
        assert_eq!(m.sum("steerdns_endpoint_weight_override", &labels), 0.0, "{}", r.node);
        for _ in 0..20 {
            assert_eq!(a_answer(r.addr, "split").await, "192.0.2.11", "{}", r.node);
        }
    }

    // Undrained through replica 2: back everywhere. The key is gone from etcd, and every
    // replica's events name alice for each change, whichever replica she used.
    undrain(replicas[2].admin, "prio", "a").await;
    for r in &replicas {
        eventually(PATIENCE, &format!("{} undrains prio/a", r.node), async || {
            a_answer(r.addr, "prio").await == "192.0.2.1"
        })
        .await;
    }
    eventually(PATIENCE, "the emptied key deleted", async || {
        stored(&etcd, &format!("/shared/overrides/{}/a", fq("prio"))).await.is_none()
    })
    .await;
    let want = [
        format!("drain {}/a by alice", fq("prio")),
        format!("weight {}/b by alice", fq("split")),
        format!("undrain {}/a by alice", fq("prio")),
    ];
    for r in &replicas {
        assert_eq!(actions(r.admin).await, want, "{}", r.node);
    }
    // Undraining what is not drained writes nothing.
    undrain(replicas[0].admin, "prio", "a").await;
    assert_eq!(stored(&etcd, &format!("/shared/overrides/{}/a", fq("prio"))).await, None);

    // A replica started now applies the overrides before it answers its first query.
    drain(replicas[1].admin, "prio", "a").await;
    let late = replica(dirs[3].path(), 3, &etcd.url, "/shared/", "").await;
    assert_eq!(a_answer(late.addr, "prio").await, "192.0.2.2");
    assert_eq!(a_answer(late.addr, "split").await, "192.0.2.11");
    let shown = get(late.admin, "/api/v1/profiles/split").await;
    let b = shown["endpoints"].as_array().unwrap().iter().find(|e| e["name"] == "b").unwrap();
    assert_eq!((&b["weight"], &b["weight_override"]), (&json!(0), &json!(0)), "{b}");
}

/// Two endpoints for a client in Paris (192.0.2.0/25 in the shipped sample database):
/// Frankfurt 478 km, Dublin 781 km; Dublin wins from a bias of +39 (781 × 0.61 < 478).
const NEAR: &str = "\
name: near
routing: geoproximity
endpoints:
  - { name: dublin, target: 192.0.2.31, coordinates: { latitude: 53.35, longitude: -6.26 }, always_serve: true }
  - { name: frankfurt, target: 192.0.2.32, coordinates: { latitude: 50.11, longitude: 8.68 }, always_serve: true }
";

/// The A answer of `near` at `addr` for a client in Paris (ECS).
async fn near_from_paris(addr: SocketAddr) -> String {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    let q = Q::new(&fq("near"), T_A).edns().ecs(ip("192.0.2.7"), 32);
    let raw = udp_exchange(&sock, &q.bytes()).await.unwrap();
    Reply::new(raw).addrs().iter().map(ToString::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bias_set_on_one_replica_moves_answers_on_every_replica() {
    let Some(etcd) = Etcd::start() else { return };
    let db = Path::new(env!("CARGO_MANIFEST_DIR")).join("geo-data/sample-city.mmdb");
    let geo = format!("geo:\n  database: {}\n", db.display());
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
        std::fs::write(dir.path().join("profiles/near.yaml"), NEAR).unwrap();
        replicas.push(replica(dir.path(), 7 + i, &etcd.url, "/bias/", &geo).await);
    }
    for r in &replicas {
        assert_eq!(near_from_paris(r.addr).await, "192.0.2.32", "{}: frankfurt", r.node);
    }
    let path = "/api/v1/profiles/near/endpoints/dublin/bias";
    let v = change(replicas[0].admin, "PUT", path, r#"{"bias": 40}"#).await;
    assert_eq!(v["bias_override"], 40, "{v}");
    for r in &replicas {
        eventually(PATIENCE, &format!("{} answers dublin", r.node), async || {
            near_from_paris(r.addr).await == "192.0.2.31"
        })
        .await;
    }
    let record = stored(&etcd, &format!("/bias/overrides/{}/dublin", fq("near"))).await.unwrap();
    assert_eq!((&record["bias"], &record["by"]), (&json!(40), &json!("alice")), "{record}");

    change(replicas[1].admin, "DELETE", path, "").await;
    for r in &replicas {
        eventually(PATIENCE, &format!("{} answers frankfurt again", r.node), async || {
            near_from_paris(r.addr).await == "192.0.2.32"
        })
        .await;
        let want = [
            format!("bias {}/dublin by alice", fq("near")),
            format!("bias_cleared {}/dublin by alice", fq("near")),
        ];
        assert_eq!(actions(r.admin).await, want, "{}", r.node);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_down_changes_are_refused_and_serving_goes_on() {
    let Some(mut etcd) = Etcd::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let r = replica(dir.path(), 4, &etcd.url, "/down/", "").await;
    drain(r.admin, "prio", "a").await;
    let generation =
        async || get(r.admin, "/api/v1/profiles").await["generation"].as_u64().unwrap();
    let before = generation().await;

    etcd.stop();
    let refused = api(r.admin, "POST", "/api/v1/profiles/prio/endpoints/a/undrain", "").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    let message = refused.json()["error"].as_str().unwrap().to_string();
    assert!(message.contains("etcd did not take the change"), "{message}");
    // Said as an operator reads it, not as the gRPC library does.
    let unreachable = format!("(etcd at {} is unreachable: ", etcd.url);
    assert!(message.contains(&unreachable), "{message}");
    assert!(!message.contains("Status") && !message.contains("transport"), "{message}");
    assert!(message.contains("none can change while it is unreachable"), "{message}");
    // Nothing changed, and queries are answered as before.
    assert_eq!(a_answer(r.addr, "prio").await, "192.0.2.2");
    assert_eq!(
        listed(r.admin, "prio").await,
        json!([{"endpoint": "a", "drained": true, "weight_override": null}])
    );
    assert_eq!(generation().await, before);

    // Back: changes are taken again, and the replica rebuilt only for the change itself
    // (reading the overrides again after the outage found nothing new).
    etcd.start_again();
    let path = "/api/v1/profiles/prio/endpoints/a/undrain";
    eventually(Duration::from_secs(20), "a change taken once etcd is back", async || {
        api(r.admin, "POST", path, "").await.status == 200
    })
    .await;
    assert_eq!(a_answer(r.addr, "prio").await, "192.0.2.1");
    assert_eq!(generation().await, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_with_etcd_down_applies_the_state_file_copy() {
    let Some(mut etcd) = Etcd::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = "state_file: overrides.json\n";
    let mut r = replica(dir.path(), 5, &etcd.url, "/copy/", state).await;
    drain(r.admin, "prio", "a").await;
    let copy = std::fs::read_to_string(dir.path().join("overrides.json")).unwrap();
    assert!(copy.contains("\"drained\": true"), "{copy}");
    r.terminate();

    etcd.stop();
    let r = replica(dir.path(), 5, &etcd.url, "/copy/", state).await;
    r.wait_line("the warning", |l| l.contains("applying the state file's copy until etcd answers"))
        .await;
    assert_eq!(a_answer(r.addr, "prio").await, "192.0.2.2");

    // Meanwhile another replica undrained it: once etcd is back, etcd's word applies.
    etcd.start_again();
    let mut client = etcd_client::Client::connect([etcd.url.as_str()], None).await.unwrap();
    client.delete(format!("/copy/overrides/{}/a", fq("prio")), None).await.unwrap();
    eventually(PATIENCE, "etcd's overrides applied", async || {
        a_answer(r.addr, "prio").await == "192.0.2.1"
    })
    .await;
    let copy = std::fs::read_to_string(dir.path().join("overrides.json")).unwrap();
    assert!(!copy.contains("\"drained\": true"), "{copy}");
    // Deleted by hand, the change has no author but etcd.
    let events = actions(r.admin).await;
    assert_eq!(events.last().unwrap(), &format!("undrain {}/a by etcd", fq("prio")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_this_configuration_cannot_apply_stays_in_etcd_and_is_reported_once() {
    let Some(etcd) = Etcd::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut client = etcd_client::Client::connect([etcd.url.as_str()], None).await.unwrap();
    // Another replica's profile has an endpoint this one lacks; and a key no replica reads.
    let gone = format!("/odd/overrides/{}/zzz", fq("prio"));
    let value = r#"{"drained":true,"weight":null,"by":"bob","at":"2030-01-01T00:00:00Z"}"#;
    client.put(gone.as_str(), value, None).await.unwrap();
    client.put("/odd/overrides/not-absolute/a", value, None).await.unwrap();
    let r = replica(dir.path(), 6, &etcd.url, "/odd/", "").await;
    // Two more changes rebuild the configuration twice.
    drain(r.admin, "prio", "b").await;
    undrain(r.admin, "prio", "b").await;
    let dropped: Vec<String> =
        actions(r.admin).await.into_iter().filter(|a| a.starts_with("override_dropped")).collect();
    assert_eq!(dropped, [format!("override_dropped {}/zzz by -", fq("prio"))]);
    // The log lines are read by another thread: wait for the last change's, then count.
    r.wait_line("the undrain", |l| {
        l.contains("endpoint override changed") && l.contains("undrain")
    })
    .await;
    let log = r.stderr_text();
    let lines = |what: &str| log.lines().filter(|l| l.contains(what)).count();
    assert_eq!(lines("run-time override dropped"), 1, "{log}");
    assert_eq!(lines("/odd/overrides/not-absolute/a"), 1, "{log}");
    assert!(stored(&etcd, &gone).await.is_some(), "kept in etcd");
}
