//! `GET /api/v1/events?since=SEQ`: the recent status changes and operator actions, as a
//! status page polls them (ask again with `since` = the `next` of the last answer).

use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::extract::JsonQuery;
use super::{Shared, error};
use crate::model::events::Event;

#[derive(Deserialize)]
pub struct Params {
    since: Option<String>,
}

pub async fn list(State(c): State<Shared>, JsonQuery(q): JsonQuery<Params>) -> Response {
    let since = match q.since.as_deref().map(str::parse::<u64>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return error(StatusCode::BAD_REQUEST, "since= must be an event number (0 or more)");
        }
    };
    let (events, next) = c.events.since(since);
    let events: Vec<Value> = events.iter().map(to_json).collect();
    Json(json!({ "events": events, "next": next })).into_response()
}

/// One event; fields that do not apply to its kind are left out.
fn to_json(e: &Event) -> Value {
    let mut m = Map::new();
    m.insert("seq".into(), e.seq.into());
    m.insert("time".into(), rfc3339(e.time).into());
    m.insert("kind".into(), e.kind.as_str().into());
    m.insert("profile".into(), e.profile.clone().into());
    m.insert("endpoint".into(), e.endpoint.clone().into());
    let optional = [("from", &e.from), ("to", &e.to), ("reason", &e.reason), ("by", &e.by)];
    for (key, value) in optional {
        if let Some(v) = value {
            m.insert(key.into(), v.clone().into());
        }
    }
    Value::Object(m)
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}
