//! The latency table (`latency.yaml`, format in `docs/configuration.md`): region coordinates and measured round-trip
//! times from client networks and places to each region, used by performance and groups
//! routing to order regions for a client.
//!
//! A client's row is the most specific one that applies: a CIDR row by longest prefix, then
//! its subdivision, country, grouping, `WORLD` row. CIDR rows are flattened at load time into
//! sorted disjoint intervals (`PrefixMap`), so a lookup is one binary search however many rows
//! there are, and the same interval tells the ECS scope: the shortest prefix around the client
//! that no other row cuts into. Regions a row does not list, and clients without a row, fall
//! back to the great-circle distance from the client's geo location.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use ipnet::IpNet;
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::Entries;
use super::db::Location;
use super::regions::RegionId;
use super::regions::Regions;
use crate::diag::{ConfigErrors, Limit};
use crate::diag::{Sink, yaml_errors};

/// Mean Earth radius (IUGG), km.
const EARTH_RADIUS_KM: f64 = 6371.0088;

/// A region of the table, with its coordinates.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub name: String,
    pub lat: f64,
    pub lon: f64,
}

/// What a row applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowFrom {
    Cidr(IpNet),
    /// A code of the region hierarchy, upper case (`US-CA`, `FR`, `GEO-AS`, `WORLD`).
    Region(String),
}

/// One `rtt:` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub from: RowFrom,
    /// Round-trip time in ms to each region, indexed like `LatencyTable::regions`; `None`
    /// where the row does not list the region.
    pub rtt: Vec<Option<f64>>,
}

/// The row that applies to a client. `scope` is the ECS scope prefix length the choice of
/// row depended on, in the client's address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowMatch {
    /// A CIDR row; `prefix_len` is the row's own length. `scope` is at least that, more when
    /// a more specific row inside it lies close to the client.
    Cidr { row: usize, prefix_len: u8, scope: u8 },
    /// A region-code row matched through the client's geo location; `scope` covers both the
    /// geo network and the CIDR rows around the client.
    Region { row: usize, scope: u8 },
    /// No row: regions are ordered by distance. `scope` as for `Region`.
    None { scope: u8 },
}

impl RowMatch {
    pub fn row(&self) -> Option<usize> {
        match *self {
            RowMatch::Cidr { row, .. } | RowMatch::Region { row, .. } => Some(row),
            RowMatch::None { .. } => None,
        }
    }

    pub fn scope(&self) -> u8 {
        match *self {
            RowMatch::Cidr { scope, .. }
            | RowMatch::Region { scope, .. }
            | RowMatch::None { scope } => scope,
        }
    }
}

/// How far a region is from a client. Orders measured times first (lowest first), then
/// distances, then regions nothing is known about.
#[derive(Clone, Copy, Debug)]
pub enum Metric {
    RttMs(f64),
    Km(f64),
    Unknown,
}

/// For traces: "12 ms", "8342 km", "unknown".
impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Metric::RttMs(v) => write!(f, "{v} ms"),
            Metric::Km(v) => write!(f, "{v:.0} km"),
            Metric::Unknown => f.write_str("unknown"),
        }
    }
}

impl Metric {
    fn key(&self) -> (u8, f64) {
        match *self {
            Metric::RttMs(v) => (0, v),
            Metric::Km(v) => (1, v),
            Metric::Unknown => (2, 0.0),
        }
    }
}

impl Ord for Metric {
    fn cmp(&self, other: &Metric) -> Ordering {
        let (a, b) = (self.key(), other.key());
        a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
    }
}

