//! A real caching resolver (Unbound) between a test and a steerdns server, all on loopback:
//! `Resolver::start` writes a configuration into a temporary directory, starts `unbound` in
//! the foreground on a free 127.0.0.x address and waits until it answers; dropping the
//! `Resolver` kills it.
//!
//! Unbound iterates from a local root zone (served from a file, never the network) and
//! reaches the zone under test through a stub zone pointing at the steerdns server. Its
//! subnet cache forwards the client's own ECS option upstream and caches each answer by its
//! scope; queries without ECS use the regular cache. DNSSEC validation is off.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::dns::{Q, T_TXT, udp_exchange};
use super::reply::Reply;

/// Longest wait for a started Unbound to answer its first query.
pub const RESOLVER_READY: Duration = Duration::from_secs(5);

/// Upstream source ports per Unbound. Each Unbound of a test run gets its own range, so
/// resolvers of tests running in parallel do not compete for ports; a small range also keeps
/// start-up fast (Unbound shuffles the whole permitted set when it starts).
const PORTS_PER_RESOLVER: u16 = 64;
/// First upstream source port; below the kernel's usual ephemeral range.
const FIRST_OUTGOING_PORT: u16 = 20000;
/// Ranges between `FIRST_OUTGOING_PORT` and 32767.
const OUTGOING_SLOTS: usize = 190;

const SKIP: &str = "unbound not installed: skipping resolver tests; apt-get install unbound";

/// Resolvers started by this process: picks the listen address and the port range.
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// The configuration. Placeholders: {dir} (the temporary directory), {listen_addr},
/// {listen_port}, {auth_addr}, {auth_port}, {zone} (absolute), {ports} (outgoing range).
const CONF: &str = r#"server:
    # process: no privilege drop, no chroot, every file in {dir}
    username: ""
    chroot: ""
    directory: "{dir}"
    pidfile: "{dir}/unbound.pid"
    use-syslog: no
    logfile: "{dir}/unbound.log"
    log-time-ascii: yes
    verbosity: 1
    log-queries: yes
    log-replies: yes
    log-servfail: yes

    # listen: one loopback address and port, UDP and TCP, IPv4 only
    interface: {listen_addr}@{listen_port}
    port: {listen_port}
    do-ip4: yes
    do-ip6: no
    do-udp: yes
    do-tcp: yes
    access-control: 127.0.0.0/8 allow
    num-threads: 1
    so-reuseport: no

    # upstream: from 127.0.0.1 (the address tests query steerdns from directly), a small
    # port range of its own
    outgoing-interface: 127.0.0.1
    do-not-query-localhost: no
    outgoing-range: 64
    num-queries-per-thread: 32
    outgoing-port-avoid: 0-65535
    outgoing-port-permit: {ports}

    # no DNSSEC validation; plain upstream queries
    module-config: "subnetcache iterator"
    qname-minimisation: no
    use-caps-for-id: no
    prefetch: no
    serve-expired: no
    minimal-responses: yes

    # ECS: forward the client's own option to any upstream and cache answers by scope;
    # without client ECS nothing is added (regular cache)
    client-subnet-always-forward: yes
    max-client-subnet-ipv4: 32
    max-client-subnet-ipv6: 128

    # "test." is a built-in local zone answering NXDOMAIN itself: un-shadow the zone
    local-zone: "{zone}" transparent

stub-zone:
    name: "{zone}"
    stub-addr: {auth_addr}@{auth_port}

# a local root instead of the built-in root hints: names outside the zone under test
# (CNAME targets such as cdn.example.net.) are answered from {dir}/root.zone
auth-zone:
    name: "."
    zonefile: "{dir}/root.zone"
    for-downstream: no
    for-upstream: yes
    fallback-enabled: no

remote-control:
    control-enable: no
"#;

/// The local root: NXDOMAIN for every name it does not list.
pub const ROOT_ZONE: &str = "\
.                3600 IN SOA  root.invalid. hostmaster.invalid. 1 3600 600 86400 60
.                3600 IN NS   root.invalid.
root.invalid.    3600 IN A    127.0.0.1
cdn.example.net.  300 IN A    192.0.2.99
";

