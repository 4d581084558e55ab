//! Prometheus metrics. The query path only bumps relaxed atomics in dense arrays that
//! belong to the snapshot (indexed by profile, zone and health slot — no hashing, no
//! lock); a scrape turns them into labelled series. When a reload retires a snapshot its
//! counts are folded into running totals, so counters never go backwards.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dns::responder::Outcome;
use crate::snapshot::Snapshot;
use crate::wire::{Rcode, Rtype};

/// Query types kept apart in `steerdns_queries_total`; the rest are `other`.
const QTYPES: [Rtype; 4] = [Rtype::A, Rtype::AAAA, Rtype::CNAME, Rtype::ANY];
/// RCODEs kept apart; the rest are `other`.
const RCODES: [Rcode; 5] =
    [Rcode::NOERROR, Rcode::NXDOMAIN, Rcode::REFUSED, Rcode::FORMERR, Rcode::NOTIMP];
/// Columns per kept value, plus one for `other`.
const QTYPE_COLUMNS: usize = QTYPES.len() + 1;
const RCODE_COLUMNS: usize = RCODES.len() + 1;

fn qtype_index(t: Rtype) -> usize {
    QTYPES.iter().position(|&k| k == t).unwrap_or(QTYPES.len())
}

fn rcode_index(r: Rcode) -> usize {
    RCODES.iter().position(|&k| k == r).unwrap_or(RCODES.len())
}

/// The label of a kept value's column, or `other`.
fn label<T: ToString>(kept: &[T], column: usize) -> String {
    kept.get(column).map_or_else(|| "other".to_string(), ToString::to_string)
}

const CELLS: usize = QTYPE_COLUMNS * RCODE_COLUMNS;

/// The counters of one snapshot. Rows: each profile, then each zone (names in the zone
/// that are not profiles), then one row for queries outside every zone.
#[derive(Debug)]
pub struct QueryCounters {
    profiles: usize,
    zones: usize,
    queries: Box<[AtomicU64]>,
    answers: Box<[AtomicU64]>,
    ecs: [AtomicU64; 2],
}

fn zeroed(n: usize) -> Box<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

