//! The admin API against its OpenAPI description (docs/api/openapi.yaml, served at
//! `/api/v1/openapi.json`): the router's routes and the description's are the same set,
//! real answers of a running server match the response schemas, and Schemathesis, a
//! property-based fuzzer, finds no server error, hang or answer off the description.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use steerdns::server::admin::{OPEN_ROUTES, ROUTES};

const TOKEN: &str = "openapi-write-token";

/// The methods an OpenAPI path item may hold.
const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/// The description as the server serves it (without a token: it is open).
async fn served_description(h: &Harness) -> Value {
    let r = http_get(h.admin(), "/api/v1/openapi.json", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()
}

/// Routes as (path, METHOD).
type Routes = BTreeSet<(String, String)>;

/// Every route of the description, and those of them with `security: []`.
fn described(doc: &Value) -> (Routes, Routes) {
    let (mut all, mut open) = (BTreeSet::new(), BTreeSet::new());
    let paths = doc["paths"].as_object().expect("paths");
    for (path, item) in paths {
        for (key, op) in item.as_object().expect("path item") {
            if !METHODS.contains(&key.as_str()) {
                continue;
            }
            let route = (path.clone(), key.to_ascii_uppercase());
            if op.get("security") == Some(&json!([])) {
                open.insert(route.clone());
            }
            all.insert(route);
        }
    }
    (all, open)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_and_description_have_the_same_routes() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let doc = served_description(&h).await;
    assert_eq!(doc["openapi"], "3.1.0");
    let (described, described_open) = described(&doc);
    let routed: Routes = ROUTES.iter().map(|(p, m)| (p.to_string(), m.to_string())).collect();
    let only_routed: Vec<_> = routed.difference(&described).collect();
    let only_described: Vec<_> = described.difference(&routed).collect();
    assert!(only_routed.is_empty(), "served but not in docs/api/openapi.yaml: {only_routed:?}");
    assert!(only_described.is_empty(), "in openapi.yaml but not served: {only_described:?}");
    let open: Routes =
        routed.iter().filter(|(p, _)| OPEN_ROUTES.contains(&p.as_str())).cloned().collect();
    assert_eq!(open, described_open, "routes without a token vs `security: []`");
    // The description's own security scheme is the bearer token the server checks.
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    assert_eq!(doc["security"], json!([{ "bearer": [] }]));
    h.stop().await;
}

/// A validator for the schema of `method path`'s `status` answer, with the description
/// as its root so that `#/components/...` references resolve.
fn response_validator(doc: &Value, method: &str, path: &str, status: u16) -> jsonschema::Validator {
    let op = &doc["paths"][path][method.to_ascii_lowercase()];
    let mut response = &op["responses"][status.to_string()];
    if let Some(r) = response["$ref"].as_str() {
        let name = r.strip_prefix("#/components/responses/").expect("a response reference");
        response = &doc["components"]["responses"][name];
    }
    let schema = &response["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{method} {path}: no JSON schema for {status}");
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "allOf": [schema],
    });
    jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("{method} {path} {status}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_answers_match_the_response_schemas() {
    let probed = probed_profile("probed", closed_port());
    let mut profiles = DEFAULT_PROFILES.to_vec();
    profiles.push(("probed.yaml", probed.as_str()));
    let loaded = loaded_profile(closed_port());
    profiles.push(("loaded.yaml", loaded.as_str()));
    let h = Harness::with_admin(&profiles, Some(TOKEN)).await;
    let doc = served_description(&h).await;
    let addr = h.admin();
    let auth = format!("Bearer {TOKEN}");
    // Bounded wait for the probed endpoint's first status change (its port is closed).
    let mut changed = false;
    for _ in 0..100 {
        let p = http_get(addr, "/api/v1/profiles/probed", Some(TOKEN)).await.json();
        if !p["endpoints"][0]["last_change"].is_null() && !p["endpoints"][0]["last_probe"].is_null()
        {
            changed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(changed, "the probed endpoint never showed a probe and a status change");
    // A drain and a weight first, so that the lists show overrides and events.
    let with_token = [("Authorization", auth.as_str())];
    let drained = http(addr, "POST", "/api/v1/profiles/api/endpoints/site-a/drain", &with_token);
    assert_eq!(drained.await.status, 200);
    let json_with_token = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];
    let weight_path = "/api/v1/profiles/api/endpoints/site-b/weight";
    let weight = http_with_body(addr, "PUT", weight_path, &json_with_token, br#"{"weight": 7}"#);
    assert_eq!(weight.await.status, 200);
    // JSON has one kind of number: a whole one written with a fraction is a weight too.
    for (body, status) in [(&br#"{"weight": 7.0}"#[..], 200), (br#"{"weight": 7.5}"#, 400)] {
        let r = http_with_body(addr, "PUT", weight_path, &json_with_token, body).await;
        assert_eq!(r.status, status, "{}: {}", String::from_utf8_lossy(body), r.text());
    }
    // A pushed load, so that the load feedback shows one; its answer's schema too.
    let load_route = "/api/v1/profiles/{name}/endpoints/{endpoint}/load";
    let load_path = "/api/v1/profiles/loaded/endpoints/pushed/load";
    let body = br#"{"utilisation": 0.5, "ttl": "1h"}"#;
    let pushed = http_with_body(addr, "PUT", load_path, &json_with_token, body).await;
    assert_eq!(pushed.status, 200, "{}", pushed.text());
    let v = response_validator(&doc, "PUT", load_route, 200);
    let errors: Vec<String> = v.iter_errors(&pushed.json()).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "PUT {load_path} off the description: {errors:?}");
    // (method, route as described, request path, token, expected status)
    let cases: &[(&str, &str, &str, bool, u16)] = &[
        ("GET", "/api/v1/profiles", "/api/v1/profiles", true, 200),
        ("GET", "/api/v1/profiles", "/api/v1/profiles?q=a&limit=2", true, 200),
        ("GET", "/api/v1/profiles", "/api/v1/profiles?status=bogus", true, 400),
        ("GET", "/api/v1/profiles", "/api/v1/profiles", false, 401),
        ("GET", "/api/v1/profiles/{name}", "/api/v1/profiles/api", true, 200),
        ("GET", "/api/v1/profiles/{name}", "/api/v1/profiles/www", true, 200),
        ("GET", "/api/v1/profiles/{name}", "/api/v1/profiles/probed", true, 200),
        ("GET", "/api/v1/profiles/{name}", "/api/v1/profiles/nothere", true, 404),
        ("GET", "/api/v1/profiles/{name}", "/api/v1/profiles/a..b", true, 400),
        ("GET", "/api/v1/stats", "/api/v1/stats", true, 200),
        ("GET", "/api/v1/stats", "/api/v1/stats?offset=x", true, 400),
        ("GET", "/api/v1/explain", "/api/v1/explain?name=www&client=192.0.2.1", true, 200),
        ("GET", "/api/v1/explain", "/api/v1/explain?name=app&type=aaaa&client=::1", true, 200),
        ("GET", "/api/v1/explain", "/api/v1/explain?name=www", true, 400),
        ("GET", "/api/v1/events", "/api/v1/events", true, 200),
        ("GET", "/api/v1/events", "/api/v1/events?since=x", true, 400),
        ("GET", "/api/v1/cluster", "/api/v1/cluster", true, 200),
        ("POST", "/api/v1/reload", "/api/v1/reload", true, 200),
        ("GET", "/api/v1/reload", "/api/v1/reload", true, 200),
        ("GET", "/api/v1/whoami", "/api/v1/whoami", true, 200),
        ("GET", "/api/v1/load", "/api/v1/load", true, 200),
        ("GET", "/api/v1/profiles/{name}", "/api/v1/profiles/loaded", true, 200),
        ("DELETE", load_route, "/api/v1/profiles/loaded/endpoints/pulled/load", true, 409),
        ("DELETE", load_route, "/api/v1/profiles/loaded/endpoints/nothere/load", true, 404),
        ("DELETE", load_route, load_path, true, 200),
        // Without `rum:` in the configuration.
        ("GET", "/api/v1/rum", "/api/v1/rum?addr=192.0.2.1", true, 404),
        (
            "DELETE",
            "/api/v1/profiles/{name}/endpoints/{endpoint}/weight",
            "/api/v1/profiles/api/endpoints/site-b/weight",
            true,
            200,
        ),
        (
            "POST",
            "/api/v1/profiles/{name}/endpoints/{endpoint}/undrain",
            "/api/v1/profiles/api/endpoints/nothere/undrain",
            true,
            404,
        ),
    ];
    for &(method, route, path, token, status) in cases {
        let headers: &[(&str, &str)] = if token { &with_token } else { &[] };
        let r = http(addr, method, path, headers).await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        let body = r.json();
        let v = response_validator(&doc, method, route, status);
        let errors: Vec<String> = v.iter_errors(&body).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "{method} {path} ({status}) off the description: {errors:?}\n{body}"
        );
    }
    // The case list covers every JSON GET route that needs the token.
    let covered: BTreeSet<&str> = cases.iter().map(|c| c.1).collect();
    for (path, method) in ROUTES {
        let json_get = *method == "GET" && path.starts_with("/api/") && !OPEN_ROUTES.contains(path);
        assert!(!json_get || covered.contains(path), "no schema check for GET {path}");
    }
    h.stop().await;
}

/// Profiles with the names the description gives as examples (profile `www`, endpoint
/// `eu-1`), so that the fuzzer's write calls reach an endpoint, not only 404s and the
/// documented 409s (a weight or bias the profile's method does not take, a push to an
/// endpoint without `pushed: true`).
const EXAMPLE_PROFILES: &[(&str, &str)] = &[(
    "www.yaml",
    "\
name: www
routing: weighted
endpoints:
  - { name: eu-1, target: 192.0.2.1, weight: 2, always_serve: true, load: { capacity: 100, pushed: true } }
  - { name: us-1, target: 198.51.100.1, weight: 1, always_serve: true, load: { capacity: 100, pushed: true } }
",
)];

/// A weighted profile with load feeds: `pushed` takes loads through the API, `pulled`
/// reads a loopback `port` where nothing listens.
fn loaded_profile(port: u16) -> String {
    format!(
        "name: loaded\nrouting: weighted\nendpoints:\n\
  - {{ name: pushed, target: 192.0.2.1, always_serve: true, load: {{ capacity: 100, pushed: true }} }}\n\
  - {{ name: pulled, target: 192.0.2.2, always_serve: true, load: {{ capacity: 100, url: \"http://127.0.0.1:{port}/\" }} }}\n"
    )
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A weighted profile `name` whose endpoint `eu-1` is probed over TCP at 127.0.0.1:`port`
/// every second, so that it has a last probe and a last status change to show.
fn probed_profile(name: &str, port: u16) -> String {
    format!(
        "name: {name}\nrouting: weighted\n\
         monitor: {{ protocol: tcp, port: {port}, interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\n\
         endpoints:\n\
         \x20 - {{ name: eu-1, target: 127.0.0.1, weight: 1 }}\n\
         \x20 - {{ name: us-1, target: 192.0.2.25, weight: 1, always_serve: true }}\n"
    )
}

/// Schemathesis (`st`) against a running server with profiles, endpoints and a write
/// token: every check it has, on every operation, the write ones included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_fault() {
    let Some(st) = require_any(&["st", "schemathesis"], "schemathesis (pip)") else { return };
    let probed = probed_profile("smtp", closed_port());
    let profiles = [EXAMPLE_PROFILES[0], ("smtp.yaml", probed.as_str())];
    let h = Harness::with_admin(&profiles, Some(TOKEN)).await;
    let base = format!("http://{}", h.admin());
    let reports = h.dir.path().join("schemathesis");
    let mut cmd = tokio::process::Command::new(st);
    cmd.arg("run")
        .arg(format!("{base}/api/v1/openapi.json"))
        .args(["--url", &base])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--checks", "all", "--max-examples", "30", "--request-timeout", "10"])
        .args(["--seed", "1", "--no-color"])
        .arg("--report-dir")
        .arg(&reports)
        // Its cache (.schemathesis/) goes to the test's directory, not the checkout.
        .current_dir(h.dir.path())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    // A bound on the whole run: a hang is a failure, not a stuck CI job.
    let out = tokio::time::timeout(Duration::from_secs(600), cmd.output())
        .await
        .expect("schemathesis did not finish within 600 s")
        .expect("run schemathesis");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis found faults:\n{text}");
    // It reached the write routes with the token, not only their errors.
    let events = http_get(h.admin(), "/api/v1/events", Some(TOKEN)).await.json();
    let by_token =
        events["events"].as_array().expect("events").iter().filter(|e| e["by"] == "admin");
    assert!(by_token.count() > 0, "no change was made through the API: {events}\n{text}");
    h.stop().await;
}
