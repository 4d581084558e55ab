//! Real user measurements, end to end: the `rum:` block's located errors; the public
//! listener refusing bad reports of every kind without storing anything, limiting each
//! address, and believing `X-Forwarded-For` only from trusted proxies; stored reports
//! steering `routing: performance` answers over UDP and TCP; a flood of networks
//! staying within `max_networks` and the documented memory (a counting allocator watches
//! the pure aggregate); and a headless Chromium loading a page with a strict CSP that
//! embeds the beacon, which times two local servers (5 ms and 120 ms) and reports, until
//! the admin API's published table prefers the fast region — and DNS over UDP answers the
//! browser's network from that region, scope /24 — moves when the delays swap, and does
//! not move when the margin is larger than the difference.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use fantoccini::Client;
use serde_json::{Value, json};
use steerdns::geo::rum::aggregate::bytes_per_network;
use steerdns::geo::rum::{Aggregation, Aggregator, saved, shared};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, sleep};

// ---------------------------------------------------------------------------------------
// Heap bytes live on this thread, for the pure flood
// ---------------------------------------------------------------------------------------

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|l| l.set(l.get() + delta));
    if delta > 0 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live_bytes() -> isize {
    LIVE.with(Cell::get)
}

#[test]
fn a_flood_of_networks_stays_within_the_cap_and_the_memory_bound() {
    let cap = 50_000;
    let params = Aggregation { max_networks: cap, min_samples: 1, ..Aggregation::default() };
    let regions = 4;
    let before = live_bytes();
    let mut a = Aggregator::new(params, regions);
    let mut peak = 0;
    for i in 0..200_000u32 {
        // 200,000 distinct /24s, a report each.
        let addr = IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + (i << 8)));
        let ms = 5.0 + (i % 300) as f32;
        a.record(
            addr,
            &[(i as usize % regions, ms), ((i as usize + 1) % regions, ms * 2.0)],
            Duration::from_secs(u64::from(i / 1000)),
        );
        peak = peak.max(live_bytes() - before);
    }
    assert_eq!(a.len(), cap);
    assert_eq!(a.evictions(), 200_000 - cap as u64);
    // The last `cap` networks reported are the ones kept, oldest first.
    let first = a.by_recency().next().unwrap();
    assert_eq!(first, a.network_of(IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + (150_000u32 << 8)))));
    let bound = cap * bytes_per_network(regions);
    let held = (live_bytes() - before) as usize;
    assert!(held <= bound, "{held} bytes held for {cap} networks, bound {bound}");
    assert!(peak as usize <= bound, "peak {peak} bytes, bound {bound}");
    assert!(a.heap_bytes() <= bound, "{} by the aggregate's own count", a.heap_bytes());
    eprintln!(
        "{cap} networks × {regions} regions: {held} bytes held ({} per network), peak {peak}, \
         documented bound {} per network",
        held / cap,
        bytes_per_network(regions)
    );
    let columns = ["a", "b", "c", "d"].iter().enumerate().map(|(i, n)| (n.to_string(), i));
    let table = a.publish(Duration::from_secs(200), columns.collect(), None);
    assert!(table.len() >= cap, "every network has a sample: {}", table.len());
    // The published table: at most twice its rows' size (vectors grown by doubling).
    let row_bound = 2 * table.len() * steerdns::geo::rum::MeasuredLatency::bytes_per_row(regions);
    assert!(table.heap_bytes() <= row_bound, "table {} > {row_bound}", table.heap_bytes());
    eprintln!("published table: {} rows, {} bytes", table.len(), table.heap_bytes());
    // The query path's lookup allocates nothing.
    let allocs = ALLOCS.with(Cell::get);
    let mut found = 0;
    for i in 0..200_000u32 {
        let addr = IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + (i << 8)));
        found += usize::from(table.lookup(addr).is_some_and(|r| !r.aggregate));
    }
    assert_eq!(ALLOCS.with(Cell::get), allocs, "lookups allocated");
    assert_eq!(found, cap, "the networks kept, each in its own row");

    // What the state file and etcd take for them (docs/rum.md): each network here has one
    // sample in each of two regions.
    let names = ["a", "b", "c", "d"];
    let file = saved::encode(&a, &table, &names, Duration::from_secs(200), 0);
    let summaries = a.summaries(Duration::from_secs(200));
    let (node, shared_networks) = shared::encode_node(0, &names, &summaries);
    let (rows, published) = shared::encode_table(&table, 1);
    assert_eq!((shared_networks, published), (cap, table.len()));
    let total = |chunks: &[Vec<u8>]| chunks.iter().map(Vec::len).sum::<usize>();
    // Samples, then the table's preferences (a /24's 4 bytes or a /16's 3, and 1).
    assert!(file.len() <= 100 + cap * (4 + 4 + 2 * 8) + table.len() * 5, "{}", file.len());
    assert!(total(&node) <= node.len() * 100 + cap * (4 + 2 * 9 + 2), "{}", total(&node));
    assert!(total(&rows) <= rows.len() * 100 + table.len() * (5 + 8 * 4), "{}", total(&rows));
    eprintln!(
        "{cap} networks, 2 of 4 regions measured once: state file {} bytes ({} a network), \
         etcd figures {} bytes in {} keys ({} a network), table {} bytes in {} keys ({} a row)",
        file.len(),
        file.len() / cap,
        total(&node),
        node.len(),
        total(&node) / cap,
        total(&rows),
        rows.len(),
        total(&rows) / table.len()
    );
}

