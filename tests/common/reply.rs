//! Replies, decoded with hickory-proto (`Reply::msg`) and walked raw (`Wire`) for the
//! things a decoder would normalise away (name case, OPT bytes, extended RCODE, exact ECS
//! bytes).

use std::net::IpAddr;
use std::ops::Deref;

use hickory_proto::op::Message;
use hickory_proto::rr::RData;

use super::dns::{NOERROR, T_OPT};
use super::fixtures::ORIGIN;

/// A reply: the raw bytes, hickory's decoding and a raw walk of the sections.
#[derive(Debug)]
pub struct Reply {
    pub raw: Vec<u8>,
    pub msg: Message,
    pub wire: Wire,
}

impl Deref for Reply {
    type Target = Message;
    fn deref(&self) -> &Message {
        &self.msg
    }
}

impl Reply {
    pub fn new(raw: Vec<u8>) -> Reply {
        let msg = Message::from_vec(&raw)
            .unwrap_or_else(|e| panic!("reply does not decode ({e}): {raw:02x?}"));
        let wire = Wire::parse(&raw).unwrap_or_else(|| panic!("reply does not walk: {raw:02x?}"));
        Reply { raw, msg, wire }
    }

    /// Full RCODE: header bits plus the OPT's extended bits.
    pub fn rcode(&self) -> u16 {
        self.wire.rcode()
    }

    pub fn aa(&self) -> bool {
        self.raw[2] & 0x04 != 0
    }

    pub fn tc(&self) -> bool {
        self.raw[2] & 0x02 != 0
    }

    pub fn ra(&self) -> bool {
        self.raw[3] & 0x80 != 0
    }

    pub fn qr(&self) -> bool {
        self.raw[2] & 0x80 != 0
    }

    /// The answer section as "TYPE value" strings, in order.
    pub fn answer_strings(&self) -> Vec<String> {
        self.msg.answers.iter().map(|r| rdata_string(&r.data)).collect()
    }

    /// A and AAAA addresses of the answer section, in order.
    pub fn addrs(&self) -> Vec<IpAddr> {
        self.msg
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                _ => None,
            })
            .collect()
    }

    /// Asserts NOERROR, AA and exactly one answer; returns it as a string.
    pub fn single(&self) -> String {
        assert_eq!(self.rcode(), NOERROR, "{self:#?}");
        assert!(self.aa(), "AA clear: {self:#?}");
        assert_eq!(self.msg.answers.len(), 1, "{self:#?}");
        rdata_string(&self.msg.answers[0].data)
    }

    /// Asserts a negative answer with `rcode`: AA, no answer, the zone's SOA in authority
    /// with TTL 30 (min(SOA TTL 3600, minimum 30)).
    pub fn assert_negative(&self, rcode: u16) {
        assert_eq!(self.rcode(), rcode, "{self:#?}");
        assert!(self.aa(), "AA clear: {self:#?}");
        assert!(!self.ra(), "RA set: {self:#?}");
        assert!(self.msg.answers.is_empty(), "{self:#?}");
        assert_eq!(self.msg.authorities.len(), 1, "{self:#?}");
        let soa = &self.msg.authorities[0];
        assert!(matches!(soa.data, RData::SOA(_)), "{soa:?}");
        assert_eq!(soa.name.to_ascii().to_lowercase(), ORIGIN, "{soa:?}");
        assert_eq!(soa.ttl, 30, "negative TTL");
    }

    /// The ECS option of the reply's OPT: (family, source, scope, address bytes).
    pub fn ecs(&self) -> Option<(u16, u8, u8, Vec<u8>)> {
        self.wire.ecs()
    }
}

