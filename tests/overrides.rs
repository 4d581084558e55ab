//! Run-time overrides over real HTTP and DNS: drain and undrain, weights, the state file
//! across reloads and restarts, overrides a reload drops, the event list (operator actions
//! and a probe's status change from a real HTTP backend), explain, metrics, and the named
//! admin tokens changes are recorded under.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const ADMIN: &str = "admin-t0ken-for-tests";
const ALICE: &str = "alice-t0ken-for-tests";

const PROFILES: &str = OVERRIDE_PROFILES;

/// Longest wait for something the server does within a few probe intervals.
const PATIENCE: Duration = Duration::from_secs(15);

/// Writes the test configuration into `dir` with the admin API, the `admin` token
/// (`admin.token_file`), the named token `alice` and `state_file: overrides.json`.
fn write(dir: &Path, profiles: &[(&str, &str)], location: bool) {
    if location {
        let mut all = location_profiles();
        all.extend(profiles.iter().map(|(n, t)| (n.to_string(), t.to_string())));
        write_location_config(dir, &all);
    } else {
        write_config(dir, profiles);
    }
    let yaml = std::fs::read_to_string(dir.join("steerdns.yaml")).unwrap();
    let mut yaml = with_admin(&yaml, Some("admin.token"));
    yaml.push_str(
        "  tokens:\n    - { name: alice, file: alice.token }\nstate_file: overrides.json\n",
    );
    std::fs::write(dir.join("steerdns.yaml"), yaml).unwrap();
    std::fs::write(dir.join("admin.token"), format!("{ADMIN}\n")).unwrap();
    std::fs::write(dir.join("alice.token"), format!("{ALICE}\n")).unwrap();
}

async fn start(profiles: &[(&str, &str)]) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), profiles, false);
    Harness::in_dir(dir).await
}

/// One call to the admin API with `token` (and a body, for PUT).
async fn api(h: &Harness, method: &str, path: &str, token: Option<&str>, body: &str) -> Http {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> =
        auth.as_deref().map(|a| ("Authorization", a)).into_iter().collect();
    http_with_body(h.admin(), method, path, &headers, body.as_bytes()).await
}

/// An override call that must succeed; returns its JSON answer.
async fn change(h: &Harness, method: &str, target: &str, action: &str, token: &str) -> Value {
    let body = match action.split_once('=') {
        Some((_, w)) => format!("{{\"weight\": {w}}}"),
        None => String::new(),
    };
    let action = action.split('=').next().unwrap();
    let path = format!("/api/v1/profiles/{target}/{action}");
    let r = api(h, method, &path, Some(token), &body).await;
    assert_eq!(r.status, 200, "{method} {path}: {r:?} {}", r.text());
    r.json()
}

fn endpoint(path: &str) -> String {
    let (profile, ep) = path.split_once('/').unwrap();
    format!("{profile}/endpoints/{ep}")
}

async fn drain(h: &Harness, target: &str, token: &str) -> Value {
    change(h, "POST", &endpoint(target), "drain", token).await
}

async fn undrain(h: &Harness, target: &str, token: &str) -> Value {
    change(h, "POST", &endpoint(target), "undrain", token).await
}

async fn set_weight(h: &Harness, target: &str, weight: u32, token: &str) -> Value {
    change(h, "PUT", &endpoint(target), &format!("weight={weight}"), token).await
}

async fn clear_weight(h: &Harness, target: &str, token: &str) -> Value {
    change(h, "DELETE", &endpoint(target), "weight", token).await
}

async fn get(h: &Harness, path: &str) -> Value {
    let r = api(h, "GET", path, Some(ADMIN), "").await;
    assert_eq!(r.status, 200, "GET {path}: {r:?} {}", r.text());
    r.json()
}

/// The A answer of `name` (relative to the zone), one address as text.
async fn answer(h: &Harness, name: &str) -> String {
    h.udp(&Q::new(&fq(name), 1)).await.addrs().iter().map(ToString::to_string).collect()
}

/// How many of `n` A answers of `name` are each address.
async fn split(h: &Harness, name: &str, n: usize) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..n {
        *counts.entry(answer(h, name).await).or_insert(0) += 1;
    }
    counts
}

/// The endpoint `name` of `GET /api/v1/profiles/{profile}`.
async fn shown(h: &Harness, profile: &str, name: &str) -> Value {
    let v = get(h, &format!("/api/v1/profiles/{profile}")).await;
    let eps = v["endpoints"].as_array().unwrap();
    eps.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no {name} in {v}")).clone()
}

/// Every event numbered above `since`.
async fn events(h: &Harness, since: u64) -> Vec<Value> {
    let v = get(h, &format!("/api/v1/events?since={since}")).await;
    v["events"].as_array().unwrap().clone()
}

