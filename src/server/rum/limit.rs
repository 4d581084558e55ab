//! The per-address limit on reports: a token bucket per client address (`burst` tokens,
//! refilled at `reports_per_minute`), so one browser or script cannot flood the aggregate.
//! The table is bounded: when full, buckets that are full again (idle addresses) are
//! dropped; if none is, the whole table is forgotten rather than refusing new addresses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// Addresses tracked at most.
pub const MAX_ADDRESSES: usize = 100_000;

#[derive(Debug)]
pub struct ReportLimiter {
    per_second: f64,
    burst: f64,
    cap: usize,
    buckets: HashMap<IpAddr, (f64, Duration)>,
}

impl ReportLimiter {
    pub fn new(per_minute: u32, burst: u32, cap: usize) -> ReportLimiter {
        let per_second = f64::from(per_minute) / 60.0;
        ReportLimiter {
            per_second,
            burst: f64::from(burst),
            cap: cap.max(1),
            buckets: HashMap::new(),
        }
    }

    /// Whether `addr` may send a report at `now` (time since any fixed epoch); takes a
    /// token when it may.
    pub fn allow(&mut self, addr: IpAddr, now: Duration) -> bool {
        if !self.buckets.contains_key(&addr) && self.buckets.len() >= self.cap {
            let (rate, burst) = (self.per_second, self.burst);
            self.buckets.retain(|_, b| level(*b, now, rate, burst) < burst);
            if self.buckets.len() >= self.cap {
                self.buckets.clear();
            }
        }
        let (rate, burst) = (self.per_second, self.burst);
        let bucket = self.buckets.entry(addr).or_insert((burst, now));
        let tokens = level(*bucket, now, rate, burst);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            true
        } else {
            *bucket = (tokens, now);
            false
        }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// A bucket's tokens at `now`.
fn level((tokens, at): (f64, Duration), now: Duration, rate: f64, burst: f64) -> f64 {
    (tokens + now.saturating_sub(at).as_secs_f64() * rate).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_burst_then_the_rate() {
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        // 60 a minute: one a second, after a burst of 3.
        let mut l = ReportLimiter::new(60, 3, 10);
        let got: Vec<bool> = (0..5).map(|_| l.allow(a, ms(0))).collect();
        assert_eq!(got, [true, true, true, false, false]);
        assert!(l.allow(b, ms(0)), "another address has its own bucket");
        assert!(!l.allow(a, ms(500)));
        assert!(l.allow(a, ms(1000)));
        assert!(!l.allow(a, ms(1100)));
        // A long rest refills only up to the burst.
        let got: Vec<bool> = (0..4).map(|_| l.allow(a, ms(60_000))).collect();
        assert_eq!(got, [true, true, true, false]);
    }

    #[test]
    fn the_table_stays_within_its_cap() {
        let mut l = ReportLimiter::new(60, 2, 4);
        for i in 0..4u8 {
            assert!(l.allow(IpAddr::from([10, 0, 0, i]), ms(0)));
        }
        // All four are still spending their burst: the table is forgotten for a new one.
        assert!(l.allow(IpAddr::from([10, 0, 0, 9]), ms(0)));
        assert_eq!(l.len(), 1);
        for i in 0..3u8 {
            assert!(l.allow(IpAddr::from([10, 0, 1, i]), ms(0)));
        }
        // Later, the idle ones are full again and make room; the busy one stays limited.
        assert!(l.allow(IpAddr::from([10, 0, 0, 9]), ms(0)));
        assert!(!l.allow(IpAddr::from([10, 0, 0, 9]), ms(0)));
        assert!(l.allow(IpAddr::from([10, 0, 2, 0]), ms(1500)));
        assert_eq!(l.len(), 2, "the three idle ones were dropped");
        // The busy one kept its bucket: 1.5 tokens, not a fresh burst of 2.
        assert!(l.allow(IpAddr::from([10, 0, 0, 9]), ms(1500)));
        assert!(!l.allow(IpAddr::from([10, 0, 0, 9]), ms(1500)));
    }
}
