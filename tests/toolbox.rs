//! The operator's toolbox in `contrib/`: every metric the Grafana dashboard
//! (`contrib/grafana/steerdns.json`) and the Prometheus alerts
//! (`contrib/prometheus/alerts.yaml`) use is one a running server exports, under exactly that
//! name; the alerts pass `promtool check rules` and their unit tests
//! (`contrib/prometheus/alerts.test.yaml`). And the Debian package `cargo deb` makes from
//! the `[package.metadata.deb]` of Cargo.toml installs, checks and purges cleanly.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use steerdns::commands::dnssec::keygen;
use steerdns::model::dnssec::Algorithm;

/// Series Prometheus writes itself for every target it scrapes, not steerdns.
const SCRAPE_SERIES: &[&str] = &["up"];

/// Longest wait for every metric family to show (the first probe results, the first
/// health view in etcd).
const FAMILIES_WAIT: Duration = Duration::from_secs(30);

/// Modifiers whose parenthesised list holds label names, not expressions.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// Bare words of PromQL that are not metric names: operators, modifiers, numbers, and the
/// aggregations, which may be followed by `by (...)` or `without (...)` before their `(`.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

fn contrib(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib").join(rel)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The metric names a PromQL expression selects: identifiers followed by `{`, `[` or used
/// bare. Skipped: strings, label matchers (`{...}`), ranges and subquery steps (`[...]`),
/// numbers and durations, functions and aggregations (a name followed by `(`), the label
/// lists of `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`, operators,
/// keywords and Grafana variables (`$name`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = after_string(&chars, i);
        } else if c == '{' {
            i = after_closing(&chars, i, '{', '}');
        } else if c == '[' {
            i = after_closing(&chars, i, '[', ']');
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c.is_ascii_digit() || c == '.' || c == '$' {
            // A number (1e3, 0x1f, 0.95), a duration or a Grafana variable: one word.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "._".contains(chars[i])) {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let opens = chars.get(next) == Some(&'(');
            let lower = word.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) {
                if opens {
                    i = after_closing(&chars, next, '(', ')');
                }
            } else if !opens && !KEYWORDS.contains(&lower.as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The index after the string that opens at `start` (backslash escapes, except in
/// backquoted raw strings).
fn after_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    panic!("unterminated string in {:?}", chars.iter().collect::<String>())
}

/// The index after the bracket that closes the one at `start`, stepping over strings.
fn after_closing(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = after_string(chars, i);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unbalanced {open}{close} in {:?}", chars.iter().collect::<String>())
}

/// The PromQL of a Grafana variable query: `label_values(EXPR, label)` gives EXPR,
/// `label_values(label)` nothing, `query_result(EXPR)` and `metrics(...)` are not used.
fn variable_expr(query: &str) -> Option<String> {
    let inner = query.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    inner.rsplit_once(',').map(|(expr, _label)| expr.to_string())
}

#[test]
fn the_tokenizer_finds_metric_names_only() {
    let table: &[(&str, &[&str])] = &[
        ("up", &["up"]),
        ("steerdns_profiles", &["steerdns_profiles"]),
        (r#"steerdns_x{job=~"$job",a="b{c}"}"#, &["steerdns_x"]),
        ("rate(a_total[5m])", &["a_total"]),
        ("sum by (le, protocol) (rate(h_bucket{x=\"y\"}[$__rate_interval]))", &["h_bucket"]),
        ("sum(rate(a[1m])) without (instance) / on (job) group_left (node) b", &["a", "b"]),
        (
            "histogram_quantile(0.95, x) > 1e3 and y offset 5m unless z == bool 0x1f",
            &["x", "y", "z"],
        ),
        ("changes((max by (p) (s{status=\"online\"}) or max by (p) (s) * 0)[30m:1m]) >= 4", &["s"]),
        ("count_values by (job) (\"revision\", r) > Inf", &["r"]),
        ("sum without (instance) (a) / ignoring(x) count(b)", &["a", "b"]),
        ("topk(10, ns:rule:rate5m) # a comment naming not_a_metric", &["ns:rule:rate5m"]),
        ("label_replace(m, \"dst\", \"$1\", \"src\", \"(.*)\")", &["m"]),
    ];
    for (expr, want) in table {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(metric_names(expr), want, "{expr}");
    }
    assert_eq!(
        variable_expr("label_values(m{job=~\"$job\"}, instance)").as_deref(),
        Some("m{job=~\"$job\"}")
    );
    assert_eq!(variable_expr("label_values(job)"), None);
}

/// Every PromQL expression of the dashboard: panel targets and variable queries.
fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(e)) = map.get("expr") {
                    out.push(e.clone());
                }
                map.values().for_each(|v| walk(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    for var in dashboard["templating"]["list"].as_array().expect("templating.list") {
        if var["type"] == "query" {
            let q = var["query"]["query"].as_str().or(var["query"].as_str()).expect("a query");
            out.extend(variable_expr(q));
        }
    }
    out
}

fn dashboard() -> serde_json::Value {
    let text = read(&contrib("grafana/steerdns.json"));
    serde_json::from_str(&text).expect("steerdns.json is JSON")
}

/// Every alert rule's expression.
fn alert_exprs() -> Vec<(String, String)> {
    let text = read(&contrib("prometheus/alerts.yaml"));
    let rules: serde_json::Value = serde_saphyr::from_str(&text).expect("alerts.yaml is YAML");
    let mut out = Vec::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().or(rule["record"].as_str()).expect("a name");
            out.push((name.to_string(), rule["expr"].as_str().expect("expr").to_string()));
        }
    }
    out
}

#[test]
fn the_dashboard_is_importable_and_filters_by_job_and_instance() {
    let d = dashboard();
    assert_eq!(d["__inputs"][0]["name"], "DS_PROMETHEUS", "the data source is an input");
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["DS_PROMETHEUS", "job", "instance"]);
    let mut targets = 0;
    for panel in d["panels"].as_array().unwrap().iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap();
        assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
            assert!(!metric_names(expr).is_empty(), "{title}: no metric in {expr}");
            // Every selector filters by both variables.
            let selectors = expr.matches('{').count();
            assert_eq!(expr.matches("job=~\"$job\"").count(), selectors, "{title}: {expr}");
            assert_eq!(expr.matches("instance=~\"$instance\"").count(), selectors, "{title}");
            targets += 1;
        }
    }
    assert!(targets >= 30, "only {targets} queries");
}

