//! Address ranges mapped to values, looked up by binary search, with the ECS scope of the
//! answer: how many leading bits of the client address the lookup result depended on.
//!
//! Used by subnet routing (CIDRs and `start-end` ranges per endpoint) and by the topology
//! of `routing: zone`. Ranges never overlap (validation rejects overlaps), so the one that
//! can hold an address is the last one starting at or before it: O(log n) for any count.

use std::net::IpAddr;

/// An inclusive range of one address family, as integers (IPv4 in the low 32 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Range {
    pub v6: bool,
    pub start: u128,
    pub end: u128,
}

impl Range {
    /// Parses `192.0.2.0/24` (host bits must be clear) or `192.0.2.10-192.0.2.20`.
    pub fn parse(text: &str) -> Result<Range, String> {
        let text = text.trim();
        if let Some((a, b)) = text.split_once('-') {
            let (a, b) = (parse_ip(a)?, parse_ip(b)?);
            if a.is_ipv6() != b.is_ipv6() {
                return Err(format!("range {text:?} mixes IPv4 and IPv6"));
            }
            let (start, end) = (to_int(a), to_int(b));
            if start > end {
                return Err(format!("range {text:?} starts after it ends"));
            }
            return Ok(Range { v6: a.is_ipv6(), start, end });
        }
        let net: ipnet::IpNet = text
            .parse()
            .map_err(|_| format!("{text:?} is neither a CIDR nor a start-end range"))?;
        if net.addr() != net.network() {
            return Err(format!("{text:?} has host bits set (the network is {})", net.trunc()));
        }
        Ok(Range {
            v6: net.addr().is_ipv6(),
            start: to_int(net.network()),
            end: to_int(net.broadcast()),
        })
    }

    fn bits(&self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    pub fn contains(&self, v6: bool, x: u128) -> bool {
        self.v6 == v6 && self.start <= x && x <= self.end
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", from_int(self.v6, self.start), from_int(self.v6, self.end))
    }
}

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim().parse().map_err(|_| format!("{:?} is not an IP address", s.trim()))
}

/// The address as an integer, IPv4 in the low 32 bits.
pub fn to_int(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_int(v6: bool, x: u128) -> IpAddr {
    if v6 { IpAddr::V6(x.into()) } else { IpAddr::V4((x as u32).into()) }
}

/// The result of a lookup: the value whose range holds the address (if any), and the
/// prefix length of the largest block around the address with the same result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit<'a, T> {
    pub value: Option<&'a T>,
    pub scope: u8,
}

/// Non-overlapping ranges with a value each, sorted for binary search.
#[derive(Clone, Debug, Hash)]
pub struct RangeMap<T> {
    /// Sorted by family and start: the IPv4 entries first.
    entries: Vec<(Range, T)>,
    /// The starts of the IPv4 entries, then of the IPv6 ones: searched instead of `entries`
    /// (4 and 16 bytes a range instead of 64), so that a search touches far fewer cache
    /// lines.
    v4_starts: Vec<u32>,
    v6_starts: Vec<u128>,
}

impl<T> Default for RangeMap<T> {
    fn default() -> Self {
        RangeMap { entries: Vec::new(), v4_starts: Vec::new(), v6_starts: Vec::new() }
    }
}

