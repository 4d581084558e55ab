//! Instructions per query of the responder, load-independent: answers one of the benchmark
//! cases N times. Run it under callgrind twice (N = 1000 and 11000) and divide the
//! difference by 10000, as `bench/icount.sh` does; the configuration load cancels out.
//!
//! Cases ending in `-rum` answer with a measured-latency table (real user measurements) for
//! the client's /24; cases ending in `-load` run on a copy of the example configuration
//! whose endpoints have load feeds, every share set to 0.5 (half of each endpoint's traffic
//! spills), so the load path is taken on every query.
//!
//! `cargo build --release --example icount && bench/icount.sh`

use std::net::IpAddr;
use std::path::Path;

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use rand::SeedableRng;

#[path = "../tests/common/measured.rs"]
mod measured;
use measured::measured_table;
#[path = "../tests/common/example_queries.rs"]
mod example_queries;
use example_queries::{EXAMPLE_QUERIES, ExampleQuery};

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

/// The cases beyond the benchmark's (`EXAMPLE_QUERIES`).
const MORE_CASES: &[ExampleQuery] = &[
    ("weighted-load", "api.tm.example.test.", None),
    ("priority-load", "www.tm.example.test.", None),
    ("performance-ecs-rum", "fast.tm.example.test.", Some("198.51.100.130/32")),
    ("performance-ecs-rum-load", "fast.tm.example.test.", Some("198.51.100.130/32")),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = &args[1];
    let n: usize = args[2].parse().unwrap();
    let root = Path::new(&args[3]);
    let copy = case.ends_with("-load").then(|| with_load_feeds(root));
    let snap = load(&copy.as_ref().map_or(root, |d| d.path()).join("steerdns.yaml"));
    if copy.is_some() {
        let table = snap.load_table().expect("the copy's endpoints are fed");
        for slot in 0..table.len() {
            table.set(slot, 0.5, false);
        }
    }
    let measured = case.contains("-rum").then(|| measured_table(&snap));
    let mut cases = EXAMPLE_QUERIES.iter().chain(MORE_CASES);
    let (_, name, ecs) = cases.find(|c| c.0 == case).unwrap();
    let q = query(name, *ecs);
    let src: IpAddr = "127.0.0.1".parse().unwrap();
    let mut out = Vec::with_capacity(1500);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(respond_once(&snap, &q, src, measured.as_ref(), &mut rng, &mut out));
    }
    assert_eq!(ok, n);
}

fn load(p: &Path) -> steerdns::model::Snapshot {
    steerdns::config::load(p, None).unwrap().snapshot
}
/// The example configuration in a temporary directory (everything linked but the
/// profiles), every endpoint with a pushed load feed.
fn with_load_feeds(root: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = &root.canonicalize().unwrap();
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "profiles" && entry.file_name() != "target" {
            std::os::unix::fs::symlink(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
    }
    std::fs::create_dir(dir.path().join("profiles")).unwrap();
    for entry in std::fs::read_dir(root.join("profiles")).unwrap() {
        let entry = entry.unwrap();
        let text = std::fs::read_to_string(entry.path()).unwrap().replace(
            "always_serve: true }",
            "always_serve: true, load: { capacity: 100, pushed: true } }",
        );
        std::fs::write(dir.path().join("profiles").join(entry.file_name()), text).unwrap();
    }
    dir
}

fn respond_once(
    snap: &steerdns::model::Snapshot,
    q: &[u8],
    src: IpAddr,
    measured: Option<&steerdns::geo::rum::MeasuredLatency>,
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
            measured,
        },
        rng,
        out,
        None,
    )
    .is_some()
}
