//! Test harness for steerdns integration tests: writes a configuration into a temporary
//! directory, starts a real `Server` on 127.0.0.1 (port chosen by the kernel), and talks to
//! it over real UDP and TCP sockets.
//!
//! Queries are built byte by byte (`Q`), so every field — including malformed ones — is under
//! the test's control; replies are decoded both with hickory-proto (`Reply::msg`) and with a
//! small raw walker (`Wire`) for the things a decoder would normalise away (name case, OPT
//! bytes, extended RCODE, exact ECS bytes).

#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::RData;
use steerdns::server::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{Instant, timeout, timeout_at};

pub const ORIGIN: &str = "tm.example.test.";

pub const T_A: u16 = 1;
pub const T_NS: u16 = 2;
pub const T_CNAME: u16 = 5;
pub const T_SOA: u16 = 6;
pub const T_HINFO: u16 = 13;
pub const T_MX: u16 = 15;
pub const T_TXT: u16 = 16;
pub const T_AAAA: u16 = 28;
pub const T_SRV: u16 = 33;
pub const T_OPT: u16 = 41;
pub const T_ANY: u16 = 255;

pub const NOERROR: u16 = 0;
pub const FORMERR: u16 = 1;
pub const NXDOMAIN: u16 = 3;
pub const NOTIMP: u16 = 4;
pub const REFUSED: u16 = 5;
pub const BADVERS: u16 = 16;

/// How long to wait for one UDP reply before resending.
pub const UDP_WAIT: Duration = Duration::from_secs(2);
/// Sends of one UDP query before giving up.
pub const UDP_TRIES: usize = 3;
/// Longest wait for a TCP exchange.
pub const TCP_WAIT: Duration = Duration::from_secs(5);

/// Absolute name under the test zone: `fq("www")` = `www.tm.example.test.`.
pub fn fq(rel: &str) -> String {
    if rel == "@" || rel.is_empty() { ORIGIN.to_string() } else { format!("{rel}.{ORIGIN}") }
}

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

/// One TXT string of 250 bytes per record, six records: well over 1232 bytes in total.
pub const BIG_TXT_RECORDS: usize = 6;
pub const BIG_TXT_LEN: usize = 250;

/// Three such records: about 800 bytes, more than 512 but less than 1232.
pub const MID_TXT_RECORDS: usize = 3;

pub fn big_txt_string(i: usize) -> String {
    let c = (b'a' + i as u8) as char;
    std::iter::repeat_n(c, BIG_TXT_LEN).collect()
}

