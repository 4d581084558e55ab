//! Reads a DNS query from wire bytes without allocating.
//!
//! Only what an authoritative server needs is decoded: the header, the one question
//! (lower-cased for lookup, kept raw for echoing, so 0x20 case survives), and the OPT
//! record with its EDNS Client Subnet option, validated per RFC 6891 and RFC 7871 §7.1.
//! Anything malformed becomes FORMERR when a reply is possible, else the packet is dropped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arrayvec::ArrayVec;

use super::cookie::{Cookie, EDNS_COOKIE};
use super::types::{Rcode, Rtype};

pub const EDNS_CLIENT_SUBNET: u16 = 8;

/// The EDNS Client Subnet option of a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ecs {
    pub family: u16,
    pub source: u8,
    pub addr: IpAddr,
}

/// The OPT record of a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edns {
    pub payload: u16,
    pub version: u8,
    pub dnssec_ok: bool,
    /// The CO flag, "Compact Answers OK" (RFC 9824 §4): a signed name that does not exist
    /// may be answered NXDOMAIN with compact denial.
    pub compact_ok: bool,
    pub ecs: Option<Ecs>,
    /// Where the COOKIE option's data is in the query (already checked to be well formed):
    /// kept as a position so that `Edns`, copied around on every query, stays small.
    pub cookie: Option<CookieAt>,
}

/// The position of a COOKIE option's data in the query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieAt {
    pub start: u16,
    pub len: u8,
}

impl CookieAt {
    /// The COOKIE option of `query`, the packet this position was read from.
    pub fn read(self, query: &[u8]) -> Option<Cookie> {
        let start = usize::from(self.start);
        query.get(start..start + usize::from(self.len)).and_then(Cookie::parse)
    }
}

/// A well-formed query.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub id: u16,
    pub rd: bool,
    pub cd: bool,
    /// The question as sent: QNAME, QTYPE, QCLASS.
    pub question: &'a [u8],
    /// QNAME lower-cased, wire format (in the caller's `NameBuf`).
    pub qname: &'a [u8],
    pub qtype: Rtype,
    pub qclass: u16,
    pub edns: Option<Edns>,
}

/// Where `parse` writes the lower-cased QNAME. The caller owns it so that the name is
/// written once, in place: returned inside the result, its 255 bytes would be copied
/// several times per query.
pub type NameBuf = ArrayVec<u8, 255>;

/// What to do with a packet.
#[derive(Clone, Debug)]
pub enum Parsed<'a> {
    Query(Request<'a>),
    /// Reply with only this RCODE, echoing the question when it could be read.
    Error {
        id: u16,
        opcode: u8,
        rd: bool,
        rcode: Rcode,
        question: Option<&'a [u8]>,
        /// The query carried an OPT record, so the reply gets one.
        opt: bool,
    },
    /// No question, only an OPT record with a COOKIE option: the client asks for a server
    /// cookie (RFC 7873 §5.4).
    CookieOnly {
        id: u16,
        rd: bool,
        edns: Edns,
    },
    /// Not worth a reply (too short to hold a header, or itself a response).
    Drop,
}

struct Bad;

pub fn parse<'a>(p: &'a [u8], name: &'a mut NameBuf) -> Parsed<'a> {
    if p.len() < 12 || p[2] & 0x80 != 0 {
        return Parsed::Drop;
    }
    let id = u16::from_be_bytes([p[0], p[1]]);
    let opcode = (p[2] >> 3) & 0x0f;
    let rd = p[2] & 0x01 != 0;
    let count = |i: usize| u16::from_be_bytes([p[i], p[i + 1]]);
    let (qd, an, ns, ar) = (count(4), count(6), count(8), count(10));
    let error = |rcode, question, opt| Parsed::Error { id, opcode, rd, rcode, question, opt };
    if qd == 0 && opcode == 0 {
        return match read_sections(p, 12, an, ns, ar) {
            Ok(Some(edns)) if edns.cookie.is_some() => Parsed::CookieOnly { id, rd, edns },
            Ok(edns) => error(Rcode::FORMERR, None, edns.is_some()),
            Err((Bad, opt)) => error(Rcode::FORMERR, None, opt),
        };
    }
    if qd != 1 {
        let rcode = if opcode == 0 { Rcode::FORMERR } else { Rcode::NOTIMP };
        return error(rcode, None, false);
    }
    let Ok(qend) = read_qname(p, 12, name) else {
        return error(Rcode::FORMERR, None, false);
    };
    if p.len() < qend + 4 {
        return error(Rcode::FORMERR, None, false);
    }
    let question = &p[12..qend + 4];
    if opcode != 0 {
        return error(Rcode::NOTIMP, Some(question), false);
    }
    let qtype = Rtype(u16::from_be_bytes([p[qend], p[qend + 1]]));
    let qclass = u16::from_be_bytes([p[qend + 2], p[qend + 3]]);
    let edns = match read_sections(p, qend + 4, an, ns, ar) {
        Ok(edns) => edns,
        Err((Bad, opt)) => return error(Rcode::FORMERR, Some(question), opt),
    };
    let cd = p[3] & 0x10 != 0;
    Parsed::Query(Request { id, rd, cd, question, qname: name, qtype, qclass, edns })
}

