//! The test configuration: the zone with its records and profiles, the location fixtures
//! under `tests/fixtures/location/`, and small helpers for names, addresses and errors.

use std::path::{Path, PathBuf};

pub const ORIGIN: &str = "tm.example.test.";

/// Absolute name under the test zone: `fq("www")` = `www.tm.example.test.`.
pub fn fq(rel: &str) -> String {
    if rel == "@" || rel.is_empty() { ORIGIN.to_string() } else { format!("{rel}.{ORIGIN}") }
}

/// One TXT string of 250 bytes per record, six records: well over 1232 bytes in total.
pub const BIG_TXT_RECORDS: usize = 6;
pub const BIG_TXT_LEN: usize = 250;

/// Three such records: about 800 bytes, more than 512 but less than 1232.
pub const MID_TXT_RECORDS: usize = 3;

pub fn big_txt_string(i: usize) -> String {
    let c = (b'a' + i as u8) as char;
    std::iter::repeat_n(c, BIG_TXT_LEN).collect()
}

pub fn steerdns_yaml() -> String {
    let mut records = vec![
        "ns1 A 127.0.0.1".to_string(),
        "ns1 AAAA ::1".to_string(),
        "ns2 A 127.0.0.2".to_string(),
        "ns2 AAAA ::2".to_string(),
        r#"@ TXT "v=spf1 -all""#.to_string(),
        "mail MX 10 mx.example.net.".to_string(),
        "docs CNAME www.tm.example.test.".to_string(),
        "a.b A 192.0.2.99".to_string(),
        "chain CNAME hop.tm.example.test.".to_string(),
        "hop CNAME a.b.tm.example.test.".to_string(),
        "loop1 CNAME loop2.tm.example.test.".to_string(),
        "loop2 CNAME loop1.tm.example.test.".to_string(),
        r#"info 300 TXT "steerdns test zone""#.to_string(),
    ];
    for i in 0..BIG_TXT_RECORDS {
        records.push(format!(r#"big TXT "{}""#, big_txt_string(i)));
    }
    for i in 0..MID_TXT_RECORDS {
        records.push(format!(r#"mid TXT "{}""#, big_txt_string(i)));
    }
    let records: String = records.iter().map(|r| format!("      - '{r}'\n")).collect();
    format!(
        "listen:
  dns: [\"127.0.0.1:0\"]
zones:
  - origin: {ORIGIN}
    ns: [ns1.tm.example.test., ns2.tm.example.test.]
    soa: {{ rname: hostmaster.example.test., refresh: 3600, retry: 600, expire: 604800, minimum: 30 }}
    ttl: 3600
    records:
{records}    file: zones/extra.zone
profiles: profiles/
"
    )
}

pub const ZONE_FILE: &str = "\
; extra static records (RFC 1035 master file)
$ORIGIN tm.example.test.
_sip._udp       IN SRV   10 60 5060 sip.example.net.
ftp         120 IN A     192.0.2.200
";

/// The profiles most tests use. Every endpoint is `always_serve` (or disabled), so no
/// answer depends on health probing.
pub const DEFAULT_PROFILES: &[(&str, &str)] = &[
    (
        "priority.yaml",
        "\
name: www
routing: priority
ttl: 30
endpoints:
  - { name: primary, target: 192.0.2.10, priority: 1, always_serve: true }
  - { name: secondary, target: 198.51.100.10, priority: 2, always_serve: true }
  - { name: primary-v6, target: \"2001:db8::10\", priority: 3, always_serve: true }
---
# priority 1 is disabled: priority 2 answers
name: prio2
routing: priority
ttl: 40
endpoints:
  - { name: first, target: 192.0.2.11, priority: 1, enabled: false, always_serve: true }
  - { name: second, target: 192.0.2.12, priority: 2, always_serve: true }
  - { name: third, target: 192.0.2.13, priority: 3, always_serve: true }
---
# the only enabled endpoint is a host name
name: alias
routing: priority
ttl: 50
endpoints:
  - { name: v4, target: 192.0.2.14, priority: 1, enabled: false, always_serve: true }
  - { name: cdn, target: cdn.example.net., priority: 2, always_serve: true }
---
name: off
routing: priority
enabled: false
endpoints:
  - { name: one, target: 192.0.2.15, always_serve: true }
",
    ),
    (
        "weighted.yaml",
        "\
name: api
routing: weighted
endpoints:
  - { name: site-a, target: 192.0.2.20, weight: 3, always_serve: true }
  - { name: site-b, target: 198.51.100.20, weight: 1, always_serve: true }
  - { name: canary, target: 203.0.113.20, weight: 0, always_serve: true }
---
name: app
routing: weighted
sticky: true
ttl: 60
endpoints:
  - { name: blue, target: 192.0.2.30, always_serve: true }
  - { name: green, target: 198.51.100.30, always_serve: true }
  - { name: red, target: 203.0.113.30, always_serve: true }
  - { name: blue6, target: \"2001:db8::30\", always_serve: true }
  - { name: green6, target: \"2001:db8::31\", always_serve: true }
",
    ),
    (
        "multivalue.yaml",
        "\
name: pool
routing: multivalue
max_return: 3
endpoints:
  - { name: a, target: 192.0.2.41, always_serve: true }
  - { name: b, target: 192.0.2.42, always_serve: true }
  - { name: c, target: 192.0.2.43, always_serve: true }
  - { name: d, target: 192.0.2.44, always_serve: true }
  - { name: d6, target: \"2001:db8::44\", always_serve: true }
",
    ),
    (
        "nested.yaml",
        "\
name: global
routing: priority
endpoints:
  - { name: eu, profile: eu.tm.example.test., min_child_endpoints: 1, priority: 1 }
  - { name: us, profile: us.tm.example.test., priority: 2 }
---
name: eu
routing: weighted
endpoints:
  - { name: eu-1, target: 192.0.2.51, always_serve: true }
  - { name: eu-2, target: 192.0.2.52, always_serve: true }
---
name: us
routing: priority
endpoints:
  - { name: us-1, target: 198.51.100.51, always_serve: true }
---
# the priority-1 child is disabled (Stopped): the parent fails over to us2
name: global2
routing: priority
endpoints:
  - { name: eu, profile: eu2.tm.example.test., priority: 1 }
  - { name: us, profile: us2.tm.example.test., priority: 2 }
---
name: eu2
routing: weighted
enabled: false
endpoints:
  - { name: eu2-1, target: 192.0.2.61, always_serve: true }
---
name: us2
routing: priority
endpoints:
  - { name: us2-1, target: 198.51.100.61, always_serve: true }
",
    ),
];

/// `yaml` (a `steerdns.yaml` from `steerdns_yaml()`) with the admin API on 127.0.0.1:0
/// and, when `token_file` is set, `admin: { token_file: ... }`.
pub fn with_admin(yaml: &str, token_file: Option<&str>) -> String {
    let listen = "  dns: [\"127.0.0.1:0\"]\n";
    assert!(yaml.contains(listen), "unexpected steerdns.yaml: {yaml}");
    let mut out = yaml.replacen(listen, &format!("{listen}  admin: \"127.0.0.1:0\"\n"), 1);
    if let Some(f) = token_file {
        out.push_str(&format!("admin:\n  token_file: {f}\n"));
    }
    out
}

/// A file under `tests/fixtures/location/`.
pub fn location_fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/location").join(rel)
}

/// Top-level keys added to the test `steerdns.yaml` for the location-aware methods; the
/// files they name are written by `write_location_config`.
pub const LOCATION_KEYS: &str = "\
geo:
  database: data/city.mmdb
latency:
  table: data/latency.yaml
topology:
  zones:
    zone-a: [\"10.1.0.0/16\", \"2001:db8:20::/48\"]
    zone-b: [\"10.2.0.0/16\"]
";

/// Every profile file of `tests/fixtures/location/profiles/` as (file name, YAML).
pub fn location_profiles() -> Vec<(String, String)> {
    let dir = location_fixture("profiles");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("read profile fixture"))
        })
        .collect();
    out.sort();
    out
}

pub fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

/// Configuration errors as "FILE-NAME:LINE:COL: message".
pub fn located(errors: &steerdns::config::ConfigErrors) -> Vec<String> {
    errors
        .0
        .iter()
        .map(|e| {
            let file = e.file.file_name().unwrap().to_string_lossy().to_string();
            format!("{file}:{}:{}: {}", e.pos.line, e.pos.col, e.message)
        })
        .collect()
}

/// Two profiles of always-served endpoints `a` and `b` (priority `prio`, weighted
/// `split`), for the override tests.
pub const OVERRIDE_PROFILES: &str = "\
name: prio
routing: priority
endpoints:
  - { name: a, target: 192.0.2.1, always_serve: true }
  - { name: b, target: 192.0.2.2, always_serve: true }
---
name: split
routing: weighted
endpoints:
  - { name: a, target: 192.0.2.11, always_serve: true }
  - { name: b, target: 192.0.2.12, always_serve: true }
";

/// Replaces `path` as updaters and editors do: a hidden temporary file beside it, then a
/// rename over it.
pub fn write_atomic(path: &Path, bytes: impl AsRef<[u8]>) {
    let tmp = path.with_file_name(format!(".{}.tmp", path.file_name().unwrap().to_string_lossy()));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
