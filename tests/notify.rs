//! Webhook notifications end to end: a real `Server` probing real HTTP backends on
//! loopback, whose status changes are posted to webhook receivers running in the test
//! (small HTTP/1.1 servers that record every request and answer as told).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{HttpBackend, eventually};
use serde_json::{Value, json};
use steerdns::model::events::Kind;
use steerdns::server::Server;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// Longest wait for anything that should happen within a few probe intervals.
const PATIENCE: Duration = Duration::from_secs(20);

const FAST: &str = "monitor: { interval: 1s, timeout: 300ms, tolerated_failures: 0 }";

// ---------------------------------------------------------------------------------------
// Receivers
// ---------------------------------------------------------------------------------------

/// One request a receiver got.
#[derive(Clone, Debug)]
struct Request {
    method: String,
    path: String,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
    body: Value,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// How a receiver answers.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Status(u16),
    /// Reads the request, then says nothing and keeps the connection open.
    Hang,
}

/// A webhook receiver: records every request; answers the first ones from `script`, then
/// with `then`.
#[derive(Clone)]
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Request>>>,
    script: Arc<Mutex<Vec<Answer>>>,
    then: Answer,
}

impl Receiver {
    async fn start(script: &[Answer], then: Answer) -> Receiver {
        Receiver::start_tls("127.0.0.1", script, then, None).await
    }

    /// `start` on `ip`, speaking HTTPS with `tls` when given.
    async fn start_tls(
        ip: &str,
        script: &[Answer],
        then: Answer,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Receiver {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let r = Receiver {
            addr: listener.local_addr().unwrap(),
            got: Arc::default(),
            script: Arc::new(Mutex::new(script.iter().rev().copied().collect())),
            then,
        };
        let me = r.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                let (me, tls) = (me.clone(), tls.clone());
                held.push(tokio::spawn(async move {
                    match tls {
                        Some(tls) => {
                            if let Ok(conn) = tls.accept(conn).await {
                                me.answer(conn).await;
                            }
                        }
                        None => me.answer(conn).await,
                    }
                }));
            }
        });
        r
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn answer<S: AsyncRead + AsyncWrite + Unpin>(&self, mut conn: S) {
        let Some(request) = read_request(&mut conn).await else { return };
        let answer = self.script.lock().unwrap().pop().unwrap_or(self.then);
        self.got.lock().unwrap().push(request);
        match answer {
            Answer::Status(status) => {
                let reply = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
            Answer::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }

    fn bodies(&self) -> Vec<Value> {
        self.requests().into_iter().map(|r| r.body).collect()
    }
}

/// A request head and its `Content-Length` body, as JSON.
async fn read_request<S: AsyncRead + Unpin>(conn: &mut S) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.iter().find(|(k, _)| k == "content-length")?.1.parse().ok()?;
    while buf.len() < end + len {
        let n = conn.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[end..end + len]).expect("a JSON body");
    Some(Request { method, path, headers, body })
}

// ---------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------

fn write_config(dir: &Path, notify: &str, profiles: &str) -> PathBuf {
    let server = format!(
        "listen:\n  dns: [\"127.0.0.1:0\"]\nzones:\n  - origin: tm.example.test.\n    \
         ns: [ns1.tm.example.test.]\n    soa: {{ rname: hostmaster.example.test. }}\n    \
         records: [\"ns1 A 127.0.0.1\"]\n{notify}"
    );
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), server).unwrap();
    std::fs::write(dir.join("profiles/p.yaml"), profiles).unwrap();
    dir.join("steerdns.yaml")
}

/// Profile `www` (priority) with one endpoint per backend, `a`, `b`, ... in order.
fn profile(backends: &[&HttpBackend]) -> String {
    let mut out = format!("name: www\nrouting: priority\n{FAST}\nendpoints:\n");
    for (i, b) in backends.iter().enumerate() {
        let name = (b'a' + i as u8) as char;
        out.push_str(&format!(
            "  - {{ name: {name}, target: {}, monitor: {{ port: {} }} }}\n",
            b.addr.ip(),
            b.addr.port()
        ));
    }
    out
}

