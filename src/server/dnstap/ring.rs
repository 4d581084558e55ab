//! The hand-over from a query path to the writer: a lock-free single-producer,
//! single-consumer byte ring (`rtrb`) of fixed size, allocated once. Each exchange is one
//! record, a fixed header followed by the query and response bytes, committed whole, so
//! the writer never sees half of one. A record that does not fit is refused, never waited
//! for: the caller counts it as dropped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use rtrb::{Consumer, Producer, RingBuffer};

use super::encode::{Record, Time};
use crate::responder::Transport;

/// One exchange as the query path hands it over: borrowed, copied into the ring.
#[derive(Clone, Copy, Debug)]
pub struct Exchange<'a> {
    pub transport: Transport,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub query: &'a [u8],
    pub query_time: Time,
    /// The response sent and when; `None` for a query that got none.
    pub response: Option<(&'a [u8], Time)>,
}

impl Exchange<'_> {
    /// The dnstap messages it makes: the query, and the response if there was one.
    pub fn messages(&self) -> u64 {
        1 + u64::from(self.response.is_some())
    }
}

/// flags, two lengths, two ports, two addresses, two times.
const HEADER: usize = 1 + 2 + 2 + 2 + 2 + 16 + 16 + 12 + 12;
const TCP: u8 = 1;
const ANSWERED: u8 = 2;
const CLIENT_V6: u8 = 4;
const SERVER_V6: u8 = 8;

/// A new ring of `capacity` bytes.
pub fn ring(capacity: usize) -> (Sender, Receiver) {
    let (producer, consumer) = RingBuffer::new(capacity);
    (Sender { producer, capacity }, Receiver { consumer })
}

/// The query path's end.
pub struct Sender {
    producer: Producer<u8>,
    capacity: usize,
}

impl Sender {
    /// Copies `ex` into the ring; `false` when it does not fit (the ring is full) or the
    /// writer has let go of the ring (a replaced query log that stopped waiting).
    pub fn offer(&mut self, ex: &Exchange<'_>) -> bool {
        if self.producer.is_abandoned() {
            return false;
        }
        let (response, sent) = ex.response.unwrap_or((&[], Time::default()));
        let (Ok(qlen), Ok(rlen)) = (u16::try_from(ex.query.len()), u16::try_from(response.len()))
        else {
            return false;
        };
        let mut flags = 0;
        if ex.transport == Transport::Tcp {
            flags |= TCP;
        }
        if ex.response.is_some() {
            flags |= ANSWERED;
        }
        if ex.client.is_ipv6() {
            flags |= CLIENT_V6;
        }
        if ex.server.is_ipv6() {
            flags |= SERVER_V6;
        }
        let mut header = [0u8; HEADER];
        let mut h = Cursor { a: &mut header, b: &mut [], at: 0 };
        h.put(&[flags]);
        h.put(&qlen.to_le_bytes());
        h.put(&rlen.to_le_bytes());
        h.put(&ex.client.port().to_le_bytes());
        h.put(&ex.server.port().to_le_bytes());
        h.put(&octets(ex.client.ip()));
        h.put(&octets(ex.server.ip()));
        h.put(&ex.query_time.secs.to_le_bytes());
        h.put(&ex.query_time.nanos.to_le_bytes());
        h.put(&sent.secs.to_le_bytes());
        h.put(&sent.nanos.to_le_bytes());
        let Ok(mut chunk) = self.producer.write_chunk(HEADER + ex.query.len() + response.len())
        else {
            return false;
        };
        let (a, b) = chunk.as_mut_slices();
        let mut w = Cursor { a, b, at: 0 };
        w.put(&header);
        w.put(ex.query);
        w.put(response);
        chunk.commit_all();
        true
    }

    /// True when more than a quarter of the ring is in use: time to wake the writer.
    pub fn filling(&self) -> bool {
        self.producer.slots() < self.capacity - self.capacity / 4
    }
}

/// The writer's end.
pub struct Receiver {
    consumer: Consumer<u8>,
}

