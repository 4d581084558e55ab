//! The protocol-specific settings of a monitor beyond http, https and tcp: what a dns,
//! udp or icmp probe sends and what it expects back, and where a json or prometheus
//! health feed holds its value (`docs/probing.md`).

use std::time::Duration;

pub use super::reply_pattern::ReplyPattern;

/// What a probe of one protocol needs beyond the common monitor fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProbeParams {
    /// http, https and tcp: everything is in the common fields.
    #[default]
    None,
    Dns(DnsParams),
    Udp(UdpParams),
    Icmp(IcmpParams),
    /// json and prometheus: a pulled health feed.
    Feed(FeedParams),
    Grpc(GrpcParams),
}

/// `protocol: grpc`: the service whose health is asked (empty: the whole server).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GrpcParams {
    pub service: String,
    /// Call over TLS (ALPN h2) rather than plaintext h2c.
    pub tls: bool,
}

impl ProbeParams {
    /// The policy for results without data, for the monitors that can have none.
    pub fn missing(&self) -> Option<MissingData> {
        match self {
            ProbeParams::Feed(f) => Some(f.missing),
            _ => None,
        }
    }
}

/// `protocol: json` or `prometheus`: a URL read at every check and the value judged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FeedParams {
    /// `http://` or `https://`.
    pub url: String,
    pub value: FeedValue,
    /// For a number: when it is healthy. A json status without it is read as a word.
    pub healthy_when: Option<Threshold>,
    pub missing: MissingData,
}

/// Where in the feed the value is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FeedValue {
    /// json: an RFC 6901 pointer (`/status`; empty for the whole document).
    Pointer(String),
    /// prometheus: the one sample with this name and at least these labels.
    Metric { name: String, labels: Vec<(String, String)> },
}

/// `healthy_when: "< 0.8"`: a comparison with a number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    pub op: Comparison,
    pub value: f64,
}

// Finite by validation, so comparing bits is comparing values (0.0 and -0.0 aside).
impl Eq for Threshold {}

impl std::hash::Hash for Threshold {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.op, self.value.to_bits()).hash(h);
    }
}

impl Threshold {
    pub fn holds(&self, x: f64) -> bool {
        match self.op {
            Comparison::Less => x < self.value,
            Comparison::LessOrEqual => x <= self.value,
            Comparison::Greater => x > self.value,
            Comparison::GreaterOrEqual => x >= self.value,
            Comparison::Equal => x == self.value,
            Comparison::NotEqual => x != self.value,
        }
    }

    /// `"< 0.8"` and the like; `None` for anything else.
    pub fn parse(text: &str) -> Option<Threshold> {
        let t = text.trim();
        let ops = [
            ("<=", Comparison::LessOrEqual),
            (">=", Comparison::GreaterOrEqual),
            ("==", Comparison::Equal),
            ("!=", Comparison::NotEqual),
            ("<", Comparison::Less),
            (">", Comparison::Greater),
        ];
        let (rest, op) = ops.iter().find_map(|(s, op)| t.strip_prefix(s).map(|r| (r, *op)))?;
        let value: f64 = rest.trim().parse().ok()?;
        value.is_finite().then_some(Threshold { op, value })
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = match self.op {
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
            Comparison::Equal => "==",
            Comparison::NotEqual => "!=",
        };
        write!(f, "{op} {}", self.value)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Comparison {
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Equal,
    NotEqual,
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

/// `protocol: udp`: a datagram sent and the pattern its reply must match.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UdpParams {
    pub send: Vec<u8>,
    /// None: any reply will do.
    pub expect: Option<ReplyPattern>,
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

/// What a monitor with no data to judge counts as, shared with pushed and file monitors.
pub use super::external::MissingData;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds() {
        let cases: &[(&str, f64, Option<bool>)] = &[
            ("< 0.8", 0.5, Some(true)),
            ("< 0.8", 0.8, Some(false)),
            ("<=0.8", 0.8, Some(true)),
            (">= 1", 1.0, Some(true)),
            ("> 1", 1.0, Some(false)),
            ("== 2", 2.0, Some(true)),
            ("!= 2", 2.0, Some(false)),
            ("  >  -3.5 ", -3.0, Some(true)),
            ("0.8", 0.0, None),
            ("< x", 0.0, None),
            ("< inf", 0.0, None),
            ("=< 1", 0.0, None),
        ];
        for (text, x, want) in cases {
            assert_eq!(Threshold::parse(text).map(|t| t.holds(*x)), *want, "{text:?} {x}");
        }
        assert_eq!(Threshold::parse("<=0.80").unwrap().to_string(), "<= 0.8");
    }

    #[test]
    fn rcode_names() {
        assert_eq!(rcode_text(0), "NOERROR");
        assert_eq!(rcode_text(3), "NXDOMAIN");
        assert_eq!(rcode_text(23), "23");
    }
}
