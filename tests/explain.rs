//! `steerdns explain` and `steerdns geo build`, run as the built binary.
//!
//! explain is checked on the shipped example configuration (`steerdns.yaml` at the repository
//! root) and on the location test configuration of `tests/common` (geo database built from
//! `tests/fixtures/location/city.csv`): its trace for a geographic and a groups profile,
//! `--down`, errors, and that for deterministic methods it prints exactly what the server
//! answers over UDP to the same client (ECS /32 or /128).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use steerdns::geo::GeoDb;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// What one run of the binary gave.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn steerdns(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run steerdns");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `steerdns explain NAME TYPE --client CLIENT -c CONFIG [--down D]...`, which must succeed.
fn explain(config: &Path, name: &str, qtype: &str, client: &str, down: &[&str]) -> Explained {
    let config = config.to_str().unwrap();
    let mut args = vec!["explain", name, qtype, "--client", client, "-c", config];
    for d in down {
        args.extend(["--down", d]);
    }
    let run = steerdns(&args);
    assert_eq!(run.code, 0, "explain {args:?}: {run:#?}");
    Explained::parse(&run.stdout)
}

/// The parts of explain's output: rcode, ECS scope, answer records ("A 192.0.2.1"),
/// authority lines and trace lines.
#[derive(Debug)]
struct Explained {
    text: String,
    rcode: String,
    scope: Option<u8>,
    answer: Vec<String>,
    authority: Vec<String>,
    trace: Vec<String>,
    /// The lines of the `monitors:` section, trimmed.
    monitors: Vec<String>,
}

impl Explained {
    fn parse(text: &str) -> Explained {
        let mut e = Explained {
            text: text.to_string(),
            rcode: String::new(),
            scope: None,
            answer: Vec::new(),
            authority: Vec::new(),
            trace: Vec::new(),
            monitors: Vec::new(),
        };
        let mut section = "";
        for line in text.lines() {
            if let Some(r) = line.strip_prefix("rcode:") {
                e.rcode = r.trim().to_string();
            } else if let Some(s) = line.strip_prefix("scope:") {
                let n = s.trim().trim_start_matches('/').split_whitespace().next().unwrap();
                e.scope = Some(n.parse().unwrap_or_else(|_| panic!("scope line {line:?}")));
            } else if ["answer:", "trace:", "monitors:"].contains(&line) {
                section = line;
            } else if section == "answer:" {
                let rr = line.trim();
                if let Some(a) = rr.strip_prefix("(authority)") {
                    e.authority.push(a.trim().to_string());
                } else {
                    // "NAME TTL IN TYPE RDATA": keep "TYPE RDATA".
                    let fields: Vec<&str> = rr.split_whitespace().collect();
                    assert!(fields.len() >= 5 && fields[2] == "IN", "answer line {line:?}");
                    e.answer.push(format!("{} {}", fields[3], fields[4..].join(" ")));
                }
            } else if section == "trace:" {
                let t = line.trim().strip_prefix("- ").unwrap_or(line.trim());
                e.trace.push(t.to_string());
            } else if section == "monitors:" {
                e.monitors.push(line.trim().to_string());
            }
        }
        assert!(!e.rcode.is_empty(), "no rcode line in {text}");
        e
    }

    fn traced(&self, fragment: &str) -> bool {
        self.trace.iter().any(|t| t.contains(fragment))
    }
}

// ---------------------------------------------------------------------------------------
// explain on the shipped example configuration
// ---------------------------------------------------------------------------------------

#[test]
fn explain_geographic_shows_the_client_location_and_the_matched_code() {
    let config = repo("steerdns.yaml");
    // San Francisco in the sample database: US-CA → us-west.
    let e = explain(&config, "geo", "A", "192.0.2.130", &[]);
    assert_eq!(e.rcode, "NOERROR", "{}", e.text);
    assert_eq!(e.answer, ["A 198.51.100.61"], "{}", e.text);
    assert_eq!(e.scope, Some(25), "the sample database's /25: {}", e.text);
    assert!(e.traced("routing: geographic"), "{}", e.text);
    assert!(
        e.traced("client location: continent NA, country US, subdivision CA (network /25)"),
        "{}",
        e.text
    );
    assert!(e.traced("US-CA matches endpoint us-west"), "{}", e.text);
    assert!(e.traced("picked endpoint us-west"), "{}", e.text);
    // Paris: FR is in GEO-EU → eu-1; the trace names the grouping code that matched.
    let e = explain(&config, "geo", "A", "192.0.2.10", &[]);
    assert_eq!(e.answer, ["A 192.0.2.61"], "{}", e.text);
    assert!(e.traced("country FR"), "{}", e.text);
    assert!(e.traced("GEO-EU matches endpoint eu-1"), "{}", e.text);
    // Beijing: GEO-AS → asia; the relative and absolute names give the same answer.
    let e = explain(&config, "geo.tm.example.test.", "A", "198.51.100.7", &[]);
    assert_eq!(e.answer, ["A 203.0.113.61"], "{}", e.text);
    assert!(e.traced("country CN"), "{}", e.text);
    assert!(e.traced("GEO-AS matches endpoint asia"), "{}", e.text);
}