/// Reads the question name (no compression allowed there) into `out`, lower-cased;
/// returns the position after it.
fn read_qname(p: &[u8], start: usize, out: &mut NameBuf) -> Result<usize, Bad> {
    // The labels are checked first and the name then copied and lower-cased in one go,
    // rather than pushed byte by byte.
    let mut pos = start;
    loop {
        let len = *p.get(pos).ok_or(Bad)? as usize;
        if len > 63 || pos + 1 + len - start > 255 {
            return Err(Bad);
        }
        pos += 1 + len;
        if len == 0 {
            break;
        }
    }
    let name = p.get(start..pos).ok_or(Bad)?;
    out.clear();
    out.try_extend_from_slice(name).map_err(|_| Bad)?;
    out.make_ascii_lowercase();
    Ok(pos)
}

/// Skips a possibly compressed name; returns the position after it.
fn skip_name(p: &[u8], mut pos: usize) -> Result<usize, Bad> {
    for _ in 0..128 {
        let len = *p.get(pos).ok_or(Bad)?;
        match len {
            0 => return Ok(pos + 1),
            1..=63 => pos += 1 + len as usize,
            0xc0..=0xff => return p.get(pos + 1).map(|_| pos + 2).ok_or(Bad),
            _ => return Err(Bad),
        }
    }
    Err(Bad)
}

/// Walks answer, authority and additional records; returns the OPT record if any.
/// The error carries whether an OPT was seen, so FORMERR replies can include one.
fn read_sections(
    p: &[u8],
    mut pos: usize,
    an: u16,
    ns: u16,
    ar: u16,
) -> Result<Option<Edns>, (Bad, bool)> {
    let mut edns = None;
    let mut opt_seen = false;
    for i in 0..(u32::from(an) + u32::from(ns) + u32::from(ar)) {
        let start = pos;
        pos = skip_name(p, pos).map_err(|b| (b, opt_seen))?;
        let fixed = p.get(pos..pos + 10).ok_or((Bad, opt_seen))?;
        let rtype = Rtype(u16::from_be_bytes([fixed[0], fixed[1]]));
        let rdlen = u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
        let rdata_at = pos + 10;
        let rdata = p.get(rdata_at..rdata_at + rdlen).ok_or((Bad, opt_seen))?;
        pos += 10 + rdlen;
        if rtype != Rtype::OPT {
            continue;
        }
        let in_additional = i >= u32::from(an) + u32::from(ns);
        if opt_seen || !in_additional || p[start] != 0 {
            return Err((Bad, true));
        }
        opt_seen = true;
        edns = Some(read_opt(fixed, rdata, rdata_at).map_err(|b| (b, true))?);
    }
    Ok(edns)
}

