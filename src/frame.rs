//! Ethernet frames carrying UDP over IPv4 or IPv6, as the AF_XDP fast path receives and
//! sends them: reading a query's addressing and payload, and writing the reply's headers
//! around a DNS message. Pure, so every malformed case is a table test.
//!
//! Only what the XDP program lets through needs reading (no VLAN tags, no IPv4 options, no
//! IPv6 extension headers, not a fragment), but a frame is checked again in full here,
//! because the program checks only what it needs to choose.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const ETH_LEN: usize = 14;
pub const IPV4_LEN: usize = 20;
pub const IPV6_LEN: usize = 40;
pub const UDP_LEN: usize = 8;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const UDP: u8 = 17;
/// The hop limit of replies, as Linux sets by default.
const TTL: u8 = 64;

/// A UDP datagram read out of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'f> {
    /// The Ethernet addresses, destination then source, as they arrived.
    pub macs: [u8; 12],
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub payload: &'f [u8],
}

/// Why a frame was not a datagram the fast path answers. The XDP program passes anything it
/// does not recognise to the kernel, so these are frames that were cut short or lie about
/// their lengths: dropped and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than the headers it announces.
    Truncated,
    /// Not IPv4 or IPv6 over untagged Ethernet.
    NotIp,
    /// IPv4 with options, a fragment, or a header checksum that does not add up.
    BadIpv4,
    /// An IPv6 packet whose next header is not UDP.
    NotUdp,
    /// An IP or UDP length that disagrees with the frame.
    BadLength,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The ones'-complement sum of `b` as 16-bit big-endian words, added to `sum`, unfolded.
fn sum16(mut sum: u32, b: &[u8]) -> u32 {
    let mut words = b.chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// Folds a sum to 16 bits and complements it: the Internet checksum (RFC 1071).
fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Reads the UDP datagram in `frame`.
pub fn parse(frame: &[u8]) -> Result<Datagram<'_>, Malformed> {
    if frame.len() < ETH_LEN {
        return Err(Malformed::Truncated);
    }
    let mut macs = [0u8; 12];
    macs.copy_from_slice(&frame[..12]);
    let ip = &frame[ETH_LEN..];
    let (src, dst, udp) = match be16(frame, 12) {
        ETHERTYPE_IPV4 => {
            if ip.len() < IPV4_LEN + UDP_LEN {
                return Err(Malformed::Truncated);
            }
            let fragment = be16(ip, 6) & 0x3fff != 0;
            if ip[0] != 0x45 || fragment || ip[9] != UDP || fold(sum16(0, &ip[..IPV4_LEN])) != 0 {
                return Err(Malformed::BadIpv4);
            }
            // Ethernet pads short frames, so the IP length may be below the frame's.
            let total = usize::from(be16(ip, 2));
            if total < IPV4_LEN + UDP_LEN || total > ip.len() {
                return Err(Malformed::BadLength);
            }
            let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (IpAddr::V4(src), IpAddr::V4(dst), &ip[IPV4_LEN..total])
        }
        ETHERTYPE_IPV6 => {
            if ip.len() < IPV6_LEN + UDP_LEN {
                return Err(Malformed::Truncated);
            }
            if ip[0] >> 4 != 6 || ip[6] != UDP {
                return Err(Malformed::NotUdp);
            }
            let payload = usize::from(be16(ip, 4));
            if payload < UDP_LEN || IPV6_LEN + payload > ip.len() {
                return Err(Malformed::BadLength);
            }
            let octets = |at: usize| -> [u8; 16] { ip[at..at + 16].try_into().unwrap_or([0; 16]) };
            let (src, dst) = (Ipv6Addr::from(octets(8)), Ipv6Addr::from(octets(24)));
            (IpAddr::V6(src), IpAddr::V6(dst), &ip[IPV6_LEN..IPV6_LEN + payload])
        }
        _ => return Err(Malformed::NotIp),
    };
    let len = usize::from(be16(udp, 4));
    if len < UDP_LEN || len > udp.len() {
        return Err(Malformed::BadLength);
    }
    Ok(Datagram {
        macs,
        src: SocketAddr::new(src, be16(udp, 0)),
        dst: SocketAddr::new(dst, be16(udp, 2)),
        payload: &udp[UDP_LEN..len],
    })
}