// ---------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------

/// A server with the location fixtures (whose latency table has eu-west and us-east), the
/// admin API, and `rum` (a `rum:` block) appended to `steerdns.yaml`.
async fn start(rum: &str) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    write_location_config(dir.path(), &location_profiles());
    let path = dir.path().join("steerdns.yaml");
    let yaml = with_admin(&std::fs::read_to_string(&path).unwrap(), None);
    std::fs::write(&path, format!("{yaml}{rum}")).unwrap();
    Harness::in_dir(dir).await
}

fn rum_block(eu_west: &str, us_east: &str, extra: &str) -> String {
    format!(
        "rum:\n  listen: [\"127.0.0.1:0\"]\n  targets:\n    \
         - {{ region: eu-west, url: \"{eu_west}\" }}\n    \
         - {{ region: us-east, url: \"{us_east}\" }}\n  \
         publish_interval: 100ms\n{extra}"
    )
}

fn rum_addr(h: &Harness) -> SocketAddr {
    h.server().rum_addrs()[0]
}

/// A POST from the source address `from` (a loopback address).
async fn post_from(from: Ipv4Addr, to: SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> Http {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::from((from, 0))).expect("bind a loopback source");
    let mut s = sock.connect(to).await.expect("connect to the RUM listener");
    let mut req = format!(
        "POST /rum/v1/report HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\
         Content-Type: text/plain;charset=UTF-8\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    // An oversized body may be refused before it is all sent.
    let _ = s.write_all(body).await;
    let mut raw = Vec::new();
    let _ =
        tokio::time::timeout(HTTP_WAIT, s.read_to_end(&mut raw)).await.expect("an answer in time");
    parse_http(&raw).unwrap_or_else(|e| panic!("bad answer ({e}): {raw:?}"))
}

async fn report(to: SocketAddr, body: &str) -> u16 {
    post_from(Ipv4Addr::LOCALHOST, to, &[], body.as_bytes()).await.status
}

/// `steerdns_rum_reports_total` by result, and `steerdns_rum_networks`.
async fn rum_metrics(admin: SocketAddr) -> (Vec<(String, u64)>, u64, u64) {
    let text = http_get(admin, "/metrics", None).await.text();
    let prom = Prom::parse(&text).unwrap_or_else(|e| panic!("bad exposition ({e}):\n{text}"));
    let mut reports: Vec<(String, u64)> = prom
        .select("steerdns_rum_reports_total", &[])
        .into_iter()
        .map(|s| (s.labels["result"].clone(), s.value as u64))
        .collect();
    reports.sort();
    let one = |name: &str| prom.select(name, &[]).first().map_or(u64::MAX, |s| s.value as u64);
    (reports, one("steerdns_rum_networks"), one("steerdns_rum_evictions_total"))
}

fn counts(reports: &[(String, u64)], result: &str) -> u64 {
    reports.iter().find(|(r, _)| r == result).map_or(0, |(_, n)| *n)
}

/// The admin API's view of `addr` once `done` holds for it (polled; the table is
/// published every 100 ms).
async fn measured_when(
    admin: SocketAddr,
    addr: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = http_get(admin, &format!("/api/v1/rum?addr={addr}"), None).await;
        let v = if r.status == 200 { r.json() } else { Value::Null };
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {addr} is still {} {}", r.status, r.text());
        sleep(Duration::from_millis(100)).await;
    }
}