impl Receiver {
    /// Takes the next record into `r` (reusing its buffers); `false` when the ring is empty.
    pub fn next(&mut self, r: &mut Record) -> bool {
        let mut header = [0u8; HEADER];
        if self.consumer.pop_entire_slice(&mut header).is_err() {
            return false;
        }
        let mut h = Reader { bytes: &header, at: 0 };
        let flags = h.take::<1>()[0];
        let qlen = usize::from(u16::from_le_bytes(h.take()));
        let rlen = usize::from(u16::from_le_bytes(h.take()));
        let client_port = u16::from_le_bytes(h.take());
        let server_port = u16::from_le_bytes(h.take());
        let client = address(h.take(), flags & CLIENT_V6 != 0);
        let server = address(h.take(), flags & SERVER_V6 != 0);
        r.query_time =
            Time { secs: u64::from_le_bytes(h.take()), nanos: u32::from_le_bytes(h.take()) };
        let sent = Time { secs: u64::from_le_bytes(h.take()), nanos: u32::from_le_bytes(h.take()) };
        r.transport = if flags & TCP != 0 { Transport::Tcp } else { Transport::Udp };
        r.client = SocketAddr::new(client, client_port);
        r.server = SocketAddr::new(server, server_port);
        r.response_time = (flags & ANSWERED != 0).then_some(sent);
        // The producer commits a record whole: its bytes are there with its header.
        r.query.resize(qlen, 0);
        r.response.resize(rlen, 0);
        let complete = self.consumer.pop_entire_slice(&mut r.query).is_ok()
            && self.consumer.pop_entire_slice(&mut r.response).is_ok();
        debug_assert!(complete, "a record is committed whole");
        complete
    }

    /// True when the producer is gone and everything it wrote has been taken.
    pub fn finished(&self) -> bool {
        self.consumer.is_abandoned() && self.consumer.is_empty()
    }
}

fn octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut o = [0u8; 16];
            o[..4].copy_from_slice(&v4.octets());
            o
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn address(o: [u8; 16], v6: bool) -> IpAddr {
    if v6 { Ipv6Addr::from(o).into() } else { Ipv4Addr::new(o[0], o[1], o[2], o[3]).into() }
}

/// Writes consecutive pieces into the two halves of a ring chunk (the second holds what
/// wraps around to the start of the ring).
struct Cursor<'a> {
    a: &'a mut [u8],
    b: &'a mut [u8],
    at: usize,
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let mut bytes = bytes;
        if self.at < self.a.len() {
            let n = bytes.len().min(self.a.len() - self.at);
            self.a[self.at..self.at + n].copy_from_slice(&bytes[..n]);
            self.at += n;
            bytes = &bytes[n..];
        }
        let in_b = self.at - self.a.len().min(self.at);
        self.b[in_b..in_b + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
}

/// Reads consecutive fixed-size fields of a header.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let field = self.bytes[self.at..self.at + N].try_into().expect("N bytes");
        self.at += N;
        field
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange<'a>(query: &'a [u8], response: Option<&'a [u8]>) -> Exchange<'a> {
        Exchange {
            transport: Transport::Udp,
            client: "192.0.2.1:4000".parse().unwrap(),
            server: "[2001:db8::53]:53".parse().unwrap(),
            query,
            query_time: Time { secs: 7, nanos: 8 },
            response: response.map(|r| (r, Time { secs: 9, nanos: 10 })),
        }
    }

    #[test]
    fn records_come_out_as_they_went_in_across_the_wrap() {
        // Small enough that records wrap around the end of the ring many times.
        let (mut tx, mut rx) = ring(HEADER * 3 + 40);
        let mut r = Record::default();
        for round in 0..50u8 {
            let query = vec![round; usize::from(round % 7) + 1];
            let response = vec![round ^ 0xff; usize::from(round % 5) * 3];
            let answered = round % 3 != 0;
            let ex = exchange(&query, answered.then_some(&response[..]));
            assert!(tx.offer(&ex), "round {round}");
            assert!(rx.next(&mut r));
            assert_eq!(r.query, query);
            assert_eq!(r.client, ex.client);
            assert_eq!(r.server, ex.server);
            assert_eq!(r.query_time, Time { secs: 7, nanos: 8 });
            if answered {
                assert_eq!(r.response, response);
                assert_eq!(r.response_time, Some(Time { secs: 9, nanos: 10 }));
            } else {
                assert_eq!((r.response.len(), r.response_time), (0, None));
            }
            assert!(!rx.next(&mut r));
        }
    }

    #[test]
    fn a_full_ring_refuses_and_takes_again_once_read() {
        let (mut tx, mut rx) = ring(2 * (HEADER + 10));
        let q = [1u8; 10];
        assert!(tx.offer(&exchange(&q, None)));
        assert!(tx.filling());
        assert!(tx.offer(&exchange(&q, None)));
        assert!(!tx.offer(&exchange(&q, None)), "full");
        let mut r = Record::default();
        assert!(rx.next(&mut r));
        assert!(tx.offer(&exchange(&q, None)), "room again");
        assert!(!rx.finished());
        drop(tx);
        assert!(!rx.finished(), "records are left");
        assert!(rx.next(&mut r) && rx.next(&mut r));
        assert!(rx.finished());
    }

    #[test]
    fn a_ring_the_writer_let_go_of_refuses() {
        let (mut tx, rx) = ring(4 * (HEADER + 10));
        let q = [1u8; 10];
        assert!(tx.offer(&exchange(&q, None)));
        drop(rx);
        assert!(!tx.offer(&exchange(&q, None)), "nobody would read it");
    }
}