/// Reads the OPT record whose RDATA starts at `rdata_at` in the query.
fn read_opt(fixed: &[u8], rdata: &[u8], rdata_at: usize) -> Result<Edns, Bad> {
    let payload = u16::from_be_bytes([fixed[2], fixed[3]]);
    let version = fixed[5];
    let dnssec_ok = fixed[6] & 0x80 != 0;
    let compact_ok = fixed[6] & 0x40 != 0;
    let mut ecs = None;
    let mut cookie = None;
    let mut pos = 0;
    while pos < rdata.len() {
        let head = rdata.get(pos..pos + 4).ok_or(Bad)?;
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = u16::from_be_bytes([head[2], head[3]]) as usize;
        let data = rdata.get(pos + 4..pos + 4 + len).ok_or(Bad)?;
        pos += 4 + len;
        if code == EDNS_CLIENT_SUBNET {
            if ecs.is_some() {
                return Err(Bad);
            }
            ecs = Some(read_ecs(data)?);
        } else if code == EDNS_COOKIE {
            // RFC 7873 §5.2.2: a malformed or repeated COOKIE option is FORMERR.
            if cookie.is_some() {
                return Err(Bad);
            }
            if !Cookie::valid_len(len) {
                return Err(Bad);
            }
            let start = u16::try_from(rdata_at + pos - len).map_err(|_| Bad)?;
            cookie = Some(CookieAt { start, len: len as u8 });
        }
    }
    Ok(Edns { payload, version, dnssec_ok, compact_ok, ecs, cookie })
}

