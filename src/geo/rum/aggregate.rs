//! The recent samples of each client network, per region: the last `SAMPLES_KEPT` of each
//! (network, region) in a fixed ring, so memory per network is fixed and known
//! (`bytes_per_network`). The statistic is the weighted median of the ring's samples that
//! are younger than the window, each weighing 2^(-age / half_life): a median, so one slow
//! page load does not move it; decayed, so recent samples count most.
//!
//! At most `max_networks` networks are kept; a report from one more evicts the network
//! least recently reported (a recency index ordered by a report sequence number, so the
//! order is exact and deterministic). Time is passed in as a `Duration` since any fixed
//! epoch, in whole seconds.

use std::collections::{BTreeMap, HashMap};
use std::mem::size_of;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::settings::Aggregation;
use super::table::MeasuredLatency;

/// Samples kept per (network, region): enough for a stable median, few enough that a
/// network with a handful of regions fits in well under a kilobyte.
pub const SAMPLES_KEPT: usize = 16;

/// One measured round trip: when (seconds since the aggregator's epoch) and how long.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub at: u32,
    pub ms: f32,
}

/// What a figure is computed from: a round trip, its weight, and how many samples it
/// stands for (1 for a sample; a replica's summary of several samples when replicas'
/// figures are merged).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub ms: f32,
    pub weight: f64,
    pub count: u32,
}

/// The last `SAMPLES_KEPT` samples of one (network, region), oldest overwritten first.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Ring {
    samples: [Sample; SAMPLES_KEPT],
    len: u8,
    next: u8,
}

impl Ring {
    fn push(&mut self, s: Sample) {
        self.samples[self.next as usize] = s;
        self.next = ((self.next as usize + 1) % SAMPLES_KEPT) as u8;
        self.len = (self.len + 1).min(SAMPLES_KEPT as u8);
    }

    /// The samples younger than `window` at `now`.
    pub(super) fn live(&self, now: u32, window: u32) -> impl Iterator<Item = Sample> + '_ {
        self.samples[..self.len as usize]
            .iter()
            .copied()
            .filter(move |s| now.saturating_sub(s.at) < window)
    }

    /// Drops the samples no longer live; true when none is left.
    fn expire(&mut self, now: u32, window: u32) -> bool {
        let mut kept = Ring::default();
        for s in self.live(now, window) {
            kept.push(s);
        }
        *self = kept;
        self.len == 0
    }
}

/// One network's rings (one per target, in target order) and when it last reported.
#[derive(Debug)]
struct Network {
    rings: Box<[Ring]>,
    /// The report sequence number of its last report: its key in the recency index.
    seq: u64,
}

/// The samples of every network reported recently. Not thread-safe: the listener keeps it
/// behind a mutex that only report handlers and the publisher take.
#[derive(Debug)]
pub struct Aggregator {
    params: Aggregation,
    regions: usize,
    networks: HashMap<IpNet, Network>,
    /// Report sequence number → network; the first entry is the least recently reported.
    recency: BTreeMap<u64, IpNet>,
    seq: u64,
    evictions: u64,
}

impl Aggregator {
    /// An empty aggregate of `regions` targets.
    pub fn new(params: Aggregation, regions: usize) -> Aggregator {
        Aggregator {
            params,
            regions,
            networks: HashMap::new(),
            recency: BTreeMap::new(),
            seq: 0,
            evictions: 0,
        }
    }

    pub fn params(&self) -> &Aggregation {
        &self.params
    }

    pub fn regions(&self) -> usize {
        self.regions
    }

    /// Networks held now.
    pub fn len(&self) -> usize {
        self.networks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }

    /// Networks evicted to stay within `max_networks`, since the start.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The network `addr` is counted in (an IPv4-mapped IPv6 address as IPv4).
    pub fn network_of(&self, addr: IpAddr) -> IpNet {
        network_of(addr, &self.params)
    }

    /// Stores one report from `addr`: `(column, ms)` pairs, already validated (columns in
    /// range, times positive and finite). Evicts the least recently reported network when a
    /// new one would exceed the cap.
    pub fn record(&mut self, addr: IpAddr, measured: &[(usize, f32)], now: Duration) {
        let net = self.network_of(addr);
        let at = secs(now);
        let n = self.touch(net);
        for &(column, ms) in measured {
            if let Some(ring) = n.rings.get_mut(column) {
                ring.push(Sample { at, ms });
            }
        }
    }