pub fn steerdns_yaml() -> String {
    let mut records = vec![
        "ns1 A 127.0.0.1".to_string(),
        "ns1 AAAA ::1".to_string(),
        "ns2 A 127.0.0.2".to_string(),
        "ns2 AAAA ::2".to_string(),
        r#"@ TXT "v=spf1 -all""#.to_string(),
        "mail MX 10 mx.example.net.".to_string(),
        "docs CNAME www.tm.example.test.".to_string(),
        "a.b A 192.0.2.99".to_string(),
        "chain CNAME hop.tm.example.test.".to_string(),
        "hop CNAME a.b.tm.example.test.".to_string(),
        "loop1 CNAME loop2.tm.example.test.".to_string(),
        "loop2 CNAME loop1.tm.example.test.".to_string(),
        r#"info 300 TXT "steerdns test zone""#.to_string(),
    ];
    for i in 0..BIG_TXT_RECORDS {
        records.push(format!(r#"big TXT "{}""#, big_txt_string(i)));
    }
    for i in 0..MID_TXT_RECORDS {
        records.push(format!(r#"mid TXT "{}""#, big_txt_string(i)));
    }
    let records: String = records.iter().map(|r| format!("      - '{r}'\n")).collect();
    format!(
        "listen:
  dns: [\"127.0.0.1:0\"]
zones:
  - origin: {ORIGIN}
    ns: [ns1.tm.example.test., ns2.tm.example.test.]
    soa: {{ rname: hostmaster.example.test., refresh: 3600, retry: 600, expire: 604800, minimum: 30 }}
    ttl: 3600
    records:
{records}    file: zones/extra.zone
profiles: profiles/
"
    )
}

pub const ZONE_FILE: &str = "\
; extra static records (RFC 1035 master file)
$ORIGIN tm.example.test.
_sip._udp       IN SRV   10 60 5060 sip.example.net.
ftp         120 IN A     192.0.2.200
";

/// The profiles most tests use. Every endpoint is `always_serve` (or disabled), so no
/// answer depends on health probing.
pub const DEFAULT_PROFILES: &[(&str, &str)] = &[
    (
        "priority.yaml",
        "\
name: www
routing: priority
ttl: 30
endpoints:
  - { name: primary, target: 192.0.2.10, priority: 1, always_serve: true }
  - { name: secondary, target: 198.51.100.10, priority: 2, always_serve: true }
  - { name: primary-v6, target: \"2001:db8::10\", priority: 3, always_serve: true }
---
# priority 1 is disabled: priority 2 answers
name: prio2
routing: priority
ttl: 40
endpoints:
  - { name: first, target: 192.0.2.11, priority: 1, enabled: false, always_serve: true }
  - { name: second, target: 192.0.2.12, priority: 2, always_serve: true }
  - { name: third, target: 192.0.2.13, priority: 3, always_serve: true }
---
# the only enabled endpoint is a host name
name: alias
routing: priority
ttl: 50
endpoints:
  - { name: v4, target: 192.0.2.14, priority: 1, enabled: false, always_serve: true }
  - { name: cdn, target: cdn.example.net., priority: 2, always_serve: true }
---
name: off
routing: priority
enabled: false
endpoints:
  - { name: one, target: 192.0.2.15, always_serve: true }
",
    ),
    (
        "weighted.yaml",
        "\
name: api
routing: weighted
endpoints:
  - { name: site-a, target: 192.0.2.20, weight: 3, always_serve: true }
  - { name: site-b, target: 198.51.100.20, weight: 1, always_serve: true }
  - { name: canary, target: 203.0.113.20, weight: 0, always_serve: true }
---
name: app
routing: weighted
sticky: true
ttl: 60
endpoints:
  - { name: blue, target: 192.0.2.30, always_serve: true }
  - { name: green, target: 198.51.100.30, always_serve: true }
  - { name: red, target: 203.0.113.30, always_serve: true }
  - { name: blue6, target: \"2001:db8::30\", always_serve: true }
  - { name: green6, target: \"2001:db8::31\", always_serve: true }
",
    ),
    (
        "multivalue.yaml",
        "\
name: pool
routing: multivalue
max_return: 3
endpoints:
  - { name: a, target: 192.0.2.41, always_serve: true }
  - { name: b, target: 192.0.2.42, always_serve: true }
  - { name: c, target: 192.0.2.43, always_serve: true }
  - { name: d, target: 192.0.2.44, always_serve: true }
  - { name: d6, target: \"2001:db8::44\", always_serve: true }
",
    ),
    (
        "nested.yaml",
        "\
name: global
routing: priority
endpoints:
  - { name: eu, profile: eu.tm.example.test., min_child_endpoints: 1, priority: 1 }
  - { name: us, profile: us.tm.example.test., priority: 2 }
---
name: eu
routing: weighted
endpoints:
  - { name: eu-1, target: 192.0.2.51, always_serve: true }
  - { name: eu-2, target: 192.0.2.52, always_serve: true }
---
name: us
routing: priority
endpoints:
  - { name: us-1, target: 198.51.100.51, always_serve: true }
---
# the priority-1 child is disabled (Stopped): the parent fails over to us2
name: global2
routing: priority
endpoints:
  - { name: eu, profile: eu2.tm.example.test., priority: 1 }
  - { name: us, profile: us2.tm.example.test., priority: 2 }
---
name: eu2
routing: weighted
enabled: false
endpoints:
  - { name: eu2-1, target: 192.0.2.61, always_serve: true }
---
name: us2
routing: priority
endpoints:
  - { name: us2-1, target: 198.51.100.61, always_serve: true }
",
    ),
];

// ---------------------------------------------------------------------------------------
// Server harness
// ---------------------------------------------------------------------------------------

pub struct Harness {
    pub server: Option<Server>,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    sock: UdpSocket,
}

impl Harness {
    /// Starts a server with the default profiles.
    pub async fn start() -> Harness {
        Harness::with_profiles(DEFAULT_PROFILES).await
    }

    /// Starts a server with the test zone and the given profile files (name, YAML).
    pub async fn with_profiles(profiles: &[(&str, &str)]) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        write_config(dir.path(), profiles);
        Harness::in_dir(dir).await
    }

    /// Starts a server with the test zone, the location data (geo database built from
    /// `tests/fixtures/location/city.csv`, latency table, topology), every profile of
    /// `tests/fixtures/location/profiles/` and the `extra` profile files.
    pub async fn location(extra: &[(&str, &str)]) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut profiles = location_profiles();
        profiles.extend(extra.iter().map(|(n, t)| (n.to_string(), t.to_string())));
        write_location_config(dir.path(), &profiles);
        Harness::in_dir(dir).await
    }

    /// Starts a server on a directory that already holds `steerdns.yaml`.
    pub async fn in_dir(dir: tempfile::TempDir) -> Harness {
        let server = Server::start(&dir.path().join("steerdns.yaml"))
            .await
            .unwrap_or_else(|e| panic!("server did not start: {e}"));
        let addr = server.dns_addrs()[0];
        let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind client");
        sock.connect(addr).await.expect("connect client");
        Harness { server: Some(server), addr, dir, sock }
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }

    /// Sends `q` over UDP and returns the decoded reply (retrying on loss).
    pub async fn udp(&self, q: &Q) -> Reply {
        Reply::new(self.udp_bytes(&q.bytes()).await)
    }

    /// Sends `q` over TCP on a new connection and returns the decoded reply.
    pub async fn tcp(&self, q: &Q) -> Reply {
        Reply::new(self.tcp_bytes(&q.bytes()).await)
    }

    /// Sends raw bytes over UDP on the harness socket; returns the reply whose ID matches
    /// the first two bytes. Panics when no reply comes after `UDP_TRIES` sends.
    pub async fn udp_bytes(&self, query: &[u8]) -> Vec<u8> {
        udp_exchange(&self.sock, query)
            .await
            .unwrap_or_else(|| panic!("no UDP reply to {query:02x?}"))
    }

    /// Sends raw bytes over UDP from a fresh socket; returns the first datagram that comes
    /// back, or None after waiting `UDP_WAIT` twice (the packet is sent twice).
    pub async fn raw_udp(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let sock = self.fresh_udp().await;
        for _ in 0..2 {
            sock.send(bytes).await.expect("send");
            let mut buf = vec![0u8; 65535];
            if let Ok(Ok(n)) = timeout(UDP_WAIT, sock.recv(&mut buf)).await {
                buf.truncate(n);
                return Some(buf);
            }
        }
        None
    }

    /// Asserts that `bytes` gets no reply: sends it, then a valid query from the same
    /// socket (so the same server worker reads both, in order), and checks that the first
    /// datagram back is the valid query's answer and nothing else follows shortly.
    pub async fn assert_no_reply(&self, bytes: &[u8], what: &str) {
        let sock = self.fresh_udp().await;
        let probe = Q::new(&fq("www"), T_A).id(0xBEEF);
        assert_ne!(&bytes[..2.min(bytes.len())], &[0xBE, 0xEF], "pick another id");
        let mut got_probe = false;
        for _ in 0..UDP_TRIES {
            sock.send(bytes).await.expect("send");
            sock.send(&probe.bytes()).await.expect("send");
            let mut buf = vec![0u8; 65535];
            if let Ok(Ok(n)) = timeout(UDP_WAIT, sock.recv(&mut buf)).await {
                assert!(
                    n >= 2 && buf[..2] == [0xBE, 0xEF],
                    "{what}: got a reply {:02x?}",
                    &buf[..n]
                );
                got_probe = true;
                break;
            }
        }
        assert!(got_probe, "{what}: server did not answer the probe query");
        // Nothing else (e.g. a late reply to the bad packet) arrives afterwards.
        let mut buf = vec![0u8; 65535];
        if let Ok(Ok(n)) = timeout(Duration::from_millis(300), sock.recv(&mut buf)).await {
            assert!(buf[..2] == [0xBE, 0xEF], "{what}: got a reply {:02x?}", &buf[..n]);
        }
    }

    /// Sends raw bytes over TCP (length-prefixed) and reads one reply.
    pub async fn tcp_bytes(&self, query: &[u8]) -> Vec<u8> {
        let mut s = self.tcp_connect().await;
        tcp_send(&mut s, query).await;
        tcp_recv(&mut s).await.unwrap_or_else(|| panic!("no TCP reply to {query:02x?}"))
    }

    pub async fn tcp_connect(&self) -> TcpStream {
        timeout(TCP_WAIT, TcpStream::connect(self.addr))
            .await
            .expect("tcp connect timed out")
            .expect("tcp connect")
    }

    pub async fn fresh_udp(&self) -> UdpSocket {
        let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        sock.connect(self.addr).await.expect("connect");
        sock
    }
}

pub fn write_config(dir: &Path, profiles: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::create_dir_all(dir.join("zones")).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), steerdns_yaml()).unwrap();
    std::fs::write(dir.join("zones/extra.zone"), ZONE_FILE).unwrap();
    for (name, text) in profiles {
        std::fs::write(dir.join("profiles").join(name), text).unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Location data: geo database, latency table, topology
// ---------------------------------------------------------------------------------------

/// A file under `tests/fixtures/location/`.
pub fn location_fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/location").join(rel)
}

/// Top-level keys added to the test `steerdns.yaml` for the location-aware methods; the
/// files they name are written by `write_location_config`.
pub const LOCATION_KEYS: &str = "\
geo:
  database: data/city.mmdb
latency:
  table: data/latency.yaml
topology:
  zones:
    zone-a: [\"10.1.0.0/16\", \"2001:db8:20::/48\"]
    zone-b: [\"10.2.0.0/16\"]
";

/// Every profile file of `tests/fixtures/location/profiles/` as (file name, YAML).
pub fn location_profiles() -> Vec<(String, String)> {
    let dir = location_fixture("profiles");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("read profile fixture"))
        })
        .collect();
    out.sort();
    out
}

/// Writes a configuration with location data into `dir`: the test zone plus
/// `LOCATION_KEYS`, the geo database compiled by `steerdns::geo::build` from the CSV
/// fixture, the latency table fixture, and exactly the given profile files.
pub fn write_location_config(dir: &Path, profiles: &[(String, String)]) {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::create_dir_all(dir.join("zones")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), format!("{}{LOCATION_KEYS}", steerdns_yaml()))
        .unwrap();
    std::fs::write(dir.join("zones/extra.zone"), ZONE_FILE).unwrap();
    steerdns::geo::build(&location_fixture("city.csv"), &dir.join("data/city.mmdb"))
        .unwrap_or_else(|e| panic!("geo build of the fixture CSV failed: {e:?}"));
    std::fs::copy(location_fixture("latency.yaml"), dir.join("data/latency.yaml")).unwrap();
    for (name, text) in profiles {
        std::fs::write(dir.join("profiles").join(name), text).unwrap();
    }
}

/// One UDP exchange on `sock`: resend up to `UDP_TRIES` times; ignore replies whose ID
/// does not match (late answers to earlier queries).
pub async fn udp_exchange(sock: &UdpSocket, query: &[u8]) -> Option<Vec<u8>> {
    for _ in 0..UDP_TRIES {
        sock.send(query).await.expect("udp send");
        let deadline = Instant::now() + UDP_WAIT;
        loop {
            let mut buf = vec![0u8; 65535];
            match timeout_at(deadline, sock.recv(&mut buf)).await {
                Ok(Ok(n)) if n >= 2 && query.len() >= 2 && buf[..2] == query[..2] => {
                    buf.truncate(n);
                    return Some(buf);
                }
                Ok(Ok(_)) => continue,
                Ok(Err(_)) | Err(_) => break,
            }
        }
    }
    None
}

pub async fn tcp_send(s: &mut TcpStream, query: &[u8]) {
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    timeout(TCP_WAIT, s.write_all(&framed)).await.expect("tcp write timed out").expect("tcp write");
}

/// Reads one length-prefixed message; None when the server closed the connection.
pub async fn tcp_recv(s: &mut TcpStream) -> Option<Vec<u8>> {
    let fut = async {
        let len = s.read_u16().await.ok()?;
        let mut buf = vec![0u8; usize::from(len)];
        s.read_exact(&mut buf).await.ok()?;
        Some(buf)
    };
    timeout(TCP_WAIT, fut).await.expect("tcp read timed out")
}

// ---------------------------------------------------------------------------------------
// Query builder
// ---------------------------------------------------------------------------------------

static NEXT_ID: AtomicU16 = AtomicU16::new(1);

fn next_id() -> u16 {
    // Never 0xBEEF, which `assert_no_reply` uses for its probe.
    loop {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if id != 0xBEEF {
            return id;
        }
    }
}

#[derive(Clone, Debug)]
pub struct EdnsQ {
    pub payload: u16,
    pub version: u8,
    pub dnssec_ok: bool,
    /// (code, data) in order.
    pub options: Vec<(u16, Vec<u8>)>,
}

/// A query, encoded by hand.
#[derive(Clone, Debug)]
pub struct Q {
    pub id: u16,
    /// As sent; case is kept. Absolute, with or without the trailing dot.
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    pub opcode: u8,
    pub rd: bool,
    pub edns: Option<EdnsQ>,
}

impl Q {
    pub fn new(name: &str, qtype: u16) -> Q {
        Q {
            id: next_id(),
            name: name.to_string(),
            qtype,
            qclass: 1,
            opcode: 0,
            rd: false,
            edns: None,
        }
    }

    pub fn id(mut self, id: u16) -> Q {
        self.id = id;
        self
    }

    pub fn rd(mut self) -> Q {
        self.rd = true;
        self
    }

    pub fn opcode(mut self, op: u8) -> Q {
        self.opcode = op;
        self
    }

    pub fn qclass(mut self, c: u16) -> Q {
        self.qclass = c;
        self
    }

    fn edns_mut(&mut self) -> &mut EdnsQ {
        self.edns.get_or_insert(EdnsQ {
            payload: 1232,
            version: 0,
            dnssec_ok: false,
            options: Vec::new(),
        })
    }

    /// Adds an OPT record (payload 1232, version 0) if there is none.
    pub fn edns(mut self) -> Q {
        self.edns_mut();
        self
    }

    pub fn payload(mut self, p: u16) -> Q {
        self.edns_mut().payload = p;
        self
    }

    pub fn version(mut self, v: u8) -> Q {
        self.edns_mut().version = v;
        self
    }

    pub fn dnssec_ok(mut self) -> Q {
        self.edns_mut().dnssec_ok = true;
        self
    }

    pub fn option(mut self, code: u16, data: &[u8]) -> Q {
        self.edns_mut().options.push((code, data.to_vec()));
        self
    }

    /// A well-formed ECS option for `addr`/`source` (address truncated to the prefix).
    pub fn ecs(self, addr: IpAddr, source: u8) -> Q {
        let (family, octets) = match addr {
            IpAddr::V4(a) => (1u16, a.octets().to_vec()),
            IpAddr::V6(a) => (2u16, a.octets().to_vec()),
        };
        let n = usize::from(source).div_ceil(8);
        let mut bytes = octets[..n].to_vec();
        if !source.is_multiple_of(8) {
            let keep = 0xffu8 << (8 - source % 8);
            *bytes.last_mut().unwrap() &= keep;
        }
        self.ecs_raw(family, source, 0, &bytes)
    }

    /// An ECS option with every field as given (for malformed cases).
    pub fn ecs_raw(self, family: u16, source: u8, scope: u8, addr: &[u8]) -> Q {
        let mut data = family.to_be_bytes().to_vec();
        data.extend_from_slice(&[source, scope]);
        data.extend_from_slice(addr);
        self.option(8, &data)
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(&self.id.to_be_bytes());
        b.push((self.opcode << 3) | u8::from(self.rd));
        b.push(0);
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 0]);
        b.extend_from_slice(&u16::from(self.edns.is_some()).to_be_bytes());
        b.extend_from_slice(&encode_name(&self.name));
        b.extend_from_slice(&self.qtype.to_be_bytes());
        b.extend_from_slice(&self.qclass.to_be_bytes());
        if let Some(e) = &self.edns {
            b.push(0);
            b.extend_from_slice(&T_OPT.to_be_bytes());
            b.extend_from_slice(&e.payload.to_be_bytes());
            b.extend_from_slice(&[0, e.version, if e.dnssec_ok { 0x80 } else { 0 }, 0]);
            let rdata: Vec<u8> = e
                .options
                .iter()
                .flat_map(|(code, data)| {
                    let mut o = code.to_be_bytes().to_vec();
                    o.extend_from_slice(&(data.len() as u16).to_be_bytes());
                    o.extend_from_slice(data);
                    o
                })
                .collect();
            b.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            b.extend_from_slice(&rdata);
        }
        b
    }
}

/// Wire-format name, case as given.
pub fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() {
            continue;
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

// ---------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------

/// A reply: the raw bytes, hickory's decoding and a raw walk of the sections.
#[derive(Debug)]
pub struct Reply {
    pub raw: Vec<u8>,
    pub msg: Message,
    pub wire: Wire,
}

impl Deref for Reply {
    type Target = Message;
    fn deref(&self) -> &Message {
        &self.msg
    }
}

impl Reply {
    pub fn new(raw: Vec<u8>) -> Reply {
        let msg = Message::from_vec(&raw)
            .unwrap_or_else(|e| panic!("reply does not decode ({e}): {raw:02x?}"));
        let wire = Wire::parse(&raw).unwrap_or_else(|| panic!("reply does not walk: {raw:02x?}"));
        Reply { raw, msg, wire }
    }

    /// Full RCODE: header bits plus the OPT's extended bits.
    pub fn rcode(&self) -> u16 {
        self.wire.rcode()
    }

    pub fn aa(&self) -> bool {
        self.raw[2] & 0x04 != 0
    }

    pub fn tc(&self) -> bool {
        self.raw[2] & 0x02 != 0
    }

    pub fn ra(&self) -> bool {
        self.raw[3] & 0x80 != 0
    }

    pub fn qr(&self) -> bool {
        self.raw[2] & 0x80 != 0
    }

    /// The answer section as "TYPE value" strings, in order.
    pub fn answer_strings(&self) -> Vec<String> {
        self.msg.answers.iter().map(|r| rdata_string(&r.data)).collect()
    }

    /// A and AAAA addresses of the answer section, in order.
    pub fn addrs(&self) -> Vec<IpAddr> {
        self.msg
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                _ => None,
            })
            .collect()
    }

    /// Asserts NOERROR, AA and exactly one answer; returns it as a string.
    pub fn single(&self) -> String {
        assert_eq!(self.rcode(), NOERROR, "{self:#?}");
        assert!(self.aa(), "AA clear: {self:#?}");
        assert_eq!(self.msg.answers.len(), 1, "{self:#?}");
        rdata_string(&self.msg.answers[0].data)
    }

    /// Asserts a negative answer with `rcode`: AA, no answer, the zone's SOA in authority
    /// with TTL 30 (min(SOA TTL 3600, minimum 30)).
    pub fn assert_negative(&self, rcode: u16) {
        assert_eq!(self.rcode(), rcode, "{self:#?}");
        assert!(self.aa(), "AA clear: {self:#?}");
        assert!(!self.ra(), "RA set: {self:#?}");
        assert!(self.msg.answers.is_empty(), "{self:#?}");
        assert_eq!(self.msg.authorities.len(), 1, "{self:#?}");
        let soa = &self.msg.authorities[0];
        assert!(matches!(soa.data, RData::SOA(_)), "{soa:?}");
        assert_eq!(soa.name.to_ascii().to_lowercase(), ORIGIN, "{soa:?}");
        assert_eq!(soa.ttl, 30, "negative TTL");
    }

    /// The ECS option of the reply's OPT: (family, source, scope, address bytes).
    pub fn ecs(&self) -> Option<(u16, u8, u8, Vec<u8>)> {
        self.wire.ecs()
    }
}

pub fn rdata_string(d: &RData) -> String {
    match d {
        RData::A(a) => format!("A {}", a.0),
        RData::AAAA(a) => format!("AAAA {}", a.0),
        RData::CNAME(c) => format!("CNAME {}", c.0.to_ascii().to_lowercase()),
        RData::NS(n) => format!("NS {}", n.0.to_ascii().to_lowercase()),
        RData::MX(m) => format!("MX {} {}", m.preference, m.exchange.to_ascii().to_lowercase()),
        RData::TXT(t) => format!(
            "TXT {}",
            t.txt_data
                .iter()
                .map(|s| format!("{:?}", String::from_utf8_lossy(s)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => format!("{} {other}", other.record_type()),
    }
}

/// One resource record as found on the wire.
#[derive(Clone, Debug)]
pub struct Rr {
    /// The owner name, decompressed, case as on the wire.
    pub name: Vec<u8>,
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    pub rdata: Vec<u8>,
}

/// A raw walk of a DNS message.
#[derive(Clone, Debug)]
pub struct Wire {
    pub id: u16,
    pub flags: u16,
    pub counts: [u16; 4],
    /// The question section bytes as received (QNAME QTYPE QCLASS), when qdcount is 1.
    pub question: Vec<u8>,
    pub answers: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
}

impl Wire {
    pub fn parse(b: &[u8]) -> Option<Wire> {
        let u16_at =
            |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])) };
        let counts = [u16_at(4)?, u16_at(6)?, u16_at(8)?, u16_at(10)?];
        let mut pos = 12;
        let mut question = Vec::new();
        for _ in 0..counts[0] {
            let (_, end) = read_name(b, pos)?;
            question = b.get(pos..end + 4)?.to_vec();
            pos = end + 4;
        }
        let mut sections: [Vec<Rr>; 3] = Default::default();
        for (s, count) in sections.iter_mut().zip(&counts[1..]) {
            for _ in 0..*count {
                let (name, end) = read_name(b, pos)?;
                let rtype = u16_at(end)?;
                let class = u16_at(end + 2)?;
                let ttl = u32::from_be_bytes(b.get(end + 4..end + 8)?.try_into().ok()?);
                let rdlen = usize::from(u16_at(end + 8)?);
                let rdata = b.get(end + 10..end + 10 + rdlen)?.to_vec();
                pos = end + 10 + rdlen;
                s.push(Rr { name, rtype, class, ttl, rdata });
            }
        }
        if pos != b.len() {
            return None;
        }
        let [answers, authority, additional] = sections;
        Some(Wire {
            id: u16_at(0)?,
            flags: u16_at(2)?,
            counts,
            question,
            answers,
            authority,
            additional,
        })
    }

    pub fn opt(&self) -> Option<&Rr> {
        self.additional.iter().find(|r| r.rtype == T_OPT)
    }

    pub fn rcode(&self) -> u16 {
        let low = self.flags & 0x000f;
        let high = self.opt().map_or(0, |o| (o.ttl >> 24) as u16);
        (high << 4) | low
    }

    /// OPT options as (code, data).
    pub fn opt_options(&self) -> Vec<(u16, Vec<u8>)> {
        let Some(opt) = self.opt() else {
            return Vec::new();
        };
        let d = &opt.rdata;
        let mut out = Vec::new();
        let mut pos = 0;
        while pos + 4 <= d.len() {
            let code = u16::from_be_bytes([d[pos], d[pos + 1]]);
            let len = usize::from(u16::from_be_bytes([d[pos + 2], d[pos + 3]]));
            let data = d[pos + 4..(pos + 4 + len).min(d.len())].to_vec();
            out.push((code, data));
            pos += 4 + len;
        }
        out
    }

    pub fn ecs(&self) -> Option<(u16, u8, u8, Vec<u8>)> {
        let (_, d) = self.opt_options().into_iter().find(|(c, _)| *c == 8)?;
        Some((u16::from_be_bytes([d[0], d[1]]), d[2], d[3], d[4..].to_vec()))
    }
}

