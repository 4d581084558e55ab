//! What the admin API shows of each endpoint's probing: the last probe, the last status
//! change and the result counts, read from the prober; in a cluster also every vantage
//! point's view of each endpoint and the verdict.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use hickory_proto::rr::Name;

use crate::FastMap;
use crate::model::vantage::View;
use crate::model::{Snapshot, Target};
use crate::probe::{EndpointState, Prober};
use crate::responder::explain::{
    self, EndpointHealth, EndpointMonitors, MonitorResult, VantagePoint,
};

/// The extra fields of every leaf endpoint of `profile` (absolute name), by endpoint name:
/// built once per profile, so that its details cost grows with its endpoints, not with
/// their square.
pub fn endpoint_details(prober: &Prober, profile: &str) -> FastMap<String, Map<String, Value>> {
    prober.profile_states(profile).into_iter().map(|s| (s.endpoint.clone(), details(&s))).collect()
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
    if let Some(c) = &s.monitors {
        m.insert("reason".into(), Value::String(c.reason.clone()));
        m.insert("monitor_rule".into(), Value::String(c.rule.to_string()));
        let monitors = c.monitors.iter().map(|m| {
            json!({
                "name": m.name,
                "protocol": m.protocol.as_str(),
                "status": m.status.as_str(),
                "reason": m.reason,
            })
        });
        m.insert("monitors".into(), Value::Array(monitors.collect()));
        let overriding = c.overridden_by.as_ref().map(super::health::pushed_json);
        m.insert("health_override".into(), overriding.unwrap_or(Value::Null));
    }
    if let Some(v) = &s.vantage {
        m.insert("verdict".into(), json!({ "status": v.status.as_str(), "reason": v.reason }));
        m.insert("vantage_points".into(), vantage_points(&v.views));
    }
    m
}

/// Each vantage point's view: node, status, reason and since when.
pub fn vantage_points(views: &[View]) -> Value {
    let list = views.iter().map(|v| {
        json!({ "node": v.node, "status": v.status.as_str(), "reason": v.reason, "at": rfc3339(v.at) })
    });
    Value::Array(list.collect())
}

pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// The monitors of every endpoint of the profile `name` leads to (and of the profiles it
/// nests) that has several, or a pushed or file one, for the admin API's explain.
pub fn monitors_of(prober: &Prober, snap: &Snapshot, name: &Name) -> Vec<EndpointMonitors> {
    let mut out = Vec::new();
    for id in explain::profiles_reached(snap, name) {
        let p = &snap.profiles[id];
        let shown = |s: &EndpointState| {
            let ep = p.endpoints.iter().find(|e| e.name == s.endpoint);
            ep.is_some_and(explain::lists_monitors)
        };
        for s in prober.profile_states(&p.name).into_iter().filter(shown) {
            let Some(c) = s.monitors else { continue };
            let monitors = c.monitors.iter().map(|m| MonitorResult {
                name: m.name.clone(),
                protocol: m.protocol.as_str().to_string(),
                status: m.status.as_str().to_string(),
                reason: m.reason.clone(),
            });
            out.push(EndpointMonitors {
                profile: s.profile,
                endpoint: s.endpoint,
                status: c.status.as_str().to_string(),
                reason: c.reason,
                rule: c.rule.to_string(),
                monitors: monitors.collect(),
            });
        }
    }
    out
}

/// The verdict and vantage points of every monitored endpoint of the profile `name` leads
/// to, and of the profiles it nests, for the admin API's explain.
pub fn vantage_of(prober: &Prober, snap: &Snapshot, name: &Name) -> Vec<EndpointHealth> {
    let mut out = Vec::new();
    for id in explain::profiles_reached(snap, name) {
        let p = &snap.profiles[id];
        let mut states: FastMap<String, EndpointState> =
            prober.profile_states(&p.name).into_iter().map(|s| (s.endpoint.clone(), s)).collect();
        for ep in &p.endpoints {
            if matches!(ep.target, Target::Nested(_)) {
                continue;
            }
            let Some(state) = states.remove(&ep.name) else { continue };
            let Some(v) = state.vantage else { continue };
            let points = v.views.iter().map(|v| VantagePoint {
                node: v.node.clone(),
                status: v.status.as_str().to_string(),
                reason: v.reason.clone(),
                at: rfc3339(v.at),
            });
            out.push(EndpointHealth {
                profile: p.name.clone(),
                endpoint: ep.name.clone(),
                status: v.status.as_str().to_string(),
                reason: v.reason,
                vantage_points: points.collect(),
            });
        }
    }
    out
}
