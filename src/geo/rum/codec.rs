//! The byte layout the measurement files and etcd records share: little-endian integers and
//! floats, a network as one byte (the prefix length; plus 64 for IPv6) and only the
//! address bytes the prefix covers, region names as length-prefixed UTF-8, and a trailing
//! FNV-1a checksum so that a torn or foreign file is recognised rather than misread.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Why bytes could not be read back.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("not a steerdns measurement record (unknown header)")]
    Foreign,
    #[error("written by a newer steerdns (format {0})")]
    Version(u8),
    #[error("truncated")]
    Truncated,
    #[error("checksum mismatch: the bytes are damaged")]
    Checksum,
    #[error("invalid: {0}")]
    Invalid(&'static str),
}

/// Appends values to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    /// A buffer starting with `magic` and `version`.
    pub fn new(magic: &[u8], version: u8) -> Writer {
        let mut bytes = magic.to_vec();
        bytes.push(version);
        Writer { bytes }
    }

    pub fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }

    pub fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn f32(&mut self, v: f32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// A name of at most 255 bytes (longer ones are cut at a character boundary).
    pub fn name(&mut self, s: &str) {
        let mut end = s.len().min(255);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u8(end as u8);
        self.bytes.extend_from_slice(&s.as_bytes()[..end]);
    }

    /// The names of `regions`, counted (at most 255).
    pub fn names<'a>(&mut self, regions: impl ExactSizeIterator<Item = &'a str>) {
        self.u8(regions.len().min(255) as u8);
        for r in regions.take(255) {
            self.name(r);
        }
    }

    pub fn net(&mut self, net: &IpNet) {
        let len = net.prefix_len();
        let (flag, addr): (u8, Vec<u8>) = match net {
            IpNet::V4(n) => (0, n.addr().octets().to_vec()),
            IpNet::V6(n) => (V6, n.addr().octets().to_vec()),
        };
        self.u8(flag + len);
        self.bytes.extend_from_slice(&addr[..(len as usize).div_ceil(8)]);
    }

    /// The bytes, with the checksum appended.
    pub fn finish(mut self) -> Vec<u8> {
        let sum = fnv1a(&self.bytes);
        self.u64(sum);
        self.bytes
    }
}

/// Encoded rows packed into bodies of at most `limit` bytes, at most `max` bodies: how a
/// record too large for one etcd value is cut into several.
#[derive(Debug)]
pub struct Chunks {
    /// Each body and the number of rows in it.
    bodies: Vec<(Vec<u8>, u32)>,
    limit: usize,
    max: usize,
}

impl Chunks {
    pub fn new(limit: usize, max: usize) -> Chunks {
        Chunks { bodies: vec![(Vec::new(), 0)], limit, max }
    }

    /// Adds one row, in a new body when the last is full; `false` (and nothing added) when
    /// the last is full and there are `max` bodies already.
    pub fn push(&mut self, row: &[u8]) -> bool {
        let last = self.bodies.last().expect("one at least");
        if last.0.len() + row.len() > self.limit {
            if self.bodies.len() >= self.max {
                return false;
            }
            self.bodies.push((Vec::new(), 0));
        }
        let last = self.bodies.last_mut().expect("one at least");
        last.0.extend_from_slice(row);
        last.1 += 1;
        true
    }

    /// Each body (one at least, maybe empty) and the number of rows in it.
    pub fn into_bodies(self) -> Vec<(Vec<u8>, u32)> {
        self.bodies
    }
}

/// Added to an IPv6 network's prefix length in its first byte.
const V6: u8 = 64;

/// The most bytes `Writer::net` writes.
pub const MAX_NET_BYTES: usize = 17;

