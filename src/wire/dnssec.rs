//! The DNSSEC parts of the wire format an online signer writes: RRSIG RDATA and the data a
//! signature covers (RFC 4034 §3.1 and §6: canonical names, RDATA and RRset order), NSEC
//! type bitmaps (RFC 4034 §4.1.2) and the next name of compact denial (RFC 9824).

use arrayvec::ArrayVec;

use super::types::Rtype;

const CLASS_IN: u16 = 1;

/// The number of labels of a wire-format name, the root not counted (the RRSIG "Labels"
/// field; steerdns signs no wildcards, so it is the owner's own count).
pub fn label_count(name: &[u8]) -> u8 {
    super::name::labels(name).count() as u8
}

/// Appends `name` (uncompressed wire format) lower-cased; returns the position after it in
/// `rdata`, or `None` when the name runs past the end.
fn lower_name(rdata: &[u8], mut pos: usize, out: &mut Vec<u8>) -> Option<usize> {
    loop {
        let len = usize::from(*rdata.get(pos)?);
        let label = rdata.get(pos..pos + 1 + len)?;
        out.extend(label.iter().map(u8::to_ascii_lowercase));
        pos += 1 + len;
        if len == 0 {
            return Some(pos);
        }
    }
}

/// Appends the canonical form of one RDATA (RFC 4034 §6.2, as RFC 6840 §5.1 left it):
/// domain names inside NS, CNAME, PTR, SOA, MX and SRV lower-cased, anything else as is.
/// steerdns stores RDATA uncompressed, so only the case can differ.
pub fn canonical_rdata(rtype: Rtype, rdata: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    // (bytes before the first name, names in a row)
    let (skip, names) = match rtype {
        Rtype::NS | Rtype::CNAME | Rtype(12) => (0, 1),
        Rtype::SOA => (0, 2),
        Rtype::MX => (2, 1),
        Rtype::SRV => (6, 1),
        _ => (0, 0),
    };
    let done = (|| {
        out.extend_from_slice(rdata.get(..skip)?);
        let mut pos = skip;
        for _ in 0..names {
            pos = lower_name(rdata, pos, out)?;
        }
        out.extend_from_slice(rdata.get(pos..)?);
        Some(())
    })();
    if done.is_none() {
        // Not the RDATA of its type: signed as it is.
        out.truncate(start);
        out.extend_from_slice(rdata);
    }
}

/// The RRSIG RDATA fields before the signer's name (RFC 4034 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RrsigHead {
    pub type_covered: Rtype,
    pub algorithm: u8,
    pub labels: u8,
    pub original_ttl: u32,
    pub expiration: u32,
    pub inception: u32,
    pub key_tag: u16,
}

impl RrsigHead {
    pub fn bytes(&self) -> [u8; 18] {
        let mut b = [0u8; 18];
        b[0..2].copy_from_slice(&self.type_covered.to_be_bytes());
        b[2] = self.algorithm;
        b[3] = self.labels;
        b[4..8].copy_from_slice(&self.original_ttl.to_be_bytes());
        b[8..12].copy_from_slice(&self.expiration.to_be_bytes());
        b[12..16].copy_from_slice(&self.inception.to_be_bytes());
        b[16..18].copy_from_slice(&self.key_tag.to_be_bytes());
        b
    }
}

/// Reused space for the canonical RRset of one signature: the canonical RDATA of every
/// record end to end, and where each starts and ends. Kept by the caller (one per thread on
/// the query path), so that once its buffers have grown to the largest RRset signed, making
/// a signature allocates nothing.
#[derive(Debug, Default)]
pub struct Canonical {
    rdata: Vec<u8>,
    spans: Vec<(u32, u32)>,
}

impl Canonical {
    /// Space for RRsets of up to `records` records and `bytes` bytes of RDATA without
    /// growing.
    pub fn with_capacity(records: usize, bytes: usize) -> Canonical {
        Canonical { rdata: Vec::with_capacity(bytes), spans: Vec::with_capacity(records) }
    }
}

