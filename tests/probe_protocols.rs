//! The dns, udp, icmp, grpc, json and prometheus probes end to end: a real `Server`
//! probing real servers on loopback. The dns probes ask a second steerdns server for names
//! of its zone; the udp probes talk to a responder written here; the icmp probes ping
//! 127.0.0.1 through the kernel's unprivileged ICMP sockets; the grpc probes call
//! tonic-health's server; the feeds are read from an HTTP server written here.
//!
//! Monitors use a 1s interval and a 300ms timeout; waits poll with generous deadlines
//! instead of asserting timings.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{PATIENCE, Running, ZONE_ONLY_SERVER};
use steerdns::model::health::Status;
use steerdns::server::load::LoadEntry;
use tokio::net::UdpSocket;
use tokio::time::{Instant, sleep};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthReporter;

const FAST: &str = "monitor: { interval: 1s, timeout: 300ms, tolerated_failures: 0 }";

/// A multivalue profile `www` with one endpoint per (name, target, monitor override).
fn profile(endpoints: &[(&str, &str, String)]) -> String {
    let list: String = endpoints
        .iter()
        .map(|(name, target, m)| {
            format!("  - {{ name: {name}, target: {target}, monitor: {{ {m} }} }}\n")
        })
        .collect();
    format!("name: www\nrouting: multivalue\nmax_return: 10\n{FAST}\nendpoints:\n{list}")
}

