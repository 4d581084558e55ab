//! Load feedback in the admin API: `GET /api/v1/load` (every endpoint with a load feed:
//! its load, utilisation, target and effective share after the last control step), the
//! `load` of each endpoint row of `/api/v1/profiles/{name}`, and `PUT` / `DELETE
//! .../endpoints/{endpoint}/load` for endpoints whose load is pushed (`pushed: true`),
//! made by the caller's token name.

use std::time::{Duration, SystemTime};

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::extract::JsonPath;
use super::{Caller, Shared, error};
use crate::model::Snapshot;
use crate::model::events::{Event, Kind};
use crate::model::load::{FeedSource, LoadFeed};
use crate::responder::explain;
use crate::server::load::pushed::{MAX_TTL, PushedLoad};
use crate::server::load::{LoadEntry, LoadMap, age};
use crate::wire::name::WireName;

/// `GET /api/v1/load`.
pub async fn show(State(c): State<Shared>) -> Response {
    let snap = c.snapshot();
    let map = c.load.current();
    let now = SystemTime::now();
    let endpoints: Vec<Value> = crate::server::load::plan::feeds(&snap)
        .map(|(profile, endpoint, feed)| {
            let mut row = json!({ "profile": profile, "endpoint": endpoint });
            let fields = row_fields(feed, map.get(profile, endpoint), now);
            row.as_object_mut().expect("object").extend(fields);
            row
        })
        .collect();
    let interval =
        snap.load_rules.as_ref().map(|r| humantime::format_duration(r.interval).to_string());
    let mut body = json!({
        "step": map.step,
        "time": (map.step > 0).then(|| rfc3339_ms(map.at_ms)),
        "interval": interval,
        "endpoints": endpoints,
    });
    if let Some(leader) = c.load.publisher().and_then(|p| p.leader()) {
        body["leader"] = json!(leader);
    }
    Json(body).into_response()
}

/// The `load` of an endpoint row: `None` without a load feed.
pub fn endpoint_load(
    map: &LoadMap,
    profile: &str,
    endpoint: &str,
    feed: Option<&LoadFeed>,
) -> Value {
    match feed {
        None => Value::Null,
        Some(feed) => {
            Value::Object(row_fields(feed, map.get(profile, endpoint), SystemTime::now()))
        }
    }
}

