//! Arbitrary bytes as a DNS query, answered from the example configuration over UDP and
//! TCP. The query ID (the first two bytes, which do not change how a query is parsed) also
//! picks a second client address and a mix of endpoint statuses, so failover, fail-open and
//! every location-based method see varied clients. Every reply must pass
//! `steerdns_fuzz::check_reply`.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use steerdns::model::Snapshot;
use steerdns::responder::Transport;
use steerdns_fuzz::{Pattern, SOURCES, answer, repo_root};

fn snapshot() -> &'static Snapshot {
    static SNAP: OnceLock<Snapshot> = OnceLock::new();
    SNAP.get_or_init(|| {
        let path = repo_root().join("steerdns.yaml");
        match steerdns::config::load(&path, None) {
            Ok(loaded) => loaded.snapshot,
            Err(e) => panic!("the example configuration does not load:\n{e}"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let snap = snapshot();
    let health = &*snap.health;
    for transport in [Transport::Udp, Transport::Tcp] {
        answer(snap, health, data, SOURCES[0], transport);
    }
    let id = match data {
        [a, b, ..] => u16::from_be_bytes([*a, *b]),
        _ => 0,
    };
    let src = SOURCES[usize::from(id) % SOURCES.len()];
    let statuses = Pattern(u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for transport in [Transport::Udp, Transport::Tcp] {
        answer(snap, &statuses, data, src, transport);
    }
});
