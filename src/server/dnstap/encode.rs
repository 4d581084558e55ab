//! The dnstap protobuf messages steerdns writes: `Dnstap { type: MESSAGE, message }` with an
//! AUTH_QUERY or AUTH_RESPONSE `Message`. The structs mirror the fields of `dnstap.proto`
//! that an authoritative server fills (same names, tags and types); prost encodes them.
//!
//! `Encoder` keeps one message of each kind and refills its byte fields in place, so that
//! encoding reuses the same buffers message after message.

use std::net::{IpAddr, SocketAddr};

use crate::responder::Transport;

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
    query: Dnstap,
    response: Dnstap,
    out: Vec<u8>,
}

impl Encoder {
    /// `identity` and `version` go into every message.
    pub fn new(identity: &str, version: &str) -> Encoder {
        let template = |kind: MessageType| Dnstap {
            identity: Some(identity.as_bytes().to_vec()),
            version: Some(version.as_bytes().to_vec()),
            message: Some(Message { r#type: kind as i32, ..Message::default() }),
            r#type: DnstapType::Message as i32,
        };
        Encoder {
            query: template(MessageType::AuthQuery),
            response: template(MessageType::AuthResponse),
            out: Vec::with_capacity(1024),
        }
    }

    /// The AUTH_QUERY message of `record`.
    pub fn query(&mut self, record: &Record) -> &[u8] {
        let m = self.query.message.get_or_insert_with(Message::default);
        fill_common(m, record);
        set_bytes(&mut m.query_message, &record.query);
        encode(&self.query, &mut self.out)
    }

    /// The AUTH_RESPONSE message of `record` (its query time, response time and bytes).
    pub fn response(&mut self, record: &Record) -> &[u8] {
        let m = self.response.message.get_or_insert_with(Message::default);
        fill_common(m, record);
        let sent = record.response_time.unwrap_or(record.query_time);
        m.response_time_sec = Some(sent.secs);
        m.response_time_nsec = Some(sent.nanos);
        set_bytes(&mut m.response_message, &record.response);
        encode(&self.response, &mut self.out)
    }
}

fn encode<'a>(message: &Dnstap, out: &'a mut Vec<u8>) -> &'a [u8] {
    out.clear();
    prost::Message::encode(message, out).expect("a Vec grows to fit the message");
    out
}

/// The fields both kinds carry: family, protocol, both ends and the query time.
fn fill_common(m: &mut Message, r: &Record) {
    let family = match r.client.ip() {
        IpAddr::V4(_) => SocketFamily::Inet,
        IpAddr::V6(_) => SocketFamily::Inet6,
    };
    let protocol = match r.transport {
        Transport::Udp => SocketProtocol::Udp,
        Transport::Tcp => SocketProtocol::Tcp,
    };
    m.socket_family = Some(family as i32);
    m.socket_protocol = Some(protocol as i32);
    set_address(&mut m.query_address, r.client.ip());
    m.query_port = Some(u32::from(r.client.port()));
    set_address(&mut m.response_address, r.server.ip());
    m.response_port = Some(u32::from(r.server.port()));
    m.query_time_sec = Some(r.query_time.secs);
    m.query_time_nsec = Some(r.query_time.nanos);
}

fn set_address(field: &mut Option<Vec<u8>>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => set_bytes(field, &v4.octets()),
        IpAddr::V6(v6) => set_bytes(field, &v6.octets()),
    }
}

/// Refills a byte field in place: its buffer is kept from one message to the next.
fn set_bytes(field: &mut Option<Vec<u8>>, bytes: &[u8]) {
    let buf = field.get_or_insert_with(Vec::new);
    buf.clear();
    buf.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

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
