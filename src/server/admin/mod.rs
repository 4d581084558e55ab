//! The admin HTTP API (axum): health, Prometheus metrics, profile status, answer counts,
//! explain, reload, run-time overrides of endpoints, load feedback, the event list, the
//! cluster's replicas, the status page that shows them in a browser, and the API's
//! OpenAPI description.
//! Everything but `/healthz`, the description and the page's own files requires a bearer
//! token when any is configured; the token's name says who made a change.
//! Handlers read the running snapshot and the prober through `Control`.
//!
//! Connections are served by hyper directly rather than `axum::serve`, which has no
//! header-read timeout and no cap on connections: both are needed so that idle or slow
//! clients cannot hold the process's descriptors (`admin.max_connections`,
//! `admin.header_read_timeout`).

mod cluster;
mod events;
pub(crate) mod extract;
pub mod failover;
mod health;
mod load;
pub mod metrics;
pub mod openapi;
mod overrides;
mod page;
pub mod probes;
pub mod select;
pub mod stats;
pub mod tls;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;

use self::extract::{JsonPath, JsonQuery};
use self::select::{ListParams, SelectError, Selected};
use super::control::Control;
use super::reloader::{ReloadError, Reloader, Trigger};
use crate::model::TokenRole;
use crate::model::health::Status;
use crate::model::snapshot::{AdminLimits, Snapshot};
use crate::model::{Nested, Profile, Target};
use crate::responder::explain;
use crate::routing::{Ctx, status};
use crate::wire::name::WireName;

type Shared = Arc<Control>;

/// The largest request body accepted: only a weight or a load takes a body, a few bytes
/// of JSON, so anything bigger is 413.
pub const MAX_BODY: usize = 4096;

/// The largest request head a connection may buffer (hyper's minimum is 8 KiB).
const MAX_HEAD: usize = 16 * 1024;

/// How long shutdown waits for requests in progress.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Every route of the API: the router is built from this list, and tests/openapi.rs
/// checks it against docs/api/openapi.yaml both ways, so neither can gain a route alone.
pub const ROUTES: &[(&str, Method)] = &[
    ("/healthz", Method::GET),
    ("/", Method::GET),
    ("/ui/app.js", Method::GET),
    ("/ui/style.css", Method::GET),
    ("/api/v1/openapi.json", Method::GET),
    ("/metrics", Method::GET),
    ("/api/v1/profiles", Method::GET),
    ("/api/v1/profiles/{name}", Method::GET),
    ("/api/v1/stats", Method::GET),
    ("/api/v1/explain", Method::GET),
    ("/api/v1/reload", Method::GET),
    ("/api/v1/reload", Method::POST),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/drain", Method::POST),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/undrain", Method::POST),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/weight", Method::PUT),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/weight", Method::DELETE),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/bias", Method::PUT),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/bias", Method::DELETE),
    ("/api/v1/events", Method::GET),
    ("/api/v1/cluster", Method::GET),
    ("/api/v1/whoami", Method::GET),
    ("/api/v1/rum", Method::GET),
    ("/api/v1/load", Method::GET),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/load", Method::PUT),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/load", Method::DELETE),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/health", Method::PUT),
    ("/api/v1/profiles/{name}/endpoints/{endpoint}/health", Method::DELETE),
];

/// The routes served without the token: they hold no data and no secret.
pub const OPEN_ROUTES: &[&str] =
    &["/healthz", "/", "/ui/app.js", "/ui/style.css", "/api/v1/openapi.json"];

/// The handler of one entry of `ROUTES`.
fn handler(path: &str, method: &Method) -> MethodRouter<Shared> {
    match (path, method.as_str()) {
        ("/healthz", "GET") => get(|| async { "ok" }),
        ("/", "GET") => get(page::index),
        ("/ui/app.js", "GET") => get(page::app_js),
        ("/ui/style.css", "GET") => get(page::style_css),
        ("/api/v1/openapi.json", "GET") => get(openapi::serve),
        ("/metrics", "GET") => get(metrics),
        ("/api/v1/profiles", "GET") => get(profiles),
        ("/api/v1/profiles/{name}", "GET") => get(profile),
        ("/api/v1/stats", "GET") => get(stats),
        ("/api/v1/explain", "GET") => get(explain_query),
        ("/api/v1/reload", "GET") => get(last_reload),
        ("/api/v1/reload", "POST") => post(reload),
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/drain", "POST") => post(overrides::drain),
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/undrain", "POST") => {
            post(overrides::undrain)
        }
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/weight", "PUT") => {
            put(overrides::set_weight)
        }
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/weight", "DELETE") => {
            delete(overrides::clear_weight)
        }
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/bias", "PUT") => put(overrides::set_bias),
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/bias", "DELETE") => {
            delete(overrides::clear_bias)
        }
        ("/api/v1/events", "GET") => get(events::list),
        ("/api/v1/cluster", "GET") => get(cluster::show),
        ("/api/v1/whoami", "GET") => get(whoami),
        ("/api/v1/rum", "GET") => get(crate::server::rum::api::lookup),
        ("/api/v1/load", "GET") => get(load::show),
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/load", "PUT") => put(load::push),
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/load", "DELETE") => delete(load::clear),
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/health", "PUT") => put(health::push),
        ("/api/v1/profiles/{name}/endpoints/{endpoint}/health", "DELETE") => delete(health::clear),
        _ => panic!("ROUTES lists {method} {path}, which has no handler"),
    }
}

