//! Flattening (`flatten: true`) against a real hierarchy on loopback: Knot (`knotd`) serves
//! a "CDN" zone whose addresses change, Unbound resolves it for steerdns, and steerdns
//! answers a profile at its zone apex and a flattened name below it with the CDN's
//! current addresses: following a change, serving stale while the resolver is gone, and
//! stopping at the stale bound. A resolver that never answers must not hold any query up.
//! Configuration mistakes are reported where they are written.
//!
//! Without `knotd`/`knotc` (Debian package `knot`) or `unbound` the resolver tests skip
//! with a message (and fail under `STEERDNS_REQUIRE_TOOLS=1`).

mod common;

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::*;
use hickory_proto::rr::RData;

const CDN: &str = "cdn.example.";

/// The CDN's zone: `edge` is a CNAME to `www`, whose addresses are `v4` and `v6`, with
/// TTL `ttl`.
fn cdn_zone(serial: u32, ttl: u32, v4: &str, v6: &str) -> String {
    format!(
        "$ORIGIN {CDN}\n$TTL {ttl}\n\
         @ 3600 IN SOA ns.{CDN} hostmaster.{CDN} {serial} 3600 600 86400 {ttl}\n\
         @ 3600 IN NS ns\n\
         ns IN A 127.0.0.1\n\
         www IN A {v4}\n\
         www IN AAAA {v6}\n\
         edge IN CNAME www\n"
    )
}

/// The apex profile (flattened as a whole) and `flat` (one flattened endpoint), both
/// pointing at the CDN's `edge`; `mixed` falls back to an address when `edge` has none.
fn profiles() -> Vec<(&'static str, String)> {
    vec![
        (
            "apex.yaml",
            format!(
                "name: tm.example.test.\nrouting: priority\nttl: 300\nflatten: true\n\
                 endpoints:\n  - {{ name: cdn, target: edge.{CDN}, always_serve: true }}\n"
            ),
        ),
        (
            "flat.yaml",
            format!(
                "name: flat\nrouting: priority\nttl: 300\nendpoints:\n\
                 \x20 - {{ name: cdn, target: edge.{CDN}, flatten: true, always_serve: true }}\n\
                 \x20 - {{ name: origin, target: 198.51.100.7, always_serve: true }}\n"
            ),
        ),
    ]
}

async fn start(flatten_keys: &str) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let profiles = profiles();
    let refs: Vec<(&str, &str)> = profiles.iter().map(|(n, t)| (*n, t.as_str())).collect();
    write_config(dir.path(), &refs);
    let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).unwrap();
    std::fs::write(dir.path().join("steerdns.yaml"), format!("{yaml}flatten:\n{flatten_keys}"))
        .unwrap();
    Harness::in_dir(dir).await
}

/// The addresses and TTLs of an answer.
fn records(r: &Reply) -> Vec<(IpAddr, u32)> {
    r.msg
        .answers
        .iter()
        .filter_map(|rec| match &rec.data {
            RData::A(a) => Some((IpAddr::V4(a.0), rec.ttl)),
            RData::AAAA(a) => Some((IpAddr::V6(a.0), rec.ttl)),
            _ => None,
        })
        .collect()
}

