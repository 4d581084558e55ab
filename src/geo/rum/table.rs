//! The published table of measured latency: an immutable snapshot of the aggregate, built
//! every few seconds and read by the query path without locks or allocation.
//!
//! Rows are client networks at the configured prefix lengths (/24 and /48 by default), and
//! coarser aggregates of them (/16 for IPv4, /32 for IPv6: every sample of the measured
//! networks inside) for clients whose own network has no row. Each row gives every
//! region's weighted median time and sample count (regions short of `min_samples` are
//! absent) and the row's preferred region. The preference is stabilised here, at publish
//! time: it moves away from the previous table's preferred region only when another region
//! is faster by both margins, so the same inputs always give the same table.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use super::aggregate::{Point, weighted_median};
use super::settings::Aggregation;

/// Prefix length of the IPv4 aggregates.
pub const COARSE_V4: u8 = 16;
/// Prefix length of the IPv6 aggregates.
pub const COARSE_V6: u8 = 32;

/// One region's figure in a row: the weighted median round trip and the samples behind it.
/// `samples == 0`: not measured (or not yet `min_samples` times).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measured {
    pub ms: f32,
    pub samples: u32,
}

impl Measured {
    pub fn is_measured(&self) -> bool {
        self.samples > 0
    }
}

/// A row as tables are built from and cut into: the network, each target's figure, and
/// the preferred target's column.
pub type Row = (IpNet, Vec<Measured>, Option<usize>);

/// A target column: the region's name and its index in the latency table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub region: usize,
}

/// The sorted keys of one family at one prefix length.
#[derive(Clone, Debug, Default)]
struct Level {
    prefix_len: u8,
    keys: Vec<u128>,
    rows: Vec<u32>,
}

/// The table the query path reads (behind an `ArcSwap`).
#[derive(Clone, Debug, Default)]
pub struct MeasuredLatency {
    columns: Vec<Column>,
    /// `rows × columns` figures, row-major.
    cells: Vec<Measured>,
    /// Each row's preferred column.
    preferred: Vec<Option<u16>>,
    networks: Vec<IpNet>,
    /// IPv4 networks, IPv4 aggregates, IPv6 networks, IPv6 aggregates; a level whose
    /// prefix is not shorter than the networks' is empty.
    levels: [Level; 4],
}

/// The row that applies to a client.
#[derive(Clone, Copy, Debug)]
pub struct MeasuredRow<'a> {
    /// The network measured: the ECS scope of an answer that depends on this row.
    pub network: IpNet,
    /// True for a coarser aggregate (the client's own network has no row).
    pub aggregate: bool,
    /// Each target's figure, in target order.
    pub latency: &'a [Measured],
    /// The stabilised preferred target column.
    pub preferred: Option<usize>,
    columns: &'a [Column],
}

impl MeasuredRow<'_> {
    /// The preferred region as a latency-table region index.
    pub fn preferred_region(&self) -> Option<usize> {
        self.preferred.map(|c| self.columns[c].region)
    }

    /// Each target's column, with its figure.
    pub fn regions(&self) -> impl Iterator<Item = (&Column, Measured)> + '_ {
        self.columns.iter().zip(self.latency.iter().copied())
    }
}

impl MeasuredLatency {
    /// A table with no rows.
    pub fn empty(columns: Vec<(String, usize)>) -> MeasuredLatency {
        let columns = columns.into_iter().map(|(name, region)| Column { name, region }).collect();
        MeasuredLatency { columns, ..MeasuredLatency::default() }
    }

