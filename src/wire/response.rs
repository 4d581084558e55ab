//! Writes a DNS response straight into a reusable buffer.
//!
//! The question is copied from the query as sent (so 0x20 case echo is free) and owner
//! names inside it are written as compression pointers; record data comes pre-encoded
//! from the zone. Nothing here allocates once the buffer has grown to its working size.

use super::cookie::EDNS_COOKIE;
use super::request::EDNS_CLIENT_SUBNET;
use super::types::{Rcode, Rtype};

/// Payload size we advertise and the largest UDP response we send (DNS flag day 2020).
pub const EDNS_PAYLOAD: u16 = 1232;

const CLASS_IN: u16 = 1;

/// The reply's OPT record.
#[derive(Clone, Copy, Debug, Default)]
pub struct Opt<'a> {
    /// The upper 8 bits of a 12-bit RCODE.
    pub ext_rcode: u8,
    /// The query's DO bit, copied (RFC 3225 §3).
    pub dnssec_ok: bool,
    /// The CO flag, echoed when the reply uses it (RFC 9824 §4).
    pub compact_ok: bool,
    pub ecs: Option<EcsEcho>,
    /// Client cookie and server cookie (RFC 7873).
    pub cookie: Option<&'a [u8]>,
}

/// The EDNS Client Subnet option of a reply: the query's family, source prefix and address,
/// with the scope the answer depended on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EcsEcho {
    pub family: u16,
    pub source: u8,
    pub scope: u8,
    /// The address, of which the first `ceil(source / 8)` bytes are written.
    pub addr: [u8; 16],
}

/// Where an owner name comes from.
#[derive(Clone, Copy, Debug)]
pub enum Owner<'a> {
    /// A name already in the message, at this offset (e.g. 12: the question name).
    At(usize),
    /// An uncompressed wire-format name.
    Wire(&'a [u8]),
}

/// Which section a record goes into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Answer,
    Authority,
    Additional,
}

/// A response under construction.
pub struct Writer<'b> {
    buf: &'b mut Vec<u8>,
    counts: [u16; 3],
}

/// Header fields of a response.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub id: u16,
    pub opcode: u8,
    pub aa: bool,
    pub rd: bool,
    pub cd: bool,
    pub rcode: Rcode,
}

impl<'b> Writer<'b> {
    pub fn new(buf: &'b mut Vec<u8>, h: Header, question: Option<&[u8]>) -> Writer<'b> {
        buf.clear();
        buf.extend_from_slice(&h.id.to_be_bytes());
        let b2 = 0x80 | (h.opcode << 3) | (u8::from(h.aa) << 2) | u8::from(h.rd);
        let b3 = (u8::from(h.cd) << 4) | h.rcode.header_bits();
        buf.extend_from_slice(&[b2, b3, 0, u8::from(question.is_some()), 0, 0, 0, 0, 0, 0]);
        if let Some(q) = question {
            buf.extend_from_slice(q);
        }
        Writer { buf, counts: [0; 3] }
    }

    pub fn record(
        &mut self,
        section: Section,
        owner: Owner<'_>,
        rtype: Rtype,
        ttl: u32,
        rdata: &[u8],
    ) {
        self.owner(owner);
        self.buf.extend_from_slice(&rtype.to_be_bytes());
        self.buf.extend_from_slice(&CLASS_IN.to_be_bytes());
        self.buf.extend_from_slice(&ttl.to_be_bytes());
        self.buf.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(rdata);
        self.bump(section);
    }

    /// A record whose RDATA is written from parts, so it need not be assembled first.
    pub fn record_parts(
        &mut self,
        section: Section,
        owner: Owner<'_>,
        rtype: Rtype,
        ttl: u32,
        parts: &[&[u8]],
    ) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.owner(owner);
        self.buf.extend_from_slice(&rtype.to_be_bytes());
        self.buf.extend_from_slice(&CLASS_IN.to_be_bytes());
        self.buf.extend_from_slice(&ttl.to_be_bytes());
        self.buf.extend_from_slice(&(len as u16).to_be_bytes());
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.bump(section);
    }