/// A running Unbound; killed on drop.
pub struct Resolver {
    /// Where it answers (UDP and TCP).
    pub addr: SocketAddr,
    child: Child,
    dir: tempfile::TempDir,
}

/// The `unbound` binary: on PATH, else in the sbin directories (often missing from a
/// user's PATH).
pub fn unbound_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join("unbound"))
        .find(|p| p.is_file())
}

impl Resolver {
    /// Whether `unbound` is installed; prints why the caller skips when it is not.
    pub fn available() -> bool {
        let found = unbound_binary().is_some();
        if !found {
            eprintln!("{SKIP}");
        }
        found
    }

    /// Starts Unbound in front of the authoritative server `auth` for `zone`. `None` (with a
    /// message) when `unbound` is not installed; panics with Unbound's log when it does not
    /// answer within `RESOLVER_READY`.
    pub fn start(auth: SocketAddr, zone: &str) -> Option<Resolver> {
        let Some(bin) = unbound_binary() else {
            eprintln!("{SKIP}");
            return None;
        };
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = tempfile::tempdir().expect("tempdir");
        let addr = free_loopback(n);
        let slot = (std::process::id() as usize * 7 + n) % OUTGOING_SLOTS;
        let first = FIRST_OUTGOING_PORT + slot as u16 * PORTS_PER_RESOLVER;
        let zone = if zone.ends_with('.') { zone.to_string() } else { format!("{zone}.") };
        let conf = CONF
            .replace("{dir}", &dir.path().display().to_string())
            .replace("{listen_addr}", &addr.ip().to_string())
            .replace("{listen_port}", &addr.port().to_string())
            .replace("{auth_addr}", &auth.ip().to_string())
            .replace("{auth_port}", &auth.port().to_string())
            .replace("{zone}", &zone)
            .replace("{ports}", &format!("{first}-{}", first + PORTS_PER_RESOLVER - 1));
        let conf_path = dir.path().join("unbound.conf");
        std::fs::write(&conf_path, conf).expect("write unbound.conf");
        std::fs::write(dir.path().join("root.zone"), ROOT_ZONE).expect("write root.zone");
        let out = std::fs::File::create(dir.path().join("stdout.txt")).expect("stdout file");
        let err = std::fs::File::create(dir.path().join("stderr.txt")).expect("stderr file");
        let child = Command::new(&bin)
            .args(["-d", "-p", "-c"])
            .arg(&conf_path)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let mut r = Resolver { addr, child, dir };
        r.wait_ready();
        Some(r)
    }

    /// Polls `id.server. CH TXT` until Unbound answers it.
    fn wait_ready(&mut self) {
        let started = Instant::now();
        let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        sock.connect(self.addr).expect("connect");
        sock.set_read_timeout(Some(Duration::from_millis(20))).expect("read timeout");
        let q = Q::new("id.server.", T_TXT).qclass(3);
        let bytes = q.bytes();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("unbound exited ({status}) before answering:\n{}", self.log());
            }
            if started.elapsed() > RESOLVER_READY {
                panic!(
                    "unbound did not answer on {} within {RESOLVER_READY:?}:\n{}",
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
            panic!("no reply from unbound to {} {}:\n{}", q.name, q.qtype, self.log())
        });
        Reply::new(raw)
    }

    /// The end of Unbound's log and whatever it wrote to stderr.
    pub fn log(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        let log = read("unbound.log");
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(80)..].join("\n");
        format!("--- unbound.log (end)\n{tail}\n--- stderr\n{}", read("stderr.txt"))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A 127.0.0.x address (x from 2 to 251, one per resolver of this process) with a port
/// that is free for both UDP and TCP.
fn free_loopback(n: usize) -> SocketAddr {
    let host = 2 + ((std::process::id() as usize + n) % 250) as u8;
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, host));
    for _ in 0..100 {
        let udp = UdpSocket::bind((ip, 0)).expect("bind a loopback UDP port");
        let addr = udp.local_addr().expect("local_addr");
        if TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no port of {ip} is free for both UDP and TCP");
}
