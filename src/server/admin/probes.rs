//! What the admin API shows of each endpoint's probing: the last probe, the last status
//! change and the result counts, read from the prober.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::probe::{EndpointState, Prober};

/// The extra fields of `endpoint` of `profile` (absolute name), when it exists.
pub fn endpoint_details(
    prober: &Prober,
    profile: &str,
    endpoint: &str,
) -> Option<Map<String, Value>> {
    prober.endpoint_state(profile, endpoint).map(|s| details(&s))
}

/// The admin API's extra fields for one endpoint.
fn details(s: &EndpointState) -> Map<String, Value> {
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
