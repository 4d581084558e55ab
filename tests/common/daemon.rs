//! A DNS daemon a test runs next to steerdns (Unbound, BIND's `named`): its binary is found
//! on PATH or in the sbin directories, it runs in the foreground in a temporary directory on
//! a free 127.0.0.x address, `Daemon::spawn` waits until it answers, and dropping the
//! `Daemon` kills it. What each daemon's configuration says lives in its own module.

use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::dns::{Q, T_TXT, udp_exchange};
use super::reply::Reply;

/// Longest wait for a started daemon to answer its first query.
pub const DAEMON_READY: Duration = Duration::from_secs(5);

/// Daemons started by this process: picks each one's listen address.
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// A running daemon; killed on drop.
pub struct Daemon {
    /// Where it answers (UDP and TCP).
    pub addr: SocketAddr,
    /// The binary's name, for messages.
    name: &'static str,
    /// Log files it writes in its directory (besides stdout.txt and stderr.txt).
    logs: &'static [&'static str],
    child: Child,
    dir: tempfile::TempDir,
}

/// A daemon's configuration from `template`: its directory, where it listens, the
/// authoritative server it asks and the zone (made absolute) filled in.
pub fn fill_conf(
    template: &str,
    dir: &Path,
    listen: SocketAddr,
    auth: SocketAddr,
    zone: &str,
) -> String {
    let zone = if zone.ends_with('.') { zone.to_string() } else { format!("{zone}.") };
    template
        .replace("{dir}", &dir.display().to_string())
        .replace("{listen_addr}", &listen.ip().to_string())
        .replace("{listen_port}", &listen.port().to_string())
        .replace("{auth_addr}", &auth.ip().to_string())
        .replace("{auth_port}", &auth.port().to_string())
        .replace("{zone}", &zone)
}

/// An address of its own for the next daemon of this process, and its number (from 0):
/// 127.0.0.x, x from 2 to 251, for daemons that can listen on any loopback address.
pub fn next_daemon_addr() -> (SocketAddr, usize) {
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    let host = 2 + ((std::process::id() as usize + n) % 250) as u8;
    (free_port(Ipv4Addr::new(127, 0, 0, host)), n)
}

impl Daemon {
    /// Runs `bin` with `args` in `dir` (stdout and stderr go to files there) and waits until
    /// it answers on `addr`; panics with its logs when it exits first or does not answer
    /// within `DAEMON_READY`.
    pub fn spawn<A: AsRef<OsStr>>(
        name: &'static str,
        bin: &Path,
        args: &[A],
        dir: tempfile::TempDir,
        addr: SocketAddr,
        logs: &'static [&'static str],
    ) -> Daemon {
        let out = std::fs::File::create(dir.path().join("stdout.txt")).expect("stdout file");
        let err = std::fs::File::create(dir.path().join("stderr.txt")).expect("stderr file");
        let child = Command::new(bin)
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let mut d = Daemon { addr, name, logs, child, dir };
        d.wait_ready();
        d
    }

    /// Polls `id.server. CH TXT` until the daemon answers it (any reply will do).
    fn wait_ready(&mut self) {
        let started = Instant::now();
        let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        sock.connect(self.addr).expect("connect");
        sock.set_read_timeout(Some(Duration::from_millis(20))).expect("read timeout");
        let q = Q::new("id.server.", T_TXT).qclass(3);
        let bytes = q.bytes();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("{} exited ({status}) before answering:\n{}", self.name, self.log());
            }
            if started.elapsed() > DAEMON_READY {
                panic!(
                    "{} did not answer on {} within {DAEMON_READY:?}:\n{}",
                    self.name,
                    self.addr,
                    self.log()
                );
            }
            // Errors (refused: not listening yet) and timeouts mean "try again".
            let _ = sock.send(&bytes);
            let mut buf = [0u8; 512];
            match sock.recv(&mut buf) {
                Ok(n) if n >= 2 && buf[..2] == bytes[..2] => return,
                Ok(_) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Sends `q` with RD set over UDP (retrying on loss) and decodes the reply.
    pub async fn query(&self, q: &Q) -> Reply {
        let q = q.clone().rd();
        let sock = tokio::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.expect("bind");
        sock.connect(self.addr).await.expect("connect");
        let raw = udp_exchange(&sock, &q.bytes()).await.unwrap_or_else(|| {
            panic!("no reply from {} to {} {}:\n{}", self.name, q.name, q.qtype, self.log())
        });
        Reply::new(raw)
    }

    /// The end of each log file and whatever the daemon wrote to stdout and stderr.
    pub fn log(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        let mut out = String::new();
        for file in self.logs.iter().chain(&["stdout.txt", "stderr.txt"]) {
            let text = read(file);
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(80)..].join("\n");
            out.push_str(&format!("--- {file} (end)\n{tail}\n"));
        }
        out
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ip` with a port that is free for both UDP and TCP.
pub fn free_port(ip: Ipv4Addr) -> SocketAddr {
    for _ in 0..100 {
        let udp = UdpSocket::bind((ip, 0)).expect("bind a loopback UDP port");
        let addr = udp.local_addr().expect("local_addr");
        if TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no port of {ip} is free for both UDP and TCP");
}