/// What is shown of an endpoint with a load feed; before the first step, a full share.
fn row_fields(
    feed: &LoadFeed,
    entry: Option<&LoadEntry>,
    now: SystemTime,
) -> serde_json::Map<String, Value> {
    let state = entry.map(|e| e.state.clone()).unwrap_or(crate::model::load::EndpointLoad::FULL);
    let (source, url) = match &feed.source {
        FeedSource::Json { url, .. } => ("json", Some(url.as_str())),
        FeedSource::Prometheus { url, .. } => ("prometheus", Some(url.as_str())),
        FeedSource::Pushed => ("pushed", None),
    };
    let age = age(entry.and_then(|e| e.read_at_ms), now).map(|d| d.as_secs_f64());
    let v = json!({
        "load": state.load,
        "capacity": feed.capacity,
        "utilisation": state.utilisation,
        "target": state.target,
        "share": state.share,
        "stale": state.stale,
        "above_high": state.above_high,
        "source": source,
        "url": url,
        "age": age,
        "error": entry.and_then(|e| e.error.clone()),
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("a JSON object"),
    }
}

fn rfc3339_ms(ms: u64) -> String {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

/// The body of `PUT .../load`.
/// The largest pushed load and utilisation taken (the API description's bounds): beyond
/// them a number is a mistake, not a measurement.
const MAX_PUSHED_LOAD: f64 = 1e12;
const MAX_PUSHED_UTILISATION: f64 = 1000.0;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PushBody {
    load: Option<f64>,
    utilisation: Option<f64>,
    ttl: Option<String>,
}

type Target = JsonPath<(String, String)>;

/// The profile's absolute name and the endpoint's feed, when the endpoint takes pushed
/// loads; else the error answer (400 for a bad name or a feed that is not pushed, 404).
fn pushed_endpoint(
    snap: &Snapshot,
    name: &str,
    endpoint: &str,
) -> Result<(String, LoadFeed), (StatusCode, String)> {
    let abs = explain::absolute(snap, name)
        .map_err(|_| (StatusCode::BAD_REQUEST, format!("invalid profile name {name:?}")))?;
    let id = snap
        .profile_by_name(&WireName::from_name(&abs))
        .ok_or_else(|| (StatusCode::NOT_FOUND, format!("no profile named {}", abs.to_ascii())))?;
    let p = &snap.profiles[id];
    let ep = p.endpoints.iter().find(|e| e.name == endpoint).ok_or_else(|| {
        (StatusCode::NOT_FOUND, format!("profile {} has no endpoint {endpoint:?}", p.name))
    })?;
    match ep.load.as_deref() {
        Some(feed) if feed.source == FeedSource::Pushed => Ok((p.name.clone(), feed.clone())),
        _ => Err((
            StatusCode::CONFLICT,
            format!(
                "endpoint {endpoint:?} of {} does not take pushed loads (load: {{pushed: true}})",
                p.name
            ),
        )),
    }
}

/// The load and time to live a body asks for.
fn parse_push(
    body: &[u8],
    feed: &LoadFeed,
    default_ttl: Duration,
) -> Result<(f64, Duration), String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if let Some((key, _)) = value.as_object().and_then(|m| m.iter().find(|(_, v)| v.is_null())) {
        return Err(format!("{key:?} is null: leave a key out instead"));
    }
    let b: PushBody = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let load = match (b.load, b.utilisation) {
        (Some(l), None) if l <= MAX_PUSHED_LOAD => l,
        (None, Some(u)) if u <= MAX_PUSHED_UTILISATION => u * feed.capacity,
        (Some(_), None) | (None, Some(_)) => {
            return Err(format!(
                "a load is at most {MAX_PUSHED_LOAD:e} and a utilisation at most \
                 {MAX_PUSHED_UTILISATION}"
            ));
        }
        _ => return Err("give exactly one of \"load\" and \"utilisation\"".into()),
    };
    if !load.is_finite() || load < 0.0 {
        return Err(format!("the load must be a finite number from 0, not {load}"));
    }
    let ttl = match b.ttl.as_deref() {
        None => default_ttl,
        Some(t) => humantime::parse_duration(t).map_err(|e| format!("ttl {t:?}: {e}"))?,
    };
    if ttl.is_zero() {
        return Err("ttl must be above 0".into());
    }
    Ok((load, ttl.min(MAX_TTL)))
}

/// `PUT /api/v1/profiles/{name}/endpoints/{endpoint}/load`.
pub async fn push(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    JsonPath((name, endpoint)): Target,
    body: Bytes,
) -> Response {
    let snap = c.snapshot();
    let (profile, feed) = match pushed_endpoint(&snap, &name, &endpoint) {
        Ok(found) => found,
        Err((code, message)) => return error(code, message),
    };
    let interval = snap.load_rules.as_ref().map_or(Duration::from_secs(5), |r| r.interval);
    let (load, ttl) = match parse_push(&body, &feed, interval * 3) {
        Ok(p) => p,
        Err(e) => {
            let shape = "{\"load\": N} or {\"utilisation\": U}, with an optional \"ttl\": \"30s\"";
            return error(StatusCode::BAD_REQUEST, format!("the body must be {shape}: {e}"));
        }
    };
    let pushed = PushedLoad {
        load,
        at: tokio::time::Instant::now(),
        at_wall: SystemTime::now(),
        ttl,
        by: by.0.clone(),
    };
    // In a cluster the load goes to etcd, for the leader to step with.
    let began = match c.load.publisher() {
        Some(p) => match p.push(&profile, &endpoint, pushed).await {
            Ok(began) => began,
            Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
        },
        None => c.load.pushed.set(&profile, &endpoint, pushed),
    };
    if began {
        tracing::info!(%profile, %endpoint, load, by = %by.0, "pushed loads began");
        let mut event = Event::new(Kind::LoadPushed, &profile, &endpoint).by(&by.0);
        event.to = Some(load.to_string());
        c.events.record(event);
    }
    Json(json!({
        "profile": profile,
        "endpoint": endpoint,
        "load": load,
        "utilisation": load / feed.capacity,
        "ttl": humantime::format_duration(ttl).to_string(),
        "by": by.0,
    }))
    .into_response()
}

/// `DELETE /api/v1/profiles/{name}/endpoints/{endpoint}/load`.
pub async fn clear(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    JsonPath((name, endpoint)): Target,
) -> Response {
    let snap = c.snapshot();
    let (profile, _) = match pushed_endpoint(&snap, &name, &endpoint) {
        Ok(found) => found,
        Err((code, message)) => return error(code, message),
    };
    let cleared = match c.load.publisher() {
        Some(p) => match p.clear(&profile, &endpoint).await {
            Ok(cleared) => cleared,
            Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
        },
        None => c.load.pushed.clear(&profile, &endpoint),
    };
    if cleared {
        tracing::info!(%profile, %endpoint, by = %by.0, "pushed load cleared");
        c.events.record(Event::new(Kind::LoadCleared, &profile, &endpoint).by(&by.0));
    }
    Json(json!({
        "profile": profile,
        "endpoint": endpoint,
        "load": null,
        "utilisation": null,
        "ttl": null,
        "by": by.0,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_bodies() {
        let feed = LoadFeed { capacity: 1000.0, source: FeedSource::Pushed, low: 0.7, high: 0.9 };
        let s = Duration::from_secs;
        type Case<'a> = (&'a str, Result<(f64, Duration), &'a str>);
        let cases: &[Case<'_>] = &[
            (r#"{"load": 870}"#, Ok((870.0, s(15)))),
            (r#"{"utilisation": 0.87, "ttl": "30s"}"#, Ok((870.0, s(30)))),
            (r#"{"load": 0, "ttl": "2h"}"#, Ok((0.0, s(3600)))),
            (r#"{"load": 1, "utilisation": 0.1}"#, Err("exactly one")),
            ("{}", Err("exactly one")),
            (r#"{"load": -1}"#, Err("from 0")),
            (r#"{"load": 1, "ttl": "0s"}"#, Err("above 0")),
            (r#"{"load": 1, "ttl": "soon"}"#, Err("ttl \"soon\"")),
            (r#"{"load": 1, "by": "me"}"#, Err("unknown field")),
            (r#"{"load": "1"}"#, Err("invalid type")),
        ];
        for (body, want) in cases {
            let got = parse_push(body.as_bytes(), &feed, s(15));
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, *w, "{body}"),
                (Err(g), Err(w)) => assert!(g.contains(w), "{body}: {g}"),
                (g, w) => panic!("{body}: got {g:?}, want {w:?}"),
            }
        }
    }
}
