//! Routing by the client's network operator: the ASN database built by
//! `geo build --asn` and read back by libmaxminddb's `mmdblookup` and by `AsnDb`, its CSV
//! and configuration errors with their positions, `routing: asn` and `AS` codes in
//! geographic profiles over real UDP with EDNS Client Subnet (answers and scopes), a
//! changed database file moving an answer, and `explain`'s account of the decision.
//!
//! The ASN database is built at test start from `tests/fixtures/asn/asn.csv`, the geo
//! database from `tests/fixtures/location/city.csv`; every endpoint is `always_serve`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, UNIX_EPOCH};

use common::*;
use steerdns::geo::asn_build::{build_asn, build_asn_bytes};
use steerdns::geo::{AsnDb, AsnHit};

fn asn_fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/asn").join(rel)
}

fn build_fixture(dir: &Path) -> PathBuf {
    let out = dir.join("asn.mmdb");
    build_asn(&asn_fixture("asn.csv"), &out).unwrap_or_else(|e| panic!("{e:?}"));
    out
}

// ---------------------------------------------------------------- the database

/// `mmdblookup --file DB --ip IP PATH...` (stdout).
fn mmdblookup(db: &Path, addr: &str, path: &str) -> String {
    let out = Command::new("mmdblookup")
        .arg("--file")
        .arg(db)
        .args(["--ip", addr, path])
        .output()
        .expect("run mmdblookup");
    assert!(out.status.success(), "mmdblookup {addr}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn asn_build_reads_back_with_mmdblookup() {
    if !tools::have_tool("mmdblookup", "mmdb-bin") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = build_fixture(dir.path());
    let cases = [
        ("192.0.2.10", "64496", Some("Example Transit")),
        ("192.0.2.100", "64497", Some("Example Mobile, Inc.")),
        ("192.0.2.200", "64498", Some("Example Cable")),
        ("198.51.100.5", "64499", Some("Example Academic")),
        ("198.51.100.150", "64500", Some("Example Hosting")),
        ("198.51.100.200", "64499", Some("Example Academic")),
        ("100.64.11.7", "65536", Some("Example Backbone")),
        ("::ffff:192.0.2.10", "64496", Some("Example Transit")),
        ("2001:db8:1::1", "64501", Some("Example IPv6")),
        ("2001:db8:1:8000::1", "64502", None),
    ];
    for (addr, asn, org) in cases {
        let number = mmdblookup(&db, addr, "autonomous_system_number");
        assert_eq!(number, format!("{asn} <uint32>"), "{addr}");
        if let Some(org) = org {
            let got = mmdblookup(&db, addr, "autonomous_system_organization");
            assert_eq!(got, format!("\"{org}\" <utf8_string>"), "{addr}");
        }
    }
    let meta = Command::new("mmdblookup")
        .arg("--file")
        .arg(&db)
        .args(["--ip", "203.0.113.9", "--verbose"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&meta.stdout).to_string() + &String::from_utf8_lossy(&meta.stderr);
    assert!(text.contains("GeoLite2-ASN"), "database type: {text}");
    assert!(text.contains("Could not find an entry"), "{text}");
}

#[test]
fn lookups_give_the_asn_and_the_networks_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let db = AsnDb::open_limited(&build_fixture(dir.path()), AsnDb::DEFAULT_LIMIT).unwrap();
    let hit = |a: &str| db.lookup(ip(a));
    let cases = [
        ("192.0.2.10", Some(64496), 26),
        ("::ffff:192.0.2.10", Some(64496), 26),
        ("192.0.2.200", Some(64498), 25),
        // The /24 split around the /26 inside it: each part is its own network.
        ("198.51.100.5", Some(64499), 25),
        ("198.51.100.150", Some(64500), 26),
        ("198.51.100.200", Some(64499), 26),
        ("100.64.11.7", Some(65536), 23),
        ("2001:db8:1::1", Some(64501), 49),
        ("2001:db8:1:8000::1", Some(64502), 49),
        // No data: the empty network around the address (200.0.0.0/5 is empty).
        ("203.0.113.9", None, 5),
    ];
    for (addr, asn, prefix) in cases {
        assert_eq!(hit(addr), AsnHit { asn, prefix }, "{addr}");
    }
    assert_eq!(db.organization(ip("192.0.2.100")), Some("Example Mobile, Inc."));
    assert_eq!(db.organization(ip("2001:db8:1:8000::1")), None);
    assert_eq!(db.database_type(), "GeoLite2-ASN");
}

#[test]
fn an_unchanged_file_shares_its_records_and_a_replaced_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_fixture(dir.path());
    let a = AsnDb::open_limited(&path, AsnDb::DEFAULT_LIMIT).unwrap();
    let b = AsnDb::open_limited(&path, AsnDb::DEFAULT_LIMIT).unwrap();
    assert!(a.shares_records_with(&b), "a reload of an unchanged file must not decode it again");
    let (bytes, _) =
        build_asn_bytes("192.0.2.0/24,64511,Other\n", Path::new("x.csv"), UNIX_EPOCH).unwrap();
    std::fs::write(dir.path().join("new.mmdb"), bytes).unwrap();
    std::fs::rename(dir.path().join("new.mmdb"), &path).unwrap();
    let c = AsnDb::open_limited(&path, AsnDb::DEFAULT_LIMIT).unwrap();
    assert!(!c.shares_records_with(&a));
    assert_eq!(c.lookup(ip("192.0.2.10")), AsnHit { asn: Some(64511), prefix: 24 });
    // The configuration still holding the old file keeps answering from it.
    assert_eq!(a.lookup(ip("192.0.2.10")), AsnHit { asn: Some(64496), prefix: 26 });
}

