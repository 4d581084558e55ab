//! steerdns replicas as child processes (`steerdns serve`), each on its own 127.0.0.x
//! address with its own admin port and directory, for the cluster tests. Stderr is
//! collected line by line; dropping a `Replica` kills it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::daemon::free_port;
use super::fixtures::{ZONE_FILE, steerdns_yaml};
use super::serve::{Served, serve_collecting_stderr};

/// The lease of the replicas (`cluster.lease`): long enough that a loaded runner renews
/// it in time; `with_lease` shortens it for the tests about its expiry.
pub const REPLICA_LEASE: &str = "10s";

/// Longest wait for a replica to start serving, or for a line in its log.
pub const REPLICA_PATIENCE: Duration = Duration::from_secs(30);

pub struct Replica {
    /// Its DNS address (UDP and TCP).
    pub addr: SocketAddr,
    /// Its admin API.
    pub admin: SocketAddr,
    /// Its `cluster.node`.
    pub node: String,
    pub dir: PathBuf,
    child: Option<Child>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// The thread collecting stderr: done once the process exited and every line is in.
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Polls `check` every 50 ms until it holds; panics naming `what` after `limit`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The address of replica `i` (from 0): 127.0.0.(21 + i).
pub fn replica_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 21 + i as u8)
}

/// The test `steerdns.yaml` (zone `tm.example.test.`, profiles from `profiles/`) for
/// replica `i`, named `node-i`, on its own DNS and admin addresses, with `cluster:` on
/// `etcd_url` under `prefix` and `extra` appended (top-level YAML). `replica_yaml_etcd`
/// takes the profiles from etcd instead.
pub fn replica_yaml(
    i: usize,
    etcd_url: &str,
    prefix: &str,
    extra: &str,
) -> (String, SocketAddr, SocketAddr) {
    let ip = replica_ip(i);
    let dns = free_port(ip);
    let admin = free_port(ip);
    let yaml = steerdns_yaml()
        .replace("127.0.0.1:0", &dns.to_string())
        .replace("listen:\n", &format!("listen:\n  admin: \"{admin}\"\n"));
    let cluster = format!(
        "cluster:\n  node: node-{i}\n  lease: {REPLICA_LEASE}\n  etcd:\n    endpoints: [\"{etcd_url}\"]\n    prefix: {prefix}\n"
    );
    (format!("{yaml}{cluster}{extra}"), dns, admin)
}

/// `replica_yaml` with the profiles taken from etcd (`profiles: etcd`).
pub fn replica_yaml_etcd(
    i: usize,
    etcd_url: &str,
    prefix: &str,
    extra: &str,
) -> (String, SocketAddr, SocketAddr) {
    let (yaml, dns, admin) = replica_yaml(i, etcd_url, prefix, extra);
    assert!(yaml.contains("profiles: profiles/\n"), "{yaml}");
    (yaml.replace("profiles: profiles/\n", "profiles: etcd\n"), dns, admin)
}

/// Writes `yaml` (from `replica_yaml`) and the test zone file into `dir`, as `spawn` does:
/// enough for `steerdns cluster` commands run with `-c dir/steerdns.yaml`.
pub fn write_replica_dir(dir: &Path, yaml: &str) {
    std::fs::create_dir_all(dir.join("zones")).unwrap();
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("zones/extra.zone"), ZONE_FILE).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), yaml).unwrap();
}

/// Runs the steerdns binary with `args` to completion: (exit code, stdout, stderr).
pub async fn run_steerdns<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run steerdns");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

/// `yaml` (from `replica_yaml`) with `keys` (YAML indented by two spaces, such as
/// `"  health: { quorum: all }\n"`) added to its `cluster:` block.
pub fn with_cluster_keys(yaml: &str, keys: &str) -> String {
    let lease = format!("  lease: {REPLICA_LEASE}\n");
    assert!(yaml.contains(&lease), "not a replica_yaml");
    yaml.replacen(&lease, &format!("{lease}{keys}"), 1)
}

/// `yaml` (from `replica_yaml`) with a lease of `lease` instead: short for the tests about
/// a lease expiring, so that they wait less.
pub fn with_lease(yaml: &str, lease: &str) -> String {
    let default = format!("  lease: {REPLICA_LEASE}\n");
    assert!(yaml.contains(&default), "not a replica_yaml");
    yaml.replacen(&default, &format!("  lease: {lease}\n"), 1)
}

