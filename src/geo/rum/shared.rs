//! How replicas share measurements through etcd (`docs/rum.md`, "In a cluster"): each
//! replica's figures per network (`NodeRecord`, from `Aggregator::summaries`), how the
//! leading replica merges every replica's figures into the points a table is built from
//! (`merge`), and the published table itself, cut into chunks (`TableChunk`) that every
//! replica puts back together (`assemble`). Pure: etcd is the caller's.
//!
//! A replica's figure for a (network, region) is the weighted median of its samples, their
//! total weight and their number; the merge treats each as one point of that weight, so a
//! network measured by one replica only gets exactly that replica's median, and one
//! measured by several the weighted median of their medians, each weighing what its
//! samples weigh (decayed to the time of the merge). The sample counts add up.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ipnet::IpNet;

use super::aggregate::Point;
use super::codec::{Chunks, DecodeError, Reader, Writer};
use super::table::{Measured, MeasuredLatency, Row};

/// The most bytes of one etcd value steerdns writes: below etcd's default request limit
/// (1.5 MiB) with room for the key and the request around it.
pub const CHUNK_BYTES: usize = 1_000_000;

/// The most keys one replica's figures take; networks beyond (the least recently reported)
/// are not shared.
pub const MAX_NODE_CHUNKS: usize = 16;

/// The most keys the published table takes; rows beyond are not published.
pub const MAX_TABLE_CHUNKS: usize = 64;

const NODE_MAGIC: &[u8] = b"steerdns-rum-node";
const TABLE_MAGIC: &[u8] = b"steerdns-rum-table";
const VERSION: u8 = 1;

/// One key of a replica's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRecord {
    /// When the figures were computed, in seconds since the Unix epoch.
    pub at: u64,
    pub regions: Vec<String>,
    /// Per network, per region, the figure (`None`: no sample).
    pub networks: Vec<(IpNet, Vec<Option<Point>>)>,
}

/// `summaries` (most recently reported first) computed at `at`, as the values of at most
/// `MAX_NODE_CHUNKS` keys, and how many networks they hold.
pub fn encode_node(
    at: u64,
    regions: &[&str],
    summaries: &[(IpNet, Vec<Option<Point>>)],
) -> (Vec<Vec<u8>>, usize) {
    let head = |count: u32| {
        let mut w = Writer::new(NODE_MAGIC, VERSION);
        w.u64(at);
        w.names(regions.iter().copied());
        w.u32(count);
        w
    };
    let mut chunks = Chunks::new(CHUNK_BYTES - head(0).bytes.len() - 8, MAX_NODE_CHUNKS);
    let mut shared = 0;
    let mut row = Writer::default();
    for (net, points) in summaries {
        row.bytes.clear();
        row.net(net);
        for p in points.iter().take(regions.len()) {
            match p {
                Some(p) => {
                    row.u8(p.count.min(255) as u8);
                    row.f32(p.ms);
                    row.f32(p.weight as f32);
                }
                None => row.u8(0),
            }
        }
        if !chunks.push(&row.bytes) {
            break;
        }
        shared += 1;
    }
    let chunks = chunks
        .into_bodies()
        .into_iter()
        .map(|(body, count)| {
            let mut w = head(count);
            w.bytes.extend_from_slice(&body);
            w.finish()
        })
        .collect();
    (chunks, shared)
}

pub fn decode_node(bytes: &[u8]) -> Result<NodeRecord, DecodeError> {
    let (mut r, _) = Reader::open(bytes, NODE_MAGIC, VERSION)?;
    let at = r.u64()?;
    let regions = r.names()?;
    let networks = r.list(|r| {
        let net = r.net()?;
        let points = r.repeat(regions.len(), |r| {
            let count = u32::from(r.u8()?);
            if count == 0 {
                return Ok(None);
            }
            let (ms, weight) = (r.f32()?, r.f32()?);
            if !(ms.is_finite() && ms > 0.0 && weight.is_finite() && weight >= 0.0) {
                return Err(DecodeError::Invalid("a figure is not a positive number"));
            }
            Ok(Some(Point { ms, weight: f64::from(weight), count }))
        })?;
        Ok((net, points))
    })?;
    if !r.is_empty() {
        return Err(DecodeError::Invalid("bytes after the last network"));
    }
    Ok(NodeRecord { at, regions, networks })
}

