//! `POST .../endpoints/{endpoint}/drain` and `/undrain`, `PUT` and `DELETE
//! .../endpoints/{endpoint}/weight` and `.../bias`: run-time overrides of one endpoint, made by the
//! caller's token name (see `Control::change_override`; in a cluster,
//! `cluster::overrides::change`).

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::extract::JsonPath;
use super::{Caller, Shared, error};
use crate::responder::explain;
use crate::server::cluster;
use crate::server::overrides::{Change, OverrideError};
use crate::wire::name::WireName;

type Target = JsonPath<(String, String)>;

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
    // A JSON number: `5.0` is as whole as `5`.
    weight: serde_json::Number,
}

/// `n` as a weight, when it is a whole number that fits.
fn whole(n: &serde_json::Number) -> Option<u32> {
    let exact = n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
            // Whole and in range: the cast is exact.
            .map(|f| f as u64)
    });
    exact.and_then(|v| u32::try_from(v).ok())
}

pub async fn set_weight(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    p: Target,
    body: Bytes,
) -> Response {
    let parsed = serde_json::from_slice::<WeightBody>(&body).map_err(|e| e.to_string());
    match parsed.and_then(|b| whole(&b.weight).ok_or(format!("{} is not one", b.weight))) {
        Ok(w) => change(c, by, p, Change::Weight(w)).await,
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

/// The body of `PUT .../bias`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BiasBody {
    bias: serde_json::Number,
}

/// `n` as a bias, when it is a whole number from -99 to 99.
fn bias(n: &serde_json::Number) -> Option<i8> {
    let exact = n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && (-99.0..=99.0).contains(f))
            // Whole and in range: the cast is exact.
            .map(|f| f as i64)
    });
    exact.filter(|v| (-99..=99).contains(v)).and_then(|v| i8::try_from(v).ok())
}

pub async fn set_bias(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    p: Target,
    body: Bytes,
) -> Response {
    let parsed = serde_json::from_slice::<BiasBody>(&body).map_err(|e| e.to_string());
    match parsed.and_then(|b| bias(&b.bias).ok_or(format!("{} is not one", b.bias))) {
        Ok(b) => change(c, by, p, Change::Bias(b)).await,
        Err(e) => error(
            StatusCode::BAD_REQUEST,
            format!("the body must be {{\"bias\": N}} with N a whole number from -99 to 99: {e}"),
        ),
    }
}

pub async fn clear_bias(
    State(c): State<Shared>,
    Extension(by): Extension<Caller>,
    p: Target,
) -> Response {
    change(c, by, p, Change::ClearBias).await
}

async fn change(
    c: Shared,
    by: Caller,
    JsonPath((name, endpoint)): Target,
    change: Change,
) -> Response {
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
            "bias_override": s.bias_override,
        }))
        .into_response(),
        Ok(Err(e)) => {
            let code = match e {
                OverrideError::NoProfile(_) | OverrideError::NoEndpoint { .. } => {
                    StatusCode::NOT_FOUND
                }
                OverrideError::Weight(_) | OverrideError::Bias(_) => StatusCode::BAD_REQUEST,
                OverrideError::Save { .. } => StatusCode::INTERNAL_SERVER_ERROR,
                OverrideError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                // The request is well formed; the profile's method does not take it.
                OverrideError::Contended | OverrideError::NotTaken(_) => StatusCode::CONFLICT,
            };
            error(code, e.to_string())
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