fn region<'a>(row: &'a Value, name: &str) -> &'a Value {
    row["regions"]
        .as_array()
        .and_then(|l| l.iter().find(|r| r["region"] == name))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reports_of_every_kind_are_refused_and_store_nothing() {
    let extra = "  min_samples: 1\n  burst: 1000\n  max_report_size: 512\n";
    let h = start(&rum_block("http://127.0.0.1:9/a", "http://127.0.0.1:9/b", extra)).await;
    let (to, admin) = (rum_addr(&h), h.admin());
    let ok = r#"{"v":1,"m":[{"region":"eu-west","ms":12.5}]}"#;
    let big =
        format!(r#"{{"v":1,"m":[{{"region":"eu-west","ms":1}}],"pad":"{}"}}"#, "x".repeat(600));
    let refused: &[(&str, u16)] = &[
        ("", 400),
        ("{", 400),
        (r#"{"v":1,"m":"eu-west"}"#, 400),
        (r#"{"v":3,"m":[{"region":"eu-west","ms":1}]}"#, 400),
        (r#"{"v":1,"m":[]}"#, 400),
        (r#"{"v":1,"m":[{"region":"eu-west","ms":"NaN"}]}"#, 400),
        // One good entry does not save a report with a bad one.
        (r#"{"v":1,"m":[{"region":"eu-west","ms":12},{"region":"mars","ms":12}]}"#, 422),
        (r#"{"v":1,"m":[{"region":"eu-west","ms":12},{"region":"us-east","ms":0}]}"#, 422),
        (r#"{"v":1,"m":[{"region":"eu-west","ms":-1}]}"#, 422),
        (r#"{"v":1,"m":[{"region":"us-east","ms":60001}]}"#, 422),
        (&big, 413),
    ];
    for (body, want) in refused {
        assert_eq!(report(to, body).await, *want, "{body}");
    }
    // Publications came and went: still nothing for this network, nothing counted.
    sleep(Duration::from_millis(400)).await;
    let r = http_get(admin, "/api/v1/rum?addr=127.0.0.1", None).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(http_get(admin, "/api/v1/rum", None).await.json()["networks"], 0);
    let (reports, networks, _) = rum_metrics(admin).await;
    assert_eq!(
        reports,
        [("invalid", 4), ("malformed", 6), ("oversized", 1), ("rate_limited", 0), ("stored", 0)]
            .map(|(r, n)| (r.to_string(), n))
    );
    assert_eq!(networks, 0);

    // A good one is stored, alone.
    assert_eq!(report(to, ok).await, 204);
    let row = measured_when(admin, "127.0.0.1", "stored", |v| !v.is_null()).await;
    assert_eq!(row["network"], "127.0.0.0/24");
    assert_eq!(row["regions"], json!([{ "region": "eu-west", "ms": 12.5, "samples": 1 }]));
    assert_eq!(row["preferred"], "eu-west");
    assert_eq!(counts(&rum_metrics(admin).await.0, "stored"), 1);

    // The listener's other paths.
    let beacon = http(to, "GET", "/rum/v1/beacon.js", &[]).await;
    assert_eq!(beacon.status, 200);
    assert!(beacon.header("content-type").unwrap().starts_with("text/javascript"));
    assert!(beacon.header("cache-control").unwrap().contains("max-age"));
    assert!(beacon.text().contains("sendBeacon"));
    // A few KB, and nothing a strict CSP refuses (the browser test runs it under one).
    assert!(beacon.body.len() < 4096, "{} bytes", beacon.body.len());
    assert!(!beacon.text().contains("eval(") && !beacon.text().contains("new Function"));
    let preflight = http(to, "OPTIONS", "/rum/v1/report", &[]).await;
    assert_eq!(preflight.status, 204);
    assert_eq!(preflight.header("access-control-allow-origin"), Some("*"));
    let config = http(to, "GET", "/rum/v1/config", &[]).await;
    assert_eq!(config.header("access-control-allow-origin"), Some("*"));
    assert_eq!(
        config.json()["targets"],
        json!([
            { "region": "eu-west", "url": "http://127.0.0.1:9/a" },
            { "region": "us-east", "url": "http://127.0.0.1:9/b" },
        ])
    );
    assert_eq!(http(to, "GET", "/rum/v1/report", &[]).await.status, 405);
    assert_eq!(http(to, "GET", "/api/v1/rum", &[]).await.status, 404, "no admin API here");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_steer_performance_answers_over_udp_and_tcp() {
    let extra = "  min_samples: 1\n  burst: 1000\n";
    let h = start(&rum_block("http://127.0.0.1:9/a", "http://127.0.0.1:9/b", extra)).await;
    let (to, admin) = (rum_addr(&h), h.admin());
    let ask = |client: &str, source: u8| Q::new(&fq("fast"), T_A).edns().ecs(ip(client), source);
    // Before any report: no latency row, no location, so every region is unknown and the
    // latency table's first region, eu-west, answers.
    assert_eq!(h.udp(&ask("127.0.0.0", 24)).await.single(), "A 192.0.2.41");
    let unmeasured = h.udp(&ask("10.1.2.0", 24)).await;
    let before = (unmeasured.single(), unmeasured.ecs().map(|e| e.2));
    let body = r#"{"v":1,"m":[{"region":"eu-west","ms":120},{"region":"us-east","ms":8}]}"#;
    assert_eq!(report(to, body).await, 204);
    measured_when(admin, "127.0.0.1", "stored", |v| v["preferred"] == "us-east").await;
    // (ECS client, source prefix, answer, scope): the measured /24, its /16 aggregate for a
    // neighbour, and a client with no row, answered as before the report.
    let cases = [
        ("127.0.0.0", 24, ("A 192.0.2.42".to_string(), Some(24))),
        ("127.0.0.77", 32, ("A 192.0.2.42".to_string(), Some(24))),
        ("127.0.9.0", 24, ("A 192.0.2.42".to_string(), Some(16))),
        ("10.1.2.0", 24, before),
    ];
    for (client, source, want) in cases {
        for r in [h.udp(&ask(client, source)).await, h.tcp(&ask(client, source)).await] {
            assert_eq!((r.single(), r.ecs().map(|e| e.2)), want, "{client}/{source}");
        }
    }
    // Without ECS the source address, 127.0.0.1, is the client.
    assert_eq!(h.udp(&Q::new(&fq("fast"), T_A)).await.single(), "A 192.0.2.42");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_address_is_rate_limited_past_its_burst() {
    let extra = "  min_samples: 1\n  burst: 3\n  reports_per_minute: 1\n";
    let h = start(&rum_block("http://127.0.0.1:9/a", "http://127.0.0.1:9/b", extra)).await;
    let (to, admin) = (rum_addr(&h), h.admin());
    let ok = r#"{"v":1,"m":[{"region":"us-east","ms":40}]}"#;
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(report(to, ok).await);
    }
    assert_eq!(got, [204, 204, 204, 429, 429]);
    // Another address has its own bucket.
    assert_eq!(post_from(Ipv4Addr::new(127, 0, 0, 2), to, &[], ok.as_bytes()).await.status, 204);
    let row =
        measured_when(admin, "127.0.0.9", "stored", |v| region(v, "us-east")["samples"] == 4).await;
    assert_eq!(row["network"], "127.0.0.0/24");
    let (reports, networks, _) = rum_metrics(admin).await;
    assert_eq!((counts(&reports, "stored"), counts(&reports, "rate_limited"), networks), (4, 2, 1));

    // A changed rum: block applies at the next start, which a reload says.
    let path = h.dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap().replace("burst: 3", "burst: 4");
    std::fs::write(&path, yaml).unwrap();
    let r = http(admin, "POST", "/api/v1/reload", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["restart_needed"], json!(["rum"]), "{}", r.text());
    assert_eq!(report(to, ok).await, 429, "the running limits stay");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_is_believed_only_from_trusted_proxies() {
    let extra = "  min_samples: 1\n  burst: 1000\n  trusted_proxies: [\"127.0.0.2/32\"]\n";
    let h = start(&rum_block("http://127.0.0.1:9/a", "http://127.0.0.1:9/b", extra)).await;
    let (to, admin) = (rum_addr(&h), h.admin());
    let body = br#"{"v":1,"m":[{"region":"eu-west","ms":33}]}"#;
    let xff = [("X-Forwarded-For", "203.0.113.50, 198.51.100.7")];
    // From an untrusted peer the header is ignored: the peer's network is measured.
    assert_eq!(post_from(Ipv4Addr::new(127, 0, 0, 1), to, &xff, body).await.status, 204);
    // From the trusted proxy, the nearest hop is the client.
    assert_eq!(post_from(Ipv4Addr::new(127, 0, 0, 2), to, &xff, body).await.status, 204);
    let row = measured_when(admin, "198.51.100.99", "via the proxy", |v| !v.is_null()).await;
    assert_eq!(row["network"], "198.51.100.0/24");
    assert_eq!(region(&row, "eu-west")["samples"], 1);
    let own = measured_when(admin, "127.0.0.1", "direct", |v| !v.is_null()).await;
    assert_eq!(region(&own, "eu-west")["samples"], 1, "the proxy's report is not counted here");
    let r = http_get(admin, "/api/v1/rum?addr=203.0.113.50", None).await;
    assert_eq!(r.status, 404, "a hop further out is not believed: {}", r.text());
    assert_eq!(http_get(admin, "/api/v1/rum", None).await.json()["networks"], 2);
    assert_eq!(http_get(admin, "/api/v1/rum?addr=nope", None).await.status, 400);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_networks_over_http_stay_within_max_networks() {
    let extra = "  min_samples: 1\n  max_networks: 1000\n  trusted_proxies: [\"127.0.0.0/8\"]\n";
    let h = start(&rum_block("http://127.0.0.1:9/a", "http://127.0.0.1:9/b", extra)).await;
    let (to, admin) = (rum_addr(&h), h.admin());
    let total = 3000u32;
    let sent = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for worker in 0..8u32 {
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            for i in (worker..total).step_by(8) {
                let client = Ipv4Addr::from(0x0a00_0001u32 + (i << 8)).to_string();
                let body =
                    format!(r#"{{"v":1,"m":[{{"region":"eu-west","ms":{}}}]}}"#, 10 + i % 50);
                let r = post_from(
                    Ipv4Addr::LOCALHOST,
                    to,
                    &[("X-Forwarded-For", &client)],
                    body.as_bytes(),
                )
                .await;
                assert_eq!(r.status, 204, "{client}");
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (reports, networks, evictions) = rum_metrics(admin).await;
    assert_eq!(counts(&reports, "stored"), u64::from(total));
    assert_eq!((networks, evictions), (1000, u64::from(total) - 1000));
    h.stop().await;
}

#[test]
fn rum_errors_are_located() {
    let dir = tempfile::tempdir().unwrap();
    write_location_config(dir.path(), &location_profiles());
    let path = dir.path().join("steerdns.yaml");
    let base = std::fs::read_to_string(&path).unwrap();
    let block = "rum:\n  listen: [\"127.0.0.1\"]\n  targets:\n    \
        - { region: eu-west, url: \"https://eu-west.rum.example.com/rum.gif\" }\n    \
        - { region: mars-north, url: \"https://mars.example.com/rum.gif\" }\n    \
        - { region: us-east, url: \"ftp://us-east.example.com/\" }\n  \
        ipv4_prefix: 40\n  half_life: 2d\n  window: 1h\n  margin_percent: 150\n  \
        trusted_proxies: [\"10.0.0.1/8\"]\n  save_interval: 500ms\n  share_interval: 11m\n  \
        state_file: \"\"\n";
    std::fs::write(&path, format!("{base}{block}")).unwrap();
    let errors = steerdns::config::load(&path, None).expect_err("invalid rum block");
    let got = located(&errors);
    let line_of = |needle: &str| {
        let text = format!("{base}{block}");
        let (n, l) = text.lines().enumerate().find(|(_, l)| l.contains(needle)).expect(needle);
        (n + 1, l.find(needle).unwrap() + 1)
    };
    let want = [
        ("\"127.0.0.1\"", "rum.listen: address \"127.0.0.1\" must be IP:PORT"),
        ("mars-north", "rum.targets: unknown region \"mars-north\""),
        ("\"ftp:", "is not an http or https URL"),
        ("40", "rum.ipv4_prefix must be between 8 and 32, got 40"),
        ("2d", "rum.half_life must be between 1s and 1h, got 2d"),
        ("150", "rum.margin_percent must be between 0 and 100, got 150"),
        ("\"10.0.0.1/8\"", "rum.trusted_proxies: 10.0.0.1/8 has host bits set"),
        ("500ms", "rum.save_interval must be between 1s and 1h, got 500ms"),
        ("11m", "rum.share_interval must be between 1s and 10m, got 11m"),
        ("\"\"", "rum.state_file: a file name is needed"),
    ];
    for (needle, message) in want {
        let (line, col) = line_of(needle);
        let at = format!("steerdns.yaml:{line}:{col}: ");
        assert!(
            got.iter().any(|e| e.starts_with(&at) && e.contains(message)),
            "no {at}{message} in {got:#?}"
        );
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
}

// ---------------------------------------------------------------------------------------
// The beacon in a browser
// ---------------------------------------------------------------------------------------

/// An HTTP server standing for one region's measurement URL: answers every request after
/// `delay_ms`.
struct Delayed {
    addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Delayed {
    async fn start(delay_ms: u64) -> Delayed {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let delay = Arc::new(AtomicU64::new(delay_ms));
        let d = delay.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let d = d.clone();
                tokio::spawn(async move {
                    while read_request_head(&mut conn).await.is_some() {
                        sleep(Duration::from_millis(d.load(Ordering::SeqCst))).await;
                        let answer = "HTTP/1.1 200 OK\r\nContent-Type: image/gif\r\n\
                            Cache-Control: no-store\r\nContent-Length: 0\r\n\r\n";
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Delayed { addr, delay_ms: delay, task }
    }

    fn url(&self) -> String {
        format!("http://{}/rum.gif", self.addr)
    }

    fn set(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }
}

impl Drop for Delayed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The page embedding the beacon, served with a strict Content-Security-Policy: scripts
/// only from the RUM listener (no inline script, no eval), connections only to loopback.
async fn serve_page(rum: SocketAddr) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let page = format!(
        "<!doctype html><html><head><title>shop</title>\
         <script async src=\"http://{rum}/rum/v1/beacon.js\"></script></head>\
         <body><p>A page with the beacon.</p></body></html>"
    );
    let policy = format!(
        "default-src 'none'; script-src http://{rum}; connect-src http://127.0.0.1:*; \
         img-src 'none'; base-uri 'none'; form-action 'none'"
    );
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (page, policy) = (page.clone(), policy.clone());
            tokio::spawn(async move {
                let Some(head) = read_request_head(&mut conn).await else { return };
                let found = head.starts_with(b"GET / ");
                let (status, body) =
                    if found { ("200 OK", page) } else { ("404 Not Found", String::new()) };
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n\
                     Content-Security-Policy: {policy}\r\nCache-Control: no-store\r\n\
                     Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    (addr, task)
}

struct Browser {
    _driver: ChromeDriver,
    client: Client,
}

impl Browser {
    async fn start() -> Option<Browser> {
        let (driver, client) = start_chromium(&[], json!({}), Duration::from_secs(20)).await?;
        Some(Browser { _driver: driver, client })
    }
}

/// Loads the page `times` times, each time waiting until its report is stored.
async fn load_page(b: &Browser, page: SocketAddr, admin: SocketAddr, times: u32) {
    for _ in 0..times {
        let before = counts(&rum_metrics(admin).await.0, "stored");
        b.client.goto(&format!("http://{page}/")).await.expect("open the page");
        let deadline = Instant::now() + Duration::from_secs(20);
        while counts(&rum_metrics(admin).await.0, "stored") == before {
            let (reports, ..) = rum_metrics(admin).await;
            assert!(Instant::now() < deadline, "the beacon did not report: {reports:?}");
            sleep(Duration::from_millis(100)).await;
        }
    }
}

fn ms(row: &Value, name: &str) -> f64 {
    region(row, name)["ms"].as_f64().unwrap_or_else(|| panic!("no {name} in {row}"))
}

/// The `fast` profile's answer (one endpoint per region) for the browser's network, asked
/// over UDP with ECS 127.0.0.0/24, and the ECS scope of the reply.
async fn dns_for_browser(h: &Harness) -> (String, u8) {
    let r = h.udp(&Q::new(&fq("fast"), T_A).edns().ecs(ip("127.0.0.0"), 24)).await;
    let (_, source, scope, _) = r.ecs().unwrap_or_else(|| panic!("no ECS option: {r:#?}"));
    assert_eq!(source, 24, "{r:#?}");
    (r.single(), scope)
}

/// The admin API's explain of `fast` for the browser's address: the trace line that says
/// which source decided.
async fn explained_source(admin: SocketAddr) -> String {
    let path = format!("/api/v1/explain?name={}&type=A&client=127.0.0.1", fq("fast"));
    let r = http_get(admin, &path, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let lines = v["trace"].as_array().unwrap_or_else(|| panic!("no trace: {v}"));
    let line = lines.iter().filter_map(Value::as_str).find(|l| l.starts_with("measured"));
    line.unwrap_or_else(|| panic!("no measured line: {v}")).to_string()
}

/// What one server's run saw: the measured row, the DNS answer for the browser's network
/// and explain's line, each before and after the delays swap.
struct SwapRun {
    first: Value,
    first_dns: (String, u8),
    second: Value,
    second_dns: (String, u8),
    second_explained: String,
}

/// One server's run: the fast region first, then the delays swapped.
async fn swap_run(b: &Browser, margin_ms: u32) -> SwapRun {
    let (eu, us) = (Delayed::start(5).await, Delayed::start(120).await);
    let extra = format!(
        "  min_samples: 3\n  burst: 1000\n  margin_ms: {margin_ms}\n  margin_percent: 10\n"
    );
    let h = start(&rum_block(&eu.url(), &us.url(), &extra)).await;
    let (page, page_task) = serve_page(rum_addr(&h)).await;
    let admin = h.admin();
    load_page(b, page, admin, 3).await;
    let first =
        measured_when(admin, "127.0.0.1", "three loads", |v| region(v, "us-east")["samples"] == 3)
            .await;
    // The admin API reads the same published table as the DNS workers.
    let first_dns = dns_for_browser(&h).await;
    eu.set(120);
    us.set(5);
    // Seven samples each: four new outweigh three old in the median.
    load_page(b, page, admin, 4).await;
    let second =
        measured_when(admin, "127.0.0.1", "seven loads", |v| region(v, "us-east")["samples"] == 7)
            .await;
    let second_dns = dns_for_browser(&h).await;
    let second_explained = explained_source(admin).await;
    page_task.abort();
    h.stop().await;
    SwapRun { first, first_dns, second, second_dns, second_explained }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_beacon_in_a_browser_steers_the_preference_to_the_fast_region() {
    let Some(b) = Browser::start().await else { return };
    let SwapRun { first, first_dns, second, second_dns, second_explained } = swap_run(&b, 20).await;
    eprintln!("measured before the swap: {first}\nafter: {second}");
    // "measured: us-east 9.2 ms (median of 7 samples) from 127.0.0.0/24 (preferred)": the
    // trace shows tenths of the figure the API gives to the microsecond.
    let traced = second_explained
        .strip_prefix("measured: us-east ")
        .and_then(|l| l.strip_suffix(" ms (median of 7 samples) from 127.0.0.0/24 (preferred)"))
        .and_then(|ms| ms.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{second_explained}"));
    assert!((traced - ms(&second, "us-east")).abs() <= 0.05 + 1e-9, "{second_explained}");
    // DNS follows the measurements: dublin (eu-west), then virginia (us-east), scope /24.
    assert_eq!(first_dns, ("A 192.0.2.41".to_string(), 24), "{first}");
    assert_eq!(second_dns, ("A 192.0.2.42".to_string(), 24), "{second}");
    assert_eq!(first["network"], "127.0.0.0/24", "{first}");
    assert_eq!(first["aggregate"], false);
    assert!(ms(&first, "eu-west") < 100.0 && ms(&first, "us-east") >= 100.0, "{first}");
    assert_eq!(first["preferred"], "eu-west", "{first}");
    assert!(ms(&second, "us-east") < 100.0 && ms(&second, "eu-west") >= 100.0, "{second}");
    assert_eq!(second["preferred"], "us-east", "{second}");

    // A margin larger than the difference holds the first preference.
    let SwapRun { first, first_dns, second, second_dns, .. } = swap_run(&b, 5000).await;
    assert_eq!(first["preferred"], "eu-west", "{first}");
    assert_eq!(first_dns, ("A 192.0.2.41".to_string(), 24), "{first}");
    assert_eq!(second_dns, ("A 192.0.2.41".to_string(), 24), "held: {second}");
    assert!(ms(&second, "us-east") < ms(&second, "eu-west"), "{second}");
    assert_eq!(second["preferred"], "eu-west", "held within the margin: {second}");
    let _ = b.client.clone().close().await;
}

// ---------------------------------------------------------------------------------------
// The state file: the samples survive a restart
// ---------------------------------------------------------------------------------------

/// A `steerdns serve` process in `dir` (location fixtures, `state_file: state.json`) on
/// fixed loopback ports, with `rum` (a `rum:` block listening on `rum`).
fn serve_yaml(
    dir: &std::path::Path,
    rum: SocketAddr,
    extra: &str,
) -> (String, SocketAddr, SocketAddr) {
    write_location_config(dir, &location_profiles());
    let (dns, admin) = (free_port(Ipv4Addr::LOCALHOST), free_port(Ipv4Addr::LOCALHOST));
    let yaml = format!("{}{LOCATION_KEYS}", steerdns_yaml())
        .replace("127.0.0.1:0", &dns.to_string())
        .replace("listen:\n", &format!("listen:\n  admin: \"{admin}\"\n"));
    let block = rum_block("http://127.0.0.1:9/a", "http://127.0.0.1:9/b", extra)
        .replace("127.0.0.1:0", &rum.to_string());
    (format!("{yaml}state_file: state.json\n{block}"), dns, admin)
}

/// What a server says about `addr`'s network: the admin API's row, the `fast` answer and
/// its ECS scope for the network over UDP, and explain's measured line.
async fn measured_view(
    dns: SocketAddr,
    admin: SocketAddr,
    addr: &str,
) -> (Value, String, u8, String) {
    let row = http_get(admin, &format!("/api/v1/rum?addr={addr}"), None).await.json();
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(dns).await.unwrap();
    let q = Q::new(&fq("fast"), T_A).edns().ecs(ip(addr), 24).bytes();
    let r = Reply::new(udp_exchange(&sock, &q).await.unwrap());
    let scope = r.ecs().map_or(0, |e| e.2);
    let path = format!("/api/v1/explain?name={}&type=A&client={addr}", fq("fast"));
    let v = http_get(admin, &path, None).await.json();
    let lines = v["trace"].as_array().cloned().unwrap_or_default();
    let line = lines.iter().filter_map(Value::as_str).find(|l| l.starts_with("measured"));
    (row, r.single(), scope, line.unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measurements_survive_a_restart_and_a_bad_state_file_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let rum = free_port(Ipv4Addr::LOCALHOST);
    // Saved only at shutdown within the test: the interval is an hour.
    let extra = "  min_samples: 3\n  burst: 1000\n  max_networks: 50\n  save_interval: 1h\n";
    let (yaml, dns, admin) = serve_yaml(dir.path(), rum, extra);
    let mut first = Replica::start(dir.path(), 0, &yaml, dns, admin).await;
    // 127.0.0.0/24 prefers us-east (3 reports), 127.0.5.0/24 eu-west (4 reports).
    let reports = [
        (Ipv4Addr::new(127, 0, 0, 1), 120.0, 8.0),
        (Ipv4Addr::new(127, 0, 0, 2), 110.0, 9.5),
        (Ipv4Addr::new(127, 0, 0, 3), 130.0, 7.25),
        (Ipv4Addr::new(127, 0, 5, 1), 11.0, 90.0),
        (Ipv4Addr::new(127, 0, 5, 2), 12.5, 95.0),
        (Ipv4Addr::new(127, 0, 5, 3), 10.0, 80.0),
        (Ipv4Addr::new(127, 0, 5, 4), 13.0, 85.0),
    ];
    for (from, eu, us) in reports {
        let body = format!(
            r#"{{"v":1,"m":[{{"region":"eu-west","ms":{eu}}},{{"region":"us-east","ms":{us}}}]}}"#
        );
        assert_eq!(post_from(from, rum, &[], body.as_bytes()).await.status, 204);
    }
    measured_when(admin, "127.0.0.1", "stored", |v| v["preferred"] == "us-east").await;
    measured_when(admin, "127.0.5.1", "stored", |v| v["preferred"] == "eu-west").await;
    let before = [
        measured_view(dns, admin, "127.0.0.0").await,
        measured_view(dns, admin, "127.0.5.0").await,
    ];
    assert_eq!((before[0].1.as_str(), before[0].2), ("A 192.0.2.42", 24), "{before:?}");
    assert_eq!((before[1].1.as_str(), before[1].2), ("A 192.0.2.41", 24), "{before:?}");
    assert_eq!(region(&before[1].0, "eu-west")["samples"], 4, "{before:?}");
    assert!(before[0].3.contains("3 samples"), "explain names the samples: {}", before[0].3);

    first.sigterm();
    assert_eq!(first.wait_exit().await, Some(0), "{}", first.stderr_text());
    let state = dir.path().join("state.json.rum");
    let bytes = std::fs::read(&state).expect("the samples were saved at shutdown");
    // docs/rum.md: 50 bytes of header, 8 of checksum; per /24 its 4 bytes and a count per
    // region; 8 bytes a sample (3 + 4 reports of 2 regions); the count of preferences and
    // each row's (two /24s and their /16): network and region.
    assert_eq!(bytes.len(), 50 + 8 + 2 * (4 + 2) + 14 * 8 + 4 + 2 * 5 + 4);
    eprintln!("state file: {} bytes for 2 networks of 2 regions (14 samples)", bytes.len());

    // The restarted server answers as before, from its first table on.
    let second = Replica::start(dir.path(), 0, &yaml, dns, admin).await;
    let after = [
        measured_view(dns, admin, "127.0.0.0").await,
        measured_view(dns, admin, "127.0.5.0").await,
    ];
    assert_eq!(after, before);
    assert!(second.stderr_text().contains("real user measurements restored"));
    drop(second);

    // A damaged file, a foreign one and one too large for 50 networks: each is reported
    // and ignored, and the server starts with no samples.
    let mut damaged = bytes.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x55;
    let large = vec![0u8; 1 << 20];
    for (what, content, says) in [
        ("damaged", &damaged[..], "checksum"),
        ("foreign", &b"{\"overrides\": []}\n"[..], "not a steerdns measurement record"),
        ("too large", &large[..], "rum.max_networks"),
    ] {
        std::fs::write(&state, content).unwrap();
        let r = Replica::start(dir.path(), 0, &yaml, dns, admin).await;
        let line = r.wait_line("the file ignored", |l| l.contains("state file ignored")).await;
        assert!(line.contains(says), "{what}: {line}");
        let got = http_get(admin, "/api/v1/rum?addr=127.0.0.1", None).await;
        assert_eq!(got.status, 404, "{what}: {}", got.text());
        assert_eq!(measured_view(dns, admin, "127.0.0.0").await.1, "A 192.0.2.41", "{what}");
        drop(r);
    }
}
