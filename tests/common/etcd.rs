//! A real etcd for the cluster tests: a single member on free loopback ports with a
//! temporary data directory, started from Debian's `etcd-server` binary. `Etcd::start`
//! returns `None` (after printing why) when etcd is not installed; `stop` and `start_again`
//! take it down and bring it back on the same ports and data.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::daemon::{find_binary, free_port};

/// Longest wait for etcd to report itself healthy.
const ETCD_READY: Duration = Duration::from_secs(20);

pub struct Etcd {
    /// `http://127.0.0.1:PORT`, for `cluster.etcd.endpoints`.
    pub url: String,
    pub client: SocketAddr,
    peer: SocketAddr,
    bin: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// A running etcd, or `None` when the `etcd` binary is missing (the caller skips).
    /// With `STEERDNS_REQUIRE_ETCD=1` (CI sets it) a missing etcd fails the test instead,
    /// so that the cluster tests cannot be skipped there unnoticed.
    pub fn start() -> Option<Etcd> {
        Etcd::start_with(&[])
    }

    /// As `start`, with more command-line flags (`--max-request-bytes=…`).
    pub fn start_with(extra: &[&str]) -> Option<Etcd> {
        let Some(bin) = find_binary("etcd") else {
            let required = std::env::var_os("STEERDNS_REQUIRE_ETCD").is_some_and(|v| v == "1");
            assert!(
                !required,
                "etcd is not installed (Debian package etcd-server) and STEERDNS_REQUIRE_ETCD=1"
            );
            eprintln!("skipping: etcd is not installed (Debian package etcd-server)");
            return None;
        };
        let client = free_port(Ipv4Addr::LOCALHOST);
        let peer = free_port(Ipv4Addr::LOCALHOST);
        let mut etcd = Etcd {
            url: format!("http://{client}"),
            client,
            peer,
            bin,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        etcd.start_again();
        Some(etcd)
    }

    /// Starts the stopped etcd again, on the same ports and data directory.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "etcd is running");
        let (client, peer) = (format!("http://{}", self.client), format!("http://{}", self.peer));
        let log = |name: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.path().join(name))
                .expect("etcd log file")
        };
        let child = Command::new(&self.bin)
            .args(["--name", "test", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(["--log-level", "warn", "--logger", "zap"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log("stdout.txt"))
            .stderr(log("stderr.txt"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        self.child = Some(child);
        self.wait_healthy();
    }

    /// Stops etcd (SIGKILL: nothing is flushed that a real crash would keep).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes etcd (SIGSTOP): connections stay open and nothing answers, as behind a
    /// network partition. `resume` thaws it.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        let child = self.child.as_ref().expect("etcd is running");
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "cannot signal etcd");
    }

    fn wait_healthy(&mut self) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().expect("try_wait"))
            {
                panic!("etcd exited ({status}) before it was healthy:\n{}", self.log());
            }
            if self.healthy() {
                return;
            }
            if started.elapsed() > ETCD_READY {
                panic!("etcd was not healthy within {ETCD_READY:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET /health` says `"health":"true"`.
    fn healthy(&self) -> bool {
        let Ok(mut s) = TcpStream::connect_timeout(&self.client, Duration::from_millis(200)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let req = format!("GET /health HTTP/1.0\r\nHost: {}\r\n\r\n", self.client);
        let mut reply = String::new();
        s.write_all(req.as_bytes()).is_ok()
            && s.read_to_string(&mut reply).is_ok()
            && reply.contains("\"health\":\"true\"")
    }

    /// The end of etcd's output, for failure messages.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("stderr.txt")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}
