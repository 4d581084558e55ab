//! Prometheus metrics as the admin API renders them. The query path counts into the
//! snapshot's `QueryCounters`; a scrape turns them into labelled series. When a reload
//! retires a snapshot its counts are folded into running totals, so counters never go
//! backwards.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::Snapshot;
use crate::model::counters::Row;

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
    let other = || "other".to_string();
    for q in c.queries() {
        let (zone, profile) = row_labels(s, q.row);
        let labels = vec![
            ("zone", zone),
            ("profile", profile),
            ("qtype", q.qtype.map_or_else(other, |t| t.to_string())),
            ("rcode", q.rcode.map_or_else(other, |r| r.to_string())),
        ];
        out.push((("steerdns_queries", labels), q.count));
    }
    for p in &s.profiles {
        for ep in &p.endpoints {
            let n = c.answers(ep.health_slot);
            if n > 0 {
                let labels = vec![("profile", p.name.clone()), ("endpoint", ep.name.clone())];
                out.push((("steerdns_answers", labels), n));
            }
        }
    }
    for (n, state) in c.ecs().into_iter().zip(["absent", "present"]) {
        out.push((("steerdns_ecs_queries", vec![("ecs", state.to_string())]), n));
    }
    out
}

fn row_labels(s: &Snapshot, row: Row) -> (String, String) {
    match row {
        Row::Profile(id) => {
            let p = &s.profiles[id];
            (s.zones[p.zone].origin.to_string(), p.name.clone())
        }
        Row::Zone(z) => (s.zones[z].origin.to_string(), String::new()),
        Row::Outside => ("none".to_string(), String::new()),
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
