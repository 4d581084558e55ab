//! Configuration error tables: write a server file and profiles into a directory, load
//! them, and check that each case's error is reported at its FILE:LINE:COL.

use std::path::{Path, PathBuf};

use super::fixtures::located;

/// A server file with the test zone only, listening on an ephemeral port, without an admin
/// API or anything else: for profiles loaded, or served and probed (`Running`). Its records
/// give dns probes names to ask (`ns1`, `svc`) and take one name from profiles (`static`).
/// It ends in the zone list, so that a test may append a zone or a top-level key.
pub const ZONE_ONLY_SERVER: &str = r#"listen:
  dns: ["127.0.0.1:0"]
zones:
  - origin: tm.example.test.
    ns: [ns1.tm.example.test.]
    soa: { rname: hostmaster.example.test. }
    records: ["ns1 A 127.0.0.1", "svc TXT \"state=ready\"", "static TXT \"x\""]
"#;

/// Writes `server` as `steerdns.yaml` and each (name, text) into `profiles/`; returns the
/// path of `steerdns.yaml`.
pub fn config_dir(dir: &Path, server: &str, profiles: &[(&str, &str)]) -> PathBuf {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), server).unwrap();
    for (name, text) in profiles {
        std::fs::write(dir.join("profiles").join(name), text).unwrap();
    }
    dir.join("steerdns.yaml")
}

/// The errors of loading `server` with `profiles/p.yaml` holding `profile`, as
/// "FILE-NAME:LINE:COL: message" (none when it loads).
pub fn errors_of(server: &str, profile: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = config_dir(dir.path(), server, &[("p.yaml", profile)]);
    match steerdns::config::load(&path, None) {
        Ok(_) => vec![],
        Err(e) => located(&e),
    }
}

/// Checks a table of (input, "FILE:LINE:COL", message fragment): `errors` of each input
/// must hold one error at that place whose message holds the fragment. Every case that
/// fails is reported, not only the first.
pub fn assert_each_located<T>(cases: &[(T, &str, &str)], errors: impl Fn(&T) -> Vec<String>) {
    let mut failures = Vec::new();
    for (i, (input, at, msg)) in cases.iter().enumerate() {
        let errors = errors(input);
        if !errors.iter().any(|e| e.starts_with(&format!("{at}: ")) && e.contains(msg)) {
            failures.push(format!("case {i}: want {at}: ..{msg}.., got {errors:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
