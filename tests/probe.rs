//! The health prober end to end: a real `Server` probing real HTTP, HTTPS and TCP
//! listeners on loopback (several 127.0.0.x addresses), answered over UDP.
//!
//! Backends are tiny hand-written HTTP/1.1 responders whose status and body flip at run
//! time. Monitors use a 1s interval and a 300ms timeout so the suite stays fast; waits poll
//! with generous deadlines instead of asserting timings.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{NOERROR, PATIENCE, Running, ZONE_ONLY_SERVER};
use steerdns::model::health::Status;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::{Instant, sleep};

// ---------------------------------------------------------------------------------------
// Backends
// ---------------------------------------------------------------------------------------

/// An HTTP backend whose answer can be changed while it runs.
#[derive(Clone)]
struct Backend {
    addr: SocketAddr,
    status: Arc<AtomicU16>,
    body: Arc<Mutex<String>>,
    hits: Arc<AtomicUsize>,
    /// The Host header of the latest request.
    host: Arc<Mutex<String>>,
}

impl Backend {
    fn new(addr: SocketAddr) -> Backend {
        Backend {
            addr,
            status: Arc::new(AtomicU16::new(200)),
            body: Arc::new(Mutex::new("all OK".into())),
            hits: Arc::new(AtomicUsize::new(0)),
            host: Arc::new(Mutex::new(String::new())),
        }
    }

    async fn http(ip: &str) -> Backend {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let b = Backend::new(listener.local_addr().unwrap());
        let me = b.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move { me.answer(conn).await });
            }
        });
        b
    }

    /// An HTTPS backend with the given certificate, answering like `http`.
    async fn https(ip: &str, tls: Arc<rustls::ServerConfig>) -> Backend {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let b = Backend::new(listener.local_addr().unwrap());
        let (me, acceptor) = (b.clone(), tokio_rustls::TlsAcceptor::from(tls));
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (me, acceptor) = (me.clone(), acceptor.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(conn).await {
                        me.answer(tls).await;
                    }
                });
            }
        });
        b
    }

    fn set(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    async fn answer<S: AsyncRead + AsyncWrite + Unpin>(&self, mut conn: S) {
        let Some(head) = common::read_request_head(&mut conn).await else { return };
        self.hits.fetch_add(1, Ordering::SeqCst);
        let text = String::from_utf8_lossy(&head).to_string();
        if let Some(h) =
            text.lines().find_map(|l| l.strip_prefix("host: ").or(l.strip_prefix("Host: ")))
        {
            *self.host.lock().unwrap() = h.trim().to_string();
        }
        let body = self.body.lock().unwrap().clone();
        let reply = format!(
            "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status.load(Ordering::SeqCst),
            body.len()
        );
        let _ = conn.write_all(reply.as_bytes()).await;
        let _ = conn.shutdown().await;
    }
}

/// A listener that accepts connections and never says anything.
async fn silent_backend(ip: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    addr
}

/// An address nobody listens on.
fn closed_port(ip: &str) -> SocketAddr {
    std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
}

fn tls_config(not_after_year: Option<i32>) -> Arc<rustls::ServerConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    if let Some(year) = not_after_year {
        params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
    }
    let cert = params.self_signed(&key).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    Arc::new(config)
}

// ---------------------------------------------------------------------------------------
// Monitors
// ---------------------------------------------------------------------------------------

/// A monitor override for `addr`'s port (and anything else in `extra`).
fn mon(addr: SocketAddr, extra: &str) -> String {
    format!("monitor: {{ port: {}{extra} }}", addr.port())
}