/// Each (endpoint, expected status, expected reason) after the probes have run.
async fn expect_all(s: &Running, cases: &[(&str, Status, Option<&str>)]) {
    for (name, status, reason) in cases {
        let st = s.wait_status("www", name, *status).await;
        let last = st.last_probe.expect("probed");
        assert_eq!(last.reason.as_deref(), *reason, "{name}");
        if let Some(reason) = reason {
            assert_eq!(st.last_change.unwrap().reason, *reason, "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_probes_judge_the_rcode_and_the_answer() {
    // The server asked: serves the test zone, probes nothing.
    let asked = Running::start("name: other\nrouting: priority\nendpoints: []\n").await;
    let port = asked.dns().port();
    let dns = |extra: &str| format!("protocol: dns, port: {port}, {extra}");
    let s = Running::start(&profile(&[
        ("noerror", "127.0.0.1", dns("query_name: ns1.tm.example.test.")),
        ("address", "127.0.0.1", dns("query_name: NS1.tm.example.test., answer_contains: 127.0.0.1")),
        ("other-address", "127.0.0.1", dns("query_name: ns1.tm.example.test., answer_contains: 192.0.2.9")),
        ("txt", "127.0.0.1", dns("query_name: svc.tm.example.test., query_type: TXT, answer_contains: state=ready")),
        ("soa", "127.0.0.1", dns("query_name: tm.example.test., query_type: soa, answer_contains: hostmaster.example.test.")),
        ("nxdomain", "127.0.0.1", dns("query_name: nope.tm.example.test.")),
        ("nxdomain-expected", "127.0.0.1", dns("query_name: nope.tm.example.test., expected_rcode: NXDOMAIN")),
        ("nxdomain-number", "127.0.0.1", dns("query_name: nope.tm.example.test., expected_rcode: 3")),
    ]))
    .await;
    expect_all(
        &s,
        &[
            ("noerror", Status::Online, None),
            ("address", Status::Online, None),
            ("other-address", Status::Degraded, Some("answer does not contain \"192.0.2.9\"")),
            ("txt", Status::Online, None),
            ("soa", Status::Online, None),
            ("nxdomain", Status::Degraded, Some("RCODE NXDOMAIN, expected NOERROR")),
            ("nxdomain-expected", Status::Online, None),
            ("nxdomain-number", Status::Online, None),
        ],
    )
    .await;
    let kinds = s.state("www", "nxdomain").results;
    assert!(kinds.iter().any(|(k, n)| *k == "rcode" && *n > 0), "{kinds:?}");
    s.stop().await;
    asked.stop().await;
}

/// A UDP responder: answers `PONG ` and the datagram, or stays silent while `silent`.
async fn udp_responder(ip: &str) -> (SocketAddr, Arc<Mutex<bool>>) {
    let socket = UdpSocket::bind((ip, 0)).await.unwrap();
    let addr = socket.local_addr().unwrap();
    let silent = Arc::new(Mutex::new(false));
    let quiet = silent.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
            if *quiet.lock().unwrap() {
                continue;
            }
            let mut reply = b"PONG ".to_vec();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    (addr, silent)
}

/// `expect` is a pattern over the reply's bytes: one matching, and ones that do not, with
/// the pattern and an excerpt of the reply in the reason (cut at 64 bytes, escaped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_probes_need_a_matching_reply() {
    let (echo, _) = udp_responder("127.0.0.6").await;
    let (quiet, silent) = udp_responder("127.0.0.6").await;
    *silent.lock().unwrap() = true;
    // A port nobody listens on: the kernel answers with port unreachable.
    let closed = std::net::UdpSocket::bind("127.0.0.7:0").unwrap().local_addr().unwrap();
    let udp = |port: u16, extra: &str| format!("protocol: udp, port: {port}, {extra}");
    let long = "x".repeat(100);
    let s = Running::start(&profile(&[
        ("match", "127.0.0.6", udp(echo.port(), "send: 'PING\\x00x', expect: 'PONG PING\\x00'")),
        ("pattern", "127.0.0.6", udp(echo.port(), "send: 'PING 42', expect: '^PONG PING \\d+$'")),
        ("any-reply", "127.0.0.6", udp(echo.port(), "send: hello")),
        ("mismatch", "127.0.0.6", udp(echo.port(), "send: PING, expect: READY")),
        ("anchored", "127.0.0.6", udp(echo.port(), "send: PING, expect: '^PING'")),
        ("long", "127.0.0.6", udp(echo.port(), &format!("send: '\\xff{long}', expect: 'z$'"))),
        ("silent", "127.0.0.6", udp(quiet.port(), "send: PING")),
        ("closed", "127.0.0.7", udp(closed.port(), "send: PING")),
    ]))
    .await;
    let long_reason = format!(
        "reply does not match \"z$\": got \"PONG \\xff{}\" (first 64 of 106 bytes)",
        "x".repeat(58)
    );
    expect_all(
        &s,
        &[
            ("match", Status::Online, None),
            ("pattern", Status::Online, None),
            ("any-reply", Status::Online, None),
            (
                "mismatch",
                Status::Degraded,
                Some("reply does not match \"READY\": got \"PONG PING\""),
            ),
            (
                "anchored",
                Status::Degraded,
                Some("reply does not match \"^PING\": got \"PONG PING\""),
            ),
            ("long", Status::Degraded, Some(long_reason.as_str())),
            ("silent", Status::Degraded, Some("no reply within 270ms")),
            ("closed", Status::Degraded, Some("connection refused")),
        ],
    )
    .await;
    assert_eq!(s.state("www", "long").last_probe.unwrap().kind, "reply");
    // The silent responder speaks again: one success brings the endpoint back.
    *silent.lock().unwrap() = false;
    s.wait_status("www", "silent", Status::Online).await;
    s.stop().await;
}

const PING_GROUP_RANGE: &str = "/proc/sys/net/ipv4/ping_group_range";

/// Sets the groups allowed unprivileged ICMP sockets; false where this process may not.
fn set_ping_groups(range: &str) -> bool {
    std::fs::write(PING_GROUP_RANGE, range).is_ok()
}

/// Puts the range back as it was when the test ends, failed or not.
struct Restore(String);

impl Drop for Restore {
    fn drop(&mut self) {
        set_ping_groups(self.0.trim());
    }
}

/// The icmp probe, with the kernel first forbidding and then allowing ICMP sockets. The
/// test changes net.ipv4.ping_group_range itself (as root, as in CI) and restores it; it
/// skips, or fails under STEERDNS_REQUIRE_TOOLS=1, where it cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn icmp_probes_ping_and_say_when_the_kernel_forbids_it() {
    let Ok(before) = std::fs::read_to_string(PING_GROUP_RANGE) else {
        assert!(!common::tools_required(), "no {PING_GROUP_RANGE}");
        eprintln!("skipping: no {PING_GROUP_RANGE}");
        return;
    };
    if !set_ping_groups("1 0") {
        assert!(!common::tools_required(), "cannot write {PING_GROUP_RANGE}: run as root");
        eprintln!("skipping: cannot write {PING_GROUP_RANGE} (needs root)");
        return;
    }
    let _restore = Restore(before);
    let forbidden =
        Running::start(&profile(&[("ping", "127.0.0.1", "protocol: icmp".into())])).await;
    let st = forbidden.wait_status("www", "ping", Status::Degraded).await;
    assert_eq!(
        st.last_probe.unwrap().reason.as_deref(),
        Some(
            "the kernel forbids unprivileged ICMP sockets for this group: set net.ipv4.ping_group_range"
        )
    );
    forbidden.stop().await;

    assert!(set_ping_groups("0 2147483647"));
    let s = Running::start(&profile(&[
        ("ping", "127.0.0.1", "protocol: icmp".into()),
        ("ping-v6", "::1", "protocol: icmp, count: 2, max_loss: 0".into()),
        ("slow", "127.0.0.1", "protocol: icmp, max_rtt: 1ns".into()),
    ]))
    .await;
    let ping = s.wait_status("www", "ping", Status::Online).await;
    let slow = s.wait_status("www", "slow", Status::Degraded).await;
    let v6 = s.wait_status("www", "ping-v6", Status::Online).await;
    assert_eq!(ping.last_probe.unwrap().kind, "ok");
    assert_eq!(v6.last_probe.unwrap().kind, "ok");
    let reason = slow.last_probe.unwrap().reason.unwrap();
    assert!(
        reason.starts_with("round trip ") && reason.ends_with(", above max_rtt 1ns"),
        "{reason}"
    );
    s.stop().await;
}

/// The peer address of each connection a test server accepted, in order.
type Peers = Arc<Mutex<Vec<IpAddr>>>;

/// An HTTP server answering every GET with 200 and the current `body`.
async fn feed_server(ip: &str) -> (SocketAddr, Arc<Mutex<String>>, Peers) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = Arc::new(Mutex::new(String::new()));
    let current = body.clone();
    let peers = Peers::default();
    let seen = peers.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, peer)) = listener.accept().await {
            seen.lock().unwrap().push(peer.ip());
            let current = current.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                if common::read_request_head(&mut conn).await.is_none() {
                    return;
                }
                let body = current.lock().unwrap().clone();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (addr, body, peers)
}