/// Held for the whole of a test that runs etcd with three replicas probing every second:
/// a few of them at once starve a 2-core runner, and leases and probes miss their times.
pub async fn one_heavy_test_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    HEAVY.lock().await
}

/// The number in a push's last line, `pushed: profiles revision N (was M)`.
pub fn pushed_revision(out: &str) -> i64 {
    let line = out.lines().last().unwrap_or_default();
    let rest = line.strip_prefix("pushed: profiles revision ");
    let number = rest.and_then(|r| r.split(' ').next());
    number.unwrap_or_else(|| panic!("no revision in:\n{out}")).parse().unwrap()
}

/// The admin token of the named token `alice` that `Replica::with_alice` configures.
pub const ALICE: &str = "alice-t0ken-for-tests";

/// One admin call with alice's token (and a body, for PUT).
pub async fn as_alice(
    admin: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> super::http::Http {
    let auth = format!("Bearer {ALICE}");
    super::http::http_with_body(admin, method, path, &[("Authorization", &auth)], body.as_bytes())
        .await
}

impl Replica {
    /// Starts replica `i` in `dir` with `profiles` as its profile file, the named admin
    /// token `alice` (`ALICE`) and `extra` (top-level YAML).
    pub async fn with_alice(
        dir: &Path,
        i: usize,
        etcd: &str,
        prefix: &str,
        profiles: &str,
        extra: &str,
    ) -> Replica {
        let tokens = "admin:\n  tokens:\n    - { name: alice, file: alice.token }\n";
        let (yaml, dns, admin) = replica_yaml(i, etcd, prefix, &format!("{tokens}{extra}"));
        std::fs::create_dir_all(dir.join("profiles")).unwrap();
        std::fs::write(dir.join("profiles/p.yaml"), profiles).unwrap();
        std::fs::write(dir.join("alice.token"), format!("{ALICE}\n")).unwrap();
        Replica::start(dir, i, &yaml, dns, admin).await
    }

    /// Writes `yaml` (from `replica_yaml`) and the test zone file into `dir` and starts
    /// `steerdns serve` there, without waiting.
    pub fn spawn(dir: &Path, i: usize, yaml: &str, dns: SocketAddr, admin: SocketAddr) -> Replica {
        write_replica_dir(dir, yaml);
        let Served { child, stderr, reader } =
            serve_collecting_stderr(&dir.join("steerdns.yaml"), true, |l| l);
        Replica {
            addr: dns,
            admin,
            node: format!("node-{i}"),
            dir: dir.to_path_buf(),
            child: Some(child),
            stderr,
            reader: Some(reader),
        }
    }

    /// `spawn`, then waits until it logs "serving".
    pub async fn start(
        dir: &Path,
        i: usize,
        yaml: &str,
        dns: SocketAddr,
        admin: SocketAddr,
    ) -> Replica {
        let r = Replica::spawn(dir, i, yaml, dns, admin);
        r.wait_line("serving", |l| l.contains("\"serving\"")).await;
        r
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Waits for a log line matching `pred`; panics with the log after
    /// `REPLICA_PATIENCE` or when the process exits first.
    pub async fn wait_line(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            if let Some(l) = self.stderr.lock().unwrap().iter().find(|l| pred(l)) {
                return l.clone();
            }
            assert!(
                started.elapsed() < REPLICA_PATIENCE,
                "{}: no log line {what} within {REPLICA_PATIENCE:?}:\n{}",
                self.node,
                self.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the process to exit by itself and returns its exit code.
    pub async fn wait_exit(&mut self) -> Option<i32> {
        let started = Instant::now();
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                // The pipe is closed: the reader ends once it has taken the last lines.
                if let Some(reader) = self.reader.take() {
                    let _ = reader.join();
                }
                return status.code();
            }
            assert!(started.elapsed() < REPLICA_PATIENCE, "{} did not exit", self.node);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: nothing is cleaned up (its lease expires by itself).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and returns at once (`wait_exit` waits).
    pub fn sigterm(&self) {
        let c = self.child.as_ref().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}
