//! The query path allocates nothing in steady state: a counting global allocator watches
//! the responder answer the common query kinds (routing methods, static records, NXDOMAIN,
//! ECS) from request bytes to response bytes, signed too (DNSSEC, signatures from the
//! pre-signed table and the thread's cache), and the same with every exchange handed to
//! the dnstap query log (its writer thread included); and the AF_XDP fast path's work on a
//! frame, from the query's Ethernet frame to the reply's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use rand::SeedableRng;
use steerdns::model::dnssec::{self, Algorithm, Signer, ZoneKey, ZoneSigning};
use steerdns::model::presigned;
use steerdns::model::snapshot::{Dnstap, DnstapOutput, Snapshot};
use steerdns::responder::{Packet, Transport, respond};
use steerdns::server::dnstap::{Exchange, Tap, Time};

#[path = "common/measured.rs"]
mod measured;
use measured::measured_table;

#[path = "common/frames.rs"]
mod frames;
use frames::UdpFrame;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the thread of the test that holds the turn.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

/// Whether an allocation on this thread counts: on the measuring test's thread and on any
/// thread the code under test starts (the dnstap writer), but not on the process's main
/// thread unless it is the one measuring. The test harness reports finished tests from the
/// main thread, and under load that report can land in the next test's window.
fn counts_here() -> bool {
    // SAFETY: gettid and getpid take no arguments and cannot fail.
    let main = unsafe { libc::gettid() == libc::getpid() };
    MEASURING.try_with(Cell::get).unwrap_or(false) || !main
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counts_here() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counts_here() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The count is global: the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// A test's turn: the lock, and this thread marked as the measuring one until it ends.
struct Turn(#[allow(dead_code)] MutexGuard<'static, ()>);

fn turn() -> Turn {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    MEASURING.with(|m| m.set(true));
    Turn(guard)
}

impl Drop for Turn {
    fn drop(&mut self) {
        MEASURING.with(|m| m.set(false));
    }
}

fn query(name: &str, rtype: RecordType, ecs: Option<&str>) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    if let Some(subnet) = ecs {
        let mut edns = Edns::new();
        edns.options_mut().insert(EdnsOption::Subnet(subnet.parse::<ClientSubnet>().unwrap()));
        m.set_edns(edns);
    }
    m.to_vec().unwrap()
}

/// The same query with an OPT record with DO set.
fn with_do(name: &str, rtype: RecordType, ecs: Option<&str>) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    let mut edns = Edns::new();
    edns.set_dnssec_ok(true);
    if let Some(subnet) = ecs {
        edns.options_mut().insert(EdnsOption::Subnet(subnet.parse::<ClientSubnet>().unwrap()));
    }
    m.set_edns(edns);
    m.to_vec().unwrap()
}

/// An Ed25519 zone key from a fixed seed.
fn zone_key(flags: u16, seed: u8) -> ZoneKey {
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let pair = Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap();
    let public = pair.public_key().as_ref().to_vec();
    let rdata = dnssec::dnskey_rdata(flags, Algorithm::Ed25519, &public);
    ZoneKey {
        flags,
        algorithm: Algorithm::Ed25519,
        key_tag: dnssec::key_tag(&rdata),
        signer: Some(Signer::new(Algorithm::Ed25519, &[seed; 32], &public).unwrap()),
        public_key: public.into(),
        timing: Default::default(),
        source: "test".into(),
    }
}

/// An A query for `name` with ECS and a COOKIE option holding a client cookie only.
fn with_cookie(name: &str, subnet: &str) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    let mut edns = Edns::new();
    edns.options_mut().insert(EdnsOption::Subnet(subnet.parse::<ClientSubnet>().unwrap()));
    edns.options_mut().insert(EdnsOption::Unknown(10, vec![1, 2, 3, 4, 5, 6, 7, 8]));
    m.set_edns(edns);
    m.to_vec().unwrap()
}

fn example() -> steerdns::config::Loaded {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    steerdns::config::load(&root.join("steerdns.yaml"), None).unwrap()
}