/// Queries until `done` holds for the reply, at most `limit`; the last reply.
async fn until(h: &Harness, q: &Q, limit: Duration, done: impl Fn(&Reply) -> bool) -> Reply {
    let started = Instant::now();
    loop {
        let r = h.udp(q).await;
        if done(&r) || started.elapsed() > limit {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `explain` trace line of the flattened endpoint, for an A query at `name`.
fn explained(h: &Harness, name: &str) -> String {
    use steerdns::responder::explain;
    let snap = h.server().snapshot();
    let qname = explain::absolute(&snap, name).unwrap();
    let e = explain::explain(
        &snap,
        &*snap.health,
        &qname,
        explain::parse_type("A").unwrap(),
        ip("192.0.2.1"),
        None,
        None,
    );
    e.trace.iter().find(|l| l.contains(" flattens ")).cloned().unwrap_or_else(|| panic!("{e:#?}"))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flattened_names_follow_the_cdn_serve_stale_and_stop() {
    if !Knot::available() || !Resolver::available() || !have_tool("kdig", "knot-dnsutils") {
        return;
    }
    let knot = Knot::start(CDN, &cdn_zone(1, 2, "192.0.2.10", "2001:db8::10")).unwrap();
    let resolver = Resolver::start(knot.addr, CDN).unwrap();
    // The CDN's records live 2 s; stale answers for 4 s past that, with TTL 7 (above any fresh one).
    let keys = format!("  resolvers: [\"{}\"]\n  stale_for: 4s\n  stale_ttl: 7\n", resolver.addr);
    let h = start(&keys).await;
    let wait = Duration::from_secs(15);
    let apex_a = Q::new("tm.example.test.", T_A);
    let has = |addr: &'static str| move |r: &Reply| records(r).iter().any(|(a, _)| *a == ip(addr));

    // The apex and the flattened name answer the CDN's addresses, with at most the
    // records' TTL; the apex keeps its own records.
    let r = until(&h, &apex_a, wait, has("192.0.2.10")).await;
    let got = records(&r);
    let cdn = |qtype| knot.kdig_addrs(&format!("edge.{CDN}"), qtype).unwrap();
    assert_eq!(cdn("A"), [ip("192.0.2.10")], "the CDN as kdig reads it from Knot");
    assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), cdn("A"), "{r:#?}\n{}", resolver.log());
    assert!(got[0].1 <= 2, "TTL counts down from the records': {r:#?}");
    assert!(r.aa());
    let r = until(&h, &Q::new("tm.example.test.", T_AAAA), wait, has("2001:db8::10")).await;
    assert_eq!(records(&r).iter().map(|x| x.0).collect::<Vec<_>>(), cdn("AAAA"));
    let r = h.udp(&Q::new("tm.example.test.", T_NS)).await;
    assert!(
        !r.msg.answers.is_empty() && r.msg.answers.iter().all(|a| matches!(a.data, RData::NS(_))),
        "{r:#?}"
    );
    let r = h.udp(&Q::new("tm.example.test.", T_SOA)).await;
    assert!(matches!(r.msg.answers[0].data, RData::SOA(_)), "{r:#?}");
    let r = h.udp(&Q::new("tm.example.test.", T_TXT)).await;
    assert_eq!(r.msg.answers.len(), 1, "the apex's TXT: {r:#?}");
    let flat = Q::new("flat.tm.example.test.", T_A);
    let r = until(&h, &flat, wait, has("192.0.2.10")).await;
    assert_eq!(records(&r).iter().map(|x| x.0).collect::<Vec<_>>(), [ip("192.0.2.10")]);
    assert!(r.msg.answers.iter().all(|a| !matches!(a.data, RData::CNAME(_))), "no CNAME: {r:#?}");

    // Explain names the target, the chain, the addresses, the resolver and the freshness.
    let line = explained(&h, "tm.example.test.");
    for part in [
        "endpoint cdn flattens edge.cdn.example. via www.cdn.example.: A 192.0.2.10",
        &format!("from resolver {}", resolver.addr),
        "with TTL 2, not validated",
        "fresh",
    ] {
        assert!(line.contains(part), "{part:?} in {line}");
    }

    // The CDN moves: both names follow once the records expire.
    knot.replace_zone(&cdn_zone(2, 2, "192.0.2.20", "2001:db8::20"));
    assert_eq!(cdn("A"), [ip("192.0.2.20")], "Knot serves the new zone");
    let r = until(&h, &apex_a, wait, has("192.0.2.20")).await;
    let got: Vec<IpAddr> = records(&r).iter().map(|x| x.0).collect();
    assert_eq!(got, cdn("A"), "{}", knot.log());
    let r = until(&h, &flat, wait, has("192.0.2.20")).await;
    assert_eq!(records(&r).iter().map(|x| x.0).collect::<Vec<_>>(), [ip("192.0.2.20")]);

    // The resolver dies: the last addresses are served stale, with the stale TTL ...
    drop(resolver);
    let stale = |r: &Reply| records(r).iter().any(|&(a, ttl)| a == ip("192.0.2.20") && ttl == 7);
    let r = until(&h, &apex_a, wait, stale).await;
    assert!(stale(&r), "served stale with TTL 7: {r:#?}");
    let line = explained(&h, "tm.example.test.");
    assert!(line.contains("A 192.0.2.20") && line.contains("stale: expired"), "{line}");
    // ... and past the bound not at all: the apex has no address (NODATA), the flattened
    // endpoint stops serving and its profile moves on to the next endpoint.
    let r = until(&h, &apex_a, wait, |r| records(r).is_empty()).await;
    r.assert_negative(NOERROR);
    let r = until(&h, &flat, wait, has("198.51.100.7")).await;
    assert_eq!(records(&r).iter().map(|x| x.0).collect::<Vec<_>>(), [ip("198.51.100.7")]);
    h.stop().await;
}

/// A "resolver" that reads every query and never answers: lookups hang until their
/// timeout, and every query of a burst is answered meanwhile (from the next endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_resolver_never_holds_a_query() {
    let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        let mut read = 0usize;
        while silent.recv_from(&mut buf).await.is_ok() {
            read += 1;
        }
        read
    });
    let keys = format!("  resolvers: [\"{silent_addr}\"]\n  timeout: 30s\n");
    let h = start(&keys).await;
    let sock = h.fresh_udp().await;
    const BURST: u16 = 200;
    for id in 0..BURST {
        sock.send(&Q::new("flat.tm.example.test.", T_A).id(id).bytes()).await.unwrap();
    }
    let mut answered = HashSet::new();
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while answered.len() < usize::from(BURST) {
        let Ok(Ok(n)) = tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await else { break };
        let r = Reply::new(buf[..n].to_vec());
        assert_eq!(records(&r).iter().map(|x| x.0).collect::<Vec<_>>(), [ip("198.51.100.7")]);
        answered.insert(r.msg.metadata.id);
    }
    assert_eq!(answered.len(), usize::from(BURST), "every query of the burst is answered");
    // The apex, whose only endpoint does not resolve, answers NODATA at once.
    h.udp(&Q::new("tm.example.test.", T_A)).await.assert_negative(NOERROR);
    h.stop().await;
    reader.abort();
}