    /// Builds the table from each network's points (per target; weights as of now).
    /// Preferences start from `previous` when it has the same columns.
    pub fn build(
        params: &Aggregation,
        columns: Vec<(String, usize)>,
        networks: impl Iterator<Item = (IpNet, Vec<Vec<Point>>)>,
        previous: Option<&MeasuredLatency>,
    ) -> MeasuredLatency {
        let width = columns.len();
        let coarse_v4 = (COARSE_V4 < params.ipv4_prefix).then_some(COARSE_V4);
        let coarse_v6 = (COARSE_V6 < params.ipv6_prefix).then_some(COARSE_V6);
        let mut rows: Vec<(IpNet, Vec<Measured>)> = Vec::new();
        let mut coarse: BTreeMap<IpNet, Vec<Vec<Point>>> = BTreeMap::new();
        let mut scratch = Vec::with_capacity(super::aggregate::SAMPLES_KEPT);
        for (net, points) in networks {
            let v6 = matches!(net, IpNet::V6(_));
            let mut cells = vec![Measured::default(); width];
            let coarse_len = if v6 { coarse_v6 } else { coarse_v4 };
            let mut merged = coarse_len.map(|len| {
                let outer = IpNet::new(net.addr(), len).expect("shorter than the network").trunc();
                coarse.entry(outer).or_insert_with(|| vec![Vec::new(); width])
            });
            for (column, p) in points.iter().enumerate().take(width) {
                if let Some(m) = merged.as_mut() {
                    m[column].extend_from_slice(p);
                }
                cells[column] = figure(p, &mut scratch, params.min_samples);
            }
            if cells.iter().any(Measured::is_measured) {
                rows.push((net, cells));
            }
        }
        for (net, points) in coarse {
            let cells: Vec<Measured> =
                points.iter().map(|p| figure(p, &mut scratch, params.min_samples)).collect();
            if cells.iter().any(Measured::is_measured) {
                rows.push((net, cells));
            }
        }
        let previous = previous.filter(|p| {
            p.columns
                .iter()
                .map(|c| (c.name.as_str(), c.region))
                .eq(columns.iter().map(|(n, r)| (n.as_str(), *r)))
        });
        let rows = rows.into_iter().map(|(net, cells)| {
            let before = previous.and_then(|p| p.find(&net)).and_then(|r| r.preferred);
            let preferred = stabilised(&cells, before, params.margin_ms, params.margin_percent);
            (net, cells, preferred)
        });
        MeasuredLatency::from_rows(params, columns, rows)
    }

    /// A table of the given rows, as built elsewhere (by the replica that merges every
    /// replica's figures): `(network, figures per target, preferred column)`. Rows of a
    /// prefix length other than the configured networks' and aggregates', or with another
    /// number of figures, are left out, as is a second row of one network.
    pub fn from_rows(
        params: &Aggregation,
        columns: Vec<(String, usize)>,
        rows: impl IntoIterator<Item = Row>,
    ) -> MeasuredLatency {
        let mut table = MeasuredLatency::empty(columns);
        let width = table.columns.len();
        let coarse_v4 = (COARSE_V4 < params.ipv4_prefix).then_some(COARSE_V4);
        let coarse_v6 = (COARSE_V6 < params.ipv6_prefix).then_some(COARSE_V6);
        let lens = [
            params.ipv4_prefix,
            coarse_v4.unwrap_or(0),
            params.ipv6_prefix,
            coarse_v6.unwrap_or(0),
        ];
        // (level, key) → row; BTreeMap so rows come out sorted.
        let mut sorted = BTreeMap::new();
        for (net, cells, preferred) in rows {
            let first = if matches!(net, IpNet::V6(_)) { 2 } else { 0 };
            let Some(level) =
                (first..first + 2).find(|&l| lens[l] != 0 && lens[l] == net.prefix_len())
            else {
                continue;
            };
            if cells.len() != width || net.trunc() != net {
                continue;
            }
            let preferred = preferred.filter(|&p| p < width);
            sorted.entry((level, bits(net.addr()))).or_insert((net, cells, preferred));
        }
        for (level, len) in table.levels.iter_mut().zip(lens) {
            level.prefix_len = len;
        }
        for ((level, key), (net, cells, preferred)) in sorted {
            let row = table.networks.len() as u32;
            table.levels[level].keys.push(key);
            table.levels[level].rows.push(row);
            table.networks.push(net);
            table.preferred.push(preferred.map(|c| c as u16));
            table.cells.extend(cells);
        }
        table
    }

