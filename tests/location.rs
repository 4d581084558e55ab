//! Location-aware routing on the wire: geographic, subnet, performance, groups (traffic
//! dial) and same-zone-first, each over real UDP with EDNS Client Subnet (the ECS address
//! is the client), and the ECS scope of every decision.
//!
//! The geo database is compiled at test start by `steerdns::geo::build` from
//! `tests/fixtures/location/city.csv`; the latency table and the profiles are fixtures under
//! `tests/fixtures/location/` too, so nothing outside the repository is read. Every endpoint
//! is `always_serve` or `enabled: false`: no answer depends on health probing.
//!
//! The validation errors of these methods are checked at the end, with FILE:LINE:COL.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, UNIX_EPOCH};

use common::*;

/// Queries per distribution. Shares are checked within `TOLERANCE`; at 6000 queries a 50%
/// share has a standard deviation of 0.65 points, so ±3 points is more than 4.5 of them.
const DRAWS: usize = 6000;
const TOLERANCE: f64 = 0.03;

/// An A query for `name` with ECS `client`/`source`.
fn query(name: &str, client: &str, source: u8) -> Q {
    Q::new(&fq(name), T_A).edns().ecs(ip(client), source)
}

/// The ECS scope of a reply (which must echo the option with the query's family and source).
fn scope_of(r: &Reply, client: &str, source: u8) -> u8 {
    let (family, src, scope, _) =
        r.ecs().unwrap_or_else(|| panic!("no ECS option in the reply: {r:#?}"));
    assert_eq!(family, if ip(client).is_ipv4() { 1 } else { 2 }, "{r:#?}");
    assert_eq!(src, source, "source prefix echoed as sent: {r:#?}");
    scope
}