/// Reads a possibly compressed name at `pos`; returns (decompressed wire name, end of the
/// name at `pos`). Case is kept.
pub fn read_name(b: &[u8], mut pos: usize) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut end = None;
    for _ in 0..128 {
        let len = *b.get(pos)?;
        match len {
            0 => {
                out.push(0);
                return Some((out, end.unwrap_or(pos + 1)));
            }
            1..=63 => {
                out.extend_from_slice(b.get(pos..pos + 1 + usize::from(len))?);
                pos += 1 + usize::from(len);
            }
            0xc0..=0xff => {
                let target = usize::from(u16::from_be_bytes([len, *b.get(pos + 1)?]) & 0x3fff);
                end.get_or_insert(pos + 2);
                pos = target;
            }
            _ => return None,
        }
    }
    None
}

// ---------------------------------------------------------------------------------------
// Admin HTTP API: configuration, a tiny HTTP/1.1 client, a Prometheus text parser
// ---------------------------------------------------------------------------------------

/// `yaml` (a `steerdns.yaml` from `steerdns_yaml()`) with the admin API on 127.0.0.1:0
/// and, when `token_file` is set, `admin: { token_file: ... }`.
pub fn with_admin(yaml: &str, token_file: Option<&str>) -> String {
    let listen = "  dns: [\"127.0.0.1:0\"]\n";
    assert!(yaml.contains(listen), "unexpected steerdns.yaml: {yaml}");
    let mut out = yaml.replacen(listen, &format!("{listen}  admin: \"127.0.0.1:0\"\n"), 1);
    if let Some(f) = token_file {
        out.push_str(&format!("admin:\n  token_file: {f}\n"));
    }
    out
}

