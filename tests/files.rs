//! Files that could hang or starve the server: a FIFO (or a device, a dangling link) where
//! a configuration file belongs, oversized files, and a file rewritten without pause. Each
//! is refused with an error naming the file, by `steerdns check` and by reloads, while the
//! running configuration keeps serving and later valid edits still apply; SIGTERM stops
//! the binary in bounded time even while a large configuration is being loaded.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use steerdns::server::reloader::{ReloadError, Trigger};

/// `steerdns check` and a reload of a small configuration finish well within this.
const PROMPT: Duration = Duration::from_secs(10);
/// SIGTERM to exit: the server's shutdown limit (3 s) plus the runtime's (0.5 s) and slack.
const EXIT_BOUND: Duration = Duration::from_secs(6);
const POLL_EVERY: Duration = Duration::from_millis(20);

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path in the test's own directory.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}: {}", path.display(), std::io::Error::last_os_error());
}

/// One-endpoint priority profile `name` answering `target`.
fn one_target(name: &str, target: &str) -> String {
    format!(
        "name: {name}\nrouting: priority\nttl: 5\nendpoints:\n  - {{ name: main, target: {target}, always_serve: true }}\n"
    )
}

/// The test configuration plus an admin token file, a latency table and `live.yaml`
/// (profile `live` answering 192.0.2.100), and `extra` appended to `steerdns.yaml`.
fn write_full_config(dir: &Path, extra: &str) {
    let mut profiles: Vec<(&str, &str)> = DEFAULT_PROFILES.to_vec();
    let live = one_target("live", "192.0.2.100");
    profiles.push(("live.yaml", &live));
    write_config(dir, &profiles);
    std::fs::write(dir.join("admin.token"), "s3cret\n").unwrap();
    std::fs::copy(location_fixture("latency.yaml"), dir.join("latency.yaml")).unwrap();
    let yaml = format!(
        "{}admin:\n  token_file: admin.token\nlatency:\n  table: latency.yaml\n{extra}",
        steerdns_yaml()
    );
    std::fs::write(dir.join("steerdns.yaml"), yaml).unwrap();
}

/// Runs `steerdns check` on `dir`; panics when it does not finish within `PROMPT`.
fn run_check(dir: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["check", "-c"])
        .arg(dir.join("steerdns.yaml"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn steerdns check");
    let status = wait_exit(&mut child, PROMPT)
        .unwrap_or_else(|| panic!("steerdns check did not finish within {PROMPT:?}"));
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    (status.code(), out)
}

/// The exit status within `limit`, or `None` (the child is then killed).
fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// Where a FIFO replaces a file of the configuration, and the path errors must name.
struct FifoCase {
    what: &'static str,
    /// Relative to the configuration directory.
    file: &'static str,
}

const FIFO_CASES: &[FifoCase] = &[
    FifoCase { what: "admin token file", file: "admin.token" },
    FifoCase { what: "zone file", file: "zones/extra.zone" },
    FifoCase { what: "latency table", file: "latency.yaml" },
    FifoCase { what: "profile file", file: "profiles/fifo.yaml" },
];

#[test]
fn check_refuses_a_fifo_anywhere_in_the_configuration_and_names_it() {
    for case in FIFO_CASES {
        let dir = tempfile::tempdir().unwrap();
        write_full_config(dir.path(), "");
        let (code, out) = run_check(dir.path());
        assert_eq!(code, Some(0), "{}: the valid configuration fails:\n{out}", case.what);
        mkfifo(&dir.path().join(case.file));
        let (code, out) = run_check(dir.path());
        assert_eq!(code, Some(1), "{}: want exit 1:\n{out}", case.what);
        let line = out
            .lines()
            .find(|l| l.contains("not a regular file (a FIFO)"))
            .unwrap_or_else(|| panic!("{}: no FIFO error:\n{out}", case.what));
        assert!(
            line.contains(case.file),
            "{}: the error does not name the file: {line}",
            case.what
        );
    }
}

#[test]
fn check_reports_profile_entries_that_are_not_files() {
    let dir = tempfile::tempdir().unwrap();
    write_full_config(dir.path(), "");
    let profiles = dir.path().join("profiles");
    std::os::unix::fs::symlink(profiles.join("nowhere"), profiles.join("dangling.yaml")).unwrap();
    std::os::unix::fs::symlink(profiles.join("loop.yaml"), profiles.join("loop.yaml")).unwrap();
    std::os::unix::fs::symlink("/dev/null", profiles.join("device.yaml")).unwrap();
    // Subdirectories are not read, whatever their name.
    std::fs::create_dir(profiles.join("old.yaml")).unwrap();
    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(1), "{out}");
    for (file, message) in [
        ("dangling.yaml", "a dangling symbolic link"),
        ("loop.yaml", "a symbolic link loop"),
        ("device.yaml", "not a regular file (a character device)"),
    ] {
        let want = format!("{}:1:1: cannot read: {message}", profiles.join(file).display());
        assert!(out.lines().any(|l| l == want), "want {want:?} in:\n{out}");
    }
    assert_eq!(out.lines().count(), 3, "{out}");
}

