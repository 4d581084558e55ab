//! The protocol-specific settings of a monitor beyond http, https and tcp: what a dns,
//! udp or icmp probe sends and what it expects back (`docs/probing.md`).

use std::time::Duration;

/// What a probe of one protocol needs beyond the common monitor fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProbeParams {
    /// http, https and tcp: everything is in the common fields.
    #[default]
    None,
    Dns(DnsParams),
    Udp(UdpParams),
    Icmp(IcmpParams),
}

/// `protocol: dns`: one query, its expected RCODE and optionally an answer it must hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DnsParams {
    /// The name asked, in presentation form with the root's dot (`www.example.com.`).
    pub query_name: String,
    /// The query type's number (1 for A).
    pub query_type: u16,
    /// The RCODE the answer must have (0, NOERROR, by default).
    pub expected_rcode: u16,
    /// An address equal to an A/AAAA answer, or text found in an answer's RDATA as
    /// presentation form.
    pub answer_contains: Option<String>,
}

/// `protocol: udp`: a datagram sent and the bytes its reply must contain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UdpParams {
    pub send: Vec<u8>,
    /// Empty: any reply will do.
    pub expect: Vec<u8>,
}

/// `protocol: icmp`: echoes sent per check and the loss and round-trip time tolerated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IcmpParams {
    /// Echo requests per check, 1..=10.
    pub count: u8,
    /// The most echoes that may go unanswered, in percent of `count`.
    pub max_loss_percent: u8,
    /// When set, the slowest answered echo must come back within this long.
    pub max_rtt: Option<Duration>,
}

/// RCODE names as DNS tools print them, with their numbers.
pub const RCODES: [(&str, u16); 11] = [
    ("NOERROR", 0),
    ("FORMERR", 1),
    ("SERVFAIL", 2),
    ("NXDOMAIN", 3),
    ("NOTIMP", 4),
    ("REFUSED", 5),
    ("YXDOMAIN", 6),
    ("YXRRSET", 7),
    ("NXRRSET", 8),
    ("NOTAUTH", 9),
    ("NOTZONE", 10),
];

/// The name of an RCODE, or its number.
pub fn rcode_text(code: u16) -> String {
    RCODES.iter().find(|(_, c)| *c == code).map_or_else(|| code.to_string(), |(n, _)| n.to_string())
}

/// What a monitor with no data to judge counts as (Route 53's insufficient data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MissingData {
    Healthy,
    Unhealthy,
    LastKnown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcode_names() {
        assert_eq!(rcode_text(0), "NOERROR");
        assert_eq!(rcode_text(3), "NXDOMAIN");
        assert_eq!(rcode_text(23), "23");
    }
}