fn set(body: &Arc<Mutex<String>>, text: &str) {
    *body.lock().unwrap() = text.to_string();
}

/// json and prometheus feeds whose values change: crossing the threshold flips the status,
/// and a value gone missing counts as each `missing` policy says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feeds_flip_on_their_threshold_and_follow_the_missing_policy() {
    let (json_addr, json, _) = feed_server("127.0.0.8").await;
    let (prom_addr, prom, _) = feed_server("127.0.0.8").await;
    set(&json, r#"{"status": "up", "load": 0.5}"#);
    set(&prom, "# TYPE up gauge\nup{job=\"eu\"} 1\nup{job=\"us\"} 0\n");
    let j = |extra: &str| format!("protocol: json, url: 'http://{json_addr}/health', {extra}");
    let p = |extra: &str| {
        format!(
            "protocol: prometheus, url: 'http://{prom_addr}/metrics', metric: 'up{{job=\"eu\"}}', healthy_when: '>= 1', {extra}"
        )
    };
    let s = Running::start(&profile(&[
        ("status", "192.0.2.1", j("pointer: /status")),
        ("load", "192.0.2.1", j("pointer: /load, healthy_when: '< 0.8'")),
        ("prom-last", "192.0.2.1", p("missing: last_known")),
        ("prom-healthy", "192.0.2.1", p("missing: healthy")),
        ("prom-unhealthy", "192.0.2.1", p("missing: unhealthy")),
    ]))
    .await;
    let all = ["status", "load", "prom-last", "prom-healthy", "prom-unhealthy"];
    for name in all {
        s.wait_status("www", name, Status::Online).await;
    }

    // Thresholds crossed: each degrades with the value it read.
    set(&json, r#"{"status": "down", "load": 0.93}"#);
    set(&prom, "up{job=\"eu\"} 0\n");
    expect_all(
        &s,
        &[
            ("status", Status::Degraded, Some("status \"down\" at JSON pointer \"/status\"")),
            ("load", Status::Degraded, Some("value 0.93, healthy when < 0.8")),
            ("prom-last", Status::Degraded, Some("value 0, healthy when >= 1")),
        ],
    )
    .await;
    // And back.
    set(&json, r#"{"status": "OK", "load": 0.1}"#);
    set(&prom, "up{job=\"eu\"} 1\n");
    for name in all {
        s.wait_status("www", name, Status::Online).await;
    }

    // The sample disappears: healthy stays online, unhealthy degrades, last_known keeps
    // its status while showing why it had nothing to judge.
    set(&prom, "up{job=\"us\"} 1\n");
    let gone = Some("no data: no sample matches up{job=\"eu\"}");
    expect_all(&s, &[("prom-unhealthy", Status::Degraded, gone)]).await;
    let deadline = Instant::now() + PATIENCE;
    for name in ["prom-last", "prom-healthy"] {
        loop {
            let st = s.state("www", name);
            if st.last_probe.as_ref().and_then(|l| l.reason.as_deref()) == gone {
                assert_eq!(st.status, Status::Online, "{name}");
                break;
            }
            assert!(Instant::now() < deadline, "{name}: {st:#?}");
            sleep(Duration::from_millis(50)).await;
        }
    }
    let kinds = s.state("www", "prom-last").results;
    assert!(kinds.iter().any(|(k, n)| *k == "nodata" && *n > 0), "{kinds:?}");
    // last_known after a failure: degraded stays degraded while the data is missing.
    set(&prom, "up{job=\"eu\"} 0\n");
    s.wait_status("www", "prom-last", Status::Degraded).await;
    set(&prom, "");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let st = s.state("www", "prom-last");
        if st.last_probe.as_ref().map(|l| l.kind) == Some("nodata") {
            assert_eq!(st.status, Status::Degraded);
            break;
        }
        assert!(Instant::now() < deadline, "{st:#?}");
        sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}

/// A gRPC health server (tonic-health's own) on `ip`, behind TLS with a self-signed
/// certificate for `ip` when `tls`; the reporter switches the statuses it answers, which
/// start as SERVING for the server as a whole.
async fn health_server(ip: &str, tls: bool) -> (SocketAddr, HealthReporter, Peers) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reporter = HealthReporter::new();
    let service = tonic_health::server::HealthService::from_health_reporter(reporter.clone());
    reporter.set_service_status("", ServingStatus::Serving).await;
    let peers = Peers::default();
    let seen = peers.clone();
    let incoming = TcpListenerStream::new(listener).map(move |conn| {
        if let Some(peer) = conn.as_ref().ok().and_then(|c| c.peer_addr().ok()) {
            seen.lock().unwrap().push(peer.ip());
        }
        conn
    });
    let mut server = tonic::transport::Server::builder();
    if tls {
        let pair = rcgen::generate_simple_self_signed(vec![ip.to_string()]).unwrap();
        let identity = Identity::from_pem(pair.cert.pem(), pair.signing_key.serialize_pem());
        server = server.tls_config(ServerTlsConfig::new().identity(identity)).unwrap();
    }
    tokio::spawn(server.add_service(HealthServer::new(service)).serve_with_incoming(incoming));
    (addr, reporter, peers)
}

/// The health service `shop` turns NOT_SERVING: `endpoint`, which asks about it, degrades
/// with the status named; and back to SERVING: it comes back online.
async fn not_serving_and_back(s: &Running, reporter: &HealthReporter, endpoint: &str) {
    reporter.set_service_status("shop", ServingStatus::NotServing).await;
    expect_all(s, &[(endpoint, Status::Degraded, Some("gRPC health: status NOT_SERVING"))]).await;
    reporter.set_service_status("shop", ServingStatus::Serving).await;
    s.wait_status("www", endpoint, Status::Online).await;
}

/// A health server switched between SERVING and NOT_SERVING; a service it does not know
/// fails as the RPC error it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_probes_follow_the_health_service() {
    let (addr, reporter, _) = health_server("127.0.0.9", false).await;
    reporter.set_service_status("shop", ServingStatus::Serving).await;
    let g = |extra: &str| format!("protocol: grpc, port: {}, {extra}", addr.port());
    let s = Running::start(&profile(&[
        ("server", "127.0.0.9", g("tolerated_failures: 0")),
        ("shop", "127.0.0.9", g("service: shop")),
        ("unknown", "127.0.0.9", g("service: nothing")),
    ]))
    .await;
    s.wait_status("www", "server", Status::Online).await;
    s.wait_status("www", "shop", Status::Online).await;
    let unknown = s.wait_status("www", "unknown", Status::Degraded).await;
    let reason = unknown.last_probe.unwrap().reason.unwrap();
    assert!(reason.starts_with("gRPC health: RPC failed: NotFound"), "{reason}");

    not_serving_and_back(&s, &reporter, "shop").await;
    s.stop().await;
}