impl Harness {
    /// Starts a server with the given profiles and the admin API on 127.0.0.1:0; with
    /// `token`, the API requires it (written to `admin.token`).
    pub async fn with_admin(profiles: &[(&str, &str)], token: Option<&str>) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        write_config(dir.path(), profiles);
        if let Some(t) = token {
            std::fs::write(dir.path().join("admin.token"), format!("{t}\n")).unwrap();
        }
        let yaml = with_admin(&steerdns_yaml(), token.map(|_| "admin.token"));
        std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
        Harness::in_dir(dir).await
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("server running")
    }

    /// The admin API's address (panics when it is not enabled).
    pub fn admin(&self) -> SocketAddr {
        self.server().admin_addr().expect("admin API enabled")
    }

    /// Path of a profile file in the harness's profiles directory.
    pub fn profile_path(&self, file: &str) -> PathBuf {
        self.dir.path().join("profiles").join(file)
    }
}

/// Longest wait for one HTTP exchange.
pub const HTTP_WAIT: Duration = Duration::from_secs(10);

/// An HTTP response as read off the socket.
#[derive(Debug)]
pub struct Http {
    pub status: u16,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Http {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }

    /// The body as JSON (panics with the body when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.text()))
    }
}

/// One HTTP/1.1 exchange on a new connection (`Connection: close`, read to EOF).
/// `headers` are extra request header lines as (name, value).
pub async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Http {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.expect("connect to the admin API");
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        if method != "GET" && method != "HEAD" {
            req.push_str("Content-Length: 0\r\n");
        }
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).await.expect("write request");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.expect("read response");
        raw
    };
    let raw = timeout(HTTP_WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no response within {HTTP_WAIT:?}"));
    parse_http(&raw).unwrap_or_else(|e| {
        panic!("{method} {path}: bad HTTP response ({e}): {:?}", String::from_utf8_lossy(&raw))
    })
}

