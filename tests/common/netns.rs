//! Network namespaces for the tests of the AF_XDP fast path: two namespaces joined by a
//! veth pair (made with `ip`, removed on drop), and switching the calling thread into one
//! of them while it creates sockets. A socket stays in the namespace it was made in, and so
//! does a thread started from a switched thread, whatever the creating thread does next.
//! Needs root; without it `VethPair::new` says so and gives `None`, unless
//! `STEERDNS_REQUIRE_TOOLS=1` (CI runs as root).

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use super::tools::tools_required;

/// The server side's addresses, in the benchmarking range (RFC 2544) and the documentation
/// range, so nothing outside the namespaces is ever addressed.
pub const SERVER_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const SERVER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 1);
/// How many client addresses of each family the client side has (`client_v4(1..=N)`).
pub const CLIENT_ADDRESSES: u8 = 5;

/// The client side's `n`th IPv4 address (1-based), in the server's /24.
pub fn client_v4(n: u8) -> Ipv4Addr {
    assert!((1..=CLIENT_ADDRESSES).contains(&n), "client address {n}");
    Ipv4Addr::new(198, 18, 0, 10 + n)
}

/// The client side's `n`th IPv6 address (1-based), in the server's /64.
pub fn client_v6(n: u8) -> Ipv6Addr {
    assert!((1..=CLIENT_ADDRESSES).contains(&n), "client address {n}");
    Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 0x10 + u16::from(n))
}

pub fn run(args: &[&str]) -> Output {
    Command::new(args[0]).args(&args[1..]).output().expect("run a command")
}

/// Runs a command and returns its output; panics when it fails.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces joined by a veth pair, the server's addresses on one end and
/// `CLIENT_ADDRESSES` client addresses of each family on the other; removed on drop.
pub struct VethPair {
    pub server_ns: String,
    pub client_ns: String,
    /// The server side's interface, in `server_ns`.
    pub server_if: String,
    /// The client side's interface, in `client_ns`.
    pub client_if: String,
}

/// Makes every pair of this process unique, next to the process id.
static PAIRS: AtomicU32 = AtomicU32::new(0);

impl VethPair {
    /// A new pair with `queues` receive and send queues on each end; `None` (after saying
    /// why) where namespaces cannot be made.
    pub fn new(queues: u32) -> Option<VethPair> {
        let id =
            format!("{}n{}", std::process::id() % 100_000, PAIRS.fetch_add(1, Ordering::Relaxed));
        let pair = VethPair {
            server_ns: format!("sdvs{id}"),
            client_ns: format!("sdvc{id}"),
            // Interface names have at most 15 bytes: "vs" + 5 + "n" + a few digits.
            server_if: format!("vs{id}"),
            client_if: format!("vc{id}"),
        };
        if !run(&["ip", "netns", "add", &pair.server_ns]).status.success() {
            assert!(!tools_required(), "cannot create a network namespace: CI runs as root");
            eprintln!("skipping: creating network namespaces needs root");
            return None;
        }
        // From here on, drop removes whatever was made, also when a step panics.
        ok(&["ip", "netns", "add", &pair.client_ns]);
        let queues = queues.to_string();
        ok(&[
            "ip",
            "link",
            "add",
            &pair.server_if,
            "numtxqueues",
            &queues,
            "numrxqueues",
            &queues,
            "netns",
            &pair.server_ns,
            "type",
            "veth",
            "peer",
            "name",
            &pair.client_if,
            "numtxqueues",
            &queues,
            "numrxqueues",
            &queues,
            "netns",
            &pair.client_ns,
        ]);
        let ip = |ns: &str, args: &[&str]| {
            let mut all = vec!["ip", "-n", ns];
            all.extend_from_slice(args);
            ok(&all);
        };
        let (s, c) = (pair.server_ns.as_str(), pair.client_ns.as_str());
        ip(s, &["addr", "add", &format!("{SERVER_V4}/24"), "dev", &pair.server_if]);
        ip(s, &["addr", "add", &format!("{SERVER_V6}/64"), "dev", &pair.server_if, "nodad"]);
        for n in 1..=CLIENT_ADDRESSES {
            ip(c, &["addr", "add", &format!("{}/24", client_v4(n)), "dev", &pair.client_if]);
            let v6 = format!("{}/64", client_v6(n));
            ip(c, &["addr", "add", &v6, "dev", &pair.client_if, "nodad"]);
        }
        for (ns, ifname) in [(s, &pair.server_if), (c, &pair.client_if)] {
            ip(ns, &["link", "set", ifname, "up"]);
            ip(ns, &["link", "set", "lo", "up"]);
        }
        Some(pair)
    }

    /// Switches the calling thread into the server's namespace until the guard drops.
    pub fn enter_server(&self) -> InNetns {
        InNetns::enter(&self.server_ns).expect("enter the server's namespace")
    }

    /// Switches the calling thread into the client's namespace until the guard drops.
    pub fn enter_client(&self) -> InNetns {
        InNetns::enter(&self.client_ns).expect("enter the client's namespace")
    }

    /// Runs `args` in the server's namespace (`ip netns exec`), panicking when it fails.
    pub fn in_server(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "netns", "exec", self.server_ns.as_str()];
        all.extend_from_slice(args);
        ok(&all)
    }

    /// Runs `args` in the client's namespace (`ip netns exec`).
    pub fn in_client(&self, args: &[&str]) -> Output {
        let mut all = vec!["ip", "netns", "exec", self.client_ns.as_str()];
        all.extend_from_slice(args);
        run(&all)
    }

    /// The kernel's UDP counter `name` (`/proc/net/snmp`) in the server's namespace.
    pub fn udp_counter(&self, name: &str) -> u64 {
        let snmp = self.in_server(&["cat", "/proc/net/snmp"]);
        let mut lines = snmp.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
        let i = names.split_whitespace().position(|n| n == name).unwrap();
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    }

    /// The Ethernet address of `ifname` in namespace `ns`.
    pub fn mac(&self, ns: &str, ifname: &str) -> [u8; 6] {
        let out =
            ok(&["ip", "netns", "exec", ns, "cat", &format!("/sys/class/net/{ifname}/address")]);
        let mut mac = [0u8; 6];
        for (m, h) in mac.iter_mut().zip(out.trim().split(':')) {
            *m = u8::from_str_radix(h, 16).unwrap();
        }
        mac
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it, and with it the peer.
        let _ = run(&["ip", "netns", "del", &self.server_ns]);
        let _ = run(&["ip", "netns", "del", &self.client_ns]);
    }
}

/// The calling thread switched into another network namespace; back where it was on drop
/// (also when a test panics meanwhile). The switch is the thread's own: other threads,
/// tokio's workers among them, stay where they are.
pub struct InNetns {
    home: File,
}

impl InNetns {
    fn enter(ns: &str) -> io::Result<InNetns> {
        let home = File::open("/proc/thread-self/ns/net")?;
        let target = File::open(format!("/var/run/netns/{ns}"))?;
        setns(&target)?;
        Ok(InNetns { home })
    }
}

impl Drop for InNetns {
    fn drop(&mut self) {
        // A thread left in a test's namespace would make its later sockets there: fatal,
        // but not a second panic while the test's own unwinds.
        if let Err(e) = setns(&self.home) {
            assert!(std::thread::panicking(), "cannot return to the thread's namespace: {e}");
        }
    }
}

fn setns(ns: &File) -> io::Result<()> {
    // SAFETY: a valid namespace file descriptor; CLONE_NEWNET switches only this thread.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}
