//! DNS cookies (RFC 7873) with interoperable server cookies (RFC 9018): version 1, a
//! timestamp and a SipHash-2-4 over the client cookie, the timestamp and the client's
//! address, keyed by a secret that replicas share, so a cookie one replica gave validates at
//! any of them. During a rotation the previous secret is accepted too.

use std::hash::Hasher;
use std::net::IpAddr;

use siphasher::sip::SipHasher24;

/// The EDNS option code of COOKIE.
pub const EDNS_COOKIE: u16 = 10;

/// Length of a server cookie made here (RFC 9018 §4: version, 3 reserved, timestamp, hash).
pub const SERVER_COOKIE_LEN: usize = 16;

/// A server cookie older than this is replaced by a fresh one in the reply (RFC 9018 §4.3).
const REFRESH_AFTER: u32 = 30 * 60;
/// A server cookie is valid from its timestamp up to an hour later, and from five minutes
/// before it (clock skew between replicas), RFC 9018 §4.3.
const VALID_FOR: u32 = 60 * 60;
const VALID_EARLY: u32 = 5 * 60;

/// The COOKIE option of a query: the client cookie and, when the client has one from us, a
/// server cookie (8 to 32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cookie {
    pub client: [u8; 8],
    server: [u8; 32],
    server_len: u8,
}

impl Cookie {
    /// Reads the option's data: 8 bytes, or 16 to 40 (RFC 7873 §5.2.2); `None` otherwise,
    /// which the caller answers with FORMERR.
    pub fn parse(data: &[u8]) -> Option<Cookie> {
        if !Cookie::valid_len(data.len()) {
            return None;
        }
        let mut cookie = Cookie { client: [0; 8], server: [0; 32], server_len: 0 };
        cookie.client.copy_from_slice(&data[..8]);
        let server = &data[8..];
        cookie.server[..server.len()].copy_from_slice(server);
        cookie.server_len = server.len() as u8;
        Some(cookie)
    }

    /// Whether a COOKIE option of `len` bytes is well formed: a client cookie alone, or
    /// with a server cookie of 8 to 32 bytes.
    pub fn valid_len(len: usize) -> bool {
        len == 8 || (16..=40).contains(&len)
    }

    pub fn server(&self) -> &[u8] {
        &self.server[..usize::from(self.server_len)]
    }
}

/// The keys server cookies are made and checked with: 16 bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Secrets {
    pub current: [u8; 16],
    /// Accepted, never used for new cookies: set it to the old secret while rotating.
    pub previous: Option<[u8; 16]>,
}

impl Secrets {
    /// A secret made at random once per process: used when none is configured, so cookies
    /// work out of the box and survive reloads (but not restarts, nor other replicas).
    pub fn of_this_process() -> Secrets {
        static SECRET: std::sync::OnceLock<[u8; 16]> = std::sync::OnceLock::new();
        Secrets { current: *SECRET.get_or_init(rand::random), previous: None }
    }
}

/// The current time in Unix seconds, as cookie timestamps count it. The coarse clock (the
/// last tick, no hardware read) is enough for a timestamp in seconds and costs next to
/// nothing, so the UDP loop reads it for every batch.
pub fn unix_now() -> u32 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0;
    if ok {
        ts.tv_sec as u32
    } else {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        secs.map_or(0, |d| d.as_secs() as u32)
    }
}

/// What a reply's COOKIE option holds: the client cookie and our server cookie.
pub type ReplyCookie = [u8; 8 + SERVER_COOKIE_LEN];

/// How the server cookie of a query checked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No server cookie: the client has none from us yet.
    ClientOnly,
    /// Made by us (with either secret) and within its validity.
    Valid,
    /// Malformed, made with another secret, for another client or address, or expired.
    Invalid,
}

/// What checking a server cookie found out.
struct Checked {
    verdict: Verdict,
    /// The cookie's timestamp, when it is valid.
    stamp: u32,
    /// Valid and made with the current secret (not the previous one).
    current: bool,
}

impl Secrets {
    /// Checks the server cookie of `cookie`, sent from `src` at `now` (Unix seconds).
    pub fn check(&self, cookie: &Cookie, src: IpAddr, now: u32) -> Verdict {
        self.checked(cookie, src, now).verdict
    }