#[test]
fn the_alert_rules_pass_promtool() {
    let Some(promtool) = require_tool("promtool", "prometheus") else { return };
    let dir = contrib("prometheus");
    for args in [["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]] {
        let out = Command::new(&promtool).args(args).current_dir(&dir).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    }
}

/// A profile probed over HTTP every second at `port` on 127.0.0.1.
fn probed_profile(port: u16) -> String {
    format!(
        "name: probed
routing: priority
ttl: 5
monitor: {{ protocol: http, interval: 1s, tolerated_failures: 0 }}
endpoints:
  - {{ name: web, target: 127.0.0.1, priority: 1, monitor: {{ port: {port}, path: / }} }}
"
    )
}

/// A server with every metric family: probes, a signed zone, rate limiting, dnstap to a
/// file, and a cluster on a real etcd; then queries, a drain and a weight set at run time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_of_the_dashboard_and_alerts_is_exported() {
    let Some(etcd) = Etcd::start() else { return };
    let backend = HttpBackend::start("127.0.0.1").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let probed = probed_profile(backend.addr.port());
    let mut profiles = DEFAULT_PROFILES.to_vec();
    profiles.push(("probed.yaml", &probed));
    write_config(dir.path(), &profiles);
    let zone_file = "    file: zones/extra.zone\n";
    let yaml = with_admin(&steerdns_yaml(), None).replacen(
        zone_file,
        &format!("{zone_file}    dnssec:\n      keys: keys/\n"),
        1,
    );
    assert!(yaml.contains("dnssec:"), "{yaml}");
    let keys = dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    keygen(ORIGIN, Algorithm::Ed25519, false, &keys).expect("keygen");
    let tap = dir.path().join("dnstap.fstrm");
    let extra = format!(
        "rate_limit:\n  rate: 1000\n\
         log:\n  dnstap:\n    file: {}\n\
         cluster:\n  node: toolbox\n  lease: 10s\n  etcd:\n    endpoints: [\"{}\"]\n    prefix: /toolbox/\n",
        tap.display(),
        etcd.url
    );
    std::fs::write(dir.path().join("steerdns.yaml"), format!("{yaml}{extra}")).unwrap();
    let h = Harness::in_dir(dir).await;

    let signed = h.udp(&Q::new(&fq("www"), T_A).edns().dnssec_ok()).await;
    assert_eq!(signed.rcode(), NOERROR);
    h.udp(&Q::new(&fq("app"), T_A).ecs(ip("203.0.113.7"), 24)).await;
    h.udp(&Q::new(&fq("api"), T_A).edns().option(10, &[7; 8])).await;
    let drain = http_post(h.admin(), "/api/v1/profiles/www/endpoints/primary/drain", None).await;
    assert_eq!(drain.status, 200, "{drain:?}");
    let path = "/api/v1/profiles/api/endpoints/site-b/weight";
    let weight = http_with_body(h.admin(), "PUT", path, &[], br#"{"weight": 0}"#).await;
    assert_eq!(weight.status, 200, "{weight:?}");

    let mut wanted: BTreeSet<(String, String)> = BTreeSet::new();
    for expr in dashboard_exprs(&dashboard()) {
        wanted.extend(metric_names(&expr).into_iter().map(|n| (n, "the dashboard".to_string())));
    }
    for (alert, expr) in alert_exprs() {
        wanted.extend(metric_names(&expr).into_iter().map(|n| (n, format!("alert {alert}"))));
    }
    wanted.retain(|(name, _)| !SCRAPE_SERIES.contains(&name.as_str()));
    assert!(wanted.len() >= 25, "too few names found: {wanted:?}");

    // Families appear once they have a value: poll until all are there, or report which not.
    let started = Instant::now();
    let missing = loop {
        let exported: BTreeSet<String> =
            scrape(h.admin(), None).await.samples.into_iter().map(|s| s.name).collect();
        let missing: Vec<_> = wanted.iter().filter(|(n, _)| !exported.contains(n)).collect();
        if missing.is_empty() || started.elapsed() > FAMILIES_WAIT {
            break missing.iter().map(|(n, by)| format!("{n} (used by {by})")).collect::<Vec<_>>();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(missing.is_empty(), "not in /metrics:\n{}", missing.join("\n"));
    h.stop().await;
    backend.stop().await;
}

/// The program's output, both streams.
fn output_text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Runs `program` with `args`; panics with its output unless it succeeds.
fn run(program: &str, args: &[&str]) -> String {
    let out =
        Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = output_text(&out);
    assert!(out.status.success(), "{program} {}:\n{text}", args.join(" "));
    text
}

/// The directory cargo built the tests into (it holds `CACHEDIR.TAG`): `cargo deb` packages
/// the binary already there instead of building a release one.
fn target_dir() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_steerdns"));
    let found = exe.ancestors().skip(1).take(3).find(|d| d.join("CACHEDIR.TAG").is_file());
    found.unwrap_or_else(|| exe.parent().unwrap().parent().unwrap()).to_path_buf()
}

/// Purges the package when the test ends, also when it fails half-way.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "steerdns"]).output();
    }
}