/// The API's routes, ready to serve.
pub fn router(control: Shared) -> Router {
    let (mut open, mut api) = (Router::new(), Router::new());
    for (path, method) in ROUTES {
        // The same path twice (another method) merges into one method router.
        if OPEN_ROUTES.contains(path) {
            open = open.route(path, handler(path, method));
        } else {
            api = api.route(path, handler(path, method));
        }
    }
    let api = api.route_layer(middleware::from_fn_with_state(control.clone(), require_token));
    open.merge(api)
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path") })
        .layer(RequestBodyLimitLayer::new(MAX_BODY))
        .with_state(control)
}

/// Serves the API on `listener` until `cancel` fires: at most `limits.max_connections`
/// connections at once (more are closed on accept), each closed when a request head (or
/// with `certs`, the TLS handshake) takes longer than `limits.header_read_timeout` or it
/// idles that long between requests. With `certs`, over HTTPS.
pub async fn serve(
    listener: tokio::net::TcpListener,
    control: Shared,
    cancel: CancellationToken,
    limits: AdminLimits,
    certs: Option<Arc<tls::Certs>>,
) {
    let app = router(control.clone());
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper starts the header timer whenever it waits for a request head, so it is also
    // the keep-alive idle timeout.
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD);
    let graceful = GracefulShutdown::new();
    let mut full_logged = false;
    loop {
        let stream = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, mostly: wait for some to be released instead of
                    // spinning on the error.
                    tracing::warn!(error = %e, "admin API cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !full_logged {
                tracing::warn!(
                    max = limits.max_connections,
                    "admin API connection limit reached: closing new connections"
                );
                full_logged = true;
            }
            drop(stream);
            continue;
        };
        full_logged = false;
        let service = TowerToHyperService::new(app.clone());
        let Some(certs) = &certs else {
            let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                // Errors are the client's (timeouts, resets, bad requests): nothing to report.
                let _ = conn.await;
                drop(slot);
            });
            continue;
        };
        let (certs, control, http, watcher) =
            (certs.clone(), control.clone(), http.clone(), graceful.watcher());
        tokio::spawn(async move {
            // The running configuration says which files (a reload may move them); one
            // that turned TLS off keeps the files in use until the restart it needs.
            let files = control.snapshot().listen.admin_tls.clone();
            let acceptor = tokio_rustls::TlsAcceptor::from(certs.current(files.as_ref()));
            let handshake =
                tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
            // A failed or slow handshake is the client's: nothing to report.
            if let Ok(Ok(stream)) = handshake.await {
                let _ = watcher.watch(http.serve_connection(TokioIo::new(stream), service)).await;
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!("admin API requests still running at shutdown were cut off");
    }
}

/// Binds the admin listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(json!({ "error": message.into() }))).into_response()
}

/// Who made a request: the name of the token it carried, or what stands for it when the
/// API has no token; and what it may do.
#[derive(Clone, Debug)]
pub struct Caller(pub String, pub TokenRole);

