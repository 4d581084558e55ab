//! The real user measurements listener (`rum:`, `docs/rum.md`): a public, unauthenticated
//! HTTP server, apart from the admin API, that serves the beacon script and its targets
//! and takes the beacons' reports into the aggregate; and the publisher task that turns
//! the aggregate into the table the query path reads, every `publish_interval`.
//!
//! Connections are served by hyper as the admin API's are: at most `MAX_CONNECTIONS`, a
//! header-read (and keep-alive) timeout, a bounded head and body, on the server's one
//! cancellation token. Reports are checked whole (`report`) and limited per client address
//! (`limit`, the address from `client`) before anything is stored. `persist` keeps the
//! samples in the state file across restarts.

pub mod api;
pub mod client;
pub mod limit;
pub mod persist;
pub mod report;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::geo::rum::{Aggregator, MeasuredLatency, RumSettings};
use limit::ReportLimiter;
use report::Refusal;

/// The beacon script, served at `/rum/v1/beacon.js`.
pub const BEACON_JS: &str = include_str!("beacon.js");

/// Connections served at once; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 1024;

/// How long a request head (or the next one on a kept-alive connection) and a report body
/// may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request head a connection may buffer (hyper's minimum is 8 KiB).
const MAX_HEAD: usize = 16 * 1024;

/// The longest head start of the aggregate's clock (`Rum::now`): samples are kept as
/// seconds in 32 bits, and a window of decades needs no more.
const MAX_HEAD_START: Duration = Duration::from_secs(1 << 30);

/// How long shutdown waits for requests in progress.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The counts behind the `steerdns_rum_*` metrics.
#[derive(Debug, Default)]
pub struct RumCounts {
    pub stored: AtomicU64,
    pub malformed: AtomicU64,
    pub oversized: AtomicU64,
    pub invalid: AtomicU64,
    pub rate_limited: AtomicU64,
    /// Networks in the aggregate after the last report or publish.
    pub networks: AtomicU64,
    pub evictions: AtomicU64,
}

impl RumCounts {
    /// `(result label, count)` of every report outcome.
    pub fn reports(&self) -> [(&'static str, u64); 5] {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("stored", n(&self.stored)),
            ("malformed", n(&self.malformed)),
            ("oversized", n(&self.oversized)),
            ("invalid", n(&self.invalid)),
            ("rate_limited", n(&self.rate_limited)),
        ]
    }