/// One query of each kind.
fn queries() -> Vec<Vec<u8>> {
    vec![
        query("www.tm.example.test.", RecordType::A, None),
        query("api.tm.example.test.", RecordType::A, Some("198.51.100.0/24")),
        query("app.tm.example.test.", RecordType::A, Some("203.0.113.0/24")),
        query("pool.tm.example.test.", RecordType::A, None),
        query("global.tm.example.test.", RecordType::A, None),
        query("www.tm.example.test.", RecordType::AAAA, None),
        query("info.tm.example.test.", RecordType::TXT, None),
        query("tm.example.test.", RecordType::NS, None),
        query("missing.tm.example.test.", RecordType::A, None),
        query("www.elsewhere.test.", RecordType::A, None),
        query("geo.tm.example.test.", RecordType::A, Some("192.0.2.128/25")),
        query("office.tm.example.test.", RecordType::A, Some("198.51.100.15/32")),
        query("fast.tm.example.test.", RecordType::A, Some("198.51.100.130/32")),
        query("fast.tm.example.test.", RecordType::A, Some("192.0.2.0/24")),
        query("accel.tm.example.test.", RecordType::A, Some("198.51.100.0/24")),
        query("svc.tm.example.test.", RecordType::A, Some("10.1.0.0/16")),
        query("near.tm.example.test.", RecordType::A, Some("192.0.2.0/25")),
        query("near.tm.example.test.", RecordType::A, Some("100.100.0.0/16")),
        query("docs.tm.example.test.", RecordType::A, None),
        with_cookie("www.tm.example.test.", "198.51.100.0/24"),
    ]
}

#[test]
fn responder_allocates_nothing_per_query() {
    let _turn = turn();
    let loaded = example();
    // The same configuration with run-time overrides: drained endpoints met by the
    // priority, geographic (compiled) and subnet lookups, a run-time weight and bias.
    let mut overrides = steerdns::config::Overrides::default();
    let drained = steerdns::config::Override { drained: true, ..Default::default() };
    for (profile, endpoint) in [("www", "primary"), ("geo", "us-west"), ("office", "vpn")] {
        overrides.set(&format!("{profile}.tm.example.test."), endpoint, drained);
    }
    let weighed = steerdns::config::Override { weight: Some(7), ..Default::default() };
    overrides.set("api.tm.example.test.", "site-b", weighed);
    let biased = steerdns::config::Override { bias: Some(-40), ..Default::default() };
    overrides.set("near.tm.example.test.", "frankfurt", biased);
    let overridden = steerdns::config::rebuild(loaded.previous(), &overrides);
    assert!(overridden.dropped.is_empty(), "{:?}", overridden.dropped);
    for snap in [&loaded.snapshot, &overridden.snapshot] {
        allocates_nothing(snap, &queries());
    }
}

