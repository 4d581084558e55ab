//! Load feedback configuration: every rule of `load:` and of an endpoint's `load:` with
//! the FILE:LINE:COL of its error, what a valid configuration builds, and the shares a
//! reload carries over (by profile and endpoint name).

use std::time::Duration;

mod common;

use common::{assert_each_located, config_dir, errors_of};

use steerdns::config;
use steerdns::model::load::{FeedSource, MetricSelector, OnStale};

const SERVER: &str = common::ZONE_ONLY_SERVER;

/// A profile whose endpoint `a` has `load:` with `lines` (each `key: value`) from line 7
/// on, at column 7: a value is at column `key.len() + 9`.
fn with_load(lines: &[&str]) -> String {
    let mut p =
        "name: www\nrouting: priority\nendpoints:\n  - name: a\n    target: 192.0.2.1\n    load:\n"
            .to_string();
    for l in lines {
        p.push_str(&format!("      {l}\n"));
    }
    p
}

const PLAIN: &str =
    "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n";

/// Every rule of an endpoint's `load:`, each at the key it is about.
#[test]
fn endpoint_load_errors_are_located() {
    let url = "url: http://127.0.0.1:9100/load";
    let cases: Vec<(String, &str, &str)> = vec![
        (with_load(&["capacity: 0", url]), "p.yaml:7:17", "load.capacity must be a number above 0, got 0"),
        (with_load(&["capacity: -5", url]), "p.yaml:7:17", "load.capacity must be a number above 0, got -5"),
        (with_load(&["capacity: .inf", url]), "p.yaml:7:17", "load.capacity must be a number above 0, got inf"),
        (with_load(&["capacity: 10", "url: ftp://127.0.0.1/load"]), "p.yaml:8:12", "load.url must be an http or https URL, got \"ftp://127.0.0.1/load\""),
        (with_load(&["capacity: 10", "url: 127.0.0.1:9100"]), "p.yaml:8:12", "load.url must be an http or https URL"),
        (with_load(&["capacity: 10", url, "pushed: true"]), "p.yaml:9:15", "load: either url or pushed: true, not both"),
        (with_load(&["capacity: 10"]), "p.yaml:7:7", "load needs url (pulled) or pushed: true"),
        (with_load(&["capacity: 10", "pushed: false"]), "p.yaml:8:15", "load needs url (pulled) or pushed: true"),
        (with_load(&["capacity: 10", "pushed: true", "json_pointer: /load"]), "p.yaml:9:21", "load.json_pointer applies to a pulled feed (url) only"),
        (with_load(&["capacity: 10", "pushed: true", "metric: m"]), "p.yaml:9:15", "load.metric applies to a pulled feed (url) only"),
        (with_load(&["capacity: 10", url, "json_pointer: /load", "metric: m"]), "p.yaml:10:15", "load: json_pointer or metric, not both"),
        (with_load(&["capacity: 10", url, "json_pointer: load"]), "p.yaml:9:21", "load.json_pointer: \"load\" must be empty or start with /"),
        (with_load(&["capacity: 10", url, "json_pointer: /a~2"]), "p.yaml:9:21", "~ must be followed by 0 or 1"),
        (with_load(&["capacity: 10", url, "metric: 'm{pool=~\"e.*\"}'"]), "p.yaml:9:15", "load.metric: label pool: only = matchers are supported, not =~"),
        (with_load(&["capacity: 10", url, "metric: '9m'"]), "p.yaml:9:15", "load.metric: \"9m\" is not a metric name"),
        (with_load(&["capacity: 10", url, "low: 0.95"]), "p.yaml:9:12", "load.low (0.95) must be below load.high (0.9)"),
        (with_load(&["capacity: 10", url, "high: 0.5"]), "p.yaml:9:13", "load.low (0.7) must be below load.high (0.5)"),
        (with_load(&["capacity: 10", url, "high: 11"]), "p.yaml:9:13", "load.high must be between 0 and 10, got 11"),
        (with_load(&["capacity: 10", url, "low: -0.1"]), "p.yaml:9:12", "load.low must be between 0 and 10, got -0.1"),
        (with_load(&["capacity: 10", url, "colour: red"]), "p.yaml:9:7", "unknown field `colour`"),
        (
            "name: www\nrouting: priority\nendpoints:\n  - name: n\n    profile: c\n    load: { capacity: 1, pushed: true }\n---\nname: c\nrouting: priority\nendpoints: []\n".into(),
            "p.yaml:6:11",
            "load does not apply to a nested endpoint",
        ),
    ];
    assert_each_located(&cases, |yaml| errors_of(SERVER, yaml));
}