/// The points of every network from every replica's records (`nodes`: per replica, its
/// keys' records), for `MeasuredLatency::build` at `now` (Unix seconds) with the targets
/// `regions`: each figure's weight decays from its record's time to `now`; a record as
/// old as the window is left out; a network in several records of one replica counts
/// once, from the newest. Deterministic: networks in order, replicas in the order given.
pub fn merge<'a>(
    nodes: impl IntoIterator<Item = &'a [NodeRecord]>,
    regions: &[&str],
    half_life: Duration,
    window: Duration,
    now: u64,
) -> BTreeMap<IpNet, Vec<Vec<Point>>> {
    let mut out: BTreeMap<IpNet, Vec<Vec<Point>>> = BTreeMap::new();
    let half_life = half_life.as_secs().max(1) as f64;
    for records in nodes {
        let mut newest: HashMap<IpNet, (u64, &NodeRecord, &[Option<Point>])> = HashMap::new();
        for rec in records {
            if now.saturating_sub(rec.at) >= window.as_secs() {
                continue;
            }
            for (net, points) in &rec.networks {
                let e = newest.entry(*net).or_insert((rec.at, rec, points));
                if rec.at > e.0 {
                    *e = (rec.at, rec, points);
                }
            }
        }
        let mut nets: Vec<_> = newest.into_iter().collect();
        nets.sort_by_key(|(net, _)| *net);
        for (net, (at, rec, points)) in nets {
            let decay = (-(now.saturating_sub(at) as f64) / half_life).exp2();
            let cells = out.entry(net).or_insert_with(|| vec![Vec::new(); regions.len()]);
            for (name, p) in rec.regions.iter().zip(points) {
                let (Some(column), Some(p)) = (regions.iter().position(|r| r == name), p) else {
                    continue;
                };
                cells[column].push(Point { weight: p.weight * decay, ..*p });
            }
        }
    }
    out
}

/// One key of the published table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableChunk {
    /// Which table it is part of: the chunks of one table share it, and a later table has
    /// a larger one.
    pub generation: u64,
    pub index: u16,
    pub count: u16,
    pub regions: Vec<String>,
    /// Network, figure per region, preferred region's index in `regions`.
    pub rows: Vec<Row>,
}

/// `table` as the values of at most `MAX_TABLE_CHUNKS` keys; the number of rows they hold.
pub fn encode_table(table: &MeasuredLatency, generation: u64) -> (Vec<Vec<u8>>, usize) {
    let regions: Vec<&str> = table.columns().iter().map(|c| c.name.as_str()).collect();
    let head = |index: u16, count: u16, rows: u32| {
        let mut w = Writer::new(TABLE_MAGIC, VERSION);
        w.u64(generation);
        w.u16(index);
        w.u16(count);
        w.names(regions.iter().copied());
        w.u32(rows);
        w
    };
    let mut chunks = Chunks::new(CHUNK_BYTES - head(0, 0, 0).bytes.len() - 8, MAX_TABLE_CHUNKS);
    let mut row = Writer::default();
    let mut published = 0;
    for (net, cells, preferred) in table.rows() {
        row.bytes.clear();
        row.net(&net);
        row.u8(preferred.map_or(u8::MAX, |p| p.min(254) as u8));
        for m in cells {
            row.u32(m.samples);
            if m.is_measured() {
                row.f32(m.ms);
            }
        }
        if !chunks.push(&row.bytes) {
            break;
        }
        published += 1;
    }
    let bodies = chunks.into_bodies();
    let count = bodies.len() as u16;
    let chunks = bodies
        .into_iter()
        .enumerate()
        .map(|(i, (body, rows))| {
            let mut w = head(i as u16, count, rows);
            w.bytes.extend_from_slice(&body);
            w.finish()
        })
        .collect();
    (chunks, published)
}

