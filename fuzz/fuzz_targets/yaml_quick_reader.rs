//! Arbitrary text as a profile file, loaded through `steerdns::config::load`.
//!
//! In builds with debug assertions (cargo fuzz's default) every document the quick YAML
//! reader (`src/config/yaml.rs`) takes is read again by serde-saphyr and the two results
//! must be equal, so this target is a differential test of the quick reader against
//! serde-saphyr; a disagreement panics inside the load. Profiles that load are then asked
//! for A, AAAA and TXT, and every reply is checked.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use hickory_proto::rr::{Name, RecordType};
use libfuzzer_sys::fuzz_target;
use steerdns_fuzz::{ask_all_ways, location_keys, scratch_dir};

/// A configuration whose profiles directory holds only `profiles/fuzz.yaml`.
fn config() -> &'static PathBuf {
    static CONFIG: OnceLock<PathBuf> = OnceLock::new();
    CONFIG.get_or_init(|| {
        if !cfg!(debug_assertions) {
            panic!(
                "build with debug assertions (the cargo fuzz default; not -O without -a): \
                 without them the quick reader is not checked against serde-saphyr"
            );
        }
        let dir = scratch_dir("yaml");
        std::fs::create_dir_all(dir.join("profiles")).unwrap();
        let yaml = format!(
            "listen: {{ dns: [\"127.0.0.1:0\"] }}\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: {{ rname: hostmaster.example.test. }}\n    records: [\"ns1 A 127.0.0.1\"]\n{}profiles: profiles/\n",
            location_keys()
        );
        std::fs::write(dir.join("steerdns.yaml"), yaml).unwrap();
        dir.join("steerdns.yaml")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = config();
    let file = path.parent().unwrap().join("profiles/fuzz.yaml");
    std::fs::write(&file, text).unwrap();
    let Ok(loaded) = steerdns::config::load(path, None) else { return };
    let snap = &loaded.snapshot;
    for p in snap.profiles.iter().take(8) {
        let Ok(name) = Name::from_ascii(&p.name) else { continue };
        for rtype in [RecordType::A, RecordType::AAAA, RecordType::TXT] {
            ask_all_ways(snap, &name, rtype);
        }
    }
});
