//! Instructions per query of the responder, load-independent: answers one of the benchmark
//! cases N times. Run it under callgrind twice (N = 1000 and 11000) and divide the
//! difference by 10000, as `bench/icount.sh` does; the configuration load cancels out.
//!
//! `cargo build --release --example icount && bench/icount.sh`

use std::net::IpAddr;
use std::path::Path;

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use rand::SeedableRng;

fn query(name: &str, ecs: Option<&str>) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    let mut edns = Edns::new();
    if let Some(e) = ecs {
        let (a, p) = e.split_once('/').unwrap();
        edns.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(
            a.parse().unwrap(),
            p.parse().unwrap(),
            0,
        )));
    }
    m.set_edns(edns);
    m.to_vec().unwrap()
}

const CASES: &[(&str, &str, Option<&str>)] = &[
    ("static", "info.tm.example.test.", None),
    ("nxdomain", "missing.tm.example.test.", None),
    ("priority", "www.tm.example.test.", None),
    ("weighted", "api.tm.example.test.", None),
    ("weighted-sticky-ecs", "app.tm.example.test.", Some("203.0.113.0/24")),
    ("multivalue", "pool.tm.example.test.", None),
    ("nested", "global.tm.example.test.", None),
    ("geographic-ecs", "geo.tm.example.test.", Some("192.0.2.128/25")),
    ("subnet-ecs", "office.tm.example.test.", Some("198.51.100.15/32")),
    ("performance-ecs", "fast.tm.example.test.", Some("198.51.100.130/32")),
    ("groups-ecs", "accel.tm.example.test.", Some("198.51.100.0/24")),
    ("zone-ecs", "svc.tm.example.test.", Some("10.1.0.0/16")),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = &args[1];
    let n: usize = args[2].parse().unwrap();
    let root = Path::new(&args[3]);
    let snap = load(&root.join("steerdns.yaml"));
    let (_, name, ecs) = CASES.iter().find(|c| c.0 == case).unwrap();
    let q = query(name, *ecs);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    let mut out = Vec::with_capacity(1500);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(respond_once(&snap, &q, src, &mut rng, &mut out));
    }
    assert_eq!(ok, n);
}

fn load(p: &Path) -> steerdns::model::Snapshot {
    steerdns::config::load(p, None).unwrap().snapshot
}
fn respond_once(
    snap: &steerdns::model::Snapshot,
    q: &[u8],
    src: IpAddr,
    rng: &mut rand::rngs::SmallRng,
    out: &mut Vec<u8>,
) -> bool {
    use steerdns::responder::{Packet, Transport, respond};
    respond(
        snap,
        &*snap.health,
        Packet {
            bytes: std::hint::black_box(q),
            src,
            transport: Transport::Udp,
            now: 1_800_000_000,
            measured: None,
        },
        rng,
        out,
        None,
    )
    .is_some()
}