const FAST: &str = "monitor: { interval: 1s, timeout: 300ms, tolerated_failures: 1 }";

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_on_503_and_recovers_after_one_success() {
    let a = Backend::http("127.0.0.2").await;
    let b = Backend::http("127.0.0.3").await;
    let s = Running::start(&format!(
        "name: www\nrouting: priority\n{FAST}\nendpoints:\n\
         \x20 - {{ name: a, target: 127.0.0.2, {} }}\n\
         \x20 - {{ name: b, target: 127.0.0.3, {} }}\n",
        mon(a.addr, ""),
        mon(b.addr, "")
    ))
    .await;
    s.wait_status("www", "a", Status::Online).await;
    s.wait_answer("www", &["127.0.0.2"]).await;

    // tolerated_failures 1: degraded after the second 503, i.e. within two intervals.
    a.set(503);
    s.wait_answer("www", &["127.0.0.3"]).await;
    let st = s.state("www", "a");
    assert_eq!(st.status, Status::Degraded);
    assert_eq!(st.last_probe.unwrap().reason.as_deref(), Some("HTTP 503, expected 200-299"));
    let change = st.last_change.unwrap();
    assert_eq!((change.from, change.to), (Status::Online, Status::Degraded));
    assert_eq!(change.reason, "HTTP 503, expected 200-299");

    a.set(200);
    s.wait_answer("www", &["127.0.0.2"]).await;
    let st = s.state("www", "a");
    assert_eq!(st.status, Status::Online);
    assert_eq!(st.last_change.unwrap().reason, "probe succeeded");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_degrades_with_its_reason() {
    let ok = Backend::http("127.0.0.4").await;
    let body = Backend::http("127.0.0.4").await;
    *body.body.lock().unwrap() = "fine".into();
    let silent = silent_backend("127.0.0.4").await;
    let closed = closed_port("127.0.0.5");
    // (endpoint, target, monitor override, expected status, expected last reason)
    let cases: Vec<(&str, &str, String, Status, Option<&str>)> = vec![
        ("ok", "127.0.0.4", mon(ok.addr, ""), Status::Online, None),
        ("body-ok", "127.0.0.4", mon(ok.addr, ", body_contains: OK"), Status::Online, None),
        (
            "status",
            "127.0.0.4",
            mon(ok.addr, ", expected_status: [\"204\", \"300-399\"]"),
            Status::Degraded,
            Some("HTTP 200, expected 204, 300-399"),
        ),
        (
            "body",
            "127.0.0.4",
            mon(body.addr, ", body_contains: OK"),
            Status::Degraded,
            Some("body does not contain \"OK\""),
        ),
        ("refused", "127.0.0.5", mon(closed, ""), Status::Degraded, Some("connection refused")),
        ("timeout", "127.0.0.4", mon(silent, ""), Status::Degraded, Some("timeout after 300ms")),
        ("tcp-ok", "127.0.0.4", mon(silent, ", protocol: tcp"), Status::Online, None),
        (
            "tcp-refused",
            "127.0.0.5",
            mon(closed, ", protocol: tcp"),
            Status::Degraded,
            Some("connection refused"),
        ),
    ];
    let endpoints: String = cases
        .iter()
        .map(|(name, target, m, _, _)| format!("  - {{ name: {name}, target: {target}, {m} }}\n"))
        .collect();
    let s = Running::start(&format!(
        "name: www\nrouting: multivalue\nmax_return: 10\nmonitor: {{ interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\nendpoints:\n{endpoints}"
    ))
    .await;
    for (name, _, _, status, reason) in &cases {
        let st = s.wait_status("www", name, *status).await;
        let last = st.last_probe.expect("probed");
        assert_eq!(last.reason.as_deref(), *reason, "{name}");
        assert!(st.probed);
        if let Some(reason) = reason {
            assert_eq!(st.last_change.unwrap().reason, *reason, "{name}");
        }
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_shared_by_two_profiles_runs_once_per_interval() {
    let shared = Backend::http("127.0.0.6").await;
    let ep = format!("  - {{ name: e, target: 127.0.0.6, {} }}\n", mon(shared.addr, ""));
    let s = Running::start(&format!(
        "name: www\nrouting: priority\n{FAST}\nendpoints:\n{ep}---\n\
         name: api\nrouting: weighted\n{FAST}\nendpoints:\n{ep}"
    ))
    .await;
    s.wait_status("www", "e", Status::Online).await;
    s.wait_status("api", "e", Status::Online).await;
    assert_eq!(s.server.prober().stats().probes, 1);
    let before = shared.hits.load(Ordering::SeqCst);
    sleep(Duration::from_millis(4500)).await;
    let hits = shared.hits.load(Ordering::SeqCst) - before;
    // One probe at 1s: 4 or 5 requests in 4.5s (one more or less if the machine is
    // loaded); two probes would make 8 or more.
    assert!((3..=6).contains(&hits), "{hits} requests in 4.5s");
    assert_eq!(s.state("www", "e").last_probe, s.state("api", "e").last_probe);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_serves_degraded_endpoints_and_fail_open_false_answers_nodata() {
    let (c1, c2) = (closed_port("127.0.0.7"), closed_port("127.0.0.8"));
    let eps = format!(
        "endpoints:\n  - {{ name: a, target: 127.0.0.7, {} }}\n  - {{ name: b, target: 127.0.0.8, {} }}\n",
        mon(c1, ""),
        mon(c2, "")
    );
    let s = Running::start(&format!(
        "name: open\nrouting: priority\n{FAST}\n{eps}---\nname: closed\nrouting: priority\nfail_open: false\n{FAST}\n{eps}"
    ))
    .await;
    for p in ["open", "closed"] {
        for e in ["a", "b"] {
            s.wait_status(p, e, Status::Degraded).await;
        }
    }
    // Everything degraded: the open profile answers as if all were online (priority 1).
    assert_eq!(s.query_a("open").await, (NOERROR, vec!["127.0.0.7".parse().unwrap()]));
    assert_eq!(s.query_a("closed").await, (NOERROR, vec![]));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_parent_moves_on_when_the_child_endpoints_go_down() {
    let c1 = Backend::http("127.0.0.9").await;
    let s = Running::start(&format!(
        "name: pool\nrouting: priority\n{FAST}\nendpoints:\n  - {{ name: c1, target: 127.0.0.9, {} }}\n---\n\
         name: www\nrouting: priority\nendpoints:\n\
         \x20 - {{ name: child, profile: pool }}\n\
         \x20 - {{ name: backup, target: 127.0.0.10, always_serve: true }}\n",
        mon(c1.addr, "")
    ))
    .await;
    s.wait_status("pool", "c1", Status::Online).await;
    s.wait_answer("www", &["127.0.0.9"]).await;
    c1.set(500);
    s.wait_answer("www", &["127.0.0.10"]).await;
    assert_eq!(s.state("pool", "c1").status, Status::Degraded);
    let backup = s.state("www", "backup");
    assert_eq!((backup.status, backup.probed), (Status::Unmonitored, false));
    c1.set(200);
    s.wait_answer("www", &["127.0.0.9"]).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_self_signed_certificate_passes_only_without_verification() {
    let good = Backend::https("127.0.0.11", tls_config(None)).await;
    let expired = Backend::https("127.0.0.11", tls_config(Some(2001))).await;
    let s = Running::start(&format!(
        "name: www\nrouting: priority\nmonitor: {{ protocol: https, interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\nendpoints:\n\
         \x20 - {{ name: lenient, target: 127.0.0.11, {} }}\n\
         \x20 - {{ name: strict, target: 127.0.0.11, {} }}\n\
         \x20 - {{ name: expired, target: 127.0.0.11, {} }}\n",
        mon(good.addr, ", tls_verify: false"),
        mon(good.addr, ", tls_verify: true"),
        mon(expired.addr, ", tls_verify: true"),
    ))
    .await;
    s.wait_status("www", "lenient", Status::Online).await;
    let strict = s.wait_status("www", "strict", Status::Degraded).await;
    let reason = strict.last_probe.unwrap().reason.unwrap();
    assert_eq!(reason, "TLS: invalid peer certificate: UnknownIssuer");
    let expired = s.wait_status("www", "expired", Status::Degraded).await;
    let reason = expired.last_probe.unwrap().reason.unwrap();
    assert!(reason.starts_with("TLS: invalid peer certificate: certificate expired"), "{reason}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_target_is_resolved_and_gets_its_host_header() {
    let b = Backend::http("127.0.0.1").await;
    let s = Running::start(&format!(
        "name: www\nrouting: priority\n{FAST}\nendpoints:\n  - {{ name: h, target: localhost., {} }}\n  - {{ name: custom, target: localhost., {} }}\n",
        mon(b.addr, ""),
        mon(b.addr, ", path: /other, headers: { Host: probe.example.test }"),
    ))
    .await;
    s.wait_status("www", "h", Status::Online).await;
    s.wait_status("www", "custom", Status::Online).await;
    // Both probes hit the backend; collect the Host headers over a few requests.
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + PATIENCE;
    while seen.len() < 2 && Instant::now() < deadline {
        seen.insert(b.host.lock().unwrap().clone());
        sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec!["localhost".to_string(), "probe.example.test".to_string()]
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_unchanged_probes_and_stops_unused_ones() {
    let a = Backend::http("127.0.0.12").await;
    let gone = Backend::http("127.0.0.13").await;
    let fresh = closed_port("127.0.0.14");
    let a_ep = format!("  - {{ name: a, target: 127.0.0.12, {} }}\n", mon(a.addr, ""));
    let s = Running::start(&format!(
        "name: www\nrouting: priority\n{FAST}\nendpoints:\n{a_ep}  - {{ name: gone, target: 127.0.0.13, {} }}\n",
        mon(gone.addr, "")
    ))
    .await;
    s.wait_status("www", "a", Status::Online).await;
    s.wait_status("www", "gone", Status::Online).await;
    let before = s.state("www", "a");

    // Same probe for a (now shared with a new profile), gone removed, fresh added; fresh
    // tolerates 3 failures so it is still checking right after the reload.
    s.rewrite(&format!(
        "name: www\nrouting: priority\n{FAST}\nendpoints:\n{a_ep}  - {{ name: fresh, target: 127.0.0.14, {} }}\n---\n\
         name: api\nrouting: priority\n{FAST}\nendpoints:\n{a_ep}",
        mon(fresh, ", tolerated_failures: 3")
    ));
    s.server.reload().unwrap();
    assert_eq!(s.served_status("www", "a"), Status::Online, "state kept, not checking");
    assert_eq!(s.served_status("api", "a"), Status::Online, "a new user of a kept probe");
    assert_eq!(s.served_status("www", "fresh"), Status::Checking);
    assert_eq!(s.state("www", "a").last_change, before.last_change, "same probe, same history");
    assert_eq!(s.server.prober().stats().probes, 2);

    sleep(Duration::from_millis(300)).await; // a probe in flight at the reload may land
    let hits = gone.hits.load(Ordering::SeqCst);
    sleep(Duration::from_millis(2500)).await;
    assert_eq!(gone.hits.load(Ordering::SeqCst), hits, "the removed probe stopped");
    // Results after the reload reach the served table.
    a.set(503);
    let deadline = Instant::now() + PATIENCE;
    while s.served_status("api", "a") != Status::Degraded {
        assert!(Instant::now() < deadline, "api/a never degraded in the served table");
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.served_status("www", "a"), Status::Degraded);
    s.stop().await;
}

/// A `MakeWriter` into a shared buffer, for capturing log lines.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buf {
    type Writer = Buf;
    fn make_writer(&'a self) -> Buf {
        self.clone()
    }
}

/// Installs a global subscriber writing DEBUG and up into a buffer. Global rather than
/// scoped: tracing caches whether a log site is enabled when it is first hit, on whichever
/// thread that is, so a thread-local subscriber can miss events while other tests run.
fn capture_logs() -> Buf {
    static BUF: std::sync::OnceLock<Buf> = std::sync::OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Buf::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(buf.clone())
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buf
    })
    .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_changes_are_logged_at_info_and_results_at_debug() {
    let buf = capture_logs();
    let closed = closed_port("127.0.0.15");
    let s = Running::start(&format!(
        "name: www\nrouting: priority\nmonitor: {{ interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\nendpoints:\n  - {{ name: a, target: 127.0.0.15, {} }}\n",
        mon(closed, "")
    ))
    .await;
    s.wait_status("www", "a", Status::Degraded).await;
    s.stop().await;
    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    // Other tests log into the same buffer; this one's backend is 127.0.0.15.
    let mine: Vec<&str> = logs.lines().filter(|l| l.contains("127.0.0.15")).collect();
    let change = mine
        .iter()
        .find(|l| l.contains("endpoint status changed"))
        .unwrap_or_else(|| panic!("no status change logged: {mine:#?}"));
    for part in [
        " INFO ",
        "profile=www.tm.example.test.",
        "endpoint=a",
        "target=127.0.0.15",
        "old=checking",
        "new=degraded",
        "reason=\"connection refused\"",
    ] {
        assert!(change.contains(part), "{part} missing in {change}");
    }
    let result = mine.iter().find(|l| l.contains("probe result")).expect("a probe result");
    assert!(result.contains("DEBUG") && result.contains("ok=false"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_details_and_metrics_show_probe_results() {
    let closed = closed_port("127.0.0.16");
    let s = Running::start(&format!(
        "name: www\nrouting: priority\nmonitor: {{ interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\nendpoints:\n\
         \x20 - {{ name: a, target: 127.0.0.16, {} }}\n\
         \x20 - {{ name: b, target: 127.0.0.17, always_serve: true }}\n",
        mon(closed, "")
    ))
    .await;
    s.wait_status("www", "a", Status::Degraded).await;
    let control = s.server.control();
    use steerdns::server::admin::probes::endpoint_details as details;
    let a = serde_json::Value::Object(
        details(&control.prober, "www.tm.example.test.").remove("a").unwrap(),
    );
    assert_eq!(a["probed"], true);
    assert_eq!(a["last_probe"]["ok"], false);
    assert_eq!(a["last_probe"]["result"], "refused");
    assert_eq!(a["last_probe"]["reason"], "connection refused");
    assert!(a["last_probe"]["at"].as_str().unwrap().ends_with('Z'), "{a}");
    assert_eq!(a["last_change"]["from"], "checking");
    assert_eq!(a["last_change"]["to"], "degraded");
    assert!(a["probe_results"]["refused"].as_u64().unwrap() >= 1, "{a}");
    let b = serde_json::Value::Object(
        details(&control.prober, "www.tm.example.test.").remove("b").unwrap(),
    );
    assert_eq!(
        (&b["probed"], &b["last_probe"]),
        (&serde_json::json!(false), &serde_json::Value::Null)
    );

    let text = steerdns::server::admin::metrics::render(control);
    for want in [
        "steerdns_probe_results_total{profile=\"www.tm.example.test.\",endpoint=\"a\",result=\"refused\"}",
        "steerdns_probes 1",
        "steerdns_probe_duration_seconds_bucket{protocol=\"http\",le=\"+Inf\"}",
        "steerdns_probe_last_duration_seconds{profile=\"www.tm.example.test.\",endpoint=\"a\"}",
    ] {
        assert!(text.contains(want), "{want} missing in:\n{text}");
    }
    s.stop().await;
}

/// A backend that answers every request 200 and records where each connection came
/// from: the peer addresses, in order.
async fn peer_recorder(ip: &str) -> (SocketAddr, Arc<Mutex<Vec<IpAddr>>>) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peers = Arc::new(Mutex::new(Vec::new()));
    let seen = peers.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, peer)) = listener.accept().await {
            seen.lock().unwrap().push(peer.ip());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                // A tcp probe sends nothing and closes; an http one sends its request.
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (addr, peers)
}

/// `probe.source_address`: http and tcp probes connect from it, and after a reload that
/// changes it, from the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_connect_from_the_source_address() {
    let (http_addr, http_peers) = peer_recorder("127.0.0.6").await;
    let (tcp_addr, tcp_peers) = peer_recorder("127.0.0.7").await;
    let profiles = format!(
        "name: www\nrouting: priority\n{FAST}\nendpoints:\n\
         \x20 - {{ name: web, target: 127.0.0.6, {} }}\n\
         \x20 - {{ name: port, target: 127.0.0.7, {} }}\n",
        mon(http_addr, ""),
        mon(tcp_addr, ", protocol: tcp")
    );
    let with_source = |ip: &str| format!("{ZONE_ONLY_SERVER}probe:\n  source_address: {ip}\n");
    let s = Running::start_with(&with_source("127.0.0.21"), &profiles).await;
    let last = |peers: &Arc<Mutex<Vec<IpAddr>>>| peers.lock().unwrap().last().copied();
    s.wait_status("www", "web", Status::Online).await;
    s.wait_status("www", "port", Status::Online).await;
    let first: IpAddr = "127.0.0.21".parse().unwrap();
    assert_eq!((last(&http_peers), last(&tcp_peers)), (Some(first), Some(first)));
    assert!(http_peers.lock().unwrap().iter().all(|p| *p == first));

    // A list with one address of each family; probes to IPv4 targets take the IPv4 one.
    s.rewrite_server(&with_source("[\"::1\", 127.0.0.22]"));
    s.server.reload().unwrap();
    let second: IpAddr = "127.0.0.22".parse().unwrap();
    let deadline = Instant::now() + PATIENCE;
    while (last(&http_peers), last(&tcp_peers)) != (Some(second), Some(second)) {
        assert!(Instant::now() < deadline, "probes still come from {:?}", last(&http_peers));
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.state("www", "web").status, Status::Online);
    s.stop().await;
}

/// A source address this host does not have fails the probes with a reason saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_address_the_host_lacks_fails_the_probe() {
    let (http_addr, _) = peer_recorder("127.0.0.6").await;
    let profiles = format!(
        "name: www\nrouting: priority\n{FAST}\nendpoints:\n\
         \x20 - {{ name: web, target: 127.0.0.6, {} }}\n",
        mon(http_addr, "")
    );
    let server = format!("{ZONE_ONLY_SERVER}probe:\n  source_address: 192.0.2.77\n");
    let s = Running::start_with(&server, &profiles).await;
    let st = s.wait_status("www", "web", Status::Degraded).await;
    let last = st.last_probe.unwrap();
    assert_eq!(last.kind, "setup");
    let reason = last.reason.unwrap();
    assert!(reason.starts_with("cannot use source address 192.0.2.77: "), "{reason}");
    s.stop().await;
}
