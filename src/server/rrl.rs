//! Response rate limiting, as BIND, NSD and Knot do it: each client network (IPv4 /24, IPv6
//! /56 by default) has a token bucket of UDP answers in a fixed table of atomics, refilled at
//! `rate` a second up to `burst`; without a token, answers are dropped, and every `slip`-th
//! of them goes out truncated (TC, no records) so that a real resolver behind a spoofed
//! flood retries over TCP, which a spoofer cannot. Queries over TCP, from exempt networks or with a valid server cookie are
//! never limited: their source address is proven.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::mix;
use crate::model::snapshot::RateLimit;

/// Buckets in the table: client networks that hash alike share one, which only makes
/// limiting stricter for them. 64 Ki buckets are 512 KiB.
const BUCKETS: usize = 1 << 16;

/// What to do with one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Answer,
    Drop,
    /// Send it truncated: header and question, TC set.
    Slip,
}

/// The counts of every client network, shared by the UDP threads. Kept across reloads.
#[derive(Debug)]
pub struct Limiter {
    /// Per bucket: the second of its last answer (high 32 bits), its tokens (24 bits) and the
    /// answers held back since the last slip (low 8 bits).
    buckets: Box<[AtomicU64]>,
    pub dropped: AtomicU64,
    pub slipped: AtomicU64,
}

impl Default for Limiter {
    fn default() -> Limiter {
        Limiter {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            dropped: AtomicU64::new(0),
            slipped: AtomicU64::new(0),
        }
    }
}

impl Limiter {
    /// Counts one UDP answer to `client` at `now` (Unix seconds) and says what to do with it.
    pub fn check(&self, limit: &RateLimit, client: IpAddr, now: u32) -> Verdict {
        let bucket = &self.buckets[bucket_of(limit, client)];
        // One load and one store: threads racing on a bucket may lose an update, which only
        // makes limiting a little more lenient.
        let seen = bucket.load(Ordering::Relaxed);
        let (last, tokens, held) =
            ((seen >> 32) as u32, (seen >> 8) as u32 & 0xff_ffff, seen as u8);
        // A bucket never used (all zero) starts full.
        let elapsed = if seen == 0 { u32::MAX } else { now.wrapping_sub(last) };
        let refill = u64::from(elapsed.min(u32::MAX / 2)) * u64::from(limit.rate);
        let tokens = (u64::from(tokens) + refill).min(u64::from(limit.burst)) as u32;
        let store = |tokens: u32, held: u8| {
            let packed = u64::from(now) << 32 | u64::from(tokens) << 8 | u64::from(held);
            bucket.store(packed, Ordering::Relaxed);
        };
        if tokens > 0 {
            store(tokens - 1, held);
            return Verdict::Answer;
        }
        let held = held.wrapping_add(1);
        if limit.slip > 0 && u32::from(held) >= limit.slip {
            store(0, 0);
            self.slipped.fetch_add(1, Ordering::Relaxed);
            Verdict::Slip
        } else {
            store(0, held);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            Verdict::Drop
        }
    }
}

/// The bucket of the client's network.
fn bucket_of(limit: &RateLimit, client: IpAddr) -> usize {
    let key = match client {
        IpAddr::V4(a) => {
            let bits = u32::from(a).checked_shr(32 - u32::from(limit.ipv4_prefix)).unwrap_or(0);
            u64::from(bits) << 8 | u64::from(limit.ipv4_prefix)
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a).checked_shr(128 - u32::from(limit.ipv6_prefix)).unwrap_or(0);
            mix(bits as u64 ^ (bits >> 64) as u64) ^ 6
        }
    };
    (mix(key) as usize) & (BUCKETS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(rate: u32, slip: u32) -> RateLimit {
        let burst = rate;
        RateLimit {
            rate,
            burst,
            slip,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            exempt: Default::default(),
        }
    }

    fn verdicts(l: &Limiter, lim: &RateLimit, client: &str, now: u32, n: usize) -> Vec<Verdict> {
        (0..n).map(|_| l.check(lim, client.parse().unwrap(), now)).collect()
    }

    #[test]
    fn rate_then_slip_every_nth_then_a_new_second() {
        use Verdict::*;
        let l = Limiter::default();
        let lim = limit(3, 2);
        let got = verdicts(&l, &lim, "192.0.2.1", 100, 8);
        assert_eq!(got, [Answer, Answer, Answer, Drop, Slip, Drop, Slip, Drop]);
        assert_eq!((l.dropped.load(Ordering::Relaxed), l.slipped.load(Ordering::Relaxed)), (3, 2));
        // The same /24 shares the count; another /24 has its own.
        assert_eq!(verdicts(&l, &lim, "192.0.2.200", 100, 1), [Slip]);
        assert_eq!(verdicts(&l, &lim, "192.0.3.1", 100, 3), [Answer, Answer, Answer]);
        // A second later the bucket holds `rate` tokens again, no more.
        assert_eq!(verdicts(&l, &lim, "192.0.2.1", 101, 4), [Answer, Answer, Answer, Drop]);
    }

    #[test]
    fn a_burst_is_allowed_once_then_the_rate() {
        use Verdict::*;
        let l = Limiter::default();
        let lim = RateLimit { burst: 5, ..limit(2, 0) };
        // Full bucket: the burst, then nothing.
        assert_eq!(
            verdicts(&l, &lim, "198.51.100.1", 50, 6),
            [Answer; 5].iter().copied().chain([Drop]).collect::<Vec<_>>()
        );
        // One second refills `rate` tokens.
        assert_eq!(verdicts(&l, &lim, "198.51.100.1", 51, 3), [Answer, Answer, Drop]);
        // A quiet minute refills up to the burst only.
        assert_eq!(
            verdicts(&l, &lim, "198.51.100.1", 111, 6).iter().filter(|v| **v == Answer).count(),
            5
        );
    }

    #[test]
    fn slip_zero_drops_all_and_ipv6_counts_per_prefix() {
        use Verdict::*;
        let l = Limiter::default();
        let lim = limit(1, 0);
        assert_eq!(verdicts(&l, &lim, "2001:db8:0:1::1", 7, 3), [Answer, Drop, Drop]);
        // Same /56, other /64: shared.
        assert_eq!(verdicts(&l, &lim, "2001:db8:0:2::1", 7, 1), [Drop]);
        // Another /56.
        assert_eq!(verdicts(&l, &lim, "2001:db8:0:100::1", 7, 1), [Answer]);
    }
}
