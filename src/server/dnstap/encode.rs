//! The dnstap protobuf messages steerdns writes: `Dnstap { type: MESSAGE, message }` with an
//! AUTH_QUERY or AUTH_RESPONSE `Message`, holding the fields of `dnstap.proto` that an
//! authoritative server fills.
//!
//! The few fields are encoded by hand, straight into reused buffers. With prost's derive
//! (the schema is still declared that way, in the tests, which check that the bytes are
//! prost's) encoding took about 1,500 instructions a message, two thirds of what logging a
//! query cost; written out here, logging a query costs 45% fewer instructions
//! (`bench/RESULTS.md`, "dnstap").

use std::net::{IpAddr, SocketAddr};

use crate::responder::Transport;

// Field keys (field number << 3 | wire type: 0 varint, 2 length-delimited, 5 fixed32).
const DNSTAP_IDENTITY: u8 = 1 << 3 | 2;
const DNSTAP_VERSION: u8 = 2 << 3 | 2;
const DNSTAP_MESSAGE: u8 = 14 << 3 | 2;
const DNSTAP_TYPE: u8 = 15 << 3;
const TYPE_MESSAGE: u64 = 1;
const TYPE: u8 = 1 << 3;
const SOCKET_FAMILY: u8 = 2 << 3;
const SOCKET_PROTOCOL: u8 = 3 << 3;
const QUERY_ADDRESS: u8 = 4 << 3 | 2;
const RESPONSE_ADDRESS: u8 = 5 << 3 | 2;
const QUERY_PORT: u8 = 6 << 3;
const RESPONSE_PORT: u8 = 7 << 3;
const QUERY_TIME_SEC: u8 = 8 << 3;
const QUERY_TIME_NSEC: u8 = 9 << 3 | 5;
const QUERY_MESSAGE: u8 = 10 << 3 | 2;
const RESPONSE_TIME_SEC: u8 = 12 << 3;
const RESPONSE_TIME_NSEC: u8 = 13 << 3 | 5;
const RESPONSE_MESSAGE: u8 = 14 << 3 | 2;

/// `Message.Type`: the two kinds an authoritative server writes.
const AUTH_QUERY: u64 = 1;
const AUTH_RESPONSE: u64 = 2;
/// `SocketFamily` and `SocketProtocol`.
const INET: u64 = 1;
const INET6: u64 = 2;
const UDP: u64 = 1;
const TCP: u64 = 2;

/// A wall-clock time as dnstap writes it: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Time {
    pub secs: u64,
    pub nanos: u32,
}

impl Time {
    pub fn now() -> Time {
        let since =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Time { secs: since.as_secs(), nanos: since.subsec_nanos() }
    }
}

/// One logged exchange as the writer holds it: a query and, unless the query went
/// unanswered, its response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub transport: Transport,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub query_time: Time,
    pub query: Vec<u8>,
    /// When the response left; `None`: there was none (a dropped or unanswerable query).
    pub response_time: Option<Time>,
    pub response: Vec<u8>,
}

impl Default for Record {
    fn default() -> Record {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        Record {
            transport: Transport::Udp,
            client: unspecified,
            server: unspecified,
            query_time: Time::default(),
            query: Vec::new(),
            response_time: None,
            response: Vec::new(),
        }
    }
}

/// Encodes records into dnstap messages, reusing its buffers.
pub struct Encoder {
    /// `identity` and `version`, encoded once: every message starts with them.
    head: Vec<u8>,
    /// The `Message` being encoded, which the outer message holds as a length-delimited field.
    inner: Vec<u8>,
    out: Vec<u8>,
}

impl Encoder {
    /// `identity` and `version` go into every message.
    pub fn new(identity: &str, version: &str) -> Encoder {
        let mut head = Vec::new();
        put_bytes(&mut head, DNSTAP_IDENTITY, identity.as_bytes());
        put_bytes(&mut head, DNSTAP_VERSION, version.as_bytes());
        Encoder { head, inner: Vec::with_capacity(1024), out: Vec::with_capacity(1024) }
    }

    /// The AUTH_QUERY message of `record`.
    pub fn query(&mut self, record: &Record) -> &[u8] {
        self.inner.clear();
        put_common(&mut self.inner, AUTH_QUERY, record);
        put_bytes(&mut self.inner, QUERY_MESSAGE, &record.query);
        self.finish()
    }

    /// The AUTH_RESPONSE message of `record` (its query time, response time and bytes).
    pub fn response(&mut self, record: &Record) -> &[u8] {
        self.inner.clear();
        put_common(&mut self.inner, AUTH_RESPONSE, record);
        let sent = record.response_time.unwrap_or(record.query_time);
        put_varint_field(&mut self.inner, RESPONSE_TIME_SEC, sent.secs);
        put_fixed32_field(&mut self.inner, RESPONSE_TIME_NSEC, sent.nanos);
        put_bytes(&mut self.inner, RESPONSE_MESSAGE, &record.response);
        self.finish()
    }