    /// Every row: its network, figures and preferred column, in the table's order.
    pub fn rows(&self) -> impl Iterator<Item = (IpNet, &[Measured], Option<usize>)> + '_ {
        let width = self.columns.len();
        self.networks.iter().enumerate().map(move |(i, net)| {
            let cells = &self.cells[i * width..(i + 1) * width];
            (*net, cells, self.preferred[i].map(usize::from))
        })
    }

    /// The row of exactly `net` (a network or an aggregate).
    fn find(&self, net: &IpNet) -> Option<MeasuredRow<'_>> {
        let first = if matches!(net, IpNet::V6(_)) { 2 } else { 0 };
        let level = (first..first + 2).find(|&l| self.levels[l].prefix_len == net.prefix_len())?;
        self.exact(level, bits(net.addr()))
    }

    /// Heap bytes the table holds (its arrays at their capacity).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of_val;
        let levels: usize =
            self.levels.iter().map(|l| l.keys.capacity() * 16 + l.rows.capacity() * 4).sum();
        levels
            + self.cells.capacity() * size_of_val(&Measured::default())
            + self.preferred.capacity() * 4
            + self.networks.capacity() * std::mem::size_of::<IpNet>()
    }

    /// The most heap bytes a row costs with `targets` targets: its figures, preference,
    /// network and sorted key.
    pub fn bytes_per_row(targets: usize) -> usize {
        use std::mem::size_of;
        targets * size_of::<Measured>()
            + size_of::<Option<u16>>()
            + size_of::<IpNet>()
            + size_of::<u128>()
            + size_of::<u32>()
    }

    /// The targets, in column order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Rows in the table: networks with enough samples, and aggregates.
    pub fn len(&self) -> usize {
        self.networks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }

    /// The measured network of `addr`, else its aggregate. Two binary searches at most; no
    /// allocation.
    pub fn lookup(&self, addr: IpAddr) -> Option<MeasuredRow<'_>> {
        let addr = match addr {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        let (first, width) = if addr.is_ipv4() { (0, 32) } else { (2, 128) };
        for level in first..first + 2 {
            let len = self.levels[level].prefix_len;
            if len == 0 {
                continue;
            }
            if let Some(row) = self.exact(level, mask(bits(addr), width, len)) {
                return Some(row);
            }
        }
        None
    }

    fn exact(&self, level: usize, key: u128) -> Option<MeasuredRow<'_>> {
        let l = &self.levels[level];
        let i = l.keys.binary_search(&key).ok()?;
        let row = l.rows[i] as usize;
        let width = self.columns.len();
        Some(MeasuredRow {
            network: self.networks[row],
            aggregate: level % 2 == 1,
            latency: &self.cells[row * width..(row + 1) * width],
            preferred: self.preferred[row].map(usize::from),
            columns: &self.columns,
        })
    }
}

/// The figure of one (network, region) from its points: the weighted median, and the
/// samples behind them.
fn figure(points: &[Point], scratch: &mut Vec<(f32, f64)>, min_samples: u32) -> Measured {
    let samples = points.iter().map(|p| p.count).sum::<u32>();
    scratch.clear();
    scratch.extend(points.iter().map(|p| (p.ms, p.weight)));
    match weighted_median(scratch) {
        Some(ms) if samples >= min_samples.max(1) => Measured { ms, samples },
        _ => Measured::default(),
    }
}

/// The preferred column: the fastest measured one, unless `before` is still measured and
/// the fastest beats it by less than `margin_ms` or less than `margin_percent` of its time.
/// Ties go to the lower column.
pub fn stabilised(
    cells: &[Measured],
    before: Option<usize>,
    margin_ms: f64,
    margin_percent: f64,
) -> Option<usize> {
    let best = cells
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_measured())
        .min_by(|a, b| a.1.ms.total_cmp(&b.1.ms))
        .map(|(i, _)| i)?;
    let Some(p) = before.filter(|&p| cells.get(p).is_some_and(Measured::is_measured)) else {
        return Some(best);
    };
    let (held, fastest) = (cells[p].ms as f64, cells[best].ms as f64);
    let gain = held - fastest;
    let moves = gain >= margin_ms && gain >= held * margin_percent / 100.0;
    Some(if moves { best } else { p })
}

