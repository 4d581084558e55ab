//! Hot reload: file edits, additions and removals seen on the wire within 2 s; invalid
//! configurations (YAML syntax, semantics) keep the old answers and are reported with
//! FILE:LINE:COL; SIGHUP on the real binary; `POST /api/v1/reload`; a query stream from
//! four threads during 30 rapid reloads with zero lost or wrong answers; zone serials;
//! listen address changes; every trigger through the one reloader, requests during a
//! reload coalesced into one more, racing triggers leaving the last written files.
//!
//! Measurements (time for a change to show up, retries, reload times) are printed with a
//! `MEASURE` prefix: run with `--nocapture` to see them.

mod common;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use common::*;
use hickory_proto::rr::RData;
use steerdns::server::reloader::Trigger;

/// The requirement: a file change shows up on the wire within this long.
const RELOAD_DEADLINE: Duration = Duration::from_secs(2);
/// How long polling goes on before giving up (beyond the deadline, to report how late).
const POLL_LIMIT: Duration = Duration::from_secs(10);
const POLL_EVERY: Duration = Duration::from_millis(20);
/// How long answers are watched after an invalid write.
const WATCH_INVALID: Duration = Duration::from_secs(1);
/// Generous wait for something that has no deadline of its own (a log line, a counter).
const PATIENCE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// Log capture (the in-process server logs through `tracing`)
// ---------------------------------------------------------------------------------------

static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs (once per test binary) a global subscriber writing INFO and up into `LOG`.
/// Global, because reloads log from the watcher's and the blocking pool's threads.
fn capture_logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
            .with_writer(|| LogWriter)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
    });
}

/// Captured log lines (all tests of this binary write here: match on something unique).
fn log_lines() -> Vec<String> {
    let buf = LOG.lock().unwrap_or_else(|e| e.into_inner());
    String::from_utf8_lossy(&buf).lines().map(str::to_string).collect()
}

/// Waits until a captured log line satisfies `pred`; returns it.
async fn wait_log(what: &str, pred: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        if let Some(l) = log_lines().into_iter().find(|l| pred(l)) {
            return l;
        }
        assert!(start.elapsed() < PATIENCE, "no log line {what} within {PATIENCE:?}");
        tokio::time::sleep(POLL_EVERY).await;
    }
}

// ---------------------------------------------------------------------------------------
// Profiles and answers
// ---------------------------------------------------------------------------------------

/// A one-endpoint priority profile named `name` answering `target`.
fn one_target(name: &str, target: &str) -> String {
    format!(
        "name: {name}\nrouting: priority\nttl: 5\nendpoints:\n  - {{ name: main, target: {target}, always_serve: true }}\n"
    )
}

/// The default profiles plus `live.yaml` (profile `live` answering 192.0.2.100).
fn profiles_with_live() -> Vec<(&'static str, String)> {
    let mut v: Vec<(&str, String)> =
        DEFAULT_PROFILES.iter().map(|(n, t)| (*n, t.to_string())).collect();
    v.push(("live.yaml", one_target("live", "192.0.2.100")));
    v
}

async fn start_with(profiles: &[(&str, String)], admin: bool) -> Harness {
    capture_logs();
    let refs: Vec<(&str, &str)> = profiles.iter().map(|(n, t)| (*n, t.as_str())).collect();
    if admin { Harness::with_admin(&refs, None).await } else { Harness::with_profiles(&refs).await }
}

/// What `name` answers for A: "A 1.2.3.4" (joined when several), or "rcode N".
async fn answer(h: &Harness, rel: &str) -> String {
    let r = h.udp(&Q::new(&fq(rel), T_A)).await;
    describe(&r)
}

fn describe(r: &Reply) -> String {
    if r.rcode() != NOERROR || r.msg.answers.is_empty() {
        return format!("rcode {}", r.rcode());
    }
    r.answer_strings().join(", ")
}

