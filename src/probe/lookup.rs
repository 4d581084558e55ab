//! One address lookup of a flattened host name at a recursive resolver: a query with RD
//! (and DO, so that a validating resolver sets AD) over UDP, again over TCP when the reply
//! is truncated, and the reply read into addresses, the CNAME chain and the smallest TTL.
//! Every step is bounded: the time per resolver, the reply's size, the chain's length.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use arrayvec::ArrayVec;
use hickory_proto::op::{Edns, Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::model::flat::{Family, Lookup, MAX_FLAT_ADDRESSES};
use crate::wire::name::WireName;

/// The longest CNAME chain followed from the flattened name to its addresses.
pub const MAX_CHAIN: usize = 8;

/// The TTL of an answer without addresses when the reply has no SOA to take it from.
const NEGATIVE_TTL: u32 = 60;

/// Replies read from the UDP socket that are not the one expected before the lookup gives
/// up on that resolver (besides the time limit).
const MAX_STRAY_REPLIES: usize = 16;

/// Why a lookup failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LookupError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Io(String),
    #[error("malformed reply: {0}")]
    Malformed(String),
    #[error("resolver answered {0}")]
    Rcode(String),
    #[error("the name does not exist (NXDOMAIN)")]
    NoSuchName,
    #[error("CNAME chain longer than {MAX_CHAIN}")]
    ChainTooLong,
    #[error("the resolver did not validate the answer (no AD) and require_ad is set")]
    NotAuthenticated,
}

/// What a lookup asks of the resolvers.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    pub name: &'a WireName,
    pub family: Family,
    pub timeout: Duration,
    pub require_ad: bool,
}

