//! DNS client: queries built byte by byte (`Q`), so every field — including malformed
//! ones — is under the test's control, sent over UDP or TCP to a running `Harness` or to
//! any socket.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use steerdns::wire::{Rcode, Rtype};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{Instant, timeout, timeout_at};

use super::fixtures::fq;
use super::reply::Reply;
use super::server::Harness;

// Record types and response codes as numbers, for queries built byte by byte; the values
// come from the crate's one typed home for them.
pub const T_A: u16 = Rtype::A.0;
pub const T_NS: u16 = Rtype::NS.0;
pub const T_CNAME: u16 = Rtype::CNAME.0;
pub const T_SOA: u16 = Rtype::SOA.0;
pub const T_HINFO: u16 = Rtype::HINFO.0;
pub const T_MX: u16 = Rtype::MX.0;
pub const T_TXT: u16 = Rtype::TXT.0;
pub const T_AAAA: u16 = Rtype::AAAA.0;
pub const T_SRV: u16 = Rtype::SRV.0;
pub const T_OPT: u16 = Rtype::OPT.0;
pub const T_ANY: u16 = Rtype::ANY.0;

pub const NOERROR: u16 = Rcode::NOERROR.0;
pub const FORMERR: u16 = Rcode::FORMERR.0;
pub const NXDOMAIN: u16 = Rcode::NXDOMAIN.0;
pub const NOTIMP: u16 = Rcode::NOTIMP.0;
pub const REFUSED: u16 = Rcode::REFUSED.0;
pub const BADVERS: u16 = Rcode::BADVERS.0;
pub const BADCOOKIE: u16 = Rcode::BADCOOKIE.0;

/// How long to wait for one UDP reply before resending.
pub const UDP_WAIT: Duration = Duration::from_secs(2);
/// Sends of one UDP query before giving up.
pub const UDP_TRIES: usize = 3;
/// Longest wait for a TCP exchange.
pub const TCP_WAIT: Duration = Duration::from_secs(5);

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
    /// The CO flag, "Compact Answers OK" (RFC 9824).
    pub compact_ok: bool,
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
            compact_ok: false,
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

    pub fn compact_ok(mut self) -> Q {
        self.edns_mut().compact_ok = true;
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
            let flags = (u8::from(e.dnssec_ok) << 7) | (u8::from(e.compact_ok) << 6);
            b.extend_from_slice(&[0, e.version, flags, 0]);
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
// Exchanges
// ---------------------------------------------------------------------------------------

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

/// The A answer of `name` (under the test zone) at `addr`, from a fresh socket: one
/// address as text.
pub async fn a_answer(addr: SocketAddr, name: &str) -> String {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    let raw = udp_exchange(&sock, &Q::new(&fq(name), T_A).bytes()).await.unwrap();
    Reply::new(raw).addrs().iter().map(ToString::to_string).collect()
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

impl Harness {
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
        timeout(TCP_WAIT, self.tcp_socket(self.tcp_addr).connect(self.tcp_addr))
            .await
            .expect("tcp connect timed out")
            .expect("tcp connect")
    }

    /// A new UDP socket on the first client address, connected to `addr`.
    pub async fn fresh_udp(&self) -> UdpSocket {
        let sock = self.bind_udp(self.via().client_ip(1));
        sock.connect(self.addr).await.expect("connect");
        sock
    }
}