#[test]
fn a_location_database_or_an_oversized_file_is_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let city = dir.path().join("city.mmdb");
    steerdns::geo::build(&location_fixture("city.csv"), &city).unwrap();
    let e = AsnDb::open_limited(&city, AsnDb::DEFAULT_LIMIT).unwrap_err().to_string();
    assert!(e.ends_with("not an ASN database: no record has autonomous_system_number (database type GeoIP2-City)"), "{e}");
    let asn = build_fixture(dir.path());
    let small = steerdns::diag::Limit { bytes: 100, set_by: "limits.asn_database" };
    let e = AsnDb::open_limited(&asn, small).unwrap_err().to_string();
    assert!(
        e.contains("cannot open ASN database: too large") && e.contains("limits.asn_database"),
        "{e}"
    );
    std::fs::write(dir.path().join("junk.mmdb"), b"not a database").unwrap();
    let e = AsnDb::open_limited(&dir.path().join("junk.mmdb"), AsnDb::DEFAULT_LIMIT).unwrap_err();
    assert!(e.to_string().contains("cannot open ASN database"), "{e}");
}

#[test]
fn csv_errors_name_their_lines_and_columns() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.mmdb");
    let input = asn_fixture("bad.csv");
    let errors = build_asn(&input, &out).unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        format!(
            "{}:3:1: host bits set in 192.0.2.1/24 (the network is 192.0.2.0/24)",
            input.display()
        )
    );
    let got: Vec<String> =
        errors.iter().map(|e| format!("{}:{}: {}", e.line, e.col, e.message)).collect();
    let want = [
        "3:1: host bits set in 192.0.2.1/24",
        "4:14: ASN \"0\" must be a number from 1 to 4294967295",
        "5:14: ASN \"4294967296\" must be a number",
        "6:1: \"not-a-network\" is not a network",
        "7:1: expected 3 fields (network,asn,organization)",
        "9:1: network 198.51.100.0/24 is already on line 8",
        "10:15: ASN \"AS-1\" must be a number",
        "11:20: organization \"Unclosed has no closing double quote",
        "12:1: ::ffff:192.0.2.0/120 is inside ::ffff:0:0/96",
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (g, w) in got.iter().zip(want) {
        assert!(g.starts_with(w), "{g:?} should start with {w:?}");
    }
    assert!(!out.exists(), "nothing is written when the input has errors");
}