#[test]
fn explain_groups_shows_the_shares_and_the_picked_group() {
    let config = repo("steerdns.yaml");
    // accel: beijing and shanghai, dials 50% and 50%. 198.51.100.7 is nearest beijing.
    let e = explain(&config, "accel", "A", "198.51.100.7", &[]);
    assert_eq!(e.rcode, "NOERROR", "{}", e.text);
    assert!(e.traced("routing: groups"), "{}", e.text);
    assert!(e.traced("beijing 62.5%"), "{}", e.text);
    assert!(e.traced("shanghai 37.5%"), "{}", e.text);
    let beijing_first = e
        .trace
        .iter()
        .find(|t| t.contains("62.5%"))
        .is_some_and(|t| t.find("beijing").unwrap() < t.find("shanghai").unwrap());
    assert!(beijing_first, "beijing is the closest group: {}", e.text);
    // The picked group is named, and the answer is one of its endpoints.
    let bj = ["A 198.51.100.91", "A 198.51.100.92"];
    let group = if e.traced("group beijing takes this query") {
        "beijing"
    } else {
        assert!(e.traced("group shanghai takes this query"), "no picked group: {}", e.text);
        "shanghai"
    };
    assert_eq!(e.answer.len(), 1, "{}", e.text);
    assert_eq!(bj.contains(&e.answer[0].as_str()), group == "beijing", "{}", e.text);
    // A Shanghai client (198.51.100.128/25 row): the order and the shares flip.
    let e = explain(&config, "accel", "A", "198.51.100.130", &[]);
    assert!(e.traced("shanghai 62.5%") && e.traced("beijing 37.5%"), "{}", e.text);
    // The closest group down: the other takes everything (dials ignored).
    let e = explain(&config, "accel", "A", "198.51.100.7", &["accel/bj-1", "accel/bj-2"]);
    assert_eq!(e.answer, ["A 198.51.100.93"], "{}", e.text);
    assert!(e.traced("group shanghai takes this query"), "{}", e.text);
}

#[test]
fn explain_down_moves_a_priority_profile_to_its_next_endpoint() {
    let config = repo("steerdns.yaml");
    let e = explain(&config, "www", "A", "192.0.2.1", &[]);
    assert_eq!(e.answer, ["A 192.0.2.10"], "{}", e.text);
    let e = explain(&config, "www", "A", "192.0.2.1", &["www/primary"]);
    assert_eq!(e.answer, ["A 198.51.100.10"], "{}", e.text);
    assert!(e.traced("primary (degraded)"), "{}", e.text);
    assert!(e.traced("picked endpoint secondary"), "{}", e.text);
    // Both A endpoints down: fail_open (default true) serves the degraded primary again.
    let e = explain(&config, "www", "A", "192.0.2.1", &["www/primary", "www/secondary"]);
    assert_eq!(e.answer, ["A 192.0.2.10"], "{}", e.text);
    // AAAA is another endpoint: untouched by --down www/primary.
    let e = explain(&config, "www", "AAAA", "2001:db8::1", &["www/primary"]);
    assert_eq!(e.answer, ["AAAA 2001:db8::10"], "{}", e.text);
}