/// The same health service behind TLS with a self-signed certificate: `tls: true` calls it
/// (online while SERVING), `tls_verify: true` refuses the certificate, and a plaintext call
/// fails against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_probes_call_over_tls() {
    let (addr, reporter, _) = health_server("127.0.0.9", true).await;
    reporter.set_service_status("shop", ServingStatus::Serving).await;
    let g = |extra: &str| format!("protocol: grpc, port: {}, service: shop, {extra}", addr.port());
    let s = Running::start(&profile(&[
        ("lenient", "127.0.0.9", g("tls: true, tls_verify: false")),
        ("verifying", "127.0.0.9", g("tls: true, tls_verify: true")),
        ("plaintext", "127.0.0.9", g("tolerated_failures: 0")),
    ]))
    .await;
    s.wait_status("www", "lenient", Status::Online).await;
    let verifying = s.wait_status("www", "verifying", Status::Degraded).await;
    let reason = verifying.last_probe.unwrap().reason.unwrap();
    assert!(reason.starts_with("TLS: invalid peer certificate"), "{reason}");
    let plaintext = s.wait_status("www", "plaintext", Status::Degraded).await;
    let reason = plaintext.last_probe.unwrap().reason.unwrap();
    assert!(reason.starts_with("gRPC health: RPC failed"), "{reason}");

    not_serving_and_back(&s, &reporter, "lenient").await;
    s.stop().await;
}