impl PartialOrd for Metric {
    fn partial_cmp(&self, other: &Metric) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Metric {
    fn eq(&self, other: &Metric) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Metric {}

/// The loaded table. Immutable; share it behind an `Arc`.
#[derive(Debug)]
pub struct LatencyTable {
    regions: Vec<Region>,
    region_index: HashMap<String, usize>,
    rows: Vec<Row>,
    cidrs: PrefixMap,
    /// Hierarchy region → row (looked up per query, by id: no code string is hashed).
    by_region: crate::FastMap<RegionId, usize>,
    hierarchy: Arc<Regions>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    regions: Spanned<Entries<Spanned<String>, Spanned<RawRegion>>>,
    #[serde(default)]
    rtt: Vec<Spanned<RawRow>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegion {
    lat: Spanned<f64>,
    lon: Spanned<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRow {
    from: Spanned<String>,
    to: Spanned<Entries<Spanned<String>, Spanned<f64>>>,
}

impl LatencyTable {
    /// The default most a table file may hold: room for about a million measured rows.
    pub const DEFAULT_LIMIT: Limit = Limit { bytes: 128 << 20, set_by: "limits.latency_table" };

    /// Reads and validates a table; `from:` codes are checked against `hierarchy`.
    pub fn load(path: &Path, hierarchy: Arc<Regions>) -> Result<LatencyTable, ConfigErrors> {
        LatencyTable::load_limited(path, hierarchy, LatencyTable::DEFAULT_LIMIT)
    }

    /// `load` of a file of at most `limit`.
    pub fn load_limited(
        path: &Path,
        hierarchy: Arc<Regions>,
        limit: Limit,
    ) -> Result<LatencyTable, ConfigErrors> {
        let text = crate::diag::read_file(path, limit)?;
        LatencyTable::parse(&text, path, hierarchy)
    }

    /// Parses and validates table text; `file` only names the source in errors.
    pub fn parse(
        text: &str,
        file: &Path,
        hierarchy: Arc<Regions>,
    ) -> Result<LatencyTable, ConfigErrors> {
        // Tables of 100k measured networks are normal; the parser's default budget (sized
        // for hand-written configs) would refuse them. Allow a node and two events a byte:
        // still bounded by the file, which the operator wrote.
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! {
                max_nodes: text.len().max(250_000),
                max_events: (2 * text.len()).max(1_000_000),
            },
        };
        let raw: RawTable = serde_saphyr::from_str_with_options(text, options)
            .map_err(|e| ConfigErrors(yaml_errors(file, text, 0, &e)))?;
        let mut errors = Vec::new();
        let mut sink = Sink { file, errors: &mut errors };
        let (regions, region_index) = build_regions(&mut sink, &raw);
        let mut table = LatencyTable {
            regions,
            region_index,
            rows: Vec::new(),
            cidrs: PrefixMap::default(),
            by_region: HashMap::default(),
            hierarchy,
        };
        let mut cidrs = HashMap::new();
        for row in &raw.rtt {
            table.add_row(&mut sink, &row.value, &mut cidrs);
        }
        table.cidrs = PrefixMap::from_prefixes(cidrs);
        if errors.is_empty() {
            Ok(table)
        } else {
            errors.sort_by_key(|e| (e.pos.line, e.pos.col));
            Err(ConfigErrors(errors))
        }
    }

    /// Every region with its coordinates, in file order; region ids index this slice.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The id of a region by name (an endpoint's `location`).
    pub fn region(&self, name: &str) -> Option<usize> {
        self.region_index.get(name).copied()
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The row for a client: longest-prefix CIDR row, else the row of its subdivision,
    /// country, grouping or WORLD (from `loc`), else none.
    ///
    /// When `loc` is `None` because the geo database had no data for the client, the
    /// decision also depended on that empty network: take the larger of this scope and the
    /// one `GeoDb::lookup_scoped` reports.
    pub fn row_for(&self, client: IpAddr, loc: Option<&Location>) -> RowMatch {
        let client = client.to_canonical();
        let (cidr_row, cidr_scope) = self.cidrs.lookup(client);
        if let Some(row) = cidr_row {
            let prefix_len = match &self.rows[row as usize].from {
                RowFrom::Cidr(net) => net.prefix_len(),
                RowFrom::Region(_) => 0,
            };
            return RowMatch::Cidr { row: row as usize, prefix_len, scope: cidr_scope };
        }
        let scope = cidr_scope.max(loc.map_or(0, |l| l.prefix_len));
        let chain = self.hierarchy.place_chain(loc.map(|l| l.place()));
        let row = chain.ids().iter().find_map(|id| self.by_region.get(id).copied());
        match row {
            Some(row) => RowMatch::Region { row, scope },
            None => RowMatch::None { scope },
        }
    }

    /// How far `region` is for a client whose row is `m`: the row's rtt when it lists the
    /// region, else the great-circle distance from the client's coordinates, else unknown.
    pub fn metric(&self, m: &RowMatch, loc: Option<&Location>, region: usize) -> Metric {
        let rtt = m.row().and_then(|r| self.rows[r].rtt.get(region).copied().flatten());
        if let Some(ms) = rtt {
            return Metric::RttMs(ms);
        }
        match (loc.and_then(Location::coords), self.regions.get(region)) {
            (Some(c), Some(r)) => Metric::Km(great_circle_km(c, (r.lat, r.lon))),
            _ => Metric::Unknown,
        }
    }

    /// Every region id with its metric, nearest first; ties keep file order.
    pub fn ranked(&self, m: &RowMatch, loc: Option<&Location>) -> Vec<(usize, Metric)> {
        let mut out: Vec<_> =
            (0..self.regions.len()).map(|r| (r, self.metric(m, loc, r))).collect();
        out.sort_by_key(|a| a.1);
        out
    }

    /// Adds one row; CIDR rows go to `cidrs` (network → row id) for the prefix map. Ids
    /// only stay meaningful while there are no errors, and a table with errors is dropped.
    fn add_row(&mut self, sink: &mut Sink<'_>, raw: &RawRow, cidrs: &mut HashMap<IpNet, u32>) {
        let before = sink.errors.len();
        let from = self.parse_from(sink, &raw.from);
        let rtt = self.parse_to(sink, &raw.to);
        let Some(from) = from else { return };
        // Claim `from` even when `to` has errors, so a second row from it is still reported.
        let id = self.rows.len();
        let duplicate = match &from {
            RowFrom::Cidr(net) => cidrs.insert(*net, id as u32).is_some(),
            // `parse_from` only gives codes of the hierarchy, so the id exists.
            RowFrom::Region(code) => {
                self.hierarchy.id(code).is_some_and(|r| self.by_region.insert(r, id).is_some())
            }
        };
        if duplicate {
            sink.on(&raw.from, format!("a row from {:?} is already in the table", raw.from.value));
        } else if sink.errors.len() == before {
            self.rows.push(Row { from, rtt });
        }
    }

    fn parse_from(&self, sink: &mut Sink<'_>, from: &Spanned<String>) -> Option<RowFrom> {
        let text = from.value.trim();
        if let Ok(net) = text.parse::<IpNet>() {
            if net.trunc() != net {
                sink.on(from, format!("host bits set in {net} (the network is {})", net.trunc()));
                return None;
            }
            // Clients are matched in their canonical family, so a mapped row would never apply.
            if let IpNet::V6(v6) = net
                && v6.prefix_len() >= 96
                && v6.addr().to_ipv4_mapped().is_some()
            {
                sink.on(from, format!("{net} is IPv4-mapped; write the IPv4 network"));
                return None;
            }
            return Some(RowFrom::Cidr(net));
        }
        if let Some(code) = self.hierarchy.canonical(text) {
            return Some(RowFrom::Region(code.to_string()));
        }
        sink.on(
            from,
            format!(
                "from {text:?} is neither a CIDR nor a known region code (US-CA, FR, GEO-EU, WORLD)"
            ),
        );
        None
    }

    fn parse_to(
        &self,
        sink: &mut Sink<'_>,
        to: &Spanned<Entries<Spanned<String>, Spanned<f64>>>,
    ) -> Vec<Option<f64>> {
        let mut rtt = vec![None; self.regions.len()];
        if to.value.0.is_empty() {
            sink.on(to, "to: lists no region");
        }
        for (name, ms) in &to.value.0 {
            let Some(&r) = self.region_index.get(name.value.as_str()) else {
                sink.on(name, format!("{:?} is not a region of `regions:`", name.value));
                continue;
            };
            if !(ms.value.is_finite() && ms.value >= 0.0) {
                sink.on(ms, format!("rtt {} must be a number of ms >= 0", ms.value));
            } else if rtt[r].replace(ms.value).is_some() {
                sink.on(name, format!("{} is listed twice", name.value));
            }
        }
        rtt
    }
}

fn build_regions(sink: &mut Sink<'_>, raw: &RawTable) -> (Vec<Region>, HashMap<String, usize>) {
    let mut regions = Vec::new();
    let mut index = HashMap::new();
    if raw.regions.value.0.is_empty() {
        sink.on(&raw.regions, "at least one region is needed");
    }
    for (name, r) in &raw.regions.value.0 {
        let n = name.value.trim();
        if n.is_empty() || n.chars().any(char::is_whitespace) {
            sink.on(name, format!("region name {:?} must be non-empty without spaces", name.value));
            continue;
        }
        let lat_ok = in_range(sink, &r.value.lat, "lat", 90.0);
        let lon_ok = in_range(sink, &r.value.lon, "lon", 180.0);
        if index.contains_key(n) {
            sink.on(name, format!("region {n} is listed twice"));
        } else if lat_ok && lon_ok {
            index.insert(n.to_string(), regions.len());
            regions.push(Region {
                name: n.to_string(),
                lat: r.value.lat.value,
                lon: r.value.lon.value,
            });
        }
    }
    (regions, index)
}

fn in_range(sink: &mut Sink<'_>, v: &Spanned<f64>, what: &str, max: f64) -> bool {
    let ok = v.value.is_finite() && v.value.abs() <= max;
    if !ok {
        sink.on(v, format!("{what} {} must be between -{max} and {max}", v.value));
    }
    ok
}

/// Great-circle distance in km between two (latitude, longitude) points in degrees
/// (haversine on a spherical Earth: error below 0.5%, far under what routing needs).
pub fn great_circle_km(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (la1, lo1) = (a.0.to_radians(), a.1.to_radians());
    let (la2, lo2) = (b.0.to_radians(), b.1.to_radians());
    let h = ((la2 - la1) / 2.0).sin().powi(2)
        + la1.cos() * la2.cos() * ((lo2 - lo1) / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_KM * h.sqrt().min(1.0).asin()
}

/// CIDRs of both families mapped to values, searched by binary search. Unlike
/// `netrange::RangeMap` (disjoint ranges) the CIDRs may nest: the most specific wins.
/// Besides the value, a lookup returns the ECS scope: the shortest prefix around the
/// address whose every address gets the same answer.
#[derive(Clone, Debug)]
struct PrefixMap {
    v4: Intervals,
    v6: Intervals,
}

impl Default for PrefixMap {
    fn default() -> PrefixMap {
        PrefixMap::from_prefixes([])
    }
}

impl PrefixMap {
    /// From CIDRs; nested ones are allowed and the longest prefix wins. Host bits are
    /// ignored. The same network twice keeps the later value.
    fn from_prefixes(items: impl IntoIterator<Item = (IpNet, u32)>) -> PrefixMap {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for (net, value) in items {
            let net = net.trunc();
            let span = (bits_of(net.network()), bits_of(net.broadcast()), value);
            if net.addr().is_ipv4() { v4.push(span) } else { v6.push(span) }
        }
        PrefixMap { v4: Intervals::nested(32, v4), v6: Intervals::nested(128, v6) }
    }

    /// The value covering `ip` (if any) and the ECS scope of that answer.
    fn lookup(&self, ip: IpAddr) -> (Option<u32>, u8) {
        match ip {
            IpAddr::V4(_) => self.v4.lookup(bits_of(ip)),
            IpAddr::V6(_) => self.v6.lookup(bits_of(ip)),
        }
    }
}

fn bits_of(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// Disjoint intervals covering a `width`-bit address space: interval `i` runs from
/// `starts[i]` to `starts[i + 1] - 1` (the last one to the top of the space) and holds
/// `values[i]` (`NONE` for a gap). Neighbours never hold the same value.
#[derive(Clone, Debug)]
struct Intervals {
    width: u32,
    starts: Vec<u128>,
    values: Vec<u32>,
    /// For large maps only: `buckets[b]` is the first interval starting at or after the
    /// `b`-th 1/65536 of the space, so a lookup searches one bucket and touches a couple of
    /// cache lines instead of ~18 levels of a 100k-row search.
    buckets: Vec<u32>,
}

const NONE: u32 = u32::MAX;

/// Top address bits that pick a bucket.
const BUCKET_BITS: u32 = 16;

/// Below this many intervals a plain binary search stays in cache anyway.
const BUCKETS_FROM: usize = 4096;

impl Intervals {
    /// Flattens spans that are disjoint or nested (never partly overlapping, as CIDRs are)
    /// with a stack of the spans currently open.
    fn nested(width: u32, mut spans: Vec<(u128, u128, u32)>) -> Intervals {
        spans.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out = Intervals { width, starts: vec![0], values: vec![NONE], buckets: Vec::new() };
        let mut open: Vec<(u128, u32)> = Vec::new();
        for (start, end, value) in spans {
            out.close_before(&mut open, Some(start));
            out.mark(start, value);
            open.push((end, value));
        }
        out.close_before(&mut open, None);
        out.index();
        out
    }

    fn index(&mut self) {
        if self.starts.len() < BUCKETS_FROM {
            return;
        }
        let shift = self.width - BUCKET_BITS;
        let starts = &self.starts;
        self.buckets = (0..1u128 << BUCKET_BITS)
            .map(|b| starts.partition_point(|&s| s < b << shift) as u32)
            .chain([starts.len() as u32])
            .collect();
    }

    /// The interval holding `addr`: the last one starting at or before it.
    fn find(&self, addr: u128) -> usize {
        if self.buckets.is_empty() {
            return self.starts.partition_point(|&s| s <= addr) - 1;
        }
        // Starts before the bucket are all <= addr and those from the next bucket on are
        // > addr, so only the bucket's own starts need searching.
        let b = (addr >> (self.width - BUCKET_BITS)) as usize;
        let (lo, hi) = (self.buckets[b] as usize, self.buckets[b + 1] as usize);
        lo + self.starts[lo..hi].partition_point(|&s| s <= addr) - 1
    }

    /// Closes the open spans that end before `pos` (all of them for `None`), handing their
    /// tail to the span around.
    fn close_before(&mut self, open: &mut Vec<(u128, u32)>, pos: Option<u128>) {
        while let Some(&(end, _)) = open.last() {
            if pos.is_some_and(|p| end >= p) {
                break;
            }
            open.pop();
            if end == self.top() {
                continue;
            }
            self.mark(end + 1, open.last().map_or(NONE, |o| o.1));
        }
    }

    /// From `pos` on, the value is `value`.
    fn mark(&mut self, pos: u128, value: u32) {
        if self.starts.last() == Some(&pos) {
            self.starts.pop();
            self.values.pop();
        }
        if self.values.last() == Some(&value) {
            return;
        }
        self.starts.push(pos);
        self.values.push(value);
    }

    fn top(&self) -> u128 {
        u128::MAX >> (128 - self.width)
    }

    fn lookup(&self, addr: u128) -> (Option<u32>, u8) {
        let i = self.find(addr);
        let start = self.starts[i];
        let end = self.starts.get(i + 1).map_or(self.top(), |next| next - 1);
        // The block around `addr` at prefix p stays inside [start, end] exactly when it
        // contains neither start - 1 nor end + 1, i.e. when p exceeds the common prefix
        // length of addr with each of them.
        let below = if start == 0 { 0 } else { self.common_prefix(addr, start - 1) + 1 };
        let above = if end == self.top() { 0 } else { self.common_prefix(addr, end + 1) + 1 };
        let value = (self.values[i] != NONE).then_some(self.values[i]);
        (value, below.max(above) as u8)
    }

    fn common_prefix(&self, a: u128, b: u128) -> u32 {
        ((a ^ b).leading_zeros() - (128 - self.width)).min(self.width)
    }
}