/// Endpoint name for an answer address, from a (name, address) table.
fn who(table: &[(&'static str, &str)], answer: &str) -> &'static str {
    let addr = answer.strip_prefix("A ").unwrap_or(answer);
    table
        .iter()
        .find(|(_, a)| *a == addr)
        .map(|(n, _)| *n)
        .unwrap_or_else(|| panic!("answer {answer:?} is no endpoint of {table:?}"))
}

/// The endpoint that answers `name` for the client, and the ECS scope.
async fn pick(
    h: &Harness,
    table: &[(&'static str, &str)],
    name: &str,
    client: &str,
    source: u8,
) -> (&'static str, u8) {
    let r = h.udp(&query(name, client, source)).await;
    (who(table, &r.single()), scope_of(&r, client, source))
}

/// Asserts NODATA (NOERROR, no answer, SOA in authority) for the client; returns the scope.
async fn nodata(h: &Harness, name: &str, client: &str, source: u8) -> u8 {
    let r = h.udp(&query(name, client, source)).await;
    r.assert_negative(NOERROR);
    scope_of(&r, client, source)
}

/// How many of `n` queries each endpoint answered.
async fn tally(
    h: &Harness,
    table: &[(&'static str, &str)],
    name: &str,
    client: &str,
    n: usize,
) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let r = h.udp(&query(name, client, 32)).await;
        *counts.entry(who(table, &r.single())).or_insert(0) += 1;
    }
    counts
}

fn share(counts: &BTreeMap<&str, usize>, endpoint: &str) -> f64 {
    let total: usize = counts.values().sum();
    counts.get(endpoint).copied().unwrap_or(0) as f64 / total as f64
}

/// The set of endpoints seen over `n` queries.
async fn seen(
    h: &Harness,
    table: &[(&'static str, &str)],
    name: &str,
    client: &str,
    source: u8,
    n: usize,
) -> BTreeSet<&'static str> {
    let mut out = BTreeSet::new();
    for _ in 0..n {
        out.insert(pick(h, table, name, client, source).await.0);
    }
    out
}

fn set(names: &[&'static str]) -> BTreeSet<&'static str> {
    names.iter().copied().collect()
}

// Clients of tests/fixtures/location/city.csv.
/// San Francisco, US-CA (192.0.2.128/25).
const SF: &str = "192.0.2.130";
/// Paris, FR (192.0.2.0/25).
const PARIS: &str = "192.0.2.5";
/// New York, US-NY (100.64.10.0/24).
const NYC: &str = "100.64.10.5";
/// Frankfurt, DE without subdivision (100.64.6.0/24).
const FRANKFURT: &str = "100.64.6.5";
/// Beijing, CN-BJ (198.51.100.0/25).
const BEIJING: &str = "198.51.100.5";
/// Shanghai, CN-SH (198.51.100.128/25).
const SHANGHAI: &str = "198.51.100.200";
/// Sydney, AU-NSW (203.0.113.0/24).
const SYDNEY: &str = "203.0.113.5";
/// Tokyo, JP (100.64.20.0/22).
const TOKYO: &str = "100.64.21.1";
/// São Paulo, BR (100.64.2.0/24).
const SAO_PAULO: &str = "100.64.2.5";
/// In no network of the database.
const NOWHERE: &str = "100.100.0.1";

// ---------------------------------------------------------------------------------------
// Geographic
// ---------------------------------------------------------------------------------------

const GEO: &[(&str, &str)] = &[
    ("usca", "192.0.2.1"),
    ("na", "192.0.2.2"),
    ("fr", "192.0.2.3"),
    ("eu", "192.0.2.4"),
    ("asia", "192.0.2.5"),
    ("eng", "192.0.2.6"),
    ("de", "192.0.2.7"),
    ("world", "192.0.2.8"),
];

const GEO_NW: &[(&str, &str)] =
    &[("eu", "192.0.2.11"), ("usca", "192.0.2.12"), ("world", "192.0.2.13")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_most_specific_code_wins() {
    let h = Harness::location(&[]).await;
    // Subdivision → country → grouping → WORLD.
    // (client, ECS source, endpoint, scope range)
    let cases: &[(&str, u8, &str, (u8, u8))] = &[
        (SF, 32, "usca", (25, 25)),      // US-CA
        (NYC, 32, "na", (24, 24)),       // US-NY is not mapped: country US
        (PARIS, 32, "fr", (25, 25)),     // FR beats GEO-EU
        (FRANKFURT, 32, "eu", (24, 24)), // DE is on a disabled endpoint: GEO-EU
        // Beijing and Shanghai are sibling /25s of two places with one answer: the /24.
        (BEIJING, 32, "asia", (24, 24)), // GEO-AS
        (SHANGHAI, 32, "asia", (24, 24)),
        (TOKYO, 32, "asia", (22, 22)),
        // GEO-AP is not mapped: WORLD, as for every address of 200.0.0.0/5, the block
        // the answer holds for (gdnsd compiles its maps the same way).
        (SYDNEY, 32, "world", (5, 5)),
        (SAO_PAULO, 32, "world", (22, 22)),
        (NOWHERE, 32, "world", (0, 32)), // no location: only WORLD matches
        ("192.0.2.0", 24, "fr", (25, 25)), // the /25 network, longer than the source /24
        ("192.0.2.128", 25, "usca", (25, 25)),
        // Frankfurt and Berlin /24s are siblings, both DE: the answer holds for the /23.
        ("100.64.41.77", 32, "eu", (23, 23)),
        ("100.64.40.0", 24, "eu", (23, 23)),
        ("100.64.40.0", 22, "eu", (23, 23)),
    ];
    let mut failures = Vec::new();
    for (i, (client, source, want, (lo, hi))) in cases.iter().enumerate() {
        let (got, scope) = pick(&h, GEO, "geo", client, *source).await;
        if got != *want || scope < *lo || scope > *hi {
            failures.push(format!(
                "case {i} {client}/{source}: got {got} scope /{scope}, \
                     want {want} scope /{lo}..=/{hi}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_ipv6_clients_use_the_ecs_prefix() {
    let h = Harness::location(&[]).await;
    // London, GB-ENG, is 2001:db8:1::/48; Sydney over IPv6 is 2001:db8:2::/48.
    let cases: &[(&str, u8, &str, u8)] = &[
        ("2001:db8:1::", 48, "eng", 48),
        ("2001:db8:1:ff00::", 56, "eng", 48),
        ("2001:db8:1:abcd::", 64, "eng", 48),
        // The next /48 has no data: WORLD answers it too, so the block is the /47.
        ("2001:db8:2::", 48, "world", 47),
    ];
    for (client, source, want, scope) in cases {
        assert_eq!(
            pick(&h, GEO, "geo", client, *source).await,
            (*want, *scope),
            "{client}/{source}"
        );
    }
    // A /32 source: 2001:db8::/48 has no data (WORLD), and the next /48 is London, so the
    // answer holds for the /48 only, longer than the source: the resolver asks again for
    // clients outside it.
    assert_eq!(pick(&h, GEO, "geo", "2001:db8::", 32).await, ("world", 48));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_scope_is_the_answers_block_whatever_the_source_prefix() {
    let h = Harness::location(&[]).await;
    // FR is 192.0.2.0/25 and US-CA 192.0.2.128/25 in the database. The scope is the block
    // the answer holds for, also when that is longer than the source: a /24 question gets
    // FR's /25, so a caching resolver asks again for the clients of the other half.
    for (client, source, want, scope) in [
        (PARIS, 32u8, "fr", 25u8),
        ("192.0.2.0", 25, "fr", 25),
        ("192.0.2.0", 24, "fr", 25),
        (SF, 32, "usca", 25),
        ("192.0.2.128", 25, "usca", 25),
        // 192.0.0.0 has no data (WORLD); 192.0.2.0/24 answers otherwise, so a /16 question
        // gets the /23 that holds 192.0.0.0.
        ("192.0.0.0", 16, "world", 23),
    ] {
        assert_eq!(pick(&h, GEO, "geo", client, source).await, (want, scope), "{client}/{source}");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_no_match_is_nodata() {
    let h = Harness::location(&[]).await;
    // geo-nw: eu → GEO-EU, usca → US-CA, and WORLD only on a disabled endpoint.
    assert_eq!(pick(&h, GEO_NW, "geo-nw", PARIS, 32).await.0, "eu");
    assert_eq!(pick(&h, GEO_NW, "geo-nw", FRANKFURT, 32).await.0, "eu");
    assert_eq!(pick(&h, GEO_NW, "geo-nw", SF, 32).await.0, "usca");
    assert_eq!(pick(&h, GEO_NW, "geo-nw", "2001:db8:1::", 48).await.0, "eu");
    for client in [NYC, SYDNEY, BEIJING, SAO_PAULO, NOWHERE] {
        let scope = nodata(&h, "geo-nw", client, 32).await;
        assert!(scope <= 32, "{client}: scope /{scope}");
    }
    // The scope of a NODATA is the widest block around the client where no code
    // matches either: 200.0.0.0/5 around Sydney, the /47 around its IPv6 /48.
    assert_eq!(nodata(&h, "geo-nw", SYDNEY, 32).await, 5);
    assert_eq!(nodata(&h, "geo-nw", "2001:db8:2::", 48).await, 47);
    // Without ECS the source address (127.0.0.1, in no network) is the client: NODATA.
    let r = h.udp(&Q::new(&fq("geo-nw"), T_A)).await;
    r.assert_negative(NOERROR);
    h.stop().await;
}

/// The geo database is watched as the ASN database is: a database renamed over it reloads
/// the configuration and moves the answer; one that does not parse is a rejected reload,
/// located at `geo.database`, and the database in use stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_geo_database_moves_the_answer_and_a_bad_one_is_rejected() {
    let h = Harness::location(&[]).await;
    let db = h.dir.path().join("data/city.mmdb");
    assert_eq!(pick(&h, GEO, "geo", PARIS, 32).await.0, "fr");
    // Paris's /25 is in California now.
    let csv = std::fs::read_to_string(location_fixture("city.csv")).unwrap();
    let moved = csv.replace(
        "192.0.2.0/25,EU,FR,IDF,48.8566,2.3522",
        "192.0.2.0/25,NA,US,CA,37.7749,-122.4194",
    );
    assert_ne!(moved, csv, "the fixture has Paris's row");
    let (bytes, _) =
        steerdns::geo::build::build_bytes(&moved, Path::new("city.csv"), UNIX_EPOCH).unwrap();
    write_atomic(&db, &bytes);
    let paris = async || pick(&h, GEO, "geo", PARIS, 32).await.0 == "usca";
    eventually(Duration::from_secs(10), "Paris answered from usca", paris).await;
    // A file that does not parse: the reload is rejected and the database in use stays.
    let failures = || h.server().control().totals.reload_failures.load(Ordering::Relaxed);
    let before = failures();
    write_atomic(&db, b"not a database");
    eventually(Duration::from_secs(10), "a rejected reload", async || failures() > before).await;
    assert_eq!(pick(&h, GEO, "geo", PARIS, 32).await.0, "usca");
    let last = h.server().control().last_reload.get();
    assert_eq!(last.trigger, "file change", "{last:?}");
    assert_eq!(last.errors.len(), 1, "{last:?}");
    let at = format!("{}:", h.dir.path().join("steerdns.yaml").display());
    assert!(last.errors[0].starts_with(&at), "located at geo.database: {last:?}");
    assert!(last.errors[0].contains("city.mmdb: cannot open geo database"), "{last:?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_disabled_endpoint_takes_no_part() {
    let h = Harness::location(&[]).await;
    // `de` (DE) is disabled: German clients fall through to GEO-EU and `de` never answers.
    let got = seen(&h, GEO, "geo", FRANKFURT, 32, 20).await;
    assert_eq!(got, set(&["eu"]));
    // geo-nw's WORLD endpoint is disabled: NODATA rather than the disabled endpoint.
    for _ in 0..20 {
        nodata(&h, "geo-nw", SYDNEY, 32).await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_nested_and_stopped_matches() {
    let h = Harness::location(&[]).await;
    let table: &[(&str, &str)] = &[
        ("fr-1", "192.0.2.14"),
        ("de-1", "192.0.2.15"),
        ("de-2", "192.0.2.16"),
        ("world", "192.0.2.19"),
    ];
    // DE matches a nested endpoint: its child (weighted) answers.
    let got = seen(&h, table, "geo-nest", FRANKFURT, 32, 200).await;
    assert_eq!(got, set(&["de-1", "de-2"]));
    // FR matches a nested endpoint whose child is disabled (Stopped): NODATA, not WORLD.
    for _ in 0..5 {
        nodata(&h, "geo-nest", PARIS, 32).await;
    }
    assert_eq!(pick(&h, table, "geo-nest", SYDNEY, 32).await.0, "world");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Subnet
// ---------------------------------------------------------------------------------------

const OFFICE: &[(&str, &str)] = &[
    ("lan", "192.0.2.21"),
    ("dmz", "192.0.2.22"),
    ("v6", "192.0.2.23"),
    ("old", "192.0.2.24"),
    ("internet", "192.0.2.29"),
];

const OFFICE_NOFB: &[(&str, &str)] = &[("lan", "192.0.2.31"), ("dmz", "192.0.2.32")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subnet_matches_cidrs_and_ranges_with_their_scope() {
    let h = Harness::location(&[]).await;
    // office: lan 10.0.0.0/8, dmz 192.0.2.10-192.0.2.20, v6 2001:db8:a::100-2001:db8:a::1ff
    // and 2001:db8:b::/48, old 172.16.0.0/12 (disabled), internet (fallback).
    // (client, source, endpoint, scope)
    let cases: &[(&str, u8, &str, u8)] = &[
        ("10.1.2.3", 32, "lan", 8),
        ("10.200.0.0", 16, "lan", 8),
        ("10.0.0.0", 8, "lan", 8),
        ("192.0.2.15", 32, "dmz", 30), // 192.0.2.12/30 is inside 10-20
        ("192.0.2.16", 32, "dmz", 30), // 16-19
        ("192.0.2.10", 32, "dmz", 31), // 10-11
        ("192.0.2.20", 32, "dmz", 32), // 20-21 would leave the range
        ("2001:db8:a::150", 128, "v6", 120), // the range is exactly a /120
        ("2001:db8:a::1ff", 128, "v6", 120),
        ("2001:db8:b:1::", 64, "v6", 48),
        ("2001:db8:b::", 48, "v6", 48),
        // Unmatched: the fallback, scope the largest block around the client holding no range.
        ("192.0.2.9", 32, "internet", 31),         // 8-9
        ("192.0.2.21", 32, "internet", 32),        // 20-21 holds a range
        ("192.0.2.100", 32, "internet", 26),       // 64-127
        ("203.0.113.1", 32, "internet", 5),        // 200.0.0.0/5
        ("2001:db8:a::200", 128, "internet", 119), // ::200-::3ff
        // A disabled endpoint's range takes no part: the fallback answers.
        ("172.16.1.1", 32, "internet", 2), // 128.0.0.0/2 holds no enabled range
    ];
    let mut failures = Vec::new();
    for (i, (client, source, want, scope)) in cases.iter().enumerate() {
        let got = pick(&h, OFFICE, "office", client, *source).await;
        if got != (*want, *scope) {
            failures
                .push(format!("case {i} {client}/{source}: got {got:?}, want ({want}, {scope})"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subnet_without_fallback_answers_nodata() {
    let h = Harness::location(&[]).await;
    assert_eq!(pick(&h, OFFICE_NOFB, "office-nofb", "10.9.9.9", 32).await, ("lan", 8));
    assert_eq!(pick(&h, OFFICE_NOFB, "office-nofb", "192.0.2.15", 32).await, ("dmz", 30));
    assert_eq!(nodata(&h, "office-nofb", "203.0.113.1", 32).await, 5);
    assert_eq!(nodata(&h, "office-nofb", "192.0.2.9", 32).await, 31);
    assert_eq!(nodata(&h, "office-nofb", "2001:db8::1", 128).await, 0);
    h.stop().await;
}

/// A subnet profile with `n` ranges over 20.0.0.0 upwards, one /24-sized slot each: even
/// slots hold the CIDR `.0/25`, odd slots the range `.10-.199`; slot i belongs to endpoint
/// e{i % 10} (target 192.0.2.{200 + i % 10}); `rest` (192.0.2.250) is the fallback.
fn big_subnet_profile(n: u32) -> String {
    let slot = |i: u32| Ipv4Addr::from(u32::from(Ipv4Addr::new(20, 0, 0, 0)) + i * 256);
    let mut lists: Vec<String> = vec![String::new(); 10];
    for i in 0..n {
        let base = u32::from(slot(i));
        let text = if i.is_multiple_of(2) {
            format!("{}/25", Ipv4Addr::from(base))
        } else {
            format!("{}-{}", Ipv4Addr::from(base + 10), Ipv4Addr::from(base + 199))
        };
        lists[(i % 10) as usize].push_str(&format!("      - \"{text}\"\n"));
    }
    let mut out = String::from("name: bignet\nrouting: subnet\nendpoints:\n");
    for (k, list) in lists.iter().enumerate() {
        out.push_str(&format!(
            "  - name: e{k}\n    target: 192.0.2.{}\n    always_serve: true\n    subnets:\n{list}",
            200 + k
        ));
    }
    out.push_str("  - { name: rest, target: 192.0.2.250, always_serve: true }\n");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subnet_profile_with_100k_ranges_loads_and_answers() {
    const N: u32 = 100_000;
    let yaml = big_subnet_profile(N);
    let h = Harness::location(&[("bignet.yaml", &yaml)]).await;
    const NAMES: [&str; 10] = ["e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9"];
    let mut addrs: Vec<(&'static str, String)> =
        NAMES.iter().enumerate().map(|(k, n)| (*n, format!("192.0.2.{}", 200 + k))).collect();
    addrs.push(("rest", "192.0.2.250".into()));
    let table: Vec<(&'static str, &str)> = addrs.iter().map(|(n, a)| (*n, a.as_str())).collect();
    let base = |i: u32| u32::from(Ipv4Addr::new(20, 0, 0, 0)) + i * 256;
    for i in [0u32, 1, 2, 4242, 4243, 77_777, N - 2, N - 1] {
        let inside = Ipv4Addr::from(base(i) + 50).to_string();
        let outside = Ipv4Addr::from(base(i) + 230).to_string();
        let owner = NAMES[(i % 10) as usize];
        // Even slots: .0/25 (scope 25); odd: .10-.199, where .32/27 is the widest block.
        let (in_scope, out_scope) = if i.is_multiple_of(2) { (25, 25) } else { (27, 27) };
        let got = pick(&h, &table, "bignet", &inside, 32).await;
        assert_eq!(got, (owner, in_scope), "slot {i} {inside}");
        let got = pick(&h, &table, "bignet", &outside, 32).await;
        assert_eq!(got, ("rest", out_scope), "slot {i} {outside}");
    }
    // Past the last range.
    let past = Ipv4Addr::from(base(N) + 1).to_string();
    assert_eq!(pick(&h, &table, "bignet", &past, 32).await.0, "rest");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Performance
// ---------------------------------------------------------------------------------------

const FAST: &[(&str, &str)] = &[
    ("dublin", "192.0.2.41"),
    ("virginia", "192.0.2.42"),
    ("oregon", "192.0.2.43"),
    ("singapore", "192.0.2.44"),
    ("beijing", "192.0.2.45"),
    ("shanghai", "192.0.2.46"),
];

const FAST_NOEU: &[(&str, &str)] =
    &[("dublin", "192.0.2.51"), ("virginia", "192.0.2.52"), ("singapore", "192.0.2.54")];

const FAST_PAIR: &[(&str, &str)] =
    &[("dublin-1", "192.0.2.61"), ("dublin-2", "192.0.2.62"), ("virginia", "192.0.2.63")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn performance_picks_the_lowest_latency_region() {
    let h = Harness::location(&[]).await;
    // (client, source, endpoint, why)
    let cases: &[(&str, u8, &str, &str)] = &[
        (SHANGHAI, 32, "shanghai", "CIDR row 198.51.100.128/25 beats the CN row"),
        ("198.51.100.130", 32, "shanghai", "CIDR row"),
        (BEIJING, 32, "beijing", "CN row"),
        (SF, 32, "oregon", "US-CA row beats the US row"),
        (NYC, 32, "virginia", "US row"),
        (PARIS, 32, "dublin", "FR row"),
        ("100.80.3.4", 32, "dublin", "CIDR row 100.80.0.0/16"),
        ("2001:db8:1::", 48, "dublin", "IPv6 CIDR row"),
        (FRANKFURT, 32, "dublin", "no row: Dublin is the nearest region"),
        (SYDNEY, 32, "singapore", "no row: Singapore is the nearest region"),
        (TOKYO, 32, "shanghai", "no row: Shanghai is nearer than Beijing"),
    ];
    let mut failures = Vec::new();
    for (client, source, want, why) in cases {
        let (got, _) = pick(&h, FAST, "fast", client, *source).await;
        if got != *want {
            failures.push(format!("{client}/{source}: got {got}, want {want} ({why})"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn performance_scope_follows_the_row() {
    let h = Harness::location(&[]).await;
    // CIDR rows: the row's prefix or more, never more than the source.
    for (client, source, lo) in
        [(SHANGHAI, 32u8, 25u8), ("100.80.3.4", 32, 16), ("2001:db8:1::", 48, 48)]
    {
        let (_, scope) = pick(&h, FAST, "fast", client, source).await;
        assert!(
            scope >= lo && scope <= source,
            "{client}/{source}: scope /{scope}, want /{lo}..=/{source}"
        );
    }
    // A /16 source inside the /16 row: exactly 16.
    assert_eq!(pick(&h, FAST, "fast", "100.80.0.0", 16).await, ("dublin", 16));
    // Geo-located rows: at least the geo network (FR is a /25, DE a /24).
    let (_, scope) = pick(&h, FAST, "fast", PARIS, 32).await;
    assert!((25..=32).contains(&scope), "FR row: scope /{scope}");
    let (_, scope) = pick(&h, FAST, "fast", FRANKFURT, 32).await;
    assert!((24..=32).contains(&scope), "distance: scope /{scope}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn performance_skips_a_region_without_a_serving_endpoint() {
    let h = Harness::location(&[]).await;
    // fast-noeu: eu-west's only endpoint is disabled.
    for _ in 0..10 {
        // Distance from Frankfurt: Dublin (skipped), then Washington, then Singapore.
        assert_eq!(pick(&h, FAST_NOEU, "fast-noeu", FRANKFURT, 32).await.0, "virginia");
        // FR row: eu-west 18 ms (skipped), us-east 85 ms.
        assert_eq!(pick(&h, FAST_NOEU, "fast-noeu", PARIS, 32).await.0, "virginia");
        // Sydney is nearest Singapore anyway.
        assert_eq!(pick(&h, FAST_NOEU, "fast-noeu", SYDNEY, 32).await.0, "singapore");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn performance_shares_a_region_per_client_subnet() {
    let h = Harness::location(&[]).await;
    // fast-pair: dublin-1 and dublin-2 in eu-west; 100.80.0.0/16 is closest to eu-west.
    let mut per_subnet = BTreeMap::new();
    for n in 0..200u8 {
        let first = pick(&h, FAST_PAIR, "fast-pair", &format!("100.80.{n}.1"), 32).await;
        assert!(first.0.starts_with("dublin-"), "100.80.{n}.1: {first:?}");
        assert!(first.1 >= 24, "the /24 decides within the region: {first:?}");
        // Every address of the /24, again and again, gets the same endpoint.
        for host in [1u8, 2, 77, 128, 254, 1] {
            let client = format!("100.80.{n}.{host}");
            let again = pick(&h, FAST_PAIR, "fast-pair", &client, 32).await;
            assert_eq!(again.0, first.0, "100.80.{n}.{host} left its /24's endpoint");
        }
        let again = pick(&h, FAST_PAIR, "fast-pair", &format!("100.80.{n}.0"), 24).await;
        assert_eq!(again.0, first.0, "ECS /24 of 100.80.{n}.0");
        *per_subnet.entry(first.0).or_insert(0usize) += 1;
    }
    // Across many /24s both endpoints are used, about evenly.
    let one = per_subnet.get("dublin-1").copied().unwrap_or(0);
    let two = per_subnet.get("dublin-2").copied().unwrap_or(0);
    assert!((60..=140).contains(&one) && (60..=140).contains(&two), "{per_subnet:?}");
    assert!(!per_subnet.contains_key("virginia"), "{per_subnet:?}");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Groups (traffic dial)
// ---------------------------------------------------------------------------------------

const GA: &[(&str, &str)] = &[
    ("bj-1", "198.51.100.1"),
    ("sh-1", "198.51.100.2"),
    ("bj-2", "198.51.100.3"),
    ("bj-3", "198.51.100.4"),
];

fn assert_share(counts: &BTreeMap<&str, usize>, endpoint: &str, want: f64, what: &str) {
    let got = share(counts, endpoint);
    assert!(
        (got - want).abs() <= TOLERANCE,
        "{what}: {endpoint} got {:.1}%, want {:.1}% ± {:.0} points: {counts:?}",
        got * 100.0,
        want * 100.0,
        TOLERANCE * 100.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_seed_examples_on_the_wire() {
    let h = Harness::location(&[]).await;
    // Beijing clients: the CN row puts cn-beijing (20 ms) before cn-shanghai (30 ms).
    // (profile, share of the closest group beijing)
    let cases: &[(&str, f64)] = &[
        ("ga-100-100", 1.0),
        ("ga-50-100", 0.5),
        ("ga-30-100", 0.3),
        ("ga-50-50", 0.625),
        ("ga-1-100", 0.01),
        ("ga-0-100", 0.0),
    ];
    for (profile, bj) in cases {
        let counts = tally(&h, GA, profile, BEIJING, DRAWS).await;
        assert_eq!(counts.values().sum::<usize>(), DRAWS);
        assert_share(&counts, "bj-1", *bj, profile);
        assert_share(&counts, "sh-1", 1.0 - bj, profile);
        // Exact ends: 100/100 sends nothing away, 0/100 keeps nothing, 1/100 keeps some.
        match *profile {
            "ga-100-100" => assert_eq!(counts.get("sh-1"), None, "{counts:?}"),
            "ga-0-100" => assert_eq!(counts.get("bj-1"), None, "{counts:?}"),
            "ga-1-100" => assert!(counts.get("bj-1").is_some_and(|&c| c > 0), "{counts:?}"),
            _ => {}
        }
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_closest_group_unhealthy_next_takes_everything() {
    let h = Harness::location(&[]).await;
    // ga-down: beijing (dial 50) has only disabled endpoints; shanghai has dial 0 and
    // still takes all the traffic: dials are ignored when the first group is unhealthy.
    let counts = tally(&h, GA, "ga-down", BEIJING, DRAWS).await;
    assert_eq!(counts.get("sh-1"), Some(&DRAWS), "{counts:?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_endpoint_weights_inside_a_group() {
    let h = Harness::location(&[]).await;
    // ga-weights: beijing (dial 100) holds bj-1 (192), bj-2 (64), bj-3 (0).
    let counts = tally(&h, GA, "ga-weights", BEIJING, DRAWS).await;
    assert_share(&counts, "bj-1", 0.75, "weight 192 of 256");
    assert_share(&counts, "bj-2", 0.25, "weight 64 of 256");
    assert_eq!(counts.get("bj-3"), None, "weight 0 takes nothing: {counts:?}");
    assert_eq!(counts.get("sh-1"), None, "dial 100: nothing leaves beijing: {counts:?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_closest_group_depends_on_the_client() {
    let h = Harness::location(&[]).await;
    // ga-50-50: Beijing clients (CN row) have beijing first, Shanghai clients (CIDR row
    // 198.51.100.128/25) shanghai: opposite 62.5/37.5 splits.
    let bj = tally(&h, GA, "ga-50-50", BEIJING, DRAWS).await;
    assert_share(&bj, "bj-1", 0.625, "Beijing client");
    let sh = tally(&h, GA, "ga-50-50", SHANGHAI, DRAWS).await;
    assert_share(&sh, "sh-1", 0.625, "Shanghai client");
    assert_share(&sh, "bj-1", 0.375, "Shanghai client");
    // ga-30-100: beijing keeps 30% of Beijing clients, but shanghai (dial 100) is first for
    // Shanghai clients and takes all of them.
    let sh = tally(&h, GA, "ga-30-100", SHANGHAI, 500).await;
    assert_eq!(sh.get("sh-1"), Some(&500), "{sh:?}");
    h.stop().await;
}

const GA_FIVE: &[(&str, &str)] = &[
    ("eu-1", "203.0.113.1"),
    ("use-1", "203.0.113.2"),
    ("usw-1", "203.0.113.3"),
    ("ap-1", "203.0.113.4"),
    ("bj-1", "203.0.113.5"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_failover_tries_at_most_three_more_groups() {
    let h = Harness::location(&[]).await;
    // Paris (FR row): eu, use, usw, ap, bj. ga-five-3: eu, use and usw are disabled, so
    // ap (the third group after the first) takes everything, its dial 10% ignored.
    let counts = tally(&h, GA_FIVE, "ga-five-3", PARIS, 500).await;
    assert_eq!(counts.get("ap-1"), Some(&500), "{counts:?}");
    // ga-five-4: ap is disabled too; bj is healthy but is the fourth after the first, so
    // it is not tried; failing open to eu finds only disabled endpoints: NODATA.
    for _ in 0..20 {
        nodata(&h, "ga-five-4", PARIS, 32).await;
    }
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Zone (same zone first)
// ---------------------------------------------------------------------------------------

const SVC: &[(&str, &str)] = &[
    ("a1", "192.0.2.101"),
    ("a2", "192.0.2.102"),
    ("a3", "192.0.2.103"),
    ("b1", "192.0.2.111"),
    ("b2", "192.0.2.112"),
    ("b3", "192.0.2.113"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_same_zone_first_with_a_safety_threshold() {
    let h = Harness::location(&[]).await;
    let all = set(&["a1", "a2", "b1", "b2", "b3"]);
    // topology: zone-a 10.1.0.0/16 and 2001:db8:20::/48, zone-b 10.2.0.0/16.
    // (profile, client, source, endpoints that answer)
    let cases: Vec<(&str, &str, u8, BTreeSet<&str>)> = vec![
        // zone-a holds 2 of the 5 serving endpoints (a3 is disabled): 40% ≥ 20%.
        ("svc", "10.1.2.3", 32, set(&["a1", "a2"])),
        ("svc", "10.1.0.0", 24, set(&["a1", "a2"])),
        ("svc", "2001:db8:20::", 56, set(&["a1", "a2"])),
        ("svc", "10.2.9.9", 32, set(&["b1", "b2", "b3"])),
        // Unknown client network: every serving endpoint.
        ("svc", "172.16.0.1", 32, all.clone()),
        ("svc", "10.3.0.1", 32, all.clone()),
        // 40% < 50%: every endpoint serves zone-a clients.
        ("svc-strict", "10.1.2.3", 32, all.clone()),
        // 60% ≥ 50% for zone-b.
        ("svc-strict", "10.2.9.9", 32, set(&["b1", "b2", "b3"])),
        // Exactly at the threshold (40%): same zone.
        ("svc-edge", "10.1.2.3", 32, set(&["a1", "a2"])),
    ];
    for (profile, client, source, want) in cases {
        let got = seen(&h, SVC, profile, client, source, 300).await;
        assert_eq!(got, want, "{profile} from {client}/{source}");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_scope_is_the_topology_network() {
    let h = Harness::location(&[]).await;
    for (client, source, scope) in [
        ("10.1.2.3", 32u8, 16u8),
        ("10.1.0.0", 24, 16),
        ("10.1.0.0", 16, 16),
        ("10.2.9.9", 32, 16),
        ("2001:db8:20::", 56, 48),
        ("2001:db8:20:1::", 64, 48),
    ] {
        for _ in 0..5 {
            let (_, got) = pick(&h, SVC, "svc", client, source).await;
            assert_eq!(got, scope, "{client}/{source}");
        }
    }
    // A source shorter than the availability zone's network: 10.0.0.0 is in no zone, and
    // the answer holds for 10.0.0.0/16 only (10.1.0.0/16 is zone-a), longer than the source.
    let (_, got) = pick(&h, SVC, "svc", "10.0.0.0", 8).await;
    assert_eq!(got, 16, "10.0.0.0/8: scope /{got}");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Geoproximity
// ---------------------------------------------------------------------------------------

const NEAR: &[(&str, &str)] = &[
    ("dublin", "192.0.2.201"),
    ("frankfurt", "192.0.2.202"),
    ("virginia", "192.0.2.203"),
    ("tokyo", "192.0.2.204"),
];

const NEAR_BIASED: &[(&str, &str)] = &[
    ("dublin", "192.0.2.211"),
    ("frankfurt", "192.0.2.212"),
    ("virginia", "192.0.2.213"),
    ("tokyo", "192.0.2.214"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geoproximity_answers_the_nearest_endpoint_with_the_networks_scope() {
    let h = Harness::location(&[]).await;
    // Great-circle distances, rounded (any atlas): Paris–Frankfurt 478 km, Paris–Dublin
    // 781 km; New York–Washington 330 km; San Francisco–Washington 3,900 km,
    // –Dublin 8,200 km, –Tokyo 8,300 km; Beijing–Tokyo 2,100 km; Sydney–Tokyo 7,800 km;
    // São Paulo–Washington 7,600 km, –Dublin 9,400 km; London–Dublin 460 km,
    // London–Frankfurt 640 km. The scope is the database network of the client.
    // (client, ECS source, endpoint, scope)
    let cases: &[(&str, u8, &str, u8)] = &[
        (PARIS, 32, "frankfurt", 25),
        ("192.0.2.0", 24, "frankfurt", 25), // the /25 network, longer than the source
        (FRANKFURT, 32, "frankfurt", 24),
        (NYC, 32, "virginia", 24),
        (SF, 32, "virginia", 25),
        (SAO_PAULO, 32, "virginia", 24),
        (BEIJING, 32, "tokyo", 25),
        (SHANGHAI, 32, "tokyo", 25),
        (TOKYO, 32, "tokyo", 22),
        (SYDNEY, 32, "tokyo", 24),
        ("2001:db8:1::", 48, "dublin", 48),
        ("2001:db8:1:ff00::", 56, "dublin", 48),
    ];
    let mut failures = Vec::new();
    for (client, source, want, scope) in cases {
        let got = pick(&h, NEAR, "near", client, *source).await;
        if got != (*want, *scope) {
            failures.push(format!("{client}/{source}: got {got:?}, want {want} /{scope}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // No location: the first endpoint in configuration order.
    assert_eq!(pick(&h, NEAR, "near", NOWHERE, 32).await.0, "dublin");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geoproximity_bias_grows_and_shrinks_what_an_endpoint_serves() {
    let h = Harness::location(&[]).await;
    // Dublin +50 counts half its distance; Virginia -99 counts 1.99 times its own.
    // (client, endpoint, why)
    let cases: &[(&str, &str, &str)] = &[
        (PARIS, "dublin", "781 × 0.5 = 390 km < Frankfurt 478 km"),
        (FRANKFURT, "frankfurt", "0 km"),
        (NYC, "virginia", "330 × 1.99 = 660 km < Dublin 5,100 × 0.5 = 2,550 km"),
        (SF, "dublin", "8,200 × 0.5 = 4,100 km < Virginia 3,900 × 1.99 = 7,800 km"),
        (BEIJING, "tokyo", "2,100 km < Dublin 8,300 × 0.5 = 4,150 km"),
    ];
    let mut failures = Vec::new();
    for (client, want, why) in cases {
        let (got, _) = pick(&h, NEAR_BIASED, "near-biased", client, 32).await;
        if got != *want {
            failures.push(format!("{client}: got {got}, want {want} ({why})"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

/// Loads a location configuration whose only profile file is `p.yaml`; every error as
/// "p.yaml:LINE:COL: message" (file name only).
fn errors_of(profile: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    write_location_config(dir.path(), &[("p.yaml".into(), profile.into())]);
    match steerdns::config::load(&dir.path().join("steerdns.yaml"), None) {
        Ok(_) => vec![],
        Err(e) => located(&e),
    }
}

#[test]
fn location_validation_errors_are_located() {
    // (profile YAML, expected "file:line:col" prefix, expected message fragment)
    let cases: &[(&str, &str, &str)] = &[
        (
            "name: g\nrouting: geographic\nendpoints:\n  - { name: a, target: 192.0.2.1, geo: [FR, XX-YY] }\n",
            "p.yaml:4:45",
            "unknown region code \"XX-YY\"",
        ),
        (
            "name: g\nrouting: geographic\nendpoints:\n  - { name: a, target: 192.0.2.1, geo: [FR] }\n  - { name: b, target: 192.0.2.2, geo: [DE, fr] }\n",
            "p.yaml:5:45",
            "region code FR is already mapped to endpoint a",
        ),
        (
            "name: s\nrouting: subnet\nendpoints:\n  - { name: a, target: 192.0.2.1, subnets: [\"10.0.0.0/8\"] }\n  - { name: b, target: 192.0.2.2, subnets: [\"10.1.0.0-10.1.0.9\"] }\n",
            "p.yaml:5:45",
            "overlaps",
        ),
        (
            "name: s\nrouting: subnet\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n  - { name: b, target: 192.0.2.2 }\n",
            "p.yaml:5:5",
            "more than one fallback endpoint",
        ),
        (
            "name: s\nrouting: subnet\nendpoints:\n  - { name: a, target: 192.0.2.1, subnets: [\"192.0.2.20-192.0.2.10\"] }\n",
            "p.yaml:4:45",
            "starts after it ends",
        ),
        (
            "name: s\nrouting: subnet\nendpoints:\n  - { name: a, target: 192.0.2.1, subnets: [\"10.0.0.1/8\"] }\n",
            "p.yaml:4:45",
            "host bits set",
        ),
        (
            "name: f\nrouting: performance\nendpoints:\n  - { name: a, target: 192.0.2.1, location: mars-north }\n",
            "p.yaml:4:45",
            "location \"mars-north\" is not a region of the latency table",
        ),
        (
            "name: n\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, location: mars-north }\n",
            "p.yaml:4:45",
            "location \"mars-north\" is not a region of the latency table",
        ),
        (
            "name: n\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, location: eu-west, coordinates: { latitude: 1, longitude: 2 } }\n",
            "p.yaml:4:45",
            "give coordinates or location, not both",
        ),
        (
            "name: z\nrouting: zone\nendpoints:\n  - { name: a, target: 192.0.2.1, zone: zone-z }\n",
            "p.yaml:4:41",
            "zone \"zone-z\" is not in topology.zones",
        ),
        (
            "name: ga\nrouting: groups\ngroups:\n  - name: g\n    location: eu-west\n    traffic_dial: 101\n    endpoints:\n      - { name: a, target: 192.0.2.1 }\n",
            "p.yaml:6:19",
            "traffic_dial must be between 0 and 100",
        ),
        (
            "name: ga\nrouting: groups\ngroups:\n  - name: g\n    location: eu-west\n    endpoints:\n      - { name: a, target: 192.0.2.1, weight: 256 }\n",
            "p.yaml:7:47",
            "weight must be between 0 and 255",
        ),
    ];
    let mut failures = Vec::new();
    for (i, (yaml, at, msg)) in cases.iter().enumerate() {
        let errors = errors_of(yaml);
        if !errors.iter().any(|e| e.starts_with(&format!("{at}: ")) && e.contains(msg)) {
            failures.push(format!("case {i}: want {at}: ..{msg}.., got {errors:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn location_profiles_fixture_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    write_location_config(dir.path(), &location_profiles());
    let snap = steerdns::config::load(&dir.path().join("steerdns.yaml"), None)
        .unwrap_or_else(|e| panic!("{e}"))
        .snapshot;
    assert!(snap.profiles.len() >= 15, "{} profiles", snap.profiles.len());
    assert!(Path::new(&dir.path().join("data/city.mmdb")).is_file());
}