/// `probe.source_address` binds grpc calls (plaintext and TLS) and health feed reads as it
/// binds every other probe: servers on 127.0.0.1 see every connection come from the
/// configured 127.0.0.7, and an address this host lacks fails each probe saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_feed_probes_connect_from_the_source_address() {
    let (grpc, _plain, grpc_peers) = health_server("127.0.0.1", false).await;
    let (grpcs, _tls, grpcs_peers) = health_server("127.0.0.1", true).await;
    let (json, json_body, json_peers) = feed_server("127.0.0.1").await;
    let (prom, prom_body, prom_peers) = feed_server("127.0.0.1").await;
    set(&json_body, r#"{"status": "up"}"#);
    set(&prom_body, "up 1\n");
    let profiles = profile(&[
        ("grpc", "127.0.0.1", format!("protocol: grpc, port: {}", grpc.port())),
        ("grpc-tls", "127.0.0.1", format!("protocol: grpc, port: {}, tls: true", grpcs.port())),
        ("json", "192.0.2.1", format!("protocol: json, url: 'http://{json}/', pointer: /status")),
        (
            "prometheus",
            "192.0.2.1",
            format!(
                "protocol: prometheus, url: 'http://{prom}/', metric: up, healthy_when: '>= 1'"
            ),
        ),
    ]);
    let with_source = |ip: &str| format!("{ZONE_ONLY_SERVER}probe:\n  source_address: {ip}\n");

    let s = Running::start_with(&with_source("127.0.0.7"), &profiles).await;
    for name in ["grpc", "grpc-tls", "json", "prometheus"] {
        s.wait_status("www", name, Status::Online).await;
    }
    s.stop().await;
    let source: IpAddr = "127.0.0.7".parse().unwrap();
    let all = [
        ("grpc", grpc_peers),
        ("grpc-tls", grpcs_peers),
        ("json", json_peers),
        ("prometheus", prom_peers),
    ];
    for (name, peers) in all {
        let peers = peers.lock().unwrap().clone();
        assert!(!peers.is_empty() && peers.iter().all(|p| *p == source), "{name}: {peers:?}");
    }

    let s = Running::start_with(&with_source("192.0.2.77"), &profiles).await;
    for name in ["grpc", "grpc-tls", "json", "prometheus"] {
        let last = s.wait_status("www", name, Status::Degraded).await.last_probe.unwrap();
        let reason = last.reason.unwrap();
        assert_eq!(last.kind, "setup", "{name}: {reason}");
        assert!(reason.starts_with("cannot use source address 192.0.2.77: "), "{name}: {reason}");
    }
    s.stop().await;
}

