//! What one query thread keeps for signing: a fixed-size cache of the signatures it made
//! (those no pre-signing covers: multivalue subsets, denial at queried names) and the
//! budget that bounds how many it may make, so a flood of queries for random names costs
//! a bounded share of the CPU. Owned by the thread, so the query path takes no lock.

use std::time::Instant;

use super::signing::Signature;

/// Signatures one thread keeps (about 90 bytes each).
pub const CACHE_SLOTS: usize = 16384;

/// Signatures a thread may make per millisecond once its burst is spent.
pub const MISSES_PER_MS: u64 = 2;
/// Signatures a thread may make at once after a quiet time.
pub const MISS_BURST: u64 = 200;

/// A two-way set-associative cache: each key may sit in one of two slots; a new signature
/// takes an empty one, else the one signed earlier. Nothing is allocated after `new`.
pub struct SigCache {
    slots: Box<[(u128, Signature)]>,
}

const EMPTY: Signature = Signature { inception: 0, expiration: 0, bytes: [0; 64] };

impl SigCache {
    pub fn new(slots: usize) -> SigCache {
        let slots = slots.next_power_of_two().max(2);
        SigCache { slots: vec![(0, EMPTY); slots].into_boxed_slice() }
    }

    /// The first of the key's two slots.
    fn set(&self, key: u128) -> usize {
        (key as usize) & (self.slots.len() - 2)
    }

    /// The signature under `key` while it is fresh at `now`.
    pub fn get(&self, key: u128, now: u32) -> Option<Signature> {
        let i = self.set(key);
        self.slots[i..i + 2]
            .iter()
            .find(|(k, sig)| *k == key && sig.fresh(now))
            .map(|(_, sig)| *sig)
    }

    pub fn put(&mut self, key: u128, sig: Signature) {
        let i = self.set(key);
        let [a, b] = [&self.slots[i], &self.slots[i + 1]];
        let j = if a.0 == key || a.0 == 0 {
            i
        } else if b.0 == key || b.0 == 0 || b.1.inception < a.1.inception {
            i + 1
        } else {
            i
        };
        self.slots[j] = (key, sig);
    }
}

/// A token bucket of signatures: `per_ms` a millisecond, up to `burst` saved up.
pub struct Budget {
    per_ms: u64,
    burst: u64,
    /// Thousandths of a signature.
    milli: u64,
    last: Option<Instant>,
}

impl Budget {
    pub fn new(per_ms: u64, burst: u64) -> Budget {
        Budget { per_ms, burst, milli: burst * 1000, last: None }
    }

    /// Takes one signature from the budget at `now`; false when none is left.
    pub fn take(&mut self, now: Instant) -> bool {
        if let Some(last) = self.last {
            let micros = now.saturating_duration_since(last).as_micros() as u64;
            self.milli = (self.milli + micros * self.per_ms).min(self.burst * 1000);
        }
        self.last = Some(now);
        if self.milli >= 1000 {
            self.milli -= 1000;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn sig(inception: u32) -> Signature {
        Signature { inception, expiration: inception + 1000, bytes: [inception as u8; 64] }
    }

    #[test]
    fn the_cache_hands_out_fresh_signatures_only_and_is_bounded() {
        let mut c = SigCache::new(100);
        assert_eq!(c.slots.len(), 128);
        c.put(5, sig(1000));
        assert_eq!(c.get(5, 1200), Some(sig(1000)));
        assert_eq!(c.get(5, 1500), None, "half the validity is gone: made again");
        assert_eq!(c.get(6, 1200), None);
        // Two keys share a set; a third replaces the one signed earlier. The cache never
        // grows.
        c.put(5 + 128, sig(1100));
        assert_eq!(c.get(5, 1200), Some(sig(1000)));
        assert_eq!(c.get(5 + 128, 1200), Some(sig(1100)));
        c.put(5 + 256, sig(1150));
        assert_eq!(c.get(5, 1200), None);
        assert_eq!(c.get(5 + 128, 1200), Some(sig(1100)));
        assert_eq!(c.get(5 + 256, 1200), Some(sig(1150)));
        assert_eq!(c.slots.len(), 128);
    }

    #[test]
    fn the_budget_refills_at_its_rate_up_to_its_burst() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut b = Budget::new(2, 5);
        let taken = (0..10).filter(|_| b.take(at(0))).count();
        assert_eq!(taken, 5, "the burst");
        assert!(b.take(at(1)) && b.take(at(1)), "two per millisecond");
        assert!(!b.take(at(1)));
        // A long quiet time saves up no more than the burst.
        let taken = (0..20).filter(|_| b.take(at(1000))).count();
        assert_eq!(taken, 5);
        let taken: usize = (1001..=1100).map(|ms| (0..5).filter(|_| b.take(at(ms))).count()).sum();
        assert_eq!(taken, 200, "100 ms at 2 a millisecond");
    }
}