/// Every rule of the top-level `load:`; a value of `load:` line N (from 9 on) is at
/// column `key.len() + 5`.
#[test]
fn top_level_load_errors_are_located() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "  low: 0.9\n  high: 0.8\n",
            "steerdns.yaml:9:8",
            "load.low (0.9) must be below load.high (0.8)",
        ),
        ("  high: 0.6\n", "steerdns.yaml:9:9", "load.low (0.7) must be below load.high (0.6)"),
        ("  high: 10.5\n", "steerdns.yaml:9:9", "load.high must be between 0 and 10, got 10.5"),
        ("  low: -1\n", "steerdns.yaml:9:8", "load.low must be between 0 and 10, got -1"),
        (
            "  max_step: 0\n",
            "steerdns.yaml:9:13",
            "load.max_step must be above 0 and at most 1, got 0",
        ),
        (
            "  max_step: 1.5\n",
            "steerdns.yaml:9:13",
            "load.max_step must be above 0 and at most 1, got 1.5",
        ),
        (
            "  deadband: 1\n",
            "steerdns.yaml:9:13",
            "load.deadband must be at least 0 and below 1, got 1",
        ),
        (
            "  deadband: -0.01\n",
            "steerdns.yaml:9:13",
            "load.deadband must be at least 0 and below 1, got -0.01",
        ),
        (
            "  interval: 10ms\n",
            "steerdns.yaml:9:13",
            "load.interval must be between 100ms and 1h, got 10ms",
        ),
        (
            "  interval: 2h\n",
            "steerdns.yaml:9:13",
            "load.interval must be between 100ms and 1h, got 2h",
        ),
        ("  interval: five\n", "steerdns.yaml:9:13", "load.interval: invalid duration \"five\""),
        (
            "  stale_after: 1s\n",
            "steerdns.yaml:9:16",
            "load.stale_after must be at least 5s, got 1s",
        ),
        (
            "  interval: 1s\n  stale_after: 500ms\n",
            "steerdns.yaml:10:16",
            "load.stale_after must be at least 1s, got 500ms",
        ),
        (
            "  on_stale: panic\n",
            "steerdns.yaml:9:13",
            "load.on_stale must be ignore or overloaded, got \"panic\"",
        ),
        (
            "  timeout: 10s\n",
            "steerdns.yaml:9:12",
            "load.timeout must be between 10ms and 5s, got 10s",
        ),
        (
            "  timeout: 1ms\n",
            "steerdns.yaml:9:12",
            "load.timeout must be between 10ms and 5s, got 1ms",
        ),
        ("  gain: 2\n", "steerdns.yaml:9:3", "unknown field `gain`"),
    ];
    assert_each_located(cases, |load| errors_of(&format!("{SERVER}load:\n{load}"), PLAIN));
}

/// One load reports every error, in both files.
#[test]
fn every_load_error_is_collected() {
    let server = format!("{SERVER}load:\n  max_step: 0\n  deadband: 2\n");
    let profile = with_load(&["capacity: 0", "url: gopher://x"]);
    let errors = errors_of(&server, &profile);
    let at: Vec<&str> = errors.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        at,
        ["p.yaml:7:17", "p.yaml:8:12", "steerdns.yaml:9:13", "steerdns.yaml:10:13"],
        "{errors:#?}"
    );
}

const FED: &str = r#"name: www
routing: weighted
endpoints:
  - name: eu
    target: 192.0.2.1
    load:
      capacity: 1000
      url: http://127.0.0.1:9100/load
      json_pointer: /load
  - name: us
    target: 192.0.2.2
    load:
      capacity: 250.5
      url: https://127.0.0.1:9100/metrics
      metric: 'app_inflight{pool="us"}'
      low: 0.5
  - name: ap
    target: 192.0.2.3
    load: { capacity: 10, pushed: true, high: 0.95 }
  - name: plain
    target: 192.0.2.4
"#;

fn ep<'a>(snap: &'a steerdns::model::Snapshot, name: &str) -> &'a steerdns::model::Endpoint {
    snap.profiles[0].endpoints.iter().find(|e| e.name == name).unwrap()
}

