//! The admin HTTP API over real HTTP/1.1 on loopback: `/healthz`, the bearer token and its
//! role, `/metrics` parsed as Prometheus text, `/api/v1/profiles` (failover too),
//! `/api/v1/explain` (one case per routing method family), reload and the last reload's
//! result, events kept across a restart, errors, and HTTPS with a rustls client (a renewed
//! certificate served without a restart).

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use common::*;
use serde_json::{Value, json};

const TOKEN: &str = "s3cret-t0ken-for-tests";
const WWW: &str = "www.tm.example.test.";

/// Every call that needs the token: (method, path).
const GUARDED: &[(&str, &str)] = &[
    ("GET", "/metrics"),
    ("GET", "/api/v1/profiles"),
    ("GET", "/api/v1/profiles/www"),
    ("GET", "/api/v1/explain?name=www&type=A&client=192.0.2.1"),
    ("POST", "/api/v1/reload"),
];

async fn call(addr: SocketAddr, method: &str, path: &str, auth: Option<&str>) -> Http {
    let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
    http(addr, method, path, &headers).await
}

fn assert_json_error(r: &Http, status: u16, what: &str) -> String {
    assert_eq!(r.status, status, "{what}: {r:?} {}", String::from_utf8_lossy(&r.body));
    assert!(
        r.header("content-type").unwrap_or("").starts_with("application/json"),
        "{what}: error is not JSON: {r:?}"
    );
    let v = r.json();
    let e = v["error"].as_str().unwrap_or_else(|| panic!("{what}: no \"error\" string: {v}"));
    assert!(!e.is_empty(), "{what}: empty error");
    e.to_string()
}