#[test]
fn the_header_is_optional_and_maxminds_reads_too() {
    let f = Path::new("in.csv");
    let rows = "192.0.2.0/24,64496,One\n";
    let maxmind = "network,autonomous_system_number,autonomous_system_organization\n";
    for text in [
        rows.to_string(),
        format!("network, asn, organization\r\n{rows}"),
        format!("{maxmind}{rows}"),
    ] {
        let (bytes, summary) = build_asn_bytes(&text, f, UNIX_EPOCH).unwrap();
        assert_eq!((summary.ipv4_networks, summary.ipv6_networks), (1, 0), "{text:?}");
        let db = AsnDb::from_bytes(f, bytes).unwrap();
        assert_eq!(db.lookup(ip("192.0.2.9")).asn, Some(64496), "{text:?}");
    }
    let e = build_asn_bytes("# nothing\nnetwork,asn,organization\n", f, UNIX_EPOCH).unwrap_err();
    assert_eq!(e[0].message, "no networks");
    let e = build_asn_bytes("net,as,org\n", f, UNIX_EPOCH).unwrap_err();
    assert_eq!((e[0].line, e[0].col), (1, 1), "a wrong header is a bad row: {e:?}");
}

// ---------------------------------------------------------------- configuration

/// `steerdns.yaml` of the test zone with the ASN database (`data/asn.mmdb`) and the geo
/// database (`data/city.mmdb`) built into `dir`, and `profiles` as `profiles/asn.yaml`.
fn write_asn_config(dir: &Path, profiles: &str, with_asn: bool) {
    write_config(dir, &[("asn.yaml", profiles)]);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    build_asn(&asn_fixture("asn.csv"), &dir.join("data/asn.mmdb")).unwrap();
    steerdns::geo::build(&location_fixture("city.csv"), &dir.join("data/city.mmdb")).unwrap();
    let asn = if with_asn { "asn:\n  database: data/asn.mmdb\n" } else { "" };
    let yaml = format!("{}geo:\n  database: data/city.mmdb\n{asn}", steerdns_yaml());
    std::fs::write(dir.join("steerdns.yaml"), yaml).unwrap();
}

fn load_errors(profiles: &str, with_asn: bool) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    write_asn_config(dir.path(), profiles, with_asn);
    match steerdns::config::load(&dir.path().join("steerdns.yaml"), None) {
        Ok(_) => Vec::new(),
        Err(e) => located(&e),
    }
}

#[test]
fn configuration_errors_are_located() {
    let profiles = "\
name: a
routing: asn
endpoints:
  - { name: x, target: 192.0.2.1, asns: [64496, 0, 64496, 4294967296] }
  - { name: y, target: 192.0.2.2, geo: [FR] }
---
name: b
routing: geographic
endpoints:
  - { name: x, target: 192.0.2.1, geo: [AS64496, FR] }
  - { name: y, target: 192.0.2.2, geo: [as64496, AS0, AS] }
---
name: c
routing: priority
endpoints:
  - { name: x, target: 192.0.2.1, asns: [64496] }
";
    let got = load_errors(profiles, true);
    let want = [
        "asn.yaml:4:49: an ASN is a number from 1 to 4294967295, got 0",
        "asn.yaml:4:52: ASN 64496 is listed twice",
        "asn.yaml:4:59: an ASN is a number from 1 to 4294967295, got 4294967296",
        "asn.yaml:5:40: geo applies to routing: geographic only",
        "asn.yaml:11:41: AS64496 is already mapped to endpoint x",
        "asn.yaml:11:50: \"AS0\": an ASN is a number from 1 to 4294967295",
        "asn.yaml:16:41: asns applies to routing: asn only",
    ];
    assert_eq!(got, want);
    // `AS` alone is American Samoa: a country code, not an ASN.
    assert!(!got.iter().any(|e| e.contains("11:55")), "{got:#?}");

    let got = load_errors(profiles.split("---").next().unwrap(), false);
    assert!(
        got.contains(&"asn.yaml:2:10: routing: asn needs an ASN database: asn: { database: ... } in steerdns.yaml".to_string()),
        "{got:#?}"
    );
    let got = load_errors(
        "name: g\nrouting: geographic\nendpoints:\n  - { name: x, target: 192.0.2.1, geo: [AS64496] }\n",
        false,
    );
    assert_eq!(
        got,
        ["asn.yaml:4:41: AS64496 needs an ASN database: asn: { database: ... } in steerdns.yaml"]
    );
}

