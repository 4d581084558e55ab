//! What the prober shows the rest of the server: it follows reloads through `Control`'s
//! reload hook, gives the admin API each endpoint's probe details, and adds its series to
//! `/metrics` (contract §9).
//!
//! All of it reads `Prober::endpoint_states` and the prober's counters, never the query
//! path's data, and runs only on reloads and admin requests.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use super::{EndpointState, Prober};
use crate::control::Control;
use crate::metrics::{Gauge, Histogram, Series, Source};

/// Connects the prober to `control`: reloads move probing to the new snapshot before it
/// is served, and the admin API and metrics read the prober.
pub fn attach(prober: &Arc<Prober>, control: &Control) {
    let p = prober.clone();
    control.add_reload_hook(Box::new(move |next| p.adopt(next)));
    let p = prober.clone();
    control.set_details(Box::new(move |profile, endpoint| {
        p.endpoint_state(profile, endpoint).map(|s| details(&s))
    }));
    control.set_metrics_source(Arc::new(Metrics(prober.clone())));
}

/// The admin API's extra fields for one endpoint.
pub fn details(s: &EndpointState) -> Map<String, Value> {
    let last_probe = s.last_probe.as_ref().map(|r| {
        json!({
            "at": rfc3339(r.at),
            "ok": r.ok,
            "result": r.kind,
            "reason": r.reason,
            "duration_ms": r.latency.as_secs_f64() * 1000.0,
        })
    });
    let last_change = s.last_change.as_ref().map(|c| {
        json!({
            "at": rfc3339(c.at),
            "from": c.from.as_str(),
            "to": c.to.as_str(),
            "reason": c.reason,
        })
    });
    let results: Map<String, Value> =
        s.results.iter().map(|(k, n)| (k.to_string(), Value::from(*n))).collect();
    let mut m = Map::new();
    m.insert("probed".into(), Value::Bool(s.probed));
    m.insert("last_probe".into(), last_probe.unwrap_or(Value::Null));
    m.insert("last_change".into(), last_change.unwrap_or(Value::Null));
    m.insert("probe_results".into(), Value::Object(results));
    m
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// The prober's series for `/metrics`.
struct Metrics(Arc<Prober>);

impl Source for Metrics {
    fn counters(&self) -> Vec<(Series, u64)> {
        let mut out = Vec::new();
        for s in self.0.endpoint_states() {
            for (kind, n) in &s.results {
                let labels = vec![
                    ("profile", s.profile.clone()),
                    ("endpoint", s.endpoint.clone()),
                    ("result", kind.to_string()),
                ];
                out.push((("steerdns_probe_results", labels), *n));
            }
        }
        out
    }

    fn gauges(&self) -> Vec<Gauge> {
        let stats = self.0.stats();
        let mut out: Vec<Gauge> = vec![
            ("steerdns_probes", "Distinct health probes running", vec![], stats.probes as f64),
            (
                "steerdns_probe_lag_max_seconds",
                "Largest delay of a probe run behind its schedule since the previous scrape",
                vec![],
                stats.max_lag.as_secs_f64(),
            ),
        ];
        for s in self.0.endpoint_states() {
            let Some(last) = &s.last_probe else { continue };
            out.push((
                "steerdns_probe_last_duration_seconds",
                "Duration of each endpoint's latest health probe",
                vec![("profile", s.profile.clone()), ("endpoint", s.endpoint.clone())],
                last.latency.as_secs_f64(),
            ));
        }
        out
    }

    fn histograms(&self) -> Vec<Histogram> {
        self.0
            .durations()
            .into_iter()
            .filter(|h| h.count > 0)
            .map(|h| {
                // Per-bucket counts: prometheus-client's text encoder accumulates them.
                (
                    "steerdns_probe_duration_seconds",
                    "Duration of health probes, by protocol",
                    vec![("protocol", h.protocol.to_string())],
                    h.sum,
                    h.count,
                    h.buckets,
                )
            })
            .collect()
    }
}