#[test]
fn flattening_mistakes_are_located() {
    let server = "listen:\n  dns: [\"127.0.0.1:0\"]\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: { rname: hostmaster.example.test. }\n    records: [\"ns1 A 192.0.2.53\", \"@ A 192.0.2.54\"]\nflatten:\n  resolvers: [\"127.0.0.1\", \"resolver.example.\", \"127.0.0.1:0\"]\n  stale_for: 9d\n";
    let apex = "name: tm.example.test.\nrouting: priority\nendpoints:\n  - { name: a, target: cdn.example.net. }\n  - { name: b, target: 192.0.2.1, flatten: true }\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
    std::fs::write(dir.path().join("steerdns.yaml"), server).unwrap();
    std::fs::write(dir.path().join("profiles/apex.yaml"), apex).unwrap();
    let errors = steerdns::config::load(&dir.path().join("steerdns.yaml"), None).unwrap_err();
    let got = located(&errors);
    let want = [
        "apex.yaml:1:7: tm.example.test. has A records in the zone",
        "apex.yaml:4:24: cdn.example.net. is a host name at the zone apex, which cannot be a CNAME: flatten it",
        "apex.yaml:5:44: flatten applies to host-name targets only",
        "steerdns.yaml:9:28: flatten.resolvers: \"resolver.example.\" is not an address",
        "steerdns.yaml:9:49: flatten.resolvers: \"127.0.0.1:0\" is not an address",
        "steerdns.yaml:10:14: flatten.stale_for must be at most 7d",
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for w in want {
        assert!(got.iter().any(|g| g.starts_with(w)), "missing {w:?} in {got:#?}");
    }
}

/// With `require_ad: true`, answers of a resolver that does not validate (this Unbound
/// runs without its validator) are failed lookups: the apex has no address to serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_ad_refuses_unvalidated_answers() {
    if !Knot::available() || !Resolver::available() {
        return;
    }
    let knot = Knot::start(CDN, &cdn_zone(1, 60, "192.0.2.10", "2001:db8::10")).unwrap();
    let resolver = Resolver::start(knot.addr, CDN).unwrap();
    let keys = format!("  resolvers: [\"{}\"]\n  require_ad: true\n", resolver.addr);
    let h = start(&keys).await;
    let slot = h.server().snapshot().flat.slots[0].clone();
    let started = Instant::now();
    while slot.lookups_failed.load(std::sync::atomic::Ordering::Relaxed) < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no lookup failed:\n{}",
            resolver.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(slot.lookups_ok.load(std::sync::atomic::Ordering::Relaxed), 0);
    h.udp(&Q::new("tm.example.test.", T_A)).await.assert_negative(NOERROR);
    // The next endpoint answers for the flattened one.
    let r = h.udp(&Q::new("flat.tm.example.test.", T_A)).await;
    assert_eq!(records(&r).iter().map(|x| x.0).collect::<Vec<_>>(), [ip("198.51.100.7")]);
    h.stop().await;
}

