//! Pushed health shared by replicas through a real etcd: a push through one replica's admin
//! API changes the answers of every replica, a replica started later applies it before it
//! answers, a clear through another ends it everywhere, and its TTL ends it on every
//! replica at the same wall-clock time; a push etcd holds already expired applies as
//! expired (a `last_known` monitor reads it); with etcd down a push or a clear is refused
//! with 503 and nothing changes; a push for an endpoint this configuration lacks waits for
//! it, and keys that are not pushes are ignored with a warning.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use common::replicas::as_alice as api;
use common::*;
use serde_json::{Value, json};

/// `pushy`: a and b each with one `pushed` monitor that counts as up without a push, so a
/// answers until a push takes it down. `known`: a's monitor keeps its last known push.
const PROFILES: &str = "\
name: pushy
routing: priority
endpoints:
  - { name: a, target: 192.0.2.1, monitors: [{ name: ops, protocol: pushed, missing: healthy }] }
  - { name: b, target: 192.0.2.2, monitors: [{ name: ops, protocol: pushed, missing: healthy }] }
---
name: known
routing: priority
endpoints:
  - { name: a, target: 192.0.2.5, monitors: [{ name: ops, protocol: pushed, missing: last_known }] }
  - { name: b, target: 192.0.2.6, always_serve: true }
";

/// Longest wait for a change to reach another replica.
const PATIENCE: Duration = Duration::from_secs(15);

/// Starts replica `i` in `dir` with `profiles` and the named token `alice`.
async fn replica(dir: &Path, i: usize, etcd: &str, prefix: &str, profiles: &str) -> Replica {
    Replica::with_alice(dir, i, etcd, prefix, profiles, "").await
}

/// The path of endpoint `ep`'s pushed health in profile `p`.
fn health(p: &str, ep: &str) -> String {
    format!("/api/v1/profiles/{p}/endpoints/{ep}/health")
}

/// A push or a clear that must succeed; returns its answer.
async fn call(admin: SocketAddr, method: &str, path: &str, body: &str) -> Value {
    let r = api(admin, method, path, body).await;
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    r.json()
}

