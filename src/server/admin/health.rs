//! `PUT` and `DELETE /api/v1/profiles/{name}/endpoints/{endpoint}/health`: a health status
//! pushed to an endpoint for a time to live, and clearing it. It is the result of the
//! endpoint's `pushed` monitor, or overrides an endpoint without one (`docs/probing.md`,
//! "Pushed health"). Recorded as events with who pushed it. In a cluster both go through
//! etcd to every replica (`cluster::pushed`).

use std::time::Duration;

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
use crate::model::health_file::truncate;
use crate::probe::pushed::{MAX_TEXT, MAX_TTL, MIN_TTL};
use crate::probe::{PushError, PushedHealth};
use crate::responder::explain;
use crate::server::cluster::pushed::{self as shared, ShareError};
use crate::server::pushes;
use crate::wire::name::WireName;

/// The body of `PUT .../health`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PushBody {
    status: String,
    ttl: String,
    #[serde(default)]
    reason: String,
    by: Option<String>,
}

/// What a body asks for: healthy or not, the reason, the time to live and who says so.
#[derive(Debug, PartialEq, Eq)]
struct Push {
    healthy: bool,
    reason: String,
    ttl: Duration,
    by: Option<String>,
}

fn parse(body: &[u8]) -> Result<Push, String> {
    let b: PushBody = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let healthy = match b.status.as_str() {
        "healthy" => true,
        "unhealthy" => false,
        other => return Err(format!("status must be \"healthy\" or \"unhealthy\", not {other:?}")),
    };
    let ttl =
        humantime::parse_duration(b.ttl.trim()).map_err(|e| format!("ttl {:?}: {e}", b.ttl))?;
    if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
        return Err(format!("ttl must be between 1s and 7d, not {}", b.ttl));
    }
    for (key, text) in [("reason", Some(&b.reason)), ("by", b.by.as_ref())] {
        if text.is_some_and(|t| t.len() > MAX_TEXT) {
            return Err(format!("{key} is longer than {MAX_TEXT} bytes"));
        }
    }
    let by = b.by.map(|s| truncate(s.trim(), MAX_TEXT).to_string()).filter(|s| !s.is_empty());
    Ok(Push { healthy, reason: b.reason.trim().to_string(), ttl, by })
}

type Target = JsonPath<(String, String)>;

/// The profile's name as configured, or the 400 or 404 answer's code and message.
fn absolute(c: &Shared, name: &str) -> Result<String, (StatusCode, String)> {
    let snap = c.snapshot();
    let Ok(abs) = explain::absolute(&snap, name) else {
        return Err((StatusCode::BAD_REQUEST, format!("invalid profile name {name:?}")));
    };
    match snap.profile_by_name(&WireName::from_name(&abs)) {
        Some(id) => Ok(snap.profiles[id].name.clone()),
        None => Err((StatusCode::NOT_FOUND, format!("no profile named {}", abs.to_ascii()))),
    }
}

fn refused(e: &PushError) -> Response {
    let code = match e {
        PushError::NoProfile(_) | PushError::NoEndpoint { .. } => StatusCode::NOT_FOUND,
        PushError::NotMonitored { .. } => StatusCode::CONFLICT,
    };
    error(code, e.to_string())
}

/// The answer to a push or a clear that etcd did not take.
fn not_shared(e: &ShareError) -> Response {
    match e {
        ShareError::Refused(e) => refused(e),
        ShareError::Unavailable(_) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        ShareError::Contended => error(StatusCode::CONFLICT, e.to_string()),
    }
}

fn shown(profile: &str, endpoint: &str, push: Option<&PushedHealth>) -> Value {
    json!({
        "profile": profile,
        "endpoint": endpoint,
        "pushed_health": push.map(pushed_json),
    })
}

/// A push as the API shows it.
pub fn pushed_json(p: &PushedHealth) -> Value {
    let expires = p.at_wall + p.ttl;
    json!({
        "status": if p.healthy { "healthy" } else { "unhealthy" },
        "reason": p.reason,
        "by": p.by,
        "at": humantime::format_rfc3339_millis(p.at_wall).to_string(),
        "ttl": humantime::format_duration(p.ttl).to_string(),
        "expires": humantime::format_rfc3339_millis(expires).to_string(),
        "live": p.is_live(tokio::time::Instant::now()),
    })
}