    fn checked(&self, cookie: &Cookie, src: IpAddr, now: u32) -> Checked {
        let invalid = Checked { verdict: Verdict::Invalid, stamp: 0, current: false };
        let server = cookie.server();
        if server.is_empty() {
            return Checked { verdict: Verdict::ClientOnly, ..invalid };
        }
        let Ok(server) = <&[u8; SERVER_COOKIE_LEN]>::try_from(server) else {
            return invalid;
        };
        if server[..4] != [1, 0, 0, 0] {
            return invalid;
        }
        let stamp = u32::from_be_bytes([server[4], server[5], server[6], server[7]]);
        // Serial-number arithmetic: the timestamp wraps in 2106.
        let age = now.wrapping_sub(stamp);
        if age > VALID_FOR && stamp.wrapping_sub(now) > VALID_EARLY {
            return invalid;
        }
        let matches = |key: &[u8; 16]| make(key, &cookie.client, stamp, src)[8..] == server[8..];
        if matches(&self.current) {
            Checked { verdict: Verdict::Valid, stamp, current: true }
        } else if self.previous.as_ref().is_some_and(matches) {
            Checked { verdict: Verdict::Valid, stamp, current: false }
        } else {
            invalid
        }
    }

    /// The COOKIE option of the reply to `cookie` from `src` at `now`, and how the query's
    /// server cookie checked out: a valid server cookie made with the current secret less
    /// than half an hour ago is sent back as it came; any other gets a new one, so that a
    /// rotation moves clients to the new secret.
    pub fn reply(&self, cookie: &Cookie, src: IpAddr, now: u32) -> (ReplyCookie, Verdict) {
        let mut out = [0u8; 8 + SERVER_COOKIE_LEN];
        out[..8].copy_from_slice(&cookie.client);
        let checked = self.checked(cookie, src, now);
        if checked.current && now.wrapping_sub(checked.stamp) < REFRESH_AFTER {
            out[8..].copy_from_slice(cookie.server());
        } else {
            out[8..].copy_from_slice(&make(&self.current, &cookie.client, now, src));
        }
        (out, checked.verdict)
    }
}