#[test]
fn check_refuses_oversized_files_with_the_limit_to_raise() {
    let dir = tempfile::tempdir().unwrap();
    write_full_config(dir.path(), "limits: { profile_file: 2KiB, zone_file: 1kB }\n");
    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(0), "{out}");
    // A profile file of 3000 bytes: valid YAML padded with a comment.
    let big = format!("{}# {}\n", one_target("big", "192.0.2.7"), "x".repeat(3000));
    std::fs::write(dir.path().join("profiles/big.yaml"), &big).unwrap();
    let zone = format!("{ZONE_FILE}; {}\n", "y".repeat(1000));
    std::fs::write(dir.path().join("zones/extra.zone"), zone).unwrap();
    std::fs::write(dir.path().join("admin.token"), "t".repeat(5000)).unwrap();
    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(1), "{out}");
    let want = [
        ("profiles/big.yaml", format!("too large: {} bytes, more than the 2048 bytes of limits.profile_file", big.len())),
        ("zones/extra.zone", "more than the 1000 bytes of limits.zone_file".to_string()),
        ("admin.token", "too large: 5000 bytes, more than the 4096 bytes of the fixed limit for admin token files".to_string()),
    ];
    for (file, message) in want {
        assert!(
            out.lines().any(|l| l.contains(file) && l.contains(&message)),
            "want {file} .. {message} in:\n{out}"
        );
    }
    // The token from /dev/zero: refused at once, not read until memory runs out.
    std::fs::write(dir.path().join("admin.token"), "s3cret\n").unwrap();
    std::fs::remove_file(dir.path().join("profiles/big.yaml")).unwrap();
    std::fs::write(dir.path().join("zones/extra.zone"), ZONE_FILE).unwrap();
    let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).unwrap();
    let yaml = yaml.replace("token_file: admin.token", "token_file: /dev/zero");
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("/dev/zero: not a regular file (a character device)"),
        "no /dev/zero error:\n{out}"
    );
}

#[test]
fn profiles_total_limit_counts_every_profile_file() {
    let dir = tempfile::tempdir().unwrap();
    write_full_config(dir.path(), "limits:\n  profiles_total: 4KiB\n");
    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(0), "{out}");
    for i in 0..4 {
        let text =
            format!("{}# {}\n", one_target(&format!("pad{i}"), "192.0.2.8"), "z".repeat(1000));
        std::fs::write(dir.path().join(format!("profiles/pad{i}.yaml")), text).unwrap();
    }
    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(1), "{out}");
    let want = format!("{}:1:1: the profile files hold", dir.path().join("profiles/").display());
    assert!(
        out.lines().any(|l| l.starts_with(&want)
            && l.ends_with("more than the 4096 bytes of limits.profiles_total")),
        "want {want:?} in:\n{out}"
    );
}

// ---------------------------------------------------------------------------------------
// Reloads of a running server
// ---------------------------------------------------------------------------------------

async fn answer(h: &Harness, rel: &str) -> String {
    let r = h.udp(&Q::new(&fq(rel), T_A)).await;
    if r.rcode() != NOERROR || r.msg.answers.is_empty() {
        return format!("rcode {}", r.rcode());
    }
    r.answer_strings().join(", ")
}

/// Reloads on a blocking thread; panics when the reload does not end within `PROMPT`.
async fn reload(h: &Harness) -> Result<u64, Vec<String>> {
    let reloader = h.server().reloader();
    match tokio::time::timeout(PROMPT, reloader.reload(Trigger::Request)).await {
        Ok(Ok(generation)) => Ok(generation),
        Ok(Err(ReloadError::Config(e))) => Err(e.0.iter().map(|e| e.to_string()).collect()),
        Ok(Err(e)) => panic!("{e}"),
        Err(_) => panic!("the reload did not finish within {PROMPT:?}"),
    }
}