/// GET, with `Authorization: Bearer <token>` when a token is given.
pub async fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> Http {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> =
        auth.as_deref().map(|a| ("Authorization", a)).into_iter().collect();
    http(addr, "GET", path, &headers).await
}

/// POST with an empty body, with `Authorization: Bearer <token>` when a token is given.
pub async fn http_post(addr: SocketAddr, path: &str, token: Option<&str>) -> Http {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> =
        auth.as_deref().map(|a| ("Authorization", a)).into_iter().collect();
    http(addr, "POST", path, &headers).await
}

/// Splits a full HTTP/1.1 response into status, headers and body (de-chunking the body
/// when it is sent chunked).
pub fn parse_http(raw: &[u8]) -> Result<Http, String> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|e| e.to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty response")?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for l in lines {
        let (n, v) = l.split_once(':').ok_or_else(|| format!("bad header line {l:?}"))?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        body = dechunk(&body)?;
    } else if let Some((_, len)) = headers.iter().find(|(n, _)| n == "content-length") {
        let len: usize = len.parse().map_err(|_| format!("bad content-length {len:?}"))?;
        if body.len() != len {
            return Err(format!("content-length {len} but {} body bytes", body.len()));
        }
    }
    Ok(Http { status, headers, body })
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").ok_or("chunk size line")?;
        let size_text = std::str::from_utf8(&b[..eol]).map_err(|e| e.to_string())?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(b.get(..size).ok_or("short chunk")?);
        b = b.get(size + 2..).ok_or("short chunk trailer")?;
    }
}