/// The trace and the errors speak DNS, not Rust: record types as DNS writes them, names
/// in backquotes, nothing printed with `Debug`.
#[test]
fn explain_text_names_record_types_as_dns_does() {
    let config = repo("steerdns.yaml");
    let cases = [
        ("www", "A", "candidates for A: primary (unmonitored), secondary (unmonitored)"),
        ("www", "AAAA", "candidates for AAAA: primary-v6 (unmonitored)"),
        ("api", "AAAA", "candidates for AAAA: none"),
        ("app", "A", "candidates for A (addresses only): blue (unmonitored), green (unmonitored)"),
        ("app", "AAAA", "candidates for AAAA (addresses only): none"),
        (
            "app",
            "TXT",
            "candidates for any type (host names and addresses): blue (unmonitored), \
             green (unmonitored), cdn (unmonitored)",
        ),
    ];
    for (name, qtype, line) in cases {
        let e = explain(&config, name, qtype, "192.0.2.1", &[]);
        assert!(e.trace.iter().any(|t| t == line), "{name} {qtype}: want {line:?} in {e:#?}");
        // Rust's Debug shows enum variants in CamelCase, options and structs by their names.
        let camel = |t: &str| {
            t.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| {
                w.len() > 1
                    && w[1..].contains(|c: char| c.is_ascii_uppercase())
                    && w.contains(|c: char| c.is_ascii_lowercase())
            })
        };
        for t in &e.trace {
            let debug = ["Aaaa", "Cname", "for Any", "Some(", "None", " {"];
            assert!(!camel(t) && !debug.iter().any(|d| t.contains(d)), "{name} {qtype}: {t:?}");
        }
    }
    let config = config.to_str().unwrap();
    for (args, message) in [
        (["www", "BOGUS"], "error: unknown query type `BOGUS`"),
        (["a b", "A"], "error: invalid name `a b`"),
    ] {
        let run = steerdns(&["explain", args[0], args[1], "--client", "192.0.2.1", "-c", config]);
        assert_eq!(run.code, 1, "{run:#?}");
        assert_eq!(run.stderr.trim_end(), message, "{run:#?}");
    }
}

#[test]
fn explain_down_with_an_unknown_profile_or_endpoint_fails() {
    let config = repo("steerdns.yaml");
    let config = config.to_str().unwrap();
    for (down, message) in [
        ("nope/primary", "no such profile"),
        ("www/nope", "no such endpoint"),
        ("www", "profile/endpoint"),
    ] {
        let run =
            steerdns(&["explain", "www", "--client", "192.0.2.1", "-c", config, "--down", down]);
        assert_eq!(run.code, 1, "--down {down}: {run:#?}");
        assert!(
            run.stderr.contains(down) && run.stderr.contains(message),
            "--down {down}: want {message:?} in stderr: {run:#?}"
        );
        assert!(run.stdout.is_empty(), "--down {down}: nothing on stdout: {run:#?}");
    }
}