/// A server cookie (RFC 9018 §4.4): version 1, three reserved zero bytes, the timestamp,
/// and SipHash-2-4 over client cookie | version | reserved | timestamp | client address.
fn make(key: &[u8; 16], client: &[u8; 8], stamp: u32, src: IpAddr) -> [u8; SERVER_COOKIE_LEN] {
    let mut out = [0u8; SERVER_COOKIE_LEN];
    out[0] = 1;
    out[4..8].copy_from_slice(&stamp.to_be_bytes());
    let mut h = SipHasher24::new_with_key(key);
    h.write(client);
    h.write(&out[..8]);
    match src {
        IpAddr::V4(a) => h.write(&a.octets()),
        IpAddr::V6(a) => h.write(&a.octets()),
    }
    // SipHash's output is little-endian (RFC 9018 Appendix A agrees).
    out[8..].copy_from_slice(&h.finish().to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::unhex as hex;

    /// RFC 9018 Appendix A.4, the IPv6 example: a cookie made at 1559741817 with the
    /// previous secret is valid after the rotation, and is renewed with the new secret.
    #[test]
    fn rfc9018_ipv6_example_across_a_rotation() {
        let old: [u8; 16] = hex("dd3bdf9344b678b185a6f5cb60fca715").try_into().unwrap();
        let new: [u8; 16] = hex("445536bcd2513298075a5d379663c962").try_into().unwrap();
        let client: [u8; 8] = hex("22681ab97d52c298").try_into().unwrap();
        let addr: IpAddr = "2001:db8:220:1:59de:d0f4:8769:82b8".parse().unwrap();
        let sent = hex("22681ab97d52c298010000005cf7c57926556bd0934c72f8");
        assert_eq!(make(&old, &client, 1559741817, addr).to_vec(), sent[8..]);
        let cookie = Cookie::parse(&sent).unwrap();
        let rotated = Secrets { current: new, previous: Some(old) };
        assert_eq!(rotated.check(&cookie, addr, 1559741961), Verdict::Valid);
        let only_new = Secrets { current: new, previous: None };
        assert_eq!(only_new.check(&cookie, addr, 1559741961), Verdict::Invalid);
        let (reply, verdict) = rotated.reply(&cookie, addr, 1559741961);
        assert_eq!(verdict, Verdict::Valid);
        let want = hex("22681ab97d52c298010000005cf7c609a6bb79d16625507a");
        assert_eq!(reply.to_vec(), want, "renewed with the current secret");
    }

    /// The worked examples of RFC 9018 Appendix A: a cookie made by one implementation is
    /// valid at another with the same secret.
    #[test]
    fn rfc9018_test_vectors() {
        let key: [u8; 16] = hex("e5e973e5a6b2a43f48e7dc849e37bfcf").try_into().unwrap();
        let secrets = Secrets { current: key, previous: None };
        // (client cookie, client address, timestamp, expected server cookie)
        let cases = [
            ("2464c4abcf10c957", "198.51.100.100", 1559731985, "010000005cf79f111f8130c3eee29480"),
            ("2464c4abcf10c957", "198.51.100.100", 1559734385, "010000005cf7a871d4a564a1442aca77"),
            ("fc93fc62807ddb86", "203.0.113.203", 1559734700, "010000005cf7a9acf73a7810aca2381e"),
        ];
        for (client, addr, stamp, want) in cases {
            let client: [u8; 8] = hex(client).try_into().unwrap();
            let addr: IpAddr = addr.parse().unwrap();
            let got = make(&key, &client, stamp, addr);
            assert_eq!(got.to_vec(), hex(want), "{addr}");
            let cookie = Cookie::parse(&[&client[..], &got[..]].concat()).unwrap();
            assert_eq!(secrets.check(&cookie, addr, stamp + 10), Verdict::Valid);
        }
    }

    #[test]
    fn validity_table() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let src: IpAddr = "192.0.2.1".parse().unwrap();
        let client = [7u8; 8];
        let made = |key, stamp| {
            Cookie::parse(&[&client[..], &make(key, &client, stamp, src)[..]].concat()).unwrap()
        };
        let now = 1_800_000_000u32;
        let only_a = Secrets { current: a, previous: None };
        let b_then_a = Secrets { current: b, previous: Some(a) };
        let only_b = Secrets { current: b, previous: None };
        let cases = [
            (only_a, made(&a, now - 10), src, Verdict::Valid),
            (only_a, made(&a, now - VALID_FOR - 1), src, Verdict::Invalid), // expired
            (only_a, made(&a, now + VALID_EARLY - 1), src, Verdict::Valid), // skewed clock
            (only_a, made(&a, now + VALID_EARLY + 1), src, Verdict::Invalid),
            (b_then_a, made(&a, now - 10), src, Verdict::Valid), // rotation: old secret
            (only_b, made(&a, now - 10), src, Verdict::Invalid),
            (only_a, made(&a, now - 10), "192.0.2.2".parse().unwrap(), Verdict::Invalid),
            (only_a, Cookie::parse(&client).unwrap(), src, Verdict::ClientOnly),
            (only_a, Cookie::parse(&[0u8; 20]).unwrap(), src, Verdict::Invalid),
        ];
        for (i, (secrets, cookie, from, want)) in cases.into_iter().enumerate() {
            assert_eq!(secrets.check(&cookie, from, now), want, "case {i}");
        }
        assert!(Cookie::parse(&[0; 7]).is_none());
        assert!(Cookie::parse(&[0; 9]).is_none());
        assert!(Cookie::parse(&[0; 41]).is_none());
    }

    #[test]
    fn a_fresh_valid_cookie_comes_back_unchanged_and_others_are_renewed() {
        let secrets = Secrets { current: [3; 16], previous: None };
        let src: IpAddr = "2001:db8::1".parse().unwrap();
        let now = 1_800_000_000u32;
        let (first, verdict) = secrets.reply(&Cookie::parse(&[9; 8]).unwrap(), src, now);
        assert_eq!(verdict, Verdict::ClientOnly);
        let (again, verdict) = secrets.reply(&Cookie::parse(&first).unwrap(), src, now + 60);
        assert_eq!((again, verdict), (first, Verdict::Valid), "valid and fresh: sent back");
        let (later, _) =
            secrets.reply(&Cookie::parse(&first).unwrap(), src, now + REFRESH_AFTER + 1);
        assert_ne!(later[8..], first[8..], "older than half an hour: renewed");
        assert_eq!(secrets.check(&Cookie::parse(&later).unwrap(), src, now + 3600), Verdict::Valid);
        // After a rotation, a fresh cookie made with the previous secret is valid but renewed.
        let rotated = Secrets { current: [4; 16], previous: Some([3; 16]) };
        let (renewed, verdict) = rotated.reply(&Cookie::parse(&first).unwrap(), src, now + 60);
        assert_eq!(verdict, Verdict::Valid);
        assert_ne!(renewed[8..], first[8..], "moved to the current secret");
        assert_eq!(rotated.check(&Cookie::parse(&renewed).unwrap(), src, now + 60), Verdict::Valid);
    }
}