/// One sample line of the Prometheus text exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed Prometheus text exposition.
#[derive(Debug, Default)]
pub struct Prom {
    /// Metric family name → TYPE.
    pub types: std::collections::BTreeMap<String, String>,
    /// Metric family name → HELP text.
    pub help: std::collections::BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Prom {
    /// Parses the text format strictly: every line is `# HELP`, `# TYPE`, `# UNIT`,
    /// `# EOF`, another comment, blank, or a sample `name{labels} value [timestamp]`
    /// whose metric family has a TYPE line earlier in the text.
    pub fn parse(text: &str) -> Result<Prom, String> {
        let mut p = Prom::default();
        for (i, line) in text.lines().enumerate() {
            let err = |m: &str| format!("line {}: {m}: {line:?}", i + 1);
            if line.trim().is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix('#') {
                let rest = rest.trim_start();
                let mut w = rest.splitn(3, ' ');
                match w.next() {
                    Some("HELP") => {
                        let name = w.next().ok_or_else(|| err("HELP without a name"))?;
                        check_metric_name(name).map_err(|e| err(&e))?;
                        p.help.insert(name.to_string(), w.next().unwrap_or("").to_string());
                    }
                    Some("TYPE") => {
                        let name = w.next().ok_or_else(|| err("TYPE without a name"))?;
                        check_metric_name(name).map_err(|e| err(&e))?;
                        let t = w.next().ok_or_else(|| err("TYPE without a type"))?.trim();
                        let known = [
                            "counter",
                            "gauge",
                            "histogram",
                            "summary",
                            "untyped",
                            "unknown",
                            "info",
                            "stateset",
                            "gaugehistogram",
                        ];
                        if !known.contains(&t) {
                            return Err(err("unknown type"));
                        }
                        if p.types.insert(name.to_string(), t.to_string()).is_some() {
                            return Err(err("second TYPE line for the same metric"));
                        }
                    }
                    _ => {}
                }
                continue;
            }
            let s = parse_sample(line).map_err(|e| err(&e))?;
            if p.family(&s.name).is_none() {
                return Err(err("sample without a TYPE line for its metric"));
            }
            p.samples.push(s);
        }
        Ok(p)
    }

    /// The metric family (a name with a TYPE line) that sample name `name` belongs to.
    pub fn family(&self, name: &str) -> Option<&str> {
        if let Some((n, _)) = self.types.get_key_value(name) {
            return Some(n);
        }
        for (suffix, types) in [
            ("_total", &["counter"][..]),
            ("_created", &["counter", "histogram", "summary"][..]),
            ("_bucket", &["histogram", "gaugehistogram"][..]),
            ("_sum", &["histogram", "summary"][..]),
            ("_count", &["histogram", "summary"][..]),
            ("_info", &["info"][..]),
        ] {
            if let Some(base) = name.strip_suffix(suffix)
                && let Some((n, t)) = self.types.get_key_value(base)
                && types.contains(&t.as_str())
            {
                return Some(n);
            }
        }
        None
    }

    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn select(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// Sum of the values of `select(name, labels)`; 0 when there is none.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.select(name, labels).iter().map(|s| s.value).sum()
    }
}

fn check_metric_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if ok { Ok(()) } else { Err(format!("invalid metric name {n:?}")) }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut labels = std::collections::BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        let end;
        loop {
            // Skip separators.
            while let Some((_, c)) = chars.peek() {
                if *c == ',' || *c == ' ' {
                    chars.next();
                } else {
                    break;
                }
            }
            match chars.peek() {
                Some((i, '}')) => {
                    end = *i;
                    break;
                }
                None => return Err("unterminated label set".into()),
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if key.is_empty()
                || key.starts_with(|c: char| c.is_ascii_digit())
                || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(format!("invalid label name {key:?}"));
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {key}: value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, '\\')) => value.push('\\'),
                        Some((_, '"')) => value.push('"'),
                        other => return Err(format!("label {key}: bad escape {other:?}")),
                    },
                    Some((_, '"')) => break,
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("label {key}: unterminated value")),
                }
            }
            if labels.insert(key.clone(), value).is_some() {
                return Err(format!("label {key} given twice"));
            }
        }
        rest = &r[end + 1..];
    }
    let mut fields = rest.split_whitespace();
    let v = fields.next().ok_or("no value")?;
    let value = match v {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => v.parse::<f64>().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = fields.next() {
        ts.parse::<f64>().map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing text after the value".into());
    }
    Ok(Sample { name: name.to_string(), labels, value })
}

/// Scrapes `/metrics` and parses it; panics with the text when it does not parse.
pub async fn scrape(addr: SocketAddr, token: Option<&str>) -> Prom {
    let r = http_get(addr, "/metrics", token).await;
    assert_eq!(r.status, 200, "GET /metrics: {r:?}");
    let text = r.text();
    Prom::parse(&text).unwrap_or_else(|e| panic!("/metrics does not parse: {e}\n{text}"))
}

pub fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

/// Configuration errors as "FILE-NAME:LINE:COL: message".
pub fn located(errors: &steerdns::config::ConfigErrors) -> Vec<String> {
    errors
        .0
        .iter()
        .map(|e| {
            let file = e.file.file_name().unwrap().to_string_lossy().to_string();
            format!("{file}:{}:{}: {}", e.pos.line, e.pos.col, e.message)
        })
        .collect()
}