pub fn rdata_string(d: &RData) -> String {
    match d {
        RData::A(a) => format!("A {}", a.0),
        RData::AAAA(a) => format!("AAAA {}", a.0),
        RData::CNAME(c) => format!("CNAME {}", c.0.to_ascii().to_lowercase()),
        RData::NS(n) => format!("NS {}", n.0.to_ascii().to_lowercase()),
        RData::MX(m) => format!("MX {} {}", m.preference, m.exchange.to_ascii().to_lowercase()),
        RData::TXT(t) => format!(
            "TXT {}",
            t.txt_data
                .iter()
                .map(|s| format!("{:?}", String::from_utf8_lossy(s)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => format!("{} {other}", other.record_type()),
    }
}

/// One resource record as found on the wire.
#[derive(Clone, Debug)]
pub struct Rr {
    /// The owner name, decompressed, case as on the wire.
    pub name: Vec<u8>,
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    pub rdata: Vec<u8>,
}

/// A raw walk of a DNS message.
#[derive(Clone, Debug)]
pub struct Wire {
    pub id: u16,
    pub flags: u16,
    pub counts: [u16; 4],
    /// The question section bytes as received (QNAME QTYPE QCLASS), when qdcount is 1.
    pub question: Vec<u8>,
    pub answers: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
}

impl Wire {
    pub fn parse(b: &[u8]) -> Option<Wire> {
        let u16_at =
            |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])) };
        let counts = [u16_at(4)?, u16_at(6)?, u16_at(8)?, u16_at(10)?];
        let mut pos = 12;
        let mut question = Vec::new();
        for _ in 0..counts[0] {
            let (_, end) = read_name(b, pos)?;
            question = b.get(pos..end + 4)?.to_vec();
            pos = end + 4;
        }
        let mut sections: [Vec<Rr>; 3] = Default::default();
        for (s, count) in sections.iter_mut().zip(&counts[1..]) {
            for _ in 0..*count {
                let (name, end) = read_name(b, pos)?;
                let rtype = u16_at(end)?;
                let class = u16_at(end + 2)?;
                let ttl = u32::from_be_bytes(b.get(end + 4..end + 8)?.try_into().ok()?);
                let rdlen = usize::from(u16_at(end + 8)?);
                let rdata = b.get(end + 10..end + 10 + rdlen)?.to_vec();
                pos = end + 10 + rdlen;
                s.push(Rr { name, rtype, class, ttl, rdata });
            }
        }
        if pos != b.len() {
            return None;
        }
        let [answers, authority, additional] = sections;
        Some(Wire {
            id: u16_at(0)?,
            flags: u16_at(2)?,
            counts,
            question,
            answers,
            authority,
            additional,
        })
    }

    pub fn opt(&self) -> Option<&Rr> {
        self.additional.iter().find(|r| r.rtype == T_OPT)
    }

    pub fn rcode(&self) -> u16 {
        let low = self.flags & 0x000f;
        let high = self.opt().map_or(0, |o| (o.ttl >> 24) as u16);
        (high << 4) | low
    }

    /// OPT options as (code, data).
    pub fn opt_options(&self) -> Vec<(u16, Vec<u8>)> {
        let Some(opt) = self.opt() else {
            return Vec::new();
        };
        let d = &opt.rdata;
        let mut out = Vec::new();
        let mut pos = 0;
        while pos + 4 <= d.len() {
            let code = u16::from_be_bytes([d[pos], d[pos + 1]]);
            let len = usize::from(u16::from_be_bytes([d[pos + 2], d[pos + 3]]));
            let data = d[pos + 4..(pos + 4 + len).min(d.len())].to_vec();
            out.push((code, data));
            pos += 4 + len;
        }
        out
    }

    pub fn ecs(&self) -> Option<(u16, u8, u8, Vec<u8>)> {
        let (_, d) = self.opt_options().into_iter().find(|(c, _)| *c == 8)?;
        Some((u16::from_be_bytes([d[0], d[1]]), d[2], d[3], d[4..].to_vec()))
    }
}

/// Reads a possibly compressed name at `pos`; returns (decompressed wire name, end of the
/// name at `pos`). Case is kept.
pub fn read_name(b: &[u8], mut pos: usize) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut end = None;
    for _ in 0..128 {
        let len = *b.get(pos)?;
        match len {
            0 => {
                out.push(0);
                return Some((out, end.unwrap_or(pos + 1)));
            }
            1..=63 => {
                out.extend_from_slice(b.get(pos..pos + 1 + usize::from(len))?);
                pos += 1 + usize::from(len);
            }
            0xc0..=0xff => {
                let target = usize::from(u16::from_be_bytes([len, *b.get(pos + 1)?]) & 0x3fff);
                end.get_or_insert(pos + 2);
                pos = target;
            }
            _ => return None,
        }
    }
    None
}