#[test]
fn explain_down_follows_each_method_s_rules() {
    // The example's geographic profile has degraded_match: fallback: a degraded US-CA match
    // continues up the hierarchy to GEO-NA (us, 198.51.100.62).
    let example = repo("steerdns.yaml");
    let e = explain(&example, "geo", "A", "192.0.2.130", &["geo/us-west"]);
    assert_eq!(e.answer, ["A 198.51.100.62"], "{}", e.text);
    assert!(e.traced("degraded_match: fallback"), "{}", e.text);

    let dir = tempfile::tempdir().unwrap();
    write_location_config(dir.path(), &location_profiles());
    let config = dir.path().join("steerdns.yaml");
    // (profile, client, --down, answer, trace fragment)
    let cases: &[(&str, &str, &[&str], &str, &str)] = &[
        // degraded_match: serve (default): the matched endpoint answers whatever its health.
        (
            "geo",
            "192.0.2.130",
            &["geo/usca"],
            "A 192.0.2.1",
            "US-CA matches endpoint usca (degraded)",
        ),
        ("office", "10.1.2.3", &["office/lan"], "A 192.0.2.21", "range of lan (degraded)"),
        // degraded_match: fallback on a subnet profile: the fallback endpoint.
        ("office-fb", "10.1.2.3", &["office-fb/lan"], "A 192.0.2.34", "fallback endpoint internet"),
        // performance: the next region (FR row: eu-west 18 ms, then us-east 85 ms).
        ("fast", "192.0.2.5", &["fast/dublin"], "A 192.0.2.42", "us-east (85 ms)"),
        // groups: the first group unhealthy → the next healthy one takes everything.
        ("ga-five", "192.0.2.5", &["ga-five/eu-1"], "A 203.0.113.2", "use takes everything"),
        (
            "ga-five",
            "192.0.2.5",
            &["ga-five/eu-1", "ga-five/use-1", "ga-five/usw-1"],
            "A 203.0.113.4",
            "ap takes everything",
        ),
        // ... at most three groups after the first; then fail open in the first group.
        (
            "ga-five",
            "192.0.2.5",
            &["ga-five/eu-1", "ga-five/use-1", "ga-five/usw-1", "ga-five/ap-1"],
            "A 203.0.113.1",
            "fail open in eu",
        ),
        // zone: 1 of 4 serving endpoints in zone-a is 25% ≥ 20%: the remaining a2.
        ("svc", "10.1.2.3", &["svc/a1"], "A 192.0.2.102", "1 of 4 serving endpoints"),
        // geoproximity from Paris: Frankfurt (478 km) is nearer than Dublin (781 km); with
        // Frankfurt down, Dublin. Dublin's +50 halves its distance on near-biased.
        ("near", "192.0.2.5", &[], "A 192.0.2.202", "nearest by biased distance: frankfurt"),
        (
            "near",
            "192.0.2.5",
            &["near/frankfurt"],
            "A 192.0.2.201",
            "endpoint dublin: 781 km, bias +0, biased 781 km",
        ),
        (
            "near-biased",
            "192.0.2.5",
            &[],
            "A 192.0.2.211",
            "endpoint dublin: 781 km, bias +50, biased 390 km",
        ),
        (
            "near-biased",
            "192.0.2.5",
            &[],
            "A 192.0.2.211",
            "endpoint frankfurt: 478 km, bias +0, biased 478 km",
        ),
    ];
    let mut failures = Vec::new();
    for (name, client, down, answer, fragment) in cases {
        let e = explain(&config, name, "A", client, down);
        if e.answer != [*answer] || !e.traced(fragment) {
            failures.push(format!(
                "{name} from {client} --down {down:?}: want {answer} and {fragment:?}, got:\n{}",
                e.text
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// explain agrees with the wire
// ---------------------------------------------------------------------------------------

/// A reply's answer as explain prints it: ("NOERROR", ["A 192.0.2.1"], scope).
fn wire_view(r: &Reply) -> (String, Vec<String>, Option<u8>) {
    let rcode = match r.rcode() {
        NOERROR => "NOERROR".to_string(),
        NXDOMAIN => "NXDOMAIN".to_string(),
        REFUSED => "REFUSED".to_string(),
        n => format!("RCODE{n}"),
    };
    (rcode, r.answer_strings(), r.ecs().map(|e| e.2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_answers_what_the_server_answers() {
    let h = Harness::location(&[]).await;
    let config = h.dir.path().join("steerdns.yaml");
    // Deterministic methods (geographic, subnet, performance, groups at dial 100, the
    // next group when the first is down), clients all over the fixture database.
    let cases: &[(&str, &str)] = &[
        ("geo", "192.0.2.130"),
        ("geo", "192.0.2.5"),
        ("geo", "100.64.6.5"),
        ("geo", "100.64.10.5"),
        ("geo", "198.51.100.200"),
        ("geo", "203.0.113.5"),
        ("geo", "100.100.0.1"),
        ("geo", "2001:db8:1::5"),
        ("geo-nw", "203.0.113.5"),
        ("geo-nw", "192.0.2.5"),
        ("office", "10.1.2.3"),
        ("office", "192.0.2.15"),
        ("office", "192.0.2.100"),
        ("office", "172.16.1.1"),
        ("office", "2001:db8:a::150"),
        ("office-nofb", "203.0.113.1"),
        ("fast", "198.51.100.200"),
        ("fast", "198.51.100.5"),
        ("fast", "192.0.2.130"),
        ("fast", "100.64.6.5"),
        ("fast", "100.64.21.1"),
        ("fast", "2001:db8:1::5"),
        ("fast-noeu", "192.0.2.5"),
        ("fast-pair", "100.80.7.1"),
        ("fast-pair", "100.80.8.1"),
        ("ga-100-100", "198.51.100.5"),
        ("ga-100-100", "198.51.100.200"),
        ("ga-down", "198.51.100.5"),
    ];
    let mut failures = Vec::new();
    for (name, client) in cases {
        let e = explain(&config, name, "A", client, &[]);
        let source = if ip(client).is_ipv4() { 32 } else { 128 };
        let r = h.udp(&Q::new(&fq(name), T_A).edns().ecs(ip(client), source)).await;
        let wire = wire_view(&r);
        let told = (e.rcode.clone(), e.answer.clone(), e.scope);
        if told != wire {
            failures.push(format!("{name} from {client}: explain {told:?}, wire {wire:?}"));
        }
        // A NODATA shows the zone's SOA in both.
        if e.answer.is_empty() {
            assert_eq!(e.authority.len(), r.msg.authorities.len(), "{name} {client}");
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    h.stop().await;
}

#[test]
fn explain_location_methods_trace_the_client_location() {
    // The trace shows the client's location (network, continent, country,
    // subdivision, zone) and the latencies, for every method that depends on it.
    let dir = tempfile::tempdir().unwrap();
    write_location_config(dir.path(), &location_profiles());
    let config = dir.path().join("steerdns.yaml");
    let mut failures = Vec::new();
    for (name, client, wanted) in [
        ("geo", "198.51.100.5", &["country CN", "(network /25)"][..]),
        ("fast", "198.51.100.5", &["country CN", "20 ms"][..]),
        ("ga-50-50", "198.51.100.5", &["country CN", "20 ms", "30 ms"][..]),
        ("svc", "10.1.2.3", &["zone-a"][..]),
    ] {
        let e = explain(&config, name, "A", client, &[]);
        for w in wanted {
            if !e.traced(w) {
                failures.push(format!("{name} from {client}: no {w:?} in the trace:\n{}", e.text));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// geo build
// ---------------------------------------------------------------------------------------

#[test]
fn geo_build_writes_a_readable_database() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("city.mmdb");
    let csv = repo("tests/fixtures/location/city.csv");
    let run = steerdns(&["geo", "build", csv.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(run.stdout.contains("11 IPv4 and 2 IPv6 networks"), "{run:#?}");
    let db = GeoDb::open(&out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(db.metadata().database_type, "GeoIP2-City");
    // (address, continent, country, subdivision, coordinates, network prefix)
    type Case = (&'static str, &'static str, &'static str, Option<&'static str>, bool, u8);
    let cases: &[Case] = &[
        ("192.0.2.130", "NA", "US", Some("CA"), true, 25),
        ("192.0.2.5", "EU", "FR", Some("IDF"), true, 25),
        ("100.64.6.5", "EU", "DE", None, true, 24),
        ("100.64.21.1", "AS", "JP", Some("13"), true, 22), // "JP-13" stored as MaxMind does
        ("198.51.100.200", "AS", "CN", Some("SH"), true, 25),
        ("2001:db8:1::5", "EU", "GB", Some("ENG"), true, 48),
        ("::ffff:192.0.2.130", "NA", "US", Some("CA"), true, 25), // IPv4-mapped
    ];
    for (addr, continent, country, sub, coords, prefix) in cases {
        let loc = db.lookup(ip(addr)).unwrap_or_else(|| panic!("{addr}: no location"));
        assert_eq!(loc.continent.map(|c| c.to_string()).as_deref(), Some(*continent), "{addr}");
        assert_eq!(loc.country.map(|c| c.to_string()).as_deref(), Some(*country), "{addr}");
        assert_eq!(loc.subdivision.map(|c| c.to_string()).as_deref(), *sub, "{addr}");
        assert_eq!(loc.coords().is_some(), *coords, "{addr}");
        assert_eq!(loc.prefix_len, *prefix, "{addr}");
    }
    let (lat, lon) = db.lookup(ip("203.0.113.9")).unwrap().coords().unwrap();
    assert!((lat + 33.8688).abs() < 1e-9 && (lon - 151.2093).abs() < 1e-9, "{lat},{lon}");
    assert_eq!(db.lookup(ip("100.100.0.1")), None, "no data outside the CSV's networks");
    assert_eq!(db.lookup(ip("2001:db8:99::1")), None);
}

#[test]
fn geo_build_reports_bad_rows_with_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bad.mmdb");
    let csv = repo("tests/fixtures/location/bad-city.csv");
    let run = steerdns(&["geo", "build", csv.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(!out.exists(), "nothing is written for a bad CSV");
    let path = csv.display().to_string();
    // (line, column, message fragment): every bad row, in one run.
    let expected: &[(usize, usize, &str)] = &[
        (4, 1, "host bits set in 192.0.2.129/25"),
        (5, 17, "continent \"XX\""),
        (6, 19, "country \"ZZ\""),
        (7, 22, "latitude \"91.5\""),
        (8, 1, "already on line 3"),
        (9, 1, "\"not-a-network\" is not a network"),
        (10, 1, "expected 6 fields"),
    ];
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{run:#?}");
    for ((line, col, msg), got) in expected.iter().zip(&lines) {
        let prefix = format!("{path}:{line}:{col}: ");
        assert!(got.starts_with(&prefix) && got.contains(msg), "want {prefix}..{msg}.., got {got}");
    }
    // A missing input file is an error too, naming the file.
    let missing = dir.path().join("missing.csv");
    let run = steerdns(&["geo", "build", missing.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stdout.contains("missing.csv"), "{run:#?}");
}

/// A profile whose endpoints have several monitors (`a`), one (`b`), a pushed one (`c`),
/// and a nested profile with several (`child/x`); every probe at a closed port.
const MONITORED: &str = "name: mon\nrouting: priority\nendpoints:
  - name: a
    target: 127.0.0.1
    monitor_rule: any
    monitors:
      - { name: web, protocol: http, port: 1 }
      - { name: db, protocol: tcp, port: 2 }
  - { name: b, target: 127.0.0.2, monitor: { protocol: tcp, port: 3 } }
  - name: c
    target: 127.0.0.3
    monitors:
      - { name: ops, protocol: pushed, missing: last_known }
  - { name: n, profile: child }
---
name: child
routing: priority
endpoints:
  - name: x
    target: 127.0.0.4
    monitor_rule: { at_least: 1 }
    monitors:
      - { name: one, protocol: tcp, port: 4 }
      - { name: two, protocol: https, port: 5 }
";

/// Offline, explain lists the monitors it does not run: each endpoint of the profile and of
/// the profiles it nests with several monitors or a pushed one, with its rule, the status
/// explain took (online, or degraded for `--down`) and every monitor as configured, not
/// probed. The running server's explain lists the same endpoints, rules and monitors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_lists_the_configured_monitors_as_the_server_does() {
    let h = Harness::with_admin_and_keys(&[("mon.yaml", MONITORED)], "").await;
    let config = h.dir.path().join("steerdns.yaml");
    let e = explain(&config, "mon", "A", "192.0.2.1", &["mon/c"]);
    let (mon, child) = (fq("mon"), fq("child"));
    let want = [
        format!("{mon}/a: online by rule any (not probed offline: taken as online)"),
        "web (http): not probed offline".into(),
        "db (tcp): not probed offline".into(),
        format!("{mon}/c: degraded by rule all (marked down with --down)"),
        "ops (pushed): not probed offline".into(),
        format!("{child}/x: online by rule at_least 1 (not probed offline: taken as online)"),
        "one (tcp): not probed offline".into(),
        "two (https): not probed offline".into(),
    ];
    assert_eq!(e.monitors, want, "{}", e.text);

    // What the server lists: (profile/endpoint, rule, [monitor (protocol)]).
    let shape = |list: &serde_json::Value| -> Vec<(String, String, Vec<String>)> {
        let s = |v: &serde_json::Value| v.as_str().unwrap().to_string();
        (list.as_array().into_iter().flatten())
            .map(|m| {
                let monitors = m["monitors"].as_array().unwrap().iter();
                (
                    format!("{}/{}", s(&m["profile"]), s(&m["endpoint"])),
                    s(&m["rule"]),
                    monitors
                        .map(|x| format!("{} ({})", s(&x["name"]), s(&x["protocol"])))
                        .collect(),
                )
            })
            .collect()
    };
    let path = "/api/v1/explain?name=mon&type=A&client=192.0.2.1";
    let mut online = Vec::new();
    eventually(Duration::from_secs(15), "the server's explain lists the monitors", async || {
        online = shape(&http_get(h.admin(), path, None).await.json()["monitors"]);
        online.sort();
        online.len() == 3
    })
    .await;
    let offline: Vec<(String, String, Vec<String>)> = (e.monitors.iter())
        .filter(|l| !l.ends_with(": not probed offline"))
        .map(|l| {
            let (endpoint, rest) = l.split_once(": ").unwrap();
            let rule = rest.split_once(" by rule ").unwrap().1.split(" (").next().unwrap();
            let monitors = (e.monitors.iter())
                .skip_while(|m| *m != l)
                .skip(1)
                .take_while(|m| m.ends_with(": not probed offline"))
                .map(|m| m.trim_end_matches(": not probed offline").to_string());
            (endpoint.to_string(), rule.to_string(), monitors.collect())
        })
        .collect();
    let mut offline = offline;
    offline.sort();
    assert_eq!(offline, online);
    h.stop().await;
}