/// The entries of endpoints `v4` and `v6` of `www` in the first load step where `done`
/// holds of them.
async fn wait_load(s: &Running, done: impl Fn(&LoadEntry, &LoadEntry) -> bool) -> [LoadEntry; 2] {
    let deadline = Instant::now() + PATIENCE;
    let www = common::fq("www");
    loop {
        let map = s.server.control().load.current();
        if let (Some(v4), Some(v6)) = (map.get(&www, "v4"), map.get(&www, "v6"))
            && done(v4, v6)
        {
            return [v4.clone(), v6.clone()];
        }
        assert!(Instant::now() < deadline, "no such load step: {map:#?}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// Pulled load feeds connect from `probe.source_address` as health feeds do, each from the
/// address of its own family: a feed on 127.0.0.1 sees every read come from the configured
/// 127.0.0.7, while a feed on [::1] fails every read for the IPv6 source this host lacks
/// (neither happens where the system chooses). An IPv4 source this host lacks fails the
/// IPv4 feed the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_feeds_connect_from_the_source_address() {
    let (v4, v4_body, v4_peers) = feed_server("127.0.0.1").await;
    let (v6, v6_body, v6_peers) = feed_server("::1").await;
    set(&v4_body, "42");
    set(&v6_body, "42");
    let loaded = |name: &str, target: &str, feed: SocketAddr| {
        format!(
            "  - {{ name: {name}, target: {target}, always_serve: true, \
             load: {{ capacity: 100, url: 'http://{feed}/load' }} }}\n"
        )
    };
    let profiles = format!(
        "name: www\nrouting: weighted\nendpoints:\n{}{}",
        loaded("v4", "192.0.2.1", v4),
        loaded("v6", "192.0.2.2", v6)
    );
    let with_source = |ips: &str| {
        format!(
            "{ZONE_ONLY_SERVER}probe:\n  source_address: {ips}\n\
             load:\n  interval: 200ms\n  timeout: 150ms\n"
        )
    };

    let s = Running::start_with(&with_source(r#"[127.0.0.7, "2001:db8::77"]"#), &profiles).await;
    let [read, failed] = wait_load(&s, |a, b| a.read_at_ms.is_some() && b.error.is_some()).await;
    let counts = s.server.control().load.error_counts();
    s.stop().await;
    assert_eq!((read.state.load, read.error.as_deref()), (Some(42.0), None), "{read:#?}");
    let error = failed.error.as_deref().unwrap_or_default();
    assert!(error.starts_with("cannot use source address 2001:db8::77: "), "{failed:#?}");
    assert!(counts.iter().any(|((_, e, reason), n)| e == "v6" && *reason == "source" && *n > 0));
    let source: IpAddr = "127.0.0.7".parse().unwrap();
    let peers = v4_peers.lock().unwrap().clone();
    assert!(!peers.is_empty() && peers.iter().all(|p| *p == source), "v4: {peers:?}");
    assert!(v6_peers.lock().unwrap().is_empty(), "the v6 feed was read from another source");

    let s = Running::start_with(&with_source("192.0.2.77"), &profiles).await;
    let [failed, _] = wait_load(&s, |a, _| a.error.is_some()).await;
    s.stop().await;
    let error = failed.error.as_deref().unwrap_or_default();
    assert!(error.starts_with("cannot use source address 192.0.2.77: "), "{failed:#?}");
}
