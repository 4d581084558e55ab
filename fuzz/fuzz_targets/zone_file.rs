//! Arbitrary text as a zone file (`zones[].file`) of a minimal configuration, loaded
//! through `steerdns::config::load`. When it loads, the owner names written at the start of
//! its first lines are asked for the types named on those lines (and A, TXT, ANY), over UDP
//! with and without EDNS and over TCP, and every reply is checked: the pre-encoded records
//! must parse, and large answers must be truncated to fit.
#![no_main]

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::OnceLock;

use hickory_proto::rr::{Name, RecordType};
use libfuzzer_sys::fuzz_target;
use steerdns_fuzz::{ask_all_ways, scratch_dir};

const ORIGIN: &str = "tm.example.test.";

fn config() -> &'static PathBuf {
    static CONFIG: OnceLock<PathBuf> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let dir = scratch_dir("zone");
        std::fs::create_dir_all(dir.join("profiles")).unwrap();
        let yaml = format!(
            "listen: {{ dns: [\"127.0.0.1:0\"] }}\nzones:\n  - origin: {ORIGIN}\n    ns: [ns1.{ORIGIN}]\n    soa: {{ rname: hostmaster.example.test. }}\n    records: [\"ns1 A 127.0.0.1\"]\n    file: fuzz.zone\nprofiles: profiles/\n"
        );
        std::fs::write(dir.join("steerdns.yaml"), yaml).unwrap();
        dir.join("steerdns.yaml")
    })
}

/// Up to 16 (owner, types) pairs from lines that start with an owner name.
fn questions(text: &str) -> Vec<(Name, Vec<RecordType>)> {
    let mut origin = Name::from_ascii(ORIGIN).unwrap();
    let mut out = Vec::new();
    for line in text.lines().take(64) {
        let mut words = line.split_whitespace();
        if line.starts_with('$') {
            if words.next().is_some_and(|w| w.eq_ignore_ascii_case("$ORIGIN"))
                && let Some(o) = words.next().and_then(|o| Name::from_ascii(o).ok())
            {
                origin = o;
            }
            continue;
        }
        if line.starts_with([' ', '\t', ';']) {
            continue;
        }
        let Some(owner) = words.next() else { continue };
        let name = if owner == "@" {
            Ok(origin.clone())
        } else {
            Name::from_ascii(owner)
                .and_then(|n| if n.is_fqdn() { Ok(n) } else { n.append_domain(&origin) })
        };
        let Ok(name) = name else { continue };
        let mut types = vec![RecordType::A, RecordType::TXT, RecordType::ANY];
        types.extend(words.filter_map(|w| RecordType::from_str(&w.to_ascii_uppercase()).ok()));
        types.dedup();
        out.push((name, types));
        if out.len() == 16 {
            break;
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = config();
    std::fs::write(path.parent().unwrap().join("fuzz.zone"), text).unwrap();
    let Ok(loaded) = steerdns::config::load(path, None) else { return };
    let snap = &loaded.snapshot;
    let apex = Name::from_ascii(ORIGIN).unwrap();
    for rtype in [RecordType::SOA, RecordType::NS] {
        ask_all_ways(snap, &apex, rtype);
    }
    for (name, types) in questions(text) {
        for rtype in types.into_iter().take(4) {
            ask_all_ways(snap, &name, rtype);
        }
    }
});