/// Reads values back, in order.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Checks the checksum, `magic` and the version (at most `version`); returns the
    /// reader after them and the version found.
    pub fn open(
        bytes: &'a [u8],
        magic: &[u8],
        version: u8,
    ) -> Result<(Reader<'a>, u8), DecodeError> {
        if !bytes.starts_with(magic) {
            return Err(DecodeError::Foreign);
        }
        if bytes.len() < magic.len() + 1 + 8 {
            return Err(DecodeError::Truncated);
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        let found = body[magic.len()];
        if found > version {
            return Err(DecodeError::Version(found));
        }
        if fnv1a(body).to_le_bytes() != sum {
            return Err(DecodeError::Checksum);
        }
        Ok((Reader { rest: &body[magic.len() + 1..] }, found))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    pub fn f32(&mut self) -> Result<f32, DecodeError> {
        Ok(f32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    pub fn name(&mut self) -> Result<String, DecodeError> {
        let n = self.u8()? as usize;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Invalid("a name is not UTF-8"))
    }

    pub fn names(&mut self) -> Result<Vec<String>, DecodeError> {
        let n = self.u8()?;
        (0..n).map(|_| self.name()).collect()
    }

    pub fn net(&mut self) -> Result<IpNet, DecodeError> {
        let head = self.u8()?;
        let (v6, len) = if head >= V6 { (true, head - V6) } else { (false, head) };
        let bytes = self.take((len as usize).div_ceil(8))?;
        let net = if v6 {
            let mut a = [0u8; 16];
            a.get_mut(..bytes.len())
                .ok_or(DecodeError::Invalid("prefix too long"))?
                .copy_from_slice(bytes);
            IpNet::new(IpAddr::V6(Ipv6Addr::from(a)), len)
        } else {
            let mut a = [0u8; 4];
            a.get_mut(..bytes.len())
                .ok_or(DecodeError::Invalid("prefix too long"))?
                .copy_from_slice(bytes);
            IpNet::new(IpAddr::V4(Ipv4Addr::from(a)), len)
        };
        let net = net.map_err(|_| DecodeError::Invalid("prefix too long"))?;
        if net.trunc() != net {
            return Err(DecodeError::Invalid("a network has host bits set"));
        }
        Ok(net)
    }

    /// `n` items, each read by `item`.
    pub fn repeat<T>(
        &mut self,
        n: usize,
        mut item: impl FnMut(&mut Reader<'a>) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(item(self)?);
        }
        Ok(out)
    }

    /// A count (u32), then that many items, each read by `item`. Every item takes at least
    /// one byte: a count beyond the bytes left is damage, refused before anything is
    /// allocated for it.
    pub fn list<T>(
        &mut self,
        item: impl FnMut(&mut Reader<'a>) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let count = self.u32()? as usize;
        if count > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        self.repeat(count, item)
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }
}

/// FNV-1a, 64 bits: detects damage, not tampering (the files and keys are the
/// operator's own).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_damage_is_named() {
        let nets =
            ["192.0.2.0/24", "10.0.0.0/8", "0.0.0.0/0", "2001:db8:1::/48", "2001:db8::1/128"];
        let mut w = Writer::new(b"TEST", 1);
        w.u32(7);
        w.f32(12.5);
        w.names(["eu-west", "us-east"].into_iter());
        for n in nets {
            w.net(&n.parse().unwrap());
        }
        let bytes = w.finish();
        // 4 magic + 1 version + 4 + 4 + (1 + 8 + 8) names + (4 + 2 + 1 + 7 + 17) nets + 8 sum.
        assert_eq!(bytes.len(), 4 + 1 + 4 + 4 + 17 + 31 + 8);
        let (mut r, v) = Reader::open(&bytes, b"TEST", 1).unwrap();
        assert_eq!(v, 1);
        assert_eq!((r.u32().unwrap(), r.f32().unwrap()), (7, 12.5));
        assert_eq!(r.names().unwrap(), ["eu-west", "us-east"]);
        for n in nets {
            assert_eq!(r.net().unwrap().to_string(), n);
        }
        assert!(r.is_empty());
        assert_eq!(r.u8(), Err(DecodeError::Truncated));

        let mut damaged = bytes.clone();
        damaged[6] ^= 1;
        assert_eq!(Reader::open(&damaged, b"TEST", 1).unwrap_err(), DecodeError::Checksum);
        assert_eq!(Reader::open(&bytes, b"OTHR", 1).unwrap_err(), DecodeError::Foreign);
        assert_eq!(Reader::open(&bytes, b"TEST", 0).unwrap_err(), DecodeError::Version(1));
        assert_eq!(Reader::open(&bytes[..7], b"TEST", 1).unwrap_err(), DecodeError::Truncated);
    }

    #[test]
    fn rows_fill_bodies_up_to_the_limit_and_the_last_body() {
        let mut c = Chunks::new(10, 2);
        // 4 + 4 fit one body of 10; the third row starts the second; the fifth fits none.
        let pushed: Vec<bool> = [[1u8; 4]; 5].iter().map(|r| c.push(r)).collect();
        assert_eq!(pushed, [true, true, true, true, false]);
        let bodies = c.into_bodies();
        assert_eq!(bodies.iter().map(|(b, n)| (b.len(), *n)).collect::<Vec<_>>(), [(8, 2), (8, 2)]);
        assert_eq!(Chunks::new(10, 2).into_bodies(), [(Vec::new(), 0)]);
    }
}
