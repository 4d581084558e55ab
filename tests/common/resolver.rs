//! A real caching resolver (Unbound) between a test and a steerdns server, all on loopback:
//! `Resolver::start` writes a configuration into a temporary directory and starts
//! `unbound` in the foreground as a `Daemon` (it waits until Unbound answers; dropping the
//! `Resolver` kills it).
//!
//! Unbound iterates from a local root zone (served from a file, never the network) and
//! reaches the zone under test through a stub zone pointing at the steerdns server. Its
//! subnet cache forwards the client's own ECS option upstream and caches each answer by its
//! scope; queries without ECS use the regular cache. DNSSEC validation is off.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;

use super::daemon::{Daemon, fill_conf, next_daemon_addr};
use super::dns::Q;
use super::reply::Reply;
use super::tools::require_tool;

/// Upstream source ports per Unbound. Each Unbound of a test run gets its own range, so
/// resolvers of tests running in parallel do not compete for ports; a small range also keeps
/// start-up fast (Unbound shuffles the whole permitted set when it starts).
const PORTS_PER_RESOLVER: u16 = 64;
/// First upstream source port; below the kernel's usual ephemeral range.
const FIRST_OUTGOING_PORT: u16 = 20000;
/// Ranges between `FIRST_OUTGOING_PORT` and 32767.
const OUTGOING_SLOTS: usize = 190;

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
    daemon: Daemon,
}

impl Resolver {
    /// Whether `unbound` is installed; prints why the caller skips when it is not.
    pub fn available() -> bool {
        require_tool("unbound", "unbound").is_some()
    }

    /// Starts Unbound in front of the authoritative server `auth` for `zone`. `None` (with a
    /// message) when `unbound` is not installed; panics with Unbound's log when it does not
    /// answer within `DAEMON_READY`.
    pub fn start(auth: SocketAddr, zone: &str) -> Option<Resolver> {
        let bin = require_tool("unbound", "unbound")?;
        let (addr, n) = next_daemon_addr();
        let dir = tempfile::tempdir().expect("tempdir");
        let slot = (std::process::id() as usize * 7 + n) % OUTGOING_SLOTS;
        let first = FIRST_OUTGOING_PORT + slot as u16 * PORTS_PER_RESOLVER;
        let conf = fill_conf(CONF, dir.path(), addr, auth, zone)
            .replace("{ports}", &format!("{first}-{}", first + PORTS_PER_RESOLVER - 1));
        let conf_path = dir.path().join("unbound.conf");
        std::fs::write(&conf_path, conf).expect("write unbound.conf");
        std::fs::write(dir.path().join("root.zone"), ROOT_ZONE).expect("write root.zone");
        let args = [OsStr::new("-d"), OsStr::new("-p"), OsStr::new("-c"), conf_path.as_os_str()];
        let daemon = Daemon::spawn("unbound", &bin, &args, dir, addr, &["unbound.log"]);
        Some(Resolver { addr, daemon })
    }

    /// Sends `q` with RD set over UDP (retrying on loss) and decodes the reply.
    pub async fn query(&self, q: &Q) -> Reply {
        self.daemon.query(q).await
    }

    /// The end of Unbound's log and whatever it wrote to stderr.
    pub fn log(&self) -> String {
        self.daemon.log()
    }

    pub fn dir(&self) -> &Path {
        self.daemon.dir()
    }
}