/// Asserts that `snap` answers every one of `queries`, and then all of them a thousand
/// times over without an allocation.
fn allocates_nothing(snap: &Snapshot, queries: &[Vec<u8>]) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut out = Vec::with_capacity(1500);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    let mut ask = |q: &[u8]| {
        let packet =
            Packet { bytes: q, src, transport: Transport::Udp, now: 1_800_000_000, measured: None };
        respond(snap, &*snap.health, packet, &mut rng, &mut out, None).is_some()
    };
    // Warm up: the output buffer reaches its working size.
    for q in queries {
        assert!(ask(q));
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    assert!(before > 0, "the counting allocator is in use");
    for _ in 0..1000 {
        for q in queries {
            ask(q);
        }
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(allocs, 0, "{allocs} allocations in {} queries", 1000 * queries.len());
}

#[test]
fn performance_with_measurements_allocates_nothing() {
    let _turn = turn();
    let loaded = example();
    let snap = &loaded.snapshot;
    let measured = measured_table(snap);
    let queries = [
        query("fast.tm.example.test.", RecordType::A, Some("198.51.100.130/32")),
        query("fast.tm.example.test.", RecordType::A, Some("198.51.7.0/24")),
        query("fast.tm.example.test.", RecordType::A, Some("192.0.2.0/24")),
        query("fast.tm.example.test.", RecordType::A, None),
    ];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut out = Vec::with_capacity(1500);
    let src: IpAddr = "203.0.113.9".parse().unwrap();
    let mut ask = |q: &[u8], out: &mut Vec<u8>| {
        let now = 1_800_000_000;
        let packet =
            Packet { bytes: q, src, transport: Transport::Udp, now, measured: Some(&measured) };
        respond(snap, &*snap.health, packet, &mut rng, out, None).is_some()
    };
    for q in &queries {
        assert!(ask(q, &mut out));
    }
    // The measured path is the one taken: us-east (25 ms) answers, not the latency
    // table's cn-shanghai.
    assert!(ask(&queries[0], &mut out));
    let reply = Message::from_vec(&out).unwrap();
    assert_eq!(reply.answers[0].data.to_string(), "192.0.2.82", "{reply:?}");
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        for q in &queries {
            ask(q, &mut out);
        }
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(allocs, 0, "{allocs} allocations in {} queries", 1000 * queries.len());
}

#[test]
fn logging_queries_in_dnstap_allocates_nothing() {
    let _turn = turn();
    let snap = example().snapshot;
    let queries = queries();
    let out = tempfile::tempdir().unwrap();
    let config = Dnstap {
        output: DnstapOutput::File(out.path().join("queries.fstrm")),
        sample: 1.0,
        identity: "ns1".into(),
        version: "steerdns".into(),
    };
    let tap = Tap::start(&config).unwrap();
    let stats = tap.stats();
    let mut udp = tap.udp();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut reply = Vec::with_capacity(1500);
    let client: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let server: SocketAddr = "127.0.0.1:53".parse().unwrap();
    let mut round = || {
        for q in &queries {
            let now = Time::now();
            let packet = Packet {
                bytes: q,
                src: client.ip(),
                transport: Transport::Udp,
                now: 1,
                measured: None,
            };
            let answered = respond(&snap, &*snap.health, packet, &mut rng, &mut reply, None);
            assert!(answered.is_some() && udp.sampled(&mut rng));
            let response = Some((&reply[..], Time::now()));
            let ex = Exchange {
                transport: Transport::Udp,
                client,
                server,
                query: q,
                query_time: now,
                response,
            };
            udp.offer(&ex);
        }
        udp.flush();
    };
    // Every message the writer has taken, written or not.
    let taken = || {
        [&stats.sent, &stats.dropped_queue_full, &stats.dropped_disconnected]
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let wait_for_writer = |messages: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while taken() < messages {
            assert!(Instant::now() < deadline, "the writer took {} of {messages}", taken());
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Warm up: every buffer, the writer's too, reaches its working size.
    round();
    let per_round = 2 * queries.len() as u64;
    wait_for_writer(per_round);
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..100 {
        round();
    }
    wait_for_writer(101 * per_round);
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(allocs, 0, "{allocs} allocations in {} logged queries", 100 * queries.len());
    drop(udp);
    tap.finish();
}

#[test]
fn signed_answers_from_the_caches_allocate_nothing() {
    let _turn = turn();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut snap = steerdns::config::load(&root.join("steerdns.yaml"), None).unwrap().snapshot;
    let keys = vec![zone_key(dnssec::FLAGS_KSK, 1), zone_key(dnssec::FLAGS_ZSK, 2)];
    for zone in &mut snap.zones {
        zone.dnssec =
            Some(ZoneSigning { keys: keys.clone(), validity: 14 * 86400, inception_offset: 3600 });
    }
    let now = 1_800_000_000u32;
    let known = presigned::known_rrsets(&snap, now.into());
    let (table, _) = presigned::build(&snap, &known, None, now, 3600, 1);
    snap.signatures.store(std::sync::Arc::new(table));
    let queries = [
        with_do("www.tm.example.test.", RecordType::A, None),
        with_do("WwW.tm.example.test.", RecordType::AAAA, None),
        with_do("api.tm.example.test.", RecordType::A, Some("198.51.100.0/24")),
        with_do("pool.tm.example.test.", RecordType::A, None),
        with_do("global.tm.example.test.", RecordType::A, None),
        with_do("geo.tm.example.test.", RecordType::A, Some("192.0.2.128/25")),
        with_do("docs.tm.example.test.", RecordType::A, None),
        with_do("info.tm.example.test.", RecordType::TXT, None),
        with_do("tm.example.test.", RecordType::NS, None),
        with_do("tm.example.test.", RecordType::SOA, None),
        with_do("tm.example.test.", RecordType::DNSKEY, None),
        with_do("tm.example.test.", RecordType::CDS, None),
        with_do("missing.tm.example.test.", RecordType::A, None),
        with_do("www.tm.example.test.", RecordType::MX, None),
        with_do("www.elsewhere.test.", RecordType::A, None),
    ];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut out = Vec::with_capacity(1500);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    let mut ask = |q: &[u8]| {
        let packet = Packet { bytes: q, src, transport: Transport::Udp, now, measured: None };
        respond(&snap, &*snap.health, packet, &mut rng, &mut out, None).is_some()
    };
    // Warm up: every answer (multivalue subsets too) has been signed once and is cached.
    for _ in 0..100 {
        for q in &queries {
            assert!(ask(q));
        }
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        for q in &queries {
            assert!(ask(q));
        }
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(allocs, 0, "{allocs} allocations in {} signed queries", 1000 * queries.len());
}

// ---- Profiles past every inline size -------------------------------------------------------
// Routing keeps its candidate lists, group plans and region rankings in per-thread scratch
// space, so a profile of any size answers without allocating once the space has grown.

/// How many of each thing the large profiles hold: past any small inline size.
const MANY_ENDPOINTS: usize = 40;
const MANY_GROUPS: usize = 10;
const GROUP_ENDPOINTS: usize = 30;
const MANY_REGIONS: usize = 40;

/// A latency table of `MANY_REGIONS` regions with rows listing every one of them.
fn many_regions_table() -> String {
    let mut t = String::from("regions:\n");
    for r in 0..MANY_REGIONS {
        let (lat, lon) = (-80.0 + 4.0 * r as f64, -170.0 + 8.5 * r as f64);
        t += &format!("  r{r:02}: {{ lat: {lat}, lon: {lon} }}\n");
    }
    t += "rtt:\n";
    for (from, base) in [("\"198.51.100.0/24\"", 5), ("FR", 40), ("WORLD", 90)] {
        let to: Vec<String> =
            (0..MANY_REGIONS).map(|r| format!("r{r:02}: {}", base + (r * 7) % 50)).collect();
        t += &format!("  - from: {from}\n    to: {{ {} }}\n", to.join(", "));
    }
    t
}

/// One endpoint line; `extra` holds the method's keys.
fn endpoint(name: &str, target: &str, extra: &str) -> String {
    format!("  - {{ name: {name}, target: \"{target}\", always_serve: true{extra} }}\n")
}

/// Profiles of every routing method, each past the inline sizes.
fn many_profiles() -> String {
    let n = MANY_ENDPOINTS;
    let v4 = |i: usize| format!("192.0.2.{}", i + 1);
    let mut docs = Vec::new();
    for (name, routing, sticky) in [
        ("many-weighted", "weighted", false),
        ("many-sticky", "weighted", true),
        ("many-priority", "priority", false),
    ] {
        let mut d = format!("name: {name}\nrouting: {routing}\nsticky: {sticky}\nendpoints:\n");
        if routing == "priority" {
            d = d.replace("sticky: false\n", "");
        }
        for i in 0..n {
            let w =
                if routing == "weighted" { format!(", weight: {}", 1 + i % 5) } else { "".into() };
            d += &endpoint(&format!("e{i}"), &v4(i), &w);
        }
        docs.push(d);
    }
    let mut d = "name: many-multi\nrouting: multivalue\nmax_return: 10\nendpoints:\n".to_string();
    for i in 0..n {
        d += &endpoint(&format!("e{i}"), &v4(i), "");
        d += &endpoint(&format!("x{i}"), &format!("2001:db8::{:x}", i + 1), "");
    }
    docs.push(d);
    // Half the endpoints in the nearest region of the measured clients, so one region holds
    // more than any inline size.
    let mut d = "name: many-fast\nrouting: performance\nendpoints:\n".to_string();
    for i in 0..n {
        let region = if i < n / 2 { 0 } else { i % MANY_REGIONS };
        d += &endpoint(&format!("e{i}"), &v4(i), &format!(", location: r{region:02}"));
    }
    docs.push(d);
    let mut d = "name: many-zone\nrouting: zone\nsafety_threshold: 10\nendpoints:\n".to_string();
    for i in 0..n {
        let zone = if i < 3 * n / 4 { "zone-a" } else { "zone-b" };
        d += &endpoint(&format!("e{i}"), &v4(i), &format!(", zone: {zone}"));
    }
    docs.push(d);
    let mut d = "name: many-geo\nrouting: geographic\nendpoints:\n".to_string();
    for (i, code) in ["FR", "US-CA", "CN", "GEO-EU", "GEO-NA", "GEO-AS", "WORLD"].iter().enumerate()
    {
        d += &endpoint(&format!("e{i}"), &v4(i), &format!(", geo: [{code}]"));
    }
    docs.push(d);
    let mut d = "name: many-groups\nrouting: groups\nsticky: false\ngroups:\n".to_string();
    for g in 0..MANY_GROUPS {
        let size = if g == 0 { GROUP_ENDPOINTS } else { 3 };
        d += &format!(
            "  - name: g{g}\n    location: r{g:02}\n    traffic_dial: 10\n    endpoints:\n"
        );
        for i in 0..size {
            let ep =
                endpoint(&format!("g{g}-{i}"), &format!("198.51.100.{}", g * 20 + i % 20 + 1), "");
            d += &format!("    {ep}");
        }
    }
    docs.push(d);
    // Nested: a weighted parent of the large profiles (they all answer A).
    let mut d = "name: many-nested\nrouting: weighted\nendpoints:\n".to_string();
    for (i, child) in ["many-weighted", "many-sticky", "many-multi", "many-fast", "many-groups"]
        .iter()
        .cycle()
        .take(20)
        .enumerate()
    {
        d += &format!("  - {{ name: n{i}, profile: {child}.tm.example.test. }}\n");
    }
    docs.push(d);
    docs.join("---\n")
}

/// The example configuration with its profiles replaced by `many_profiles` and its latency
/// table by one of `MANY_REGIONS` regions.
fn many_config(dir: &Path) -> Snapshot {
    many_config_with(dir, &many_profiles())
}

/// `many_config` with `profiles` as its one profile file.
fn many_config_with(dir: &Path, profiles: &str) -> Snapshot {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("steerdns.yaml")).unwrap();
    let yaml = example
        .replace(
            "geo-data/sample-city.mmdb",
            &root.join("geo-data/sample-city.mmdb").display().to_string(),
        )
        .replace("geo-data/latency.yaml", "latency.yaml")
        .replace(
            "zones/tm.example.test.zone",
            &root.join("zones/tm.example.test.zone").display().to_string(),
        );
    // Flattened names need a resolver; none is asked here.
    let yaml = format!("{yaml}flatten:\n  resolvers: [\"127.0.0.1\"]\n");
    std::fs::write(dir.join("steerdns.yaml"), yaml).unwrap();
    std::fs::write(dir.join("latency.yaml"), many_regions_table()).unwrap();
    std::fs::create_dir(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("profiles/many.yaml"), profiles).unwrap();
    steerdns::config::load(&dir.join("steerdns.yaml"), None).unwrap().snapshot
}

#[test]
fn profiles_past_every_inline_size_allocate_nothing() {
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    assert_many_allocate_nothing(&many_config(dir.path()));
}

/// The same profiles with every endpoint fed and load shares set (some spilling, some
/// above high, some at 0): the draws and spills allocate nothing either.
#[test]
fn queries_with_load_shares_allocate_nothing() {
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    let fed = many_profiles()
        .replace("always_serve: true", "always_serve: true, load: { capacity: 100, pushed: true }");
    let snap = many_config_with(dir.path(), &fed);
    assert!(snap.load_rules.is_some(), "the endpoints are fed");
    for slot in 0..snap.load.len() {
        let (share, above_high) = match slot % 4 {
            0 => (0.5, false),
            1 => (0.0, false),
            2 => (0.3, true),
            _ => (1.0, false),
        };
        snap.load.set(slot, share, above_high);
    }
    assert_many_allocate_nothing(&snap);
}

fn assert_many_allocate_nothing(snap: &Snapshot) {
    let clients =
        ["198.51.100.0/24", "192.0.2.0/24", "192.0.2.128/25", "10.1.0.0/16", "203.0.113.0/24"];
    let names = [
        "many-weighted",
        "many-sticky",
        "many-priority",
        "many-multi",
        "many-fast",
        "many-zone",
        "many-geo",
        "many-groups",
        "many-nested",
    ];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut out = Vec::with_capacity(1500);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    let mut per_profile = Vec::new();
    for name in names {
        let fqdn = format!("{name}.tm.example.test.");
        let mut qs: Vec<Vec<u8>> = Vec::new();
        for c in clients {
            qs.push(query(&fqdn, RecordType::A, Some(c)));
            qs.push(query(&fqdn, RecordType::AAAA, Some(c)));
        }
        let mut ask = |q: &[u8]| {
            let packet = Packet {
                bytes: q,
                src,
                transport: Transport::Udp,
                now: 1_800_000_000,
                measured: None,
            };
            respond(snap, &*snap.health, packet, &mut rng, &mut out, None).is_some()
        };
        // Warm up: the scratch space and the output buffer reach their working sizes.
        for _ in 0..10 {
            for q in &qs {
                assert!(ask(q), "{name} is answered");
            }
        }
        let before = ALLOCS.load(Ordering::Relaxed);
        let rounds = 200;
        for _ in 0..rounds {
            for q in &qs {
                ask(q);
            }
        }
        let allocs = ALLOCS.load(Ordering::Relaxed) - before;
        let per_query = allocs as f64 / (rounds * qs.len()) as f64;
        eprintln!("{name}: {per_query:.2} allocations per query");
        per_profile.push((name, per_query));
    }
    let allocating: Vec<_> = per_profile.iter().filter(|(_, n)| *n > 0.0).collect();
    assert!(allocating.is_empty(), "allocations per query: {allocating:?}");
}

// DNSSEC: signatures made on the query path.

/// A TXT RRset larger than the signing scratch space starts with (64 records, 4 KiB):
/// 100 records of 100 bytes.
fn big_txt() -> steerdns::model::zone::RrSet {
    let rdata = (0..100u8)
        .map(|i| {
            let mut rd = vec![99u8];
            rd.extend((0..99).map(|j| b'a' + (i.wrapping_add(j) % 26)));
            rd.into_boxed_slice()
        })
        .collect();
    steerdns::model::zone::RrSet { rtype: steerdns::wire::Rtype::TXT, ttl: 300, rdata }
}

#[test]
fn signatures_made_on_the_query_path_allocate_nothing() {
    let _turn = turn();
    let mut snap = example().snapshot;
    let big = steerdns::wire::name::WireName::parse("big.tm.example.test.").unwrap();
    let node = steerdns::model::zone::Node { rrsets: vec![big_txt()], profile: None };
    std::sync::Arc::make_mut(&mut snap.zones[0].nodes).insert(big, node);
    let keys = vec![zone_key(dnssec::FLAGS_KSK, 1), zone_key(dnssec::FLAGS_ZSK, 2)];
    let validity = 86_400;
    for zone in &mut snap.zones {
        zone.dnssec = Some(ZoneSigning { keys: keys.clone(), validity, inception_offset: 0 });
    }
    // No pre-signed table, and each round a validity later: every signature of a round is
    // stale in the thread's cache, so each is made anew. Per round: the big TXT RRset, an
    // A RRset, the SOA and the NSEC of a denial, the DNSKEY RRset.
    let queries = [
        (with_do("big.tm.example.test.", RecordType::TXT, None), Transport::Tcp),
        (with_do("www.tm.example.test.", RecordType::A, None), Transport::Udp),
        (with_do("missing.tm.example.test.", RecordType::A, None), Transport::Udp),
        (with_do("tm.example.test.", RecordType::DNSKEY, None), Transport::Udp),
    ];
    const PER_ROUND: u64 = 5;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut out = Vec::with_capacity(65_535);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    let mut round = |r: u32| {
        let now = 1_800_000_000 + r * validity;
        for (q, transport) in &queries {
            let packet = Packet { bytes: q, src, transport: *transport, now, measured: None };
            assert!(respond(&snap, &*snap.health, packet, &mut rng, &mut out, None).is_some());
            assert!(out.len() > 10_000 || *transport == Transport::Udp, "the whole RRset");
        }
    };
    let counts = || {
        steerdns::responder::signed::flush_counts();
        snap.sign_counts.totals()
    };
    // Warm up: the scratch space grows to the big RRset once.
    let before = ALLOCS.load(Ordering::Relaxed);
    round(0);
    let warm = ALLOCS.load(Ordering::Relaxed) - before;
    let start = counts();
    assert_eq!(start.made, PER_ROUND, "{start:?}");
    // Within the thread's burst of signatures (sigcache::MISS_BURST), so none is refused.
    let rounds = 30;
    let before = ALLOCS.load(Ordering::Relaxed);
    for r in 1..=rounds {
        round(r);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    let end = counts();
    let made = end.made - start.made;
    assert_eq!((made, end.dropped), (PER_ROUND * u64::from(rounds), 0), "{end:?}");
    eprintln!("first round: {warm} allocations; then {allocs} in {made} signatures made");
    assert_eq!(allocs, 0, "{allocs} allocations making {made} signatures");
}

/// `routing: asn` and a geographic profile with `AS` codes: the ASN lookup, the match and
/// the fallback, in both families, allocate nothing either.
#[test]
fn asn_routing_allocates_nothing() {
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let csv = root.join("tests/fixtures/asn/asn.csv");
    steerdns::geo::asn_build::build_asn(&csv, &dir.path().join("asn.mmdb")).unwrap();
    let example = std::fs::read_to_string(root.join("steerdns.yaml")).unwrap();
    let yaml = example
        .replace(
            "geo-data/sample-city.mmdb",
            &root.join("geo-data/sample-city.mmdb").display().to_string(),
        )
        .replace("geo-data/latency.yaml", &root.join("geo-data/latency.yaml").display().to_string())
        .replace(
            "zones/tm.example.test.zone",
            &root.join("zones/tm.example.test.zone").display().to_string(),
        );
    std::fs::write(dir.path().join("steerdns.yaml"), format!("{yaml}asn:\n  database: asn.mmdb\n"))
        .unwrap();
    std::fs::create_dir(dir.path().join("profiles")).unwrap();
    let profiles = "\
name: isp
routing: asn
endpoints:
  - { name: a, target: 192.0.2.1, asns: [64496, 64501], always_serve: true }
  - { name: b, target: 192.0.2.2, asns: [64497], enabled: false }
  - { name: c, target: 192.0.2.3, asns: [64497] }
  - { name: fb, target: 192.0.2.4 }
---
name: geo-isp
routing: geographic
endpoints:
  - { name: a, target: 192.0.2.11, geo: [AS64496, AS64502] }
  - { name: fr, target: 192.0.2.12, geo: [FR] }
  - { name: world, target: 192.0.2.13, geo: [WORLD] }
";
    std::fs::write(dir.path().join("profiles/isp.yaml"), profiles).unwrap();
    let snap = steerdns::config::load(&dir.path().join("steerdns.yaml"), None).unwrap().snapshot;
    let clients = ["192.0.2.0/26", "192.0.2.64/26", "203.0.113.0/24", "2001:db8:1:8000::/56"];
    let mut queries = Vec::new();
    for name in ["isp.tm.example.test.", "geo-isp.tm.example.test."] {
        for c in clients {
            queries.push(query(name, RecordType::A, Some(c)));
        }
    }
    allocates_nothing(&snap, &queries);
}

/// Flattened answers, at the apex and below it, fresh and stale: the addresses are read
/// from the flat table and their TTL counted down without an allocation.
#[test]
fn flattened_answers_allocate_nothing() {
    use steerdns::model::flat::{Family, Lookup};
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    let profiles = "\
name: tm.example.test.
routing: priority
flatten: true
endpoints:
  - { name: cdn, target: fresh.cdn.example., always_serve: true }
---
name: flat
routing: weighted
endpoints:
  - { name: cdn, target: stale.cdn.example., flatten: true, always_serve: true }
";
    let snap = many_config_with(dir.path(), profiles);
    assert_eq!(snap.flat.slots.len(), 2);
    let now = 1_800_000_000u64;
    for (slot, received) in snap.flat.slots.iter().zip([now - 10, now - 3600]) {
        for (family, addrs) in
            [(Family::V4, vec!["192.0.2.1", "192.0.2.2"]), (Family::V6, vec!["2001:db8::1"])]
        {
            slot.store(
                family,
                Lookup {
                    addresses: addrs.iter().map(|a| a.parse().unwrap()).collect(),
                    received,
                    ttl: 60,
                    resolver: "127.0.0.1:53".parse().unwrap(),
                    authenticated: false,
                    chain: Vec::new(),
                },
            );
        }
        slot.update_usable(now, snap.flat.rules);
    }
    let queries = [
        query("tm.example.test.", RecordType::A, None),
        query("tm.example.test.", RecordType::AAAA, None),
        query("tm.example.test.", RecordType::NS, None),
        query("flat.tm.example.test.", RecordType::A, None),
        query("flat.tm.example.test.", RecordType::AAAA, Some("198.51.100.0/24")),
    ];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut out = Vec::with_capacity(1500);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    let mut ask = |q: &[u8]| {
        let packet =
            Packet { bytes: q, src, transport: Transport::Udp, now: now as u32, measured: None };
        respond(&snap, &*snap.health, packet, &mut rng, &mut out, None).unwrap();
        // ANCOUNT: every query here has an answer.
        u16::from_be_bytes([out[6], out[7]])
    };
    for q in &queries {
        assert!(ask(q) > 0, "an answer to {q:02x?}");
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        for q in &queries {
            ask(q);
        }
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(allocs, 0, "{allocs} allocations in {} queries", 1000 * queries.len());
}

#[test]
fn the_xdp_fast_path_allocates_nothing_per_frame() {
    use steerdns::model::snapshot::RateLimit;
    use steerdns::server::rrl::Limiter;
    use steerdns::server::xdp::worker::{Batch, Handled, State, handle};

    let _turn = turn();
    let mut snap = example().snapshot;
    // Rate limited, so that answers, slips and drops all take their turn.
    snap.rate_limit = Some(RateLimit {
        rate: 20,
        burst: 25,
        slip: 2,
        ipv4_prefix: 24,
        ipv6_prefix: 56,
        exempt: steerdns::netrange::RangeMap::new(vec![]).unwrap(),
    });
    let limiter = Limiter::default();
    let batch = Batch { snap: &snap, measured: None, limiter: &limiter, now: 1_800_000_000 };
    let mut state = State::new(rand::rngs::SmallRng::seed_from_u64(1));
    let (v4, v6): (IpAddr, IpAddr) =
        ("198.18.0.1".parse().unwrap(), "2001:db8:5::1".parse().unwrap());
    // A query from port 40000 of `src` to port 53 of `dst`.
    let query_frame = |src: String, dst: IpAddr, q: &[u8]| {
        let src = SocketAddr::new(src.parse().unwrap(), 40000);
        UdpFrame::new(src, SocketAddr::new(dst, 53), q).bytes()
    };
    let mut frames = Vec::new();
    for (i, q) in queries().iter().enumerate() {
        frames.push(query_frame(format!("198.18.0.{}", 10 + i), v4, q));
        frames.push(query_frame(format!("2001:db8:5::{:x}", 0x10 + i), v6, q));
    }
    // A response, which gets no answer, and a frame cut inside its IP header.
    let mut response = frames[0].clone();
    response[14 + 20 + 8 + 2] |= 0x80;
    frames.push(response);
    frames.push(frames[0][..30].to_vec());
    let mut frame = vec![0u8; 4096];
    let mut outcomes = [0usize; 3];
    let mut run = |query: &[u8], outcomes: &mut [usize; 3]| {
        frame[..query.len()].copy_from_slice(query);
        let handled = handle(&mut frame, query.len(), &batch, &mut state, None);
        match handled {
            Handled::Reply(len) => {
                // The reply goes back the way the query came.
                let (q, r) = (
                    steerdns::frame::parse(query).unwrap(),
                    steerdns::frame::parse(&frame[..len]).unwrap(),
                );
                assert_eq!((r.src, r.dst), (q.dst, q.src));
                assert_eq!(r.payload[..2], q.payload[..2], "the query's id");
                outcomes[0] += 1;
            }
            Handled::Unanswered => outcomes[1] += 1,
            Handled::Malformed => outcomes[2] += 1,
        }
    };
    // Warm up: within the burst (20 queries from each family's network), every query is
    // answered.
    for f in &frames {
        run(f, &mut outcomes);
    }
    assert_eq!(outcomes, [frames.len() - 2, 1, 1]);
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        for f in &frames {
            run(f, &mut outcomes);
        }
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(allocs, 0, "{allocs} allocations in {} frames", 1000 * frames.len());
    // Past the rate, answers were slipped and dropped too.
    let counted = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
    assert!(counted(&limiter.slipped) > 0 && counted(&limiter.dropped) > 0, "{outcomes:?}");
}