impl<T> RangeMap<T> {
    /// Builds the map; `Err` lists each pair of overlapping ranges (by insertion index).
    pub fn new(mut entries: Vec<(Range, T)>) -> Result<RangeMap<T>, Vec<(Range, Range)>> {
        entries.sort_by_key(|(r, _)| (r.v6, r.start, r.end));
        let overlaps: Vec<(Range, Range)> = entries
            .windows(2)
            .filter(|w| w[0].0.v6 == w[1].0.v6 && w[1].0.start <= w[0].0.end)
            .map(|w| (w[0].0, w[1].0))
            .collect();
        if !overlaps.is_empty() {
            return Err(overlaps);
        }
        let family = |v6| entries.iter().filter(move |(r, _)| r.v6 == v6).map(|(r, _)| r.start);
        let v4_starts = family(false).map(|s| s as u32).collect();
        let v6_starts = family(true).collect();
        Ok(RangeMap { entries, v4_starts, v6_starts })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Finds the range holding `ip` and the scope of that answer.
    pub fn lookup(&self, ip: IpAddr) -> Hit<'_, T> {
        let (v6, x) = (ip.is_ipv6(), to_int(ip));
        let bits = if v6 { 128 } else { 32 };
        // The family's entries, and the index among them of the first that starts after x.
        let (family, after) = if v6 {
            (&self.entries[self.v4_starts.len()..], self.v6_starts.partition_point(|&s| s <= x))
        } else {
            let x = x as u32;
            (&self.entries[..self.v4_starts.len()], self.v4_starts.partition_point(|&s| s <= x))
        };
        let before = after.checked_sub(1).map(|i| &family[i]);
        let next = family.get(after).map(|(r, _)| r.start);
        match before {
            Some((r, value)) if r.contains(v6, x) => {
                Hit { value: Some(value), scope: widest_inside(bits, x, r.start, r.end) }
            }
            prev => {
                // No range holds x: the answer holds for the widest block between the
                // neighbouring ranges.
                let lo = prev.map_or(0, |(r, _)| r.end + 1);
                let hi = next.map_or(max_of(bits), |s| s - 1);
                Hit { value: None, scope: widest_inside(bits, x, lo, hi) }
            }
        }
    }
}

fn max_of(bits: u8) -> u128 {
    if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 }
}

/// The shortest prefix length L such that x's /L block lies within [lo, hi] (the full
/// length when x itself is outside). A block that fits has every smaller block around x
/// fit too, so the widest one is found by bisecting the host bits: 7 or 8 steps instead
/// of up to 129.
fn widest_inside(bits: u8, x: u128, lo: u128, hi: u128) -> u8 {
    let fits = |host_bits: u32| {
        let host = max_of(host_bits as u8);
        (x & !host) >= lo && (x | host) <= hi
    };
    // fits(ok) is assumed (it holds unless x is outside, and then nothing fits either);
    // `bad` starts past the largest block.
    let (mut ok, mut bad) = (0u32, u32::from(bits) + 1);
    while bad - ok > 1 {
        let mid = (ok + bad) / 2;
        if fits(mid) { ok = mid } else { bad = mid }
    }
    bits - ok as u8
}