/// Endpoint `ep` of profile `p` as the replica's admin API shows it.
async fn endpoint(admin: SocketAddr, p: &str, ep: &str) -> Value {
    let r = api(admin, "GET", &format!("/api/v1/profiles/{p}"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let found = v["endpoints"].as_array().unwrap().iter().find(|e| e["name"] == ep).cloned();
    found.unwrap_or_else(|| panic!("no endpoint {ep} in {v}"))
}

/// The replica's events other than status changes, as `kind profile/endpoint by BY`.
async fn actions(admin: SocketAddr) -> Vec<String> {
    events(admin, |e| e["kind"] != "status").await
}

/// The replica's status changes of `p`/`ep`, as `from>to`.
async fn changes(admin: SocketAddr, p: &str, ep: &str) -> Vec<String> {
    let (p, ep) = (fq(p), ep.to_string());
    events(admin, |e| e["kind"] == "status" && e["profile"] == p && e["endpoint"] == ep).await
}

/// The replica's events that `keep` keeps, said shortly.
async fn events(admin: SocketAddr, keep: impl Fn(&Value) -> bool) -> Vec<String> {
    let r = api(admin, "GET", "/api/v1/events?since=0", "").await;
    let v = r.json();
    let field = |e: &Value, k: &str| e[k].as_str().unwrap_or("-").to_string();
    let kept = v["events"].as_array().unwrap().iter().filter(|e| keep(e));
    kept.map(|e| match field(e, "kind").as_str() {
        "status" => format!("{}>{}", field(e, "from"), field(e, "to")),
        kind => {
            format!("{kind} {}/{} by {}", field(e, "profile"), field(e, "endpoint"), field(e, "by"))
        }
    })
    .collect()
}

async fn client(etcd: &Etcd) -> etcd_client::Client {
    etcd_client::Client::connect([etcd.url.as_str()], None).await.unwrap()
}

/// The value of `key` in etcd, as JSON (`None` when there is no such key).
async fn stored(etcd: &Etcd, key: &str) -> Option<Value> {
    let got = client(etcd).await.get(key, None).await.unwrap();
    got.kvs().first().map(|kv| serde_json::from_slice(kv.value()).unwrap())
}

/// The key of `p`/`ep`'s push under `prefix`.
fn key(prefix: &str, p: &str, ep: &str) -> String {
    format!("{prefix}health_pushed/{}/{ep}", fq(p))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_through_one_replica_applies_on_every_replica_until_cleared() {
    let Some(etcd) = Etcd::start() else { return };
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    for (i, dir) in dirs.iter().take(3).enumerate() {
        replicas.push(replica(dir.path(), i, &etcd.url, "/shared/", PROFILES).await);
    }
    for r in &replicas {
        eventually(PATIENCE, &format!("{} answers a", r.node), async || {
            a_answer(r.addr, "pushy").await == "192.0.2.1"
        })
        .await;
    }

    // Pushed through replica 0: it has applied the push once the call returns; as the push
    // is a `pushed` monitor's result, every replica answers b once the replicas' views of
    // the endpoint reach the quorum.
    let body = r#"{"status": "unhealthy", "ttl": "1h", "reason": "maintenance"}"#;
    let v = call(replicas[0].admin, "PUT", &health("pushy", "a"), body).await;
    let pushed = v["pushed_health"].clone();
    assert_eq!((&pushed["by"], &pushed["live"]), (&json!("alice"), &json!(true)), "{v}");
    assert_eq!(endpoint(replicas[0].admin, "pushy", "a").await["pushed_health"], pushed);
    for r in &replicas {
        eventually(PATIENCE, &format!("{} answers b", r.node), async || {
            a_answer(r.addr, "pushy").await == "192.0.2.2"
        })
        .await;
        // The same push, at the same wall-clock times, whichever replica took it.
        let ep = endpoint(r.admin, "pushy", "a").await;
        assert_eq!(ep["pushed_health"], pushed, "{}", r.node);
        assert_eq!(ep["status"], "degraded", "{}", r.node);
    }
    let record = stored(&etcd, &key("/shared/", "pushy", "a")).await.unwrap();
    let want = json!({
        "healthy": false, "reason": "maintenance", "by": "alice",
        "at": pushed["at"], "ttl": "1h"
    });
    assert_eq!(record, want);

    // A replica started now answers with the push from its first query.
    let late = replica(dirs[3].path(), 3, &etcd.url, "/shared/", PROFILES).await;
    assert_eq!(a_answer(late.addr, "pushy").await, "192.0.2.2");
    assert_eq!(endpoint(late.admin, "pushy", "a").await["pushed_health"], pushed);

    // Cleared through replica 1: a answers again everywhere, the key is gone, and every
    // replica recorded both, by alice, whichever replica she called.
    let v = call(replicas[1].admin, "DELETE", &health("pushy", "a"), "").await;
    assert_eq!(v["pushed_health"], Value::Null, "{v}");
    replicas.push(late);
    for r in &replicas {
        eventually(PATIENCE, &format!("{} answers a again", r.node), async || {
            a_answer(r.addr, "pushy").await == "192.0.2.1"
        })
        .await;
        assert_eq!(endpoint(r.admin, "pushy", "a").await["pushed_health"], Value::Null);
        let want = [
            format!("health_pushed {}/a by alice", fq("pushy")),
            format!("health_cleared {}/a by alice", fq("pushy")),
        ];
        assert_eq!(actions(r.admin).await, want, "{}", r.node);
    }
    eventually(PATIENCE, "the cleared key deleted", async || {
        stored(&etcd, &key("/shared/", "pushy", "a")).await.is_none()
    })
    .await;
    // Clearing what is not pushed writes nothing and records nothing.
    call(replicas[2].admin, "DELETE", &health("pushy", "a"), "").await;
    assert_eq!(actions(replicas[2].admin).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_expires_on_every_replica_and_an_expired_one_applies_as_expired() {
    let Some(etcd) = Etcd::start() else { return };
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        replicas.push(replica(dir.path(), 4 + i, &etcd.url, "/ttl/", PROFILES).await);
    }

    // A push for 5s through replica 2: every replica takes a down, then back up when
    // the push expires, at the wall-clock time it says.
    let body = r#"{"status": "unhealthy", "ttl": "5s", "by": "deployer"}"#;
    let v = call(replicas[2].admin, "PUT", &health("pushy", "a"), body).await;
    let expires = v["pushed_health"]["expires"].clone();
    let at = humantime::parse_rfc3339(v["pushed_health"]["at"].as_str().unwrap()).unwrap();
    let end = humantime::format_rfc3339_millis(at + Duration::from_secs(5)).to_string();
    assert_eq!(expires, json!(end), "{v}");
    for r in &replicas {
        eventually(PATIENCE, &format!("{} lets the push expire", r.node), async || {
            let ep = endpoint(r.admin, "pushy", "a").await;
            ep["pushed_health"]["live"] == json!(false) && ep["status"] == "online"
        })
        .await;
        let ep = endpoint(r.admin, "pushy", "a").await;
        assert_eq!(ep["pushed_health"]["expires"], expires, "{}", r.node);
        assert_eq!(a_answer(r.addr, "pushy").await, "192.0.2.1", "{}", r.node);
        // It was in force on every replica meanwhile.
        let went = changes(r.admin, "pushy", "a").await;
        assert!(
            went.ends_with(&["online>degraded".into(), "degraded>online".into()]),
            "{}: {went:?}",
            r.node
        );
    }
    // Still in etcd: pushes stay until cleared.
    let record = stored(&etcd, &key("/ttl/", "pushy", "a")).await.unwrap();
    assert_eq!(record["by"], "deployer");

    // Written straight into etcd: a push made 10 minutes ago for 5 minutes is expired on
    // arrival. It changes no answer and records no push, but the `last_known` monitor of
    // `known`/a reads it; one made a minute ago for an hour is live on every replica.
    let ago = |s: u64| humantime::format_rfc3339_millis(SystemTime::now() - Duration::from_secs(s));
    let old = json!({"healthy": false, "reason": "old", "by": "bob", "at": ago(600).to_string(), "ttl": "5m"});
    let mut c = client(&etcd).await;
    c.put(key("/ttl/", "known", "a"), old.to_string(), None).await.unwrap();
    let recent = ago(60).to_string();
    let fresh = json!({"healthy": false, "by": "bob", "at": recent, "ttl": "1h"});
    c.put(key("/ttl/", "pushy", "b"), fresh.to_string(), None).await.unwrap();
    let recent = humantime::parse_rfc3339(&recent).unwrap();
    let fresh_end =
        humantime::format_rfc3339_millis(recent + Duration::from_secs(3600)).to_string();
    for r in &replicas {
        eventually(PATIENCE, &format!("{} reads both", r.node), async || {
            let known = endpoint(r.admin, "known", "a").await;
            let b = endpoint(r.admin, "pushy", "b").await;
            // The status is the quorum's over every replica's view, each of which reads
            // the same push: it follows once the others' views arrive.
            known["pushed_health"]["by"] == "bob"
                && b["pushed_health"]["by"] == "bob"
                && known["status"] == "degraded"
        })
        .await;
        let known = endpoint(r.admin, "known", "a").await;
        assert_eq!(known["pushed_health"]["live"], false, "{}: {known}", r.node);
        assert_eq!(known["status"], "degraded", "{}: {known}", r.node);
        let reason = known["reason"].as_str().unwrap();
        assert!(
            reason.contains("last known: pushed unhealthy by bob: old"),
            "{}: {reason}",
            r.node
        );
        assert_eq!(a_answer(r.addr, "known").await, "192.0.2.6", "{}", r.node);
        let b = endpoint(r.admin, "pushy", "b").await;
        assert_eq!((&b["pushed_health"]["live"], &b["status"]), (&json!(true), &json!("degraded")));
        assert_eq!(b["pushed_health"]["expires"], json!(fresh_end), "{}", r.node);
        let pushes: Vec<String> =
            actions(r.admin).await.into_iter().filter(|a| a.contains(" by bob")).collect();
        assert_eq!(pushes, [format!("health_pushed {}/b by bob", fq("pushy"))], "{}", r.node);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_down_a_push_is_refused_and_nothing_changes() {
    let Some(mut etcd) = Etcd::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let r = replica(dir.path(), 7, &etcd.url, "/down/", PROFILES).await;
    let body = r#"{"status": "unhealthy", "ttl": "1h"}"#;
    let pushed = call(r.admin, "PUT", &health("pushy", "a"), body).await["pushed_health"].clone();

    etcd.stop();
    let unreachable = format!("(etcd at {} is unreachable: ", etcd.url);
    let healthy = r#"{"status": "healthy", "ttl": "1h"}"#;
    for (method, body) in [("PUT", healthy), ("DELETE", "")] {
        let refused = api(r.admin, method, &health("pushy", "a"), body).await;
        assert_eq!(refused.status, 503, "{method}: {}", refused.text());
        let message = refused.json()["error"].as_str().unwrap().to_string();
        assert!(message.starts_with("etcd did not take the change"), "{message}");
        assert!(message.contains(&unreachable), "{message}");
        assert!(
            message.contains("none can be pushed or cleared while it is unreachable"),
            "{message}"
        );
    }
    // Still checked against the configuration first.
    let unknown = api(r.admin, "PUT", &health("pushy", "zz"), healthy).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    // Nothing changed, and queries are answered as before.
    assert_eq!(a_answer(r.addr, "pushy").await, "192.0.2.2");
    assert_eq!(endpoint(r.admin, "pushy", "a").await["pushed_health"], pushed);

    // Back: taken again.
    etcd.start_again();
    eventually(Duration::from_secs(20), "a clear taken once etcd is back", async || {
        api(r.admin, "DELETE", &health("pushy", "a"), "").await.status == 200
    })
    .await;
    eventually(PATIENCE, "the clear applied", async || {
        a_answer(r.addr, "pushy").await == "192.0.2.1"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_waits_for_its_endpoint_and_bad_keys_are_ignored() {
    let Some(etcd) = Etcd::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut c = client(&etcd).await;
    // Pushed through a replica whose configuration has an endpoint c this one lacks yet;
    // and keys that are not pushes.
    let now = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let push = json!({"healthy": false, "reason": "new", "by": "bob", "at": now, "ttl": "1h"});
    c.put(key("/odd/", "pushy", "c"), push.to_string(), None).await.unwrap();
    c.put(key("/odd/", "pushy", "a"), "{", None).await.unwrap();
    let long = json!({"healthy": false, "by": "x".repeat(5000), "at": now, "ttl": "1h"});
    c.put(key("/odd/", "pushy", "b"), long.to_string(), None).await.unwrap();
    c.put("/odd/health_pushed/not-absolute/a", push.to_string(), None).await.unwrap();
    let r = replica(dir.path(), 8, &etcd.url, "/odd/", PROFILES).await;
    for (what, needle) in [
        ("the bad value", "the value is not a pushed health"),
        ("the long value", "more than"),
        ("the bad key", "not-absolute"),
    ] {
        r.wait_line(what, |l| {
            l.contains("etcd key under health_pushed/ ignored") && l.contains(needle)
        })
        .await;
    }
    assert_eq!(a_answer(r.addr, "pushy").await, "192.0.2.1");

    // A reload brings c, first in line: the push applies to it at once.
    let with_c = PROFILES.replace(
        "endpoints:\n  - { name: a, target: 192.0.2.1",
        "endpoints:\n  - { name: c, target: 192.0.2.3, monitors: [{ name: ops, protocol: pushed, missing: healthy }] }\n  - { name: a, target: 192.0.2.1",
    );
    assert_ne!(with_c, PROFILES);
    write_atomic(&dir.path().join("profiles/p.yaml"), with_c);
    eventually(PATIENCE, "c listed and down", async || {
        let v = api(r.admin, "GET", "/api/v1/profiles/pushy", "").await.json();
        let c = v["endpoints"].as_array().unwrap().iter().find(|e| e["name"] == "c").cloned();
        c.is_some_and(|c| c["status"] == "degraded" && c["pushed_health"]["by"] == "bob")
    })
    .await;
    assert_eq!(a_answer(r.addr, "pushy").await, "192.0.2.1", "c is down, a answers");
    // Cleared on this replica too, though pushed elsewhere.
    call(r.admin, "DELETE", &health("pushy", "c"), "").await;
    assert_eq!(a_answer(r.addr, "pushy").await, "192.0.2.3");
}