// ---------------------------------------------------------------------------------------
// /healthz, token, unknown paths
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_ok_with_and_without_a_token_configured() {
    for token in [None, Some(TOKEN)] {
        let h = Harness::with_admin(DEFAULT_PROFILES, token).await;
        for auth in [None, Some("Bearer wrong"), Some(&*format!("Bearer {TOKEN}"))] {
            let r = call(h.admin(), "GET", "/healthz", auth).await;
            assert_eq!(r.status, 200, "token {token:?}, auth {auth:?}: {r:?}");
            assert_eq!(r.text(), "ok");
        }
        h.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_missing_or_wrong_is_401_right_is_200() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let a = h.admin();
    let right = format!("Bearer {TOKEN}");
    let same_length_wrong = format!("Bearer {}", TOKEN.replace('s', "x"));
    let longer = format!("Bearer {TOKEN}x");
    let shorter = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let wrongs: [(&str, Option<&str>); 7] = [
        ("missing", None),
        ("wrong", Some("Bearer nope")),
        ("wrong, same length", Some(&same_length_wrong)),
        ("right token plus a byte", Some(&longer)),
        ("right token minus a byte", Some(&shorter)),
        ("no scheme", Some(TOKEN)),
        ("Basic scheme", Some("Basic dXNlcjpwYXNz")),
    ];
    for &(method, path) in GUARDED {
        for (what, auth) in &wrongs {
            let r = call(a, method, path, *auth).await;
            assert_json_error(&r, 401, &format!("{method} {path}, token {what}"));
            let challenge = r.header("www-authenticate").unwrap_or("");
            assert!(challenge.starts_with("Bearer"), "{method} {path}: {r:?}");
        }
        let r = call(a, method, path, Some(&right)).await;
        assert_eq!(r.status, 200, "{method} {path}, right token: {r:?} {}", r.text());
        // The scheme is case-insensitive (RFC 7235 §2.1).
        let lower = format!("bearer {TOKEN}");
        assert_eq!(call(a, method, path, Some(&lower)).await.status, 200, "{method} {path}");
    }
    // Without a token configured, the same calls need none.
    h.stop().await;
    let h = Harness::with_admin(DEFAULT_PROFILES, None).await;
    for &(method, path) in GUARDED {
        let r = call(h.admin(), method, path, None).await;
        assert_eq!(r.status, 200, "{method} {path} without a token configured: {r:?}");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_404_with_a_json_error() {
    for token in [None, Some(TOKEN)] {
        let h = Harness::with_admin(DEFAULT_PROFILES, token).await;
        for path in [
            "/nope",
            "/ui/",
            "/ui/nope.js",
            "/api/v1",
            "/api/v2/profiles",
            "/metricsx",
            "/healthz/x",
        ] {
            let r = call(h.admin(), "GET", path, None).await;
            assert_json_error(&r, 404, &format!("GET {path} (token {token:?})"));
        }
        h.stop().await;
    }
}

// ---------------------------------------------------------------------------------------
// /metrics
// ---------------------------------------------------------------------------------------

fn queries(m: &Prom, profile: &str, qtype: &str, rcode: &str) -> f64 {
    m.sum("steerdns_queries_total", &[("profile", profile), ("qtype", qtype), ("rcode", rcode)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_prometheus_text_and_count_queries() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let a = h.admin();
    let r = http_get(a, "/metrics", Some(TOKEN)).await;
    assert_eq!(r.status, 200);
    let ct = r.header("content-type").unwrap_or("");
    assert!(ct.starts_with("text/plain") || ct.starts_with("application/openmetrics-text"), "{ct}");
    let m0 = scrape(a, Some(TOKEN)).await;
    const N: usize = 7;
    for _ in 0..N {
        assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.single(), "A 192.0.2.10");
    }
    assert_eq!(h.tcp(&Q::new(&fq("www"), T_A)).await.single(), "A 192.0.2.10");
    h.udp(&Q::new(&fq("www"), T_AAAA)).await;
    h.udp(&Q::new(&fq("nothing-here"), T_A)).await.assert_negative(NXDOMAIN);
    const E: usize = 4;
    for i in 0..E {
        let q = Q::new(&fq("pool"), T_A).ecs(ip(&format!("198.51.100.{i}")), 24);
        assert_eq!(h.udp(&q).await.rcode(), NOERROR);
    }
    let m1 = scrape(a, Some(TOKEN)).await;
    for (name, t) in [
        ("steerdns_queries", "counter"),
        ("steerdns_reloads", "counter"),
        ("steerdns_reload_failures", "counter"),
        ("steerdns_answers", "counter"),
        ("steerdns_ecs_queries", "counter"),
        ("steerdns_config_generation", "gauge"),
        ("steerdns_endpoint_status", "gauge"),
    ] {
        let got = m1.types.get(name).or_else(|| m1.types.get(&format!("{name}_total")));
        assert_eq!(got.map(String::as_str), Some(t), "TYPE of {name}: {:?}", m1.types);
    }

    let d = |f: &dyn Fn(&Prom) -> f64| f(&m1) - f(&m0);
    assert_eq!(
        d(&|m| m.sum(
            "steerdns_queries_total",
            &[("zone", ORIGIN), ("profile", WWW), ("qtype", "A"), ("rcode", "NOERROR")]
        )),
        (N + 1) as f64,
        "www A NOERROR after {N} UDP + 1 TCP queries"
    );
    assert_eq!(d(&|m| queries(m, WWW, "AAAA", "NOERROR")), 1.0);
    assert_eq!(d(&|m| queries(m, "", "A", "NXDOMAIN")), 1.0, "NXDOMAIN (not a profile)");
    assert_eq!(d(&|m| queries(m, "pool.tm.example.test.", "A", "NOERROR")), E as f64);
    let answers = |m: &Prom, p: &str, e: &str| {
        m.sum("steerdns_answers_total", &[("profile", p), ("endpoint", e)])
    };
    assert_eq!(d(&|m| answers(m, WWW, "primary")), (N + 1) as f64, "answers for primary");
    assert_eq!(d(&|m| answers(m, WWW, "secondary")), 0.0);
    assert_eq!(d(&|m| answers(m, WWW, "primary-v6")), 1.0, "the AAAA answer");
    let pool: f64 =
        ["a", "b", "c", "d"].iter().map(|e| d(&|m| answers(m, "pool.tm.example.test.", e))).sum();
    assert_eq!(pool, (3 * E) as f64, "multivalue hands out 3 endpoints per answer");
    let ecs = |m: &Prom, s: &str| m.sum("steerdns_ecs_queries_total", &[("ecs", s)]);
    assert_eq!(d(&|m| ecs(m, "present")), E as f64);
    assert_eq!(d(&|m| ecs(m, "absent")), (N + 3) as f64);
    // No client addresses as labels.
    for s in &m1.samples {
        for v in s.labels.values() {
            assert!(
                !v.starts_with("127.0.0.1") && !v.starts_with("198.51.100."),
                "client address as a label: {s:?}"
            );
        }
    }
    // One status series per endpoint (value 1), agreeing with the profiles API.
    let list = http_get(a, "/api/v1/profiles", Some(TOKEN)).await.json();
    for p in list["profiles"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let detail = http_get(a, &format!("/api/v1/profiles/{name}"), Some(TOKEN)).await.json();
        for ep in detail["endpoints"].as_array().unwrap() {
            let e = ep["name"].as_str().unwrap();
            let series =
                m1.select("steerdns_endpoint_status", &[("profile", name), ("endpoint", e)]);
            assert_eq!(series.len(), 1, "{name}/{e}: {series:?}");
            assert_eq!(series[0].value, 1.0);
            assert_eq!(series[0].labels["status"], ep["status"].as_str().unwrap(), "{name}/{e}");
        }
    }
    assert_eq!(m1.select("steerdns_endpoint_status", &[]).len(), 31);
    h.stop().await;
}

/// Every counter sample, keyed by name and labels.
fn counters(m: &Prom) -> BTreeMap<String, f64> {
    m.samples
        .iter()
        .filter(|s| m.family(&s.name).is_some_and(|f| m.types[f] == "counter"))
        .map(|s| (format!("{}{:?}", s.name, s.labels), s.value))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_survive_reloads_and_generation_follows() {
    let h = Harness::with_admin(DEFAULT_PROFILES, None).await;
    let a = h.admin();
    for _ in 0..5 {
        h.udp(&Q::new(&fq("www"), T_A)).await;
        h.udp(&Q::new(&fq("pool"), T_A)).await;
    }
    let m0 = scrape(a, None).await;
    let g0 = m0.sum("steerdns_config_generation", &[]);
    assert_eq!(g0, h.server().snapshot().generation as f64);
    let reloads0 = m0.sum("steerdns_reloads_total", &[]);

    // 1. A reload without changes.
    let r = http_post(a, "/api/v1/reload", None).await;
    assert_eq!(r.status, 200);
    let g1 = r.json()["generation"].as_u64().unwrap();
    let m1 = scrape(a, None).await;
    assert_eq!(m1.sum("steerdns_config_generation", &[]), g1 as f64);
    assert_eq!(m1.sum("steerdns_reloads_total", &[]), reloads0 + 1.0);

    // 2. www changes target and pool's file goes away.
    std::fs::write(
            h.profile_path("priority.yaml"),
            "name: www\nrouting: priority\nendpoints:\n  - { name: primary, target: 192.0.2.99, always_serve: true }\n",
        )
        .unwrap();
    std::fs::remove_file(h.profile_path("multivalue.yaml")).unwrap();
    let g2 = h.server().reload().expect("reload");
    assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.single(), "A 192.0.2.99");
    let m2 = scrape(a, None).await;
    assert_eq!(m2.sum("steerdns_config_generation", &[]), g2 as f64);
    assert!(m2.sum("steerdns_reloads_total", &[]) >= reloads0 + 2.0);

    // No counter went backwards or vanished across either reload.
    for (before, after, what) in [(&m0, &m1, "reload 1"), (&m1, &m2, "reload 2")] {
        let (b, c) = (counters(before), counters(after));
        for (series, v) in &b {
            let now = c.get(series).copied();
            assert!(now.is_some_and(|n| n >= *v), "{what}: counter {series} went {v} -> {now:?}");
        }
    }
    // www's count carries on from the old snapshot's.
    let www = |m: &Prom| queries(m, WWW, "A", "NOERROR");
    assert_eq!(www(&m0), 5.0);
    assert_eq!(www(&m2), 6.0);
    assert_eq!(queries(&m2, "pool.tm.example.test.", "A", "NOERROR"), 5.0);
    // The gone profile's endpoints have no status series any more.
    assert!(
        m2.select("steerdns_endpoint_status", &[("profile", "pool.tm.example.test.")]).is_empty()
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// /api/v1/profiles
// ---------------------------------------------------------------------------------------

/// (profile, routing method, status, endpoint counts by status)
type Expected = (&'static str, &'static str, &'static str, &'static [(&'static str, u64)]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_list_has_method_status_and_endpoint_counts() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let r = http_get(h.admin(), "/api/v1/profiles", Some(TOKEN)).await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap_or("").starts_with("application/json"));
    let v = r.json();
    let list = v["profiles"].as_array().unwrap_or_else(|| panic!("no profiles list: {v}"));
    let by_name: BTreeMap<&str, &Value> =
        list.iter().map(|p| (p["name"].as_str().expect("name"), p)).collect();
    assert_eq!(by_name.len(), 13, "{v}");
    let counts = |p: &Value| -> BTreeMap<String, u64> {
        p["endpoints"]
            .as_object()
            .unwrap_or_else(|| panic!("endpoint counts: {p}"))
            .iter()
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
            .collect()
    };
    let want: &[Expected] = &[
        ("www", "priority", "online", &[("unmonitored", 3)]),
        ("prio2", "priority", "online", &[("disabled", 1), ("unmonitored", 2)]),
        ("off", "priority", "disabled", &[("unmonitored", 1)]),
        ("api", "weighted", "online", &[("unmonitored", 3)]),
        ("pool", "multivalue", "online", &[("unmonitored", 5)]),
        ("global", "priority", "online", &[("online", 2)]),
        ("global2", "priority", "online", &[("online", 1), ("stopped", 1)]),
        ("eu2", "weighted", "disabled", &[("unmonitored", 1)]),
    ];
    for (rel, method, status, endpoint_counts) in want {
        let name = fq(rel);
        let p = by_name.get(name.as_str()).unwrap_or_else(|| panic!("{name} missing: {v}"));
        assert_eq!(p["routing"], *method, "{name}: {p}");
        assert_eq!(p["status"], *status, "{name}: {p}");
        let want_counts: BTreeMap<String, u64> =
            endpoint_counts.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        assert_eq!(counts(p), want_counts, "{name}: {p}");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_detail_by_relative_and_absolute_name() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let a = h.admin();
    let rel = http_get(a, "/api/v1/profiles/www", Some(TOKEN)).await;
    let abs = http_get(a, &format!("/api/v1/profiles/{WWW}"), Some(TOKEN)).await;
    assert_eq!(rel.status, 200, "{rel:?}");
    assert_eq!(abs.status, 200, "{abs:?}");
    let (v, w) = (rel.json(), abs.json());
    assert_eq!(v, w, "relative and absolute names give different answers");
    assert_eq!(v["name"], WWW);
    assert_eq!(v["routing"], "priority");
    assert_eq!(v["status"], "online");
    let eps = v["endpoints"].as_array().unwrap();
    let rows: Vec<(&str, &str, &str)> = eps
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["target"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("primary", "192.0.2.10", "unmonitored"),
            ("secondary", "198.51.100.10", "unmonitored"),
            ("primary-v6", "2001:db8::10", "unmonitored"),
        ]
    );
    // Each endpoint shows its last probe result and time and its last change (null
    // before any probe).
    for e in eps {
        for k in ["last_probe", "last_change"] {
            assert!(e.get(k).is_some(), "endpoint without {k}: {e}");
        }
    }
    // Disabled endpoint, nested endpoints.
    let p = http_get(a, "/api/v1/profiles/prio2", Some(TOKEN)).await.json();
    assert_eq!(p["endpoints"][0]["name"], "first");
    assert_eq!(p["endpoints"][0]["status"], "disabled");
    assert_eq!(p["endpoints"][0]["enabled"], false);
    let g = http_get(a, "/api/v1/profiles/global2", Some(TOKEN)).await.json();
    let st: Vec<(&str, &str)> = g["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(st, [("eu", "stopped"), ("us", "online")]);

    // Unknown: 404; invalid: 400; both JSON errors.
    for name in ["nope", "nope.tm.example.test.", "ftp"] {
        let r = http_get(a, &format!("/api/v1/profiles/{name}"), Some(TOKEN)).await;
        assert_json_error(&r, 404, &format!("profile {name}"));
    }
    let long_label = "x".repeat(64);
    for name in ["..bad", "a..b", long_label.as_str()] {
        let r = http_get(a, &format!("/api/v1/profiles/{name}"), Some(TOKEN)).await;
        assert_json_error(&r, 400, &format!("profile {name:?}"));
    }
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// /api/v1/explain
// ---------------------------------------------------------------------------------------

/// GETs explain and checks the response shape; returns the JSON.
async fn explain(
    a: SocketAddr,
    token: Option<&str>,
    name: &str,
    qtype: &str,
    client: &str,
) -> Value {
    let path = format!("/api/v1/explain?name={name}&type={qtype}&client={client}");
    let r = http_get(a, &path, token).await;
    assert_eq!(r.status, 200, "{path}: {r:?} {}", r.text());
    let v = r.json();
    for k in ["answer", "rcode", "scope", "trace"] {
        assert!(v.get(k).is_some(), "{path}: no {k}: {v}");
    }
    assert!(v["answer"].is_array() && v["trace"].is_array(), "{path}: {v}");
    assert!(v["rcode"].is_string(), "{path}: {v}");
    v
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

/// The address at the end of each answer line ("name ttl IN A addr").
fn answer_addrs(v: &Value) -> Vec<String> {
    strings(&v["answer"]).iter().map(|l| l.rsplit(' ').next().unwrap().to_string()).collect()
}

fn trace_has(v: &Value, needle: &str) -> bool {
    strings(&v["trace"]).iter().any(|t| t.contains(needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_one_case_per_routing_method_family() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let a = h.admin();
    let t = Some(TOKEN);

    // Priority: relative and absolute names, same answer as on the wire.
    let v = explain(a, t, "www", "A", "192.0.2.1").await;
    assert_eq!(v["rcode"], "NOERROR");
    assert_eq!(answer_addrs(&v), ["192.0.2.10"]);
    assert!(trace_has(&v, "priority") && trace_has(&v, "primary"), "{v}");
    assert_eq!(explain(a, t, WWW, "A", "192.0.2.1").await, v);
    assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.single(), "A 192.0.2.10");
    let v6 = explain(a, t, "www", "AAAA", "2001:db8::1").await;
    assert_eq!(answer_addrs(&v6), ["2001:db8::10"]);
    let p2 = explain(a, t, "prio2", "A", "192.0.2.1").await;
    assert_eq!(answer_addrs(&p2), ["192.0.2.12"], "priority 1 disabled: {p2}");

    // Weighted: one of the weighted endpoints, never the weight-0 canary.
    let v = explain(a, t, "api", "A", "192.0.2.1").await;
    assert_eq!(v["rcode"], "NOERROR");
    let got = answer_addrs(&v);
    assert!(got == ["192.0.2.20"] || got == ["198.51.100.20"], "{v}");
    assert!(trace_has(&v, "weighted"), "{v}");

    // Multivalue: three distinct endpoints of the four.
    let v = explain(a, t, "pool", "A", "192.0.2.1").await;
    let mut got = answer_addrs(&v);
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 3, "{v}");
    assert!(got.iter().all(|x| ["192.0.2.41", "192.0.2.42", "192.0.2.43", "192.0.2.44"].contains(&x.as_str())), "{v}");
    assert!(trace_has(&v, "multivalue"), "{v}");

    // Nested: the parent picks the eu child, which answers from its endpoints; the
    // trace goes through both.
    let v = explain(a, t, "global", "A", "192.0.2.1").await;
    let got = answer_addrs(&v);
    assert!(got == ["192.0.2.51"] || got == ["192.0.2.52"], "{v}");
    assert!(
        trace_has(&v, "global.tm.example.test.") && trace_has(&v, "eu.tm.example.test."),
        "{v}"
    );
    let v = explain(a, t, "global2", "A", "192.0.2.1").await;
    assert_eq!(answer_addrs(&v), ["198.51.100.61"], "failover to us2: {v}");

    // Static data, a host-name target, NXDOMAIN.
    let v = explain(a, t, "ftp", "A", "192.0.2.1").await;
    assert_eq!(answer_addrs(&v), ["192.0.2.200"]);
    let v = explain(a, t, "alias", "A", "192.0.2.1").await;
    assert!(
        strings(&v["answer"]).iter().any(|l| l.contains("CNAME") && l.contains("cdn.example.net.")),
        "{v}"
    );
    let v = explain(a, t, "nothing-here", "A", "192.0.2.1").await;
    assert_eq!(v["rcode"], "NXDOMAIN");
    assert!(strings(&v["answer"]).is_empty());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_geographic_with_the_sample_geo_database() {
    let dir = tempfile::tempdir().unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let geo = std::fs::read_to_string(repo.join("profiles/geographic.yaml")).unwrap();
    let mut profiles: Vec<(&str, &str)> = DEFAULT_PROFILES.to_vec();
    profiles.push(("geographic.yaml", &geo));
    write_config(dir.path(), &profiles);
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::copy(repo.join("geo-data/sample-city.mmdb"), dir.path().join("data/city.mmdb"))
        .unwrap();
    let yaml = format!("{}geo:\n  database: data/city.mmdb\n", with_admin(&steerdns_yaml(), None));
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    let h = Harness::in_dir(dir).await;
    let a = h.admin();
    let listed = http_get(a, "/api/v1/profiles/geo", None).await.json();
    assert_eq!(listed["routing"], "geographic");
    // (client, endpoint target) per the comments in profiles/geographic.yaml.
    for (client, want) in [
        ("192.0.2.1", "192.0.2.61"),      // FR: GEO-EU
        ("192.0.2.130", "198.51.100.61"), // US-CA
        ("198.51.100.1", "203.0.113.61"), // CN: GEO-AS
        ("10.99.0.1", "203.0.113.62"),    // not in the database: WORLD
    ] {
        let v = explain(a, None, "geo", "A", client).await;
        assert_eq!(v["rcode"], "NOERROR", "{client}: {v}");
        assert_eq!(answer_addrs(&v), [want], "{client}: {v}");
        assert!(trace_has(&v, "geographic"), "{client}: {v}");
        // The wire agrees, for the same client sent as ECS.
        let r = h.udp(&Q::new(&fq("geo"), T_A).ecs(ip(client), 32)).await;
        assert_eq!(r.single(), format!("A {want}"), "{client} on the wire");
        let scope = v["scope"].as_u64().unwrap_or_else(|| panic!("{client}: no scope: {v}"));
        assert_eq!(r.ecs().map(|e| u64::from(e.2)), Some(scope), "{client}: ECS scope");
        if client != "10.99.0.1" {
            assert!(scope > 0, "{client}: a located answer has a non-zero scope: {v}");
        }
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_location_methods_with_the_shipped_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |f: &str| std::fs::read_to_string(repo.join("profiles").join(f)).unwrap();
    let texts: Vec<(&str, String)> =
        ["subnet.yaml", "performance.yaml", "groups.yaml", "zone.yaml"]
            .into_iter()
            .map(|f| (f, read(f)))
            .collect();
    let mut profiles: Vec<(&str, &str)> = DEFAULT_PROFILES.to_vec();
    profiles.extend(texts.iter().map(|(f, t)| (*f, t.as_str())));
    write_config(dir.path(), &profiles);
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    for f in ["sample-city.mmdb", "latency.yaml"] {
        std::fs::copy(repo.join("geo-data").join(f), dir.path().join("data").join(f)).unwrap();
    }
    let yaml = format!(
        "{}geo:\n  database: data/sample-city.mmdb\nlatency:\n  table: data/latency.yaml\n\
             topology:\n  zones:\n    zone-a: [\"10.1.0.0/16\"]\n    zone-b: [\"10.2.0.0/16\"]\n",
        with_admin(&steerdns_yaml(), None)
    );
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    let h = Harness::in_dir(dir).await;
    let a = h.admin();
    // Deterministic answers (per the comments in the shipped profiles), checked on the wire too.
    for (name, client, want, trace) in [
        ("office", "198.51.100.15", "192.0.2.72", "range of vpn"),
        ("office", "203.0.113.9", "203.0.113.71", "fallback endpoint internet"),
        ("fast", "198.51.100.130", "198.51.100.82", "region cn-shanghai"),
        ("fast", "192.0.2.10", "192.0.2.81", "region eu-west"),
    ] {
        let v = explain(a, None, name, "A", client).await;
        assert_eq!(answer_addrs(&v), [want], "{name} {client}: {v}");
        assert!(trace_has(&v, trace), "{name} {client}: {v}");
        let r = h.udp(&Q::new(&fq(name), T_A).ecs(ip(client), 32)).await;
        assert_eq!(r.single(), format!("A {want}"), "{name} {client} on the wire");
    }
    let v = explain(a, None, "accel", "A", "198.51.100.7").await;
    assert!(trace_has(&v, "shares: beijing 62.5%, shanghai 37.5%"), "{v}");
    let got = answer_addrs(&v);
    assert!(["198.51.100.91", "198.51.100.92", "198.51.100.93"].contains(&got[0].as_str()), "{v}");
    let v = explain(a, None, "svc", "A", "10.1.2.3").await;
    assert!(trace_has(&v, "client zone zone-a"), "{v}");
    assert!(["192.0.2.101", "192.0.2.102"].contains(&answer_addrs(&v)[0].as_str()), "{v}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_bad_requests_are_400_with_a_json_error() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let a = h.admin();
    for (path, what) in [
        ("/api/v1/explain?name=www&type=A", "client missing"),
        ("/api/v1/explain?name=www&type=A&client=", "client empty"),
        ("/api/v1/explain?name=www&type=A&client=not-an-ip", "client not an address"),
        ("/api/v1/explain?name=www&type=BOGUS&client=192.0.2.1", "bad type"),
        ("/api/v1/explain?type=A&client=192.0.2.1", "name missing"),
        ("/api/v1/explain?name=a..b&type=A&client=192.0.2.1", "bad name"),
    ] {
        let r = http_get(a, path, Some(TOKEN)).await;
        let e = assert_json_error(&r, 400, what);
        println!("{what}: {e}");
    }
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Token roles
// ---------------------------------------------------------------------------------------

const READER: &str = "r3ader-t0ken-for-tests";
const WRITER: &str = "wr1ter-t0ken-for-tests";

/// A server with the admin API, a read token `grafana`, a token `alice` without a role
/// (so `write`), and `keys` added to `steerdns.yaml`.
async fn with_roles(keys: &str) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    std::fs::write(dir.path().join("reader.token"), format!("{READER}\n")).unwrap();
    std::fs::write(dir.path().join("writer.token"), format!("{WRITER}\n")).unwrap();
    let yaml = format!(
        "{}admin:\n  tokens:\n    - {{ name: grafana, file: reader.token, role: read }}\n    \
         - {{ name: alice, file: writer.token }}\n{keys}",
        with_admin(&steerdns_yaml(), None)
    );
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    Harness::in_dir(dir).await
}

/// Every call that changes state: (method, path, body).
const WRITES: &[(&str, &str, &str)] = &[
    ("POST", "/api/v1/profiles/api/endpoints/site-a/drain", ""),
    ("POST", "/api/v1/profiles/api/endpoints/site-a/undrain", ""),
    ("PUT", "/api/v1/profiles/api/endpoints/site-a/weight", "{\"weight\": 7}"),
    ("DELETE", "/api/v1/profiles/api/endpoints/site-a/weight", ""),
    ("POST", "/api/v1/reload", ""),
];

async fn call_with(addr: SocketAddr, method: &str, path: &str, token: &str, body: &str) -> Http {
    let auth = format!("Bearer {token}");
    http_with_body(addr, method, path, &[("Authorization", &auth)], body.as_bytes()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_reads_everything_and_changes_nothing() {
    let h = with_roles("").await;
    let a = h.admin();
    let reads = [
        "/metrics",
        "/api/v1/profiles",
        "/api/v1/profiles?limit=5",
        "/api/v1/profiles/api",
        "/api/v1/stats",
        "/api/v1/events",
        "/api/v1/explain?name=www&type=A&client=192.0.2.1",
        "/api/v1/cluster",
        "/api/v1/reload",
        "/api/v1/whoami",
    ];
    for path in reads {
        let r = call_with(a, "GET", path, READER, "").await;
        assert_eq!(r.status, 200, "GET {path} with the read token: {}", r.text());
    }
    let before = get_json(a, "/api/v1/profiles/api", WRITER).await;
    for &(method, path, body) in WRITES {
        let r = call_with(a, method, path, READER, body).await;
        let e = assert_json_error(&r, 403, &format!("{method} {path} with the read token"));
        assert_eq!(
            e,
            format!(
                "the token \"grafana\" is read-only: {method} {path} changes state and needs a write token"
            )
        );
    }
    assert_eq!(get_json(a, "/api/v1/profiles/api", READER).await, before, "nothing changed");
    assert_eq!(get_json(a, "/api/v1/events", READER).await["events"], json!([]));
    let me = get_json(a, "/api/v1/whoami", READER).await;
    assert_eq!(me, json!({ "name": "grafana", "role": "read" }));
    let me = get_json(a, "/api/v1/whoami", WRITER).await;
    assert_eq!(me, json!({ "name": "alice", "role": "write" }));
    // A token without a role writes, as before roles existed; its changes are its own.
    for &(method, path, body) in WRITES {
        let r = call_with(a, method, path, WRITER, body).await;
        assert_eq!(r.status, 200, "{method} {path} with the write token: {}", r.text());
    }
    let events = get_json(a, "/api/v1/events", READER).await;
    let by: Vec<&str> =
        events["events"].as_array().unwrap().iter().map(|e| e["by"].as_str().unwrap()).collect();
    assert_eq!(by, ["alice"; 4], "{events}");
    // A wrong token is still 401, for reads and writes alike.
    assert_eq!(call_with(a, "GET", "/api/v1/profiles", "nope", "").await.status, 401);
    assert_eq!(call_with(a, "POST", "/api/v1/reload", "nope", "").await.status, 401);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_role_other_than_read_or_write_is_a_located_error() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    std::fs::write(dir.path().join("t.token"), "x-token\n").unwrap();
    let yaml = with_admin(&steerdns_yaml(), None);
    let lines = yaml.lines().count();
    let yaml =
        format!("{yaml}admin:\n  tokens:\n    - {{ name: bob, file: t.token, role: owner }}\n");
    let config = dir.path().join("steerdns.yaml");
    std::fs::write(&config, yaml).unwrap();
    let errors = match steerdns::config::load(&config, None) {
        Ok(_) => panic!("a role of owner was accepted"),
        Err(e) => e.0.iter().map(ToString::to_string).collect::<Vec<_>>(),
    };
    let want = format!(
        "{}:{}:41: token role \"owner\" must be read or write",
        config.display(),
        lines + 3
    );
    assert_eq!(errors, [want]);
}

async fn get_json(addr: SocketAddr, path: &str, token: &str) -> Value {
    let r = call_with(addr, "GET", path, token, "").await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r.json()
}

// ---------------------------------------------------------------------------------------
// The last reload, failover, events across a restart
// ---------------------------------------------------------------------------------------

const PATIENCE: std::time::Duration = std::time::Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_reload_says_how_it_ended_whatever_triggered_it() {
    let h = Harness::with_admin(DEFAULT_PROFILES, None).await;
    let a = h.admin();
    let last = async || http_get(a, "/api/v1/reload", None).await.json();
    let first = last().await;
    assert_eq!(
        (&first["trigger"], &first["ok"], &first["generation"], &first["errors"]),
        (&json!("startup"), &json!(true), &json!(1), &json!([])),
        "{first}"
    );
    assert!(first["time"].as_str().unwrap().ends_with('Z'), "{first}");

    // The file watcher's reload is refused: the API says so, with the located error.
    let broken = h.profile_path("broken.yaml");
    std::fs::write(&broken, "name: broken\nrouting: sideways\nendpoints: []\n").unwrap();
    eventually(PATIENCE, "the refused file change", async || last().await["ok"] == false).await;
    let refused = last().await;
    assert_eq!((&refused["trigger"], &refused["generation"]), (&json!("file change"), &json!(1)));
    let errors: Vec<&str> =
        refused["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    let at = format!("{}:2:10: ", broken.display());
    assert!(errors.len() == 1 && errors[0].starts_with(&at), "{refused}");

    let r = http_post(a, "/api/v1/reload", None).await;
    assert_eq!(r.status, 422, "{}", r.text());
    let again = last().await;
    assert_eq!((&again["trigger"], &again["ok"]), (&json!("admin API"), &json!(false)));
    assert_eq!(again["errors"], refused["errors"]);

    std::fs::remove_file(&broken).unwrap();
    eventually(PATIENCE, "the next reload applied", async || last().await["ok"] == true).await;
    let fixed = last().await;
    assert_eq!(
        (&fixed["trigger"], &fixed["generation"], &fixed["errors"]),
        (&json!("file change"), &json!(2), &json!([])),
        "{fixed}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_answering_from_its_backup_says_failover() {
    let backend = HttpBackend::start("127.0.0.1").await;
    let failover = format!(
        "name: fo\nrouting: priority\n\
         monitor: {{ port: {}, interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\n\
         endpoints:\n\
         \x20 - {{ name: primary, target: 127.0.0.1 }}\n\
         \x20 - {{ name: backup, target: 192.0.2.99, always_serve: true }}\n",
        backend.addr.port()
    );
    let mut files = DEFAULT_PROFILES.to_vec();
    files.push(("fo.yaml", &failover));
    let h = Harness::with_admin(&files, None).await;
    let a = h.admin();
    let shown = async |name: &str| {
        let list = http_get(a, "/api/v1/profiles", None).await.json();
        let p = list["profiles"].as_array().unwrap().iter().find(|p| p["name"] == fq(name));
        p.unwrap_or_else(|| panic!("{name} missing: {list}")).clone()
    };
    eventually(PATIENCE, "the primary online", async || {
        shown("fo").await["endpoints"]["online"] == 1
    })
    .await;
    assert_eq!(shown("fo").await["failover"], Value::Null);
    backend.stop().await;
    eventually(PATIENCE, "the failover", async || !shown("fo").await["failover"].is_null()).await;
    let fo = shown("fo").await;
    assert_eq!(fo["failover"], json!({ "preferred": ["primary"], "serving": ["backup"] }));
    assert_eq!(fo["status"], "online", "the profile still answers: {fo}");
    // prio2's first endpoint is disabled in the configuration: its second is preferred.
    for healthy in ["www", "prio2", "api"] {
        assert_eq!(shown(healthy).await["failover"], Value::Null, "{healthy}");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_kept_in_the_state_file_across_a_restart() {
    let mut h = Harness::with_admin_and_keys(DEFAULT_PROFILES, "state_file: state.json\n").await;
    let a = h.admin();
    let r = http_post(a, "/api/v1/profiles/api/endpoints/site-a/drain", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let before = http_get(a, "/api/v1/events", None).await.json();
    let drain = before["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((&drain["kind"], &drain["endpoint"]), (&json!("drain"), &json!("site-a")));
    let state = h.dir.path().join("state.json");
    eventually(PATIENCE, "the event in the state file", async || {
        std::fs::read_to_string(&state).is_ok_and(|t| t.contains("\"kind\": \"drain\""))
    })
    .await;

    h.server.take().unwrap().shutdown().await;
    let h = Harness::in_dir(h.dir).await;
    let a = h.admin();
    let after = http_get(a, "/api/v1/events", None).await.json();
    assert_eq!(after["events"], before["events"], "the same events, numbered as they were");
    assert_eq!(after["next"], before["next"]);
    let r = http_post(a, "/api/v1/profiles/api/endpoints/site-a/undrain", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let next = before["next"].as_u64().unwrap();
    let newer = http_get(a, &format!("/api/v1/events?since={next}"), None).await.json();
    let list = newer["events"].as_array().unwrap();
    assert_eq!(
        (list.len(), &list[0]["kind"], &list[0]["seq"]),
        (1, &json!("undrain"), &json!(next + 1))
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// HTTPS
// ---------------------------------------------------------------------------------------

/// A self-signed certificate for 127.0.0.1 and localhost: (certificate DER, cert PEM, key PEM).
fn self_signed(cn: &str) -> (Vec<u8>, String, String) {
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.der().to_vec(), cert.pem(), key.serialize_pem())
}

/// One HTTPS exchange trusting only `roots`: the certificate the server presented and the
/// response; `None` when the handshake fails.
async fn https(
    addr: SocketAddr,
    roots: &[&[u8]],
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Option<(Vec<u8>, Http)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(rustls::pki_types::CertificateDer::from(r.to_vec())).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let mut tls = connector.connect(name, tcp).await.ok()?;
    let presented = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    // A TLS close without close_notify is an error after the whole response was read.
    let _ = tls.read_to_end(&mut raw).await;
    Some((presented, parse_http(&raw).unwrap_or_else(|e| panic!("{path}: {e}"))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_page_are_served_over_https_and_a_renewed_certificate_is_used() {
    let (der_a, cert_a, key_a) = self_signed("first");
    let (der_b, cert_b, key_b) = self_signed("renewed");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("admin.pem"), &cert_a).unwrap();
    std::fs::write(dir.path().join("admin.key"), &key_a).unwrap();
    let keys = "  tls: { cert: admin.pem, key: admin.key }\n";
    let h = {
        write_config(dir.path(), DEFAULT_PROFILES);
        std::fs::write(dir.path().join("reader.token"), format!("{READER}\n")).unwrap();
        let yaml = format!(
            "{}admin:\n  tokens:\n    - {{ name: grafana, file: reader.token, role: read }}\n{keys}",
            with_admin(&steerdns_yaml(), None)
        );
        std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
        Harness::in_dir(dir).await
    };
    let a = h.admin();
    let both: [&[u8]; 2] = [&der_a, &der_b];

    let (presented, r) = https(a, &both, "GET", "/healthz", None).await.expect("handshake");
    assert_eq!((presented.as_slice(), r.status, r.text().as_str()), (der_a.as_slice(), 200, "ok"));
    let (_, page) = https(a, &both, "GET", "/", None).await.unwrap();
    assert!(page.text().contains(r#"<script src="/ui/app.js""#), "{}", page.text());
    let (_, list) = https(a, &both, "GET", "/api/v1/profiles?limit=1", Some(READER)).await.unwrap();
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(list.json()["profiles"].as_array().unwrap().len(), 1);
    let (_, denied) = https(a, &both, "POST", "/api/v1/reload", Some(READER)).await.unwrap();
    assert_eq!(denied.status, 403);
    // A client that trusts only another certificate refuses it; plain HTTP gets no answer.
    assert!(https(a, &[&der_b], "GET", "/healthz", None).await.is_none());
    let plain = tokio::time::timeout(HTTP_WAIT, async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        raw
    })
    .await
    .expect("plain HTTP is closed");
    assert!(!plain.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&plain));

    // Renewed: the next connections get the new certificate, without a restart.
    let cert_path = h.dir.path().join("admin.pem");
    let key_path = h.dir.path().join("admin.key");
    std::fs::write(&key_path, &key_b).unwrap();
    std::fs::write(&cert_path, &cert_b).unwrap();
    eventually(PATIENCE, "the renewed certificate", async || {
        https(a, &both, "GET", "/healthz", None).await.is_some_and(|(p, _)| p == der_b)
    })
    .await;
    let (_, r) = https(a, &[&der_b], "GET", "/api/v1/profiles/www", Some(READER)).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    // A broken pair is not taken: the renewed one stays in use.
    std::fs::write(&cert_path, "not a certificate\n").unwrap();
    for _ in 0..3 {
        let (p, r) = https(a, &both, "GET", "/healthz", None).await.expect("still served");
        assert_eq!((p.as_slice(), r.status), (der_b.as_slice(), 200));
    }

    // A reload that turns TLS off applies the rest; HTTPS stays until a restart.
    let config = h.dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap().replace(keys, "");
    std::fs::write(&config, yaml).unwrap();
    let reloaded = async || {
        let r = https(a, &both, "GET", "/api/v1/reload", Some(READER)).await;
        r.is_some_and(|(_, r)| r.json()["generation"] == 2 && r.json()["ok"] == true)
    };
    eventually(PATIENCE, "the reload without admin.tls", reloaded).await;
    assert_eq!(h.server().control().restart_needed(), ["admin.tls"]);
    let (p, r) = https(a, &both, "GET", "/healthz", None).await.expect("still HTTPS");
    assert_eq!((p.as_slice(), r.status), (der_b.as_slice(), 200));
    h.stop().await;
}