/// RFC 7871 §6 and §7.1: known family, prefix within the family, exactly
/// ceil(source/8) address bytes, no bits set past the source prefix, scope 0 in queries.
fn read_ecs(data: &[u8]) -> Result<Ecs, Bad> {
    let head = data.get(..4).ok_or(Bad)?;
    let family = u16::from_be_bytes([head[0], head[1]]);
    let (source, scope) = (head[2], head[3]);
    let addr_bytes = &data[4..];
    let max = match family {
        1 => 32,
        2 => 128,
        _ => return Err(Bad),
    };
    if source > max || scope != 0 || addr_bytes.len() != usize::from(source).div_ceil(8) {
        return Err(Bad);
    }
    if let Some(&last) = addr_bytes.last() {
        let used = source % 8;
        if used != 0 && last & (0xff >> used) != 0 {
            return Err(Bad);
        }
    }
    let addr = if family == 1 {
        let mut o = [0u8; 4];
        o[..addr_bytes.len()].copy_from_slice(addr_bytes);
        IpAddr::V4(Ipv4Addr::from(o))
    } else {
        let mut o = [0u8; 16];
        o[..addr_bytes.len()].copy_from_slice(addr_bytes);
        IpAddr::V6(Ipv6Addr::from(o))
    };
    Ok(Ecs { family, source, addr })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &[u8], extra: &[u8], arcount: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0];
        q.extend_from_slice(&arcount.to_be_bytes());
        q.extend_from_slice(name);
        q.extend_from_slice(&[0, 1, 0, 1]);
        q.extend_from_slice(extra);
        q
    }

    fn opt_with(option: &[u8]) -> Vec<u8> {
        let mut o = vec![0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0];
        o.extend_from_slice(&(option.len() as u16).to_be_bytes());
        o.extend_from_slice(option);
        o
    }

    fn ecs_opt(family: u16, source: u8, scope: u8, addr: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 8];
        v.extend_from_slice(&((4 + addr.len()) as u16).to_be_bytes());
        v.extend_from_slice(&family.to_be_bytes());
        v.extend_from_slice(&[source, scope]);
        v.extend_from_slice(addr);
        opt_with(&v)
    }

    const WWW: &[u8] = b"\x03WwW\x07example\x04test\x00";

    fn rcode(p: &Parsed<'_>) -> Option<Rcode> {
        match p {
            Parsed::Error { rcode, .. } => Some(*rcode),
            _ => None,
        }
    }

    #[test]
    fn plain_query_lowercases_and_keeps_raw_question() {
        let q = query(WWW, &[], 0);
        let mut name = NameBuf::new();
        let Parsed::Query(r) = parse(&q, &mut name) else { panic!() };
        assert_eq!(r.qname, b"\x03www\x07example\x04test\x00");
        assert_eq!(&r.question[..4], b"\x03WwW");
        assert_eq!((r.id, r.qtype, r.qclass, r.rd), (0x1234, Rtype::A, 1, true));
        assert!(r.edns.is_none());
    }

    #[test]
    fn ecs_validation_table() {
        // family, source, scope, address bytes, valid?
        let cases: &[(u16, u8, u8, &[u8], bool)] = &[
            (1, 24, 0, &[198, 51, 100], true),
            (1, 0, 0, &[], true),
            (1, 32, 0, &[198, 51, 100, 7], true),
            (2, 56, 0, &[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0x01], true),
            (1, 24, 0, &[198, 51, 100, 0], false), // too many address bytes
            (1, 24, 0, &[198, 51], false),         // too few
            (1, 23, 0, &[198, 51, 101], false),    // bit set past the prefix
            (1, 24, 16, &[198, 51, 100], false),   // scope in a query
            (1, 33, 0, &[1, 2, 3, 4, 5], false),   // prefix too long
            (3, 8, 0, &[1], false),                // unknown family
            (0, 0, 0, &[], false),
        ];
        for (i, (fam, src, scope, addr, ok)) in cases.iter().enumerate() {
            let q = query(WWW, &ecs_opt(*fam, *src, *scope, addr), 1);
            match parse(&q, &mut NameBuf::new()) {
                Parsed::Query(r) => assert!(ok, "case {i} accepted: {:?}", r.edns),
                Parsed::Error { rcode, opt, .. } => {
                    assert!(!ok, "case {i} rejected");
                    assert_eq!((rcode, opt), (Rcode::FORMERR, true));
                }
                other => panic!("case {i}: {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_table() {
        let mut long_label = vec![64u8];
        long_label.extend([b'a'; 64]);
        long_label.push(0);
        let two_opts = [opt_with(&[]), opt_with(&[])].concat();
        let cases: Vec<(Vec<u8>, Option<Rcode>)> = vec![
            (vec![0; 11], None),
            (query(WWW, &[], 0)[..20].to_vec(), Some(Rcode::FORMERR)),
            (query(b"\xc0\x0c", &[], 0), Some(Rcode::FORMERR)),
            (query(&long_label, &[], 0), Some(Rcode::FORMERR)),
            (query(WWW, &two_opts, 2), Some(Rcode::FORMERR)),
            (query(WWW, &opt_with(&[0, 8, 0, 9]), 1), Some(Rcode::FORMERR)),
            (query(WWW, &[], 1), Some(Rcode::FORMERR)),
        ];
        for (i, (pkt, want)) in cases.iter().enumerate() {
            let mut name = NameBuf::new();
            let got = parse(pkt, &mut name);
            assert_eq!(rcode(&got), *want, "case {i}: {got:?}");
        }
        let mut response = query(WWW, &[], 0);
        response[2] |= 0x80;
        assert!(matches!(parse(&response, &mut NameBuf::new()), Parsed::Drop));
        let mut notify = query(WWW, &[], 0);
        notify[2] = 4 << 3;
        assert_eq!(rcode(&parse(&notify, &mut NameBuf::new())), Some(Rcode::NOTIMP));
    }

    #[test]
    fn no_question_is_a_cookie_request_only_with_a_cookie() {
        let no_question = |extra: &[u8], arcount: u16| {
            let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 0, 0, 0, 0, 0];
            q.extend_from_slice(&arcount.to_be_bytes());
            q.extend_from_slice(extra);
            q
        };
        let cookie = opt_with(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
        let q = no_question(&cookie, 1);
        let Parsed::CookieOnly { id, rd, edns } = parse(&q, &mut NameBuf::new()) else { panic!() };
        assert_eq!((id, rd), (0x1234, true));
        assert_eq!(
            edns.cookie.and_then(|at| at.read(&q)).unwrap().client,
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        let cases = [
            (no_question(&[], 0), Some(Rcode::FORMERR)),
            (no_question(&opt_with(&[]), 1), Some(Rcode::FORMERR)),
            (no_question(&opt_with(&[0, 10, 0, 7, 1, 2, 3, 4, 5, 6, 7]), 1), Some(Rcode::FORMERR)),
        ];
        for (i, (pkt, want)) in cases.iter().enumerate() {
            let mut name = NameBuf::new();
            let got = parse(pkt, &mut name);
            assert_eq!(rcode(&got), *want, "case {i}: {got:?}");
        }
    }

    #[test]
    fn edns_fields_and_unknown_options() {
        let mut opt = opt_with(&[0, 99, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]); // unknown, ignored
        opt[6] = 1; // version 1
        opt[7] = 0x80; // DO
        let q = query(WWW, &opt, 1);
        let mut name = NameBuf::new();
        let Parsed::Query(r) = parse(&q, &mut name) else { panic!() };
        let e = r.edns.unwrap();
        assert_eq!((e.payload, e.version, e.dnssec_ok, e.ecs), (1232, 1, true, None));
        assert_eq!(e.cookie, None);
    }
}