#[test]
fn a_missing_or_wrong_asn_database_fails_the_load_at_its_key() {
    let dir = tempfile::tempdir().unwrap();
    write_asn_config(
        dir.path(),
        "name: p\nrouting: priority\nendpoints:\n  - { name: x, target: 192.0.2.1 }\n",
        true,
    );
    let path = dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let line = yaml.lines().position(|l| l == "  database: data/asn.mmdb").unwrap() + 1;
    for (db, message) in [
        ("data/none.mmdb", "cannot open ASN database"),
        ("data/city.mmdb", "not an ASN database"),
        ("data", "not a regular file (a directory)"),
    ] {
        std::fs::write(&path, yaml.replace("database: data/asn.mmdb", &format!("database: {db}")))
            .unwrap();
        let errors = located(&steerdns::config::load(&path, None).unwrap_err());
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(errors[0].starts_with(&format!("steerdns.yaml:{line}:13: ")), "{errors:#?}");
        assert!(errors[0].contains(message), "{errors:#?}");
    }
}

#[test]
fn a_reload_without_the_asn_database_checks_unchanged_asn_profiles_again() {
    // The profile file is unchanged, so without this check the reload would take the
    // profile over from the running configuration, unchecked.
    let dir = tempfile::tempdir().unwrap();
    let profile =
        "name: p\nrouting: asn\nendpoints:\n  - { name: x, target: 192.0.2.1, asns: [64496] }\n";
    write_asn_config(dir.path(), profile, true);
    let path = dir.path().join("steerdns.yaml");
    let first = steerdns::config::load(&path, None).unwrap();
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, yaml.replace("asn:\n  database: data/asn.mmdb\n", "")).unwrap();
    let Err(errors) = steerdns::config::load(&path, Some(first.previous())) else {
        panic!("the reload without asn.database was accepted");
    };
    let errors = located(&errors);
    assert_eq!(
        errors,
        [
            "asn.yaml:2:10: routing: asn needs an ASN database: asn: { database: ... } in steerdns.yaml"
        ]
    );
}

// ---------------------------------------------------------------- on the wire

const PROFILES: &str = "\
name: by-asn
routing: asn
endpoints:
  - { name: transit, target: 192.0.2.21, asns: [64496], always_serve: true }
  - { name: mobile, target: 192.0.2.22, asns: [64497, 64500], always_serve: true }
  - { name: v6, target: 192.0.2.23, asns: [64501, 64502], always_serve: true }
  - { name: other, target: 192.0.2.24, always_serve: true }
---
name: strict
routing: asn
endpoints:
  - { name: transit, target: 192.0.2.25, asns: [64496], always_serve: true }
---
name: geo-asn
routing: geographic
endpoints:
  - { name: transit, target: 192.0.2.31, geo: [AS64496], always_serve: true }
  - { name: fr, target: 192.0.2.32, geo: [FR], always_serve: true }
  - { name: cable, target: 192.0.2.33, geo: [as64498, US-NY], always_serve: true }
  - { name: world, target: 192.0.2.34, geo: [WORLD], always_serve: true }
---
name: geo-only
routing: geographic
endpoints:
  - { name: fr, target: 192.0.2.42, geo: [FR], always_serve: true }
  - { name: ny, target: 192.0.2.43, geo: [US-NY], always_serve: true }
  - { name: world, target: 192.0.2.44, geo: [WORLD], always_serve: true }
";

async fn start() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write_asn_config(dir.path(), PROFILES, true);
    Harness::in_dir(dir).await
}

