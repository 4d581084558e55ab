//! The measurements' state file (`rum.state_file`): every network's live samples, so that a
//! restart rebuilds the same table. Each sample is kept as its age at the time of saving
//! (wall clock) and its round trip; networks are written least recently reported first,
//! so that restoring them in order gives back the eviction order.
//!
//! Layout (`codec`): the header `steerdns-rum-samples`, format 1, the wall-clock time of
//! saving (seconds since the Unix epoch), the target regions by name, the number of
//! networks, then each network and, per region, its number of samples and each sample's
//! age (seconds) and round trip (ms); then the number of rows of the published table with
//! a preferred region, each row's network and that region's index (so that a restart
//! holds the preferences the margins held); a checksum ends the file.

use std::time::Duration;

use ipnet::IpNet;

use super::aggregate::{Aggregator, SAMPLES_KEPT, Sample};
use super::codec::{DecodeError, MAX_NET_BYTES, Reader, Writer};
use super::settings::Aggregation;
use super::table::{Measured, MeasuredLatency};

const MAGIC: &[u8] = b"steerdns-rum-samples";
const VERSION: u8 = 1;

/// One network of a state file and, per region, its samples as `(age in seconds, ms)`.
pub type SavedNetwork = (IpNet, Vec<Vec<(u32, f32)>>);

/// A state file as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Saved {
    /// When it was written, in seconds since the Unix epoch.
    pub saved_at: u64,
    /// The target regions, by name, in the order of each network's sample lists.
    pub regions: Vec<String>,
    pub networks: Vec<SavedNetwork>,
    /// The published table's preferred region (index in `regions`) of each row that had one.
    pub preferred: Vec<(IpNet, usize)>,
}

/// What a restore put back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    pub networks: usize,
    pub samples: usize,
    /// Samples left out: older than the window by now, or of a region no longer a target.
    pub dropped: usize,
}