#[test]
fn a_valid_load_configuration_builds_rules_and_feeds() {
    let dir = tempfile::tempdir().unwrap();
    let server = format!("{SERVER}load:\n  interval: 2s\n  low: 0.6\n  on_stale: overloaded\n");
    let path = config_dir(dir.path(), &server, &[("p.yaml", FED)]);
    let loaded = config::load(&path, None).unwrap_or_else(|e| panic!("{:?}", common::located(&e)));
    let snap = &loaded.snapshot;
    let rules = snap.load_rules.as_deref().expect("an endpoint has a feed");
    assert_eq!(rules.interval, Duration::from_secs(2));
    assert_eq!(rules.stale_after, Duration::from_secs(6), "3 x interval");
    assert_eq!(rules.timeout, Duration::from_secs(2), "2s, at most the interval");
    assert_eq!((rules.low, rules.high, rules.max_step, rules.deadband), (0.6, 0.9, 0.1, 0.02));
    assert_eq!(rules.on_stale, OnStale::Overloaded);

    let eu = ep(snap, "eu").load.as_deref().unwrap();
    assert_eq!(eu.capacity, 1000.0);
    assert_eq!((eu.low, eu.high), (0.6, 0.9), "the top level's watermarks");
    let url = "http://127.0.0.1:9100/load".to_string();
    assert_eq!(eu.source, FeedSource::Json { url, pointer: Some("/load".into()) });
    let us = ep(snap, "us").load.as_deref().unwrap();
    assert_eq!((us.capacity, us.low, us.high), (250.5, 0.5, 0.9));
    let metric =
        MetricSelector { name: "app_inflight".into(), labels: vec![("pool".into(), "us".into())] };
    let url = "https://127.0.0.1:9100/metrics".to_string();
    assert_eq!(us.source, FeedSource::Prometheus { url, metric });
    let ap = ep(snap, "ap").load.as_deref().unwrap();
    assert_eq!((ap.source.clone(), ap.low, ap.high), (FeedSource::Pushed, 0.6, 0.95));
    assert!(ep(snap, "plain").load.is_none());
    assert_eq!(snap.load.len(), snap.health.len());
    assert!((0..snap.load.len()).all(|s| snap.load.get(s).is_full()));
}

#[test]
fn without_a_feed_there_are_no_load_rules() {
    let dir = tempfile::tempdir().unwrap();
    let path =
        config_dir(dir.path(), &format!("{SERVER}load:\n  interval: 2s\n"), &[("p.yaml", PLAIN)]);
    let loaded = config::load(&path, None).unwrap();
    assert!(loaded.snapshot.load_rules.is_none());
}

/// A reload keeps the share of an endpoint that is still fed (found by name, whatever
/// its slot), drops a removed endpoint's, starts a new one full, and resets one whose
/// feed was removed.
#[test]
fn a_reload_carries_shares_over_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_dir(dir.path(), SERVER, &[("p.yaml", FED)]);
    let first = config::load(&path, None).unwrap();
    let s = &first.snapshot;
    let slot = |snap: &steerdns::model::Snapshot, n: &str| ep(snap, n).health_slot.unwrap();
    s.load.set(slot(s, "eu"), 0.4, true);
    s.load.set(slot(s, "us"), 0.6, false);
    s.load.set(slot(s, "ap"), 0.3, false);
    // `us` removed, `new` added before `eu` (so `eu` changes slot), `ap` loses its feed.
    let edited = r#"name: www
routing: weighted
endpoints:
  - name: new
    target: 192.0.2.9
    load: { capacity: 5, pushed: true }
  - name: eu
    target: 192.0.2.1
    load: { capacity: 1000, pushed: true }
  - name: ap
    target: 192.0.2.3
"#;
    std::fs::write(dir.path().join("profiles/p.yaml"), edited).unwrap();
    let second = config::load(&path, Some(first.previous())).unwrap();
    let t = &second.snapshot;
    assert_ne!(slot(t, "eu"), slot(s, "eu"), "the test moves eu to another slot");
    let eu = t.load.get(slot(t, "eu"));
    assert_eq!((eu.as_f64() * 1000.0).round(), 400.0);
    assert!(eu.above_high);
    assert!(t.load.get(slot(t, "new")).is_full());
    assert!(t.load.get(slot(t, "ap")).is_full(), "no feed: full");
    assert_eq!(t.load.len(), 3, "us is gone with its slot");
    assert!((0..3).all(|i| (t.load.get(i).as_f64() - 0.6).abs() > 0.01), "no trace of us");
}