/// An A query for `name` from ECS `client`/`source`: the answer ("A 192.0.2.21" or
/// "NODATA") and the ECS scope.
async fn ask(h: &Harness, name: &str, client: &str, source: u8) -> (String, u8) {
    let r = h.udp(&Q::new(&fq(name), T_A).edns().ecs(ip(client), source)).await;
    let (family, src, scope, _) = r.ecs().unwrap_or_else(|| panic!("no ECS in {r:#?}"));
    assert_eq!((family, src), (if ip(client).is_ipv4() { 1 } else { 2 }, source), "{r:#?}");
    if r.msg.answers.is_empty() {
        r.assert_negative(NOERROR);
        return ("NODATA".to_string(), scope);
    }
    (r.single(), scope)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_asn_answers_by_the_clients_operator_with_its_networks_scope() {
    let h = start().await;
    let cases = [
        ("by-asn", "192.0.2.10", 32, "A 192.0.2.21", 26),
        ("by-asn", "192.0.2.100", 32, "A 192.0.2.22", 26),
        ("by-asn", "198.51.100.150", 32, "A 192.0.2.22", 26),
        // A /24 question: the answer holds for the /25 the database splits it into.
        ("by-asn", "198.51.100.0", 24, "A 192.0.2.24", 25),
        ("by-asn", "2001:db8:1:8000::", 56, "A 192.0.2.23", 49),
        ("by-asn", "2001:db8:1::", 48, "A 192.0.2.23", 49),
        // Not in the database: the fallback, for the whole empty network.
        ("by-asn", "203.0.113.9", 32, "A 192.0.2.24", 5),
        ("strict", "192.0.2.10", 32, "A 192.0.2.25", 26),
        ("strict", "198.51.100.0", 24, "NODATA", 25),
        ("strict", "203.0.113.9", 32, "NODATA", 5),
    ];
    for (name, client, source, want, scope) in cases {
        let got = ask(&h, name, client, source).await;
        assert_eq!(got, (want.to_string(), scope), "{name} from {client}/{source}");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_asn_codes_beat_places_and_scope_to_the_narrower_network() {
    let h = start().await;
    // The ASN decided: the ASN network's scope.
    assert_eq!(ask(&h, "geo-asn", "192.0.2.10", 32).await, ("A 192.0.2.31".into(), 26));
    assert_eq!(ask(&h, "geo-asn", "192.0.2.200", 32).await, ("A 192.0.2.33".into(), 25));
    // The place decided after an unmapped ASN: the narrower of the two networks, which is
    // the ASN's /26 inside the Paris /25, the place's /24 inside the ASN's /23, and the
    // place's block when no ASN network is near.
    for (client, want, asn_len) in [
        ("192.0.2.100", "A 192.0.2.32", 26),
        ("100.64.10.5", "A 192.0.2.33", 23),
        ("100.64.6.1", "A 192.0.2.34", 21),
    ] {
        let (got, scope) = ask(&h, "geo-asn", client, 32).await;
        let (_, place) = ask(&h, "geo-only", client, 32).await;
        assert_eq!(got, want, "{client}");
        assert_eq!(scope, place.max(asn_len), "{client}: /{place} place, /{asn_len} ASN");
    }
    h.stop().await;
}

async fn wait_for(h: &Harness, client: &str, want: &str) {
    let start = Instant::now();
    loop {
        let (got, _) = ask(h, "by-asn", client, 32).await;
        if got == want {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "still {got}, not {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_asn_database_moves_the_answer_and_a_bad_one_is_rejected() {
    let h = start().await;
    let db = h.dir.path().join("data/asn.mmdb");
    assert_eq!(ask(&h, "by-asn", "198.51.100.5", 32).await, ("A 192.0.2.24".into(), 25));
    // 198.51.100.0/24 now belongs to the transit operator.
    let csv = std::fs::read_to_string(asn_fixture("asn.csv"))
        .unwrap()
        .replace("198.51.100.0/24,64499,Example Academic", "198.51.100.0/24,64496,Example Transit");
    let (bytes, _) = build_asn_bytes(&csv, Path::new("asn.csv"), UNIX_EPOCH).unwrap();
    write_atomic(&db, &bytes);
    wait_for(&h, "198.51.100.5", "A 192.0.2.21").await;
    // A file that does not parse: the reload is rejected and the database in use stays.
    let failures = || h.server().control().totals.reload_failures.load(Ordering::Relaxed);
    let before = failures();
    write_atomic(&db, b"not a database");
    let start = Instant::now();
    while failures() == before {
        assert!(start.elapsed() < Duration::from_secs(10), "no rejected reload");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ask(&h, "by-asn", "198.51.100.5", 32).await, ("A 192.0.2.21".into(), 25));
    let last = h.server().control().last_reload.get();
    assert_eq!(last.trigger, "file change", "{last:?}");
    assert_eq!(last.errors.len(), 1, "{last:?}");
    let at = format!("{}:", h.dir.path().join("steerdns.yaml").display());
    assert!(last.errors[0].starts_with(&at), "located at asn.database: {last:?}");
    assert!(last.errors[0].contains("asn.mmdb: cannot open ASN database"), "{last:?}");
    h.stop().await;
}

// ---------------------------------------------------------------- explain

fn explain(config: &Path, name: &str, client: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["explain", name, "A", "--client", client, "-c"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn explain_names_the_clients_asn_operator_network_and_match() {
    let dir = tempfile::tempdir().unwrap();
    write_asn_config(dir.path(), PROFILES, true);
    let config = dir.path().join("steerdns.yaml");
    let cases = [
        (
            "by-asn",
            "192.0.2.100",
            &[
                "scope:  /26",
                "  - client AS64497 (Example Mobile, Inc.), network 192.0.2.64/26",
                "  - AS64497 matches endpoint mobile (unmonitored)",
                "  by-asn.tm.example.test. 30 IN A 192.0.2.22",
            ][..],
        ),
        (
            "by-asn",
            "198.51.100.5",
            &[
                "  - client AS64499 (Example Academic), network 198.51.100.0/25",
                "  - no endpoint lists AS64499",
                "  - fallback endpoint other (unmonitored)",
            ],
        ),
        (
            "strict",
            "2001:db8:1:8000::1",
            &[
                "  - client AS64502, network 2001:db8:1:8000::/49",
                "  - no eligible fallback endpoint (without asns)",
                "rcode:  NOERROR",
            ],
        ),
        (
            "geo-asn",
            "192.0.2.10",
            &[
                "  - client AS64496 (Example Transit), network 192.0.2.0/26",
                "  - AS64496 matches endpoint transit (unmonitored)",
            ],
        ),
        (
            "geo-asn",
            "100.64.6.1",
            &[
                "  - client ASN unknown, network 100.64.0.0/21",
                "  - WORLD matches endpoint world (unmonitored)",
            ],
        ),
    ];
    for (name, client, lines) in cases {
        let text = explain(&config, name, client);
        for line in lines {
            assert!(
                text.lines().any(|l| l.starts_with(line)),
                "{name} from {client}: no {line:?} in\n{text}"
            );
        }
    }
}

// ---------------------------------------------------------------- speed (by hand)

/// Figures for a GeoLite2-ASN-sized database (about 500,000 networks): building it,
/// opening it (read, walk, decode) and looking addresses up. Run with
/// `cargo test --test asn -- --ignored --nocapture asn_speed`.
#[test]
#[ignore]
fn asn_speed() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut nets = std::collections::BTreeSet::new();
    while nets.len() < 400_000 {
        let a = (next() as u32) & 0xffff_ff00;
        nets.insert(format!("{}/24", std::net::Ipv4Addr::from(a)));
    }
    while nets.len() < 500_000 {
        let a = (next() as u128) << 80 | 0x2400 << 112;
        nets.insert(format!("{}/48", std::net::Ipv6Addr::from(a)));
    }
    let mut csv = String::from("network,asn,organization\n");
    for n in &nets {
        let asn = 1 + next() % 70_000;
        csv.push_str(&format!("{n},{asn},Operator {asn}\n"));
    }
    let started = Instant::now();
    let (bytes, summary) = build_asn_bytes(&csv, Path::new("big.csv"), UNIX_EPOCH).unwrap();
    println!("build: {summary} in {:?}", started.elapsed());
    let started = Instant::now();
    let db = AsnDb::from_bytes(Path::new("big.mmdb"), bytes).unwrap();
    println!("open (parse, walk, decode {} records): {:?}", db.record_count(), started.elapsed());
    let addrs: Vec<std::net::IpAddr> = (0..1_000_000)
        .map(|_| std::net::IpAddr::from(std::net::Ipv4Addr::from(next() as u32)))
        .collect();
    let started = Instant::now();
    let mut found = 0usize;
    for a in &addrs {
        found += usize::from(std::hint::black_box(db.lookup(*a)).asn.is_some());
    }
    let ns = started.elapsed().as_nanos() as f64 / addrs.len() as f64;
    println!("lookup: {ns:.0} ns ({found} of {} found)", addrs.len());
}
