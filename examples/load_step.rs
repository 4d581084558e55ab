//! The cost of one load control step for N endpoints with load feeds: the pure part
//! (`plan::next_map` over pushed loads, and applying the map to the snapshot's share
//! table), and a whole step that reads N pulled JSON feeds from one HTTP server on loopback.
//!
//! ```text
//! cargo run --release --example load_step -- [feeds=1000] [rounds=200]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::routing::get;
use steerdns::model::load::FeedSource;
use steerdns::server::load::pushed::PushedLoad;
use steerdns::server::load::run::Stepper;
use steerdns::server::load::{LoadMap, Loads, plan};

const SERVER: &str = r#"listen:
  dns: ["127.0.0.1:0"]
zones:
  - origin: tm.example.test.
    ns: [ns1.tm.example.test.]
    soa: { rname: hostmaster.example.test. }
    records: ["ns1 A 192.0.2.53"]
load:
  interval: 5s
  timeout: 2s
"#;

/// `feeds` endpoints, 10 a weighted profile, each with `load` (a YAML flow map).
fn write(dir: &std::path::Path, feeds: usize, load: impl Fn(usize) -> String) {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), SERVER).unwrap();
    let mut text = String::new();
    for p in 0..feeds.div_ceil(10) {
        text.push_str(&format!("---\nname: p{p}\nrouting: weighted\nendpoints:\n"));
        for e in 0..10.min(feeds - p * 10) {
            let i = p * 10 + e;
            text.push_str(&format!(
                "  - {{ name: e{e}, target: 192.0.2.{}, always_serve: true, load: {} }}\n",
                e + 1,
                load(i)
            ));
        }
    }
    std::fs::write(dir.join("profiles/p.yaml"), text).unwrap();
}

fn per(total: Duration, n: usize) -> String {
    format!("{:.1} µs", total.as_secs_f64() * 1e6 / n as f64)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let feeds = args.first().copied().unwrap_or(1000);
    let rounds = args.get(1).copied().unwrap_or(200);

    // The pure step over pushed loads.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), feeds, |_| "{ capacity: 100, pushed: true }".into());
    let snap = steerdns::config::load(&dir.path().join("steerdns.yaml"), None).unwrap().snapshot;
    let rules = snap.load_rules.clone().expect("load rules");
    let loads = Loads::default();
    let now = tokio::time::Instant::now();
    for (i, (p, e, f)) in plan::feeds(&snap).enumerate() {
        assert_eq!(f.source, FeedSource::Pushed);
        let ttl = Duration::from_secs(3600);
        let load = PushedLoad {
            load: (i % 120) as f64,
            at: now,
            at_wall: SystemTime::now(),
            ttl,
            by: "bench".into(),
        };
        loads.pushed.set(p, e, load);
    }
    let mut prev = Arc::new(LoadMap::default());
    let reads = plan::PulledReads::new();
    let (mut planning, mut applying) = (Duration::ZERO, Duration::ZERO);
    for round in 0..rounds {
        let t = Instant::now();
        let map = plan::next_map(
            plan::feeds(&snap),
            &rules,
            &prev,
            &reads,
            &loads.pushed,
            round as u64 + 1,
            now,
            SystemTime::now(),
        );
        planning += t.elapsed();
        let t = Instant::now();
        map.apply_to(&snap);
        applying += t.elapsed();
        prev = Arc::new(map);
    }
    assert_eq!(prev.entries.len(), feeds);
    println!(
        "{feeds} pushed feeds: step {} (plan {}, apply {}) over {rounds} rounds",
        per(planning + applying, rounds),
        per(planning, rounds),
        per(applying, rounds)
    );

    // A whole step reading pulled feeds from one local HTTP server.
    let app = Router::new().route("/load/{i}", get(|| async { "42" }));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), feeds, |i| format!("{{ capacity: 100, url: \"http://{addr}/load/{i}\" }}"));
    let snap = steerdns::config::load(&dir.path().join("steerdns.yaml"), None).unwrap().snapshot;
    let rules = snap.load_rules.clone().expect("load rules");
    let loads = Arc::new(Loads::default());
    let mut stepper = Stepper::new(loads.clone());
    let pulled_rounds = (rounds / 10).max(3);
    let mut total = Duration::ZERO;
    for _ in 0..pulled_rounds {
        let t = Instant::now();
        let map = stepper.step(&snap, &rules).await;
        total += t.elapsed();
        assert!(map.entries.iter().all(|e| e.error.is_none()), "a feed failed");
    }
    println!(
        "{feeds} pulled feeds over loopback HTTP: step {} over {pulled_rounds} rounds",
        per(total, pulled_rounds)
    );
}