/// `PUT /api/v1/profiles/{name}/endpoints/{endpoint}/health`.
pub async fn push(
    State(c): State<Shared>,
    Extension(caller): Extension<Caller>,
    JsonPath((name, endpoint)): Target,
    body: Bytes,
) -> Response {
    let profile = match absolute(&c, &name) {
        Ok(p) => p,
        Err((code, message)) => return error(code, message),
    };
    let asked = match parse(&body) {
        Ok(p) => p,
        Err(e) => {
            let shape = "{\"status\": \"healthy\"|\"unhealthy\", \"ttl\": \"5m\", \"reason\": \"...\", \"by\": \"...\"}";
            return error(StatusCode::BAD_REQUEST, format!("the body must be {shape}: {e}"));
        }
    };
    let by = asked.by.unwrap_or_else(|| caller.0.clone());
    let push = PushedHealth::new(asked.healthy, asked.reason, by, asked.ttl);
    match c.cluster.clone() {
        // Replicas share pushes: it goes to etcd, and applies (and is recorded) from there.
        Some(session) => {
            if let Err(e) = shared::push(&c, &session, &profile, &endpoint, &push).await {
                return not_shared(&e);
            }
        }
        None => {
            if let Err(e) = c.prober.push_health(&profile, &endpoint, push.clone()) {
                return refused(&e);
            }
            pushes::pushed(&c.events, &profile, &endpoint, &push);
        }
    }
    Json(shown(&profile, &endpoint, Some(&push))).into_response()
}

/// `DELETE /api/v1/profiles/{name}/endpoints/{endpoint}/health`.
pub async fn clear(
    State(c): State<Shared>,
    Extension(caller): Extension<Caller>,
    JsonPath((name, endpoint)): Target,
) -> Response {
    let profile = match absolute(&c, &name) {
        Ok(p) => p,
        Err((code, message)) => return error(code, message),
    };
    match c.cluster.clone() {
        Some(session) => {
            if let Err(e) = shared::clear(&c, &session, &profile, &endpoint, &caller.0).await {
                return not_shared(&e);
            }
        }
        None => match c.prober.clear_health(&profile, &endpoint) {
            Err(e) => return refused(&e),
            Ok(before) => {
                if before.is_some() {
                    pushes::cleared(&c.events, &profile, &endpoint, &caller.0);
                }
            }
        },
    }
    Json(shown(&profile, &endpoint, None)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_bodies() {
        let s = Duration::from_secs;
        let ok = |healthy, reason: &str, ttl, by: Option<&str>| {
            Ok(Push { healthy, reason: reason.into(), ttl, by: by.map(Into::into) })
        };
        let cases: &[(&str, Result<Push, &str>)] = &[
            (r#"{"status": "unhealthy", "ttl": "5m"}"#, ok(false, "", s(300), None)),
            (
                r#"{"status": "healthy", "ttl": "1s", "reason": " ok ", "by": "deploy"}"#,
                ok(true, "ok", s(1), Some("deploy")),
            ),
            (r#"{"status": "healthy", "ttl": "7d"}"#, ok(true, "", s(7 * 86_400), None)),
            (r#"{"status": "healthy", "ttl": "8d"}"#, Err("between 1s and 7d")),
            (r#"{"status": "healthy", "ttl": "500ms"}"#, Err("between 1s and 7d")),
            (r#"{"status": "healthy"}"#, Err("missing field `ttl`")),
            (r#"{"status": "up", "ttl": "5m"}"#, Err("not \"up\"")),
            (r#"{"status": "healthy", "ttl": "soon"}"#, Err("ttl \"soon\"")),
            (r#"{"status": "healthy", "ttl": "5m", "colour": 1}"#, Err("unknown field")),
            ("not json", Err("expected")),
        ];
        for (body, want) in cases {
            match (parse(body.as_bytes()), want) {
                (Ok(g), Ok(w)) => assert_eq!(&g, w, "{body}"),
                (Err(g), Err(w)) => assert!(g.contains(w), "{body}: {g}"),
                (g, w) => panic!("{body}: got {g:?}, want {w:?}"),
            }
        }
        let long = format!(
            r#"{{"status": "healthy", "ttl": "5m", "reason": "{}"}}"#,
            "x".repeat(MAX_TEXT + 1)
        );
        assert!(parse(long.as_bytes()).unwrap_err().contains("longer than"));
    }
}