    /// `net`'s entry, made the most recently reported (created, evicting the least
    /// recently reported network when the cap is reached).
    fn touch(&mut self, net: IpNet) -> &mut Network {
        self.seq += 1;
        let seq = self.seq;
        if let Some(n) = self.networks.get_mut(&net) {
            self.recency.remove(&n.seq);
            n.seq = seq;
        } else {
            while self.networks.len() >= self.params.max_networks.max(1) {
                let Some((_, oldest)) = self.recency.pop_first() else { break };
                self.networks.remove(&oldest);
                self.evictions += 1;
            }
            let rings = vec![Ring::default(); self.regions].into_boxed_slice();
            self.networks.insert(net, Network { rings, seq });
        }
        self.recency.insert(seq, net);
        self.networks.get_mut(&net).expect("inserted above")
    }

    /// Puts back samples kept from an earlier run: `samples[column]` for `net`, which
    /// becomes the most recently reported network. Restoring networks least recently
    /// reported first gives back the order they were saved in. A network of another
    /// prefix length than the configured one (the file of another configuration) is
    /// skipped; false then.
    pub fn restore(&mut self, net: IpNet, samples: &[Vec<Sample>]) -> bool {
        if self.network_of(net.addr()) != net {
            return false;
        }
        let n = self.touch(net);
        for (ring, column) in n.rings.iter_mut().zip(samples) {
            let mut ordered = column.clone();
            ordered.sort_by_key(|s| s.at);
            for s in ordered {
                ring.push(s);
            }
        }
        true
    }

    /// Every network's live samples at `now` (per target, oldest first), least recently
    /// reported first: what a state file keeps.
    pub fn live_samples(
        &self,
        now: Duration,
    ) -> impl Iterator<Item = (IpNet, Vec<Vec<Sample>>)> + '_ {
        let (now, window) = (secs(now), secs(self.params.window));
        self.recency.values().filter_map(move |net| {
            let n = self.networks.get(net)?;
            let rings = n
                .rings
                .iter()
                .map(|r| {
                    let mut v: Vec<Sample> = r.live(now, window).collect();
                    v.sort_by_key(|s| s.at);
                    v
                })
                .collect();
            Some((*net, rings))
        })
    }

    /// Each network's figures at `now`, most recently reported first: per target, the
    /// weighted median of its live samples, their weight and their number (`None`
    /// without any). What a replica shares with the others, who merge these points as
    /// they merge samples.
    pub fn summaries(&mut self, now: Duration) -> Vec<(IpNet, Vec<Option<Point>>)> {
        self.expire(now);
        let (at, window) = (secs(now), secs(self.params.window));
        let half_life = secs(self.params.half_life);
        let mut weighed = Vec::with_capacity(SAMPLES_KEPT);
        let mut out = Vec::with_capacity(self.networks.len());
        for net in self.recency.values().rev() {
            let Some(n) = self.networks.get(net) else { continue };
            let points = n
                .rings
                .iter()
                .map(|r| {
                    weighed.clear();
                    weighed.extend(r.live(at, window).map(|s| (s.ms, weight(s.at, at, half_life))));
                    let count = weighed.len() as u32;
                    let total: f64 = weighed.iter().map(|w| w.1).sum();
                    weighted_median(&mut weighed).map(|ms| Point { ms, weight: total, count })
                })
                .collect();
            out.push((*net, points));
        }
        out
    }

    /// Forgets samples older than the window, and networks left with none.
    pub fn expire(&mut self, now: Duration) {
        let (now, window) = (secs(now), secs(self.params.window));
        let recency = &mut self.recency;
        self.networks.retain(|_, n| {
            let mut empty = true;
            for r in n.rings.iter_mut() {
                empty &= r.expire(now, window);
            }
            if empty {
                recency.remove(&n.seq);
            }
            !empty
        });
    }

    /// Networks from least to most recently reported.
    pub fn by_recency(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.recency.values().copied()
    }

    /// The live samples of `net` for target `column` at `now`.
    pub fn samples(&self, net: &IpNet, column: usize, now: Duration) -> Vec<Sample> {
        let (now, window) = (secs(now), secs(self.params.window));
        let ring = self.networks.get(net).and_then(|n| n.rings.get(column));
        ring.map(|r| r.live(now, window).collect()).unwrap_or_default()
    }

    /// Expires old samples, then builds the table the query path reads; preferences are
    /// carried over from `previous` (see `MeasuredLatency::build`).
    pub fn publish(
        &mut self,
        now: Duration,
        columns: Vec<(String, usize)>,
        previous: Option<&MeasuredLatency>,
    ) -> MeasuredLatency {
        self.expire(now);
        let (at, window) = (secs(now), secs(self.params.window));
        let half_life = secs(self.params.half_life);
        let nets = self.networks.iter().map(|(net, n)| {
            let points = n
                .rings
                .iter()
                .map(|r| {
                    let p = r.live(at, window);
                    p.map(|s| Point { ms: s.ms, weight: weight(s.at, at, half_life), count: 1 })
                        .collect()
                })
                .collect();
            (*net, points)
        });
        MeasuredLatency::build(&self.params, columns, nets, previous)
    }

    /// Heap bytes held now: the hash table's slots (at its capacity), the rings, and the
    /// recency index at the bound `bytes_per_network` assumes for it.
    pub fn heap_bytes(&self) -> usize {
        // `capacity` is 7/8 of the buckets allocated.
        let slots = self.networks.capacity() * 8 / 7 * (size_of::<(IpNet, Network)>() + 1);
        let rings = self.networks.len() * self.regions * size_of::<Ring>();
        slots + rings + self.recency.len() * RECENCY_ENTRY_BYTES
    }
}