/// The endpoint status changes the server recorded, as (endpoint, from, to).
fn recorded(server: &Server) -> Vec<(String, String, String)> {
    let (events, _) = server.control().events.since(0);
    events
        .into_iter()
        .filter(|e| e.kind == Kind::Status)
        .map(|e| (e.endpoint, e.from.unwrap(), e.to.unwrap()))
        .collect()
}

/// The endpoint changes a generic receiver got, as (endpoint, from, to).
fn endpoint_messages(bodies: &[Value]) -> Vec<(String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap().to_string();
    bodies
        .iter()
        .filter(|b| b["kind"] == "endpoint")
        .map(|b| (s(&b["endpoint"]), s(&b["from"]), s(&b["to"])))
        .collect()
}

/// The profile changes a generic receiver got, as (profile, from, to).
fn profile_messages(bodies: &[Value]) -> Vec<(String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap().to_string();
    bodies
        .iter()
        .filter(|b| b["kind"] == "profile")
        .map(|b| (s(&b["profile"]), s(&b["from"]), s(&b["to"])))
        .collect()
}

/// (sent, failed, retried, dropped) of `webhook`; zeros until its sender started.
fn counts(server: &Server, webhook: &str) -> [u64; 4] {
    use std::sync::atomic::Ordering::Relaxed;
    let notifier = server.control().notify.get().expect("a notifier");
    let all = notifier.counts();
    let Some((_, c)) = all.iter().find(|(n, _)| n == webhook) else { return [0; 4] };
    [&c.sent, &c.failed, &c.retried, &c.dropped].map(|n| n.load(Relaxed))
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_reaches_each_webhook_once() {
    let a = HttpBackend::start("127.0.0.2").await;
    let b = HttpBackend::start("127.0.0.3").await;
    let generic = Receiver::start(&[], Answer::Status(200)).await;
    let slack = Receiver::start(&[], Answer::Status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "t0k3n\n").unwrap();
    let notify = format!(
        "notify:\n  webhooks:\n    - name: ops\n      url: {}\n      secret_file: token\n      \
         headers: {{X-Team: dns}}\n    - name: chat\n      url: {}\n      format: slack\n",
        generic.url("/hooks/steerdns?src=test"),
        slack.url("/services/T0/B0")
    );
    let path = write_config(dir.path(), &notify, &profile(&[&a, &b]));
    let server = Server::start(&path).await.unwrap();
    let online = || async {
        let r = recorded(&server);
        ["a", "b"].iter().all(|e| r.iter().any(|(n, _, to)| n == e && to == "online"))
    };
    eventually(PATIENCE, "both endpoints online", online).await;
    // Down by a real probe failure (connection refused), then back on the same port.
    let port = a.addr;
    a.stop().await;
    eventually(PATIENCE, "a degraded", async || {
        recorded(&server).iter().any(|(n, _, to)| n == "a" && to == "degraded")
    })
    .await;
    let a = HttpBackend::start_at(port).await;
    eventually(PATIENCE, "a back online", async || {
        recorded(&server).iter().filter(|(n, _, to)| n == "a" && to == "online").count() == 2
    })
    .await;
    // A first success (checking -> online) is no news: everything else is sent.
    let all = recorded(&server);
    assert_eq!(all.iter().filter(|(_, from, _)| from == "checking").count(), 2, "{all:?}");
    let changes: Vec<_> = all.into_iter().filter(|(_, from, _)| from != "checking").collect();
    assert_eq!(changes.len(), 2, "{changes:?}");
    let want_profiles: Vec<(String, String, String)> = [("up", "degraded"), ("degraded", "up")]
        .iter()
        .map(|(f, t)| ("www.tm.example.test.".to_string(), f.to_string(), t.to_string()))
        .collect();
    eventually(PATIENCE, "every change delivered", async || {
        let bodies = generic.bodies();
        endpoint_messages(&bodies).len() >= changes.len()
            && profile_messages(&bodies).len() >= want_profiles.len()
            && slack.requests().len() >= changes.len() + want_profiles.len()
    })
    .await;
    // Anything sent twice would arrive by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bodies = generic.bodies();
    assert_eq!(endpoint_messages(&bodies), changes, "one message per change, in order");
    assert_eq!(profile_messages(&bodies), want_profiles);
    let seqs: Vec<u64> = bodies.iter().map(|b| b["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "in event order: {seqs:?}");
    for r in generic.requests() {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/hooks/steerdns?src=test"));
        assert_eq!(r.header("authorization"), Some("Bearer t0k3n"));
        assert_eq!(r.header("x-team"), Some("dns"));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let degraded = bodies.iter().find(|b| b["to"] == "degraded" && b["kind"] == "endpoint");
    let degraded = degraded.unwrap();
    assert_eq!(degraded["profile"], "www.tm.example.test.");
    assert!(degraded["reason"].as_str().unwrap().contains("refused"), "{degraded}");
    assert!(humantime::parse_rfc3339(degraded["at"].as_str().unwrap()).is_ok());
    let texts: Vec<String> =
        slack.bodies().iter().map(|b| b["text"].as_str().unwrap().to_string()).collect();
    assert_eq!(texts.len(), changes.len() + want_profiles.len(), "{texts:#?}");
    assert!(texts.iter().any(|t| t.contains("endpoint a of www.tm.example.test. is degraded")));
    let n = (changes.len() + want_profiles.len()) as u64;
    assert_eq!(counts(&server, "ops"), [n, 0, 0, 0]);
    assert_eq!(counts(&server, "chat"), [n, 0, 0, 0]);
    server.shutdown().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_after_errors_and_gives_up_after_the_bound() {
    // A backend that is down from the start: its endpoint goes checking -> degraded, and
    // the profile up -> down. Two messages.
    let a = HttpBackend::start("127.0.0.4").await;
    let profile = profile(&[&a]);
    a.stop().await;
    // Two 500s, then it takes every message.
    let flaky =
        Receiver::start(&[Answer::Status(500), Answer::Status(500)], Answer::Status(200)).await;
    let broken = Receiver::start(&[], Answer::Status(503)).await;
    let dir = tempfile::tempdir().unwrap();
    let notify = format!(
        "notify:\n  webhooks:\n    - name: flaky\n      url: {}\n      retries: 5\n    \
         - name: broken\n      url: {}\n      retries: 2\n",
        flaky.url("/"),
        broken.url("/")
    );
    let path = write_config(dir.path(), &notify, &profile);
    let server = Server::start(&path).await.unwrap();
    // Backoff 1s, then 2s.
    eventually(PATIENCE, "the flaky receiver takes both", async || {
        counts(&server, "flaky")[0] == 2
    })
    .await;
    eventually(PATIENCE * 2, "the broken receiver is given up twice", async || {
        counts(&server, "broken")[1] == 2
    })
    .await;
    let want = [("a".to_string(), "checking".to_string(), "degraded".to_string())];
    assert_eq!(recorded(&server), want);
    assert_eq!(flaky.requests().len(), 4, "two failed attempts, the one taken, the next");
    assert_eq!(broken.requests().len(), 6, "for each message the first attempt and 2 retries");
    let bodies = broken.bodies();
    assert!(bodies[..3].iter().all(|b| *b == bodies[0]), "every attempt sends the same body");
    assert!(bodies[3..].iter().all(|b| *b == bodies[3]), "every attempt sends the same body");
    assert_eq!((&bodies[0]["kind"], &bodies[3]["kind"]), (&json!("endpoint"), &json!("profile")));
    assert_eq!(flaky.bodies()[2..], bodies[2..4], "the same messages to both");
    assert_eq!(counts(&server, "flaky"), [2, 0, 2, 0]);
    assert_eq!(counts(&server, "broken"), [0, 2, 4, 0]);
    let metrics = steerdns::server::admin::metrics::render(server.control());
    for line in [
        "steerdns_notify_sent_total{webhook=\"flaky\"} 2",
        "steerdns_notify_retried_total{webhook=\"flaky\"} 2",
        "steerdns_notify_failed_total{webhook=\"broken\"} 2",
        "steerdns_notify_dropped_total{webhook=\"broken\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_delays_neither_answers_nor_other_webhooks() {
    let a = HttpBackend::start("127.0.0.5").await;
    let b = HttpBackend::start("127.0.0.6").await;
    let stuck = Receiver::start(&[], Answer::Hang).await;
    let fine = Receiver::start(&[], Answer::Status(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let notify = format!(
        "notify:\n  webhooks:\n    - name: stuck\n      url: {}\n      timeout: 1m\n    \
         - name: fine\n      url: {}\n",
        stuck.url("/"),
        fine.url("/")
    );
    let path = write_config(dir.path(), &notify, &profile(&[&a, &b]));
    let server = Server::start(&path).await.unwrap();
    let dns = server.dns_addrs()[0];
    let online =
        || async { recorded(&server).iter().filter(|(_, _, to)| to == "online").count() == 2 };
    eventually(PATIENCE, "both endpoints online", online).await;
    a.stop().await;
    // The stuck receiver holds its first message for a minute; meanwhile the other
    // webhook gets every change, and queries are answered from the endpoint left.
    eventually(PATIENCE, "the fine receiver gets the failure", async || {
        fine.bodies().iter().any(|b| b["to"] == "degraded" && b["kind"] == "endpoint")
    })
    .await;
    // Its first message may reach the stuck receiver after the fine one took the failure:
    // each webhook has its own sender.
    eventually(PATIENCE, "the stuck receiver holds its first message", async || {
        !stuck.requests().is_empty()
    })
    .await;
    assert_eq!(stuck.requests().len(), 1, "the stuck webhook is still on its first message");
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(dns).await.unwrap();
    let query = common::Q::new("www.tm.example.test.", 1).bytes();
    let reply = common::udp_exchange(&sock, &query).await.expect("an answer");
    let answer = common::Reply::new(reply).addrs();
    assert_eq!(answer, vec!["127.0.0.6".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(counts(&server, "stuck")[..2], [0, 0]);
    server.shutdown().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alertmanager_sees_alerts_fire_and_resolve() {
    let a = HttpBackend::start("127.0.0.7").await;
    let b = HttpBackend::start("127.0.0.8").await;
    let am = Receiver::start(&[], Answer::Status(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let notify = format!(
        "notify:\n  webhooks:\n    - name: am\n      url: {}\n      format: alertmanager\n",
        am.url("")
    );
    let path = write_config(dir.path(), &notify, &profile(&[&a, &b]));
    let server = Server::start(&path).await.unwrap();
    let alerts = Alertmanager::default();
    let online =
        || async { recorded(&server).iter().filter(|(_, _, to)| to == "online").count() == 2 };
    eventually(PATIENCE, "both endpoints online", online).await;
    let port = a.addr;
    a.stop().await;
    eventually(PATIENCE, "the endpoint and profile alerts fire", async || {
        alerts.take(&am);
        alerts.firing() == ["SteerdnsEndpointDown a", "SteerdnsProfileDegraded -"]
    })
    .await;
    let a = HttpBackend::start_at(port).await;
    eventually(PATIENCE, "both alerts resolve", async || {
        alerts.take(&am);
        alerts.firing().is_empty() && alerts.resolved().len() == 2
    })
    .await;
    for r in am.requests() {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/api/v2/alerts"));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    server.shutdown().await;
    a.stop().await;
    b.stop().await;
}

/// The alerts of one Alertmanager request that fire (no `endsAt`), as "alertname endpoint"
/// with their `startsAt`, in label order.
fn fired(body: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = (body.as_array().expect("an array of alerts").iter())
        .filter(|a| a.get("endsAt").is_none())
        .map(|a| {
            let name = format!(
                "{} {}",
                a["labels"]["alertname"].as_str().unwrap(),
                a["labels"].get("endpoint").and_then(Value::as_str).unwrap_or("-")
            );
            (name, a["startsAt"].as_str().unwrap().to_string())
        })
        .collect();
    out.sort();
    out
}

/// Open alerts are sent to Alertmanager again every `refresh` (1s here), with the
/// `startsAt` they fired with, so that Alertmanager does not resolve them on its own; an
/// alert resolved since is not among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alertmanager_gets_the_open_alerts_again_after_each_refresh() {
    // Its probes every second and refreshes every second would share two cores with the
    // cluster test's replicas, whose recorded changes it would then delay.
    let _heavy = common::one_heavy_test_at_a_time().await;
    let a = HttpBackend::start("127.0.0.7").await;
    let b = HttpBackend::start("127.0.0.8").await;
    let c = HttpBackend::start("127.0.0.9").await;
    let am = Receiver::start(&[], Answer::Status(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let notify = format!(
        "notify:\n  webhooks:\n    - name: am\n      url: {}\n      format: alertmanager\n      \
         refresh: 1s\n",
        am.url("")
    );
    let path = write_config(dir.path(), &notify, &profile(&[&a, &b, &c]));
    let server = Server::start(&path).await.unwrap();
    let alerts = Alertmanager::default();
    let online =
        || async { recorded(&server).iter().filter(|(_, _, to)| to == "online").count() == 3 };
    eventually(PATIENCE, "every endpoint online", online).await;
    let b_port = b.addr;
    a.stop().await;
    b.stop().await;
    eventually(PATIENCE, "a, b and the profile alerts fire", async || {
        alerts.take(&am);
        alerts.firing()
            == ["SteerdnsEndpointDown a", "SteerdnsEndpointDown b", "SteerdnsProfileDegraded -"]
    })
    .await;
    let b = HttpBackend::start_at(b_port).await;
    eventually(PATIENCE, "b's alert resolves", async || {
        alerts.take(&am);
        alerts.resolved() == ["SteerdnsEndpointDown b"]
    })
    .await;
    // The alerts as they fired (and were refreshed since): the refreshes to come must carry
    // the same `startsAt`.
    let first: std::collections::BTreeSet<(String, String)> = (am.bodies().iter())
        .flat_map(fired)
        .filter(|(n, _)| n != "SteerdnsEndpointDown b")
        .collect();
    let first: Vec<(String, String)> = first.into_iter().collect();
    assert_eq!(first.len(), 2, "one startsAt each: {first:?}");
    let after = am.requests().len();
    eventually(PATIENCE, "two refreshes after b's alert resolved", async || {
        let bodies = am.bodies();
        bodies[after..].iter().filter(|b| fired(b) == first).count() >= 2
    })
    .await;
    let bodies = am.bodies();
    for body in &bodies[after..] {
        assert_eq!(fired(body), first, "only the open alerts, as they fired: {body}");
        assert!(body.as_array().unwrap().iter().all(|a| a.get("endsAt").is_none()), "{body}");
    }
    alerts.take(&am);
    assert_eq!(alerts.firing(), ["SteerdnsEndpointDown a", "SteerdnsProfileDegraded -"]);
    server.shutdown().await;
    b.stop().await;
    c.stop().await;
}

/// A stand-in for Alertmanager's alert store: alerts by their label set, firing while
/// `endsAt` is absent or in the future (as Alertmanager reads `postableAlerts`).
#[derive(Default)]
struct Alertmanager {
    seen: Mutex<usize>,
    alerts: Mutex<std::collections::BTreeMap<String, (String, Option<std::time::SystemTime>)>>,
}

impl Alertmanager {
    /// Applies the requests `r` got since the last call.
    fn take(&self, r: &Receiver) {
        let requests = r.requests();
        let mut seen = self.seen.lock().unwrap();
        for req in &requests[*seen..] {
            let list = req.body.as_array().expect("postableAlerts is an array");
            for alert in list {
                let labels = alert["labels"].as_object().expect("labels");
                assert!(labels.values().all(Value::is_string));
                assert!(
                    alert["startsAt"].as_str().is_some_and(|t| humantime::parse_rfc3339(t).is_ok())
                );
                let ends = alert
                    .get("endsAt")
                    .map(|t| humantime::parse_rfc3339(t.as_str().unwrap()).unwrap());
                let name = format!(
                    "{} {}",
                    labels["alertname"].as_str().unwrap(),
                    labels.get("endpoint").and_then(Value::as_str).unwrap_or("-")
                );
                let key = serde_json::to_string(labels).unwrap();
                self.alerts.lock().unwrap().insert(key, (name, ends));
            }
        }
        *seen = requests.len();
    }

    fn firing(&self) -> Vec<String> {
        let now = std::time::SystemTime::now();
        let alerts = self.alerts.lock().unwrap();
        alerts.values().filter(|(_, e)| e.is_none_or(|e| e > now)).map(|(n, _)| n.clone()).collect()
    }

    fn resolved(&self) -> Vec<String> {
        let now = std::time::SystemTime::now();
        let alerts = self.alerts.lock().unwrap();
        alerts
            .values()
            .filter(|(_, e)| e.is_some_and(|e| e <= now))
            .map(|(n, _)| n.clone())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_each_change_arrives_once() {
    let _heavy = common::one_heavy_test_at_a_time().await;
    let Some(etcd) = common::Etcd::start() else { return };
    let backend = HttpBackend::start("127.0.0.31").await;
    let receiver = Receiver::start(&[], Answer::Status(200)).await;
    let profile = format!(
        "name: hc\nrouting: priority\n\
         monitor: {{ port: {}, interval: 1s, timeout: 500ms, tolerated_failures: 0 }}\n\
         endpoints:\n\
         \x20 - {{ name: main, target: 127.0.0.31 }}\n\
         \x20 - {{ name: backup, target: 127.0.0.32, always_serve: true }}\n",
        backend.addr.port()
    );
    let notify =
        format!("notify:\n  webhooks:\n    - name: ops\n      url: {}\n", receiver.url("/"));
    let mut replicas = Vec::new();
    let mut dirs = Vec::new();
    for i in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let (yaml, dns, admin) = common::replica_yaml(i, &etcd.url, "/notify/", &notify);
        std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
        std::fs::write(dir.path().join("profiles/hc.yaml"), &profile).unwrap();
        replicas.push(common::Replica::start(dir.path(), i, &yaml, dns, admin).await);
        dirs.push(dir);
    }
    let changes = |from: &str, to: &str| {
        let bodies = receiver.bodies();
        let n = bodies.iter().filter(|b| b["from"] == from && b["to"] == to).count();
        (n, bodies)
    };
    // Every replica records each change from the same verdicts; only the leader sends.
    let port = backend.addr;
    eventually(Duration::from_secs(30), "the first result reaches every replica", async || {
        let mut all = true;
        for r in &replicas {
            all &= r.stderr_text().contains("endpoint status changed");
        }
        all
    })
    .await;
    backend.stop().await;
    eventually(PATIENCE * 2, "the failure is sent", async || changes("online", "degraded").0 >= 1)
        .await;
    let backend = HttpBackend::start_at(port).await;
    eventually(PATIENCE * 2, "the recovery is sent", async || changes("degraded", "online").0 >= 1)
        .await;
    for r in &replicas {
        let seen = async || r.stderr_text().matches("endpoint status changed").count() >= 3;
        eventually(PATIENCE * 2, &format!("{} recorded every change", r.node), seen).await;
    }
    // Anything a second replica sent would arrive by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (down, bodies) = changes("online", "degraded");
    assert_eq!(down, 1, "{bodies:#?}");
    for (from, to) in [("degraded", "online"), ("up", "degraded"), ("degraded", "up")] {
        assert_eq!(changes(from, to).0, 1, "{from} -> {to}: {bodies:#?}");
    }
    let servers: std::collections::BTreeSet<&str> =
        bodies.iter().filter_map(|b| b["server"].as_str()).collect();
    assert_eq!(servers.len(), 1, "one replica sent everything: {servers:?}");
    let sender = servers.first().unwrap().to_string();
    for r in &replicas {
        let cluster = common::http(r.admin, "GET", "/api/v1/cluster", &[]).await.json();
        assert_eq!(cluster["cluster"]["leaders"]["notify"], sender.as_str(), "{}", r.node);
    }
    for mut r in replicas {
        r.terminate();
    }
    backend.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_a_webhook_and_rotates_its_token() {
    let a = HttpBackend::start("127.0.0.9").await;
    let b = HttpBackend::start("127.0.0.10").await;
    let old = Receiver::start(&[], Answer::Status(200)).await;
    let new = Receiver::start(&[], Answer::Status(200)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "first").unwrap();
    let notify = |url: String| {
        format!(
            "notify:\n  webhooks:\n    - name: ops\n      url: {url}\n      secret_file: token\n"
        )
    };
    let profiles = profile(&[&a, &b]);
    let path = write_config(dir.path(), &notify(old.url("/")), &profiles);
    let server = Server::start(&path).await.unwrap();
    let online =
        || async { recorded(&server).iter().filter(|(_, _, to)| to == "online").count() == 2 };
    eventually(PATIENCE, "both endpoints online", online).await;
    b.stop().await;
    // b degraded, and the profile with it.
    eventually(PATIENCE, "the old receiver has b's failure", async || old.requests().len() == 2)
        .await;
    for r in old.requests() {
        assert_eq!((r.path.as_str(), r.header("authorization")), ("/", Some("Bearer first")));
    }
    std::fs::write(dir.path().join("token"), "second\n").unwrap();
    write_config(dir.path(), &notify(new.url("/v2")), &profiles);
    server.reload().expect("the new configuration loads");
    a.stop().await;
    eventually(PATIENCE, "the new receiver gets the failure", async || {
        endpoint_messages(&new.bodies()).contains(&("a".into(), "online".into(), "degraded".into()))
    })
    .await;
    assert_eq!(old.requests().len(), 2, "nothing more to the old URL");
    for r in new.requests() {
        assert_eq!((r.path.as_str(), r.header("authorization")), ("/v2", Some("Bearer second")));
    }
    // Counts carry on under the same name.
    eventually(PATIENCE, "the counts go on", async || {
        counts(&server, "ops")[0] == 2 + new.requests().len() as u64
    })
    .await;
    server.shutdown().await;
}

/// A TLS acceptor serving `cert` and `key` (PEM files).
fn acceptor(cert: &Path, key: &Path) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_webhooks_deliver_only_to_a_trusted_certificate() {
    // Down from the start: checking -> degraded is the first change.
    let a = HttpBackend::start("127.0.0.11").await;
    let profile = profile(&[&a]);
    a.stop().await;
    // Trusted: the system roots are the test authority's (SSL_CERT_FILE, for the child).
    let pki = common::TestPki::new();
    let tls = || Some(acceptor(&pki.server_cert, &pki.server_key));
    let trusted = Receiver::start_tls("127.0.0.1", &[], Answer::Status(200), tls()).await;
    // The same certificate, reached by a name it does not have.
    let other_name = Receiver::start_tls("127.0.0.12", &[], Answer::Status(200), tls()).await;
    let dir = tempfile::tempdir().unwrap();
    let notify = format!(
        "notify:\n  webhooks:\n    - name: trusted\n      url: https://localhost:{}/hook\n    \
         - name: wrong\n      url: https://127.0.0.12:{}/hook\n      retries: 0\n",
        trusted.addr.port(),
        other_name.addr.port()
    );
    let path = write_config(dir.path(), &notify, &profile);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["serve", "-c"])
        .arg(&path)
        .env("SSL_CERT_FILE", &pki.ca)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually(PATIENCE, "the trusted receiver gets the first change", async || {
        !trusted.requests().is_empty()
    })
    .await;
    let r = &trusted.requests()[0];
    let host = format!("localhost:{}", trusted.addr.port());
    assert_eq!((r.path.as_str(), r.header("host")), ("/hook", Some(host.as_str())));
    assert_eq!(r.body["to"], "degraded");
    let log = Arc::new(Mutex::new(String::new()));
    let (lines, stderr) = (log.clone(), child.stderr.take().unwrap());
    tokio::spawn(async move {
        use tokio::io::AsyncBufReadExt;
        let mut reader = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(l)) = reader.next_line().await {
            lines.lock().unwrap().push_str(&l);
        }
    });
    eventually(PATIENCE, "the wrong name is given up", async || {
        let log = log.lock().unwrap();
        log.contains("giving up") && log.contains("webhook=wrong")
    })
    .await;
    assert!(log.lock().unwrap().contains("TLS"), "{}", log.lock().unwrap());
    assert!(other_name.requests().is_empty(), "no request over a connection to the wrong name");
    child.start_kill().unwrap();
    let _ = child.wait().await;
}
