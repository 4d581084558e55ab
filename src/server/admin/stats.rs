//! `/api/v1/stats`: for each selected profile, the queries answered for it and how often
//! each of its endpoints was in an answer, counted since the server started (across
//! reloads, as in `/metrics`). They are totals: a page polling them computes rates from
//! the difference of two readings.

use serde_json::{Map, Value, json};

use super::select::Selected;
use crate::model::{ProfileId, Snapshot, Target};
use crate::server::control::Control;

/// The stats of the selected profiles, with every query answered so far.
pub fn render(control: &Control, snap: &Snapshot, selected: &Selected) -> Value {
    let live: u64 = snap.counters.ecs().iter().sum();
    let profiles: Vec<Value> = selected.ids.iter().map(|&id| profile(control, snap, id)).collect();
    json!({
        "generation": snap.generation,
        "queries": live + control.totals.retired_queries(),
        "total": selected.total,
        "offset": selected.offset,
        "limit": selected.limit,
        "profiles": profiles,
    })
}

/// One profile's totals. Nested endpoints are left out: an answer through one counts
/// for the child profile's endpoint that was handed out.
fn profile(control: &Control, snap: &Snapshot, id: ProfileId) -> Value {
    let p = &snap.profiles[id];
    let leaves: Vec<_> =
        p.endpoints.iter().filter(|ep| !matches!(ep.target, Target::Nested(_))).collect();
    let names: Vec<&str> = leaves.iter().map(|ep| ep.name.as_str()).collect();
    let zone = snap.zones[p.zone].origin.to_string();
    let (retired_queries, retired_answers) = control.totals.retired_profile(&zone, &p.name, &names);
    let answers: Map<String, Value> = leaves
        .iter()
        .zip(retired_answers)
        .map(|(ep, retired)| {
            let live = ep.health_slot.map_or(0, |slot| snap.counters.answers(slot));
            (ep.name.clone(), Value::from(live + retired))
        })
        .collect();
    json!({
        "name": p.name,
        "queries": snap.counters.profile_queries(id) + retired_queries,
        "answers": answers,
    })
}
