//! The icmp check: `count` echo requests over an unprivileged ICMP socket (a datagram
//! socket the kernel allows for the groups in net.ipv4.ping_group_range), judged by the
//! share lost and optionally the slowest round trip (`docs/probing.md`).
//!
//! On such sockets the kernel fills in the identifier and the checksum and hands back only
//! the replies to this socket's echoes, without the IP header.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::check::{Reason, classify};
use super::udp::reply_wait;
use crate::model::probe_params::IcmpParams;

/// Bytes of payload after the 8-byte header, as `ping` sends.
const PAYLOAD: usize = 56;

/// Replies larger than a request are not ours; this much is read of each.
const READ_LIMIT: usize = 512;

/// What the kernel says when the process's group may not open ICMP sockets.
pub const FORBIDDEN: &str =
    "the kernel forbids unprivileged ICMP sockets for this group: set net.ipv4.ping_group_range";

/// A prepared icmp check.
pub struct IcmpCheck {
    params: IcmpParams,
    /// How long replies are waited for after the last echo is sent.
    wait: Duration,
}

/// The results of one check's echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Echoes {
    pub sent: u8,
    pub answered: u8,
    /// The slowest answered echo's round trip.
    pub slowest: Duration,
}

impl IcmpCheck {
    pub fn new(params: &IcmpParams, timeout: Duration) -> IcmpCheck {
        IcmpCheck { params: params.clone(), wait: reply_wait(timeout) }
    }

    /// Whether this host lets the process open ICMP sockets at all.
    pub fn setup_error() -> Option<String> {
        match open(Domain::IPV4) {
            Err(e) if forbidden(&e) => Some(FORBIDDEN.to_string()),
            _ => None,
        }
    }

    pub async fn run(&self, ip: IpAddr, source: Option<IpAddr>) -> Result<(), Reason> {
        let echoes = self.echo(ip, source).await?;
        judge(&self.params, echoes)
    }

    async fn echo(&self, ip: IpAddr, source: Option<IpAddr>) -> Result<Echoes, Reason> {
        let domain = if ip.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let socket = open(domain).map_err(|e| open_reason(&e))?;
        if let Some(source) = source {
            socket
                .bind(&SockAddr::from(SocketAddr::new(source, 0)))
                .map_err(|e| Reason::Setup(format!("cannot use source address {source}: {e}")))?;
        }
        socket.connect(&SockAddr::from(SocketAddr::new(ip, 0))).map_err(|e| classify(&e))?;
        let socket =
            UdpSocket::from_std(std::net::UdpSocket::from(socket)).map_err(|e| classify(&e))?;
        let request_type = if ip.is_ipv4() { 8 } else { 128 };
        let reply_type = if ip.is_ipv4() { 0 } else { 129 };
        // A random base sequence: replies to an earlier check's late echoes are not counted.
        let base: u16 = rand::random();
        let count = self.params.count;
        let mut sent_at = Vec::with_capacity(usize::from(count));
        for i in 0..count {
            let seq = base.wrapping_add(u16::from(i));
            socket.send(&request(request_type, seq)).await.map_err(|e| classify(&e))?;
            sent_at.push(Instant::now());
        }
        let deadline = Instant::now() + self.wait;
        let mut rtts: Vec<Option<Duration>> = vec![None; usize::from(count)];
        let mut buf = [0u8; READ_LIMIT];
        while rtts.iter().any(Option::is_none) {
            let n = match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
                Err(_) => break,
                // An ICMP error (unreachable) arrives as a receive error: the echo is lost.
                Ok(Err(e)) if e.kind() != io::ErrorKind::WouldBlock => {
                    let r = classify(&e);
                    if r.is_local() {
                        return Err(r);
                    }
                    continue;
                }
                Ok(Err(_)) => continue,
                Ok(Ok(n)) => n,
            };
            let Some(seq) = reply_seq(&buf[..n], reply_type) else { continue };
            let i = usize::from(seq.wrapping_sub(base));
            if let Some(slot @ None) = rtts.get_mut(i) {
                *slot = Some(sent_at[i].elapsed());
            }
        }
        let answered = rtts.iter().flatten();
        Ok(Echoes {
            sent: count,
            answered: rtts.iter().flatten().count() as u8,
            slowest: answered.max().copied().unwrap_or_default(),
        })
    }
}

