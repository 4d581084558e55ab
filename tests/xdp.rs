//! The AF_XDP fast path on a real veth pair between two network namespaces made here:
//! steerdns serves in one, kdig asks from the other, and the kernel's UDP counters show
//! which path answered. Frames no socket would send come from Python's packet sockets. The
//! wire conformance cases of UDP (tests/common/wire_cases.rs) run here again, through the
//! fast path, on an in-process server. Needs root (namespaces, XDP); without it the tests
//! say so and pass, unless STEERDNS_REQUIRE_TOOLS=1.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::ops::Deref;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::frames::UdpFrame;
use common::netns::{SERVER_V4, SERVER_V6, VethPair, client_v4, run};
use common::{Via, require_tool, tools_required};

const SERVER: &str = "198.18.0.1";
const SERVER6: &str = "2001:db8:5::1";

/// Two namespaces joined by a veth pair with two queues each way, for a steerdns process
/// started in one of them.
struct Bed {
    pair: VethPair,
}

impl Deref for Bed {
    type Target = VethPair;
    fn deref(&self) -> &VethPair {
        &self.pair
    }
}

impl Bed {
    /// `None` (after saying why) where namespaces cannot be made.
    fn new() -> Option<Bed> {
        assert_eq!((SERVER.parse(), SERVER6.parse()), (Ok(SERVER_V4), Ok(SERVER_V6)));
        Some(Bed { pair: VethPair::new(2)? })
    }

    /// Whether an XDP program is attached to the server's interface.
    fn has_program(&self) -> bool {
        self.in_server(&["ip", "link", "show", "dev", &self.server_if]).contains("prog/xdp")
    }

    /// Starts steerdns in the server namespace with `listen.xdp` on its interface.
    fn serve(&self, dir: &Path) -> Child {
        let child = self.spawn(dir, 53, 8053);
        let deadline = Instant::now() + Duration::from_secs(30);
        // The program is attached before the sockets are in its map, and until then it
        // passes queries to the kernel: only the log line written once every queue has its
        // socket says that the fast path answers them all.
        let log = dir.join("log");
        let ready = || {
            std::fs::read_to_string(&log)
                .is_ok_and(|l| l.contains("answering UDP in AF_XDP sockets"))
        };
        while !self.has_program() || !ready() || !self.answers() {
            assert!(Instant::now() < deadline, "steerdns did not start answering through XDP");
            std::thread::sleep(Duration::from_millis(100));
        }
        child
    }

    /// Starts steerdns with sockets on `port` and the admin API on `admin`, its log in
    /// `dir/log`, without waiting.
    fn spawn(&self, dir: &Path, port: u16, admin: u16) -> Child {
        self.spawn_through(dir, port, admin, &[])
    }

