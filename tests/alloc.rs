//! The query path allocates nothing in steady state: a counting global allocator watches
//! the responder answer the common query kinds (routing methods, static records, NXDOMAIN,
//! ECS) from request bytes to response bytes, unsigned and signed (DNSSEC, signatures
//! from the pre-signed table and the thread's cache).

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use rand::SeedableRng;
use steerdns::model::dnssec::{self, Algorithm, Signer, ZoneKey, ZoneSigning};
use steerdns::model::presigned;
use steerdns::responder::{Packet, Transport, respond};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Held by each test: the count is global, so the tests must not run at the same time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

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

#[test]
fn responder_allocates_nothing_per_query() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let snap = steerdns::config::load(&root.join("steerdns.yaml"), None).unwrap().snapshot;
    let queries = [
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
        query("docs.tm.example.test.", RecordType::A, None),
        with_cookie("www.tm.example.test.", "198.51.100.0/24"),
    ];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut out = Vec::with_capacity(1500);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    let mut ask = |q: &[u8]| {
        let packet = Packet { bytes: q, src, transport: Transport::Udp, now: 1_800_000_000 };
        respond(&snap, &*snap.health, packet, &mut rng, &mut out, None).is_some()
    };
    // Warm up: the output buffer reaches its working size.
    for q in &queries {
        assert!(ask(q));
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    assert!(before > 0, "the counting allocator is in use");
    for _ in 0..1000 {
        for q in &queries {
            ask(q);
        }
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(allocs, 0, "{allocs} allocations in {} queries", 1000 * queries.len());
}

#[test]
fn signed_answers_from_the_caches_allocate_nothing() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
        let packet = Packet { bytes: q, src, transport: Transport::Udp, now };
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