/// (kind, profile, endpoint, by) of each event, `-` for absent fields.
fn summary(events: &[Value]) -> Vec<String> {
    let field = |e: &Value, k: &str| e[k].as_str().unwrap_or("-").to_string();
    events
        .iter()
        .map(|e| {
            let mut s = format!(
                "{} {}/{} by {}",
                field(e, "kind"),
                field(e, "profile"),
                field(e, "endpoint"),
                field(e, "by")
            );
            if e.get("from").is_some() {
                s.push_str(&format!(" {} -> {}", field(e, "from"), field(e, "to")));
            }
            s
        })
        .collect()
}

fn override_body(profile: &str, ep: &str, drained: bool, weight: Option<u32>) -> Value {
    json!({
        "profile": fq(profile),
        "endpoint": ep,
        "drained": drained,
        "weight_override": weight,
        "bias_override": null,
    })
}

// ---------------------------------------------------------------------------------------
// Drain, weights, errors
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_moves_answers_and_undrain_brings_them_back() {
    let h = start(&[("p.yaml", PROFILES)]).await;
    assert_eq!(answer(&h, "prio").await, "192.0.2.1");

    let v = drain(&h, "prio/a", ALICE).await;
    assert_eq!(v, override_body("prio", "a", true, None));
    // The answer changed before the call returned.
    assert_eq!(answer(&h, "prio").await, "192.0.2.2");
    let a = shown(&h, "prio", "a").await;
    assert_eq!(
        (&a["drained"], &a["weight_override"], &a["enabled"], &a["status"]),
        (&json!(true), &Value::Null, &json!(true), &json!("unmonitored")),
        "{a}"
    );
    let list = get(&h, "/api/v1/profiles").await;
    let prio = list["profiles"].as_array().unwrap().iter().find(|p| p["name"] == fq("prio"));
    let want = json!([{ "endpoint": "a", "drained": true, "weight_override": null }]);
    assert_eq!(prio.unwrap()["overrides"], want);

    let v = get(&h, "/api/v1/explain?name=prio&client=192.0.2.200").await;
    let trace: Vec<&str> =
        v["trace"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(trace.contains(&"endpoint a is drained: it takes no answers"), "{trace:?}");
    assert!(v["answer"][0].as_str().unwrap().ends_with("192.0.2.2"), "{v}");

    let m = scrape(h.admin(), Some(ADMIN)).await;
    let labels = [("profile", fq("prio")), ("endpoint", "a".to_string())];
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(m.sum("steerdns_endpoint_drained", &labels), 1.0);
    assert_eq!(m.select("steerdns_endpoint_drained", &[]).len(), 1);

    // Draining again changes nothing and records nothing.
    drain(&h, "prio/a", ALICE).await;
    let v = undrain(&h, "prio/a", ADMIN).await;
    assert_eq!(v, override_body("prio", "a", false, None));
    assert_eq!(answer(&h, "prio").await, "192.0.2.1");
    let m = scrape(h.admin(), Some(ADMIN)).await;
    assert!(m.select("steerdns_endpoint_drained", &[]).is_empty());

    let all = events(&h, 0).await;
    assert_eq!(
        summary(&all),
        ["drain prio.tm.example.test./a by alice", "undrain prio.tm.example.test./a by admin"]
    );
    let first = &all[0];
    assert_eq!(first["seq"], 1);
    let time = first["time"].as_str().unwrap();
    assert!(time.len() == 20 && time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
    for absent in ["from", "to", "reason"] {
        assert!(first.get(absent).is_none(), "{first}");
    }
    let later = get(&h, "/api/v1/events?since=1").await;
    assert_eq!(summary(later["events"].as_array().unwrap()).len(), 1);
    assert_eq!(later["next"], 2);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_counts_carry_on_across_override_changes_and_reloads() {
    let h = start(&[("p.yaml", PROFILES)]).await;
    let ask = |n: usize| {
        let h = &h;
        async move {
            for _ in 0..n {
                answer(h, "prio").await;
            }
        }
    };
    ask(5).await;
    drain(&h, "prio/a", ALICE).await;
    ask(3).await;
    undrain(&h, "prio/a", ALICE).await;
    ask(2).await;
    let r = api(&h, "POST", "/api/v1/reload", Some(ADMIN), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    ask(1).await;
    // Each query counted once: none lost with a replaced snapshot, none counted twice
    // where a patched snapshot shares its predecessor's counters.
    let m = scrape(h.admin(), Some(ADMIN)).await;
    let prio = fq("prio");
    let queries = m.sum("steerdns_queries_total", &[("profile", &prio), ("qtype", "A")]);
    let answers = |ep| m.sum("steerdns_answers_total", &[("profile", &prio), ("endpoint", ep)]);
    assert_eq!((queries, answers("a"), answers("b")), (11.0, 8.0, 3.0));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_override_changes_the_weighted_split() {
    let h = start(&[("p.yaml", PROFILES)]).await;
    let (a, b) = ("192.0.2.11".to_string(), "192.0.2.12".to_string());
    let even = split(&h, "split", 200).await;
    assert!(even.contains_key(&a) && even.contains_key(&b), "1:1 gives both: {even:?}");

    // Weight 0 is standby: only when no weighted endpoint serves.
    assert_eq!(
        set_weight(&h, "split/b", 0, ALICE).await,
        override_body("split", "b", false, Some(0))
    );
    assert_eq!(split(&h, "split", 100).await.keys().collect::<Vec<_>>(), [&a]);

    set_weight(&h, "split/b", 1, ALICE).await;
    set_weight(&h, "split/a", 9, ALICE).await;
    let shown_a = shown(&h, "split", "a").await;
    assert_eq!((&shown_a["weight"], &shown_a["weight_override"]), (&json!(9), &json!(9)));
    // 9:1 over 400 answers: 360 expected, and 320..388 is more than 4 standard deviations
    // either side.
    let n = split(&h, "split", 400).await;
    let got_a = n.get(&a).copied().unwrap_or(0);
    assert!((320..=388).contains(&got_a), "9:1 split gave {n:?}");

    clear_weight(&h, "split/a", ADMIN).await;
    let v = clear_weight(&h, "split/b", ADMIN).await;
    assert_eq!(v, override_body("split", "b", false, None));
    let shown_b = shown(&h, "split", "b").await;
    assert_eq!((&shown_b["weight"], &shown_b["weight_override"]), (&json!(1), &Value::Null));
    assert_eq!(
        summary(&events(&h, 0).await),
        [
            "weight split.tm.example.test./b by alice 1 -> 0",
            "weight split.tm.example.test./b by alice 0 -> 1",
            "weight split.tm.example.test./a by alice 1 -> 9",
            "weight_cleared split.tm.example.test./a by admin 9 -> 1",
            "weight_cleared split.tm.example.test./b by admin 1 -> 1",
        ]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_are_404_and_bad_requests_400() {
    let h = start(&[("p.yaml", PROFILES)]).await;
    // (method, path under /api/v1/profiles/, body, status)
    let cases = [
        ("POST", "nope/endpoints/a/drain", "", 404),
        ("POST", "nope.tm.example.test./endpoints/a/drain", "", 404),
        ("POST", "prio/endpoints/zz/drain", "", 404),
        ("POST", "prio/endpoints/zz/undrain", "", 404),
        ("DELETE", "prio/endpoints/zz/weight", "", 404),
        ("PUT", "nope/endpoints/a/weight", r#"{"weight": 1}"#, 404),
        ("POST", "bad..name/endpoints/a/drain", "", 400),
        ("PUT", "split/endpoints/a/weight", r#"{"weight": 1001}"#, 400),
        ("PUT", "split/endpoints/a/weight", r#"{"weight": -1}"#, 400),
        ("PUT", "split/endpoints/a/weight", r#"{"weight": 1.5}"#, 400),
        ("PUT", "split/endpoints/a/weight", r#"{"weight": "2"}"#, 400),
        ("PUT", "split/endpoints/a/weight", r#"{"weight": 2, "by": "x"}"#, 400),
        ("PUT", "split/endpoints/a/weight", "{}", 400),
        ("PUT", "split/endpoints/a/weight", "", 400),
        ("PUT", "split/endpoints/a/weight", "weight=2", 400),
        ("PUT", "prio/endpoints/a/weight", r#"{"weight": 1}"#, 409),
        ("GET", "prio/endpoints/a/drain", "", 405),
        ("POST", "prio/endpoints/a/weight", "", 405),
    ];
    for (method, path, body, status) in cases {
        let path = format!("/api/v1/profiles/{path}");
        let r = api(&h, method, &path, Some(ADMIN), body).await;
        assert_eq!(r.status, status, "{method} {path} {body:?}: {}", r.text());
        if status != 405 {
            let e = r.json();
            assert!(e["error"].as_str().is_some_and(|e| !e.is_empty()), "{method} {path}: {e}");
        }
    }
    let r =
        api(&h, "PUT", "/api/v1/profiles/prio/endpoints/a/weight", Some(ADMIN), r#"{"weight": 1}"#)
            .await;
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (409, json!("routing: priority has no weights"))
    );
    let r = api(&h, "POST", "/api/v1/profiles/prio/endpoints/zz/drain", Some(ADMIN), "").await;
    assert_eq!(r.json()["error"], "profile prio.tm.example.test. has no endpoint named \"zz\"");
    for token in [None, Some("wrong")] {
        let r = api(&h, "POST", "/api/v1/profiles/prio/endpoints/a/drain", token, "").await;
        assert_eq!(r.status, 401, "token {token:?}");
    }
    let r = api(&h, "GET", "/api/v1/events?since=x", Some(ADMIN), "").await;
    assert_eq!(r.status, 400);
    assert_eq!(events(&h, 0).await, Vec::<Value>::new(), "nothing changed");
    assert_eq!(answer(&h, "prio").await, "192.0.2.1");
    assert!(!h.dir.path().join("overrides.json").exists(), "nothing was written");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// The state file: reloads, restarts, dropped overrides
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_survive_a_reload_and_a_restart() {
    let mut h = start(&[("p.yaml", PROFILES)]).await;
    drain(&h, "prio/a", ALICE).await;
    set_weight(&h, "split/b", 5, ALICE).await;
    let r = api(&h, "POST", "/api/v1/reload", Some(ADMIN), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(answer(&h, "prio").await, "192.0.2.2");
    assert_eq!(shown(&h, "split", "b").await["weight_override"], 5);

    let state = std::fs::read_to_string(h.dir.path().join("overrides.json")).unwrap();
    let mut state: Value = serde_json::from_str(&state).unwrap();
    // The recent events are kept beside the overrides (tests/admin.rs reads them back).
    state.as_object_mut().unwrap().remove("events");
    let want = json!({ "version": 1, "overrides": [
        { "profile": fq("prio"), "endpoint": "a", "drained": true },
        { "profile": fq("split"), "endpoint": "b", "drained": false, "weight": 5 },
    ]});
    assert_eq!(state, want);

    h.server.take().unwrap().shutdown().await;
    let dir = h.dir;
    let config = dir.path().join("steerdns.yaml");
    // The offline explain reads the state file too.
    let e = steerdns::commands::explain(&config, "prio", "A", ip("192.0.2.200"), &[]).unwrap();
    assert!(e.trace.iter().any(|t| t == "endpoint a is drained: it takes no answers"), "{e}");
    assert!(e.answer[0].ends_with("192.0.2.2"), "{e}");

    let h = Harness::in_dir(dir).await;
    assert_eq!(answer(&h, "prio").await, "192.0.2.2");
    assert_eq!(shown(&h, "prio", "a").await["drained"], true);
    assert_eq!(shown(&h, "split", "b").await["weight"], 5);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_the_endpoint_drops_its_override() {
    let h = start(&[("p.yaml", PROFILES)]).await;
    drain(&h, "prio/a", ALICE).await;
    drain(&h, "split/a", ALICE).await;
    set_weight(&h, "split/b", 5, ALICE).await;
    let since = get(&h, "/api/v1/events").await["next"].as_u64().unwrap();
    // prio loses a; split is no longer weighted, so b's weight has nothing to apply to.
    let edited = PROFILES
        .replace("  - { name: a, target: 192.0.2.1, always_serve: true }\n", "")
        .replace("routing: weighted", "routing: priority");
    std::fs::write(h.profile_path("p.yaml"), edited).unwrap();
    let r = api(&h, "POST", "/api/v1/reload", Some(ADMIN), "").await;
    assert_eq!(r.status, 200, "{}", r.text());

    let dropped = events(&h, since).await;
    let reasons: Vec<(String, String)> = dropped
        .iter()
        .filter(|e| e["kind"] == "override_dropped")
        .map(|e| {
            (
                format!("{}/{}", e["profile"].as_str().unwrap(), e["endpoint"].as_str().unwrap()),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            (
                format!("{}/a", fq("prio")),
                "drain dropped: the endpoint is no longer in the profile".to_string()
            ),
            (
                format!("{}/b", fq("split")),
                "weight 5 dropped: routing: priority has no weights".to_string()
            ),
        ]
    );
    let mut state: Value = serde_json::from_str(
        &std::fs::read_to_string(h.dir.path().join("overrides.json")).unwrap(),
    )
    .unwrap();
    state.as_object_mut().unwrap().remove("events");
    let want = json!({ "version": 1, "overrides": [
        { "profile": fq("split"), "endpoint": "a", "drained": true },
    ]});
    assert_eq!(state, want, "the state file keeps what still applies");
    assert_eq!(answer(&h, "split").await, "192.0.2.12", "split/a stays drained");
    assert_eq!(shown(&h, "split", "b").await["weight_override"], Value::Null);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_state_file_stops_startup_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &[("p.yaml", PROFILES)], false);
    std::fs::write(dir.path().join("overrides.json"), "{\"version\": 1,\n\"overrides\": [\n")
        .unwrap();
    let config = dir.path().join("steerdns.yaml");
    let want = "overrides.json:3:0: the state file is not valid: EOF while parsing a list at line 3 column 0";
    let errors = steerdns::commands::check(&config).unwrap_err();
    assert_eq!(located(&errors), [want]);
    let e = steerdns::server::Server::start(&config).await.err().expect("refused to start");
    let text = e.to_string();
    assert!(text.contains(&dir.path().join("overrides.json").display().to_string()), "{text}");

    // A state file inside the profiles directory would be read as profiles.
    let yaml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        yaml.replace("state_file: overrides.json", "state_file: profiles/o.json"),
    )
    .unwrap();
    let errors = steerdns::commands::check(&config).unwrap_err();
    assert!(
        located(&errors)
            .iter()
            .any(|e| e.ends_with("state_file must be outside the profiles directory")),
        "{errors}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_or_a_state_file_changes_are_by_loopback_and_kept_in_memory() {
    let h = Harness::with_admin(&[("p.yaml", PROFILES)], None).await;
    let r = http_post(h.admin(), "/api/v1/profiles/prio/endpoints/a/drain", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = http_post(h.admin(), "/api/v1/reload", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(answer(&h, "prio").await, "192.0.2.2", "a reload keeps the overrides in memory");
    let r = http_get(h.admin(), "/api/v1/events", None).await;
    assert_eq!(
        summary(r.json()["events"].as_array().unwrap()),
        ["drain prio.tm.example.test./a by loopback"]
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Events from probes; other routing methods; tokens
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_status_change_is_an_event() {
    let backend = HttpBackend::start("127.0.0.2").await;
    let web = format!(
        "name: web\nrouting: priority\n\
         monitor: {{ interval: 1s, timeout: 300ms, tolerated_failures: 0, port: {} }}\n\
         endpoints:\n  - {{ name: a, target: 127.0.0.2 }}\n  - {{ name: b, target: 192.0.2.9, always_serve: true }}\n",
        backend.addr.port()
    );
    let h = start(&[("web.yaml", &web)]).await;
    let online = wait_event(&h, 0, "status", "online").await;
    assert_eq!(
        (online["profile"].as_str(), online["endpoint"].as_str()),
        (Some(fq("web").as_str()), Some("a"))
    );
    assert_eq!(online["from"], "checking");
    assert!(online.get("by").is_none(), "{online}");

    backend.set(503);
    let down = wait_event(&h, seq(&online), "status", "degraded").await;
    assert_eq!(down["from"], "online");
    assert!(down["reason"].as_str().unwrap().contains("503"), "{down}");
    assert_eq!(answer(&h, "web").await, "192.0.2.9");

    // A drained endpoint is still probed: its status shows whether it can come back.
    drain(&h, "web/a", ALICE).await;
    backend.set(200);
    let up = wait_event(&h, seq(&down), "status", "online").await;
    assert_eq!(up["from"], "degraded");
    assert_eq!(shown(&h, "web", "a").await["status"], "online");
    assert_eq!(answer(&h, "web").await, "192.0.2.9", "drained: still no answers");
    h.stop().await;
}

/// Polls the event list until an event of `kind` to status `to` comes after event
/// `since`; returns it.
async fn wait_event(h: &Harness, since: u64, kind: &str, to: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let found = events(h, since).await.into_iter().find(|e| e["kind"] == kind && e["to"] == to);
        if let Some(e) = found {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "no {kind} event to {to}: {:?}",
            summary(&events(h, 0).await)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn seq(e: &Value) -> u64 {
    e["seq"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_and_groups_profiles_take_overrides_too() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &[], true);
    let h = Harness::in_dir(dir).await;
    let paris = |name: &str| Q::new(&fq(name), 1).ecs(ip("192.0.2.7"), 32);
    let addrs = |r: Reply| r.addrs().iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(addrs(h.udp(&paris("geo")).await), ["192.0.2.3"]);
    drain(&h, "geo/fr", ALICE).await;
    // FR is no longer mapped: GEO-EU answers, from the compiled mapping as from the walk.
    assert_eq!(addrs(h.udp(&paris("geo")).await), ["192.0.2.4"]);
    let v = get(&h, "/api/v1/explain?name=geo&client=192.0.2.7").await;
    assert!(
        v["trace"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "endpoint fr is drained: it takes no answers"),
        "{v}"
    );
    undrain(&h, "geo/fr", ALICE).await;
    assert_eq!(addrs(h.udp(&paris("geo")).await), ["192.0.2.3"]);

    // Group weights are 0..255.
    let path = "/api/v1/profiles/ga-50-50/endpoints/bj-1/weight";
    let r = api(&h, "PUT", path, Some(ALICE), r#"{"weight": 256}"#).await;
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (400, json!("weight 256 is outside 0..255 (routing: groups)"))
    );
    set_weight(&h, "ga-50-50/bj-1", 255, ALICE).await;
    assert_eq!(shown(&h, "ga-50-50", "bj-1").await["weight"], 255);
    h.stop().await;
}

#[test]
fn named_tokens_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &[("p.yaml", PROFILES)], false);
    let config = dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(dir.path().join("bob.token"), format!("{ALICE}\n")).unwrap();
    let tokens = "  tokens:\n    - { name: alice, file: alice.token }\n";
    let bad = "  tokens:\n\
        \x20   - { name: alice, file: alice.token }\n\
        \x20   - { name: admin, file: alice.token }\n\
        \x20   - { name: alice, file: missing.token }\n\
        \x20   - { name: loopback, file: x.token }\n\
        \x20   - { name: \"bo b\", file: bob.token }\n";
    std::fs::write(&config, yaml.replace(tokens, bad)).unwrap();
    let errors = steerdns::commands::check(&config).unwrap_err();
    let got: Vec<String> = located(&errors)
        .into_iter()
        .map(|e| e.split_once(' ').map_or(e.clone(), |(_, m)| m.to_string()))
        .collect();
    let missing = dir.path().join("missing.token");
    let x = dir.path().join("x.token");
    let want = [
        "two admin tokens are named \"admin\" (the token of admin.token_file is named admin)".to_string(),
        "this token is also the token of \"alice\"; each name needs its own".to_string(),
        "two admin tokens are named \"alice\"".to_string(),
        format!("cannot read the admin token file {}: No such file or directory (os error 2)", missing.display()),
        "token name \"loopback\" is what changes are recorded under without a token; choose another".to_string(),
        format!("cannot read the admin token file {}: No such file or directory (os error 2)", x.display()),
        "token name \"bo b\" must be 1 to 64 letters, digits, '.', '_', '@' or '-'".to_string(),
        "this token is also the token of \"alice\"; each name needs its own".to_string(),
    ];
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------------------
// The patched snapshot an override change makes, against a full rebuild
// ---------------------------------------------------------------------------------------

/// Profiles of every kind an override changes: plain methods, and chains of nesting where
/// draining the child's only IPv6 or host-name endpoint changes what its parents answer.
fn mixed_profiles(n: usize) -> String {
    let mut docs = Vec::new();
    for i in 0..n {
        let (v4, v6) = (format!("192.0.2.{}", i % 250 + 1), format!("2001:db8::{:x}", i + 1));
        docs.push(match i % 4 {
            0 => format!(
                "name: m{i}\nrouting: priority\nendpoints:\n  - {{ name: a, target: {v4}, always_serve: true }}\n  - {{ name: b, target: {v6}, always_serve: true }}\n"
            ),
            1 => format!(
                "name: m{i}\nrouting: weighted\nsticky: true\nendpoints:\n  - {{ name: a, target: {v4}, weight: 3, always_serve: true }}\n  - {{ name: b, target: 198.51.100.{}, always_serve: true }}\n  - {{ name: c, target: www{i}.example.net., always_serve: true }}\n",
                i % 250 + 1
            ),
            2 => format!(
                "name: m{i}\nrouting: multivalue\nmax_return: 2\nendpoints:\n  - {{ name: a, target: {v4}, always_serve: true }}\n  - {{ name: b, target: {v6}, always_serve: true }}\n  - {{ name: c, target: 203.0.113.{}, always_serve: true }}\n",
                i % 250 + 1
            ),
            _ => format!(
                "name: c{i}\nrouting: priority\nendpoints:\n  - {{ name: a, target: {v6}, always_serve: true }}\n  - {{ name: h, target: www{i}.example.net., always_serve: true }}\n---\nname: m{i}\nrouting: priority\nendpoints:\n  - {{ name: n, profile: c{i} }}\n  - {{ name: b, target: {v4}, always_serve: true }}\n---\nname: g{i}\nrouting: weighted\nendpoints:\n  - {{ name: n, profile: m{i} }}\n  - {{ name: b, target: 198.51.100.{}, always_serve: true }}\n",
                i % 250 + 1
            ),
        });
    }
    docs.join("---\n")
}

/// Every answer and decision trace `snap` gives for every profile, by query type and
/// client (as `steerdns explain` does, every endpoint healthy), with each endpoint's
/// overrides and each profile's families.
fn everything(snap: &steerdns::model::Snapshot) -> Vec<String> {
    use steerdns::responder::explain::{AllHealthy, absolute, explain, parse_type};
    let clients = [
        "192.0.2.7",
        "192.0.2.200",
        "198.51.100.9",
        "198.51.100.200",
        "203.0.113.5",
        "2001:db8::7",
    ];
    let mut out = Vec::new();
    for p in &snap.profiles {
        let eps = p
            .endpoints
            .iter()
            .map(|e| (e.enabled, e.weight, e.drained, e.weight_override, e.bias, e.bias_override));
        out.push(format!("{} {:?} {:?}", p.name, p.families, eps.collect::<Vec<_>>()));
        let name = absolute(snap, &p.name).unwrap();
        for qtype in ["A", "AAAA", "CNAME"] {
            for client in clients {
                let qtype = parse_type(qtype).unwrap();
                let e =
                    explain(snap, &AllHealthy(&*snap.health), &name, qtype, ip(client), None, None);
                // The authority section's SOA carries the serial, which depends on the
                // history of changes (the number of records is compared).
                let (rcode, answer, scope, trace) = (&e.rcode, &e.answer, e.scope, &e.trace);
                let authority = e.authority.len();
                out.push(format!(
                    "{} {qtype} {client}: {rcode} {answer:?} {scope:?} {authority} {trace:?}",
                    p.name
                ));
            }
        }
    }
    out
}

#[test]
fn a_patched_snapshot_answers_as_a_full_rebuild_and_a_reload_keeps_its_overrides() {
    use steerdns::config::{self, Override, Overrides};
    let dir = tempfile::tempdir().unwrap();
    let mut profiles = location_profiles();
    profiles.push(("override.yaml".into(), PROFILES.into()));
    profiles.push(("mixed.yaml".into(), mixed_profiles(24)));
    write_location_config(dir.path(), &profiles);
    let path = dir.path().join("steerdns.yaml");
    let base = config::load(&path, None).unwrap();
    let targets: Vec<(String, String)> = (base.snapshot.profiles.iter())
        .flat_map(|p| p.endpoints.iter().map(|e| (p.name.clone(), e.name.clone())))
        .collect();
    assert!(targets.len() > 100, "{} endpoints", targets.len());

    // A fixed walk over every endpoint: drains, weights (some that the method refuses),
    // undrains and cleared weights, and overrides of names the configuration lacks.
    let mut overrides = Overrides::default();
    overrides.set(&fq("gone"), "a", Override { drained: true, ..Override::default() });
    overrides.set(&fq("prio"), "gone", Override { weight: Some(2), ..Override::default() });
    let mut patched = config::patch(base.previous(), &overrides);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for step in 0..40 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Some steps change several endpoints at once, as an update from etcd can.
        for k in 0..1 + step % 3 {
            let (p, e) = &targets[(x as usize).wrapping_add(k * 31) % targets.len()];
            let before = overrides.get(p, e);
            let after = match (x >> 20) % 7 {
                0 | 1 => Override { drained: !before.drained, ..before },
                2 => Override { weight: Some([0, 2, 5, 300][(x >> 30) as usize % 4]), ..before },
                3 => Override { weight: None, ..before },
                // Biases: geoproximity takes them, every other method drops them.
                4 => Override { bias: Some([-99, -30, 50, 99][(x >> 30) as usize % 4]), ..before },
                5 => Override { bias: None, ..before },
                _ => Override::default(),
            };
            overrides.set(p, e, after);
        }
        let next = config::patch(patched.previous(), &overrides);
        let rebuilt = config::rebuild(base.previous(), &overrides);
        assert_eq!(next.cache.overrides, rebuilt.cache.overrides, "step {step}: kept");
        assert_eq!(next.dropped, rebuilt.dropped, "step {step}: dropped");
        let fingerprints = |l: &config::Loaded| -> Vec<u64> {
            l.snapshot.zones.iter().map(|z| z.fingerprint).collect()
        };
        assert_eq!(fingerprints(&next), fingerprints(&rebuilt), "step {step}: fingerprints");
        let (a, b) = (everything(&next.snapshot), everything(&rebuilt.snapshot));
        assert_eq!(a.len(), b.len());
        for (a, b) in a.iter().zip(&b) {
            assert_eq!(a, b, "step {step}: patched, then rebuilt");
        }
        // The serial grows when, and only when, the answers changed.
        let (old, new) = (&patched.snapshot.zones[0], &next.snapshot.zones[0]);
        assert_eq!(old.fingerprint == new.fingerprint, old.serial == new.serial, "step {step}");
        assert!(new.serial >= old.serial);
        patched = next;
    }
    let drained = patched.cache.overrides.iter().filter(|(_, _, o)| o.drained).count();
    assert!(drained > 3, "the walk left {drained} endpoints drained");

    // A reload of the patched configuration keeps its overrides and its answers.
    let reloaded = config::load(&path, Some(patched.previous())).unwrap();
    assert_eq!(reloaded.cache.overrides, patched.cache.overrides);
    assert_eq!(everything(&reloaded.snapshot), everything(&patched.snapshot));
}

// ---------------------------------------------------------------------------------------
// Geoproximity bias
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_time_bias_moves_a_geoproximity_answer_without_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &[("p.yaml", PROFILES)], true);
    let mut h = Harness::in_dir(dir).await;
    // Paris (192.0.2.0/25): Frankfurt 478 km, Dublin 781 km.
    let paris = || Q::new(&fq("near"), 1).edns().ecs(ip("192.0.2.7"), 32);
    let addrs = |r: Reply| r.addrs().iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(addrs(h.udp(&paris()).await), ["192.0.2.202"], "frankfurt");
    let generation = get(&h, "/api/v1/reload").await;

    // +40: 781 × 0.6 = 469 km < 478 km.
    let path = "/api/v1/profiles/near/endpoints/dublin/bias";
    let r = api(&h, "PUT", path, Some(ALICE), r#"{"bias": 40}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({ "profile": fq("near"), "endpoint": "dublin", "drained": false,
                "weight_override": null, "bias_override": 40 })
    );
    let reply = h.udp(&paris()).await;
    assert_eq!(reply.ecs().map(|e| e.2), Some(25), "the scope is the Paris /25");
    assert_eq!(addrs(reply), ["192.0.2.201"], "dublin, without a reload");
    assert_eq!(get(&h, "/api/v1/reload").await, generation, "no reload happened");
    let shown_dublin = shown(&h, "near", "dublin").await;
    assert_eq!(
        (&shown_dublin["bias"], &shown_dublin["configured_bias"], &shown_dublin["bias_override"]),
        (&json!(40), &json!(0), &json!(40)),
        "{shown_dublin}"
    );
    let listed = get(&h, "/api/v1/profiles").await;
    let near = listed["profiles"].as_array().unwrap().iter().find(|p| p["name"] == fq("near"));
    let near = near.unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(near["overrides"][0]["bias_override"], 40, "{near}");
    let v = get(&h, "/api/v1/explain?name=near&client=192.0.2.7").await;
    let trace: Vec<&str> =
        v["trace"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for line in [
        "endpoint dublin has bias 40 set at run time (configured 0)",
        "endpoint dublin: 781 km, bias +40, biased 469 km",
        "endpoint frankfurt: 478 km, bias +0, biased 478 km",
        "nearest by biased distance: dublin (469 km)",
    ] {
        assert!(trace.contains(&line), "{line:?} not in {trace:#?}");
    }

    let m = common::prometheus::scrape(h.admin(), Some(ADMIN)).await;
    let labels = [("profile", fq("near")), ("endpoint", "dublin".to_string())];
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(m.sum("steerdns_endpoint_bias_override", &labels), 40.0);

    // +30 is not enough (547 km); out of range and other methods are refused.
    let r = api(&h, "PUT", path, Some(ALICE), r#"{"bias": 30}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(addrs(h.udp(&paris()).await), ["192.0.2.202"]);
    for (p, body, status, want) in [
        (
            path,
            r#"{"bias": 100}"#,
            400,
            "the body must be {\"bias\": N} with N a whole number from -99 to 99: 100 is not one",
        ),
        (
            path,
            r#"{"bias": 2.5}"#,
            400,
            "the body must be {\"bias\": N} with N a whole number from -99 to 99: 2.5 is not one",
        ),
        // Well formed, but not for this profile's method: a conflict with its state.
        (
            "/api/v1/profiles/prio/endpoints/a/bias",
            r#"{"bias": 5}"#,
            409,
            "routing: priority has no biases",
        ),
    ] {
        let r = api(&h, "PUT", p, Some(ALICE), body).await;
        assert_eq!((r.status, r.json()["error"].clone()), (status, json!(want)), "{p} {body}");
    }

    // Kept in the state file, and through a restart.
    let state = std::fs::read_to_string(h.dir.path().join("overrides.json")).unwrap();
    let state: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(
        state["overrides"],
        json!([{ "profile": fq("near"), "endpoint": "dublin", "drained": false, "bias": 30 }])
    );
    let kinds: Vec<String> =
        summary(&events(&h, 0).await).into_iter().filter(|s| s.starts_with("bias")).collect();
    assert_eq!(
        kinds,
        [
            format!("bias {}/dublin by alice 0 -> 40", fq("near")),
            format!("bias {}/dublin by alice 40 -> 30", fq("near")),
        ]
    );
    h.server.take().unwrap().shutdown().await;
    let h = Harness::in_dir(h.dir).await;
    assert_eq!(shown(&h, "near", "dublin").await["bias"], 30);

    // DELETE goes back to the configured bias.
    let r = api(&h, "DELETE", path, Some(ALICE), "").await;
    assert_eq!((r.status, r.json()["bias_override"].clone()), (200, Value::Null));
    assert_eq!(shown(&h, "near", "dublin").await["bias"], 0);
    let last = summary(&events(&h, 0).await).pop().unwrap();
    assert_eq!(last, format!("bias_cleared {}/dublin by alice 30 -> 0", fq("near")));
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Endpoint details of a large profile
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_details_of_a_profile_with_thousands_of_endpoints_are_each_its_own() {
    const N: usize = 3000;
    let backend = HttpBackend::start("127.0.0.2").await;
    // Every 700th endpoint is probed (against the backend); the others are not, so details
    // put on the wrong endpoint show.
    let probed = |i: usize| i % 700 == 3;
    let mut big = format!(
        "name: many\nrouting: weighted\n\
         monitor: {{ interval: 1s, timeout: 300ms, tolerated_failures: 0, port: {} }}\n\
         endpoints:\n",
        backend.addr.port()
    );
    let target = |i: usize| {
        if probed(i) { "127.0.0.2".to_string() } else { format!("10.0.{}.{}", i / 250, i % 250) }
    };
    for i in 0..N {
        let serve = if probed(i) { "" } else { ", always_serve: true" };
        big.push_str(&format!("  - {{ name: e{i}, target: {}{serve} }}\n", target(i)));
    }
    let h = start(&[("many.yaml", &big)]).await;
    drain(&h, "many/e1500", ALICE).await;
    set_weight(&h, "many/e2999", 7, ALICE).await;
    let deadline = Instant::now() + PATIENCE;
    let v = loop {
        let v = get(&h, "/api/v1/profiles/many").await;
        let eps = v["endpoints"].as_array().unwrap();
        if eps.iter().filter(|e| e["status"] == "online").count()
            == (0..N).filter(|&i| probed(i)).count()
        {
            break v;
        }
        assert!(Instant::now() < deadline, "the probed endpoints never came online: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let eps = v["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), N);
    for (i, e) in eps.iter().enumerate() {
        let at = format!("endpoint {i}: {e}");
        assert_eq!(e["name"], format!("e{i}"), "{at}");
        assert_eq!(e["target"], target(i), "{at}");
        assert_eq!(e["probed"], probed(i), "{at}");
        assert_eq!(e["status"], if probed(i) { "online" } else { "unmonitored" }, "{at}");
        assert_eq!(
            e["last_probe"]["ok"],
            if probed(i) { json!(true) } else { Value::Null },
            "{at}"
        );
        assert_eq!(e["drained"], i == 1500, "{at}");
        assert_eq!(e["weight_override"], if i == 2999 { json!(7) } else { Value::Null }, "{at}");
    }
    h.stop().await;
}
