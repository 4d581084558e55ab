//! `steerdns explain` and the admin API's explain: answer one query exactly as the server
//! would — the same responder, the same routing core — and show the decision trace. The
//! admin API's adds, in a cluster, how every replica sees the probed endpoints involved.

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::Serialize;

use super::{Packet, Transport, respond};
use crate::geo::rum::MeasuredLatency;
use crate::model::health::{HealthView, Status};
use crate::model::snapshot::Snapshot;
use crate::model::{Endpoint, Target};
use crate::routing::{LoadLookup, Trace};
use crate::wire::Rcode;
use crate::wire::name::WireName;

/// What the server would answer, and why.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Explanation {
    pub name: String,
    #[serde(rename = "type")]
    pub qtype: String,
    pub client: IpAddr,
    pub rcode: String,
    pub answer: Vec<String>,
    pub authority: Vec<String>,
    /// ECS scope prefix length of the answer.
    pub scope: Option<u8>,
    pub trace: Vec<String>,
    /// In a cluster (the admin API's explain): the verdict and the vantage points of each
    /// monitored endpoint of the profiles the name leads to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<EndpointHealth>,
    /// The admin API's explain: each endpoint with several monitors (or a pushed or file
    /// one) of the profiles the name leads to, with every monitor's result and the rule.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub monitors: Vec<EndpointMonitors>,
}

/// How an endpoint's monitors made its status.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EndpointMonitors {
    pub profile: String,
    pub endpoint: String,
    pub status: String,
    pub reason: String,
    pub rule: String,
    pub monitors: Vec<MonitorResult>,
}

/// One monitor's result.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MonitorResult {
    pub name: String,
    pub protocol: String,
    pub status: String,
    pub reason: String,
}

/// One endpoint's status as the replicas agreed on it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EndpointHealth {
    pub profile: String,
    pub endpoint: String,
    /// The verdict: the status the replicas' views decide (a live push may override it).
    pub status: String,
    pub reason: String,
    pub vantage_points: Vec<VantagePoint>,
}

/// One replica's view of an endpoint: its monitors' results combined by the rule.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VantagePoint {
    pub node: String,
    pub status: String,
    pub reason: String,
    /// When the view last changed (RFC 3339).
    pub at: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ExplainError {
    #[error("invalid name `{0}`")]
    Name(String),
    #[error("unknown query type `{0}`")]
    Type(String),
    #[error("--down `{0}`: {1}")]
    Down(String, String),
}

/// Every monitored endpoint online: what `steerdns explain` assumes unless told `--down`.
/// Unmonitored and disabled endpoints keep their status.
pub struct AllHealthy<'a>(pub &'a dyn HealthView);

impl HealthView for AllHealthy<'_> {
    fn status(&self, slot: usize) -> Status {
        match self.0.status(slot) {
            Status::Checking | Status::Degraded => Status::Online,
            other => other,
        }
    }
}

/// The profiles `name` leads to: its own, then every profile it nests, each once (ids in
/// `snap.profiles`); none when no profile has that name.
pub fn profiles_reached(snap: &Snapshot, name: &Name) -> Vec<usize> {
    let Some(first) = snap.profile_by_name(&WireName::from_name(name)) else { return Vec::new() };
    let mut seen = vec![first];
    let mut next = 0;
    while let Some(&id) = seen.get(next) {
        next += 1;
        for ep in &snap.profiles[id].endpoints {
            if let Target::Nested(n) = &ep.target
                && !seen.contains(&n.child)
            {
                seen.push(n.child);
            }
        }
    }
    seen
}

/// Whether explain lists `ep`'s monitors: when it has several, or one that is not a probe
/// (pushed, file), whose status is not simply a probe's.
pub fn lists_monitors(ep: &Endpoint) -> bool {
    ep.monitors.len() > 1 || ep.monitors.iter().any(|m| !m.is_probed())
}

/// What `steerdns explain` shows for monitors, which it does not run: each endpoint the
/// name leads to with several monitors (or a pushed or file one), as the admin API's
/// explain selects them, with its rule and the status `health` gives it (online, or
/// degraded when marked `--down`, one of the `downs`), and each monitor as configured.
pub fn configured_monitors(
    snap: &Snapshot,
    health: &dyn HealthView,
    downs: &[(usize, Status)],
    name: &Name,
) -> Vec<EndpointMonitors> {
    let mut out = Vec::new();
    for id in profiles_reached(snap, name) {
        let p = &snap.profiles[id];
        for ep in &p.endpoints {
            let Some(slot) = ep.health_slot.filter(|_| lists_monitors(ep)) else { continue };
            let status = health.status(slot);
            let reason = if downs.iter().any(|(s, _)| *s == slot) {
                "marked down with --down".to_string()
            } else {
                format!("not probed offline: taken as {}", status.as_str())
            };
            let monitors = ep.monitors.iter().map(|m| MonitorResult {
                name: m.name.clone(),
                protocol: m.protocol.as_str().to_string(),
                status: NOT_PROBED.to_string(),
                reason: String::new(),
            });
            out.push(EndpointMonitors {
                profile: p.name.clone(),
                endpoint: ep.name.clone(),
                status: status.as_str().to_string(),
                reason,
                rule: ep.monitor_rule.to_string(),
                monitors: monitors.collect(),
            });
        }
    }
    out
}

/// A monitor's status in `steerdns explain`, which runs no probe.
pub const NOT_PROBED: &str = "not probed offline";

