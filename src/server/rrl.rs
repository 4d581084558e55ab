//! Response rate limiting, as BIND, NSD and Knot do it: the UDP answers each client network
//! (IPv4 /24, IPv6 /56 by default) gets are counted per second in a fixed table of atomics;
//! past the rate, answers are dropped, and every `slip`-th of them goes out truncated (TC,
//! no records) so that a real resolver behind a spoofed flood retries over TCP, which a
//! spoofer cannot. Queries over TCP, from exempt networks or with a valid server cookie are
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
    /// Per bucket: the second it counts (high 32 bits) and the answers in it (low 32).
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
        // One load and one store: threads racing on a bucket may lose a count, which only
        // makes limiting a little more lenient.
        let seen = bucket.load(Ordering::Relaxed);
        let count = if (seen >> 32) as u32 == now { (seen as u32).saturating_add(1) } else { 1 };
        bucket.store(u64::from(now) << 32 | u64::from(count), Ordering::Relaxed);
        if count <= limit.rate {
            return Verdict::Answer;
        }
        let over = count - limit.rate;
        if limit.slip > 0 && over.is_multiple_of(limit.slip) {
            self.slipped.fetch_add(1, Ordering::Relaxed);
            Verdict::Slip
        } else {
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
        RateLimit { rate, slip, ipv4_prefix: 24, ipv6_prefix: 56, exempt: Default::default() }
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
        // The next second starts over.
        assert_eq!(verdicts(&l, &lim, "192.0.2.1", 101, 3), [Answer, Answer, Answer]);
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