    /// Wraps the message: identity, version, the message, the type.
    fn finish(&mut self) -> &[u8] {
        self.out.clear();
        self.out.extend_from_slice(&self.head);
        put_bytes(&mut self.out, DNSTAP_MESSAGE, &self.inner);
        put_varint_field(&mut self.out, DNSTAP_TYPE, TYPE_MESSAGE);
        &self.out
    }
}

/// The fields both kinds carry, in field order: type, family, protocol, both ends and the
/// query time.
fn put_common(out: &mut Vec<u8>, kind: u64, r: &Record) {
    put_varint_field(out, TYPE, kind);
    let family = if r.client.is_ipv6() { INET6 } else { INET };
    put_varint_field(out, SOCKET_FAMILY, family);
    let protocol = match r.transport {
        Transport::Udp => UDP,
        Transport::Tcp => TCP,
    };
    put_varint_field(out, SOCKET_PROTOCOL, protocol);
    put_address(out, QUERY_ADDRESS, r.client.ip());
    put_address(out, RESPONSE_ADDRESS, r.server.ip());
    put_varint_field(out, QUERY_PORT, u64::from(r.client.port()));
    put_varint_field(out, RESPONSE_PORT, u64::from(r.server.port()));
    put_varint_field(out, QUERY_TIME_SEC, r.query_time.secs);
    put_fixed32_field(out, QUERY_TIME_NSEC, r.query_time.nanos);
}

