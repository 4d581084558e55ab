//! Configuration validation: one case per kind of configuration error, each checked for
//! its FILE:LINE:COL, plus `steerdns check` on a valid and an invalid configuration, and
//! reloads that take over unchanged files (same result, same errors as a fresh load).

use std::path::Path;
use std::process::Command;

mod common;

use common::{assert_each_located, config_dir, errors_of};

use steerdns::config;

const SERVER: &str = common::ZONE_ONLY_SERVER;

const EP: &str = "endpoints:\n  - { name: a, target: 192.0.2.1 }\n";

#[test]
fn one_error_per_case_with_location() {
    // (profile YAML, expected "file:line:col" prefix, expected message fragment)
    let cases: Vec<(String, &str, &str)> = vec![
        (format!("name: www\nrouting: priority\ncolour: red\n{EP}"), "p.yaml:3:1", "unknown field `colour`"),
        (format!("name: www\nrouting: priority\nttl: soon\n{EP}"), "p.yaml:3:6", "expected an integer"),
        (format!("name: www\nrouting: priority\nttl: -1\n{EP}"), "p.yaml:3:6", "ttl must be between 0"),
        (format!("name: www\nrouting: fastest\n{EP}"), "p.yaml:2:10", "unknown routing method"),
        ("name: www\nrouting: multivalue\nmax_return: 11\nendpoints: []\n".into(), "p.yaml:3:13", "max_return must be between 1 and 10"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n  - { name: a, target: 192.0.2.2 }\n".into(), "p.yaml:5:13", "duplicate endpoint name"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, priority: 2 }\n  - { name: b, target: 192.0.2.2 }\n".into(), "p.yaml:5:5", "duplicate priority 2"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, priority: 1001 }\n".into(), "p.yaml:4:45", "priority must be between 1 and 1000"),
        ("name: www\nrouting: weighted\nendpoints:\n  - { name: a, target: 192.0.2.1, weight: 1001 }\n".into(), "p.yaml:4:43", "weight must be between 0 and 1000"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: A!, target: 192.0.2.1 }\n".into(), "p.yaml:4:13", "must match [a-z0-9_-]+"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: a, target: backend.example.net }\n".into(), "p.yaml:4:24", "neither an IP address nor an absolute host name"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: a }\n".into(), "p.yaml:4:5", "needs target:"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: a, profile: nowhere }\n".into(), "p.yaml:4:25", "nested profile nowhere.tm.example.test. does not exist"),
        ("name: www.elsewhere.test.\nrouting: priority\nendpoints: []\n".into(), "p.yaml:1:7", "outside every zone"),
        ("name: www\nrouting: priority\nendpoints: []\n---\nname: WWW.tm.example.test.\nrouting: weighted\nendpoints: []\n".into(), "p.yaml:5:7", "two profiles are named www.tm.example.test."),
        ("name: static\nrouting: priority\nendpoints: []\n".into(), "p.yaml:1:7", "has static records"),
        ("name: www\nrouting: priority\nmonitor: { protocol: tcp, port: 22, path: /x }\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:3:43", "path is not allowed on a tcp monitor"),
        ("name: www\nrouting: priority\nmonitor: { protocol: tcp }\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:5:5", "a tcp monitor needs a port"),
        ("name: www\nrouting: priority\nmonitor: { interval: 2h }\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:3:22", "interval must be between 1s and 1h"),
        ("name: www\nrouting: priority\nmonitor: { interval: 10s, timeout: 10s }\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:3:36", "timeout must be above 0 and below the interval"),
        ("name: www\nrouting: priority\nmonitor: { interval: ten }\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:3:22", "invalid duration"),
        ("name: www\nrouting: priority\nmonitor: { tolerated_failures: 10 }\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:3:32", "tolerated_failures must be between 0 and 9"),
        ("name: www\nrouting: priority\nmonitor: { expected_status: [\"200-99\"] }\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:3:30", "expected_status entries"),
        ("name: www\nrouting: priority\nmonitor: { protocol: gopher }\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:3:22", "protocol must be http, https, tcp"),
        ("name: www\nrouting: multivalue\nendpoints:\n  - { name: a, target: host.example.net. }\n".into(), "p.yaml:4:5", "multivalue endpoints must have IP address targets"),
        ("name: www\nrouting: priority\nsticky: true\nendpoints: []\n".into(), "p.yaml:3:9", "sticky applies to"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: n, profile: www }\n".into(), "p.yaml:1:7", "nesting cycle"),
        ("name: www\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n".into(), "p.yaml:4:5", "geoproximity endpoints need coordinates"),
        ("name: www\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, coordinates: { latitude: 91, longitude: 0 } }\n".into(), "p.yaml:4:60", "latitude must be between -90 and 90, got 91"),
        ("name: www\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, coordinates: { latitude: 0, longitude: -180.5 } }\n".into(), "p.yaml:4:74", "longitude must be between -180 and 180, got -180.5"),
        ("name: www\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, coordinates: { latitude: 0 } }\n".into(), "p.yaml:4:50", "missing field `longitude`"),
        ("name: www\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, coordinates: { latitude: 1, longitude: 2 }, bias: 100 }\n".into(), "p.yaml:4:85", "bias must be between -99 and 99, got 100"),
        ("name: www\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, coordinates: { latitude: 1, longitude: 2 }, bias: -100 }\n".into(), "p.yaml:4:85", "bias must be between -99 and 99, got -100"),
        ("name: www\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, location: eu-west }\n".into(), "p.yaml:2:10", "needs latency: { table: ... }"),
        ("name: www\nrouting: weighted\nendpoints:\n  - { name: a, target: 192.0.2.1, bias: 5 }\n".into(), "p.yaml:4:41", "bias applies to routing: geoproximity only"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, coordinates: { latitude: 1, longitude: 2 } }\n".into(), "p.yaml:4:48", "coordinates applies to routing: geoproximity only"),
        ("name: www\nrouting: priority\nendpoints:\n  - { name: n, profile: c, always_serve: true }\n---\nname: c\nrouting: priority\nendpoints: []\n".into(), "p.yaml:4:42", "always_serve does not apply to a nested endpoint"),
    ];
    assert_each_located(&cases, |yaml| errors_of(SERVER, yaml));
}

