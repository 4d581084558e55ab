//! Record types and response codes: the numbers on the wire and the names people read.

use std::fmt;

/// A resource record type (RFC 1035 §3.2.2 and later registrations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rtype(pub u16);

impl Rtype {
    pub const A: Rtype = Rtype(1);
    pub const NS: Rtype = Rtype(2);
    pub const CNAME: Rtype = Rtype(5);
    pub const SOA: Rtype = Rtype(6);
    pub const HINFO: Rtype = Rtype(13);
    pub const MX: Rtype = Rtype(15);
    pub const TXT: Rtype = Rtype(16);
    pub const AAAA: Rtype = Rtype(28);
    pub const SRV: Rtype = Rtype(33);
    pub const OPT: Rtype = Rtype(41);
    pub const DS: Rtype = Rtype(43);
    pub const RRSIG: Rtype = Rtype(46);
    pub const NSEC: Rtype = Rtype(47);
    pub const DNSKEY: Rtype = Rtype(48);
    pub const CDS: Rtype = Rtype(59);
    pub const CDNSKEY: Rtype = Rtype(60);
    /// A meta-type that only appears in NSEC bitmaps of compact denial: the name does not
    /// exist (RFC 9824).
    pub const NXNAME: Rtype = Rtype(128);
    pub const IXFR: Rtype = Rtype(251);
    pub const AXFR: Rtype = Rtype(252);
    pub const ANY: Rtype = Rtype(255);

    const NAMES: [(Rtype, &'static str); 20] = [
        (Rtype::A, "A"),
        (Rtype::NS, "NS"),
        (Rtype::CNAME, "CNAME"),
        (Rtype::SOA, "SOA"),
        (Rtype::HINFO, "HINFO"),
        (Rtype::MX, "MX"),
        (Rtype::TXT, "TXT"),
        (Rtype::AAAA, "AAAA"),
        (Rtype::SRV, "SRV"),
        (Rtype::OPT, "OPT"),
        (Rtype::DS, "DS"),
        (Rtype::RRSIG, "RRSIG"),
        (Rtype::NSEC, "NSEC"),
        (Rtype::DNSKEY, "DNSKEY"),
        (Rtype::CDS, "CDS"),
        (Rtype::CDNSKEY, "CDNSKEY"),
        (Rtype::NXNAME, "NXNAME"),
        (Rtype::IXFR, "IXFR"),
        (Rtype::AXFR, "AXFR"),
        (Rtype::ANY, "ANY"),
    ];

    /// The mnemonic of a type steerdns knows, else `None`.
    pub fn name(self) -> Option<&'static str> {
        Rtype::NAMES.iter().find(|(t, _)| *t == self).map(|(_, n)| *n)
    }

    pub fn to_be_bytes(self) -> [u8; 2] {
        self.0.to_be_bytes()
    }
}

/// The mnemonic, or `TYPE<n>` for others (RFC 3597 §5).
impl fmt::Display for Rtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "TYPE{}", self.0),
        }
    }
}

/// A response code, extended ones included (12 bits: 4 in the header, 8 in the OPT record,
/// RFC 6891 §6.1.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rcode(pub u16);

impl Rcode {
    pub const NOERROR: Rcode = Rcode(0);
    pub const FORMERR: Rcode = Rcode(1);
    pub const SERVFAIL: Rcode = Rcode(2);
    pub const NXDOMAIN: Rcode = Rcode(3);
    pub const NOTIMP: Rcode = Rcode(4);
    pub const REFUSED: Rcode = Rcode(5);
    /// Extended: the query's EDNS version is not supported.
    pub const BADVERS: Rcode = Rcode(16);
    /// Extended: the server cookie is missing or invalid, and the server wants one.
    pub const BADCOOKIE: Rcode = Rcode(23);

    const NAMES: [(Rcode, &'static str); 8] = [
        (Rcode::NOERROR, "NOERROR"),
        (Rcode::FORMERR, "FORMERR"),
        (Rcode::SERVFAIL, "SERVFAIL"),
        (Rcode::NXDOMAIN, "NXDOMAIN"),
        (Rcode::NOTIMP, "NOTIMP"),
        (Rcode::REFUSED, "REFUSED"),
        (Rcode::BADVERS, "BADVERS"),
        (Rcode::BADCOOKIE, "BADCOOKIE"),
    ];

    /// The mnemonic of a code steerdns knows, else `None`.
    pub fn name(self) -> Option<&'static str> {
        Rcode::NAMES.iter().find(|(r, _)| *r == self).map(|(_, n)| *n)
    }

    /// The four bits that go in the header.
    pub fn header_bits(self) -> u8 {
        (self.0 & 0x0f) as u8
    }

    /// The upper eight bits that go in the OPT record.
    pub fn extended_bits(self) -> u8 {
        (self.0 >> 4) as u8
    }

    /// The code from its header and OPT parts.
    pub fn from_parts(header: u8, extended: u8) -> Rcode {
        Rcode(u16::from(extended) << 4 | u16::from(header & 0x0f))
    }
}

/// The mnemonic, or `RCODE<n>` for others.
impl fmt::Display for Rcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "RCODE{}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        let types =
            [(Rtype::A, "A"), (Rtype::AAAA, "AAAA"), (Rtype::ANY, "ANY"), (Rtype(99), "TYPE99")];
        for (t, want) in types {
            assert_eq!(t.to_string(), want);
        }
        let codes =
            [(Rcode::NXDOMAIN, "NXDOMAIN"), (Rcode::BADVERS, "BADVERS"), (Rcode(9), "RCODE9")];
        for (r, want) in codes {
            assert_eq!(r.to_string(), want);
        }
        assert_eq!((Rcode::BADVERS.header_bits(), Rcode::BADVERS.extended_bits()), (0, 1));
        assert_eq!(Rcode::from_parts(0, 1), Rcode::BADVERS);
        assert_eq!(Rcode::from_parts(3, 0), Rcode::NXDOMAIN);
    }
}
