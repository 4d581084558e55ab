//! Domain names in the form the query path compares them: lower-cased, uncompressed wire
//! format. Lookups key hash maps by these bytes, so a query name is matched without
//! building a `hickory_proto::rr::Name`.

use std::fmt;
use std::sync::Arc;

use hickory_proto::rr::Name;

/// A lower-cased, uncompressed, absolute wire-format domain name. Shared, not copied, on
/// clone: a reload takes over most profiles, and their names, from the running snapshot.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WireName(Arc<[u8]>);

impl WireName {
    /// Builds the name from hickory's `Name` (made absolute, lower-cased).
    pub fn from_name(name: &Name) -> WireName {
        let mut out = Vec::with_capacity(name.len() + 2);
        for label in name.iter() {
            out.push(label.len() as u8);
            out.extend(label.iter().map(u8::to_ascii_lowercase));
        }
        out.push(0);
        WireName(out.into())
    }

    /// Parses presentation format ("www.example.test."), relative names taken as absolute.
    pub fn parse(text: &str) -> Result<WireName, String> {
        let name = Name::from_ascii(text).map_err(|e| format!("invalid name {text:?}: {e}"))?;
        Ok(WireName::from_name(&name))
    }

    pub fn root() -> WireName {
        WireName(Arc::new([0]))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// True when `self` equals `zone` or lies below it.
    pub fn is_within(&self, zone: &WireName) -> bool {
        suffix_offset(&self.0, &zone.0).is_some()
    }

    /// The parent names from `self` (excluded) up to `zone` (excluded).
    pub fn ancestors_below(&self, zone: &WireName) -> Vec<WireName> {
        let mut out = Vec::new();
        let mut pos = 0;
        loop {
            pos += self.0[pos] as usize + 1;
            if pos >= self.0.len() || self.0[pos..] == *zone.as_bytes() || self.0[pos] == 0 {
                return out;
            }
            out.push(WireName(self.0[pos..].into()));
        }
    }

    pub fn to_name(&self) -> Name {
        Name::from_labels(labels(&self.0)).unwrap_or_else(|_| Name::root())
    }
}

/// Iterates the labels of a wire-format name (without the root label).
pub fn labels(wire: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let len = *wire.get(pos)? as usize;
        if len == 0 {
            return None;
        }
        let label = wire.get(pos + 1..pos + 1 + len)?;
        pos += len + 1;
        Some(label)
    })
}

/// If `suffix` is a label-aligned suffix of `name` (both wire format), its byte offset.
pub fn suffix_offset(name: &[u8], suffix: &[u8]) -> Option<usize> {
    let mut pos = 0;
    while pos < name.len() {
        if name[pos..] == *suffix {
            return Some(pos);
        }
        if name[pos] == 0 {
            return None;
        }
        pos += name[pos] as usize + 1;
    }
    None
}

impl fmt::Display for WireName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        NameText(&self.0).fmt(f)
    }
}

/// A wire-format name borrowed from a message or a record, displayed as text.
pub struct NameText<'a>(pub &'a [u8]);

impl fmt::Display for NameText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut any = false;
        for label in labels(self.0) {
            any = true;
            for &b in label {
                if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'*' {
                    write!(f, "{}", b as char)?;
                } else {
                    write!(f, "\\{b:03}")?;
                }
            }
            f.write_str(".")?;
        }
        if !any {
            f.write_str(".")?;
        }
        Ok(())
    }
}

impl fmt::Debug for WireName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WireName({self})")
    }
}

impl std::borrow::Borrow<[u8]> for WireName {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_lowercases_and_displays() {
        let n = WireName::parse("WWW.Tm.Example.TEST.").unwrap();
        assert_eq!(n.to_string(), "www.tm.example.test.");
        assert_eq!(n.as_bytes()[0], 3);
    }

    #[test]
    fn within_and_suffix() {
        let zone = WireName::parse("tm.example.test.").unwrap();
        let www = WireName::parse("a.www.tm.example.test.").unwrap();
        let other = WireName::parse("xtm.example.test.").unwrap();
        assert!(www.is_within(&zone));
        assert!(zone.is_within(&zone));
        assert!(!other.is_within(&zone));
        assert_eq!(suffix_offset(www.as_bytes(), zone.as_bytes()), Some(6));
        let anc: Vec<String> = www.ancestors_below(&zone).iter().map(|n| n.to_string()).collect();
        assert_eq!(anc, vec!["www.tm.example.test."]);
    }

    #[test]
    fn suffix_offset_finds_the_suffix_only_on_a_label_boundary() {
        let origin: &[u8] = b"\x05bench\x04test\x00";
        let cases: &[(&[u8], Option<usize>)] = &[
            (b"\x05bench\x04test\x00", Some(0)),
            (b"\x02lb\x05bench\x04test\x00", Some(3)),
            (b"\x01a\x02lb\x05bench\x04test\x00", Some(5)),
            // The tail's bytes equal the origin, but inside the label "x\x05bench".
            (b"\x07x\x05bench\x04test\x00", None),
            (b"\x06abench\x04test\x00", None),
            (b"\x02lb\x07example\x00", None),
            (b"\x04test\x00", None),
            (b"\x00", None),
            // A label length jumping past the origin's start, and a root label before it.
            (b"\x3fab\x05bench\x04test\x00", None),
            (b"\x00\x00\x05bench\x04test\x00", None),
        ];
        for (qname, want) in cases {
            assert_eq!(suffix_offset(qname, origin), *want, "{qname:?}");
        }
    }
}
