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

    /// What retired snapshots counted for one profile: its queries, and how often each
    /// of `endpoints` was in an answer (in that order). Found by the profile's labels, so
    /// the counts carry across reloads exactly as its `/metrics` series do.
    pub fn retired_profile(
        &self,
        zone: &str,
        profile: &str,
        endpoints: &[&str],
    ) -> (u64, Vec<u64>) {
        let totals = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        // Series sort by name, then labels in order; those starting with this zone and
        // profile (every query type and code) follow the bare prefix in one run.
        let prefix = vec![("zone", zone.to_string()), ("profile", profile.to_string())];
        let start = Series::new("steerdns_queries", prefix.clone());
        let queries = totals
            .range(&start..)
            .take_while(|(s, _)| s.name == start.name && s.labels.starts_with(&prefix))
            .map(|(_, n)| n)
            .sum();
        let answers = endpoints
            .iter()
            .map(|ep| {
                let labels = vec![("profile", profile.to_string()), ("endpoint", ep.to_string())];
                totals.get(&Series::new("steerdns_answers", labels)).copied().unwrap_or(0)
            })
            .collect();
        (queries, answers)
    }

    /// Every query retired snapshots answered (the sum of their ECS counters, which count
    /// each answered query once).
    pub fn retired_queries(&self) -> u64 {
        let totals = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        ["absent", "present"]
            .iter()
            .map(|state| {
                let series = Series::new("steerdns_ecs_queries", vec![("ecs", state.to_string())]);
                totals.get(&series).copied().unwrap_or(0)
            })
            .sum()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn query(zone: &str, profile: &str, qtype: &str, rcode: &str) -> Series {
        let labels = vec![
            ("zone", zone.to_string()),
            ("profile", profile.to_string()),
            ("qtype", qtype.to_string()),
            ("rcode", rcode.to_string()),
        ];
        Series::new("steerdns_queries", labels)
    }

    fn answers(profile: &str, endpoint: &str) -> Series {
        let labels = vec![("profile", profile.to_string()), ("endpoint", endpoint.to_string())];
        Series::new("steerdns_answers", labels)
    }

    #[test]
    fn a_profiles_retired_counts_are_its_own_series_only() {
        let t = Totals::default();
        let z = "tm.example.test.";
        let series = [
            (query(z, "a.tm.example.test.", "A", "NOERROR"), 5),
            (query(z, "a.tm.example.test.", "AAAA", "NOERROR"), 2),
            (query(z, "a.tm.example.test.", "other", "other"), 1),
            // Neighbours in the map's order: a name sharing a's prefix, the zone's other
            // names, another zone.
            (query(z, "a.tm.example.test.x", "A", "NOERROR"), 100),
            (query(z, "", "A", "NXDOMAIN"), 100),
            (query("other.test.", "a.tm.example.test.", "A", "NOERROR"), 100),
            (answers("a.tm.example.test.", "one"), 4),
            (answers("a.tm.example.test.", "two"), 3),
            (answers("a.tm.example.test.x", "one"), 100),
            (Series::new("steerdns_ecs_queries", vec![("ecs", "absent".into())]), 9),
            (Series::new("steerdns_ecs_queries", vec![("ecs", "present".into())]), 1),
        ];
        t.totals.lock().unwrap().extend(series);
        let (queries, per_endpoint) =
            t.retired_profile(z, "a.tm.example.test.", &["one", "two", "three"]);
        assert_eq!(queries, 8);
        assert_eq!(per_endpoint, [4, 3, 0]);
        assert_eq!(t.retired_profile(z, "b.tm.example.test.", &["one"]), (0, vec![0]));
        assert_eq!(t.retired_queries(), 10);
    }
}