/// Asks `resolvers` in turn, starting at `start` (round robin over lookups), until one
/// answers; the last error when none does.
pub async fn lookup(
    ask: Ask<'_>,
    resolvers: &[SocketAddr],
    start: usize,
    now_unix: impl Fn() -> u64,
) -> Result<Lookup, LookupError> {
    let mut last = LookupError::Io("no resolver configured".into());
    for i in 0..resolvers.len() {
        let resolver = resolvers[(start + i) % resolvers.len()];
        match ask_one(ask, resolver).await {
            Ok(reply) => {
                return read_reply(&reply, ask, resolver, now_unix());
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn rtype(family: Family) -> RecordType {
    match family {
        Family::V4 => RecordType::A,
        Family::V6 => RecordType::AAAA,
    }
}

/// The query: RD, and DO with AD so that a validating resolver says whether it validated
/// (RFC 6840 §5.7).
fn query(ask: Ask<'_>) -> Message {
    let mut m = Message::query();
    m.add_query(Query::query(ask.name.to_name(), rtype(ask.family)));
    m.metadata.recursion_desired = true;
    m.metadata.authentic_data = true;
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    edns.set_dnssec_ok(true);
    m.set_edns(edns);
    m
}

/// One resolver's reply to the query, over UDP, then TCP when truncated.
async fn ask_one(ask: Ask<'_>, resolver: SocketAddr) -> Result<Message, LookupError> {
    let q = query(ask);
    let bytes = q.to_vec().map_err(|e| LookupError::Malformed(e.to_string()))?;
    let deadline = tokio::time::Instant::now() + ask.timeout;
    let timed = |e| match e {
        Some(r) => r,
        None => Err(LookupError::Timeout(ask.timeout)),
    };
    let reply =
        timed(tokio::time::timeout_at(deadline, udp(&bytes, resolver, q.metadata.id)).await.ok())?;
    if !reply.metadata.truncation {
        return Ok(reply);
    }
    timed(tokio::time::timeout_at(deadline, tcp(&bytes, resolver, q.metadata.id)).await.ok())
}

fn io(e: std::io::Error) -> LookupError {
    LookupError::Io(e.to_string())
}

async fn udp(bytes: &[u8], resolver: SocketAddr, id: u16) -> Result<Message, LookupError> {
    let local: SocketAddr = match resolver.ip() {
        IpAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(local).await.map_err(io)?;
    sock.connect(resolver).await.map_err(io)?;
    sock.send(bytes).await.map_err(io)?;
    let mut buf = [0u8; 4096];
    for _ in 0..MAX_STRAY_REPLIES {
        let n = sock.recv(&mut buf).await.map_err(io)?;
        match Message::from_vec(&buf[..n]) {
            Ok(m) if m.metadata.id == id && m.metadata.message_type == MessageType::Response => {
                return Ok(m);
            }
            _ => continue,
        }
    }
    Err(LookupError::Malformed("no reply matched the query".into()))
}

async fn tcp(bytes: &[u8], resolver: SocketAddr, id: u16) -> Result<Message, LookupError> {
    let mut s = TcpStream::connect(resolver).await.map_err(io)?;
    let len = u16::try_from(bytes.len()).map_err(|_| LookupError::Malformed("query".into()))?;
    let mut framed = Vec::with_capacity(bytes.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(bytes);
    s.write_all(&framed).await.map_err(io)?;
    let n = usize::from(s.read_u16().await.map_err(io)?);
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).await.map_err(io)?;
    let m = Message::from_vec(&buf).map_err(|e| LookupError::Malformed(e.to_string()))?;
    if m.metadata.id != id {
        return Err(LookupError::Malformed("reply id differs from the query's".into()));
    }
    Ok(m)
}

/// The addresses a reply gives `ask.name`: the CNAME chain from it followed (at most
/// `MAX_CHAIN` links, in the answer section), then the A or AAAA records of its end. TTL:
/// the smallest of the records used; without addresses, the SOA's negative TTL.
pub fn read_reply(
    reply: &Message,
    ask: Ask<'_>,
    resolver: SocketAddr,
    received: u64,
) -> Result<Lookup, LookupError> {
    match reply.metadata.response_code {
        ResponseCode::NoError => {}
        ResponseCode::NXDomain => return Err(LookupError::NoSuchName),
        other => return Err(LookupError::Rcode(other.to_string())),
    }
    let authenticated = reply.metadata.authentic_data;
    if ask.require_ad && !authenticated {
        return Err(LookupError::NotAuthenticated);
    }
    let want = rtype(ask.family);
    let mut name: Name = ask.name.to_name();
    let mut chain = Vec::new();
    let mut ttl = u32::MAX;
    loop {
        let cname = reply.answers.iter().find_map(|r| match &r.data {
            RData::CNAME(c) if r.name == name => Some((c.0.clone(), r.ttl)),
            _ => None,
        });
        let Some((target, t)) = cname else { break };
        if chain.len() == MAX_CHAIN {
            return Err(LookupError::ChainTooLong);
        }
        ttl = ttl.min(t);
        chain.push(WireName::from_name(&target));
        name = target;
    }
    let mut addresses: ArrayVec<IpAddr, MAX_FLAT_ADDRESSES> = ArrayVec::new();
    for r in reply.answers.iter().filter(|r| r.name == name && r.record_type() == want) {
        let addr = match &r.data {
            RData::A(a) => IpAddr::V4(a.0),
            RData::AAAA(a) => IpAddr::V6(a.0),
            _ => continue,
        };
        ttl = ttl.min(r.ttl);
        if !addresses.contains(&addr) {
            let _ = addresses.try_push(addr);
        }
    }
    if addresses.is_empty() {
        // RFC 2308 §5: a negative answer lives min(SOA TTL, SOA minimum).
        let negative = reply.authorities.iter().find_map(|r| match &r.data {
            RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
            _ => None,
        });
        ttl = ttl.min(negative.unwrap_or(NEGATIVE_TTL));
    }
    Ok(Lookup { addresses, received, ttl, resolver, authenticated, chain })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Record;
    use hickory_proto::rr::rdata::{A, CNAME, SOA};

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn reply(answers: Vec<Record>, ad: bool) -> Message {
        let mut m = Message::response(1, hickory_proto::op::OpCode::Query);
        m.metadata.authentic_data = ad;
        m.answers = answers;
        m
    }

    fn cname(from: &str, to: &str, ttl: u32) -> Record {
        Record::from_rdata(name(from), ttl, RData::CNAME(CNAME(name(to))))
    }

    fn a(owner: &str, ip: [u8; 4], ttl: u32) -> Record {
        Record::from_rdata(name(owner), ttl, RData::A(A::from(std::net::Ipv4Addr::from(ip))))
    }

    fn ask(n: &WireName, require_ad: bool) -> Ask<'_> {
        Ask { name: n, family: Family::V4, timeout: Duration::from_secs(1), require_ad }
    }

    #[test]
    fn follows_the_chain_and_takes_the_smallest_ttl() {
        let n = WireName::parse("www.example.com.").unwrap();
        let r = reply(
            vec![
                cname("www.example.com.", "edge.cdn.example.", 300),
                cname("edge.cdn.example.", "pop1.cdn.example.", 120),
                a("pop1.cdn.example.", [192, 0, 2, 1], 60),
                a("pop1.cdn.example.", [192, 0, 2, 2], 90),
                // Not on the chain: ignored.
                a("other.example.", [198, 51, 100, 1], 5),
            ],
            true,
        );
        let l = read_reply(&r, ask(&n, true), "127.0.0.1:53".parse().unwrap(), 1000).unwrap();
        let want: Vec<IpAddr> = vec![[192, 0, 2, 1].into(), [192, 0, 2, 2].into()];
        assert_eq!(l.addresses.to_vec(), want);
        assert_eq!(l.ttl, 60);
        assert!(l.authenticated);
        let chain: Vec<String> = l.chain.iter().map(ToString::to_string).collect();
        assert_eq!(chain, ["edge.cdn.example.", "pop1.cdn.example."]);
    }

    #[test]
    fn a_chain_past_the_bound_fails() {
        let n = WireName::parse("c0.example.").unwrap();
        let links: Vec<Record> = (0..=MAX_CHAIN)
            .map(|i| cname(&format!("c{i}.example."), &format!("c{}.example.", i + 1), 60))
            .collect();
        let r = reply(links, false);
        let got = read_reply(&r, ask(&n, false), "127.0.0.1:53".parse().unwrap(), 0);
        assert_eq!(got, Err(LookupError::ChainTooLong));
    }

    #[test]
    fn a_loop_is_a_chain_too_long() {
        let n = WireName::parse("a.example.").unwrap();
        let r = reply(
            vec![cname("a.example.", "b.example.", 60), cname("b.example.", "a.example.", 60)],
            false,
        );
        let got = read_reply(&r, ask(&n, false), "127.0.0.1:53".parse().unwrap(), 0);
        assert_eq!(got, Err(LookupError::ChainTooLong));
    }

    #[test]
    fn require_ad_refuses_an_unvalidated_answer() {
        let n = WireName::parse("www.example.com.").unwrap();
        let r = reply(vec![a("www.example.com.", [192, 0, 2, 1], 60)], false);
        let at = "127.0.0.1:53".parse().unwrap();
        assert_eq!(read_reply(&r, ask(&n, true), at, 0), Err(LookupError::NotAuthenticated));
        assert!(read_reply(&r, ask(&n, false), at, 0).is_ok());
    }

    #[test]
    fn no_addresses_live_as_long_as_the_soa_says() {
        let n = WireName::parse("www.example.com.").unwrap();
        let mut r = reply(Vec::new(), false);
        let soa = SOA::new(name("ns.example.com."), name("h.example.com."), 1, 1, 1, 1, 40);
        r.authorities = vec![Record::from_rdata(name("example.com."), 300, RData::SOA(soa))];
        let l = read_reply(&r, ask(&n, false), "127.0.0.1:53".parse().unwrap(), 0).unwrap();
        assert!(l.addresses.is_empty());
        assert_eq!(l.ttl, 40);
        let mut nx = reply(Vec::new(), false);
        nx.metadata.response_code = ResponseCode::NXDomain;
        let got = read_reply(&nx, ask(&n, false), "127.0.0.1:53".parse().unwrap(), 0);
        assert_eq!(got, Err(LookupError::NoSuchName));
    }
}
