//! explain with load shares: the trace names each loaded endpoint's load, utilisation,
//! target and share, and what routing did with it (kept, spilled, a scaled weight). The
//! shares are chosen so that no line depends on a random draw: 0 always spills, above high
//! spills without a draw, and weighted choices only scale weights.

use std::net::IpAddr;
use std::path::Path;

mod common;

use hickory_proto::rr::{Name, RecordType};
use steerdns::config;
use steerdns::model::load::EndpointLoad;
use steerdns::responder::explain::{AllHealthy, explain};

const PROFILES: &str = r#"name: www
routing: priority
endpoints:
  - { name: eu, target: 192.0.2.1, always_serve: true, load: { capacity: 1000, pushed: true } }
  - { name: us, target: 192.0.2.2, always_serve: true, load: { capacity: 500, pushed: true } }
  - { name: ap, target: 192.0.2.3, always_serve: true }
---
name: api
routing: weighted
endpoints:
  - { name: a, target: 192.0.2.11, weight: 3, always_serve: true, load: { capacity: 10, pushed: true } }
  - { name: b, target: 192.0.2.12, weight: 2, always_serve: true, load: { capacity: 10, pushed: true } }
"#;

fn load(dir: &Path) -> config::Loaded {
    let path = common::config_dir(dir, common::ZONE_ONLY_SERVER, &[("p.yaml", PROFILES)]);
    config::load(&path, None).unwrap_or_else(|e| panic!("{:?}", common::located(&e)))
}

fn slot(snap: &steerdns::model::Snapshot, profile: usize, name: &str) -> usize {
    snap.profiles[profile].endpoints.iter().find(|e| e.name == name).unwrap().health_slot.unwrap()
}

fn reading(load: Option<f64>, u: Option<f64>, target: f64, share: f64, high: bool) -> EndpointLoad {
    let stale = load.is_none();
    EndpointLoad { load, utilisation: u, target, share, stale, above_high: high }
}

fn lines_about_endpoints(trace: &[String]) -> Vec<&str> {
    trace.iter().map(String::as_str).filter(|l| l.starts_with("endpoint ")).collect()
}

#[test]
fn explain_shows_each_loaded_endpoint_and_what_the_draw_did() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load(dir.path());
    let snap = &loaded.snapshot;
    snap.load.set(slot(snap, 0, "eu"), 0.4, true);
    snap.load.set(slot(snap, 0, "us"), 0.0, false);
    let loads = Box::new(|profile: &str, endpoint: &str| match (profile, endpoint) {
        ("www.tm.example.test.", "eu") => Some(reading(Some(930.0), Some(0.93), 0.35, 0.4, true)),
        ("www.tm.example.test.", "us") => Some(reading(Some(460.0), Some(0.92), 0.0, 0.0, true)),
        _ => None,
    });
    let name = Name::from_ascii("www.tm.example.test.").unwrap();
    let client: IpAddr = "198.51.100.7".parse().unwrap();
    let health = AllHealthy(&*snap.health);
    let e = explain(snap, &health, &name, RecordType::A, client, None, Some(loads));
    assert_eq!(e.answer, ["www.tm.example.test. 30 IN A 192.0.2.3"], "{:#?}", e.trace);
    assert_eq!(
        lines_about_endpoints(&e.trace),
        [
            "endpoint eu: load 930/1000 (utilisation 0.93, above high): share 0.40, target 0.35, spilled (above high)",
            "endpoint us: load 460/500 (utilisation 0.92, above high): share 0.00, target 0.00, spilled",
        ],
        "{:#?}",
        e.trace
    );
    // Without the control loop's figures: the share alone.
    let plain = explain(snap, &health, &name, RecordType::A, client, None, None);
    assert_eq!(plain.answer, e.answer);
    assert_eq!(
        lines_about_endpoints(&plain.trace),
        [
            "endpoint eu: share 0.40 (above high), spilled (above high)",
            "endpoint us: share 0.00, spilled"
        ],
    );
}

#[test]
fn explain_shows_weights_scaled_by_share_and_stale_readings() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load(dir.path());
    let snap = &loaded.snapshot;
    snap.load.set(slot(snap, 1, "a"), 0.4, false);
    snap.load.set(slot(snap, 1, "b"), 0.5, false);
    let loads = Box::new(|_: &str, endpoint: &str| match endpoint {
        "a" => Some(reading(Some(8.5), Some(0.85), 0.3, 0.4, false)),
        "b" => Some(reading(None, None, 1.0, 0.5, false)),
        _ => None,
    });
    let name = Name::from_ascii("api.tm.example.test.").unwrap();
    let client: IpAddr = "198.51.100.7".parse().unwrap();
    let health = AllHealthy(&*snap.health);
    let e = explain(snap, &health, &name, RecordType::A, client, None, Some(loads));
    assert_eq!(
        lines_about_endpoints(&e.trace),
        [
            "endpoint a: load 8.5/10 (utilisation 0.85): share 0.40, target 0.30, weight 3 → 1.20",
            "endpoint b: load stale: share 0.50, target 1.00, weight 2 → 1.00",
        ],
        "{:#?}",
        e.trace
    );
}