/// The data an RRSIG's signature covers (RFC 4034 §3.1.8.1): its RDATA up to the signature
/// (the signer's name lower-cased), then every RR of the set in canonical form — owner
/// lower-cased, the original TTL, canonical RDATA — sorted by RDATA, duplicates once.
/// `owner` and `signer` are uncompressed wire-format names; `rdatas` yields every record of
/// the set, however many.
pub fn signed_data<'r>(
    head: &RrsigHead,
    signer: &[u8],
    owner: &[u8],
    rdatas: impl Iterator<Item = &'r [u8]>,
    canonical: &mut Canonical,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&head.bytes());
    out.extend(signer.iter().map(u8::to_ascii_lowercase));
    let Canonical { rdata, spans } = canonical;
    rdata.clear();
    spans.clear();
    for rd in rdatas {
        let start = rdata.len();
        canonical_rdata(head.type_covered, rd, rdata);
        spans.push((start as u32, rdata.len() as u32));
    }
    let bytes = |&(a, b): &(u32, u32)| &rdata[a as usize..b as usize];
    // Sorted in place over the spans: `sort_unstable_by` does not allocate.
    spans.sort_unstable_by(|x, y| bytes(x).cmp(bytes(y)));
    spans.dedup_by(|x, y| bytes(x) == bytes(y));
    for span in spans.iter() {
        let rd = bytes(span);
        out.extend(owner.iter().map(u8::to_ascii_lowercase));
        out.extend_from_slice(&head.type_covered.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&head.original_ttl.to_be_bytes());
        out.extend_from_slice(&(rd.len() as u16).to_be_bytes());
        out.extend_from_slice(rd);
    }
}

/// The longest type bitmap written here: four windows (types below 1024).
pub const BITMAP_MAX: usize = 4 * 34;

/// A type bitmap as NSEC carries it.
pub type Bitmap = ArrayVec<u8, BITMAP_MAX>;

/// The NSEC type bitmap of `types` (RFC 4034 §4.1.2): for each window of 256 types that
/// has one, the window number, the length of the bitmap up to its last set bit, the bits.
/// `types` may come in any order and repeat; types of 1024 and above are left out.
pub fn type_bitmap(types: &[Rtype]) -> Bitmap {
    let mut windows = [[0u8; 32]; 4];
    let mut used = [0usize; 4];
    for t in types {
        let (window, low) = (usize::from(t.0 >> 8), usize::from(t.0 & 0xff));
        if window < windows.len() {
            windows[window][low / 8] |= 0x80 >> (low % 8);
            used[window] = used[window].max(low / 8 + 1);
        }
    }
    let mut out = Bitmap::new();
    for (w, bits) in windows.iter().enumerate() {
        if used[w] > 0 {
            out.push(w as u8);
            out.push(used[w] as u8);
            out.try_extend_from_slice(&bits[..used[w]]).expect("within BITMAP_MAX");
        }
    }
    out
}