    fn refused(&self, r: &Refusal) {
        let counter = match r {
            Refusal::Malformed(_) => &self.malformed,
            Refusal::Oversized(_) => &self.oversized,
            Refusal::UnknownRegion(_) | Refusal::Absurd(..) => &self.invalid,
            Refusal::RateLimited => &self.rate_limited,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The measurement side of one running server: settings from the start, the aggregate and
/// the per-address limiter (each behind a mutex that only report handlers and the
/// publisher take), and the published table.
#[derive(Debug)]
pub struct Rum {
    pub settings: Arc<RumSettings>,
    aggregate: Mutex<Aggregator>,
    limiter: Mutex<ReportLimiter>,
    published: ArcSwap<MeasuredLatency>,
    pub counts: RumCounts,
    /// The time origin of the aggregate's samples, one window before the start (see
    /// `now`).
    epoch: Instant,
    /// How long before `epoch` the aggregate's clock started.
    head_start: Duration,
    /// `/rum/v1/config`, made once.
    config_json: Bytes,
}

impl Rum {
    pub fn new(settings: Arc<RumSettings>) -> Rum {
        let aggregate = Aggregator::new(settings.aggregation, settings.targets.len());
        let limiter =
            ReportLimiter::new(settings.reports_per_minute, settings.burst, limit::MAX_ADDRESSES);
        let targets: Vec<_> =
            settings.targets.iter().map(|t| json!({ "region": t.region, "url": t.url })).collect();
        let config = json!({ "v": 1, "targets": targets });
        Rum {
            published: ArcSwap::from_pointee(MeasuredLatency::empty(columns(&settings))),
            aggregate: Mutex::new(aggregate),
            limiter: Mutex::new(limiter),
            counts: RumCounts::default(),
            epoch: Instant::now(),
            head_start: settings.aggregation.window.min(MAX_HEAD_START),
            config_json: Bytes::from(config.to_string()),
            settings,
        }
    }

    /// The aggregate's clock: it reads one window at the start, so that samples restored
    /// from the state file, up to a window old, have a time on it.
    pub fn now(&self) -> Duration {
        self.epoch.elapsed() + self.head_start
    }

    /// Runs `f` on the aggregate, with its clock's time, under its mutex (which report
    /// handlers take too: keep `f` short).
    pub fn with_aggregate<R>(&self, f: impl FnOnce(&mut Aggregator, Duration) -> R) -> R {
        let mut a = self.aggregate.lock().unwrap_or_else(PoisonError::into_inner);
        let r = f(&mut a, self.now());
        self.counts.networks.store(a.len() as u64, Ordering::Relaxed);
        self.counts.evictions.store(a.evictions(), Ordering::Relaxed);
        r
    }

    /// The target regions' names, in column order.
    pub fn regions(&self) -> Vec<&str> {
        self.settings.targets.iter().map(|t| t.region.as_str()).collect()
    }

    /// Swaps in a table built elsewhere (in a cluster, the shared one).
    pub fn install(&self, table: MeasuredLatency) {
        self.published.store(Arc::new(table));
    }

    /// The target columns, as tables name them.
    pub fn columns(&self) -> Vec<(String, usize)> {
        columns(&self.settings)
    }

    /// The table published last: what the query path reads.
    pub fn table(&self) -> Arc<MeasuredLatency> {
        self.published.load_full()
    }

    /// The published table's cell, for a reader that keeps it (`ArcSwap::load` is
    /// lock-free and does not allocate).
    pub fn published(&self) -> &ArcSwap<MeasuredLatency> {
        &self.published
    }

    /// Rebuilds the table from the aggregate and swaps it in.
    pub fn publish(&self) {
        let previous = self.published.load_full();
        let now = self.now();
        let next = {
            let mut a = self.aggregate.lock().unwrap_or_else(PoisonError::into_inner);
            let table = a.publish(now, columns(&self.settings), Some(&previous));
            self.counts.networks.store(a.len() as u64, Ordering::Relaxed);
            table
        };
        self.published.store(Arc::new(next));
    }

    /// Checks a report from `client` and stores it, or says why not (storing nothing).
    pub fn take_report(&self, client: IpAddr, body: &[u8]) -> Result<(), Refusal> {
        let result = self.check_and_store(client, body);
        match &result {
            Ok(()) => self.counts.stored.fetch_add(1, Ordering::Relaxed),
            Err(r) => {
                self.counts.refused(r);
                0
            }
        };
        result
    }

    fn check_and_store(&self, client: IpAddr, body: &[u8]) -> Result<(), Refusal> {
        let now = self.now();
        let allowed =
            self.limiter.lock().unwrap_or_else(PoisonError::into_inner).allow(client, now);
        if !allowed {
            return Err(Refusal::RateLimited);
        }
        let measured = report::parse(body, &self.settings)?;
        let mut a = self.aggregate.lock().unwrap_or_else(PoisonError::into_inner);
        a.record(client, &measured, now);
        self.counts.networks.store(a.len() as u64, Ordering::Relaxed);
        self.counts.evictions.store(a.evictions(), Ordering::Relaxed);
        Ok(())
    }
}

fn columns(s: &RumSettings) -> Vec<(String, usize)> {
    s.targets.iter().map(|t| (t.region.clone(), t.region_index)).collect()
}

/// The TCP peer of a connection, handed to the handlers.
#[derive(Clone, Copy, Debug)]
struct Peer(SocketAddr);

/// The listener's routes.
pub fn router(rum: Arc<Rum>) -> Router {
    Router::new()
        .route("/rum/v1/beacon.js", get(beacon))
        .route("/rum/v1/config", get(config))
        .route("/rum/v1/report", post(take_report).options(preflight))
        .fallback(|| async { refuse(StatusCode::NOT_FOUND, "no such path") })
        .with_state(rum)
}

/// Serves the RUM listener on `listener` until `cancel` fires.
pub async fn serve(listener: tokio::net::TcpListener, rum: Arc<Rum>, cancel: CancellationToken) {
    let app = router(rum);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(READ_TIMEOUT).max_buf_size(MAX_HEAD);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "RUM listener cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone().layer(Extension(Peer(peer))));
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // Errors are the client's (timeouts, resets, bad requests): nothing to report.
            let _ = conn.await;
            drop(slot);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
}

/// Publishes the table every `publish_interval` until `cancel` fires.
pub async fn publish_every(rum: Arc<Rum>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(rum.settings.publish_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {
                let r = rum.clone();
                // Building a large table takes a while: off the runtime's workers.
                if tokio::task::spawn_blocking(move || r.publish()).await.is_err() {
                    tracing::warn!("RUM table publication failed");
                }
            }
        }
    }
}

fn refuse(code: StatusCode, message: impl Into<String>) -> Response {
    let mut r = (code, Json(json!({ "error": message.into() }))).into_response();
    cors(r.headers_mut());
    r
}

fn cors(h: &mut HeaderMap) {
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
}

async fn beacon() -> Response {
    let mut r = BEACON_JS.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/javascript; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    cors(h);
    r
}

async fn config(State(rum): State<Arc<Rum>>) -> Response {
    let mut r = Response::new(Body::from(rum.config_json.clone()));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    cors(h);
    r
}

/// Browsers send no preflight for the beacon's text/plain reports; a page that posts JSON
/// itself is answered all the same.
async fn preflight() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("POST"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("content-type"));
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
    r
}

async fn take_report(
    State(rum): State<Arc<Rum>>,
    Extension(Peer(peer)): Extension<Peer>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let forwarded = headers.get_all("x-forwarded-for").into_iter().filter_map(|v| v.to_str().ok());
    let client = client::client_address(peer.ip(), forwarded, &rum.settings.trusted_proxies);
    let max = rum.settings.max_report_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // An oversized body is not read: the refusal goes through the same count and checks
    // (rate limit first) with a body one byte too long.
    let bytes = if declared.is_some_and(|n| n > max as u64) {
        Bytes::from(vec![b' '; max + 1])
    } else {
        match tokio::time::timeout(READ_TIMEOUT, axum::body::to_bytes(body, max)).await {
            Ok(Ok(b)) => b,
            Ok(Err(_)) => Bytes::from(vec![b' '; max + 1]),
            Err(_) => return refuse(StatusCode::REQUEST_TIMEOUT, "the report took too long"),
        }
    };
    match rum.take_report(client, &bytes) {
        Ok(()) => {
            let mut r = StatusCode::NO_CONTENT.into_response();
            cors(r.headers_mut());
            r
        }
        Err(refusal) => {
            let code = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
            refuse(code, refusal.to_string())
        }
    }
}