/// The length of the headers `write_reply` puts before the payload of a reply to `to`.
pub fn headers_len(to: &SocketAddr) -> usize {
    ETH_LEN + if to.is_ipv4() { IPV4_LEN } else { IPV6_LEN } + UDP_LEN
}

/// Writes the headers of a reply to `query` into the front of `frame`, whose bytes from
/// `headers_len(&query.src)` on already hold the `payload_len` bytes of the reply; returns
/// the frame's length. The reply goes back the way the query came: addresses and ports
/// swapped, IPv4 with DF set (replies are never fragmented) and a checksummed UDP header.
/// `frame` must hold the headers and the payload.
pub fn write_reply(query: &Datagram<'_>, payload_len: usize, frame: &mut [u8]) -> usize {
    let start = headers_len(&query.src);
    let udp_len = UDP_LEN + payload_len;
    frame[..6].copy_from_slice(&query.macs[6..]);
    frame[6..12].copy_from_slice(&query.macs[..6]);
    let (ip_at, udp_at) = (ETH_LEN, start - UDP_LEN);
    let mut pseudo;
    match (query.dst.ip(), query.src.ip()) {
        (IpAddr::V4(from), IpAddr::V4(to)) => {
            frame[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let ip = &mut frame[ip_at..ip_at + IPV4_LEN];
            ip[0] = 0x45;
            ip[1] = 0;
            ip[2..4].copy_from_slice(&((IPV4_LEN + udp_len) as u16).to_be_bytes());
            // Identification 0 with DF set, as Linux sends unfragmentable datagrams.
            ip[4..8].copy_from_slice(&[0, 0, 0x40, 0]);
            ip[8] = TTL;
            ip[9] = UDP;
            ip[10..12].fill(0);
            ip[12..16].copy_from_slice(&from.octets());
            ip[16..20].copy_from_slice(&to.octets());
            let check = fold(sum16(0, ip));
            ip[10..12].copy_from_slice(&check.to_be_bytes());
            pseudo = sum16(0, &from.octets());
            pseudo = sum16(pseudo, &to.octets());
        }
        (from, to) => {
            let (from, to) = (v6(from), v6(to));
            frame[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let ip = &mut frame[ip_at..ip_at + IPV6_LEN];
            ip[..4].copy_from_slice(&[0x60, 0, 0, 0]);
            ip[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            ip[6] = UDP;
            ip[7] = TTL;
            ip[8..24].copy_from_slice(&from.octets());
            ip[24..40].copy_from_slice(&to.octets());
            pseudo = sum16(0, &from.octets());
            pseudo = sum16(pseudo, &to.octets());
        }
    }
    pseudo += u32::from(UDP) + udp_len as u32;
    let udp = &mut frame[udp_at..start + payload_len];
    udp[0..2].copy_from_slice(&query.dst.port().to_be_bytes());
    udp[2..4].copy_from_slice(&query.src.port().to_be_bytes());
    udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    udp[6..8].fill(0);
    // A computed 0 goes out as all ones: 0 would mean "no checksum" (RFC 768).
    let check = match fold(sum16(pseudo, udp)) {
        0 => 0xffff,
        c => c,
    };
    udp[6..8].copy_from_slice(&check.to_be_bytes());
    start + payload_len
}

/// IPv6 addresses stay; an IPv4 address in an IPv6 reply cannot happen (a query's source
/// and destination share a family) and maps into IPv6 rather than panicking.
fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const MACS: [u8; 12] = [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];

    /// A query frame built byte by byte, independently of `write_reply`, with a zero UDP
    /// checksum (which receivers must accept for IPv4, and which `parse` does not check).
    pub(crate) fn query_frame(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
        let mut f = MACS.to_vec();
        let udp_len = (UDP_LEN + payload.len()) as u16;
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
                f.extend_from_slice(&(20 + udp_len).to_be_bytes());
                f.extend_from_slice(&[0, 1, 0, 0, 64, 17, 0, 0]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
                let c = fold(sum16(0, &f[14..34]));
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
                f.extend_from_slice(&udp_len.to_be_bytes());
                f.extend_from_slice(&[17, 64]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
            }
            _ => unreachable!("one family"),
        }
        f.extend_from_slice(&src.port().to_be_bytes());
        f.extend_from_slice(&dst.port().to_be_bytes());
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_header_checksum_matches_the_textbook_example() {
        // The example header of RFC 1071's usual illustration, checksum b861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(fold(sum16(0, &h)), 0xb861);
    }

    #[test]
    fn queries_parse_on_both_families() {
        for (src, dst) in [
            (addr("198.18.0.2:40000"), addr("198.18.0.1:53")),
            (addr("[2001:db8::2]:40000"), addr("[2001:db8::1]:53")),
        ] {
            let f = query_frame(src, dst, b"hello");
            let d = parse(&f).unwrap();
            assert_eq!((d.src, d.dst, d.payload, d.macs), (src, dst, &b"hello"[..], MACS));
        }
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut f = query_frame(addr("198.18.0.2:1"), addr("198.18.0.1:53"), b"x");
        f.resize(60, 0); // the minimum Ethernet frame, padded
        assert_eq!(parse(&f).unwrap().payload, b"x");
    }

    #[test]
    fn malformed_frames_are_told_apart() {
        let v4 = query_frame(addr("198.18.0.2:1"), addr("198.18.0.1:53"), b"abcd");
        let v6 = query_frame(addr("[2001:db8::2]:1"), addr("[2001:db8::1]:53"), b"abcd");
        let edit = |f: &[u8], at: usize, b: u8| {
            let mut f = f.to_vec();
            f[at] = b;
            f
        };
        let cases: Vec<(&str, Vec<u8>, Malformed)> = vec![
            ("no ethertype", v4[..13].to_vec(), Malformed::Truncated),
            ("cut ipv4 header", v4[..30].to_vec(), Malformed::Truncated),
            ("cut ipv6 header", v6[..50].to_vec(), Malformed::Truncated),
            ("arp", edit(&v4, 13, 0x06), Malformed::NotIp),
            ("vlan tag", edit(&v4, 12, 0x81), Malformed::NotIp),
            ("ipv4 options", edit(&v4, 14, 0x46), Malformed::BadIpv4),
            ("bad checksum", edit(&v4, 24, v4[24] ^ 1), Malformed::BadIpv4),
            ("tcp", edit(&v4, 23, 6), Malformed::BadIpv4),
            ("more fragments", edit(&v4, 20, 0x20), Malformed::BadIpv4),
            ("ipv4 longer than frame", v4[..v4.len() - 1].to_vec(), Malformed::BadLength),
            ("ipv6 next header", edit(&v6, 20, 44), Malformed::NotUdp),
            ("ipv6 longer than frame", v6[..v6.len() - 1].to_vec(), Malformed::BadLength),
            ("udp longer than ip", edit(&v6, 14 + 40 + 5, 40), Malformed::BadLength),
            ("udp shorter than its header", edit(&v6, 14 + 40 + 5, 7), Malformed::BadLength),
        ];
        for (what, frame, want) in cases {
            assert_eq!(parse(&frame), Err(want), "{what}");
        }
    }

    #[test]
    fn replies_go_back_the_way_queries_came() {
        for (src, dst) in [
            (addr("198.18.0.2:40000"), addr("198.18.0.1:53")),
            (addr("[2001:db8::2]:40000"), addr("[2001:db8::1]:53")),
        ] {
            let q = query_frame(src, dst, b"question");
            let query = parse(&q).unwrap();
            let mut frame = vec![0xaa; 200];
            let start = headers_len(&src);
            frame[start..start + 6].copy_from_slice(b"answer");
            let len = write_reply(&query, 6, &mut frame);
            let reply = parse(&frame[..len]).unwrap();
            assert_eq!((reply.src, reply.dst, reply.payload), (dst, src, &b"answer"[..]));
            assert_eq!(&reply.macs[..6], &MACS[6..]);
            assert_eq!(&reply.macs[6..], &MACS[..6]);
            // The UDP checksum over the pseudo-header and datagram adds up to all ones.
            let ip = &frame[ETH_LEN..len];
            let (addrs, udp) = match src {
                SocketAddr::V4(_) => (&ip[12..20], &ip[20..]),
                SocketAddr::V6(_) => (&ip[8..40], &ip[40..]),
            };
            let sum = sum16(sum16(u32::from(UDP) + udp.len() as u32, addrs), udp);
            assert_eq!(fold(sum), 0, "{src}");
            assert_ne!(&udp[6..8], &[0, 0]);
        }
    }
}