/// The next name of a compact denial NSEC at `qname` (RFC 9824 §3.1): `\000.<qname>`, the
/// name immediately after it in canonical order. A name too long for the extra label gets
/// itself: the NSEC then covers no other name.
pub fn compact_next_name(qname: &[u8]) -> ArrayVec<u8, 255> {
    let mut out = ArrayVec::new();
    if qname.len() + 2 <= 255 {
        out.extend([1, 0]);
    }
    out.try_extend_from_slice(qname).expect("a name fits 255 bytes");
    out.make_ascii_lowercase();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::unhex;

    #[test]
    fn bitmaps_table() {
        let cases: [(&[Rtype], &str); 5] = [
            // RFC 9824 §3.1: NXDOMAIN (RRSIG, NSEC, NXNAME).
            (
                &[Rtype::RRSIG, Rtype::NSEC, Rtype::NXNAME],
                "00 11 00000000 00030000 00000000 00000000 80",
            ),
            // RFC 4034 §4.3: A MX RRSIG NSEC TYPE1234.
            (&[Rtype::A, Rtype::MX, Rtype::RRSIG, Rtype::NSEC, Rtype(1234)], "00 06 40010000 0003"),
            (&[Rtype::NSEC, Rtype::RRSIG, Rtype::A, Rtype::A], "00 06 40000000 0003"),
            (&[Rtype::AAAA, Rtype::RRSIG, Rtype::NSEC], "00 06 00000008 0003"),
            // CAA (257) in window 1.
            (&[Rtype::RRSIG, Rtype::NSEC, Rtype(257)], "00 06 00000000 0003 01 01 40"),
        ];
        for (types, want) in cases {
            assert_eq!(type_bitmap(types).as_slice(), unhex(want), "{types:?}");
        }
    }

    #[test]
    fn canonical_rdata_lower_cases_names_only() {
        let cases: [(Rtype, &[u8], &[u8]); 5] = [
            (Rtype::CNAME, b"\x03WwW\x02Ex\x00", b"\x03www\x02ex\x00"),
            (Rtype::MX, b"\x00\x0a\x02MX\x00", b"\x00\x0a\x02mx\x00"),
            (
                Rtype::SRV,
                b"\x00\x01\x00\x02\x00\x03\x01S\x00",
                b"\x00\x01\x00\x02\x00\x03\x01s\x00",
            ),
            (Rtype::TXT, b"\x02AB", b"\x02AB"),
            (Rtype::SOA, b"\x01A\x00\x01B\x00XYZ", b"\x01a\x00\x01b\x00XYZ"),
        ];
        for (t, rdata, want) in cases {
            let mut out = Vec::new();
            canonical_rdata(t, rdata, &mut out);
            assert_eq!(out, want, "{t}");
        }
    }

    /// RFC 4034 §3.1.8.1 and §6.3: RRSIG RDATA, then the RRs sorted by canonical RDATA
    /// (shorter first on a common prefix), the owner lower-cased, duplicates once.
    #[test]
    fn signed_data_orders_the_rrset_canonically() {
        let head = RrsigHead {
            type_covered: Rtype::A,
            algorithm: 13,
            labels: 2,
            original_ttl: 60,
            expiration: 0x01020304,
            inception: 0x00010203,
            key_tag: 0xabcd,
        };
        let rdatas: [&[u8]; 4] =
            [&[192, 0, 2, 2], &[192, 0, 2, 1], &[10, 0, 0, 1], &[192, 0, 2, 1]];
        let (mut canonical, mut out) = (Canonical::default(), Vec::new());
        let rdatas = rdatas.iter().copied();
        signed_data(&head, b"\x02EX\x00", b"\x01W\x02ex\x00", rdatas, &mut canonical, &mut out);
        let rr = |a: &str| format!("0177026578 00 0001 0001 0000003c 0004 {a}");
        let want = format!(
            "0001 0d 02 0000003c 01020304 00010203 abcd 02657800 {} {} {}",
            rr("0a000001"),
            rr("c0000201"),
            rr("c0000202")
        );
        assert_eq!(out, unhex(&want));
        assert_eq!(label_count(b"\x01w\x02ex\x00"), 2);
        assert_eq!(label_count(b"\x00"), 0);
    }

    #[test]
    fn compact_next_name_is_the_zero_label_child() {
        assert_eq!(compact_next_name(b"\x01X\x02ex\x00").as_slice(), b"\x01\x00\x01x\x02ex\x00");
        let long = [
            &[63u8][..],
            &[b'a'; 63],
            &[63],
            &[b'a'; 63],
            &[63],
            &[b'a'; 63],
            &[61],
            &[b'a'; 61],
            &[0],
        ]
        .concat();
        assert_eq!(long.len(), 255);
        assert_eq!(compact_next_name(&long).as_slice(), long.as_slice());
    }
}
