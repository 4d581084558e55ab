//! What the fuzz targets share: the repository's example configuration, a scratch
//! directory per fuzzing process, DNS queries made with hickory-proto, and the checks every
//! reply must pass.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use hickory_proto::op::{Edns, Message, MessageType, Query};
use hickory_proto::rr::{Name, RecordType};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use steerdns::model::{HealthView, Snapshot, Status};
use steerdns::responder::{Packet, Transport, respond};

/// The largest UDP reply: what steerdns advertises in its OPT record.
pub const EDNS_PAYLOAD: usize = 1232;

/// The repository root (this crate lives in `fuzz/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A directory of this process's own under the system temp dir, empty at first. Files a
/// target writes there are overwritten by each input. Directories that earlier runs of
/// the target left behind (their process is gone) are removed.
pub fn scratch_dir(target: &str) -> PathBuf {
    let prefix = format!("steerdns-fuzz-{target}-");
    remove_stale(&prefix);
    let dir = std::env::temp_dir().join(format!("{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// Removes `<temp>/<prefix><pid>` directories whose process no longer runs (Linux only:
/// elsewhere there is no /proc to ask, and a parallel job's directory must stay).
fn remove_stale(prefix: &str) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { continue };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The `latency:` and `topology:` keys of the example configuration (the latency table by
/// absolute path), so that performance, groups and zone profiles in a scratch
/// configuration validate as they do in the example. Not `geo:`: opening the database
/// indexes its places on every load, which would take most of a load's time.
pub fn location_keys() -> String {
    let root = repo_root().canonicalize().expect("repository root");
    format!(
        "latency:\n  table: {}\ntopology:\n  zones:\n    zone-a: [\"10.1.0.0/16\", \"192.0.2.0/25\"]\n    zone-b: [\"10.2.0.0/16\", \"192.0.2.128/25\"]\n",
        root.join("geo-data/latency.yaml").display(),
    )
}

/// Client addresses that the example location data places differently: geo networks,
/// latency rows, subnet ranges, availability zones, IPv6, and nowhere at all.
pub const SOURCES: [IpAddr; 10] = [
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 130)),
    IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
    IpAddr::V4(Ipv4Addr::new(198, 51, 100, 130)),
    IpAddr::V4(Ipv4Addr::new(198, 51, 100, 15)),
    IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
    IpAddr::V4(Ipv4Addr::new(10, 2, 2, 3)),
    IpAddr::V4(Ipv4Addr::new(100, 64, 0, 1)),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1)),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

/// Statuses the prober writes (online, degraded, checking), two bits a slot from a seed.
pub struct Pattern(pub u64);

impl HealthView for Pattern {
    fn status(&self, slot: usize) -> Status {
        match (self.0 >> (2 * (slot % 32))) & 3 {
            0 => Status::Online,
            1 | 3 => Status::Degraded,
            _ => Status::Checking,
        }
    }
}

/// Answers `query` as the server would and checks the reply (see `check_reply`).
pub fn answer(
    snap: &Snapshot,
    health: &dyn HealthView,
    query: &[u8],
    src: IpAddr,
    transport: Transport,
) -> Option<Message> {
    let mut rng = SmallRng::seed_from_u64(1);
    let mut out = Vec::new();
    let packet = Packet { bytes: query, src, transport, now: 1_800_000_000, measured: None };
    respond(snap, health, packet, &mut rng, &mut out, None)?;
    Some(check_reply(query, &out, transport))
}

/// Every reply parses with hickory-proto, is a response, carries the query's ID, and fits
/// the transport: over UDP at most 512 bytes without EDNS and at most the client's payload
/// size (clamped to 512..=1232) with it; over TCP never truncated.
pub fn check_reply(query: &[u8], reply: &[u8], transport: Transport) -> Message {
    let msg = Message::from_vec(reply).unwrap_or_else(|e| {
        panic!("the reply does not parse ({e})\nquery: {query:02x?}\nreply: {reply:02x?}")
    });
    assert_eq!(msg.metadata.message_type, MessageType::Response, "reply: {reply:02x?}");
    if query.len() >= 12 {
        let id = u16::from_be_bytes([query[0], query[1]]);
        assert_eq!(msg.metadata.id, id, "the reply's ID is not the query's");
    }
    match transport {
        Transport::Udp => {
            assert!(reply.len() <= EDNS_PAYLOAD, "UDP reply of {} bytes", reply.len());
            if msg.edns.is_none() {
                assert!(reply.len() <= 512, "UDP reply of {} bytes without EDNS", reply.len());
            }
            if let Ok(q) = Message::from_vec(query) {
                let limit = q
                    .edns
                    .as_ref()
                    .map_or(512, |e| usize::from(e.max_payload()).clamp(512, EDNS_PAYLOAD));
                assert!(
                    reply.len() <= limit,
                    "UDP reply of {} bytes for a client limit of {limit}",
                    reply.len()
                );
            }
        }
        Transport::Tcp => {
            assert!(!msg.metadata.truncation, "TC set over TCP: {reply:02x?}");
        }
    }
    msg
}

/// A query for `name` and `rtype`, with an OPT record advertising `edns` bytes if given.
pub fn query(id: u16, name: &Name, rtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = id;
    m.add_query(Query::query(name.clone(), rtype));
    if let Some(payload) = edns {
        let mut e = Edns::new();
        e.set_max_payload(payload);
        m.set_edns(e);
    }
    m.to_vec().expect("encode a query")
}

/// Asks `name` for `rtype` over UDP without EDNS, UDP with a 1232-byte payload, and TCP,
/// from a located client, checking every reply.
pub fn ask_all_ways(snap: &Snapshot, name: &Name, rtype: RecordType) {
    let health = &*snap.health;
    for (i, (edns, transport)) in [
        (None, Transport::Udp),
        (Some(EDNS_PAYLOAD as u16), Transport::Udp),
        (Some(EDNS_PAYLOAD as u16), Transport::Tcp),
    ]
    .into_iter()
    .enumerate()
    {
        let q = query(0x5a00 + i as u16, name, rtype, edns);
        answer(snap, health, &q, SOURCES[i % SOURCES.len()], transport);
    }
}