    /// `spawn`, with steerdns started by the command `through` (which ends by running its
    /// arguments).
    fn spawn_through(&self, dir: &Path, port: u16, admin: u16, through: &[&str]) -> Child {
        let config = format!(
            r#"listen:
  dns: ["{SERVER}:{port}", "[{SERVER6}]:{port}"]
  admin: "127.0.0.1:{admin}"
  xdp: {{ interface: {}, addresses: [{SERVER}, "{SERVER6}"] }}
zones:
  - origin: xdp.test.
    ns: [ns1.xdp.test.]
    soa: {{ rname: hostmaster.xdp.test. }}
    records:
      - "ns1 A {SERVER}"
      - "www A 192.0.2.10"
      - "www AAAA 2001:db8::10"
{big}"#,
            self.server_if,
            big = (0..8)
                .map(|i| format!("      - 'big TXT \"{}\"'\n", format!("{i}").repeat(200)))
                .collect::<String>()
        );
        std::fs::create_dir_all(dir.join("profiles")).unwrap();
        std::fs::write(dir.join("steerdns.yaml"), config).unwrap();
        Command::new("ip")
            .args(["netns", "exec", &self.server_ns])
            .args(through)
            .args([env!("CARGO_BIN_EXE_steerdns"), "serve"])
            .arg("-c")
            .arg(dir.join("steerdns.yaml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .expect("start steerdns")
    }

    fn answers(&self) -> bool {
        let out = self.in_client(&[
            "kdig",
            "+short",
            "+timeout=1",
            "+retry=0",
            &format!("@{SERVER}"),
            "www.xdp.test",
            "A",
        ]);
        String::from_utf8_lossy(&out.stdout).trim() == "192.0.2.10"
    }

    /// kdig's answer section for `name`/`qtype` asked of `server` with `flags`.
    fn kdig(&self, server: &str, flags: &[&str], name: &str, qtype: &str) -> String {
        let at = format!("@{server}");
        let mut args = vec!["kdig", "+timeout=2", "+retry=0", at.as_str(), name, qtype];
        args.extend_from_slice(flags);
        let out = self.in_client(&args);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends `frame` (from Ethernet on) out of the client's interface, through a packet
    /// socket: frames no socket API would send.
    fn inject(&self, frame: &[u8]) {
        let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
        let peer = &self.client_if;
        let script = format!(
            "import socket; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); \
             s.bind(('{peer}', 0)); s.send(bytes.fromhex('{hex}'))"
        );
        let out = self.in_client(&["python3", "-c", &script]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// The server's metrics page.
    fn metrics(&self) -> String {
        self.in_server(&["curl", "-sf", "http://127.0.0.1:8053/metrics"])
    }

    /// The value of the label-less series `name`.
    fn metric(&self, name: &str) -> u64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    /// The sum of every series of the counter `name`.
    fn metric_sum(&self, name: &str) -> u64 {
        self.metrics()
            .lines()
            .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with(['{', ' '])))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// A counter of the server's interface, from sysfs.
    fn interface_counter(&self, name: &str) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/{name}", self.server_if);
        self.in_server(&["cat", &path]).trim().parse().unwrap()
    }
}

fn stop(child: &mut Child, signal: i32) {
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(child.id() as i32, signal) };
    child.wait().unwrap();
}

/// A well-formed frame from port 40000 of the client's first address to the server's port
/// 53, between the two ends' Ethernet addresses, carrying `dns`.
fn query_frame(bed: &Bed, dns: &[u8]) -> UdpFrame {
    UdpFrame {
        dst_mac: bed.mac(&bed.server_ns, &bed.server_if),
        src_mac: bed.mac(&bed.client_ns, &bed.client_if),
        ..UdpFrame::new(
            SocketAddr::from((client_v4(1), 40000)),
            SocketAddr::from((SERVER_V4, 53)),
            dns,
        )
    }
}

/// A query for `name`'s A record, without EDNS, byte by byte.
fn a_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

#[test]
fn xdp_answers_passes_the_rest_and_leaves_nothing_attached() {
    let Some(_) = require_tool("kdig", "knot-dnsutils") else { return };
    let Some(bed) = Bed::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = bed.serve(dir.path());

    // Queries on both families are answered without the kernel's UDP stack seeing them.
    let before = bed.udp_counter("InDatagrams");
    let v4 = bed.kdig(SERVER, &["+norec"], "www.xdp.test", "A");
    assert!(v4.contains("status: NOERROR") && v4.contains("192.0.2.10"), "{v4}");
    assert!(v4.contains("Flags: qr aa;"), "authoritative, no recursion: {v4}");
    let v6 = bed.kdig(SERVER6, &[], "www.xdp.test", "AAAA");
    assert!(v6.contains("2001:db8::10"), "{v6}");
    let nx = bed.kdig(SERVER, &[], "nope.xdp.test", "A");
    assert!(nx.contains("status: NXDOMAIN") && nx.contains("hostmaster.xdp.test."), "{nx}");
    let refused = bed.kdig(SERVER, &[], "example.com", "A");
    assert!(refused.contains("status: REFUSED"), "{refused}");
    let edns = bed.kdig(SERVER, &["+bufsize=4096", "+nsid"], "www.xdp.test", "A");
    assert!(edns.contains("Version: 0;") && edns.contains("UDP size: 1232 B"), "{edns}");
    let ecs = bed.kdig(SERVER, &["+subnet=192.0.2.0/24"], "www.xdp.test", "A");
    assert!(ecs.contains("CLIENT-SUBNET: 192.0.2.0/24/0"), "{ecs}");
    let cookie = bed.kdig(SERVER, &["+cookie=0123456789abcdef"], "www.xdp.test", "A");
    let server_cookie = cookie
        .lines()
        .find_map(|l| l.trim().strip_prefix(";; COOKIE: 0123456789ABCDEF"))
        .unwrap_or_else(|| panic!("no cookie echoed: {cookie}"));
    // A server cookie of RFC 9018's form: version 1, then reserved bytes, time and hash.
    assert!(server_cookie.trim().len() == 32 && server_cookie.starts_with("01"), "{cookie}");
    // Over the 512 bytes a query without EDNS allows: truncated, for TCP to fetch.
    let big = bed.kdig(SERVER, &["+noedns", "+ignore", "+norec"], "big.xdp.test", "TXT");
    assert!(big.contains("Flags: qr aa tc;"), "{big}");
    assert_eq!(bed.udp_counter("InDatagrams"), before, "answered by the UDP sockets");

    // TCP, ICMP and UDP to another port reach the kernel.
    let tcp = bed.kdig(SERVER, &["+tcp"], "www.xdp.test", "A");
    assert!(tcp.contains("192.0.2.10") && tcp.contains("(TCP)"), "{tcp}");
    // ARP too: the client learnt the server's Ethernet address from the server's kernel.
    let neigh = bed.in_client(&["ip", "neigh", "show", SERVER]);
    assert!(String::from_utf8_lossy(&neigh.stdout).contains("lladdr"), "no ARP answer");
    let no_ports = bed.udp_counter("NoPorts");
    let other = bed.in_client(&[
        "kdig",
        "+timeout=1",
        "+retry=0",
        "-p",
        "5300",
        &format!("@{SERVER}"),
        "www.xdp.test",
    ]);
    assert!(!String::from_utf8_lossy(&other.stdout).contains("192.0.2.10"));
    assert_eq!(bed.udp_counter("NoPorts"), no_ports + 1, "port 5300 went to the kernel");

    // Frames the program takes but that hold no whole datagram are dropped and counted.
    assert_eq!(bed.metric("steerdns_xdp_malformed_frames_total"), 0);
    // A DNS header alone, then a bad header checksum, and an IP length past the frame.
    let header = &a_query("www.xdp.test")[..12];
    bed.inject(&UdpFrame { good_checksum: false, ..query_frame(&bed, header) }.bytes());
    bed.inject(&UdpFrame { ipv4_total_len: Some(200), ..query_frame(&bed, header) }.bytes());
    let deadline = Instant::now() + Duration::from_secs(5);
    while bed.metric("steerdns_xdp_malformed_frames_total") < 2 {
        assert!(Instant::now() < deadline, "malformed frames not counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(bed.answers(), "still answering after malformed frames");

    // Stopping detaches the program.
    stop(&mut server, libc::SIGTERM);
    assert!(!bed.has_program(), "an XDP program stayed attached after shutdown");
}

#[test]
fn a_killed_server_leaves_no_program_attached() {
    let Some(_) = require_tool("kdig", "knot-dnsutils") else { return };
    let Some(bed) = Bed::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = bed.serve(dir.path());
    stop(&mut server, libc::SIGKILL);
    // `ip netns exec` passes the signal on; the link closes with the process's files.
    let deadline = Instant::now() + Duration::from_secs(5);
    while bed.has_program() {
        assert!(Instant::now() < deadline, "an XDP program stayed attached after SIGKILL");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `listen.xdp` with `xdp` as its flow mapping: the errors of loading it, located.
fn xdp_errors(xdp: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
    let config = format!(
        "listen:\n  dns: [\"127.0.0.1:0\"]\n  xdp: {xdp}\nzones:\n  - origin: xdp.test.\n    \
         ns: [ns1.xdp.test.]\n    soa: {{ rname: hostmaster.xdp.test. }}\n    records: [\"ns1 A 192.0.2.1\"]\n"
    );
    let path = dir.path().join("steerdns.yaml");
    std::fs::write(&path, config).unwrap();
    match steerdns::config::load(&path, None) {
        Ok(loaded) => {
            assert!(loaded.snapshot.listen.xdp.is_some());
            vec![]
        }
        Err(e) => common::located(&e),
    }
}

/// Each error as (the text it points at, its message): the column is where that text
/// starts in the `listen.xdp` line, which starts with `  xdp: `.
type Expected<'a> = &'a [(&'a str, &'a str)];

#[test]
fn listen_xdp_mistakes_are_located() {
    let cases: &[(&str, Expected)] = &[
        ("{ interface: eth0, addresses: [192.0.2.1] }", &[]),
        (
            "{ interface: eth0, addresses: [192.0.2.1, \"2001:db8::1\"], queues: [0, 3], port: 5353 }",
            &[],
        ),
        (
            "{ interface: \"\", addresses: [192.0.2.1] }",
            &[("\"\"", "listen.xdp.interface \"\" is not an interface name")],
        ),
        (
            "{ interface: a-very-long-interface, addresses: [192.0.2.1] }",
            &[(
                "a-very",
                "listen.xdp.interface \"a-very-long-interface\" is not an interface name",
            )],
        ),
        (
            "{ interface: eth0, addresses: [] }",
            &[("[]", "listen.xdp.addresses needs at least one IP address")],
        ),
        (
            "{ interface: eth0, addresses: [192.0.2.1, nowhere, 0.0.0.0, 192.0.2.1 ] }",
            &[
                ("nowhere", "listen.xdp.addresses: \"nowhere\" is not an IP address"),
                ("0.0.0.0", "listen.xdp.addresses: 0.0.0.0 is not an address queries are sent to"),
                ("192.0.2.1 ]", "listen.xdp.addresses lists 192.0.2.1 twice"),
            ],
        ),
        (
            "{ interface: eth0, addresses: [192.0.2.1], queues: [0, 0 , 1024], port: 0 }",
            &[
                ("0 ,", "listen.xdp.queues lists queue 0 twice"),
                ("1024", "listen.xdp.queues must be between 0 and 1023, got 1024"),
                ("0 }", "listen.xdp.port must be between 1 and 65535, got 0"),
            ],
        ),
        (
            "{ interface: eth0, addresses: [192.0.2.1], queues: [] }",
            &[("[] }", "listen.xdp.queues needs at least one queue (leave it out for all)")],
        ),
    ];
    for (xdp, want) in cases {
        let want: Vec<String> = want
            .iter()
            .map(|(at, message)| {
                let col = "  xdp: ".len() + xdp.find(at).unwrap() + 1;
                format!("steerdns.yaml:3:{col}: {message}")
            })
            .collect();
        assert_eq!(xdp_errors(xdp), want, "{xdp}");
    }
}

/// Asks through the fast path with dnspython (Debian's python3-dnspython), an independent
/// client: an ECS query on both families, and a query with two questions (FORMERR).
const DNSPYTHON: &str = r#"
import socket, sys
import dns.edns, dns.message, dns.query, dns.rcode
for server in sys.argv[1:]:
    q = dns.message.make_query("www.xdp.test", "A", use_edns=0,
                               options=[dns.edns.ECSOption("192.0.2.0", 24)])
    r = dns.query.udp(q, server, timeout=2)
    ecs = [o for o in r.options if isinstance(o, dns.edns.ECSOption)]
    print(server, dns.rcode.to_text(r.rcode()), r.answer[0][0].address, ecs[0].scopelen)
    wire = bytearray(dns.message.make_query("www.xdp.test", "A").to_wire())
    wire[5] = 2
    wire += wire[12:]
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(bytes(wire), (server, 53))
    reply = s.recv(4096)
    print(server, "two-questions", dns.rcode.to_text(reply[3] & 15))
"#;

#[test]
fn dnspython_is_answered_through_xdp() {
    let python = "/usr/bin/python3";
    let has_dnspython = run(&[python, "-c", "import dns.edns"]).status.success();
    if !has_dnspython {
        assert!(!tools_required(), "python3-dnspython is not installed: CI must run this test");
        eprintln!("skipping: dnspython is not installed (apt-get install python3-dnspython)");
        return;
    }
    let Some(_) = require_tool("kdig", "knot-dnsutils") else { return };
    let Some(bed) = Bed::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = bed.serve(dir.path());
    let before = bed.udp_counter("InDatagrams");
    let out = bed.in_client(&[python, "-c", DNSPYTHON, SERVER, SERVER6]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let want = format!(
        "{SERVER} NOERROR 192.0.2.10 0\n{SERVER} two-questions FORMERR\n\
         {SERVER6} NOERROR 192.0.2.10 0\n{SERVER6} two-questions FORMERR\n"
    );
    assert_eq!(text, want);
    assert_eq!(bed.udp_counter("InDatagrams"), before, "answered by the UDP sockets");
    stop(&mut server, libc::SIGTERM);
}

#[test]
fn a_second_server_falls_back_to_sockets_and_detaches_nothing() {
    let Some(_) = require_tool("kdig", "knot-dnsutils") else { return };
    let Some(bed) = Bed::new() else { return };
    let (first_dir, second_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut first = bed.serve(first_dir.path());
    // The interface already has the first server's program: the second cannot attach its
    // own, says so, and serves from its sockets.
    let mut second = bed.spawn(second_dir.path(), 5353, 8054);
    let deadline = Instant::now() + Duration::from_secs(30);
    let log = second_dir.path().join("log");
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("cannot attach the XDP program")
    {
        assert!(Instant::now() < deadline, "no fallback warning");
        std::thread::sleep(Duration::from_millis(100));
    }
    let via_sockets = bed.kdig(SERVER, &["-p", "5353"], "www.xdp.test", "A");
    assert!(via_sockets.contains("192.0.2.10"), "{via_sockets}");
    stop(&mut second, libc::SIGTERM);
    // The first server's program is untouched and still answers.
    assert!(bed.has_program() && bed.answers());
    stop(&mut first, libc::SIGTERM);
    assert!(!bed.has_program());
}

/// Watches the server's interface through a packet socket for `seconds` (after printing
/// `ready`), and prints the id of every DNS query for `name` that the kernel receives there:
/// the frames the XDP program passed, but none it sent to the fast path.
const SNIFF: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
s.settimeout(0.1)
name, end = bytes.fromhex(sys.argv[2]), time.time() + float(sys.argv[3])
print("ready", flush=True)
while time.time() < end:
    try:
        frame, (_, _, kind, _, _) = s.recvfrom(65535)
    except socket.timeout:
        continue
    at = frame.find(name)
    if kind != socket.PACKET_OUTGOING and at >= 12 and frame[at - 10] & 0x80 == 0:
        print(frame[at - 12:at - 10].hex(), flush=True)
"#;

#[test]
fn a_vlan_tagged_query_goes_to_the_kernel() {
    let Some(_) = require_tool("kdig", "knot-dnsutils") else { return };
    let Some(bed) = Bed::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = bed.serve(dir.path());
    let query = a_query("www.xdp.test");
    let name: String = query[12..].iter().map(|b| format!("{b:02x}")).collect();
    let mut sniffer = Command::new("ip")
        .args(["netns", "exec", &bed.server_ns, "python3", "-c", SNIFF, &bed.server_if])
        .args([&name, "3"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python3");
    let mut seen = BufReader::new(sniffer.stdout.take().unwrap()).lines();
    assert_eq!(seen.next().and_then(Result::ok).as_deref(), Some("ready"));
    // The same query untagged (id 1111) and tagged with VLAN 7 (id 2222), to the server's
    // address and port: the program takes the first and passes the second.
    let with_id = |id: [u8; 2]| [&id[..], &query[2..]].concat();
    bed.inject(&query_frame(&bed, &with_id([0x11, 0x11])).bytes());
    bed.inject(&UdpFrame { vlan: Some(7), ..query_frame(&bed, &with_id([0x22, 0x22])) }.bytes());
    let seen: Vec<String> = seen.map_while(Result::ok).collect();
    sniffer.wait().unwrap();
    assert_eq!(seen, ["2222"], "only the tagged query reaches the kernel");
    assert_eq!(bed.metric("steerdns_xdp_malformed_frames_total"), 0, "passed, not dropped");
    stop(&mut server, libc::SIGTERM);
}

/// The harness starts its server with the test's thread switched into the server's
/// namespace: the switch is that thread's alone (tokio's workers, which run the test's
/// tasks, stay where they are), threads started meanwhile (the server's UDP and fast path
/// workers) are born in it, and the thread comes back when the guard drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_switch_is_the_calling_threads_own() {
    let Some(pair) = VethPair::new(1) else { return };
    let netns = || std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    let home = netns();
    let inside = pair.enter_server();
    let there = netns();
    assert_ne!(there, home);
    assert_eq!(std::thread::spawn(netns).join().unwrap(), there, "a thread started inside");
    assert_eq!(tokio::spawn(async move { netns() }).await.unwrap(), home, "a worker");
    drop(inside);
    assert_eq!(netns(), home);
}

/// The wire conformance cases of UDP, each on an in-process server whose UDP queries only
/// the fast path answers (its sockets listen on another port). Every case passes this way;
/// none is skipped.
mod wire {
    use super::Via;
    use crate::wire_tests;

    wire_tests!(Via::Xdp);
}

/// What steerdns, started through `through`, wrote before it exited, which it must do
/// with a failure.
fn refusal(bed: &Bed, through: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = bed.spawn_through(dir.path(), 53, 8053, through);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            stop(&mut child, libc::SIGKILL);
            panic!("steerdns started although it should have refused");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    assert!(!bed.has_program(), "a refused start left a program attached");
    std::fs::read_to_string(dir.path().join("log")).unwrap()
}

/// Without the capabilities BPF needs, or with too little lockable memory for the
/// sockets' packet memory, the server refuses to start and names what is missing.
#[test]
fn missing_privileges_and_locked_memory_are_named() {
    let Some(_) = require_tool("setpriv", "util-linux") else { return };
    let Some(_) = require_tool("prlimit", "util-linux") else { return };
    let Some(bed) = Bed::new() else { return };
    let log = refusal(&bed, &["setpriv", "--bounding-set=-bpf,-sys_admin,-perfmon", "--"]);
    assert!(
        log.contains("listen.xdp needs CAP_NET_ADMIN, CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_RAW"),
        "{log}"
    );
    let log = refusal(
        &bed,
        &["setpriv", "--bounding-set=-ipc_lock", "--", "prlimit", "--memlock=1048576", "--"],
    );
    assert!(log.contains("exceed the locked-memory limit (raise RLIMIT_MEMLOCK"), "{log}");
}

/// A burst the server cannot keep up with: each query is either answered, and its reply
/// leaves the interface at once, or counted in `steerdns_xdp_dropped_frames_total`.
#[test]
fn every_query_of_a_burst_is_answered_or_counted_as_dropped() {
    let Some(_) = require_tool("kdig", "knot-dnsutils") else { return };
    let Some(bed) = Bed::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = bed.serve(dir.path());
    let answered_before = bed.metric_sum("steerdns_queries_total");
    let sent_before = bed.interface_counter("tx_packets");
    let queries = 32768;
    {
        let _inside = bed.enter_client();
        let sock = std::net::UdpSocket::bind((client_v4(1), 0)).unwrap();
        sock.connect((SERVER_V4, 53)).unwrap();
        for i in 0..queries {
            let mut q = a_query("www.xdp.test");
            q[..2].copy_from_slice(&(i as u16).to_be_bytes());
            sock.send(&q).expect("send");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let (answered, dropped) = loop {
        let answered = bed.metric_sum("steerdns_queries_total") - answered_before;
        let dropped = bed.metric_sum("steerdns_xdp_dropped_frames_total");
        if answered + dropped >= queries || Instant::now() > deadline {
            break (answered, dropped);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(answered + dropped, queries, "answered {answered}, dropped {dropped}");
    assert!(dropped > 0, "the burst did not outrun the server: nothing was dropped");
    // Replies stranded in the send ring would leave only slowly, long after the burst.
    let deadline = Instant::now() + Duration::from_secs(2);
    while bed.interface_counter("tx_packets") - sent_before < answered {
        assert!(Instant::now() < deadline, "replies left behind in the send ring");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop(&mut server, libc::SIGTERM);
}