/// Resolves `name` (absolute, or relative to the only zone) to an absolute name.
pub fn absolute(snap: &Snapshot, name: &str) -> Result<Name, ExplainError> {
    let bad = || ExplainError::Name(name.to_string());
    if name.ends_with('.') || snap.zones.len() != 1 {
        return Name::from_ascii(name).map_err(|_| bad());
    }
    let origin = snap.zones[0].origin.to_name();
    Name::from_ascii(name).and_then(|n| n.append_domain(&origin)).map_err(|_| bad())
}

pub fn parse_type(text: &str) -> Result<RecordType, ExplainError> {
    text.to_ascii_uppercase().parse().map_err(|_| ExplainError::Type(text.to_string()))
}

/// `profile/endpoint` names → health slots to mark degraded.
pub fn down_slots(snap: &Snapshot, downs: &[String]) -> Result<Vec<(usize, Status)>, ExplainError> {
    downs
        .iter()
        .map(|d| {
            let err = |m: &str| ExplainError::Down(d.clone(), m.to_string());
            let (p, e) = d.rsplit_once('/').ok_or_else(|| err("write it as profile/endpoint"))?;
            let name = absolute(snap, p).map_err(|_| err("invalid profile name"))?;
            let pid = snap.profile_by_name(&WireName::from_name(&name)).ok_or_else(|| err("no such profile"))?;
            let ep = snap.profiles[pid].endpoints.iter().find(|x| x.name == e).ok_or_else(|| err("no such endpoint"))?;
            let slot = ep.health_slot.ok_or_else(|| {
                err("a nested endpoint's status comes from its child profile; mark the child's endpoints down")
            })?;
            Ok((slot, Status::Degraded))
        })
        .collect()
}

/// Answers `name`/`qtype` for a query from `client` with `health` and the `measured`
/// latency of real users (`None`: none) — the responder the wire runs, run once with a
/// trace — and shows the answer with the decision that produced it. With `loads` (what
/// the load control loop last computed, by profile and endpoint name) the trace also
/// shows a loaded endpoint's load, utilisation and target beside its share.
pub fn explain(
    snap: &Snapshot,
    health: &dyn HealthView,
    name: &Name,
    qtype: RecordType,
    client: IpAddr,
    measured: Option<&MeasuredLatency>,
    loads: Option<LoadLookup>,
) -> Explanation {
    const SEED: u64 = 0x005e_edde_c1de;
    let trace = loads.map_or_else(Trace::default, Trace::with_loads);
    let query = query_bytes(name, qtype, client);
    let mut out = Vec::new();
    let mut rng = SmallRng::seed_from_u64(SEED);
    // Over TCP, so the whole answer is shown whatever its size.
    let now = crate::wire::cookie::unix_now();
    let packet = Packet { bytes: &query, src: client, transport: Transport::Tcp, now, measured };
    respond(snap, health, packet, &mut rng, &mut out, Some(&trace));
    let reply = Message::from_vec(&out).expect("the responder writes valid messages");
    Explanation {
        name: name.to_ascii(),
        qtype: qtype.to_string(),
        client,
        rcode: rcode_name(&reply),
        answer: reply.answers.iter().map(ToString::to_string).collect(),
        authority: reply.authorities.iter().map(ToString::to_string).collect(),
        scope: ecs_scope(&reply),
        trace: trace.into_lines(),
        health: Vec::new(),
        monitors: Vec::new(),
    }
}

fn query_bytes(name: &Name, qtype: RecordType, client: IpAddr) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(name.clone(), qtype));
    let prefix = if client.is_ipv4() { 32 } else { 128 };
    let mut edns = Edns::new();
    edns.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(client, prefix, 0)));
    m.set_edns(edns);
    m.to_vec().expect("a query with a valid name encodes")
}

fn rcode_name(reply: &Message) -> String {
    let low = u16::from(reply.metadata.response_code) as u8;
    let high = reply.edns.as_ref().map_or(0, |e| e.rcode_high());
    Rcode::from_parts(low, high).to_string()
}

fn ecs_scope(reply: &Message) -> Option<u8> {
    reply.edns.as_ref()?.options().as_ref().iter().find_map(|(_, o)| match o {
        EdnsOption::Subnet(s) => Some(s.scope_prefix()),
        _ => None,
    })
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "query:  {} {} from {}", self.name, self.qtype, self.client)?;
        writeln!(f, "rcode:  {}", self.rcode)?;
        if let Some(s) = self.scope {
            writeln!(f, "scope:  /{s} (ECS scope of the answer)")?;
        }
        writeln!(f, "answer:")?;
        for a in &self.answer {
            writeln!(f, "  {a}")?;
        }
        for a in &self.authority {
            writeln!(f, "  (authority) {a}")?;
        }
        writeln!(f, "trace:")?;
        for t in &self.trace {
            writeln!(f, "  - {t}")?;
        }
        if !self.health.is_empty() {
            writeln!(f, "health across replicas:")?;
        }
        for h in &self.health {
            writeln!(f, "  {}/{}: {} ({})", h.profile, h.endpoint, h.status, h.reason)?;
            for v in &h.vantage_points {
                writeln!(f, "    {}: {} since {}: {}", v.node, v.status, v.at, v.reason)?;
            }
        }
        if !self.monitors.is_empty() {
            writeln!(f, "monitors:")?;
        }
        for e in &self.monitors {
            writeln!(
                f,
                "  {}/{}: {} by rule {} ({})",
                e.profile, e.endpoint, e.status, e.rule, e.reason
            )?;
            for m in &e.monitors {
                write!(f, "    {} ({}): {}", m.name, m.protocol, m.status)?;
                if m.reason.is_empty() {
                    writeln!(f)?;
                } else {
                    writeln!(f, ": {}", m.reason)?;
                }
            }
        }
        Ok(())
    }
}