/// Polls `rel` every 20 ms until it answers `want`; asserts that this happened within the
/// 2 s deadline and returns how long it took.
async fn expect_change(h: &Harness, rel: &str, want: &str, what: &str) -> Duration {
    let start = Instant::now();
    let mut last;
    loop {
        last = answer(h, rel).await;
        if last == want {
            break;
        }
        if start.elapsed() > POLL_LIMIT {
            panic!("{what}: {rel} still answers {last:?} after {POLL_LIMIT:?}, want {want:?}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    let took = start.elapsed();
    println!("MEASURE {what}: {rel} answered {want:?} after {} ms", took.as_millis());
    assert!(
        took <= RELOAD_DEADLINE,
        "{what}: the change showed up after {took:?}, more than {RELOAD_DEADLINE:?}"
    );
    took
}

/// Watches `rel` for `dur`: every answer must be `want`.
async fn expect_steady(h: &Harness, rel: &str, want: &str, dur: Duration, what: &str) -> usize {
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < dur {
        let got = answer(h, rel).await;
        assert_eq!(got, want, "{what}: answer changed after {:?}", start.elapsed());
        n += 1;
        tokio::time::sleep(POLL_EVERY).await;
    }
    n
}

/// The SOA serial of the test zone, over UDP.
async fn soa_serial(h: &Harness) -> u32 {
    let r = h.udp(&Q::new(ORIGIN, T_SOA)).await;
    match r.msg.answers.first().map(|a| &a.data) {
        Some(RData::SOA(soa)) => soa.serial,
        _ => panic!("no SOA answer: {r:#?}"),
    }
}

fn reload_failures(h: &Harness) -> u64 {
    h.server().control().totals.reload_failures.load(Ordering::Relaxed)
}

fn reloads(h: &Harness) -> u64 {
    h.server().control().totals.reloads.load(Ordering::Relaxed)
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(POLL_EVERY).await;
    }
}

// ---------------------------------------------------------------------------------------
// Edit, add, remove: seen within 2 s
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_profile_file_changes_the_answer_within_2s() {
    let h = start_with(&profiles_with_live(), false).await;
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");
    let gen_before = h.server().snapshot().generation;
    // In place (truncate and write), as `echo > file` or most scripts do.
    std::fs::write(h.profile_path("live.yaml"), one_target("live", "192.0.2.101")).unwrap();
    expect_change(&h, "live", "A 192.0.2.101", "edit in place").await;
    assert!(h.server().snapshot().generation > gen_before);
    // Other profiles are untouched.
    assert_eq!(answer(&h, "www").await, "A 192.0.2.10");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editor_rename_dance_changes_the_answer_within_2s() {
    let h = start_with(&profiles_with_live(), false).await;
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");
    let before = reloads(&h);
    // vim-style: write a swap file, move the original to a backup, rename into place,
    // remove the backup.
    let path = h.profile_path("live.yaml");
    let swap = h.profile_path(".live.yaml.swp");
    let backup = h.profile_path("live.yaml~");
    std::fs::write(&swap, one_target("live", "192.0.2.102")).unwrap();
    std::fs::rename(&path, &backup).unwrap();
    std::fs::rename(&swap, &path).unwrap();
    std::fs::remove_file(&backup).unwrap();
    expect_change(&h, "live", "A 192.0.2.102", "rename dance").await;
    // Let any straggling reload happen, then count (reported, not asserted: the
    // debounce is a timing matter).
    tokio::time::sleep(Duration::from_millis(600)).await;
    println!("MEASURE rename dance: {} reload(s) for 4 file operations", reloads(&h) - before);
    assert_eq!(reload_failures(&h), 0, "a reload failed during the rename dance");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_a_profile_file_answers_within_2s() {
    let h = start_with(&profiles_with_live(), false).await;
    h.udp(&Q::new(&fq("fresh"), T_A)).await.assert_negative(NXDOMAIN);
    std::fs::write(h.profile_path("fresh.yaml"), one_target("fresh", "192.0.2.103")).unwrap();
    expect_change(&h, "fresh", "A 192.0.2.103", "new file").await;
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_profile_file_stops_answering_within_2s() {
    let h = start_with(&profiles_with_live(), false).await;
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");
    std::fs::remove_file(h.profile_path("live.yaml")).unwrap();
    expect_change(&h, "live", &format!("rcode {NXDOMAIN}"), "file removed").await;
    h.udp(&Q::new(&fq("live"), T_A)).await.assert_negative(NXDOMAIN);
    assert_eq!(answer(&h, "www").await, "A 192.0.2.10");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_steerdns_yaml_reloads_within_2s() {
    let h = start_with(&profiles_with_live(), false).await;
    h.udp(&Q::new(&fq("added"), T_A)).await.assert_negative(NXDOMAIN);
    let yaml = steerdns_yaml().replacen(
        "    file: zones/extra.zone",
        "      - 'added A 192.0.2.104'\n    file: zones/extra.zone",
        1,
    );
    std::fs::write(h.dir.path().join("steerdns.yaml"), yaml).unwrap();
    expect_change(&h, "added", "A 192.0.2.104", "steerdns.yaml edit").await;
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Invalid configurations keep the old one serving
// ---------------------------------------------------------------------------------------

/// Writes `bad` over `live.yaml`; checks the old answer stays for ~1 s, the failure is
/// counted (control and /metrics), logged and returned by `POST /api/v1/reload` as 422
/// with `FILE:LINE:` at `line`; then a valid edit applies normally.
async fn invalid_edit_keeps_serving(bad: &str, line: u64, message: &str, what: &str) {
    let h = start_with(&profiles_with_live(), true).await;
    let admin = h.admin();
    let path = h.profile_path("live.yaml");
    let file = path.display().to_string();
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");
    let failures = reload_failures(&h);
    let scraped = scrape(admin, None).await.sum("steerdns_reload_failures_total", &[]);
    assert_eq!(scraped as u64, failures);
    let gen_before = h.server().snapshot().generation;

    std::fs::write(&path, bad).unwrap();
    let n = expect_steady(&h, "live", "A 192.0.2.100", WATCH_INVALID, what).await;
    println!("MEASURE {what}: {n} answers in {WATCH_INVALID:?} after the bad write, all old");

    // The watcher tried and failed.
    wait_until(&format!("{what}: watcher reload failure"), || reload_failures(&h) > failures).await;
    let logged = wait_log(&format!("naming {file}:{line}:"), |l| {
        l.contains("reload rejected") && l.contains(&format!("{file}:{line}:"))
    })
    .await;
    assert!(logged.contains("ERROR"), "{what}: logged below ERROR: {logged}");
    assert!(logged.contains(message), "{what}: log line lacks {message:?}: {logged}");

    // POST reload: 422 with the errors.
    let r = http_post(admin, "/api/v1/reload", None).await;
    assert_eq!(r.status, 422, "{what}: POST /api/v1/reload: {r:?} {}", r.text());
    let body = r.json();
    let errors: Vec<String> = body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no errors list: {body}"))
        .iter()
        .map(|e| e.as_str().expect("error strings").to_string())
        .collect();
    assert!(!errors.is_empty(), "{what}: empty errors list");
    let located = errors
        .iter()
        .find(|e| e.starts_with(&format!("{file}:{line}:")))
        .unwrap_or_else(|| panic!("{what}: no error names {file}:{line}:COL: {errors:#?}"));
    let col = located[file.len() + 1..].split(':').nth(1).unwrap_or("");
    assert!(col.parse::<u64>().is_ok_and(|c| c >= 1), "{what}: no column in {located:?}");
    assert!(located.contains(message), "{what}: {located:?} lacks {message:?}");

    // Counted: control and /metrics agree and rose by at least 2 (watcher and POST).
    let after = reload_failures(&h);
    assert!(after >= failures + 2, "{what}: reload_failures {failures} -> {after}");
    let m = scrape(admin, None).await;
    let scraped_after = m.sum("steerdns_reload_failures_total", &[]);
    assert!(scraped_after >= (failures + 2) as f64, "{what}: metric {scraped} -> {scraped_after}");
    assert_eq!(h.server().snapshot().generation, gen_before, "{what}: generation moved");
    assert_eq!(m.sum("steerdns_config_generation", &[]), gen_before as f64);
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");

    // A later valid edit applies normally.
    std::fs::write(&path, one_target("live", "192.0.2.105")).unwrap();
    expect_change(&h, "live", "A 192.0.2.105", &format!("{what}, then fixed")).await;
    assert!(h.server().snapshot().generation > gen_before);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_syntax_error_keeps_old_answers_and_is_reported() {
    // Line 3 is indented under a scalar.
    let bad = "name: live\nrouting: priority\n  ttl: 5\nendpoints:\n  - { name: main, target: 192.0.2.106, always_serve: true }\n";
    let message = "a key cannot be nested under a scalar value";
    invalid_edit_keeps_serving(bad, 3, message, "YAML syntax error").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semantic_error_keeps_old_answers_and_is_reported() {
    // Valid YAML, but endpoint name `main` twice: the second is on line 5.
    let bad = "name: live\nrouting: priority\nendpoints:\n  - { name: main, target: 192.0.2.106, priority: 1, always_serve: true }\n  - { name: main, target: 192.0.2.107, priority: 2, always_serve: true }\n";
    invalid_edit_keeps_serving(bad, 5, "duplicate endpoint name", "duplicate endpoint").await;
}

/// `POST /api/v1/reload` must answer 422; returns the error strings.
async fn reload_422(h: &Harness, what: &str) -> Vec<String> {
    let r = http_post(h.admin(), "/api/v1/reload", None).await;
    assert_eq!(r.status, 422, "{what}: POST /api/v1/reload: {r:?} {}", r.text());
    let body = r.json();
    body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no errors list: {body}"))
        .iter()
        .map(|e| e.as_str().expect("error strings").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_steerdns_yaml_keeps_serving_and_is_reported() {
    let h = start_with(&profiles_with_live(), true).await;
    let config = h.dir.path().join("steerdns.yaml");
    let good = std::fs::read_to_string(&config).unwrap();
    let gen_before = h.server().snapshot().generation;
    // An unknown top-level key on the line after the last.
    let line = good.lines().count() + 1;
    write_atomic(&config, format!("{good}bogus_key: 1\n"));
    let errors = reload_422(&h, "unknown key in steerdns.yaml").await;
    let want = format!("{}:{line}:", config.display());
    assert!(
        errors.iter().any(|e| e.starts_with(&want) && e.contains("bogus_key")),
        "no error at {want}: {errors:#?}"
    );
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");
    assert_eq!(h.server().snapshot().generation, gen_before);
    // Fixed: applies.
    write_atomic(&config, &good);
    let r = http_post(h.admin(), "/api/v1/reload", None).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()["generation"].as_u64().unwrap() > gen_before);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_file_error_names_the_zone_file_and_line() {
    let h = start_with(&profiles_with_live(), true).await;
    let zone_path = h.dir.path().join("zones/extra.zone");
    // Line 4 of the zone file gets an invalid address.
    let bad = ZONE_FILE.replace("192.0.2.200", "192.0.2.300");
    assert_eq!(bad.lines().nth(3).unwrap().split_whitespace().next(), Some("ftp"));
    std::fs::write(&zone_path, bad).unwrap();
    let errors = reload_422(&h, "bad record in the zone file").await;
    assert_eq!(answer(&h, "ftp").await, "A 192.0.2.200", "old data keeps serving");
    let want = format!("{}:4:", zone_path.display());
    assert!(
        errors.iter().any(|e| e.starts_with(&want)),
        "every error is reported with FILE:LINE:COL; want an error at {want}, got {errors:#?}"
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// POST /api/v1/reload, zone serial
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_reload_returns_200_with_a_growing_generation() {
    let h = start_with(&profiles_with_live(), true).await;
    let admin = h.admin();
    let mut last = h.server().snapshot().generation;
    for i in 0..3 {
        let r = http_post(admin, "/api/v1/reload", None).await;
        assert_eq!(r.status, 200, "reload {i}: {r:?}");
        assert!(r.header("content-type").unwrap_or("").starts_with("application/json"));
        let body = r.json();
        let generation = body["generation"]
            .as_u64()
            .unwrap_or_else(|| panic!("reload {i}: no generation: {body}"));
        assert!(generation > last, "reload {i}: generation {last} -> {generation}");
        assert_eq!(h.server().snapshot().generation, generation);
        let m = scrape(admin, None).await;
        assert_eq!(m.sum("steerdns_config_generation", &[]), generation as f64);
        last = generation;
    }
    // GET is not a reload: it tells how the last one ended.
    let r = http_get(admin, "/api/v1/reload", None).await;
    assert_eq!(r.status, 200, "GET /api/v1/reload: {r:?}");
    assert_eq!(
        (&r.json()["generation"], &r.json()["trigger"]),
        (&last.into(), &"admin API".into())
    );
    assert_eq!(h.server().snapshot().generation, last);
    h.stop().await;
}

/// `steerdns_reload_requests_total` of one trigger, as `/metrics` shows it.
fn requests(m: &Prom, trigger: &str) -> u64 {
    m.sum("steerdns_reload_requests_total", &[("trigger", trigger)]) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_requests_during_a_reload_is_one_more_reload() {
    let h = start_with(&profiles_with_live(), true).await;
    let reloader = h.server().reloader();
    let (before, generation) = (reloads(&h), h.server().snapshot().generation);
    // A reload reads every file; twenty requests made while it runs wait for one more.
    for _ in 0..19 {
        reloader.request(Trigger::Signal);
    }
    let last = reloader.reload(Trigger::Signal).await.expect("the reload applies");
    let ran = reloads(&h) - before;
    assert!((1..=2).contains(&ran), "20 requests in a burst ran {ran} reloads");
    println!("MEASURE burst: 20 requests during a reload ran {ran} reloads");
    assert_eq!(last, generation + ran, "each reload is one generation");
    let m = scrape(h.admin(), None).await;
    assert_eq!(requests(&m, "sighup"), 20);
    assert_eq!(m.sum("steerdns_reloads_total", &[]) as u64, reloads(&h));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_triggers_coalesce_and_leave_the_last_written_configuration() {
    let h = start_with(&profiles_with_live(), true).await;
    let (admin, reloader) = (h.admin(), h.server().reloader());
    let start_generation = h.server().snapshot().generation;
    let targets = ["192.0.2.101", "192.0.2.102", "192.0.2.103", "192.0.2.104", "192.0.2.105"];
    // Every round: a file change (seen by the watcher), a SIGHUP's request, an API call and
    // a direct request, all at once. Each caller that waits gets a reload that started
    // after its request, so it sees the file as written before it asked.
    let mut api_calls = 0;
    for (round, target) in targets.iter().enumerate() {
        write_atomic(&h.profile_path("live.yaml"), one_target("live", target));
        reloader.request(Trigger::Signal);
        let api = http_post(admin, "/api/v1/reload", None);
        let direct = reloader.reload(Trigger::Request);
        let (api, direct) = tokio::join!(api, direct);
        api_calls += 1;
        assert_eq!(api.status, 200, "round {round}: {api:?} {}", api.text());
        let direct = direct.unwrap_or_else(|e| panic!("round {round}: {e}"));
        let from_api = api.json()["generation"].as_u64().expect("generation");
        assert!(direct > start_generation && from_api > start_generation, "round {round}");
        assert_eq!(answer(&h, "live").await, format!("A {target}"), "round {round}");
    }
    // The watcher's reloads come in after its quiet time.
    let since = Instant::now();
    let m = loop {
        let m = scrape(admin, None).await;
        if requests(&m, "file") > 0 {
            break m;
        }
        assert!(since.elapsed() < PATIENCE, "the watcher asked for no reload");
        tokio::time::sleep(POLL_EVERY).await;
    };
    assert_eq!(requests(&m, "sighup"), targets.len() as u64);
    assert_eq!(requests(&m, "api"), api_calls);
    assert_eq!(requests(&m, "request"), targets.len() as u64);
    // Settled: no request waits and none is running.
    wait_until("the last reload done", || {
        h.server().snapshot().generation == start_generation + reloads(&h)
    })
    .await;
    let m = scrape(admin, None).await;
    let asked: u64 = ["sighup", "api", "file", "request", "key_timing", "etcd"]
        .iter()
        .map(|t| requests(&m, t))
        .sum();
    let ran = m.sum("steerdns_reloads_total", &[]) as u64;
    assert!(ran <= asked, "{ran} reloads for {asked} requests");
    assert_eq!(m.sum("steerdns_reload_failures_total", &[]), 0.0);
    assert_eq!(m.sum("steerdns_config_generation", &[]) as u64, start_generation + ran);
    assert_eq!(answer(&h, "live").await, format!("A {}", targets[targets.len() - 1]));
    println!("MEASURE racing triggers: {asked} requests, {ran} reloads");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_serial_grows_only_when_the_zone_changed() {
    let h = start_with(&profiles_with_live(), false).await;
    let s0 = soa_serial(&h).await;
    // Nothing changed: same serial.
    h.server().reload().expect("reload");
    let s1 = soa_serial(&h).await;
    assert_eq!(s1, s0, "serial moved on a reload without changes");
    // A profile's answer changed: the serial grows.
    write_atomic(&h.profile_path("live.yaml"), one_target("live", "192.0.2.108"));
    h.server().reload().expect("reload");
    assert_eq!(answer(&h, "live").await, "A 192.0.2.108");
    let s2 = soa_serial(&h).await;
    assert!(s2 > s0, "serial {s0} -> {s2} after a change");
    // A static record changed (zone file): grows again.
    let zone = ZONE_FILE.replace("192.0.2.200", "192.0.2.201");
    std::fs::write(h.dir.path().join("zones/extra.zone"), zone).unwrap();
    h.server().reload().expect("reload");
    assert_eq!(answer(&h, "ftp").await, "A 192.0.2.201");
    let s3 = soa_serial(&h).await;
    assert!(s3 > s2, "serial {s2} -> {s3} after a zone file change");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Zero lost or wrong answers during 30 rapid reloads
// ---------------------------------------------------------------------------------------

const FLIP_A: &str = "192.0.2.110";
const FLIP_B: &str = "192.0.2.111";
const QUERY_THREADS: usize = 4;
const RELOADS: usize = 30;
/// First wait for a reply; after it, the query is sent once more.
const FIRST_WAIT: Duration = Duration::from_millis(500);
/// Wait for the reply to the resent query before counting it lost.
const SECOND_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct StreamStats {
    sent: u64,
    answered: u64,
    retries: u64,
    lost: u64,
    a: u64,
    b: u64,
    wrong: Vec<String>,
}

/// One query thread: queries `flip` until `stop`, each reply awaited (one resend after
/// `FIRST_WAIT`), every answer checked to be exactly one of the two valid values.
fn query_stream(addr: SocketAddr, thread: usize, stop: Arc<AtomicBool>) -> StreamStats {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.connect(addr).expect("connect");
    let (a, b): (IpAddr, IpAddr) = (FLIP_A.parse().unwrap(), FLIP_B.parse().unwrap());
    let mut st = StreamStats::default();
    let mut id = (thread as u16) << 12;
    let mut buf = vec![0u8; 65535];
    // Waits for the reply with `id`; replies to earlier queries are skipped.
    let recv = |buf: &mut Vec<u8>, id: u16, wait: Duration| -> Option<Vec<u8>> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            sock.set_read_timeout(Some(left.max(Duration::from_millis(1)))).unwrap();
            match sock.recv(buf) {
                Ok(n) if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id => {
                    return Some(buf[..n].to_vec());
                }
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        id = ((thread as u16) << 12) | (id.wrapping_add(1) & 0x0fff);
        let q = Q::new(&fq("flip"), T_A).id(id).bytes();
        sock.send(&q).expect("send");
        st.sent += 1;
        let mut reply = recv(&mut buf, id, FIRST_WAIT);
        if reply.is_none() {
            st.retries += 1;
            sock.send(&q).expect("resend");
            reply = recv(&mut buf, id, SECOND_WAIT);
        }
        let Some(raw) = reply else {
            st.lost += 1;
            continue;
        };
        st.answered += 1;
        let r = Reply::new(raw);
        let addrs = r.addrs();
        if r.rcode() != NOERROR || !r.aa() || r.msg.answers.len() != 1 {
            st.wrong.push(format!("query {id:#06x}: {}", describe(&r)));
        } else if addrs == [a] {
            st.a += 1;
        } else if addrs == [b] {
            st.b += 1;
        } else {
            st.wrong.push(format!("query {id:#06x}: {}", describe(&r)));
        }
    }
    st
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_query_lost_or_wrong_during_30_rapid_reloads() {
    let mut profiles = profiles_with_live();
    profiles.push(("flip.yaml", one_target("flip", FLIP_A)));
    let h = start_with(&profiles, true).await;
    let admin = h.admin();
    assert_eq!(answer(&h, "flip").await, format!("A {FLIP_A}"));
    let serial0 = soa_serial(&h).await;

    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..QUERY_THREADS)
        .map(|t| {
            let (addr, stop) = (h.addr, stop.clone());
            std::thread::spawn(move || query_stream(addr, t, stop))
        })
        .collect();
    // Let the streams get going before the first reload.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut generation = h.server().snapshot().generation;
    let mut serial = serial0;
    let mut took = Vec::new();
    let reloader = h.server().reloader();
    for i in 0..RELOADS {
        let target = if i % 2 == 0 { FLIP_B } else { FLIP_A };
        // Atomic replace, so no reader (the watcher's reload included) sees half a file.
        write_atomic(&h.profile_path("flip.yaml"), one_target("flip", target));
        let start = Instant::now();
        let g = if i % 2 == 0 {
            reloader.reload(Trigger::Request).await.unwrap_or_else(|e| panic!("reload {i}: {e}"))
        } else {
            let r = http_post(admin, "/api/v1/reload", None).await;
            assert_eq!(r.status, 200, "reload {i}: {r:?} {}", r.text());
            r.json()["generation"].as_u64().expect("generation")
        };
        took.push(start.elapsed());
        assert!(g > generation, "reload {i}: generation {generation} -> {g}");
        generation = g;
        // The swap is done: the new value answers from now on.
        assert_eq!(answer(&h, "flip").await, format!("A {target}"), "after reload {i}");
        let s = soa_serial(&h).await;
        assert!(s > serial, "reload {i} changed the zone but the serial went {serial} -> {s}");
        serial = s;
    }
    stop.store(true, Ordering::Relaxed);
    let stats: Vec<StreamStats> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    let total = |f: fn(&StreamStats) -> u64| stats.iter().map(f).sum::<u64>();
    let (sent, answered, lost, retries) =
        (total(|s| s.sent), total(|s| s.answered), total(|s| s.lost), total(|s| s.retries));
    let wrong: Vec<&String> = stats.iter().flat_map(|s| &s.wrong).collect();
    let max_took = took.iter().max().unwrap();
    let mean_took = took.iter().sum::<Duration>() / took.len() as u32;
    println!(
        "MEASURE 30 reloads: {sent} queries from {QUERY_THREADS} threads, {answered} answered \
             ({} {FLIP_A}, {} {FLIP_B}), {retries} needed a resend, {lost} lost, {} wrong; \
             reload call took mean {mean_took:?}, max {max_took:?}; generation now {generation}; \
             serial {serial0} -> {serial}",
        total(|s| s.a),
        total(|s| s.b),
        wrong.len(),
    );
    assert!(wrong.is_empty(), "wrong answers during reloads: {wrong:#?}");
    assert_eq!(lost, 0, "{lost} queries lost (no reply after a resend)");
    assert_eq!(answered, sent);
    for (t, s) in stats.iter().enumerate() {
        assert!(s.answered > 0, "thread {t} got no answers: {s:?}");
    }
    assert!(total(|s| s.a) > 0 && total(|s| s.b) > 0, "only one value was ever seen");
    assert_eq!(reload_failures(&h), 0, "a reload (maybe the watcher's) failed");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// Listen address changes need a restart
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_address_change_reloads_and_warns_restart_needed() {
    let h = start_with(&profiles_with_live(), true).await;
    let admin = h.admin();
    // New listen addresses no one else uses, plus a new record to see the reload apply.
    let yaml = with_admin(&steerdns_yaml(), None)
        .replacen("dns: [\"127.0.0.1:0\"]", "dns: [\"127.0.0.1:1\"]", 1)
        .replacen("admin: \"127.0.0.1:0\"", "admin: \"127.0.0.1:2\"", 1)
        .replacen(
            "    file: zones/extra.zone",
            "      - 'moved A 192.0.2.109'\n    file: zones/extra.zone",
            1,
        );
    write_atomic(&h.dir.path().join("steerdns.yaml"), &yaml);
    let r = http_post(admin, "/api/v1/reload", None).await;
    assert_eq!(r.status, 200, "reload with new listen addresses: {r:?} {}", r.text());
    // Applied (the new record answers) on the running listener, which still answers.
    assert_eq!(answer(&h, "moved").await, "A 192.0.2.109");
    assert_eq!(h.tcp(&Q::new(&fq("www"), T_A)).await.single(), "A 192.0.2.10");
    assert_eq!(http_get(admin, "/healthz", None).await.status, 200);
    // Said clearly: restart needed, for each key.
    let dns = wait_log("listen.dns restart warning", |l| {
        l.contains("listen.dns") && l.contains("127.0.0.1:1") && l.contains("restart")
    })
    .await;
    assert!(dns.contains("WARN"), "not a warning: {dns}");
    let adm = wait_log("listen.admin restart warning", |l| {
        l.contains("listen.admin") && l.contains("127.0.0.1:2") && l.contains("restart")
    })
    .await;
    assert!(adm.contains("WARN"), "not a warning: {adm}");
    println!("MEASURE listen change warnings:\n  {dns}\n  {adm}");
    // The API's reply names the keys, and every later reload repeats the warning while
    // the restart is pending.
    let body: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(body["restart_needed"], serde_json::json!(["listen.dns", "listen.admin"]));
    let count = || {
        log_lines()
            .iter()
            .filter(|l| l.contains("listen.dns changed") && l.contains("127.0.0.1:1"))
            .count()
    };
    let before = count();
    let again = http_post(admin, "/api/v1/reload", None).await;
    assert_eq!(again.status, 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while count() == before && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(count() > before, "a second reload warns again");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// SIGHUP on the real binary
// ---------------------------------------------------------------------------------------

/// A free port for both UDP and TCP on 127.0.0.1 (closed again; the caller retries if it
/// is taken before use).
fn free_port() -> u16 {
    loop {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        let port = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Strips ANSI escape sequences (text logs are coloured even when stderr is a pipe).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `steerdns serve` as a child process with stderr collected line by line.
struct Binary {
    child: Child,
    addr: SocketAddr,
    /// The admin API's address, when it was started with one.
    admin: Option<SocketAddr>,
    stderr: Arc<Mutex<Vec<String>>>,
    raw_ansi: Arc<AtomicU64>,
    /// The thread collecting stderr: it ends once the process has exited and every line
    /// is in `stderr`.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Binary {
    /// Writes the test configuration on a free port into `dir` and spawns the binary
    /// (without waiting for it).
    fn spawn(dir: &Path, profiles: &[(&str, &str)], json: bool) -> Binary {
        Binary::spawn_with(dir, profiles, json, false)
    }

    /// `spawn`, with the admin API on another free port when `admin`.
    fn spawn_with(dir: &Path, profiles: &[(&str, &str)], json: bool, admin: bool) -> Binary {
        let port = free_port();
        write_config(dir, profiles);
        let admin = admin.then(|| SocketAddr::from(([127, 0, 0, 1], free_port())));
        let yaml = match admin {
            Some(a) => with_admin(&steerdns_yaml(), None).replacen(
                "admin: \"127.0.0.1:0\"",
                &format!("admin: \"{a}\""),
                1,
            ),
            None => steerdns_yaml(),
        };
        let yaml = yaml.replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
        std::fs::write(dir.join("steerdns.yaml"), yaml).unwrap();
        let raw_ansi = Arc::new(AtomicU64::new(0));
        let ansi = raw_ansi.clone();
        let Served { child, stderr, reader } =
            serve_collecting_stderr(&dir.join("steerdns.yaml"), json, move |l| {
                if l.contains('\u{1b}') {
                    ansi.fetch_add(1, Ordering::Relaxed);
                }
                strip_ansi(&l)
            });
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        Binary { child, addr, admin, stderr, raw_ansi, reader: Some(reader) }
    }

    /// Whether the process has exited; if so, its whole stderr has been collected.
    fn exited(&mut self) -> bool {
        if self.child.try_wait().unwrap().is_none() {
            return false;
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        true
    }

    /// Spawns the binary and waits until it answers and has logged "serving"; retries
    /// with another port when the port was taken meanwhile.
    async fn start(dir: &Path, profiles: &[(&str, &str)], json: bool) -> Binary {
        Binary::start_with(dir, profiles, json, false).await
    }

    /// `start`, with the admin API when `admin`.
    async fn start_with(dir: &Path, profiles: &[(&str, &str)], json: bool, admin: bool) -> Binary {
        for _ in 0..5 {
            let mut b = Binary::spawn_with(dir, profiles, json, admin);
            if b.wait_ready().await {
                // Startup is complete once "serving" is logged (see
                // `sighup_as_soon_as_the_port_accepts_reloads_instead_of_killing`).
                b.wait_line("serving", 0, |l| l.contains("serving")).await;
                return b;
            }
            let text = b.stderr_text();
            assert!(text.contains("cannot listen"), "steerdns did not start:\n{text}");
        }
        panic!("no free port after 5 tries");
    }

    /// True once it answers; false when it exited (e.g. port taken).
    async fn wait_ready(&mut self) -> bool {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(self.addr).await.unwrap();
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if self.exited() {
                return false;
            }
            let q = Q::new(&fq("www"), T_A).bytes();
            sock.send(&q).await.unwrap();
            let mut buf = vec![0u8; 4096];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(200), sock.recv(&mut buf)).await
                && n >= 2
                && buf[..2] == q[..2]
            {
                return true;
            }
        }
        panic!("steerdns did not answer within {PATIENCE:?}:\n{}", self.stderr_text());
    }

    async fn answer(&self, rel: &str) -> String {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(self.addr).await.unwrap();
        let raw = udp_exchange(&sock, &Q::new(&fq(rel), T_A).bytes())
            .await
            .unwrap_or_else(|| panic!("no reply from the binary for {rel}"));
        describe(&Reply::new(raw))
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }

    fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Waits for a stderr line matching `pred`, after the first `skip` lines.
    async fn wait_line(&self, what: &str, skip: usize, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.stderr.lock().unwrap().iter().skip(skip).find(|l| pred(l)) {
                return l.clone();
            }
            if start.elapsed() > PATIENCE {
                let status = self.child_status();
                panic!(
                    "no stderr line {what} within {PATIENCE:?} ({status}):\n{}",
                    self.stderr_text()
                );
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// "running" or how the process ended.
    fn child_status(&self) -> String {
        // `try_wait` needs `&mut`; waitid with WNOWAIT leaves the zombie for `terminate`.
        let pid = libc::id_t::try_from(self.child.id()).expect("pid");
        // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid(2).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child, writing into `info` only.
        let rc = unsafe {
            libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
        };
        // SAFETY: reading the fields waitid filled in.
        let (child_pid, code, status) = unsafe { (info.si_pid(), info.si_code, info.si_status()) };
        match (rc, child_pid) {
            (0, 0) => "still running".to_string(),
            (0, _) if code == libc::CLD_KILLED || code == libc::CLD_DUMPED => {
                format!("killed by signal {status}")
            }
            (0, _) => format!("exited with code {status}"),
            _ => format!("waitid failed: {}", std::io::Error::last_os_error()),
        }
    }

    fn lines(&self) -> usize {
        self.stderr.lock().unwrap().len()
    }

    /// SIGTERM, then the exit status (within `PATIENCE`) and the whole of stderr.
    async fn terminate(mut self) -> (std::process::ExitStatus, String) {
        self.signal(libc::SIGTERM);
        let start = Instant::now();
        while !self.exited() {
            assert!(start.elapsed() < PATIENCE, "no exit after SIGTERM:\n{}", self.stderr_text());
            tokio::time::sleep(POLL_EVERY).await;
        }
        let status = self.child.try_wait().unwrap().expect("exited");
        (status, self.stderr_text())
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_running_binary() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::start(dir.path(), DEFAULT_PROFILES, false).await;
    assert_eq!(bin.answer("ftp").await, "A 192.0.2.200");
    // Zone files are not watched: only the SIGHUP can apply this change.
    let zone = ZONE_FILE.replace("192.0.2.200", "192.0.2.202");
    std::fs::write(dir.path().join("zones/extra.zone"), zone).unwrap();
    let skip = bin.lines();
    let start = Instant::now();
    bin.signal(libc::SIGHUP);
    let line = bin
        .wait_line("configuration reloaded, trigger SIGHUP", skip, |l| {
            l.contains("configuration reloaded") && l.contains("trigger=\"SIGHUP\"")
        })
        .await;
    assert!(line.contains("INFO"), "{line}");
    assert!(line.contains("generation=2"), "{line}");
    // After the logged swap the new answer is served.
    assert_eq!(bin.answer("ftp").await, "A 192.0.2.202");
    println!(
        "MEASURE SIGHUP: reloaded and answering after {} ms: {line}",
        start.elapsed().as_millis()
    );
    // A profile edit followed at once by SIGHUP also applies.
    write_atomic(&dir.path().join("profiles/priority.yaml"), one_target("www", "192.0.2.112"));
    bin.signal(libc::SIGHUP);
    let start = Instant::now();
    loop {
        let got = bin.answer("www").await;
        if got == "A 192.0.2.112" {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "www still answers {got} after SIGHUP");
        tokio::time::sleep(POLL_EVERY).await;
    }
    let ansi = bin.raw_ansi.load(Ordering::Relaxed);
    println!(
        "MEASURE SIGHUP: {ansi} stderr line(s) carried ANSI escapes although stderr is a pipe"
    );
    let (status, text) = bin.terminate().await;
    assert!(status.success(), "exit after SIGTERM: {status:?}\n{text}");
    assert_eq!(status.code(), Some(0));
    assert!(text.contains("shutting down"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_api_and_file_change_at_once_go_through_one_reloader_in_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::start_with(dir.path(), DEFAULT_PROFILES, false, true).await;
    let admin = bin.admin.expect("admin API");
    let targets = ["192.0.2.121", "192.0.2.122", "192.0.2.123"];
    for (round, target) in targets.iter().enumerate() {
        // The file changes (the watcher asks), a SIGHUP asks, and the API asks, at once.
        write_atomic(&dir.path().join("profiles/priority.yaml"), one_target("www", target));
        bin.signal(libc::SIGHUP);
        let r = http_post(admin, "/api/v1/reload", None).await;
        assert_eq!(r.status, 200, "round {round}: {r:?} {}", r.text());
        // The API's reload started after its request, so it read the file written before.
        assert_eq!(bin.answer("www").await, format!("A {target}"), "round {round}");
    }
    // Every trigger shows up in the request counts; all are served by the same reloads, and
    // each reload logs one line. A reload counts itself before it logs, and the watcher's
    // may still come after the rounds: the lines are read before each scrape, so that they
    // can fall short of its count but never exceed it, and are compared until they agree.
    let start = Instant::now();
    let (m, ran) = loop {
        let lines = bin.stderr_text();
        let logged = lines.lines().filter(|l| l.contains("configuration reloaded")).count();
        let m = scrape(admin, None).await;
        let ran = m.sum("steerdns_reloads_total", &[]) as u64;
        assert!(logged as u64 <= ran, "{logged} lines for {ran} reloads:\n{lines}");
        let settled = requests(&m, "file") > 0
            && requests(&m, "sighup") > 0
            && m.sum("steerdns_config_generation", &[]) == 1.0 + ran as f64
            && logged as u64 == ran;
        if settled {
            break (m, ran);
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the triggers never settled ({ran} reloads, one line per reload):\n{lines}"
        );
        tokio::time::sleep(POLL_EVERY).await;
    };
    assert_eq!(requests(&m, "api"), targets.len() as u64);
    let asked: u64 = ["sighup", "api", "file"].iter().map(|t| requests(&m, t)).sum();
    assert!((1..=asked).contains(&ran), "{ran} reloads for {asked} requests");
    assert_eq!(m.sum("steerdns_reload_failures_total", &[]), 0.0);
    assert_eq!(bin.answer("www").await, format!("A {}", targets[targets.len() - 1]));
    println!("MEASURE binary: {asked} requests (sighup, api, file), {ran} reloads");
    let (status, text) = bin.terminate().await;
    assert!(status.success(), "exit after SIGTERM: {status:?}\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_with_invalid_config_keeps_serving_and_logs_file_line_col() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::start(dir.path(), DEFAULT_PROFILES, true).await;
    assert_eq!(bin.answer("www").await, "A 192.0.2.10");
    // The second endpoint named `primary` is on line 5, its name value at column 13.
    let bad = "name: www\nrouting: priority\nendpoints:\n  - { name: primary, target: 192.0.2.113, priority: 1, always_serve: true }\n  - { name: primary, target: 192.0.2.114, priority: 2, always_serve: true }\n";
    let path: PathBuf = dir.path().join("profiles/priority.yaml");
    write_atomic(&path, bad);
    let skip = bin.lines();
    bin.signal(libc::SIGHUP);
    let want = format!("{}:5:", path.display());
    let line = bin
        .wait_line("reload rejected, trigger SIGHUP", skip, |l| {
            l.contains("\"SIGHUP\"") && l.contains("reload rejected") && l.contains(&want)
        })
        .await;
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert_eq!(v["level"], "ERROR", "{line}");
    assert_eq!(v["trigger"], "SIGHUP", "{line}");
    let error = v["error"].as_str().unwrap_or_else(|| panic!("no error field: {line}"));
    let rest = error
        .strip_prefix(&want)
        .unwrap_or_else(|| panic!("error {error:?} does not start with {want}"));
    let col = rest.split(':').next().unwrap_or("");
    assert!(col.parse::<u64>().is_ok_and(|c| c >= 1), "no column in {error:?}");
    assert!(error.contains("duplicate endpoint name"), "{error}");
    // The old configuration keeps serving.
    for _ in 0..10 {
        assert_eq!(bin.answer("www").await, "A 192.0.2.10");
    }
    // Every stderr line is one JSON object with timestamp, level and target.
    for l in bin.stderr.lock().unwrap().iter() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("stderr line not JSON ({e}): {l}"));
        for k in ["timestamp", "level", "target"] {
            assert!(v.get(k).is_some(), "JSON log line without {k}: {l}");
        }
    }
    // A later valid edit + SIGHUP applies.
    write_atomic(&path, one_target("www", "192.0.2.115"));
    let skip = bin.lines();
    bin.signal(libc::SIGHUP);
    bin.wait_line("configuration reloaded, trigger SIGHUP", skip, |l| {
        l.contains("configuration reloaded") && l.contains("\"SIGHUP\"")
    })
    .await;
    assert_eq!(bin.answer("www").await, "A 192.0.2.115");
    let (status, text) = bin.terminate().await;
    assert_eq!(status.code(), Some(0), "exit after SIGTERM: {status:?}\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_as_soon_as_the_port_accepts_reloads_instead_of_killing() {
    // A supervisor that sends SIGHUP as soon as the DNS port accepts connections
    // (a readiness check by port) must get a reload, not a dead server.
    for attempt in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut bin = Binary::spawn(dir.path(), DEFAULT_PROFILES, false);
        let start = Instant::now();
        loop {
            // A connection from the port to itself (TCP's simultaneous open, when the
            // kernel picks the server's port as the source port) is not the server's.
            let accepted = std::net::TcpStream::connect(bin.addr)
                .is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok());
            if accepted {
                break;
            }
            if bin.exited() {
                break;
            }
            assert!(start.elapsed() < PATIENCE, "the port never accepted");
            std::thread::sleep(Duration::from_micros(200));
        }
        if bin.exited() && bin.stderr_text().contains("cannot listen") {
            continue; // port taken by someone else meanwhile: try again
        }
        bin.signal(libc::SIGHUP);
        // UDP may be bound a moment after TCP: wait until it answers or exits.
        let alive = bin.wait_ready().await;
        if !alive && bin.stderr_text().contains("cannot listen") {
            // The port that accepted was another process's, taken between the free-port
            // probe and our bind: not what this test is about.
            continue;
        }
        let status = bin.child.try_wait().unwrap();
        assert!(
            alive,
            "attempt {attempt}: SIGHUP sent as soon as the DNS port accepted a TCP \
                 connection; the process ended ({status:?}); stderr:\n{}",
            bin.stderr_text()
        );
        bin.wait_line("configuration reloaded, trigger SIGHUP", 0, |l| {
            l.contains("configuration reloaded") && l.contains("trigger=\"SIGHUP\"")
        })
        .await;
        let (status, text) = bin.terminate().await;
        assert_eq!(status.code(), Some(0), "exit after SIGTERM: {status:?}\n{text}");
    }
}
