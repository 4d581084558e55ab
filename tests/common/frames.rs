//! Ethernet frames carrying one UDP datagram, as a network card hands them to the AF_XDP
//! fast path. The headers are written by etherparse, independently of steerdns's own frame
//! code; the fields are the caller's, so that a frame can also carry a VLAN tag or lie
//! about its IPv4 length or checksum, as no socket would send it.

use std::net::{IpAddr, SocketAddr};

use etherparse::{
    EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, SingleVlanHeader,
    UdpHeader, VlanId, VlanPcp,
};

/// The hop limit of every frame, as Linux sets by default.
const TTL: u8 = 64;

/// A UDP datagram in an Ethernet frame, its header fields as given.
#[derive(Clone, Debug)]
pub struct UdpFrame {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    /// The VLAN id of an 802.1Q tag before the EtherType; `None`: untagged.
    pub vlan: Option<u16>,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The IPv4 header's total length when it is to lie; `None`: the true one.
    pub ipv4_total_len: Option<u16>,
    /// Whether the IPv4 header checksum adds up.
    pub good_checksum: bool,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

impl UdpFrame {
    /// A well-formed, untagged frame from `src` to `dst` (one family) carrying `payload`,
    /// between the locally administered addresses 02:00:00:00:00:02 (source) and
    /// 02:00:00:00:00:01 (destination).
    pub fn new(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> UdpFrame {
        UdpFrame {
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            src,
            dst,
            ipv4_total_len: None,
            good_checksum: true,
            payload: payload.to_vec(),
        }
    }

    /// The frame's bytes: IPv4 with identification 1 and no flags, or IPv6, and UDP with
    /// a zero checksum ("none"), which the fast path does not check.
    pub fn bytes(&self) -> Vec<u8> {
        let udp_len = u16::try_from(UdpHeader::LEN + self.payload.len()).expect("a datagram");
        let ip_type = match self.src.ip() {
            IpAddr::V4(_) => EtherType::IPV4,
            IpAddr::V6(_) => EtherType::IPV6,
        };
        let ether_type = if self.vlan.is_some() { EtherType::VLAN_TAGGED_FRAME } else { ip_type };
        let eth = Ethernet2Header { destination: self.dst_mac, source: self.src_mac, ether_type };
        let mut f = eth.to_bytes().to_vec();
        if let Some(id) = self.vlan {
            let vlan_id = VlanId::try_new(id).expect("a 12-bit VLAN id");
            let tag = SingleVlanHeader {
                pcp: VlanPcp::ZERO,
                drop_eligible_indicator: false,
                vlan_id,
                ether_type: ip_type,
            };
            f.extend_from_slice(&tag.to_bytes());
        }
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let true_len = Ipv4Header::MIN_LEN_U16 + udp_len;
                let mut ip = Ipv4Header {
                    total_len: self.ipv4_total_len.unwrap_or(true_len),
                    identification: 1,
                    dont_fragment: false,
                    time_to_live: TTL,
                    protocol: IpNumber::UDP,
                    source: src.octets(),
                    destination: dst.octets(),
                    ..Ipv4Header::default()
                };
                // A wrong checksum that still differs from the right one in both bytes.
                let spoil = if self.good_checksum { 0 } else { 0x0101 };
                ip.header_checksum = ip.calc_header_checksum() ^ spoil;
                f.extend_from_slice(&ip.to_bytes());
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let ip = Ipv6Header {
                    traffic_class: 0,
                    flow_label: Ipv6FlowLabel::ZERO,
                    payload_length: udp_len,
                    next_header: IpNumber::UDP,
                    hop_limit: TTL,
                    source: src.octets(),
                    destination: dst.octets(),
                };
                f.extend_from_slice(&ip.to_bytes());
            }
            _ => panic!("{} and {} are of two families", self.src, self.dst),
        }
        let udp = UdpHeader {
            source_port: self.src.port(),
            destination_port: self.dst.port(),
            length: udp_len,
            checksum: 0,
        };
        f.extend_from_slice(&udp.to_bytes());
        f.extend_from_slice(&self.payload);
        f
    }
}
