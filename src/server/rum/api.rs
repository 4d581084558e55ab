//! `GET /api/v1/rum` on the admin API (read-only): what the published table says about a
//! client address (`?addr=IP`), or without one, the table's size and targets.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::server::admin::extract::JsonQuery;
use crate::server::control::Control;

#[derive(Deserialize)]
pub struct Params {
    addr: Option<String>,
}

/// A time as the beacon wrote it (to the µs), not the nearest `f64` of the stored `f32`.
fn ms(v: f32) -> f64 {
    (f64::from(v) * 1000.0).round() / 1000.0
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(json!({ "error": message.into() }))).into_response()
}

pub async fn lookup(State(c): State<Arc<Control>>, JsonQuery(q): JsonQuery<Params>) -> Response {
    let Some(rum) = c.rum.get() else {
        return error(StatusCode::NOT_FOUND, "real user measurements are off (no rum: block)");
    };
    let table = rum.table();
    let Some(text) = q.addr else {
        let regions: Vec<&str> = table.columns().iter().map(|c| c.name.as_str()).collect();
        return Json(json!({
            "networks": rum.counts.networks.load(Ordering::Relaxed),
            "rows": table.len(),
            "regions": regions,
        }))
        .into_response();
    };
    let Ok(addr) = text.parse::<IpAddr>() else {
        return error(StatusCode::BAD_REQUEST, "addr= must be an IP address");
    };
    let Some(row) = table.lookup(addr) else {
        return error(StatusCode::NOT_FOUND, format!("no measurements for {addr}"));
    };
    let regions: Vec<Value> = row
        .regions()
        .filter(|(_, m)| m.is_measured())
        .map(|(col, m)| json!({ "region": col.name, "ms": ms(m.ms), "samples": m.samples }))
        .collect();
    let preferred = row.preferred.map(|p| table.columns()[p].name.clone());
    Json(json!({
        "addr": addr.to_string(),
        "network": row.network.to_string(),
        "aggregate": row.aggregate,
        "preferred": preferred,
        "regions": regions,
    }))
    .into_response()
}