/// A recency index entry's bound: key and value, doubled because B-tree nodes are at
/// least about half full, plus a share of the node header.
const RECENCY_ENTRY_BYTES: usize = 2 * (size_of::<u64>() + size_of::<IpNet>()) + 16;

/// The most heap memory one network costs with `regions` targets: its rings, its hash
/// table slots and its recency index entry. The table's slots (with their control bytes)
/// are the larger share: evictions leave tombstones, and a table more than half full of
/// live entries grows rather than clean them up in place, so at worst it holds 32/7 slots
/// per network (just past half of a 7/8 load, doubled). `docs/rum.md` gives the figures.
pub fn bytes_per_network(regions: usize) -> usize {
    let slot = size_of::<(IpNet, Network)>() + 1;
    slot * 32 / 7 + 1 + regions * size_of::<Ring>() + RECENCY_ENTRY_BYTES
}

/// The network `addr` is counted in, with the configured prefix lengths.
pub fn network_of(addr: IpAddr, params: &Aggregation) -> IpNet {
    let addr = match addr {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    };
    let len = if addr.is_ipv4() { params.ipv4_prefix } else { params.ipv6_prefix };
    IpNet::new(addr, len).map(|n| n.trunc()).expect("prefix lengths are validated")
}

fn secs(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

/// The lower weighted median of `(ms, weight)` pairs: the smallest time at which the
/// weights of the times up to it reach half the total. `None` when empty.
pub fn weighted_median(samples: &mut [(f32, f64)]) -> Option<f32> {
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = samples.iter().map(|s| s.1).sum();
    let mut sum = 0.0;
    for &(ms, w) in samples.iter() {
        sum += w;
        if sum >= total / 2.0 {
            return Some(ms);
        }
    }
    samples.last().map(|s| s.0)
}

/// A sample's weight at `now`: halves every `half_life` seconds of age.
pub fn weight(at: u32, now: u32, half_life: u32) -> f64 {
    let age = now.saturating_sub(at) as f64;
    (-age / half_life.max(1) as f64).exp2()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Aggregation {
        Aggregation { max_networks: 3, ..Aggregation::default() }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn at(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn weighted_medians() {
        type Case<'a> = (&'a [(f32, f64)], Option<f32>);
        let cases: &[Case] = &[
            (&[], None),
            (&[(7.0, 1.0)], Some(7.0)),
            (&[(30.0, 1.0), (10.0, 1.0), (20.0, 1.0)], Some(20.0)),
            // Even count, equal weights: the lower middle.
            (&[(10.0, 1.0), (20.0, 1.0)], Some(10.0)),
            // One outlier does not move a median.
            (&[(10.0, 1.0), (11.0, 1.0), (12.0, 1.0), (5000.0, 1.0)], Some(11.0)),
            // Heavy recent samples outweigh many old ones.
            (&[(100.0, 0.125), (100.0, 0.125), (100.0, 0.125), (20.0, 1.0)], Some(20.0)),
            (&[(100.0, 0.5), (100.0, 0.5), (100.0, 0.5), (20.0, 1.0)], Some(100.0)),
        ];
        for (input, want) in cases {
            let mut v = input.to_vec();
            assert_eq!(weighted_median(&mut v), *want, "{input:?}");
        }
    }

    #[test]
    fn weights_halve_every_half_life() {
        for (age, want) in [(0, 1.0), (60, 0.5), (120, 0.25), (180, 0.125)] {
            assert_eq!(weight(1000 - age, 1000, 60), want, "age {age}");
        }
    }

    #[test]
    fn addresses_fall_in_their_configured_networks() {
        let p = Aggregation::default();
        for (addr, want) in [
            ("192.0.2.77", "192.0.2.0/24"),
            ("::ffff:198.51.100.9", "198.51.100.0/24"),
            ("2001:db8:1234:5678::1", "2001:db8:1234::/48"),
        ] {
            assert_eq!(network_of(ip(addr), &p).to_string(), want, "{addr}");
        }
        let p = Aggregation { ipv4_prefix: 16, ipv6_prefix: 56, ..p };
        assert_eq!(network_of(ip("192.0.2.77"), &p).to_string(), "192.0.0.0/16");
        assert_eq!(network_of(ip("2001:db8:1:2ff::1"), &p).to_string(), "2001:db8:1:200::/56");
    }

    #[test]
    fn the_least_recently_reported_network_is_evicted_first() {
        let mut a = Aggregator::new(params(), 2);
        for (i, addr) in ["10.0.1.1", "10.0.2.1", "10.0.3.1"].iter().enumerate() {
            a.record(ip(addr), &[(0, 10.0)], at(i as u64));
        }
        // 10.0.1.0/24 reports again: 10.0.2.0/24 is now the least recent.
        a.record(ip("10.0.1.9"), &[(1, 12.0)], at(5));
        a.record(ip("10.0.4.1"), &[(0, 10.0)], at(6));
        let order: Vec<String> = a.by_recency().map(|n| n.to_string()).collect();
        assert_eq!(order, ["10.0.3.0/24", "10.0.1.0/24", "10.0.4.0/24"]);
        assert_eq!((a.len(), a.evictions()), (3, 1));
        a.record(ip("10.0.5.1"), &[(0, 10.0)], at(7));
        let order: Vec<String> = a.by_recency().map(|n| n.to_string()).collect();
        assert_eq!(order, ["10.0.1.0/24", "10.0.4.0/24", "10.0.5.0/24"]);
        assert_eq!(a.evictions(), 2);
    }

    #[test]
    fn only_the_last_samples_within_the_window_are_kept() {
        let p = Aggregation { window: at(100), ..params() };
        let mut a = Aggregator::new(p, 1);
        let net = a.network_of(ip("10.0.0.1"));
        for i in 0..(SAMPLES_KEPT as u64 + 4) {
            a.record(ip("10.0.0.1"), &[(0, i as f32)], at(i));
        }
        let mut ms: Vec<f32> = a.samples(&net, 0, at(50)).iter().map(|s| s.ms).collect();
        ms.sort_by(f32::total_cmp);
        let want: Vec<f32> = (4..SAMPLES_KEPT as u32 + 4).map(|i| i as f32).collect();
        assert_eq!(ms, want, "the 4 oldest were overwritten");
        // At 110 s, samples taken before 10 s are out of the window.
        assert_eq!(a.samples(&net, 0, at(110)).len(), SAMPLES_KEPT - 7);
        a.expire(at(200));
        assert!(a.is_empty());
        assert_eq!(a.by_recency().count(), 0);
    }

    #[test]
    fn memory_per_network_is_what_the_docs_say() {
        // Two 4-byte fields per sample, 16 samples, two index bytes, 4-byte aligned.
        assert_eq!(size_of::<Sample>(), 8);
        assert_eq!(size_of::<Ring>(), 8 * SAMPLES_KEPT + 4);
        // docs/rum.md: at most 320 bytes plus 132 per region.
        let fixed = bytes_per_network(0);
        assert!(fixed <= 320, "{fixed}");
        assert_eq!(bytes_per_network(4) - fixed, 4 * 132);
    }
}
