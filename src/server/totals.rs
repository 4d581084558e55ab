//! Counts that outlive a configuration: the query counters of every retired snapshot,
//! folded in when a reload replaces it (so counters never go backwards), and the reload
//! counts. Only reloads and scrapes touch them; queries never do.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use crate::model::Snapshot;
use crate::model::counters::Row;

/// A labelled counter series.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    pub name: &'static str,
    pub labels: Vec<(&'static str, String)>,
}

impl Series {
    pub fn new(name: &'static str, labels: Vec<(&'static str, String)>) -> Series {
        Series { name, labels }
    }
}

/// Totals carried across reloads and the reload counters.
#[derive(Debug, Default)]
pub struct Totals {
    totals: Mutex<BTreeMap<Series, u64>>,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
}

impl Totals {
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
        out.push((Series::new("steerdns_queries", labels), q.count));
    }
    for p in &s.profiles {
        for ep in &p.endpoints {
            let n = ep.health_slot.map_or(0, |slot| c.answers(slot));
            if n > 0 {
                let labels = vec![("profile", p.name.clone()), ("endpoint", ep.name.clone())];
                out.push((Series::new("steerdns_answers", labels), n));
            }
        }
    }
    for (n, state) in c.ecs().into_iter().zip(["absent", "present"]) {
        out.push((Series::new("steerdns_ecs_queries", vec![("ecs", state.to_string())]), n));
    }
    for (n, kind) in c.cookies().into_iter().zip(["absent", "client_only", "valid", "invalid"]) {
        out.push((Series::new("steerdns_cookie_queries", vec![("cookie", kind.to_string())]), n));
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