async fn start_full(extra: &str) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write_full_config(dir.path(), extra);
    Harness::in_dir(dir).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_fails_the_reload_the_old_configuration_serves_and_later_edits_apply() {
    let h = start_full("").await;
    let mut target = 100;
    for case in FIFO_CASES {
        let path = h.dir.path().join(case.file);
        let saved = std::fs::read(&path).ok();
        mkfifo(&path);
        let errors = reload(&h).await.expect_err(case.what);
        assert!(
            errors
                .iter()
                .any(|e| e.contains(case.file) && e.contains("not a regular file (a FIFO)")),
            "{}: {errors:#?}",
            case.what
        );
        assert_eq!(answer(&h, "live").await, format!("A 192.0.2.{target}"), "{}", case.what);
        // Put the file back and edit a profile: the next reload applies both.
        std::fs::remove_file(&path).unwrap();
        if let Some(bytes) = saved {
            std::fs::write(&path, bytes).unwrap();
        }
        target += 1;
        std::fs::write(
            h.profile_path("live.yaml"),
            one_target("live", &format!("192.0.2.{target}")),
        )
        .unwrap();
        reload(&h).await.unwrap_or_else(|e| panic!("{}: reload after the fix: {e:#?}", case.what));
        assert_eq!(answer(&h, "live").await, format!("A 192.0.2.{target}"), "{}", case.what);
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_watcher_survives_a_fifo_in_the_profiles_directory() {
    let h = start_full("").await;
    let failures = || h.server().control().totals.reload_failures.load(Ordering::Relaxed);
    mkfifo(&h.profile_path("fifo.yaml"));
    let start = Instant::now();
    while failures() == 0 {
        assert!(start.elapsed() < PROMPT, "the watcher's reload did not fail within {PROMPT:?}");
        tokio::time::sleep(POLL_EVERY).await;
    }
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");
    std::fs::remove_file(h.profile_path("fifo.yaml")).unwrap();
    std::fs::write(h.profile_path("live.yaml"), one_target("live", "192.0.2.150")).unwrap();
    let start = Instant::now();
    loop {
        let got = answer(&h, "live").await;
        if got == "A 192.0.2.150" {
            break;
        }
        assert!(start.elapsed() < PROMPT, "the edit after the FIFO never applied: {got}");
        tokio::time::sleep(POLL_EVERY).await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_files_fail_the_reload_and_the_old_configuration_serves() {
    let h = start_full("limits: { profile_file: 2KiB }\n").await;
    let big = format!("{}# {}\n", one_target("live", "192.0.2.160"), "x".repeat(3000));
    std::fs::write(h.profile_path("live.yaml"), &big).unwrap();
    let errors = reload(&h).await.expect_err("oversized profile file");
    let path = h.profile_path("live.yaml");
    let want = format!("{}:1:1: cannot read: too large: {} bytes", path.display(), big.len());
    assert!(errors.iter().any(|e| e.starts_with(&want)), "want {want:?} in {errors:#?}");
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");

    std::fs::write(h.profile_path("live.yaml"), one_target("live", "192.0.2.161")).unwrap();
    let yaml_path = h.dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).unwrap();
    std::fs::write(&yaml_path, yaml.replace("token_file: admin.token", "token_file: /dev/zero"))
        .unwrap();
    let errors = reload(&h).await.expect_err("token from /dev/zero");
    assert!(
        errors.iter().any(|e| e.contains("/dev/zero: not a regular file (a character device)")),
        "{errors:#?}"
    );
    assert_eq!(answer(&h, "live").await, "A 192.0.2.100");
    std::fs::write(&yaml_path, yaml).unwrap();
    reload(&h).await.unwrap();
    assert_eq!(answer(&h, "live").await, "A 192.0.2.161");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rewritten_without_pause_delays_other_changes_by_at_most_about_1s() {
    let h = start_full("").await;
    let noise = h.profile_path("noise.yaml");
    std::fs::write(&noise, one_target("noise", "192.0.2.170")).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, noise) = (stop.clone(), noise.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(3) {
                std::fs::write(&noise, one_target("noise", "192.0.2.170")).unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tmp = h.profile_path(".live.yaml.tmp");
    std::fs::write(&tmp, one_target("live", "192.0.2.171")).unwrap();
    std::fs::rename(&tmp, h.profile_path("live.yaml")).unwrap();
    let changed = Instant::now();
    // With no cap the change would wait for the writer to pause: 2.5 s more.
    let bound = Duration::from_secs(2);
    let mut got;
    loop {
        got = answer(&h, "live").await;
        if got == "A 192.0.2.171" || changed.elapsed() > bound {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    let took = changed.elapsed();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    println!("MEASURE debounce cap: applied after {} ms", took.as_millis());
    assert_eq!(got, "A 192.0.2.171", "not applied within {bound:?} while another file churned");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// SIGTERM while loading
// ---------------------------------------------------------------------------------------

/// `n` profiles in one file: enough that loading them takes seconds in a debug build.
fn many_profiles(n: usize, prefix: &str) -> String {
    (0..n)
        .map(|i| {
            format!(
                "name: {prefix}{i}\nrouting: weighted\nendpoints:\n  - {{ name: a, target: 10.{}.{}.1, weight: 3, always_serve: true }}\n  - {{ name: b, target: 10.{}.{}.2, always_serve: true }}\n",
                (i >> 8) & 255,
                i & 255,
                (i >> 8) & 255,
                i & 255
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn free_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    // The TCP side too: the server binds both on the same port.
    match std::net::TcpListener::bind(("127.0.0.1", port)) {
        Ok(_) => port,
        Err(_) => free_port(),
    }
}

/// Spawns `steerdns serve` on `dir` with a free port; stderr goes to `dir/stderr`.
fn spawn_serve(dir: &Path) -> Child {
    let yaml_path = dir.join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).unwrap();
    let yaml = yaml.replace("127.0.0.1:0", &format!("127.0.0.1:{}", free_port()));
    std::fs::write(&yaml_path, yaml).unwrap();
    let stderr = std::fs::File::create(dir.join("stderr")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["serve", "-c"])
        .arg(&yaml_path)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn steerdns serve")
}

fn stderr_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
}

fn sigterm(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

fn wait_for(what: &str, dir: &Path, pred: impl Fn(&str) -> bool) {
    let start = Instant::now();
    while !pred(&stderr_of(dir)) {
        assert!(start.elapsed() < Duration::from_secs(60), "{what}:\n{}", stderr_of(dir));
        std::thread::sleep(POLL_EVERY);
    }
}

const LARGE: usize = 10_000;

#[test]
fn sigterm_stops_serve_within_a_bound_while_the_first_load_runs() {
    let dir = tempfile::tempdir().unwrap();
    write_full_config(dir.path(), "");
    std::fs::write(dir.path().join("profiles/many.yaml"), many_profiles(LARGE, "m")).unwrap();
    let mut child = spawn_serve(dir.path());
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    sigterm(&child);
    let status = wait_exit(&mut child, EXIT_BOUND).unwrap_or_else(|| {
        panic!("no exit within {EXIT_BOUND:?} of SIGTERM:\n{}", stderr_of(dir.path()))
    });
    println!("MEASURE SIGTERM during the first load: exit after {} ms", sent.elapsed().as_millis());
    assert_eq!(status.code(), Some(0), "{}", stderr_of(dir.path()));
    let text = stderr_of(dir.path());
    assert!(!text.contains("\"serving\"") && !text.contains(" serving"), "{text}");
}

#[test]
fn sigterm_stops_serve_within_a_bound_while_a_reload_runs() {
    let dir = tempfile::tempdir().unwrap();
    write_full_config(dir.path(), "");
    let mut child = spawn_serve(dir.path());
    wait_for("serving", dir.path(), |t| t.contains("serving"));
    // A large file appears (renamed in, so the watcher sees it whole), then SIGHUP: both
    // ask for a reload of LARGE profiles, which takes seconds.
    let tmp: PathBuf = dir.path().join("profiles/.many.yaml.tmp");
    std::fs::write(&tmp, many_profiles(LARGE, "r")).unwrap();
    std::fs::rename(&tmp, dir.path().join("profiles/many.yaml")).unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    sigterm(&child);
    let status = wait_exit(&mut child, EXIT_BOUND).unwrap_or_else(|| {
        panic!("no exit within {EXIT_BOUND:?} of SIGTERM:\n{}", stderr_of(dir.path()))
    });
    let took = sent.elapsed();
    let text = stderr_of(dir.path());
    println!(
        "MEASURE SIGTERM during a reload: exit after {} ms (reload finished first: {})",
        took.as_millis(),
        text.contains("configuration reloaded")
    );
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("shutting down"), "{text}");
}
