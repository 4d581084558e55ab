//! Several monitors per endpoint, end to end: a real `Server` probing real HTTP and TCP
//! listeners on loopback, whose endpoints follow their monitor rule; health pushed through
//! the admin API (override, `pushed` monitors and their `missing` policies, errors); and
//! health files watched on disk. Waits poll with generous deadlines instead of asserting
//! timings.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use common::{Harness, http_get, http_with_body};
use serde_json::Value;
use steerdns::model::health::{HealthView, Status};
use steerdns::probe::EndpointState;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

/// Longest wait for anything that should happen within a few probe intervals.
const PATIENCE: Duration = Duration::from_secs(15);

/// Probe every second, degrade on the first failure.
const FAST: &str = "monitor: { interval: 1s, timeout: 300ms, tolerated_failures: 0 }";

/// An HTTP backend answering every request with the status it is set to.
struct Web {
    addr: SocketAddr,
    status: Arc<AtomicU16>,
}

impl Web {
    async fn start(ip: &str) -> Web {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let status = Arc::new(AtomicU16::new(200));
        let (addr, answer) = (listener.local_addr().unwrap(), status.clone());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let _ = common::read_request_head(&mut conn).await;
                    let code = answer.load(Ordering::SeqCst);
                    let reply = format!(
                        "HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Web { addr, status }
    }

    fn set(&self, code: u16) {
        self.status.store(code, Ordering::SeqCst);
    }
}

/// A TCP port that accepts connections while open and refuses them while closed.
struct Port {
    addr: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl Port {
    async fn open_on(ip: &str) -> Port {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        Port { addr, task: Some(Port::serve(listener)) }
    }

    fn serve(listener: TcpListener) -> JoinHandle<()> {
        tokio::spawn(async move { while listener.accept().await.is_ok() {} })
    }

    async fn close(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }

    async fn reopen(&mut self) {
        // tokio sets SO_REUSEADDR: the same port binds again at once.
        self.task = Some(Port::serve(TcpListener::bind(self.addr).await.unwrap()));
    }
}

fn state(h: &Harness, profile: &str, endpoint: &str) -> EndpointState {
    let profile = format!("{profile}.tm.example.test.");
    let states = h.server().prober().endpoint_states();
    let found = states.into_iter().find(|s| s.profile == profile && s.endpoint == endpoint);
    found.unwrap_or_else(|| panic!("no endpoint {profile}/{endpoint}"))
}

/// The status queries read for an endpoint: the served health table's.
fn served(h: &Harness, profile: &str, endpoint: &str) -> Status {
    let snap = h.server().snapshot();
    let name = format!("{profile}.tm.example.test.");
    let p = snap.profiles.iter().find(|p| p.name == name).unwrap();
    let ep = p.endpoints.iter().find(|e| e.name == endpoint).unwrap();
    snap.health.status(ep.health_slot.unwrap())
}

/// Waits until the endpoint is served with `want`; returns its state then.
async fn wait(h: &Harness, profile: &str, endpoint: &str, want: Status) -> EndpointState {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if served(h, profile, endpoint) == want {
            let s = state(h, profile, endpoint);
            if s.status == want {
                return s;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{profile}/{endpoint} never became {want}: {:#?}",
            state(h, profile, endpoint)
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// The combined reason of an endpoint with monitors.
fn reason(s: &EndpointState) -> String {
    s.monitors.as_ref().expect("a monitored endpoint").reason.clone()
}

/// Each rule over an HTTP and a TCP monitor of one endpoint, as the backends go down and
/// come back: `all` fails with either, `any` only with both, `at_least: 2` like `all`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rule_follows_real_backends() {
    let web = Web::start("127.0.0.2").await;
    let mut db = Port::open_on("127.0.0.2").await;
    let monitors = format!(
        "monitors:\n  - {{ name: web, port: {} }}\n  - {{ name: db, protocol: tcp, port: {} }}\n",
        web.addr.port(),
        db.addr.port()
    );
    let profile = |name: &str, rule: &str| {
        format!(
            "name: {name}\nrouting: priority\n{FAST}\n{monitors}monitor_rule: {rule}\nendpoints:\n\
             \x20 - {{ name: site, target: 127.0.0.2 }}\n"
        )
    };
    let yaml = [profile("all", "all"), profile("any", "any"), profile("two", "{ at_least: 2 }")]
        .join("---\n");
    let h = Harness::with_admin(&[("m.yaml", &yaml)], None).await;
    for p in ["all", "any", "two"] {
        let s = wait(&h, p, "site", Status::Online).await;
        assert!(reason(&s).contains("2 of 2 monitors up"), "{}", reason(&s));
    }

    web.set(503);
    let s = wait(&h, "all", "site", Status::Degraded).await;
    assert_eq!(reason(&s), "1 of 2 monitors failing: web (HTTP 503, expected 200-299); rule all");
    wait(&h, "two", "site", Status::Degraded).await;
    // explain shows how the monitors made the status.
    let explained =
        http_get(h.admin(), "/api/v1/explain?name=all&client=192.0.2.1", None).await.json();
    let e = &explained["monitors"][0];
    assert_eq!(
        (e["endpoint"].as_str(), e["rule"].as_str(), e["status"].as_str()),
        (Some("site"), Some("all"), Some("degraded")),
        "{explained}"
    );
    let each: Vec<(&str, &str)> = e["monitors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["status"].as_str().unwrap()))
        .collect();
    assert_eq!(each, [("web", "degraded"), ("db", "online")]);
    let metrics = http_get(h.admin(), "/metrics", None).await.text();
    for (monitor, status) in [("web", "degraded"), ("db", "online")] {
        let series = format!(
            "steerdns_monitor_status{{profile=\"all.tm.example.test.\",endpoint=\"site\",monitor=\"{monitor}\",status=\"{status}\"}} 1"
        );
        assert!(metrics.contains(&series), "{series} not in the metrics");
    }
    // `any` still has db: online throughout, with the failing monitor named.
    let s = state(&h, "any", "site");
    assert_eq!((s.status, served(&h, "any", "site")), (Status::Online, Status::Online));
    assert!(reason(&s).starts_with("1 of 2 monitors failing: web"), "{}", reason(&s));

    db.close().await;
    let s = wait(&h, "any", "site", Status::Degraded).await;
    assert_eq!(
        reason(&s),
        "2 of 2 monitors failing: web (HTTP 503, expected 200-299), db (connection refused); rule any"
    );
    let monitors = s.monitors.unwrap().monitors;
    let shown: Vec<(&str, Status)> = monitors.iter().map(|m| (m.name.as_str(), m.status)).collect();
    assert_eq!(shown, [("web", Status::Degraded), ("db", Status::Degraded)]);

    // One back: `any` recovers, `all` waits for the other.
    web.set(200);
    wait(&h, "any", "site", Status::Online).await;
    assert_eq!(state(&h, "all", "site").status, Status::Degraded);
    db.reopen().await;
    for p in ["all", "any", "two"] {
        wait(&h, p, "site", Status::Online).await;
    }
    // Every change was recorded as the endpoint's, with the combined reason.
    let events = events(&h).await;
    let all_changes: Vec<&str> = events
        .iter()
        .filter(|e| e["profile"] == "all.tm.example.test." && e["kind"] == "status")
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert!(all_changes.iter().any(|r| r.ends_with("; rule all")), "{all_changes:?}");
    h.stop().await;
}

async fn events(h: &Harness) -> Vec<Value> {
    let body = http_get(h.admin(), "/api/v1/events", None).await.json();
    body["events"].as_array().cloned().unwrap_or_default()
}

async fn put_health(h: &Harness, path: &str, body: &str) -> (u16, Value) {
    let r = http_with_body(
        h.admin(),
        "PUT",
        path,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await;
    (r.status, r.json())
}

async fn delete(h: &Harness, path: &str) -> (u16, Value) {
    let r = common::http(h.admin(), "DELETE", path, &[]).await;
    (r.status, r.json())
}

/// On an endpoint without a `pushed` monitor, a push overrides its probe for the TTL, then
/// the probe decides again; a cleared push ends at once. Both are events with `by`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_overrides_for_its_ttl_then_the_probes_decide() {
    let web = Web::start("127.0.0.3").await;
    let yaml = format!(
        "name: www\nrouting: priority\n{FAST}\nendpoints:\n\
         \x20 - {{ name: a, target: 127.0.0.3, monitor: {{ port: {} }} }}\n",
        web.addr.port()
    );
    let h = Harness::with_admin(&[("w.yaml", &yaml)], None).await;
    wait(&h, "www", "a", Status::Online).await;
    let path = "/api/v1/profiles/www/endpoints/a/health";
    let (code, body) = put_health(
        &h,
        path,
        r#"{"status": "unhealthy", "ttl": "2s", "reason": "deploying", "by": "deployer"}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["pushed_health"]["status"], "unhealthy");
    let s = wait(&h, "www", "a", Status::Degraded).await;
    assert!(reason(&s).starts_with("pushed unhealthy by deployer: deploying"), "{}", reason(&s));
    let shown = http_get(h.admin(), "/api/v1/profiles/www", None).await.json();
    let ep = &shown["endpoints"][0];
    assert_eq!(ep["health_override"]["by"], "deployer", "{ep}");
    assert_eq!(ep["pushed_health"]["reason"], "deploying", "{ep}");
    assert_eq!(ep["status"], "degraded", "{ep}");
    // The TTL lapses: the probe, still succeeding, decides again.
    wait(&h, "www", "a", Status::Online).await;

    put_health(&h, path, r#"{"status": "unhealthy", "ttl": "1h"}"#).await;
    wait(&h, "www", "a", Status::Degraded).await;
    let (code, body) = delete(&h, path).await;
    assert_eq!((code, &body["pushed_health"]), (200, &Value::Null), "{body}");
    wait(&h, "www", "a", Status::Online).await;

    let events = events(&h).await;
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["kind"].as_str().unwrap_or_default().starts_with("health"))
        .map(|e| (e["kind"].as_str().unwrap(), e["by"].as_str().unwrap_or_default()))
        .collect();
    // Without a token, the API names loopback callers `loopback`.
    assert_eq!(
        kinds,
        [
            ("health_pushed", "deployer"),
            ("health_pushed", "loopback"),
            ("health_cleared", "loopback")
        ]
    );
    h.stop().await;
}

/// A `pushed` monitor is the push while it lives, and its `missing` policy otherwise:
/// before any push, and after one lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_monitor_applies_its_missing_policy() {
    let ep = |name: &str, missing: &str| {
        format!(
            "  - {{ name: {name}, target: 192.0.2.1, monitors: [{{ name: ops, protocol: pushed, missing: {missing} }}] }}\n"
        )
    };
    let yaml = format!(
        "name: ops\nrouting: multivalue\nendpoints:\n{}{}{}",
        ep("healthy", "healthy"),
        ep("unhealthy", "unhealthy"),
        ep("last", "last_known")
    );
    let h = Harness::with_admin(&[("o.yaml", &yaml)], None).await;
    // Never pushed.
    wait(&h, "ops", "healthy", Status::Online).await;
    wait(&h, "ops", "unhealthy", Status::Degraded).await;
    wait(&h, "ops", "last", Status::Checking).await;
    for name in ["healthy", "unhealthy", "last"] {
        let path = format!("/api/v1/profiles/ops/endpoints/{name}/health");
        let (code, body) = put_health(&h, &path, r#"{"status": "healthy", "ttl": "1s"}"#).await;
        assert_eq!(code, 200, "{body}");
    }
    for name in ["healthy", "unhealthy", "last"] {
        let s = wait(&h, "ops", name, Status::Online).await;
        assert_eq!(
            s.monitors.unwrap().overridden_by,
            None,
            "a pushed monitor's push overrides nothing"
        );
    }
    // Lapsed: each policy again, the last known one being healthy.
    wait(&h, "ops", "unhealthy", Status::Degraded).await;
    let s = wait(&h, "ops", "last", Status::Online).await;
    let deadline = Instant::now() + PATIENCE;
    while !reason(&state(&h, "ops", "last")).starts_with("no live push; last known") {
        assert!(Instant::now() < deadline, "{:#?}", state(&h, "ops", "last"));
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.status, Status::Online);
    assert_eq!(state(&h, "ops", "healthy").status, Status::Online);
    // An unhealthy push, lapsed, is the last known status too.
    put_health(
        &h,
        "/api/v1/profiles/ops/endpoints/last/health",
        r#"{"status": "unhealthy", "ttl": "1s"}"#,
    )
    .await;
    wait(&h, "ops", "last", Status::Degraded).await;
    sleep(Duration::from_millis(1500)).await;
    assert_eq!(served(&h, "ops", "last"), Status::Degraded);
    h.stop().await;
}

/// Wrong names are 404, bodies that are not a push 400, an endpoint without monitors 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_errors() {
    let yaml = "name: www\nrouting: priority\nendpoints:\n\
                \x20 - { name: a, target: 192.0.2.1, monitors: [{ name: ops, protocol: pushed }] }\n\
                \x20 - { name: b, target: 192.0.2.2, always_serve: true }\n";
    let h = Harness::with_admin(&[("w.yaml", yaml)], None).await;
    let good = r#"{"status": "healthy", "ttl": "5m"}"#;
    let cases: &[(&str, &str, u16, &str)] = &[
        (
            "/api/v1/profiles/nope/endpoints/a/health",
            good,
            404,
            "no profile named nope.tm.example.test.",
        ),
        ("/api/v1/profiles/www/endpoints/zz/health", good, 404, "has no endpoint \"zz\""),
        ("/api/v1/profiles/www/endpoints/b/health", good, 409, "has no monitors"),
        (
            "/api/v1/profiles/www/endpoints/a/health",
            r#"{"status": "up", "ttl": "5m"}"#,
            400,
            "status must be \"healthy\" or \"unhealthy\"",
        ),
        (
            "/api/v1/profiles/www/endpoints/a/health",
            r#"{"status": "healthy"}"#,
            400,
            "missing field `ttl`",
        ),
        (
            "/api/v1/profiles/www/endpoints/a/health",
            r#"{"status": "healthy", "ttl": "30d"}"#,
            400,
            "ttl must be between 1s and 7d",
        ),
        ("/api/v1/profiles/www/endpoints/a/health", "{", 400, "the body must be"),
    ];
    for (path, body, code, msg) in cases {
        let (got, answer) = put_health(&h, path, body).await;
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(got == *code && error.contains(msg), "{path} {body}: {got} {answer}");
    }
    let (code, answer) = delete(&h, "/api/v1/profiles/www/endpoints/zz/health").await;
    assert_eq!(code, 404, "{answer}");
    h.stop().await;
}

/// A health file: the endpoints follow its lines as it is rewritten; a bad line spoils
/// only itself; an endpoint it does not name gets its monitor's `missing` policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_file_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("health");
    let ep = |name: &str, missing: &str| {
        format!(
            "  - {{ name: {name}, target: 192.0.2.1, monitors: [{{ name: ext, protocol: file, file: {}, missing: {missing} }}] }}\n",
            file.display()
        )
    };
    let yaml = format!(
        "name: ext\nrouting: multivalue\nendpoints:\n{}{}{}",
        ep("a", "unhealthy"),
        ep("b", "unhealthy"),
        ep("c", "healthy")
    );
    std::fs::write(&file, "ext.tm.example.test./a up\n").unwrap();
    let h = Harness::with_admin(&[("e.yaml", &yaml)], None).await;
    wait(&h, "ext", "a", Status::Online).await;
    wait(&h, "ext", "b", Status::Degraded).await;
    let s = wait(&h, "ext", "c", Status::Online).await;
    assert_eq!(reason(&s), "no data in the file (missing: healthy)");

    let text = "# maintenance\next.tm.example.test/a down disk full\nb sideways\nb up\nc down\n";
    std::fs::write(&file, text).unwrap();
    let s = wait(&h, "ext", "a", Status::Degraded).await;
    assert_eq!(reason(&s), format!("down in {}: disk full", file.display()));
    // Line 3 is bad; line 4 still applies.
    wait(&h, "ext", "b", Status::Online).await;
    wait(&h, "ext", "c", Status::Degraded).await;

    // Replaced by a rename, as tools write files atomically.
    let next = dir.path().join("health.new");
    std::fs::write(&next, "a up\n").unwrap();
    std::fs::rename(&next, &file).unwrap();
    wait(&h, "ext", "a", Status::Online).await;
    wait(&h, "ext", "b", Status::Degraded).await;
    wait(&h, "ext", "c", Status::Online).await;
    h.stop().await;
}

/// A reload that changes the rule takes effect at once, from the monitors' current results
/// (no probe starts over), and records the change as an event; one that changes nothing
/// records none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_a_new_rule_to_the_current_results() {
    let web = Web::start("127.0.0.4").await;
    let profile = |rule: &str| {
        format!(
            "name: www\nrouting: priority\n{FAST}\nmonitor_rule: {rule}\nendpoints:\n\
             \x20 - name: a\n    target: 127.0.0.4\n    monitors:\n\
             \x20     - {{ name: web, port: {} }}\n\
             \x20     - {{ name: ops, protocol: pushed, missing: unhealthy }}\n",
            web.addr.port()
        )
    };
    let h = Harness::with_admin(&[("w.yaml", &profile("any"))], None).await;
    wait(&h, "www", "a", Status::Online).await;
    let reload = |h: &Harness| {
        let admin = h.admin();
        async move { common::http_post(admin, "/api/v1/reload", None).await.status }
    };
    let statuses = |events: &[Value]| events.iter().filter(|e| e["kind"] == "status").count();
    let before = statuses(&events(&h).await);
    assert_eq!(reload(&h).await, 200);
    assert_eq!(statuses(&events(&h).await), before, "an unchanged reload changes nothing");
    assert_eq!(served(&h, "www", "a"), Status::Online);

    std::fs::write(h.profile_path("w.yaml"), profile("all")).unwrap();
    assert_eq!(reload(&h).await, 200);
    // At once: the probe of `web` is kept, and `ops` has no push.
    assert_eq!(served(&h, "www", "a"), Status::Degraded);
    let s = state(&h, "www", "a");
    assert_eq!(
        reason(&s),
        "1 of 2 monitors failing: ops (no live push (missing: unhealthy)); rule all"
    );
    let events = events(&h).await;
    let last = events.iter().rfind(|e| e["kind"] == "status").unwrap();
    assert_eq!(
        (&last["from"], &last["to"]),
        (&Value::from("online"), &Value::from("degraded")),
        "{last}"
    );
    h.stop().await;
}
