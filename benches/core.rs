//! Benchmarks of the pure core: the whole responder from request bytes to response bytes
//! (no sockets) for each routing method of the shipped example configuration, plus a
//! subnet profile with 100k ranges, a 3-deep nested chain, and ASN routing against 100k
//! networks.
//!
//!     cargo bench --bench core

use std::hint::black_box;
use std::net::IpAddr;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use rand::SeedableRng;
use steerdns::responder::{Packet, Transport, respond};

#[path = "../tests/common/example_queries.rs"]
mod example_queries;
use example_queries::EXAMPLE_QUERIES;

fn query(name: &str, ecs: Option<&str>) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    if let Some(subnet) = ecs {
        let mut edns = Edns::new();
        edns.options_mut().insert(EdnsOption::Subnet(subnet.parse::<ClientSubnet>().unwrap()));
        m.set_edns(edns);
    }
    m.to_vec().unwrap()
}

fn example(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let snap = steerdns::config::load(&root.join("steerdns.yaml"), None).unwrap().snapshot;
    bench_names(c, &snap, "example", EXAMPLE_QUERIES);
}

fn bench_names(
    c: &mut Criterion,
    snap: &steerdns::model::snapshot::Snapshot,
    group: &str,
    cases: &[(&str, &str, Option<&str>)],
) {
    let mut g = c.benchmark_group(group);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    for (label, name, ecs) in cases {
        let q = query(name, *ecs);
        let mut out = Vec::with_capacity(1500);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        assert!(
            respond(
                snap,
                &*snap.health,
                Packet {
                    bytes: &q,
                    src,
                    transport: Transport::Udp,
                    now: 1_800_000_000,
                    measured: None
                },
                &mut rng,
                &mut out,
                None
            )
            .is_some()
        );
        g.bench_function(*label, |b| {
            b.iter(|| {
                respond(
                    snap,
                    &*snap.health,
                    Packet {
                        bytes: black_box(&q),
                        src,
                        transport: Transport::Udp,
                        now: 1_800_000_000,
                        measured: None,
                    },
                    &mut rng,
                    &mut out,
                    None,
                )
            })
        });
    }
    g.finish();
}

/// A subnet profile with 100k ranges and a nested chain 3 deep, written to a temp dir.
fn scale(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
    std::fs::write(
        dir.path().join("steerdns.yaml"),
        "zones:\n  - origin: b.test.\n    ns: [ns1.b.test.]\n    soa: { rname: h.b.test. }\nprofiles: profiles/\n",
    )
    .unwrap();
    let mut subnet = String::from("name: big\nrouting: subnet\nendpoints:\n");
    for e in 0..100u32 {
        subnet.push_str(&format!(
            "  - name: e{e}\n    target: 192.0.2.{e}\n    always_serve: true\n    subnets: ["
        ));
        // 100k /28 blocks spread over 10.0.0.0/8.
        let ranges: Vec<String> = (0..1000u32)
            .map(|r| {
                let ip = std::net::Ipv4Addr::from((10u32 << 24) | ((e * 1000 + r) << 4));
                format!("\"{ip}/28\"")
            })
            .collect();
        subnet.push_str(&ranges.join(", "));
        subnet.push_str("]\n");
    }
    subnet.push_str("  - { name: fallback, target: 192.0.2.250, always_serve: true }\n");
    let nested = "name: n0\nrouting: priority\nendpoints:\n  - { name: c, profile: n1 }\n---\nname: n1\nrouting: weighted\nendpoints:\n  - { name: c, profile: n2 }\n---\nname: n2\nrouting: priority\nendpoints:\n  - { name: c, profile: n3 }\n---\nname: n3\nrouting: weighted\nendpoints:\n  - { name: a, target: 192.0.2.1, always_serve: true }\n  - { name: b, target: 192.0.2.2, always_serve: true }\n";
    std::fs::write(dir.path().join("profiles/big.yaml"), subnet).unwrap();
    std::fs::write(dir.path().join("profiles/nested.yaml"), nested).unwrap();
    let snap = steerdns::config::load(&dir.path().join("steerdns.yaml"), None).unwrap().snapshot;
    bench_names(
        c,
        &snap,
        "scale",
        &[
            ("subnet-100k-ranges", "big.b.test.", Some("10.0.200.64/28")),
            ("nested-3-deep", "n0.b.test.", None),
        ],
    );
}