impl QueryCounters {
    pub fn new(profiles: usize, zones: usize, slots: usize) -> QueryCounters {
        QueryCounters {
            profiles,
            zones,
            queries: zeroed((profiles + zones + 1) * CELLS),
            answers: zeroed(slots),
            ecs: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    fn row(&self, o: &Outcome) -> usize {
        match (o.profile, o.zone) {
            (Some(p), _) => p,
            (None, Some(z)) => self.profiles + z,
            (None, None) => self.profiles + self.zones,
        }
    }

    /// Counts one answered query. Relaxed atomics: totals only, no ordering needed.
    pub fn record(&self, o: &Outcome) {
        self.add(Cell::Query(self.cell(o)), 1);
        for &slot in &o.endpoints {
            self.add(Cell::Answer(slot), 1);
        }
        self.ecs[usize::from(o.ecs)].fetch_add(1, Ordering::Relaxed);
    }

    fn cell(&self, o: &Outcome) -> usize {
        self.row(o) * CELLS + qtype_index(o.qtype) * RCODE_COLUMNS + rcode_index(o.rcode)
    }

    fn add(&self, cell: Cell, n: u64) {
        let counter = match cell {
            Cell::Query(i) => self.queries.get(i),
            Cell::Answer(slot) => self.answers.get(slot),
        };
        if let Some(c) = counter {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// A counter of `QueryCounters`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Query(usize),
    Answer(usize),
}

/// Cells a tally holds (a power of two): a direct-mapped table, so counting a query is one
/// index computation, not a search.
const TALLY_CELLS: usize = 64;

/// The counts of one batch of queries, added to a snapshot's counters in one go. Worker
/// threads share the counters, and every query bumps the same few hot cells (its profile's
/// row, the ECS counter); summing a batch first turns those into one atomic add each, so
/// the cache lines move between cores once per batch instead of once per query.
#[derive(Debug)]
pub struct Tally {
    /// `(cell, count)`; a count of 0 marks a free entry.
    cells: [(Cell, u64); TALLY_CELLS],
    ecs: [u64; 2],
}

impl Default for Tally {
    fn default() -> Self {
        Tally { cells: [(Cell::Query(0), 0); TALLY_CELLS], ecs: [0; 2] }
    }
}

impl Tally {
    /// Counts `o`; `counters` must be the ones `flush` will get (the same snapshot).
    pub fn add(&mut self, counters: &QueryCounters, o: &Outcome) {
        self.bump(counters, Cell::Query(counters.cell(o)));
        for &slot in &o.endpoints {
            self.bump(counters, Cell::Answer(slot));
        }
        self.ecs[usize::from(o.ecs)] += 1;
    }

    /// A cell whose entry another cell holds adds that one to the counters first.
    fn bump(&mut self, counters: &QueryCounters, cell: Cell) {
        let key = match cell {
            Cell::Query(i) => i << 1,
            Cell::Answer(s) => s << 1 | 1,
        };
        let at = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TALLY_CELLS.ilog2());
        let entry = &mut self.cells[at as usize];
        if entry.1 > 0 && entry.0 != cell {
            counters.add(entry.0, entry.1);
            entry.1 = 0;
        }
        entry.0 = cell;
        entry.1 += 1;
    }

    /// Adds everything counted so far to `counters` and starts over.
    pub fn flush(&mut self, counters: &QueryCounters) {
        for entry in self.cells.iter_mut().filter(|e| e.1 > 0) {
            counters.add(entry.0, std::mem::take(&mut entry.1));
        }
        for (c, n) in counters.ecs.iter().zip(&mut self.ecs) {
            if *n > 0 {
                c.fetch_add(std::mem::take(n), Ordering::Relaxed);
            }
        }
    }
}

/// A labelled series: metric name and label pairs.
pub type Series = (&'static str, Vec<(&'static str, String)>);

/// Totals carried across reloads and the reload counters. Only reloads and scrapes touch
/// the lock; queries never do.
#[derive(Debug, Default)]
pub struct Metrics {
    totals: Mutex<BTreeMap<Series, u64>>,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
}

impl Metrics {
    /// Folds a snapshot that is being replaced into the running totals.
    pub fn retire(&self, old: &Snapshot) {
        let mut totals = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        for (series, v) in counter_series(old) {
            *totals.entry(series).or_default() += v;
        }
    }

    /// Every counter series: retired totals plus the live snapshot's counts.
    pub fn counters(&self, live: &Snapshot) -> BTreeMap<Series, u64> {
        let mut all = self.totals.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (series, v) in counter_series(live) {
            *all.entry(series).or_default() += v;
        }
        all
    }
}

/// The non-zero counters of a snapshot, labelled.
fn counter_series(s: &Snapshot) -> Vec<(Series, u64)> {
    let c = &s.counters;
    let mut out = Vec::new();
    for (cell, n) in c.queries.iter().enumerate() {
        let n = n.load(Ordering::Relaxed);
        if n == 0 {
            continue;
        }
        let (row, rest) = (cell / CELLS, cell % CELLS);
        let (zone, profile) = row_labels(s, row);
        let labels = vec![
            ("zone", zone),
            ("profile", profile),
            ("qtype", label(&QTYPES, rest / RCODE_COLUMNS)),
            ("rcode", label(&RCODES, rest % RCODE_COLUMNS)),
        ];
        out.push((("steerdns_queries", labels), n));
    }
    for p in &s.profiles {
        for ep in p.endpoints.iter().filter(|e| e.health_slot < c.answers.len()) {
            let n = c.answers[ep.health_slot].load(Ordering::Relaxed);
            if n > 0 {
                let labels = vec![("profile", p.name.clone()), ("endpoint", ep.name.clone())];
                out.push((("steerdns_answers", labels), n));
            }
        }
    }
    for (i, state) in ["absent", "present"].iter().enumerate() {
        let n = c.ecs[i].load(Ordering::Relaxed);
        out.push((("steerdns_ecs_queries", vec![("ecs", state.to_string())]), n));
    }
    out
}

fn row_labels(s: &Snapshot, row: usize) -> (String, String) {
    let c = &s.counters;
    if row < c.profiles {
        let p = &s.profiles[row];
        return (s.zones[p.zone].origin.to_string(), p.name.clone());
    }
    match s.zones.get(row - c.profiles) {
        Some(z) => (z.origin.to_string(), String::new()),
        None => ("none".to_string(), String::new()),
    }
}

/// A gauge series: name, help, labels, value.
pub type Gauge = (&'static str, &'static str, Vec<(&'static str, String)>, f64);

/// Extra series other parts contribute at scrape time (the prober's results).
pub trait Source: Send + Sync {
    fn counters(&self) -> Vec<(Series, u64)>;
    fn gauges(&self) -> Vec<Gauge>;
    /// (name, help, labels, sum, count, per-bucket counts: prometheus-client accumulates them)
    fn histograms(&self) -> Vec<Histogram>;
}

pub type Histogram =
    (&'static str, &'static str, Vec<(&'static str, String)>, f64, u64, Vec<(f64, u64)>);

const HELP: &[(&str, &str)] = &[
    (
        "steerdns_queries",
        "DNS queries answered, by zone, profile (empty for static names), query type and rcode",
    ),
    ("steerdns_answers", "Endpoints handed out in answers, by profile and endpoint"),
    ("steerdns_ecs_queries", "Queries with and without EDNS Client Subnet"),
    ("steerdns_reloads", "Configuration reloads applied"),
    ("steerdns_reload_failures", "Configuration reloads rejected (the old configuration stayed)"),
    ("steerdns_probe_results", "Health probe results, by profile, endpoint and result"),
];

fn help(name: &str) -> &'static str {
    HELP.iter().find(|(n, _)| *n == name).map_or("steerdns counter", |(_, h)| h)
}

/// The scrape's data, encoded by prometheus-client.
#[derive(Debug)]
struct Scrape {
    counters: BTreeMap<Series, u64>,
    gauges: Vec<Gauge>,
    histograms: Vec<Histogram>,
}

impl prometheus_client::collector::Collector for Scrape {
    fn encode(&self, mut enc: prometheus_client::encoding::DescriptorEncoder) -> std::fmt::Result {
        use prometheus_client::encoding::NoLabelSet;
        use prometheus_client::metrics::MetricType;
        let mut names: Vec<&'static str> = self.counters.keys().map(|(n, _)| *n).collect();
        names.dedup();
        for name in names {
            let mut m = enc.encode_descriptor(name, help(name), None, MetricType::Counter)?;
            for ((_, labels), v) in self.counters.iter().filter(|((n, _), _)| *n == name) {
                m.encode_family(labels)?.encode_counter::<NoLabelSet, _, u64>(v, None)?;
            }
        }
        let mut gauge_names: Vec<(&'static str, &'static str)> =
            self.gauges.iter().map(|g| (g.0, g.1)).collect();
        gauge_names.dedup();
        for (name, h) in gauge_names {
            let mut m = enc.encode_descriptor(name, h, None, MetricType::Gauge)?;
            for (_, _, labels, v) in self.gauges.iter().filter(|g| g.0 == name) {
                m.encode_family(labels)?.encode_gauge(v)?;
            }
        }
        let mut hist_names: Vec<(&'static str, &'static str)> =
            self.histograms.iter().map(|g| (g.0, g.1)).collect();
        hist_names.dedup();
        for (name, h) in hist_names {
            let mut m = enc.encode_descriptor(name, h, None, MetricType::Histogram)?;
            for (_, _, labels, sum, count, buckets) in
                self.histograms.iter().filter(|g| g.0 == name)
            {
                m.encode_family(labels)?
                    .encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
            }
        }
        Ok(())
    }
}

/// The Prometheus text exposition of everything.
pub fn render(c: &crate::control::Control) -> String {
    let snap = c.snapshot();
    let mut counters = c.metrics.counters(&snap);
    counters.insert(("steerdns_reloads", vec![]), c.metrics.reloads.load(Ordering::Relaxed));
    counters.insert(
        ("steerdns_reload_failures", vec![]),
        c.metrics.reload_failures.load(Ordering::Relaxed),
    );
    let mut gauges = vec![
        (
            "steerdns_config_generation",
            "Generation of the running configuration",
            vec![],
            snap.generation as f64,
        ),
        (
            "steerdns_profiles",
            "Profiles in the running configuration",
            vec![],
            snap.profiles.len() as f64,
        ),
    ];
    gauges.extend(endpoint_status_gauges(&snap));
    let mut histograms = Vec::new();
    if let Some(src) = c.metrics_source() {
        counters.extend(src.counters());
        gauges.extend(src.gauges());
        histograms.extend(src.histograms());
    }
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Scrape { counters, gauges, histograms }));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

/// One series per endpoint, value 1, labelled with its current status.
fn endpoint_status_gauges(snap: &Snapshot) -> Vec<Gauge> {
    let ctx = crate::routing::Ctx::new(&snap.profiles, &*snap.health, &snap.world);
    snap.profiles
        .iter()
        .flat_map(|p| p.endpoints.iter().map(move |ep| (p, ep)))
        .map(|(p, ep)| {
            let status = crate::routing::status::endpoint_status(ctx, ep).as_str().to_string();
            let labels = vec![
                ("profile", p.name.clone()),
                ("endpoint", ep.name.clone()),
                ("status", status),
            ];
            (
                "steerdns_endpoint_status",
                "Current status of each endpoint (1 for the status it is in)",
                labels,
                1.0,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(profile: Option<usize>, rcode: Rcode, ecs: bool, endpoints: &[usize]) -> Outcome {
        Outcome {
            zone: Some(0),
            profile,
            qtype: Rtype::A,
            rcode,
            ecs,
            endpoints: endpoints.iter().copied().collect(),
        }
    }

    fn values(c: &QueryCounters) -> (Vec<u64>, Vec<u64>, [u64; 2]) {
        let load = |v: &[AtomicU64]| v.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let ecs = [c.ecs[0].load(Ordering::Relaxed), c.ecs[1].load(Ordering::Relaxed)];
        (load(&c.queries), load(&c.answers), ecs)
    }

    #[test]
    fn a_tally_adds_up_to_what_recording_each_query_does() {
        // 300 profiles and slots: far more distinct cells than a tally holds at once.
        let outcomes: Vec<Outcome> = (0..5000usize)
            .map(|i| {
                let p = (i * 7919) % 300;
                outcome(
                    Some(p).filter(|_| i % 5 != 0),
                    [Rcode::NOERROR, Rcode::NXDOMAIN, Rcode::REFUSED][i % 3],
                    i % 2 == 0,
                    &[p, 299 - p],
                )
            })
            .collect();
        let (direct, tallied) = (QueryCounters::new(300, 1, 300), QueryCounters::new(300, 1, 300));
        let mut tally = Tally::default();
        for (i, o) in outcomes.iter().enumerate() {
            direct.record(o);
            tally.add(&tallied, o);
            if i % 32 == 31 {
                tally.flush(&tallied);
            }
        }
        tally.flush(&tallied);
        assert_eq!(values(&tallied), values(&direct));
        assert_eq!(values(&direct).2, [2500, 2500]);
    }
}