/// The file of `aggregate`'s live samples at `now` (its clock), written at `saved_at`
/// (Unix seconds), `regions` naming its targets in column order, with the preferences of
/// `published`.
pub fn encode(
    aggregate: &Aggregator,
    published: &MeasuredLatency,
    regions: &[&str],
    now: Duration,
    saved_at: u64,
) -> Vec<u8> {
    let now_secs = u32::try_from(now.as_secs()).unwrap_or(u32::MAX);
    let mut w = Writer::new(MAGIC, VERSION);
    w.u64(saved_at);
    w.names(regions.iter().copied());
    let count_at = w.bytes.len();
    w.u32(0);
    let mut count = 0u32;
    for (net, rings) in aggregate.live_samples(now) {
        w.net(&net);
        for ring in rings.iter().take(regions.len()) {
            w.u8(ring.len() as u8);
            for s in ring {
                w.u32(now_secs.saturating_sub(s.at));
                w.f32(s.ms);
            }
        }
        count += 1;
    }
    w.bytes[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
    let preferred: Vec<(IpNet, usize)> = published
        .rows()
        .filter_map(|(net, _, p)| p.filter(|&p| p < regions.len()).map(|p| (net, p)))
        .collect();
    w.u32(preferred.len() as u32);
    for (net, p) in &preferred {
        w.net(net);
        w.u8(*p as u8);
    }
    w.finish()
}

/// The largest file `max_networks` networks of `regions` can fill: a larger one is not
/// this configuration's and is not read.
pub fn max_bytes(max_networks: usize, regions: &[&str]) -> u64 {
    let header = MAGIC.len() + 1 + 8 + 1 + regions.iter().map(|r| 1 + r.len()).sum::<usize>() + 4;
    let network = MAX_NET_BYTES + regions.len() * (1 + SAMPLES_KEPT * 8);
    // A preference per network and per aggregate (at most one aggregate per network).
    let preferences = 4 + 2 * (MAX_NET_BYTES + 1);
    (header + 8) as u64 + max_networks as u64 * (network + preferences) as u64
}

pub fn decode(bytes: &[u8]) -> Result<Saved, DecodeError> {
    let (mut r, _) = Reader::open(bytes, MAGIC, VERSION)?;
    let saved_at = r.u64()?;
    let regions = r.names()?;
    let networks = r.list(|r| {
        let net = r.net()?;
        let rings = r.repeat(regions.len(), |r| {
            let n = r.u8()? as usize;
            if n > SAMPLES_KEPT {
                return Err(DecodeError::Invalid("more samples than a network keeps"));
            }
            r.repeat(n, |r| {
                let (age, ms) = (r.u32()?, r.f32()?);
                if !(ms.is_finite() && ms > 0.0) {
                    return Err(DecodeError::Invalid("a round trip is not a positive number"));
                }
                Ok((age, ms))
            })
        })?;
        Ok((net, rings))
    })?;
    let preferred = r.list(|r| {
        let net = r.net()?;
        let p = r.u8()? as usize;
        if p >= regions.len() {
            return Err(DecodeError::Invalid("a preferred region out of range"));
        }
        Ok((net, p))
    })?;
    if !r.is_empty() {
        return Err(DecodeError::Invalid("bytes after the last preference"));
    }
    Ok(Saved { saved_at, regions, networks, preferred })
}

/// Puts `saved`'s samples back into `aggregate`, whose targets are `regions` (by name) and
/// whose clock reads `now`, `elapsed` seconds after the file was written. Samples are
/// matched to targets by region name; those older than the window by now are dropped.
pub fn restore(
    aggregate: &mut Aggregator,
    saved: &Saved,
    regions: &[&str],
    now: Duration,
    elapsed: u64,
) -> Restored {
    let now_secs = u64::from(u32::try_from(now.as_secs()).unwrap_or(u32::MAX));
    let window = aggregate.params().window.as_secs();
    let columns: Vec<Option<usize>> =
        saved.regions.iter().map(|name| regions.iter().position(|r| r == name)).collect();
    let mut out = Restored::default();
    for (net, rings) in &saved.networks {
        let mut samples = vec![Vec::new(); regions.len()];
        for (ring, column) in rings.iter().zip(&columns) {
            for &(age, ms) in ring {
                let age = u64::from(age) + elapsed;
                match (column, now_secs.checked_sub(age)) {
                    (Some(c), Some(at)) if age < window => {
                        samples[*c].push(Sample { at: at as u32, ms });
                    }
                    _ => out.dropped += 1,
                }
            }
        }
        let n: usize = samples.iter().map(Vec::len).sum();
        if n == 0 {
            continue;
        }
        if aggregate.restore(*net, &samples) {
            out.networks += 1;
            out.samples += n;
        } else {
            out.dropped += n;
        }
    }
    out
}

/// A table holding only `saved`'s preferences (no figures), for the first table built
/// after a restart to start from, as it would have from the table published before.
pub fn preferences(
    saved: &Saved,
    params: &Aggregation,
    columns: Vec<(String, usize)>,
) -> MeasuredLatency {
    let width = columns.len();
    let rows: Vec<_> = saved
        .preferred
        .iter()
        .filter_map(|(net, p)| {
            let name = saved.regions.get(*p)?;
            let column = columns.iter().position(|(c, _)| c == name)?;
            Some((*net, vec![Measured::default(); width], Some(column)))
        })
        .collect();
    MeasuredLatency::from_rows(params, columns, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::rum::settings::Aggregation;
    use crate::geo::rum::testkit::{REGIONS, columns, ip, rows, secs};

    fn params() -> Aggregation {
        Aggregation { min_samples: 1, window: secs(1000), ..Aggregation::default() }
    }

    #[test]
    fn a_restored_aggregate_publishes_the_same_table() {
        let mut a = Aggregator::new(params(), 2);
        for (i, addr) in
            ["192.0.2.1", "2001:db8:5::1", "198.51.100.7", "192.0.2.9"].iter().enumerate()
        {
            let t = 2000 + i as u64 * 10;
            a.record(ip(addr), &[(0, 10.0 + i as f32), (1, 50.0 - i as f32)], secs(t));
            a.record(ip(addr), &[(1, 45.0)], secs(t + 1));
        }
        let empty = MeasuredLatency::empty(columns());
        let bytes = encode(&a, &empty, &REGIONS, secs(2100), 1_700_000_000);
        // Header: 20 magic + 1 + 8 time + 17 names + 4 count; two IPv4 /24s (4 bytes) and
        // one /48 (7 bytes), each with 2 region counts; 12 samples of 8 bytes; no
        // preference (4 bytes); 8 checksum.
        assert_eq!(bytes.len(), 50 + 2 * 4 + 7 + 3 * 2 + 12 * 8 + 4 + 8);
        let saved = decode(&bytes).unwrap();
        assert_eq!(saved.saved_at, 1_700_000_000);
        assert_eq!(saved.networks.len(), 3);

        // Another process: its clock reads 1000 s when it loads the file 5 s later.
        let mut b = Aggregator::new(params(), 2);
        let restored = restore(&mut b, &saved, &REGIONS, secs(1000), 5);
        assert_eq!(restored, Restored { networks: 3, samples: 12, dropped: 0 });
        let order = |a: &Aggregator| a.by_recency().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(order(&a), order(&b));
        let before = a.publish(secs(2105), columns(), None);
        let after = b.publish(secs(1000), columns(), None);
        assert_eq!(rows(&before), rows(&after));
        assert!(!rows(&after).is_empty());
    }

    #[test]
    fn a_preference_the_margins_held_is_held_after_a_restart() {
        let p = Aggregation { min_samples: 3, ..params() };
        let mut a = Aggregator::new(p, 2);
        let addr = ip("192.0.2.1");
        for t in 0..3 {
            a.record(addr, &[(0, 50.0), (1, 100.0)], secs(100 + t));
        }
        let t1 = a.publish(secs(103), columns(), None);
        // us-east becomes 4 ms faster than eu-west: short of the 10 ms margin, so held.
        for t in 0..6 {
            a.record(addr, &[(0, 50.0), (1, 46.0)], secs(110 + t));
        }
        let t2 = a.publish(secs(120), columns(), Some(&t1));
        assert_eq!(t2.lookup(addr).unwrap().preferred, Some(0));
        let bytes = encode(&a, &t2, &REGIONS, secs(120), 0);
        let saved = decode(&bytes).unwrap();
        // The row and its /16 aggregate.
        assert_eq!(saved.preferred.len(), 2);
        let mut b = Aggregator::new(p, 2);
        restore(&mut b, &saved, &REGIONS, secs(1000), 0);
        let seed = preferences(&saved, &p, columns());
        let after = b.publish(secs(1000), columns(), Some(&seed));
        assert_eq!(rows(&after), rows(&t2));
        // Without them, the fastest: the answer would change.
        let fresh = b.publish(secs(1000), columns(), None);
        assert_eq!(fresh.lookup(addr).unwrap().preferred, Some(1));
    }

    #[test]
    fn old_samples_and_unknown_regions_are_dropped_on_restore() {
        let mut a = Aggregator::new(params(), 2);
        a.record(ip("192.0.2.1"), &[(0, 10.0), (1, 20.0)], secs(1000));
        a.record(ip("192.0.2.1"), &[(0, 11.0)], secs(1500));
        let empty = MeasuredLatency::empty(columns());
        let saved = decode(&encode(&a, &empty, &REGIONS, secs(1600), 0)).unwrap();
        // 700 s later, the sample of 1000 s (600 s old then) is past the 1000 s window.
        let mut b = Aggregator::new(params(), 2);
        let r = restore(&mut b, &saved, &REGIONS, secs(5000), 700);
        assert_eq!(r, Restored { networks: 1, samples: 1, dropped: 2 });
        // A configuration measuring us-east only: eu-west's samples go.
        let mut c = Aggregator::new(params(), 1);
        let r = restore(&mut c, &saved, &["us-east"], secs(5000), 0);
        assert_eq!(r, Restored { networks: 1, samples: 1, dropped: 2 });
        // Networks of another prefix length are not this configuration's.
        let p = Aggregation { ipv4_prefix: 16, ..params() };
        let mut d = Aggregator::new(p, 2);
        assert_eq!(restore(&mut d, &saved, &REGIONS, secs(5000), 0).networks, 0);
    }

    #[test]
    fn damaged_and_foreign_files_are_refused() {
        let mut a = Aggregator::new(params(), 2);
        a.record(ip("192.0.2.1"), &[(0, 10.0)], secs(10));
        let bytes = encode(&a, &MeasuredLatency::empty(columns()), &REGIONS, secs(20), 0);
        assert_eq!(decode(b"{\"overrides\": []}"), Err(DecodeError::Foreign));
        assert_eq!(decode(&bytes[..bytes.len() - 1]), Err(DecodeError::Checksum));
        let mut flipped = bytes.clone();
        flipped[40] ^= 0x40;
        assert_eq!(decode(&flipped), Err(DecodeError::Checksum));
        assert!(max_bytes(1, &REGIONS) >= bytes.len() as u64);
        assert!(max_bytes(1, &REGIONS) < 2 * (50 + MAX_NET_BYTES as u64 + 2 * 129 + 8 + 40));
    }
}