/// Several monitors per endpoint: each mistake in `monitors` and `monitor_rule` is named
/// where it is written, once even when the profile's list serves several endpoints.
#[test]
fn monitors_errors_are_located() {
    let two = "  - { name: a, target: 192.0.2.1 }\n  - { name: b, target: 192.0.2.2 }\n";
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("name: www\nrouting: priority\nmonitors:\n  - {{ protocol: tcp, port: 22 }}\nendpoints:\n{two}"),
            "p.yaml:4:5",
            "every monitor in monitors needs a name",
        ),
        (
            format!("name: www\nrouting: priority\nmonitors:\n  - {{ name: web }}\n  - {{ name: web, protocol: tcp, port: 22 }}\nendpoints:\n{two}"),
            "p.yaml:5:13",
            "duplicate monitor name \"web\"",
        ),
        (
            format!("name: www\nrouting: priority\nmonitors:\n  - {{ name: web }}\n  - {{ name: db, protocol: tcp, port: 5432 }}\nmonitor_rule: {{ at_least: 3 }}\nendpoints:\n{two}"),
            "p.yaml:6:15",
            "monitor_rule at_least must be between 1 and the number of monitors (2), got 3",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - name: a\n    target: 192.0.2.1\n    monitors: [{ name: web }]\n    monitor_rule: { at_least: 0 }\n".into(),
            "p.yaml:7:19",
            "got 0",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitor_rule: most }\n".into(),
            "p.yaml:4:49",
            "monitor_rule must be all, any or {at_least: N}, got \"most\"",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitor: {}, monitors: [{ name: x }] }\n".into(),
            "p.yaml:4:58",
            "monitor and monitors cannot both be set",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitors: [] }\n".into(),
            "p.yaml:4:45",
            "monitors must hold 1 to 16 monitors",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitors: [{ name: Web }] }\n".into(),
            "p.yaml:4:54",
            "monitor name \"Web\" must match",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitors: [{ name: ext, protocol: file }] }\n".into(),
            "p.yaml:4:46",
            "a file monitor needs a file",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitors: [{ name: ops, protocol: pushed, missing: maybe }] }\n".into(),
            "p.yaml:4:86",
            "missing must be healthy, unhealthy or last_known, got \"maybe\"",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitors: [{ name: ops, protocol: pushed, port: 80 }] }\n".into(),
            "p.yaml:4:83",
            "port does not apply to a pushed monitor",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitors: [{ name: ops, protocol: pushed, file: /x }] }\n".into(),
            "p.yaml:4:83",
            "file applies to file monitors only",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitors: [{ name: f, protocol: file, file: /x, max_age: 8d }] }\n".into(),
            "p.yaml:4:92",
            "max_age must be between 1s and 7d",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, monitors: [{ name: web, missing: healthy }] }\n".into(),
            "p.yaml:4:68",
            "missing is only for json, prometheus, pushed and file monitors",
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: n, profile: c, monitors: [{ name: web }] }\n---\nname: c\nrouting: priority\nendpoints: []\n".into(),
            "p.yaml:4:38",
            "monitors does not apply to a nested endpoint",
        ),
    ];
    let mut failures = Vec::new();
    for (i, (yaml, at, msg)) in cases.iter().enumerate() {
        let errors = errors_of(SERVER, yaml);
        if !errors.iter().any(|e| e.starts_with(&format!("{at}: ")) && e.contains(msg)) {
            failures.push(format!("case {i}: want {at}: ..{msg}.., got {errors:?}"));
        }
        let mut unique = errors.clone();
        unique.dedup();
        if unique.len() != errors.len() {
            failures.push(format!("case {i}: an error repeated: {errors:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The YAML mistakes a new operator makes, starting from the shipped examples: each is
/// named where it is, in the words of the file (no library or Rust type names), and the
/// other documents of the file still report their own errors.
#[test]
fn yaml_mistakes_are_named_plainly_where_they_are() {
    let group =
        "name: accel\nrouting: groups\ngroups:\n  - name: beijing\n    location: cn-beijing\n";
    let ep = "  - { name: a, target: 192.0.2.1 }\n";
    let cases: Vec<(String, &[&str])> = vec![
        (
            format!("{group}  traffic_dial: 50\n    endpoints:\n      - {{ name: b, target: 192.0.2.9 }}\n"),
            &["p.yaml:6:3: `traffic_dial:` is indented 2 spaces but its siblings at line 4 are at 4"],
        ),
        (
            format!("{group}    traffic_dial: 50\n  endpoints:\n      - {{ name: b, target: 192.0.2.9 }}\n"),
            &["p.yaml:7:3: `endpoints:` is indented 2 spaces but its siblings at line 4 are at 4"],
        ),
        (
            format!("{group}    traffic_dial: 50\n   endpoints:\n      - {{ name: b, target: 192.0.2.9 }}\n"),
            &["p.yaml:7:4: `endpoints:` is indented 3 spaces, which matches no enclosing level: \
               its siblings at line 4 are at 4, the list at line 4 at 2"],
        ),
        (
            format!("name: www\nrouting: priority\nttl: 30\n  monitor:\n    port: 80\nendpoints:\n{ep}"),
            &["p.yaml:4:3: `ttl: 30` (line 3) then an indented `monitor:` — a key cannot be nested \
               under a scalar value; did you mean to dedent it?"],
        ),
        (
            format!("name:www\nrouting: priority\nendpoints:\n{ep}"),
            &["p.yaml:1:1: `name:www` needs a space after the colon (`name: www`)"],
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n  -name: a\n   target: 192.0.2.1\n".into(),
            &["p.yaml:4:3: `-name: a` needs a space after the dash to be a list item (`- name: a`)"],
        ),
        (
            "name: www\nrouting: priority\nendpoints:\n\t- { name: a, target: 192.0.2.1 }\n".into(),
            &["p.yaml:4:1: indented with a tab; YAML indents with spaces only"],
        ),
        (
            format!("name: www\nrouting priority\nendpoints:\n{ep}"),
            &["p.yaml:2:1: `routing priority` is not a `key: value` like the lines around it; \
               is a colon missing (`routing: priority`)?"],
        ),
        (
            format!("name: www\nrouting: priority\nname: web\nendpoints:\n{ep}"),
            &["p.yaml:3:1: duplicate key `name` (first at 1:1)"],
        ),
        // In a flow mapping the parser finds it; both places are named.
        (
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, name: b, target: 192.0.2.1 }\n".into(),
            &["p.yaml:4:16: duplicate key `name` (first at 4:7)"],
        ),
        // Type errors: what was expected, as YAML writes it.
        (
            format!("name: www\nrouting: priority\nttl: [30]\nendpoints:\n{ep}"),
            &["p.yaml:3:1: expected an integer, got a list"],
        ),
        (
            format!("name: www\nrouting: priority\nmonitor: 5\nendpoints:\n{ep}"),
            &["p.yaml:3:10: expected a mapping (`key: value` lines, or `{ key: value }`)"],
        ),
        (
            "name: www\nrouting: priority\nendpoints: 3\n".into(),
            &["p.yaml:3:12: expected a list (`- item` lines, or `[a, b]`)"],
        ),
        (
            format!("name:\nrouting: priority\nendpoints:\n{ep}"),
            &["p.yaml:1:5: a value is needed here, not an empty value or null"],
        ),
        (
            format!("name: www\nrouting: priority\nenabled: maybe\nendpoints:\n{ep}"),
            &["p.yaml:3:10: expected true or false"],
        ),
        (
            format!("name: www\nrouting: priority\nmonitor: {{ expected_status: [[200]] }}\nendpoints:\n{ep}"),
            &["p.yaml:3:30: expected a status code (`200`) or a range of them (`200-299`)"],
        ),
        // Positions count from the file's start, in a later document too.
        (
            format!("name: a\nrouting: priority\nendpoints: []\n---\nname: b\nrouting: priority\nttl: [1]\nendpoints:\n{ep}"),
            &["p.yaml:7:1: expected an integer, got a list"],
        ),
        (
            "name: a\nrouting: priority\nendpoints: []\n---\nname: b\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, name: c }\n".into(),
            &["p.yaml:8:35: duplicate key `name` (first at 8:7)"],
        ),
        // One mistake per document, and a valid document's own error, all reported.
        (
            format!(
                "name: a\n routing: priority\n---\nname: b\nrouting: priority\nname: c\n---\n\
                 name: d\nrouting: fastest\nendpoints:\n{ep}"
            ),
            &[
                "p.yaml:2:2: `name: a` (line 1) then an indented `routing:` — a key cannot be \
                 nested under a scalar value; did you mean to dedent it?",
                "p.yaml:6:1: duplicate key `name` (first at 4:1)",
                "p.yaml:9:10: unknown routing method \"fastest\" (priority, weighted, performance, \
                 geographic, multivalue, subnet, groups, zone, asn, geoproximity)",
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (i, (yaml, want)) in cases.iter().enumerate() {
        let errors = errors_of(SERVER, yaml);
        if errors != *want {
            failures.push(format!("case {i}:\n{yaml}\nwant {want:#?}\ngot {errors:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `steerdns.yaml` is read the same way: its mistakes are named where they are.
#[test]
fn server_file_yaml_mistakes_are_named_where_they_are() {
    let cases: &[(&str, &[&str])] = &[
        (
            "listen:\n  dns: [\"127.0.0.1:0\"]\n admin: \"127.0.0.1:0\"\nzones: []\n",
            &["steerdns.yaml:3:2: `admin:` is indented 1 space, which matches no enclosing \
               level: its siblings at line 2 are at 2, the keys at line 1 at 0"],
        ),
        (
            "listen:\n  dns: [\"127.0.0.1:0\"]\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n  soa: { rname: h.example.test. }\n",
            &["steerdns.yaml:6:3: `soa:` is indented 2 spaces but its siblings at line 4 are at 4"],
        ),
    ];
    for (server, want) in cases {
        assert_eq!(errors_of(server, "name: www\nrouting: priority\nendpoints: []\n"), *want);
    }
}

#[test]
fn an_empty_profile_file_is_an_error_but_a_comment_only_file_is_not() {
    let errors = errors_of(SERVER, "  \n");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with("p.yaml:0:0: the file is empty"), "{errors:#?}");
    assert_eq!(errors_of(SERVER, "# all profiles removed for now\n"), Vec::<String>::new());
}

#[test]
fn nesting_deeper_than_ten_is_rejected_and_ten_is_fine() {
    let chain = |hops: usize| -> String {
        let mut docs = Vec::new();
        for i in 0..hops {
            docs.push(format!(
                "name: p{i}\nrouting: priority\nendpoints:\n  - {{ name: n, profile: p{} }}\n",
                i + 1
            ));
        }
        docs.push(format!(
            "name: p{hops}\nrouting: priority\nendpoints:\n  - {{ name: a, target: 192.0.2.1 }}\n"
        ));
        docs.join("---\n")
    };
    assert_eq!(errors_of(SERVER, &chain(10)), Vec::<String>::new());
    let errors = errors_of(SERVER, &chain(11));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with("p.yaml:1:7: nesting deeper than 10"), "{errors:#?}");
}

#[test]
fn every_error_is_collected_across_files_and_documents() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_dir(
        dir.path(),
        SERVER,
        &[
            ("a.yaml", "name: a\nrouting: priority\nbogus: 1\nendpoints: []\n"),
            (
                "b.yaml",
                "name: b\nrouting: priority\nttl: x\nendpoints: []\n---\nname: c\nrouting: weighted\nendpoints:\n  - { name: e, target: 192.0.2.1, weight: -3 }\n",
            ),
        ],
    );
    let errors = config::load(&path, None).unwrap_err().0;
    let located: Vec<String> = errors
        .iter()
        .map(|e| format!("{}:{}", e.file.file_name().unwrap().to_string_lossy(), e.pos.line))
        .collect();
    assert_eq!(located, vec!["a.yaml:3", "b.yaml:3", "b.yaml:9"], "{errors:#?}");
}

#[test]
fn server_file_errors_are_located() {
    let cases: &[(&str, &str, &str)] = &[
        ("listen:\n  dns: [\"nowhere\"]\nzones: []\n", "steerdns.yaml:2:9", "must be IP:PORT"),
        ("listen:\n  dns: []\nzones: []\n", "steerdns.yaml:2:8", "listen.dns needs at least one"),
        (
            "zones:\n  - origin: tm.example.test.\n    ns: []\n    soa: { rname: h.example.test. }\n",
            "steerdns.yaml:3:9",
            "at least one ns",
        ),
        (
            "zones:\n  - origin: tm.example.test.\n    ns: [ns1.example.test.]\n    soa: { rname: h.example.test., minimum: -5 }\n",
            "steerdns.yaml:4:45",
            "minimum must be between",
        ),
        (
            "zones:\n  - origin: tm.example.test.\n    ns: [ns1.example.test.]\n    soa: { rname: h.example.test. }\n    records: [\"www A not-an-ip\"]\n",
            "steerdns.yaml:5:15",
            "invalid record",
        ),
        (
            // A CAA tag must be alphanumeric: resolvers could not read this record.
            "zones:\n  - origin: tm.example.test.\n    ns: [ns1.example.test.]\n    soa: { rname: h.example.test. }\n    records: ['caa CAA 0 i-x \"y\"']\n",
            "steerdns.yaml:5:15",
            "cannot be answered",
        ),
        (
            // A TXT record needs at least one string.
            "zones:\n  - origin: tm.example.test.\n    ns: [ns1.example.test.]\n    soa: { rname: h.example.test. }\n    records: ['info TXT']\n",
            "steerdns.yaml:5:15",
            "has no data",
        ),
        (
            "zones:\n  - origin: tm.example.test.\n    ns: [ns1.example.test.]\n    soa: { rname: h.example.test. }\n    records: [\"sub NS ns.example.net.\"]\n",
            "steerdns.yaml:5:15",
            "delegation",
        ),
        (
            "zones:\n  - origin: tm.example.test.\n    ns: [ns1.example.test.]\n    soa: { rname: h.example.test. }\n    file: missing.zone\n",
            "steerdns.yaml:5:11",
            "cannot read zone file",
        ),
        (
            "zones:\n  - origin: tm.example.test.\n    nss: []\n",
            "steerdns.yaml:3:5",
            "unknown field `nss`",
        ),
        (
            "probe:\n  source_address: nowhere\nzones: []\n",
            "steerdns.yaml:2:19",
            "\"nowhere\" is not an IP address",
        ),
        (
            "probe:\n  source_address: [127.0.0.1, \"::1\", 127.0.0.2]\nzones: []\n",
            "steerdns.yaml:2:38",
            "127.0.0.2 is a second IPv4 address",
        ),
        (
            "probe:\n  source_address: [\"::1\", \"::2\"]\nzones: []\n",
            "steerdns.yaml:2:27",
            "::2 is a second IPv6 address",
        ),
        (
            "probe:\n  source_address: 0.0.0.0\nzones: []\n",
            "steerdns.yaml:2:19",
            "cannot be a source address",
        ),
        ("probe:\n  source_address: []\nzones: []\n", "steerdns.yaml:2:19", "needs an address"),
    ];
    for (i, (server, at, msg)) in cases.iter().enumerate() {
        let errors = errors_of(server, "name: www\nrouting: priority\nendpoints: []\n");
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{at}: ")) && e.contains(msg)),
            "case {i}: want {at}: ..{msg}.., got {errors:#?}"
        );
    }
}

#[test]
fn cluster_errors_are_located() {
    let zone = "zones:\n  - origin: tm.example.test.\n    ns: [ns1.example.test.]\n    soa: { rname: h.example.test. }\n";
    let etcd = "  etcd:\n    endpoints: [\"http://127.0.0.1:2379\"]\n";
    let cases: Vec<(String, &str, &str)> = vec![
        ("profiles: etcd\n".into(), "steerdns.yaml:5:11", "needs a cluster: block"),
        (format!("cluster:\n  node: \"a b\"\n{etcd}"), "steerdns.yaml:6:9", "node name"),
        (
            "cluster:\n  etcd:\n    endpoints: [\"127.0.0.1:2379\"]\n".into(),
            "steerdns.yaml:7:17",
            "must be http://HOST:PORT",
        ),
        ("cluster:\n  etcd:\n    endpoints: []\n".into(), "steerdns.yaml:7:16", "at least one URL"),
        (
            format!("cluster:\n{etcd}    prefix: steerdns\n"),
            "steerdns.yaml:8:13",
            "must start and end with '/'",
        ),
        (
            format!("cluster:\n{etcd}  health:\n    quorum: most\n"),
            "steerdns.yaml:9:13",
            "not one of any, majority, all or N%",
        ),
        (format!("cluster:\n{etcd}  lease: 1s\n"), "steerdns.yaml:8:10", "between 2s and 10m"),
        (
            format!("cluster:\n{etcd}    username: u\n"),
            "steerdns.yaml:8:15",
            "needs password_file",
        ),
        (
            format!("cluster:\n{etcd}    username: u\n    password_file: nope\n"),
            "steerdns.yaml:9:20",
            "cannot read the etcd password",
        ),
        (
            "cluster:\n  etcd:\n    endpoints: [\"https://127.0.0.1:2379\"]\n".into(),
            "steerdns.yaml:7:16",
            "need cluster.etcd.tls.ca",
        ),
        (
            format!("cluster:\n{etcd}    tls: {{ ca: ca.pem }}\n"),
            "steerdns.yaml:8:10",
            "every endpoint to be https://",
        ),
        (
            "cluster:\n  etcd:\n    endpoints: [\"https://h:1\"]\n    tls: { ca: ca.pem, cert: c.pem }\n"
                .into(),
            "steerdns.yaml:8:30",
            "tls.cert needs key",
        ),
    ];
    for (i, (tail, at, msg)) in cases.iter().enumerate() {
        let errors =
            errors_of(&format!("{zone}{tail}"), "name: www\nrouting: priority\nendpoints: []\n");
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{at}: ")) && e.contains(msg)),
            "case {i}: want {at}: ..{msg}.., got {errors:#?}"
        );
    }
    // A valid block loads, with profiles still from the directory.
    let ok = format!("{zone}cluster:\n  node: ams-1\n{etcd}  health:\n    quorum: 50%\n");
    assert_eq!(
        errors_of(&ok, "name: www\nrouting: priority\nendpoints: []\n"),
        Vec::<String>::new()
    );
}

#[test]
fn relative_names_need_exactly_one_zone() {
    let two = format!(
        "{SERVER}  - origin: other.test.\n    ns: [ns1.other.test.]\n    soa: {{ rname: h.other.test. }}\n"
    );
    let errors = errors_of(&two, "name: www\nrouting: priority\nendpoints: []\n");
    assert!(errors.iter().any(|e| e.starts_with("p.yaml:1:7: relative name")), "{errors:#?}");
    assert_eq!(
        errors_of(&two, "name: www.other.test.\nrouting: priority\nendpoints: []\n"),
        Vec::<String>::new()
    );
}

#[test]
fn valid_config_builds_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_dir(
        dir.path(),
        SERVER,
        &[(
            "p.yaml",
            "name: www\nrouting: weighted\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n  - { name: b, target: \"2001:db8::1\", weight: 0 }\n---\nname: x.y\nrouting: priority\nendpoints: []\n",
        )],
    );
    let snap = config::load(&path, None).unwrap();
    assert_eq!((snap.snapshot.profiles.len(), snap.snapshot.endpoint_count()), (2, 2));
    let zone = &snap.snapshot.zones[0];
    assert!(zone.serial > 1_700_000_000, "serial is the load time");
    // `y.tm.example.test.` is an empty non-terminal above x.y.
    let ent = steerdns::wire::name::WireName::parse("y.tm.example.test.").unwrap();
    assert!(zone.node(ent.as_bytes()).is_some_and(|n| n.rrsets.is_empty() && n.profile.is_none()));
    // Reloading unchanged content keeps the serial; a change makes it grow.
    let again = config::load(&path, Some(snap.previous())).unwrap();
    assert_eq!(again.snapshot.zones[0].serial, zone.serial);
    assert_eq!(again.snapshot.generation, snap.snapshot.generation + 1);
    std::fs::write(
        dir.path().join("profiles/p.yaml"),
        "name: www\nrouting: priority\nendpoints: []\n",
    )
    .unwrap();
    let changed = config::load(&path, Some(again.previous())).unwrap();
    assert!(changed.snapshot.zones[0].serial > zone.serial);
}

#[test]
fn a_change_to_method_rules_alone_bumps_the_zone_serial() {
    let dir = tempfile::tempdir().unwrap();
    let geo = |fr_to: &str| {
        let (a, b) = if fr_to == "a" { ("[FR]", "[WORLD]") } else { ("[WORLD]", "[FR]") };
        format!(
            "name: g\nrouting: geographic\nendpoints:\n  - {{ name: a, target: 192.0.2.1, geo: {a} }}\n  - {{ name: b, target: 192.0.2.2, geo: {b} }}\n"
        )
    };
    let path = config_dir(dir.path(), SERVER, &[("p.yaml", &geo("a"))]);
    let first = config::load(&path, None).unwrap();
    let same = config::load(&path, Some(first.previous())).unwrap();
    assert_eq!(same.snapshot.zones[0].serial, first.snapshot.zones[0].serial, "nothing changed");
    // Same endpoints, names and addresses; only which endpoint FR maps to.
    std::fs::write(dir.path().join("profiles/p.yaml"), geo("b")).unwrap();
    let swapped = config::load(&path, Some(same.previous())).unwrap();
    assert!(
        swapped.snapshot.zones[0].serial > first.snapshot.zones[0].serial,
        "geo mapping change"
    );
}

fn check(dir: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["check", "-c"])
        .arg(dir.join("steerdns.yaml"))
        .output()
        .unwrap();
    (out.status.code().unwrap(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn check_command_on_valid_and_invalid_config() {
    let dir = tempfile::tempdir().unwrap();
    config_dir(dir.path(), SERVER, &[("p.yaml", &format!("name: www\nrouting: priority\n{EP}"))]);
    assert_eq!(check(dir.path()), (0, "ok: 1 profiles, 1 endpoints\n".to_string()));

    std::fs::write(dir.path().join("profiles/q.yaml"), "name: api\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, priority: 0 }\n  - { name: b, target: nope }\n").unwrap();
    let (code, out) = check(dir.path());
    assert_eq!(code, 1);
    let q = dir.path().join("profiles/q.yaml");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with(&format!("{}:4:45: priority must be between 1 and 1000", q.display())),
        "{out}"
    );
    assert!(lines[1].starts_with(&format!("{}:5:24: target \"nope\"", q.display())), "{out}");
}

#[test]
fn shipped_example_config_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (code, out) = check(root);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok: "), "{out}");
}

/// Each profile as text, nested children by name: equal for equal configurations
/// whatever their ids.
fn profiles_text(snap: &steerdns::model::snapshot::Snapshot) -> Vec<String> {
    use steerdns::model::Target;
    snap.profiles
        .iter()
        .map(|p| {
            let eps: Vec<String> = p
                .endpoints
                .iter()
                .map(|e| match &e.target {
                    Target::Nested(n) => format!("{}->{}", e.name, snap.profiles[n.child].name),
                    t => format!("{}={t:?} slot {:?}", e.name, e.health_slot),
                })
                .collect();
            format!("{} {} {:?} {eps:?}", p.name, p.method.as_str(), p.families)
        })
        .collect()
}

/// The located errors of a load that must fail (without printing a whole snapshot if not).
fn rejected(path: &Path, previous: Option<config::Previous<'_>>) -> Vec<String> {
    match config::load(path, previous) {
        Ok(_) => panic!("the configuration should be rejected"),
        Err(e) => common::located(&e),
    }
}

const LEAF: &str =
    "name: leaf\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n";
const TOP: &str = "name: top\nrouting: priority\nendpoints:\n  - { name: n, profile: leaf }\n  - { name: b, target: 192.0.2.9 }\n";

#[test]
fn a_reload_takes_over_unchanged_files_and_renumbers_their_children() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_dir(dir.path(), SERVER, &[("a.yaml", TOP), ("b.yaml", LEAF)]);
    let first = config::load(&path, None).unwrap();
    // A file sorting first moves every id; b.yaml changes; a.yaml is taken over.
    let early = "name: early\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.5 }\n";
    std::fs::write(dir.path().join("profiles/0.yaml"), early).unwrap();
    std::fs::write(dir.path().join("profiles/b.yaml"), LEAF.replace("192.0.2.1", "192.0.2.2"))
        .unwrap();
    let reloaded = config::load(&path, Some(first.previous())).unwrap();
    let fresh = config::load(&path, None).unwrap();
    assert_eq!(profiles_text(&reloaded.snapshot), profiles_text(&fresh.snapshot));
    assert!(
        profiles_text(&reloaded.snapshot)[2].contains("192.0.2.2"),
        "{:#?}",
        profiles_text(&reloaded.snapshot)
    );
    // Nothing changed: everything is taken over, and still equal.
    let again = config::load(&path, Some(reloaded.previous())).unwrap();
    assert_eq!(profiles_text(&again.snapshot), profiles_text(&fresh.snapshot));
    assert_eq!(again.snapshot.zones[0].serial, reloaded.snapshot.zones[0].serial);
}

#[test]
fn errors_after_a_takeover_are_those_of_a_fresh_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_dir(dir.path(), SERVER, &[("a.yaml", TOP), ("b.yaml", LEAF)]);
    let first = config::load(&path, None).unwrap();
    let both = |label: &str| {
        let (reloaded, fresh) = (rejected(&path, Some(first.previous())), rejected(&path, None));
        assert_eq!(reloaded, fresh, "{label}");
        reloaded
    };
    // The unchanged a.yaml loses its child.
    std::fs::write(dir.path().join("profiles/b.yaml"), LEAF.replace("leaf", "other")).unwrap();
    let errors = both("missing child");
    assert!(errors[0].starts_with("a.yaml:4:25: nested profile leaf."), "{errors:#?}");
    // A new file repeats the name of a profile in an unchanged file.
    std::fs::write(dir.path().join("profiles/b.yaml"), LEAF).unwrap();
    std::fs::write(dir.path().join("profiles/c.yaml"), TOP).unwrap();
    let errors = both("duplicate");
    assert!(errors[0].starts_with("c.yaml:1:7: two profiles are named top."), "{errors:#?}");
    // A second zone: relative names in unchanged files no longer resolve.
    std::fs::remove_file(dir.path().join("profiles/c.yaml")).unwrap();
    let two = format!(
        "{SERVER}  - origin: other.test.\n    ns: [ns1.other.test.]\n    soa: {{ rname: h.other.test. }}\n"
    );
    std::fs::write(&path, two).unwrap();
    let errors = both("context");
    assert!(errors.iter().any(|e| e.starts_with("a.yaml:1:7: relative name")), "{errors:#?}");
}

/// File `f` of a large configuration: profiles p{1000f}..p{1000f+999}. Chains of nested
/// profiles (p4 -> p3 -> .. -> p0, p14 -> .. -> p5, ...) cross the builders' chunk and the
/// file boundaries; p(10k+4) is nested by nothing (p(10k+5) is a leaf).
fn large_file(f: usize) -> String {
    (f * 1000..(f + 1) * 1000)
        .map(|i| match i {
            _ if i % 10 == 5 || i == 0 => LEAF.replace("leaf", &format!("p{i}")),
            _ => format!(
                "name: p{i}\nrouting: priority\nendpoints:\n  - {{ name: n, profile: p{} }}\n  - {{ name: b, target: 192.0.2.9 }}\n",
                i - 1
            ),
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Three files of 1000 profiles each, loaded.
fn large_configuration(dir: &Path) -> (std::path::PathBuf, config::Loaded) {
    let files: Vec<(String, String)> =
        (0..3).map(|f| (format!("{f}.yaml"), large_file(f))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    let path = config_dir(dir, SERVER, &refs);
    let first = config::load(&path, None).unwrap();
    (path, first)
}

#[test]
fn a_large_configuration_loads_and_reloads_identically() {
    // Enough profiles for several builder threads.
    let dir = tempfile::tempdir().unwrap();
    let (path, first) = large_configuration(dir.path());
    assert_eq!(first.snapshot.profiles.len(), 3000);
    let texts = profiles_text(&first.snapshot);
    assert!(texts[1504].contains("n->p1503."), "{}", texts[1504]);
    let again = config::load(&path, Some(first.previous())).unwrap();
    assert_eq!(profiles_text(&again.snapshot), texts);
    // Errors early and late keep their order; a reload finds the same ones.
    let bad = large_file(2).replace("profile: p2500 ", "profile: nowhere ");
    std::fs::write(dir.path().join("profiles/2.yaml"), bad).unwrap();
    std::fs::write(
        dir.path().join("profiles/0.yaml"),
        large_file(0).replacen("target: 192", "target: x192", 1),
    )
    .unwrap();
    let fresh = rejected(&path, None);
    assert_eq!(rejected(&path, Some(first.previous())), fresh);
    assert_eq!(fresh.len(), 2, "{fresh:#?}");
    assert!(fresh[0].starts_with("0.yaml:4:24: target \"x192.0.2.1\""), "{fresh:#?}");
    assert!(fresh[1].contains("nested profile nowhere."), "{fresh:#?}");
}

/// Names are resolved on several threads: errors in names far into the last file (a
/// duplicate and one outside every zone) are found, alike by a fresh load and a reload.
#[test]
fn name_errors_are_found_on_every_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first) = large_configuration(dir.path());
    let extra = [LEAF.replace("leaf", "p1"), LEAF.replace("leaf", "elsewhere.example.")];
    let text = format!("{}---\n{}", large_file(2), extra.join("---\n"));
    std::fs::write(dir.path().join("profiles/2.yaml"), text).unwrap();
    let fresh = rejected(&path, None);
    assert_eq!(rejected(&path, Some(first.previous())), fresh);
    assert_eq!(fresh.len(), 2, "{fresh:#?}");
    assert!(fresh[0].starts_with("2.yaml:") && fresh[0].contains("two profiles are named p1."));
    assert!(fresh[1].contains("elsewhere.example. is outside every zone"), "{fresh:#?}");
}

#[test]
fn edits_inside_a_file_reload_like_a_fresh_load() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first) = large_configuration(dir.path());
    // A document changed, one removed, one added before the rest: the file's other
    // documents are taken over (their ids moved) and the result equals a fresh load.
    let docs: Vec<String> = large_file(1).split("---\n").map(str::to_string).collect();
    let mut edited = vec![LEAF.replace("leaf", "new")];
    for (k, d) in docs.into_iter().enumerate() {
        match k {
            500 => edited.push(d.replace("192.0.2.9", "192.0.2.77")),
            604 => {} // p1604: nothing nests it
            _ => edited.push(d),
        }
    }
    std::fs::write(dir.path().join("profiles/1.yaml"), edited.join("---\n")).unwrap();
    let reloaded = config::load(&path, Some(first.previous())).unwrap();
    let fresh = config::load(&path, None).unwrap();
    assert_eq!(profiles_text(&reloaded.snapshot), profiles_text(&fresh.snapshot));
    assert!(profiles_text(&fresh.snapshot).iter().any(|t| t.contains("192.0.2.77")));
    assert_eq!(fresh.snapshot.profiles.len(), 3000);
}

#[test]
fn an_error_in_an_unchanged_document_names_its_line_after_lines_moved() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first) = large_configuration(dir.path());
    // Ten lines more at the top of 1.yaml, and p1505 (a leaf nested by p1506) renamed: the
    // unchanged document of p1506 now names a missing child, 10 lines further down.
    let line_of =
        |text: &str, needle: &str| text[..text.find(needle).unwrap()].matches('\n').count() + 1;
    let before = large_file(1);
    let at = line_of(&before, "profile: p1505 ");
    let edited = format!("{}---\n", "# comment\n".repeat(9))
        + &before.replace("name: p1505\n", "name: p1505x\n");
    std::fs::write(dir.path().join("profiles/1.yaml"), &edited).unwrap();
    let reloaded = rejected(&path, Some(first.previous()));
    assert_eq!(reloaded, rejected(&path, None));
    let want = format!("1.yaml:{}:25: nested profile p1505.", at + 10);
    assert!(reloaded.iter().any(|e| e.starts_with(&want)), "{want} in {reloaded:#?}");
}

/// `p.yaml:LINE:COL` of the first occurrence of `needle` in `yaml`.
fn where_in(yaml: &str, needle: &str) -> String {
    let (line, text) = yaml.lines().enumerate().find(|(_, l)| l.contains(needle)).unwrap();
    format!("p.yaml:{}:{}", line + 1, text.find(needle).unwrap() + 1)
}

/// The settings of dns, udp and icmp monitors, each mistake reported where it is written
/// (or at the endpoint, for what is missing).
#[test]
fn probe_protocol_settings_are_checked_where_written() {
    // (monitor of the profile, the first text of the file the error points at, message)
    let cases: &[(&str, &str, &str)] = &[
        ("protocol: dns", "{ name: a", "a dns monitor needs a query_name"),
        ("protocol: dns, query_name: 'a..b.'", "'a..b.'", "query_name: invalid name"),
        (
            "protocol: dns, query_name: a.example., query_type: BOGUS",
            "BOGUS",
            "query_type: unknown record type \"BOGUS\"",
        ),
        (
            "protocol: dns, query_name: a.example., expected_rcode: NOPE",
            "NOPE",
            "expected_rcode must be an RCODE name",
        ),
        (
            "protocol: dns, query_name: a.example., expected_rcode: 4096",
            "4096",
            "expected_rcode must be an RCODE name",
        ),
        (
            "protocol: dns, query_name: a.example., answer_contains: ''",
            "''",
            "answer_contains must not be empty",
        ),
        (
            "protocol: dns, query_name: a.example., path: /x",
            "/x",
            "path is not allowed on a dns monitor",
        ),
        ("protocol: udp, send: zz", "{ name: a", "a udp monitor needs a port"),
        ("protocol: udp, port: 7", "{ name: a", "a udp monitor needs a payload to send"),
        ("protocol: udp, port: 7, send: '\\q'", "'\\q'", "send: unknown escape \\q"),
        ("protocol: udp, port: 7, send: ''", "''", "send must be 1 to 512 bytes, got 0"),
        (
            "protocol: udp, port: 7, send: zz, expect: 'OK (200'",
            "'OK (200'",
            "expect: invalid pattern at character 4: unclosed group",
        ),
        (
            "protocol: udp, port: 7, send: zz, expect: '(a{100}){100}'",
            "'(a{100}){100}'",
            "expect: the pattern compiles to more than 131072 bytes",
        ),
        (
            "protocol: udp, port: 7, send: zz, expect: 'ok|*'",
            "'ok|*'",
            "expect: invalid pattern at character 4: repetition operator missing expression",
        ),
        (
            "protocol: udp, port: 7, send: zz, query_name: a.example.",
            "a.example.",
            "query_name is only for dns monitors",
        ),
        ("protocol: icmp, port: 7", "7", "port is not allowed on an icmp monitor"),
        ("protocol: icmp, count: 11", "11", "count must be between 1 and 10, got 11"),
        ("protocol: icmp, max_loss: 100", "100", "max_loss must be between 0 and 99, got 100"),
        ("protocol: icmp, max_rtt: 2m", "2m", "max_rtt must be above 0 and at most 1m"),
        ("protocol: icmp, max_rtt: fast", "fast", "max_rtt: invalid duration"),
        ("protocol: icmp, send: zz", "zz", "send is only for udp monitors"),
        ("protocol: tcp, port: 7, count: 2", "2", "count is only for icmp monitors"),
        ("protocol: http, expect: yy", "yy", "expect is only for udp monitors"),
        ("protocol: http, answer_contains: qq", "qq", "answer_contains is only for dns monitors"),
        ("protocol: https, tls: true", "true", "tls is only for grpc monitors"),
        ("protocol: tcp, port: 7, tls: false", "false", "tls is only for grpc monitors"),
        ("protocol: json, pointer: /s", "{ name: a", "a json monitor needs a url"),
        ("protocol: json, url: 'http://h.example/'", "{ name: a", "a json monitor needs a pointer"),
        (
            "protocol: json, url: 'ftp://h.example/', pointer: /s",
            "'ftp",
            "url: \"ftp://h.example/\" must start with http:// or https://",
        ),
        (
            "protocol: json, url: 'http://h.example/', pointer: s",
            "s }",
            "pointer: \"s\" must be empty or start with /",
        ),
        (
            "protocol: json, url: 'http://h.example/', pointer: /s, port: 8080",
            "8080",
            "port is not allowed on a json monitor",
        ),
        (
            "protocol: json, url: 'http://h.example/', pointer: /s, healthy_when: 'about 3'",
            "'about",
            "healthy_when must be a comparison",
        ),
        (
            "protocol: json, url: 'http://h.example/', pointer: /s, missing: never",
            "never",
            "missing must be healthy, unhealthy or last_known, got \"never\"",
        ),
        (
            "protocol: json, url: 'http://h.example/', pointer: /s, metric: up",
            "up }",
            "metric is only for prometheus monitors",
        ),
        (
            "protocol: prometheus, url: 'http://h.example/', healthy_when: '>= 1'",
            "{ name: a",
            "a prometheus monitor needs a metric",
        ),
        (
            "protocol: prometheus, url: 'http://h.example/', metric: up",
            "{ name: a",
            "a prometheus monitor needs healthy_when",
        ),
        (
            "protocol: prometheus, url: 'http://h.example/', metric: '9up', healthy_when: '>= 1'",
            "'9up'",
            "metric: ",
        ),
        (
            "protocol: prometheus, url: 'http://h.example/', metric: up, healthy_when: '>= 1', pointer: /x",
            "/x",
            "pointer is only for json monitors",
        ),
        (
            "protocol: tcp, port: 7, missing: healthy",
            "healthy",
            "missing is only for json, prometheus, pushed and file monitors",
        ),
        (
            "protocol: http, url: 'http://h.example/'",
            "'http",
            "url is only for json and prometheus monitors",
        ),
    ];
    let mut failures = Vec::new();
    for (monitor, pointed, msg) in cases {
        let yaml = format!("name: www\nrouting: priority\nmonitor: {{ {monitor} }}\n{EP}");
        let at = where_in(&yaml, pointed);
        let errors = errors_of(SERVER, &yaml);
        if !errors.iter().any(|e| e.starts_with(&format!("{at}: ")) && e.contains(msg)) {
            failures.push(format!("{monitor}: want {at}: ..{msg}.., got {errors:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // The endpoint's own setting is the one located.
    let yaml = "name: www\nrouting: priority\nmonitor: { protocol: dns, query_name: a.example. }\nendpoints:\n  - { name: a, target: 192.0.2.1, monitor: { query_type: NOPE } }\n";
    let errors = errors_of(SERVER, yaml);
    let at = where_in(yaml, "NOPE");
    assert!(errors.iter().any(|e| e.starts_with(&format!("{at}: query_type"))), "{errors:?}");
}