/// `routing: asn` and a geographic profile with `AS` codes, against an ASN database of
/// 100k networks (random /24s, 20k operators), written to a temp dir.
fn asn(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
    let mut csv = String::from("network,asn,organization\n192.0.2.0/24,64496,Listed\n");
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let mut nets = std::collections::BTreeSet::new();
    while nets.len() < 100_000 {
        let net = rand::Rng::random::<u32>(&mut rng) & 0xffff_ff00;
        if net >> 8 != 0xc0_00_02 && nets.insert(net) {
            let asn = 65_536 + net % 20_000;
            csv.push_str(&format!("{}/24,{asn},Operator {asn}\n", std::net::Ipv4Addr::from(net)));
        }
    }
    let (bytes, _) = steerdns::geo::asn_build::build_asn_bytes(
        &csv,
        Path::new("asn.csv"),
        std::time::UNIX_EPOCH,
    )
    .unwrap();
    std::fs::write(dir.path().join("asn.mmdb"), bytes).unwrap();
    std::fs::write(
        dir.path().join("steerdns.yaml"),
        "zones:\n  - origin: b.test.\n    ns: [ns1.b.test.]\n    soa: { rname: h.b.test. }\nprofiles: profiles/\nasn:\n  database: asn.mmdb\n",
    )
    .unwrap();
    let profiles = "name: isp\nrouting: asn\nendpoints:\n  - { name: a, target: 192.0.2.1, asns: [65537, 64496], always_serve: true }\n  - { name: b, target: 192.0.2.2, asns: [64496], always_serve: true }\n  - { name: fb, target: 192.0.2.3, always_serve: true }\n---\nname: geo\nrouting: geographic\nendpoints:\n  - { name: a, target: 192.0.2.1, geo: [AS64496], always_serve: true }\n  - { name: w, target: 192.0.2.2, geo: [WORLD], always_serve: true }\n";
    std::fs::write(dir.path().join("profiles/isp.yaml"), profiles).unwrap();
    let snap = steerdns::config::load(&dir.path().join("steerdns.yaml"), None).unwrap().snapshot;
    bench_names(
        c,
        &snap,
        "asn",
        &[
            ("asn-match-ecs", "isp.b.test.", Some("192.0.2.0/24")),
            ("asn-fallback-ecs", "isp.b.test.", Some("203.0.113.0/24")),
            ("geographic-asn-ecs", "geo.b.test.", Some("192.0.2.0/24")),
        ],
    );
}

/// Range lookups of random client addresses in 100k ranges (subnet routing, topology):
/// unlike one repeated query, this pays the cache misses a busy server pays.
fn ranges(c: &mut Criterion) {
    use steerdns::netrange::{Range, RangeMap};
    let entries: Vec<(Range, u32)> = (0..100_000u32)
        .map(|i| {
            let start = u128::from(0x0a00_0000 + i * 64);
            (Range { v6: false, start, end: start + 15 }, i)
        })
        .collect();
    let map = RangeMap::new(entries).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let clients: Vec<IpAddr> = (0..65_536)
        .map(|_| {
            IpAddr::V4((0x0a00_0000 + rand::Rng::random_range(&mut rng, 0..6_400_000u32)).into())
        })
        .collect();
    let mut i = 0;
    c.bench_function("netrange/100k-ranges-random-clients", |b| {
        b.iter(|| {
            i = (i + 1) & 0xffff;
            black_box(map.lookup(black_box(clients[i])).scope)
        })
    });
}

criterion_group!(benches, example, scale, asn, ranges);
criterion_main!(benches);