/// The answer records ("A 192.0.2.10") and the trace lines of `steerdns explain NAME A`
/// run as the binary on `config`, which must succeed.
fn explain_offline(config: &std::path::Path, name: &str) -> (Vec<String>, Vec<String>) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["explain", name, "A", "--client", "192.0.2.1", "-c", config.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run steerdns");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let (mut answer, mut trace, mut section) = (Vec::new(), Vec::new(), "");
    for line in text.lines() {
        if !line.starts_with(' ') {
            section = line;
        } else if section == "answer:" {
            let fields: Vec<&str> = line.split_whitespace().collect();
            answer.push(fields[3..].join(" "));
        } else if section == "trace:" {
            trace.push(line.trim().trim_start_matches("- ").to_string());
        }
    }
    (answer, trace)
}

/// `steerdns explain` runs without a server, so it looks the flattened names the query
/// leads to up itself, once, at the configured resolvers: with a resolver that never
/// answers the trace says why the lookup failed and the next endpoint answers; with
/// Unbound in front of Knot it answers what Knot serves (as kdig reads it) and traces the
/// lookup as the server's explain does.
#[test]
fn offline_explain_looks_flattened_names_up_as_the_server_would() {
    let dir = tempfile::tempdir().expect("tempdir");
    let profiles = profiles();
    let refs: Vec<(&str, &str)> = profiles.iter().map(|(n, t)| (*n, t.as_str())).collect();
    write_config(dir.path(), &refs);
    let path = dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let with_flatten =
        |keys: &str| std::fs::write(&path, format!("{yaml}flatten:\n{keys}")).unwrap();

    // Bound and never read: every query to it goes unanswered.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    with_flatten(&format!("  resolvers: [\"{silent_addr}\"]\n  timeout: 200ms\n"));
    let (answer, trace) = explain_offline(&path, "flat");
    assert_eq!(answer, ["A 198.51.100.7"], "{trace:#?}");
    let failed = format!(
        "flattened edge.{CDN} A: the lookup failed (resolvers of flatten.resolvers): no answer within 200ms"
    );
    assert!(trace.contains(&failed), "{trace:#?}");

    if !Knot::available() || !Resolver::available() || !have_tool("kdig", "knot-dnsutils") {
        return;
    }
    let knot = Knot::start(CDN, &cdn_zone(1, 300, "192.0.2.10", "2001:db8::10")).unwrap();
    let resolver = Resolver::start(knot.addr, CDN).unwrap();
    with_flatten(&format!("  resolvers: [\"{}\"]\n", resolver.addr));
    let (answer, trace) = explain_offline(&path, "flat");
    let cdn = knot.kdig_addrs(&format!("edge.{CDN}"), "A").unwrap();
    let want: Vec<String> = cdn.iter().map(|a| format!("A {a}")).collect();
    assert_eq!(answer, want, "{trace:#?}\n{}", resolver.log());
    let flattens = format!(
        "endpoint cdn flattens edge.{CDN} via www.{CDN}: A 192.0.2.10 from resolver {}",
        resolver.addr
    );
    assert!(trace.iter().any(|l| l.starts_with(&flattens)), "{trace:#?}");
    assert!(!trace.iter().any(|l| l.contains("lookup failed")), "{trace:#?}");
    drop(silent);
}