fn put_address(out: &mut Vec<u8>, key: u8, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => put_bytes(out, key, &v4.octets()),
        IpAddr::V6(v6) => put_bytes(out, key, &v6.octets()),
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint_field(out: &mut Vec<u8>, key: u8, v: u64) {
    out.push(key);
    put_varint(out, v);
}

fn put_fixed32_field(out: &mut Vec<u8>, key: u8, v: u32) {
    out.push(key);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, key: u8, bytes: &[u8]) {
    out.push(key);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The schema as `dnstap.proto` declares it (the fields steerdns writes), for prost to
    // decode what the encoder wrote.

    /// `dnstap.Dnstap`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Dnstap {
        #[prost(bytes = "vec", optional, tag = "1")]
        pub identity: Option<Vec<u8>>,
        #[prost(bytes = "vec", optional, tag = "2")]
        pub version: Option<Vec<u8>>,
        #[prost(message, optional, tag = "14")]
        pub message: Option<Message>,
        #[prost(enumeration = "DnstapType", required, tag = "15")]
        pub r#type: i32,
    }

    /// `dnstap.Dnstap.Type`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum DnstapType {
        Message = 1,
    }

    /// `dnstap.Message`, without the fields of resolvers and policies.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Message {
        #[prost(enumeration = "MessageType", required, tag = "1")]
        pub r#type: i32,
        #[prost(enumeration = "SocketFamily", optional, tag = "2")]
        pub socket_family: Option<i32>,
        #[prost(enumeration = "SocketProtocol", optional, tag = "3")]
        pub socket_protocol: Option<i32>,
        #[prost(bytes = "vec", optional, tag = "4")]
        pub query_address: Option<Vec<u8>>,
        #[prost(bytes = "vec", optional, tag = "5")]
        pub response_address: Option<Vec<u8>>,
        #[prost(uint32, optional, tag = "6")]
        pub query_port: Option<u32>,
        #[prost(uint32, optional, tag = "7")]
        pub response_port: Option<u32>,
        #[prost(uint64, optional, tag = "8")]
        pub query_time_sec: Option<u64>,
        #[prost(fixed32, optional, tag = "9")]
        pub query_time_nsec: Option<u32>,
        #[prost(bytes = "vec", optional, tag = "10")]
        pub query_message: Option<Vec<u8>>,
        #[prost(uint64, optional, tag = "12")]
        pub response_time_sec: Option<u64>,
        #[prost(fixed32, optional, tag = "13")]
        pub response_time_nsec: Option<u32>,
        #[prost(bytes = "vec", optional, tag = "14")]
        pub response_message: Option<Vec<u8>>,
    }

    /// `dnstap.Message.Type`: the two kinds an authoritative server writes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum MessageType {
        AuthQuery = 1,
        AuthResponse = 2,
    }

    /// `dnstap.SocketFamily`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum SocketFamily {
        Inet = 1,
        Inet6 = 2,
    }

    /// `dnstap.SocketProtocol`: the two steerdns serves.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum SocketProtocol {
        Udp = 1,
        Tcp = 2,
    }

    fn record() -> Record {
        Record {
            transport: Transport::Tcp,
            client: "[2001:db8::7]:53000".parse().unwrap(),
            server: "[2001:db8::53]:53".parse().unwrap(),
            query_time: Time { secs: 1_800_000_000, nanos: 5 },
            query: vec![1, 2, 3],
            response_time: Some(Time { secs: 1_800_000_000, nanos: 900 }),
            response: vec![4, 5, 6, 7],
        }
    }

    #[test]
    fn messages_decode_to_what_was_logged() {
        let mut enc = Encoder::new("ns1", "steerdns 0.1.0");
        let r = record();
        let q: Dnstap = prost::Message::decode(enc.query(&r)).unwrap();
        assert_eq!(q.identity.as_deref(), Some(&b"ns1"[..]));
        assert_eq!(q.version.as_deref(), Some(&b"steerdns 0.1.0"[..]));
        assert_eq!(q.r#type, DnstapType::Message as i32);
        let m = q.message.unwrap();
        assert_eq!(m.r#type, MessageType::AuthQuery as i32);
        assert_eq!(m.socket_family, Some(SocketFamily::Inet6 as i32));
        assert_eq!(m.socket_protocol, Some(SocketProtocol::Tcp as i32));
        let client: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
        assert_eq!(m.query_address, Some(client.octets().to_vec()));
        assert_eq!((m.query_port, m.response_port), (Some(53000), Some(53)));
        assert_eq!((m.query_time_sec, m.query_time_nsec), (Some(1_800_000_000), Some(5)));
        assert_eq!(m.query_message, Some(vec![1, 2, 3]));
        assert_eq!((m.response_message, m.response_time_sec), (None, None));

        let a: Dnstap = prost::Message::decode(enc.response(&r)).unwrap();
        let m = a.message.unwrap();
        assert_eq!(m.r#type, MessageType::AuthResponse as i32);
        assert_eq!((m.response_time_sec, m.response_time_nsec), (Some(1_800_000_000), Some(900)));
        assert_eq!(m.response_message, Some(vec![4, 5, 6, 7]));
        assert_eq!(m.query_message, None, "a response carries the response bytes only");
    }

    /// What prost writes for the same record: the encoder writes the same fields in the
    /// same (field number) order, so the bytes must be the same.
    fn by_prost(r: &Record, kind: MessageType) -> Vec<u8> {
        let ip = |a: SocketAddr| match a.ip() {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        let response = kind == MessageType::AuthResponse;
        let sent = r.response_time.unwrap_or(r.query_time);
        let family = if r.client.is_ipv6() { SocketFamily::Inet6 } else { SocketFamily::Inet };
        let protocol = match r.transport {
            Transport::Udp => SocketProtocol::Udp,
            Transport::Tcp => SocketProtocol::Tcp,
        };
        let message = Message {
            r#type: kind as i32,
            socket_family: Some(family as i32),
            socket_protocol: Some(protocol as i32),
            query_address: Some(ip(r.client)),
            response_address: Some(ip(r.server)),
            query_port: Some(u32::from(r.client.port())),
            response_port: Some(u32::from(r.server.port())),
            query_time_sec: Some(r.query_time.secs),
            query_time_nsec: Some(r.query_time.nanos),
            query_message: (!response).then(|| r.query.clone()),
            response_time_sec: response.then_some(sent.secs),
            response_time_nsec: response.then_some(sent.nanos),
            response_message: response.then(|| r.response.clone()),
        };
        let d = Dnstap {
            identity: Some(b"ns1".to_vec()),
            version: Some(b"steerdns 0.1.0".to_vec()),
            message: Some(message),
            r#type: DnstapType::Message as i32,
        };
        prost::Message::encode_to_vec(&d)
    }

    #[test]
    fn the_bytes_are_those_prost_writes() {
        let mut enc = Encoder::new("ns1", "steerdns 0.1.0");
        let mut r = record();
        for (client, query_len, secs) in [
            ("[2001:db8::7]:53000", 3, 1_800_000_000),
            ("192.0.2.1:1", 200, 0),
            ("192.0.2.1:65535", 70_000, u64::MAX),
        ] {
            r.client = client.parse().unwrap();
            r.server =
                if r.client.is_ipv6() { "[::1]:53" } else { "0.0.0.0:5353" }.parse().unwrap();
            r.query = vec![7; query_len];
            r.query_time.secs = secs;
            assert_eq!(enc.query(&r), by_prost(&r, MessageType::AuthQuery), "{client}");
            assert_eq!(enc.response(&r), by_prost(&r, MessageType::AuthResponse), "{client}");
        }
    }

    #[test]
    fn a_shorter_message_after_a_longer_one_keeps_nothing_of_it() {
        let mut enc = Encoder::new("ns1", "v");
        let mut r = record();
        r.query = vec![9; 300];
        let _ = enc.query(&r);
        r.query = vec![8];
        r.client = "192.0.2.1:1000".parse().unwrap();
        let q: Dnstap = prost::Message::decode(enc.query(&r)).unwrap();
        let m = q.message.unwrap();
        assert_eq!(m.query_message, Some(vec![8]));
        assert_eq!(m.query_address, Some(vec![192, 0, 2, 1]));
        assert_eq!(m.socket_family, Some(SocketFamily::Inet as i32));
    }
}