    fn owner(&mut self, owner: Owner<'_>) {
        match owner {
            Owner::At(off) => self.buf.extend_from_slice(&(0xc000 | off as u16).to_be_bytes()),
            Owner::Wire(w) => self.buf.extend_from_slice(w),
        }
    }

    fn bump(&mut self, section: Section) {
        let i = section as usize;
        self.counts[i] += 1;
        let at = 6 + 2 * i;
        self.buf[at..at + 2].copy_from_slice(&self.counts[i].to_be_bytes());
    }

    /// Appends the OPT record.
    pub fn opt(&mut self, opt: &Opt<'_>) {
        self.buf.push(0);
        self.buf.extend_from_slice(&Rtype::OPT.to_be_bytes());
        self.buf.extend_from_slice(&EDNS_PAYLOAD.to_be_bytes());
        self.buf.extend_from_slice(&[
            opt.ext_rcode,
            0,
            (u8::from(opt.dnssec_ok) << 7) | (u8::from(opt.compact_ok) << 6),
            0,
        ]);
        let rdlen_at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        if let Some(e) = &opt.ecs {
            let bytes = &e.addr[..usize::from(e.source).div_ceil(8)];
            self.option(
                EDNS_CLIENT_SUBNET,
                &[&e.family.to_be_bytes(), &[e.source, e.scope], bytes],
            );
        }
        if let Some(c) = opt.cookie {
            self.option(EDNS_COOKIE, &[c]);
        }
        let rdlen = (self.buf.len() - rdlen_at - 2) as u16;
        self.buf[rdlen_at..rdlen_at + 2].copy_from_slice(&rdlen.to_be_bytes());
        self.bump(Section::Additional);
    }

    /// One EDNS option: code, length, the data in parts.
    #[inline]
    fn option(&mut self, code: u16, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.buf.extend_from_slice(&code.to_be_bytes());
        self.buf.extend_from_slice(&(len as u16).to_be_bytes());
        for p in parts {
            self.buf.extend_from_slice(p);
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Sets the TC bit.
    pub fn set_truncated(&mut self) {
        self.buf[2] |= 0x02;
    }
}

/// Cuts a written reply down to its header and question, with TC set and no records: the
/// least answer that still tells a client to ask again over TCP. A reply without a whole
/// question is cut to its header.
pub fn cut_to_question(reply: &mut Vec<u8>) {
    if reply.len() < 12 {
        return;
    }
    let mut end = 12;
    if u16::from_be_bytes([reply[4], reply[5]]) == 1 {
        // The question is copied from the query, so its name has no compression pointer.
        while let Some(&len) = reply.get(end) {
            end += 1 + usize::from(len);
            if len == 0 || len > 63 {
                break;
            }
        }
        end += 4;
    }
    if end > reply.len() {
        end = 12;
        reply[4..6].copy_from_slice(&[0, 0]);
    }
    reply.truncate(end);
    reply[2] |= 0x02;
    reply[6..12].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_header_and_question_only() {
        let mut buf = Vec::new();
        let h = Header { id: 7, opcode: 0, aa: true, rd: true, cd: false, rcode: Rcode::NOERROR };
        let question = b"\x03www\x07example\x00\x00\x01\x00\x01";
        let mut w = Writer::new(&mut buf, h, Some(question));
        w.record(Section::Answer, Owner::At(12), Rtype::A, 30, &[192, 0, 2, 1]);
        w.opt(&Opt::default());
        cut_to_question(&mut buf);
        assert_eq!(buf.len(), 12 + question.len());
        assert_eq!(&buf[12..], question);
        assert_eq!(buf[2] & 0x02, 0x02, "TC");
        assert_eq!(buf[4..12], [0, 1, 0, 0, 0, 0, 0, 0]);
    }
}