/// Whether a call only reads: a `read` token may make it.
fn only_reads(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

async fn require_token(State(c): State<Shared>, mut req: Request, next: Next) -> Response {
    let tokens = c.snapshot().listen.admin_tokens.clone();
    if tokens.is_empty() {
        let [loopback, other] = crate::config::NO_TOKEN_NAMES;
        let name = if c.admin_is_loopback() { loopback } else { other };
        req.extensions_mut().insert(Caller(name.to_string(), TokenRole::Write));
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        // The scheme is case-insensitive (RFC 7235 §2.1).
        .and_then(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer").then_some(token.trim()));
    // Every token is compared, so the time taken does not say which one came close.
    let matched = given.and_then(|g| {
        tokens.iter().fold(None, |found, t| {
            let same = constant_time_eq(g.as_bytes(), t.secret.as_bytes());
            if same { Some((t.name.clone(), t.role)) } else { found }
        })
    });
    match matched {
        Some((name, TokenRole::Read)) if !only_reads(req.method()) => {
            let message = format!(
                "the token {name:?} is read-only: {} {} changes state and needs a write token",
                req.method(),
                req.uri().path()
            );
            error(StatusCode::FORBIDDEN, message)
        }
        Some((name, role)) => {
            req.extensions_mut().insert(Caller(name, role));
            next.run(req).await
        }
        None => {
            let mut r = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, "Bearer".parse().expect("static header"));
            r
        }
    }
}

/// Compares without an early exit, so the time taken does not reveal how much of a
/// guessed token was right (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn metrics(State(c): State<Shared>) -> Response {
    let body = metrics::render(&c);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

/// Every profile, or with any of `q`, `status`, `offset`, `limit` one page of the
/// matching ones with the counts a pager needs.
async fn profiles(State(c): State<Shared>, JsonQuery(params): JsonQuery<ListParams>) -> Response {
    let snap = c.snapshot();
    if params.is_empty() {
        let list: Vec<Value> =
            snap.profiles.iter().enumerate().map(|(i, p)| summary(&snap, i, p)).collect();
        return Json(json!({ "generation": snap.generation, "profiles": list })).into_response();
    }
    let selected = match selection(&snap, &params) {
        Ok(s) => s,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let list: Vec<Value> =
        selected.ids.iter().map(|&i| summary(&snap, i, &snap.profiles[i])).collect();
    Json(json!({
        "generation": snap.generation,
        "total": selected.total,
        "offset": selected.offset,
        "limit": selected.limit,
        "statuses": selected.statuses,
        "profiles": list,
    }))
    .into_response()
}

/// Answer counts of the profiles selected as for `/api/v1/profiles`.
async fn stats(State(c): State<Shared>, JsonQuery(params): JsonQuery<ListParams>) -> Response {
    let snap = c.snapshot();
    match selection(&snap, &params) {
        Ok(selected) => Json(stats::render(&c, &snap, &selected)).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

fn selection(snap: &Snapshot, params: &ListParams) -> Result<Selected, SelectError> {
    let sel = params.selection()?;
    let names = snap.profiles.iter().map(|p| p.name.as_str());
    Ok(select::select(names, |id| profile_status(snap, id), &sel))
}

fn summary(snap: &Snapshot, id: usize, p: &Profile) -> Value {
    let ctx = Ctx::of(snap);
    let mut counts = serde_json::Map::new();
    for ep in &p.endpoints {
        let st = status::health_status(ctx, ep).as_str();
        let n = counts.get(st).and_then(Value::as_u64).unwrap_or(0);
        counts.insert(st.to_string(), json!(n + 1));
    }
    let overridden = p
        .endpoints
        .iter()
        .filter(|e| e.drained || e.weight_override.is_some() || e.bias_override.is_some());
    let overrides: Vec<Value> = overridden
        .map(|e| {
            let (drained, weight) = (e.drained, e.weight_override);
            let mut v =
                json!({ "endpoint": e.name, "drained": drained, "weight_override": weight });
            if let Some(b) = e.bias_override {
                v["bias_override"] = json!(b);
            }
            v
        })
        .collect();
    let failover = failover::failover(ctx, p)
        .map(|f| json!({ "preferred": f.preferred, "serving": f.serving }));
    json!({
        "name": p.name,
        "zone": snap.zones[p.zone].origin.to_string(),
        "routing": p.method.as_str(),
        "enabled": p.enabled,
        "status": profile_status(snap, id).as_str(),
        "endpoints": counts,
        "overrides": overrides,
        "failover": failover,
    })
}

/// A profile's own status, as a parent nesting it with `min_child_endpoints: 1` sees it.
fn profile_status(snap: &Snapshot, id: usize) -> Status {
    if !snap.profiles[id].enabled {
        return Status::Disabled;
    }
    let ctx = Ctx::of(snap);
    status::child_status(ctx, &Nested { child: id, min_child: 1, min_child_v4: 0, min_child_v6: 0 })
}

async fn profile(State(c): State<Shared>, JsonPath(name): JsonPath<String>) -> Response {
    let snap = c.snapshot();
    let Ok(abs) = explain::absolute(&snap, &name) else {
        return error(StatusCode::BAD_REQUEST, format!("invalid profile name {name:?}"));
    };
    let Some(id) = snap.profile_by_name(&WireName::from_name(&abs)) else {
        return error(StatusCode::NOT_FOUND, format!("no profile named {}", abs.to_ascii()));
    };
    let p = &snap.profiles[id];
    let ctx = Ctx::of(&snap);
    let mut details = probes::endpoint_details(&c.prober, &p.name);
    let loads = c.load.current();
    let endpoints: Vec<Value> = p
        .endpoints
        .iter()
        .map(|ep| {
            let mut v = json!({
                "name": ep.name,
                "target": target_text(snap.as_ref(), &ep.target),
                "enabled": ep.configured_enabled,
                "always_serve": ep.always_serve,
                "priority": ep.priority,
                "weight": ep.weight,
                "status": status::health_status(ctx, ep).as_str(),
                "drained": ep.drained,
                "weight_override": ep.weight_override,
                "load": load::endpoint_load(&loads, &p.name, &ep.name, ep.load.as_deref()),
                "pushed_health": c.prober.pushed_health(&p.name, &ep.name).as_ref().map(health::pushed_json),
            });
            if p.method == crate::model::Method::Geoproximity {
                let o = v.as_object_mut().expect("object");
                o.insert("bias".into(), json!(ep.bias));
                o.insert("configured_bias".into(), json!(ep.configured_bias));
                o.insert("bias_override".into(), json!(ep.bias_override));
            }
            if let Some(details) = details.remove(&ep.name) {
                v.as_object_mut().expect("object").extend(details);
            }
            v
        })
        .collect();
    Json(json!({
        "name": p.name,
        "routing": p.method.as_str(),
        "enabled": p.enabled,
        "ttl": p.ttl,
        "fail_open": p.fail_open,
        "status": profile_status(&snap, id).as_str(),
        "endpoints": endpoints,
    }))
    .into_response()
}

fn target_text(snap: &Snapshot, t: &Target) -> String {
    match t {
        Target::V4(a) => a.to_string(),
        Target::V6(a) => a.to_string(),
        Target::Host(n) => n.to_string(),
        Target::Flat(n) => format!("{n} (flattened)"),
        Target::Nested(n) => format!("profile {}", snap.profiles[n.child].name),
    }
}

#[derive(Deserialize)]
struct ExplainParams {
    name: Option<String>,
    #[serde(rename = "type")]
    qtype: Option<String>,
    client: Option<String>,
}

async fn explain_query(
    State(c): State<Shared>,
    JsonQuery(q): JsonQuery<ExplainParams>,
) -> Response {
    let snap = c.snapshot();
    let Some(name) = q.name.filter(|n| !n.is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "name= is required");
    };
    let Some(client) = q.client.as_deref().and_then(|s| s.parse::<IpAddr>().ok()) else {
        return error(StatusCode::BAD_REQUEST, "client= must be an IP address");
    };
    let qtype =
        match explain::parse_type(q.qtype.as_deref().filter(|t| !t.is_empty()).unwrap_or("A")) {
            Ok(t) => t,
            Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
        };
    let abs = match explain::absolute(&snap, &name) {
        Ok(n) => n,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let measured = c.rum.get().map(|r| r.table());
    // What the control loop last computed, so the trace shows each loaded endpoint's load.
    let loads = c.load.current();
    let lookup: crate::routing::LoadLookup =
        Box::new(move |p, e| loads.get(p, e).map(|entry| entry.state.clone()));
    let mut explained = explain::explain(
        &snap,
        &*snap.health,
        &abs,
        qtype,
        client,
        measured.as_deref(),
        Some(lookup),
    );
    if c.cluster.is_some() {
        explained.health = probes::vantage_of(&c.prober, &snap, &abs);
    }
    explained.monitors = probes::monitors_of(&c.prober, &snap, &abs);
    Json(explained).into_response()
}

/// The caller's token name and role, so that the status page offers only what it may do.
async fn whoami(axum::Extension(Caller(name, role)): axum::Extension<Caller>) -> Response {
    Json(json!({ "name": name, "role": role.as_str() })).into_response()
}

/// How the last reload ended, whatever triggered it (the startup load before any).
async fn last_reload(State(c): State<Shared>) -> Response {
    let r = c.last_reload.get();
    Json(json!({
        "time": humantime::format_rfc3339_seconds(r.time).to_string(),
        "trigger": r.trigger,
        "ok": r.ok(),
        "generation": r.generation,
        "errors": r.errors,
    }))
    .into_response()
}

async fn reload(State(c): State<Shared>) -> Response {
    match Reloader::new(c.clone()).reload(Trigger::Api).await {
        Ok(generation) => {
            let restart = c.restart_needed();
            let mut body = json!({ "generation": generation });
            if !restart.is_empty() {
                body["restart_needed"] = json!(restart);
            }
            Json(body).into_response()
        }
        Err(ReloadError::Config(errors)) => {
            let list: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
            (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({ "errors": list }))).into_response()
        }
        Err(e @ ReloadError::Aborted) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