fn bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// `bits` (an address `width` bits wide) with all but the first `len` bits cleared.
fn mask(bits: u128, width: u32, len: u8) -> u128 {
    let host = width - u32::from(len).min(width);
    if host >= 128 { 0 } else { bits & !((1u128 << host) - 1) }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::aggregate::Aggregator;
    use super::*;

    fn m(ms: f32) -> Measured {
        Measured { ms, samples: 5 }
    }

    const NONE: Measured = Measured { ms: 0.0, samples: 0 };

    #[test]
    fn preferences_move_only_past_both_margins() {
        // (cells, previous preference, margin ms, margin %, preferred)
        type Case<'a> = (&'a [Measured], Option<usize>, f64, f64, Option<usize>);
        let cases: &[Case] = &[
            (&[], None, 10.0, 10.0, None),
            (&[NONE, NONE], Some(0), 10.0, 10.0, None),
            (&[m(50.0), m(20.0)], None, 10.0, 10.0, Some(1)),
            // Ties: the lower column.
            (&[m(20.0), m(20.0)], None, 10.0, 10.0, Some(0)),
            // 30 ms and 60 % better: moves.
            (&[m(50.0), m(20.0)], Some(0), 10.0, 10.0, Some(1)),
            // 9 ms better, short of 10 ms: stays.
            (&[m(100.0), m(91.0)], Some(0), 10.0, 5.0, Some(0)),
            // 10 ms better: exactly the margin moves it.
            (&[m(100.0), m(90.0)], Some(0), 10.0, 10.0, Some(1)),
            // 20 ms better but only 4 % of 500 ms: stays.
            (&[m(500.0), m(480.0)], Some(0), 10.0, 10.0, Some(0)),
            // A margin larger than the difference keeps it.
            (&[m(120.0), m(5.0)], Some(0), 500.0, 10.0, Some(0)),
            // The previous preference is no longer measured: the fastest.
            (&[NONE, m(80.0), m(60.0)], Some(0), 10.0, 10.0, Some(2)),
            // A previous preference out of range is ignored.
            (&[m(30.0)], Some(4), 10.0, 10.0, Some(0)),
        ];
        for &(cells, before, ms, pct, want) in cases {
            assert_eq!(stabilised(cells, before, ms, pct), want, "{cells:?} from {before:?}");
        }
    }

    #[test]
    fn masks() {
        for (bits, width, len, want) in [
            (0xc000_0277u128, 32, 24, 0xc000_0200u128),
            (0xc000_0277, 32, 32, 0xc000_0277),
            (0xc000_0277, 32, 0, 0),
            (u128::MAX, 128, 48, u128::MAX << 80),
            (u128::MAX, 128, 0, 0),
        ] {
            assert_eq!(mask(bits, width, len), want, "{bits:x}/{len}");
        }
    }

    fn columns() -> Vec<(String, usize)> {
        vec![("eu-west".into(), 3), ("us-east".into(), 0)]
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn only_networks_with_min_samples_are_published_with_their_medians() {
        let params = Aggregation { min_samples: 3, ..Aggregation::default() };
        let mut a = Aggregator::new(params, 2);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (i, ms) in [20.0, 22.0, 900.0].into_iter().enumerate() {
            a.record(ip("192.0.2.10"), &[(0, ms), (1, 80.0)], secs(i as u64));
        }
        a.record(ip("198.51.100.1"), &[(0, 5.0)], secs(3));
        a.record(ip("198.51.100.2"), &[(0, 5.0)], secs(3));
        a.record(ip("2001:db8:1:2::1"), &[(1, 40.0)], secs(3));
        let t = a.publish(secs(4), columns(), None);
        let row = t.lookup(ip("192.0.2.200")).expect("measured network");
        assert_eq!(row.network.to_string(), "192.0.2.0/24");
        assert!(!row.aggregate);
        assert_eq!(
            row.latency,
            [Measured { ms: 22.0, samples: 3 }, Measured { ms: 80.0, samples: 3 }]
        );
        assert_eq!((row.preferred, row.preferred_region()), (Some(0), Some(3)));
        // Two samples: short of min_samples, so no row of its own ...
        assert!(t.lookup(ip("198.51.100.7")).is_none());
        // ... and the /16 aggregate of 192.0.2.0/24 answers for its neighbours.
        let agg = t.lookup(ip("192.0.77.1")).expect("aggregate");
        assert_eq!((agg.network.to_string().as_str(), agg.aggregate), ("192.0.0.0/16", true));
        assert_eq!(agg.latency[0], Measured { ms: 22.0, samples: 3 });
        assert!(t.lookup(ip("2001:db8:1::1")).is_none(), "one IPv6 sample");
        assert!(t.lookup(ip("203.0.113.1")).is_none());
        assert!(t.lookup(ip("::ffff:192.0.2.1")).is_some(), "IPv4-mapped");
    }

    #[test]
    fn recent_samples_outweigh_old_ones_by_half_life() {
        let params = Aggregation {
            min_samples: 1,
            half_life: secs(60),
            window: secs(3600),
            ..Aggregation::default()
        };
        let mut a = Aggregator::new(params, 2);
        let ip: IpAddr = "2001:db8:aa:bb::1".parse().unwrap();
        // Three old samples of 100 ms, then one of 20 ms two half-lives later (weight 1
        // against 3 × 0.25): the median follows the recent sample.
        for t in 0..3 {
            a.record(ip, &[(0, 100.0)], secs(t));
        }
        a.record(ip, &[(0, 20.0)], secs(122));
        let t = a.publish(secs(122), columns(), None);
        let row = t.lookup(ip).unwrap();
        assert_eq!(row.network.to_string(), "2001:db8:aa::/48");
        assert_eq!(row.latency[0], Measured { ms: 20.0, samples: 4 });
        // Half a half-life after the old ones (weights 3 × 0.7 > 1): still 100 ms.
        let mut b = Aggregator::new(params, 2);
        for t in 0..3 {
            b.record(ip, &[(0, 100.0)], secs(t));
        }
        b.record(ip, &[(0, 20.0)], secs(32));
        assert_eq!(b.publish(secs(32), columns(), None).lookup(ip).unwrap().latency[0].ms, 100.0);
    }

    #[test]
    fn publishing_carries_the_preference_over_within_the_margins() {
        let params = Aggregation {
            min_samples: 1,
            margin_ms: 20.0,
            margin_percent: 10.0,
            ..Aggregation::default()
        };
        let mut a = Aggregator::new(params, 2);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        a.record(ip, &[(0, 50.0), (1, 60.0)], secs(0));
        let t1 = a.publish(secs(0), columns(), None);
        assert_eq!(t1.lookup(ip).unwrap().preferred, Some(0));
        // Column 1 becomes 10 ms faster (medians 50 vs 40): short of 20 ms, stays.
        for s in 1..4 {
            a.record(ip, &[(0, 50.0), (1, 40.0)], secs(s));
        }
        let t2 = a.publish(secs(4), columns(), Some(&t1));
        assert_eq!(t2.lookup(ip).unwrap().latency[1].ms, 40.0);
        assert_eq!(t2.lookup(ip).unwrap().preferred, Some(0));
        // Without the previous table there is nothing to hold: the fastest.
        assert_eq!(a.publish(secs(4), columns(), None).lookup(ip).unwrap().preferred, Some(1));
        // 25 ms faster: moves.
        for s in 4..20 {
            a.record(ip, &[(0, 50.0), (1, 25.0)], secs(s));
        }
        let t3 = a.publish(secs(20), columns(), Some(&t2));
        assert_eq!(t3.lookup(ip).unwrap().preferred, Some(1));
        // The same inputs give the same table.
        let t4 = a.publish(secs(20), columns(), Some(&t2));
        assert_eq!(t3.cells, t4.cells);
        assert_eq!(t3.preferred, t4.preferred);
    }
}