pub fn decode_table(bytes: &[u8]) -> Result<TableChunk, DecodeError> {
    let (mut r, _) = Reader::open(bytes, TABLE_MAGIC, VERSION)?;
    let generation = r.u64()?;
    let (index, count) = (r.u16()?, r.u16()?);
    if index >= count {
        return Err(DecodeError::Invalid("a chunk index past the chunk count"));
    }
    let regions = r.names()?;
    let rows = r.list(|r| {
        let net = r.net()?;
        let preferred = match r.u8()? {
            u8::MAX => None,
            p if (p as usize) < regions.len() => Some(p as usize),
            _ => return Err(DecodeError::Invalid("a preferred region out of range")),
        };
        let cells = r.repeat(regions.len(), |r| {
            let samples = r.u32()?;
            let ms = if samples > 0 { r.f32()? } else { 0.0 };
            Ok(Measured { ms, samples })
        })?;
        Ok((net, cells, preferred))
    })?;
    if !r.is_empty() {
        return Err(DecodeError::Invalid("bytes after the last row"));
    }
    Ok(TableChunk { generation, index, count, regions, rows })
}

/// The rows of the newest table whose chunks are all in `chunks`, with its generation,
/// the figures put in the column order of `regions` (by name; a region the table does not
/// have is unmeasured, one `regions` does not have is left out).
pub fn assemble<'a>(
    chunks: impl IntoIterator<Item = &'a TableChunk>,
    regions: &[&str],
) -> Option<(u64, Vec<Row>)> {
    let mut tables: BTreeMap<u64, Vec<&TableChunk>> = BTreeMap::new();
    for c in chunks {
        tables.entry(c.generation).or_default().push(c);
    }
    let (generation, mut parts) = tables.into_iter().rev().find(|(_, parts)| {
        let count = parts[0].count;
        parts.iter().all(|p| p.count == count)
            && (0..count).all(|i| parts.iter().any(|p| p.index == i))
    })?;
    parts.sort_by_key(|p| p.index);
    parts.dedup_by_key(|p| p.index);
    let mut rows = Vec::new();
    for part in parts {
        let columns: Vec<Option<usize>> =
            part.regions.iter().map(|name| regions.iter().position(|r| r == name)).collect();
        for (net, cells, preferred) in &part.rows {
            let mut mapped = vec![Measured::default(); regions.len()];
            for (m, column) in cells.iter().zip(&columns) {
                if let Some(c) = column {
                    mapped[*c] = *m;
                }
            }
            let preferred = preferred.and_then(|p| columns.get(p).copied().flatten());
            rows.push((*net, mapped, preferred));
        }
    }
    Some((generation, rows))
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::geo::rum::Aggregator;
    use crate::geo::rum::settings::Aggregation;
    use crate::geo::rum::testkit::{REGIONS, columns, ip, rows, secs};

    fn params() -> Aggregation {
        Aggregation {
            min_samples: 3,
            half_life: secs(100),
            window: secs(1000),
            ..Aggregation::default()
        }
    }

    /// The records of one replica's aggregate, through the bytes.
    fn records(a: &mut Aggregator, now: u64) -> Vec<NodeRecord> {
        let (chunks, _) = encode_node(now, &REGIONS, &a.summaries(secs(now)));
        chunks.iter().map(|c| decode_node(c).unwrap()).collect()
    }

    #[test]
    fn one_replica_alone_publishes_its_own_medians() {
        let mut a = Aggregator::new(params(), 2);
        for (t, ms) in [(10, 20.0), (20, 22.0), (30, 90.0), (40, 21.0)] {
            a.record(ip("192.0.2.1"), &[(0, ms), (1, 60.0)], secs(t));
        }
        a.record(ip("2001:db8:9::1"), &[(1, 33.0)], secs(40));
        let local = a.publish(secs(50), columns(), None);
        let merged =
            merge([&records(&mut a, 50)[..]], &REGIONS, params().half_life, params().window, 50);
        let shared = MeasuredLatency::build(&params(), columns(), merged.into_iter(), None);
        // The network's own row is the same; the coarse aggregate too (one network in it).
        assert_eq!(rows(&shared), rows(&local));
        let row = shared.lookup(ip("192.0.2.77")).unwrap();
        assert_eq!(row.latency[0], Measured { ms: 21.0, samples: 4 });
    }

    #[test]
    fn replicas_merge_by_weight_and_their_counts_add_up() {
        let mut a = Aggregator::new(params(), 2);
        let mut b = Aggregator::new(params(), 2);
        // A: 3 samples of 10 ms (weight 3); B: 2 of 50 ms (weight 2), written 100 s later,
        // one half-life: A's weigh 1.5 by then, B's 2, and B's median wins.
        for t in 0..3 {
            a.record(ip("198.51.100.1"), &[(0, 10.0)], secs(100 + t));
        }
        for t in 0..2 {
            b.record(ip("198.51.100.2"), &[(0, 50.0)], secs(200 + t));
        }
        let ra = records(&mut a, 103);
        let rb = records(&mut b, 202);
        let (hl, w) = (params().half_life, params().window);
        let merged = merge([&ra[..], &rb[..]], &REGIONS, hl, w, 202);
        let net: IpNet = "198.51.100.0/24".parse().unwrap();
        let eu = &merged[&net][0];
        assert_eq!(eu.iter().map(|p| (p.ms, p.count)).collect::<Vec<_>>(), [(10.0, 3), (50.0, 2)]);
        let at_103: f64 = [3.0, 2.0, 1.0].iter().map(|age: &f64| (-age / 100.0).exp2()).sum();
        assert!((eu[0].weight - at_103 * (-0.99f64).exp2()).abs() < 1e-4, "{eu:?}");
        let table = MeasuredLatency::build(&params(), columns(), merged.clone().into_iter(), None);
        // 2 samples on B, 3 on A: min_samples 3 is met only together.
        assert_eq!(
            table.lookup(ip("198.51.100.9")).unwrap().latency[0],
            Measured { ms: 50.0, samples: 5 }
        );
        // The order of the replicas does not matter.
        let swapped = merge([&rb[..], &ra[..]], &REGIONS, hl, w, 202);
        let t2 = MeasuredLatency::build(&params(), columns(), swapped.into_iter(), None);
        assert_eq!(rows(&t2), rows(&table));
        // A record as old as the window counts no more.
        let late = merge([&ra[..], &rb[..]], &REGIONS, hl, w, 103 + 1000);
        assert_eq!(late[&net][0].iter().map(|p| p.ms).collect::<Vec<_>>(), [50.0]);
    }

    #[test]
    fn tables_are_cut_into_chunks_and_put_back_together() {
        let p = Aggregation { min_samples: 1, ..params() };
        let mut a = Aggregator::new(p, 2);
        // 60,000 rows of 21 bytes: two chunks.
        for i in 0..60_000u32 {
            let addr = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + (i << 8)));
            a.record(addr, &[(0, 5.0 + (i % 50) as f32), (1, 40.0)], secs(1));
        }
        let table = a.publish(secs(2), columns(), None);
        let (chunks, published) = encode_table(&table, 7);
        assert_eq!(published, table.len());
        assert_eq!(chunks.len(), 2);
        assert!(chunks.iter().all(|c| c.len() <= CHUNK_BYTES));
        let decoded: Vec<TableChunk> = chunks.iter().map(|c| decode_table(c).unwrap()).collect();
        // Only the first chunk of a newer table: the complete one is used.
        let mut newer = decoded[0].clone();
        newer.generation = 8;
        let all: Vec<&TableChunk> = decoded.iter().chain([&newer]).collect();
        let (generation, got) = assemble(all, &REGIONS).unwrap();
        assert_eq!(generation, 7);
        let back = MeasuredLatency::from_rows(&p, columns(), got);
        assert_eq!(rows(&back), rows(&table));
        // A replica listing the regions the other way round gets the same figures.
        let (_, swapped) = assemble(&decoded, &["us-east", "eu-west"]).unwrap();
        assert_eq!(swapped[0].1, [rows(&table)[0].1[1], rows(&table)[0].1[0]]);
        assert!(assemble(&decoded[1..], &REGIONS).is_none(), "a chunk is missing");
        let damaged = &chunks[0][..chunks[0].len() - 3];
        assert!(decode_table(damaged).is_err());
    }
}