/// Healthy when at most `max_loss` percent of the echoes went unanswered and, with
/// `max_rtt`, the slowest answered within it.
pub fn judge(p: &IcmpParams, e: Echoes) -> Result<(), Reason> {
    let lost = e.sent - e.answered;
    if e.answered == 0 || u32::from(lost) * 100 > u32::from(p.max_loss_percent) * u32::from(e.sent)
    {
        return Err(Reason::Loss { lost, sent: e.sent });
    }
    match p.max_rtt {
        Some(max) if e.slowest > max => Err(Reason::Rtt { got: e.slowest, max }),
        _ => Ok(()),
    }
}

fn open(domain: Domain) -> io::Result<Socket> {
    let protocol = if domain == Domain::IPV4 { Protocol::ICMPV4 } else { Protocol::ICMPV6 };
    let socket = Socket::new(domain, Type::DGRAM, Some(protocol))?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

fn forbidden(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))
}

fn open_reason(e: &io::Error) -> Reason {
    if forbidden(e) { Reason::Setup(FORBIDDEN.to_string()) } else { classify(e) }
}

/// An echo request: type, code 0, checksum and identifier left to the kernel, sequence.
fn request(kind: u8, seq: u16) -> [u8; 8 + PAYLOAD] {
    let mut packet = [0u8; 8 + PAYLOAD];
    packet[0] = kind;
    packet[6..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in packet[8..].iter_mut().enumerate() {
        *b = i as u8;
    }
    packet
}

/// The sequence number of an echo reply.
fn reply_seq(packet: &[u8], reply_type: u8) -> Option<u16> {
    match packet {
        [t, 0, _, _, _, _, s0, s1, ..] if *t == reply_type => Some(u16::from_be_bytes([*s0, *s1])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_and_rtt_table() {
        let ms = Duration::from_millis;
        let p = |max_loss_percent, max_rtt| IcmpParams { count: 3, max_loss_percent, max_rtt };
        let e = |answered, slowest| Echoes { sent: 3, answered, slowest: ms(slowest) };
        let cases: Vec<(IcmpParams, Echoes, &str)> = vec![
            (p(67, None), e(3, 5), "ok"),
            (p(67, None), e(1, 5), "ok"),
            (p(66, None), e(1, 5), "2 of 3 echoes lost"),
            (p(67, None), e(0, 0), "3 of 3 echoes lost"),
            (p(0, None), e(2, 5), "1 of 3 echoes lost"),
            // One of three is 33.3 %: above 33, within 34.
            (p(34, None), e(2, 5), "ok"),
            (p(33, None), e(2, 5), "1 of 3 echoes lost"),
            // Every loss tolerated still needs one answer.
            (p(99, None), e(0, 0), "3 of 3 echoes lost"),
            (p(67, Some(ms(10))), e(3, 10), "ok"),
            (p(67, Some(ms(10))), e(3, 11), "round trip 11ms, above max_rtt 10ms"),
        ];
        for (params, echoes, want) in cases {
            let got = judge(&params, echoes).map_or_else(|r| r.to_string(), |()| "ok".to_string());
            assert_eq!(got, want, "{params:?} {echoes:?}");
        }
    }

    #[test]
    fn replies_are_read_by_type_and_sequence() {
        let mut reply = request(0, 0x1234);
        assert_eq!(reply_seq(&reply, 0), Some(0x1234));
        assert_eq!(reply_seq(&reply, 129), None);
        reply[1] = 1;
        assert_eq!(reply_seq(&reply, 0), None, "a code other than 0 is no echo reply");
        assert_eq!(reply_seq(&reply[..7], 0), None);
    }
}
