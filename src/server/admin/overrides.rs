//! `POST .../endpoints/{endpoint}/drain` and `/undrain`, `PUT` and `DELETE
//! .../endpoints/{endpoint}/weight`: run-time overrides of one endpoint, made by the
//! caller's token name (see `Control::change_override`; in a cluster,
//! `cluster::overrides::change`).

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{Caller, Shared, error};
use crate::responder::explain;
use crate::server::cluster;
use crate::server::overrides::{Change, OverrideError};
use crate::wire::name::WireName;

type Target = Path<(String, String)>;

pub async fn drain(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    p: Target,
) -> Response {
    change(c, by, p, Change::Drain).await
}

pub async fn undrain(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    p: Target,
) -> Response {
    change(c, by, p, Change::Undrain).await
}

/// The body of `PUT .../weight`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightBody {
    weight: u32,
}

pub async fn set_weight(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    p: Target,
    body: Bytes,
) -> Response {
    match serde_json::from_slice::<WeightBody>(&body) {
        Ok(b) => change(c, by, p, Change::Weight(b.weight)).await,
        Err(e) => error(
            StatusCode::BAD_REQUEST,
            format!("the body must be {{\"weight\": N}} with N a whole number from 0: {e}"),
        ),
    }
}

pub async fn clear_weight(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    p: Target,
) -> Response {
    change(c, by, p, Change::ClearWeight).await
}

async fn change(c: Shared, by: Caller, Path((name, endpoint)): Target, change: Change) -> Response {
    let abs = match explain::absolute(&c.snapshot(), &name) {
        Ok(n) => WireName::from_name(&n),
        Err(_) => return error(StatusCode::BAD_REQUEST, format!("invalid profile name {name:?}")),
    };
    let done = match c.cluster.clone() {
        // Replicas share overrides: the change goes to etcd, and applies from there.
        Some(session) => {
            Ok(cluster::overrides::change(&c, &session, &abs, &endpoint, change, &by.0).await)
        }
        None => {
            // A rebuild of a large configuration takes a while: off the runtime's threads.
            let control = c.clone();
            tokio::task::spawn_blocking(move || {
                control.change_override(&abs, &endpoint, change, &by.0)
            })
            .await
        }
    };
    match done {
        Ok(Ok(s)) => Json(json!({
            "profile": s.profile,
            "endpoint": s.endpoint,
            "drained": s.drained,
            "weight_override": s.weight_override,
        }))
        .into_response(),
        Ok(Err(e)) => {
            let code = match e {
                OverrideError::NoProfile(_) | OverrideError::NoEndpoint { .. } => {
                    StatusCode::NOT_FOUND
                }
                OverrideError::Weight(_) => StatusCode::BAD_REQUEST,
                OverrideError::Save { .. } => StatusCode::INTERNAL_SERVER_ERROR,
                OverrideError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                OverrideError::Contended => StatusCode::CONFLICT,
            };
            error(code, e.to_string())
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