const PACKAGE_UNIT: &str = "/usr/lib/systemd/system/steerdns.service";

/// The value of `key=` in a unit (the first one).
fn unit_value<'a>(unit: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}=");
    unit.lines().find_map(|l| l.strip_prefix(prefix.as_str())).unwrap_or_else(|| panic!("{key}="))
}

/// `cargo deb` packages the test build's binary (`--no-build --profile dev`); the package
/// installs with `dpkg -i`, its unit verifies and names the package's paths, the binary
/// checks the installed example as the service's user, and `dpkg --purge` leaves nothing
/// behind. Needs root (CI runs as root) and changes the system, so it skips elsewhere, and
/// also where a steerdns package is already installed.
#[test]
fn the_debian_package_installs_checks_and_purges() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: installing a package needs root");
        return;
    }
    let (Some(_), Some(_)) = (require_tool("dpkg", "dpkg"), require_tool("cargo-deb", "cargo-deb"))
    else {
        return;
    };
    if Command::new("dpkg").args(["-s", "steerdns"]).output().unwrap().status.success() {
        eprintln!("skipping: a steerdns package is installed here already");
        return;
    }
    let out_dir = tempfile::tempdir().unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["deb", "--no-build", "--profile", "dev", "--no-strip", "--fast", "-o"])
        .arg(out_dir.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .unwrap();
    assert!(built.status.success(), "cargo deb:\n{}", output_text(&built));
    let arch = run("dpkg", &["--print-architecture"]);
    let name = format!("steerdns_{}_{}.deb", env!("CARGO_PKG_VERSION"), arch.trim());
    let deb = out_dir.path().join(&name);
    assert!(deb.is_file(), "no {name} in {}", output_text(&built));

    let installed = Installed;
    run("dpkg", &["-i", deb.to_str().unwrap()]);
    let conffiles = run("dpkg-query", &["-W", "-f=${Conffiles}", "steerdns"]);
    for file in ["/etc/steerdns/steerdns.yaml", "/etc/steerdns/profiles/failover.yaml"] {
        assert!(conffiles.contains(&format!(" {file} ")), "{file} is no conffile:\n{conffiles}");
    }
    let depends = run("dpkg-query", &["-W", "-f=${Depends}", "steerdns"]);
    assert!(depends.contains("libc6"), "Depends has no shared libraries: {depends}");
    let user = run("getent", &["passwd", "steerdns"]);
    let fields: Vec<&str> = user.trim().split(':').collect();
    assert_eq!(fields[6], "/usr/sbin/nologin", "{user}");
    let uid: u32 = fields[2].parse().unwrap();

    // The unit names the package's binary, configuration and state directory, and runs as
    // the user the package made.
    let unit = read(Path::new(PACKAGE_UNIT));
    assert_eq!(
        unit,
        read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/steerdns.service"))
    );
    let exec: Vec<&str> = unit_value(&unit, "ExecStart").split_whitespace().collect();
    assert_eq!(exec[..2], ["/usr/bin/steerdns", "serve"], "{exec:?}");
    let config = exec[exec.iter().position(|w| *w == "-c").expect("-c CONFIG") + 1];
    assert!(conffiles.contains(&format!(" {config} ")), "{config} is not the package's");
    assert_eq!(unit_value(&unit, "ConfigurationDirectory"), "steerdns", "/etc/steerdns");
    assert_eq!(unit_value(&unit, "StateDirectory"), "steerdns", "/var/lib/steerdns");
    assert_eq!(unit_value(&unit, "User"), "steerdns");
    let state = std::fs::metadata("/var/lib/steerdns").expect("/var/lib/steerdns");
    assert_eq!((state.uid(), state.mode() & 0o7777), (uid, 0o750), "/var/lib/steerdns");
    if have_tool("systemd-analyze", "systemd") {
        let out = Command::new("systemd-analyze")
            .args(["verify", PACKAGE_UNIT])
            .env("SYSTEMD_LOG_COLOR", "0")
            .output()
            .unwrap();
        let messages = output_text(&out);
        let about_unit: Vec<&str> = messages.lines().filter(|l| l.contains("steerdns")).collect();
        assert!(out.status.success() && about_unit.is_empty(), "{PACKAGE_UNIT}:\n{messages}");
    }

    // The installed binary loads the installed example as the service's user would, and its
    // help is the one the package ships.
    let checked = run("runuser", &["-u", "steerdns", "--", exec[0], "check", "-c", config]);
    assert!(checked.starts_with("ok: "), "{checked}");
    let help = run(exec[0], &["--help"]);
    assert_eq!(help, read(Path::new("/usr/share/doc/steerdns/steerdns.help")));
    assert_eq!(
        help,
        read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/steerdns.help")),
        "packaging/steerdns.help is stale: steerdns --help > packaging/steerdns.help"
    );

    // What the service writes (a state_file) goes with the purge, as does the rest.
    run("runuser", &["-u", "steerdns", "--", "touch", "/var/lib/steerdns/overrides.json"]);
    run("dpkg", &["--purge", "steerdns"]);
    std::mem::forget(installed);
    for gone in ["/usr/bin/steerdns", PACKAGE_UNIT, "/etc/steerdns", "/var/lib/steerdns"] {
        assert!(!Path::new(gone).exists(), "{gone} is left after dpkg --purge");
    }
    let status = Command::new("dpkg").args(["-s", "steerdns"]).output().unwrap();
    assert!(!status.status.success(), "still known to dpkg:\n{}", output_text(&status));
}