impl Range {
    /// Prefix length when the range is exactly one CIDR block.
    pub fn prefix_len(&self) -> Option<u8> {
        let size = self.end - self.start;
        let host_bits = 128 - size.leading_zeros() as u8;
        let exact =
            size.checked_add(1).is_none_or(|n| n.is_power_of_two()) && self.start & size == 0;
        exact.then(|| self.bits() - host_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(ranges: &[(&str, u32)]) -> RangeMap<u32> {
        RangeMap::new(ranges.iter().map(|(r, v)| (Range::parse(r).unwrap(), *v)).collect()).unwrap()
    }

    #[test]
    fn parse_table() {
        let ok = [
            ("192.0.2.0/24", false, 0xc000_0200, 0xc000_02ff),
            ("198.51.100.10-198.51.100.20", false, 0xc633_640a, 0xc633_6414),
            ("2001:db8::/32", true, 0x2001_0db8 << 96, (0x2001_0db8 << 96) | ((1u128 << 96) - 1)),
            ("0.0.0.0/0", false, 0, 0xffff_ffff),
        ];
        for (text, v6, start, end) in ok {
            assert_eq!(Range::parse(text), Ok(Range { v6, start, end }), "{text}");
        }
        for bad in ["192.0.2.1/24", "10.0.0.9-10.0.0.1", "10.0.0.1-::1", "nope", "10.0.0.0/33"] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lookup_and_scope_table() {
        let m = map(&[
            ("10.0.0.0/8", 1),
            ("192.0.2.0/25", 2),
            ("192.0.2.200-192.0.2.210", 3),
            ("2001:db8::/32", 4),
        ]);
        let cases: &[(&str, Option<u32>, u8)] = &[
            ("10.1.2.3", Some(1), 8),
            ("192.0.2.5", Some(2), 25),
            ("192.0.2.200", Some(3), 29), // 200..207 is a /29 inside the range
            ("192.0.2.130", None, 26),    // 128..191 holds no range
            ("11.0.0.1", None, 8),
            ("2001:db8:1::1", Some(4), 32),
            ("2001:db9::1", None, 32),
            ("::1", None, 3),
            // Past the last range of each family (IPv4 sorts first).
            ("250.0.0.1", None, 3),
            ("ffff::1", None, 1),
        ];
        for (i, (ip, value, scope)) in cases.iter().enumerate() {
            let hit = m.lookup(ip.parse().unwrap());
            assert_eq!(hit.value.copied(), *value, "case {i} {ip}");
            assert_eq!(hit.scope, *scope, "case {i} {ip}");
        }
        // 208 and 209 are in, 210 is the last: 208/31 fits, 208/30 (208-211) does not.
        assert_eq!(m.lookup("192.0.2.208".parse().unwrap()).scope, 31);
        assert_eq!(m.lookup("192.0.2.210".parse().unwrap()).scope, 32);
    }

    #[test]
    fn overlaps_are_reported() {
        let r = |s| Range::parse(s).unwrap();
        let err =
            RangeMap::new(vec![(r("10.0.0.0/8"), 1), (r("10.1.0.0/16"), 2), (r("11.0.0.0/8"), 3)])
                .unwrap_err();
        assert_eq!(err, vec![(r("10.0.0.0/8"), r("10.1.0.0/16"))]);
        assert!(RangeMap::new(vec![(r("10.0.0.0/8"), 1), (r("::/8"), 2)]).is_ok());
    }

    #[test]
    fn large_maps_answer_correctly() {
        let entries: Vec<(Range, u32)> = (0..100_000u32)
            .map(|i| {
                (Range { v6: false, start: u128::from(i) * 256, end: u128::from(i) * 256 + 199 }, i)
            })
            .collect();
        let m = RangeMap::new(entries).unwrap();
        for i in [0u32, 1, 4242, 99_999] {
            let base = i * 256;
            assert_eq!(m.lookup(IpAddr::V4((base + 7).into())).value, Some(&i));
            assert_eq!(m.lookup(IpAddr::V4((base + 230).into())).value, None);
        }
    }

    /// The bisection gives what trying every prefix length gives.
    #[test]
    fn widest_inside_matches_trying_every_length() {
        let linear = |bits: u8, x: u128, lo: u128, hi: u128| {
            (0..=bits)
                .find(|&len| {
                    let host = if len == bits { 0 } else { max_of(bits - len) };
                    let start = x & !host & max_of(bits);
                    start >= lo && (start | host) <= hi
                })
                .unwrap_or(bits)
        };
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for bits in [32u8, 128] {
            for _ in 0..20_000 {
                let mut r = || rng.random::<u128>() & max_of(bits);
                let (mut a, mut b, x) = (r(), r(), r());
                if a > b {
                    std::mem::swap(&mut a, &mut b);
                }
                // Bounds near x as often as far from it.
                let (lo, hi) = if rng.random() {
                    (a, b)
                } else {
                    (x.saturating_sub(a % 300), x.saturating_add(b % 300))
                };
                assert_eq!(
                    widest_inside(bits, x, lo, hi),
                    linear(bits, x, lo, hi),
                    "{bits} {x} {lo} {hi}"
                );
            }
        }
    }

    #[test]
    fn cidr_prefix_len() {
        assert_eq!(Range::parse("192.0.2.0/24").unwrap().prefix_len(), Some(24));
        assert_eq!(Range::parse("0.0.0.0/0").unwrap().prefix_len(), Some(0));
        assert_eq!(Range::parse("::/0").unwrap().prefix_len(), Some(0));
        assert_eq!(Range::parse("10.0.0.1-10.0.0.2").unwrap().prefix_len(), None);
    }
}
