//! Reading one pulled feed (a load feed of `server::load`, or a json or prometheus health
//! monitor): an HTTP(S) GET of the feed's URL, bounded by a timeout (connection, TLS,
//! request and body together) and `MAX_BODY`, then a value out of the body: the body as a
//! JSON number, the value at an RFC 6901 pointer, or the one sample of a Prometheus text
//! exposition that the selector picks (`exposition`).
//!
//! The request goes out over the probes' HTTP/1.1 reader (`http`: bounded head, interim
//! responses and chunk lines) and their TLS clients (the system's roots),
//! on a fresh connection each time, from `probe.source_address` (load and health feeds
//! alike); every failure is a `FeedError` with a plain message and a short `reason` for
//! the error counter.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::check::{ConnectError, connect_from};
use super::exposition::{self, ExpositionError};
use super::http::{self as http_get, HttpError};
use super::tls::Clients;
use crate::model::snapshot::ProbeSource;

/// The largest body read from a feed; a longer one is an error, not a truncated reading.
pub const MAX_BODY: usize = 64 * 1024;

/// Why a feed gave no load.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FeedError {
    #[error("invalid feed URL {url:?}: {why}")]
    Url { url: String, why: String },
    #[error("cannot resolve {host}: {error}")]
    Resolve { host: String, error: String },
    #[error("cannot connect to {addr}: {error}")]
    Connect { addr: SocketAddr, error: String },
    /// Binding the probes' source address (`probe.source_address`) failed.
    #[error("cannot use source address {address}: {error}")]
    Source { address: IpAddr, error: String },
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
    #[error("bad HTTP response: {0}")]
    Http(String),
    #[error("HTTP status {0} (a feed must answer 2xx)")]
    Status(u16),
    #[error("the body is larger than {MAX_BODY} bytes")]
    TooBig,
    #[error("the body is not JSON: {0}")]
    Json(String),
    #[error("nothing at JSON pointer {0:?}")]
    NoPointer(String),
    #[error("the value read is not a number: {0}")]
    NotANumber(String),
    #[error("the load read is {0}; a load is a finite number from 0")]
    Invalid(f64),
    #[error(transparent)]
    Exposition(#[from] ExpositionError),
}

impl FeedError {
    /// The `reason` label of `steerdns_load_feed_errors_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            FeedError::Url { .. } => "url",
            FeedError::Resolve { .. } => "resolve",
            FeedError::Connect { .. } => "connect",
            FeedError::Source { .. } => "source",
            FeedError::Tls(_) => "tls",
            FeedError::Timeout(_) => "timeout",
            FeedError::Http(_) => "http",
            FeedError::Status(_) => "status",
            FeedError::TooBig => "too_big",
            FeedError::Json(_) => "json",
            FeedError::NoPointer(_) => "absent",
            FeedError::NotANumber(_) | FeedError::Invalid(_) => "not_a_number",
            FeedError::Exposition(ExpositionError::Absent(_)) => "absent",
            FeedError::Exposition(ExpositionError::Ambiguous { .. }) => "ambiguous",
            FeedError::Exposition(_) => "exposition",
        }
    }
}

/// Where the load is in a body.
#[derive(Clone, Copy, Debug)]
pub enum Extract<'a> {
    /// The whole body is a JSON number.
    Number,
    /// The number at this RFC 6901 pointer of a JSON body.
    Pointer(&'a str),
    /// The one sample of a Prometheus text exposition with this name and these labels.
    Metric { name: &'a str, labels: &'a [(String, String)] },
}

/// The load in `body`.
pub fn parse_body(body: &[u8], extract: Extract<'_>) -> Result<f64, FeedError> {
    let value = match extract {
        Extract::Metric { name, labels } => exposition::find(body, name, labels)?,
        Extract::Number => number(&json(body)?)?,
        Extract::Pointer(p) => {
            number(json(body)?.pointer(p).ok_or_else(|| FeedError::NoPointer(p.to_string()))?)?
        }
    };
    if value.is_finite() && value >= 0.0 { Ok(value) } else { Err(FeedError::Invalid(value)) }
}

pub fn json(body: &[u8]) -> Result<serde_json::Value, FeedError> {
    serde_json::from_slice(body).map_err(|e| FeedError::Json(e.to_string()))
}

fn number(v: &serde_json::Value) -> Result<f64, FeedError> {
    let text = || {
        let t = v.to_string();
        if t.chars().count() <= 60 { t } else { t.chars().take(60).chain(['…']).collect() }
    };
    v.as_f64().ok_or_else(|| FeedError::NotANumber(text()))
}

/// A feed URL, parsed once: where to connect and the request to send.
#[derive(Clone, Debug)]
pub struct FeedUrl {
    pub url: String,
    https: bool,
    host: Host,
    port: u16,
    request: Box<[u8]>,
}

#[derive(Clone, Debug)]
enum Host {
    Ip(IpAddr),
    Name(String),
}

impl FeedUrl {
    /// Parses an `http://` or `https://` URL; `accept` is the Accept header to send.
    pub fn parse(url: &str, accept: &str) -> Result<FeedUrl, FeedError> {
        FeedUrl::parse_as(url, accept, concat!("steerdns-load/", env!("CARGO_PKG_VERSION")))
    }

    /// `parse`, sending `agent` as the User-Agent.
    pub fn parse_as(url: &str, accept: &str, agent: &str) -> Result<FeedUrl, FeedError> {
        let bad = |why: &str| FeedError::Url { url: url.to_string(), why: why.to_string() };
        let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("the scheme must be http or https")),
        };
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("user information is not supported"));
        }
        let host_text = authority.host();
        let bare = host_text.trim_start_matches('[').trim_end_matches(']');
        let host = match bare.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip),
            Err(_) if !bare.is_empty() => Host::Name(bare.to_string()),
            Err(_) => return Err(bad("no host")),
        };
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let headers = [("user-agent".to_string(), agent.into()), ("accept".into(), accept.into())];
        let request = http_get::request(path, authority.as_str(), &headers).map_err(|e| bad(&e))?;
        Ok(FeedUrl { url: url.to_string(), https, host, port, request: request.into() })
    }
}

/// Reads feeds; holds the TLS client configurations every https feed shares.
#[derive(Default)]
pub struct Reader {
    tls: Clients,
}

impl Reader {
    /// One reading of `url`, bounded by `timeout` from start to end, connecting from the
    /// `sources` address of the feed address's family.
    pub async fn read(
        &self,
        url: &FeedUrl,
        extract: Extract<'_>,
        timeout: Duration,
        sources: ProbeSource,
    ) -> Result<f64, FeedError> {
        let body = self.body(url, timeout, sources).await?;
        parse_body(&body, extract)
    }

    /// The body of a 2xx answer to a GET of `url`, bounded by `timeout` from start to end,
    /// connecting from the `sources` address of the feed address's family.
    pub async fn body(
        &self,
        url: &FeedUrl,
        timeout: Duration,
        sources: ProbeSource,
    ) -> Result<Vec<u8>, FeedError> {
        tokio::time::timeout(timeout, self.fetch(url, sources))
            .await
            .map_err(|_| FeedError::Timeout(timeout))?
    }

    /// The body of a 2xx answer to a GET of `url`.
    async fn fetch(&self, url: &FeedUrl, sources: ProbeSource) -> Result<Vec<u8>, FeedError> {
        let ip = match &url.host {
            Host::Ip(ip) => *ip,
            Host::Name(name) => resolve(name, url.port).await?,
        };
        let addr = SocketAddr::new(ip, url.port);
        let tcp = connect_from(addr, sources.for_target(ip)).await.map_err(|e| match e {
            ConnectError::Source(address, e) => FeedError::Source { address, error: e.to_string() },
            ConnectError::Connect(e) => FeedError::Connect { addr, error: e.to_string() },
        })?;
        if !url.https {
            return exchange(tcp, &url.request).await;
        }
        let name = match &url.host {
            Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
            Host::Name(n) => ServerName::try_from(n.clone())
                .map_err(|e| FeedError::Tls(format!("invalid server name: {e}")))?,
        };
        let connector = self.tls.get(true).map_err(FeedError::Tls)?;
        let _ = tcp.set_nodelay(true);
        let tls = connector.connect(name, tcp).await.map_err(|e| FeedError::Tls(e.to_string()))?;
        exchange(tls, &url.request).await
    }
}

async fn resolve(name: &str, port: u16) -> Result<IpAddr, FeedError> {
    let failed = |error: String| FeedError::Resolve { host: name.to_string(), error };
    let mut addrs =
        tokio::net::lookup_host((name, port)).await.map_err(|e| failed(e.to_string()))?;
    addrs.next().map(|a| a.ip()).ok_or_else(|| failed("no address".into()))
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    request: &[u8],
) -> Result<Vec<u8>, FeedError> {
    let http_err = |e: HttpError| FeedError::Http(e.to_string());
    s.write_all(request).await.map_err(|e| FeedError::Http(e.to_string()))?;
    s.flush().await.map_err(|e| FeedError::Http(e.to_string()))?;
    let resp = http_get::read_head(&mut s).await.map_err(http_err)?;
    if !(200..300).contains(&resp.status) {
        return Err(FeedError::Status(resp.status));
    }
    // One byte past the limit tells a body at the limit from a longer one.
    let body = resp.body(MAX_BODY + 1).await.map_err(http_err)?;
    if body.len() > MAX_BODY {
        return Err(FeedError::TooBig);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() {
        let labels = vec![("pool".to_string(), "eu".to_string())];
        let metric = Extract::Metric { name: "inflight", labels: &labels };
        let cases: &[(&[u8], Extract<'_>, Result<f64, FeedError>)] = &[
            (b"870", Extract::Number, Ok(870.0)),
            (b" 12.5\n", Extract::Number, Ok(12.5)),
            (b"0", Extract::Number, Ok(0.0)),
            (b"1e3", Extract::Number, Ok(1000.0)),
            (b"-1", Extract::Number, Err(FeedError::Invalid(-1.0))),
            (b"\"870\"", Extract::Number, Err(FeedError::NotANumber("\"870\"".into()))),
            (b"null", Extract::Number, Err(FeedError::NotANumber("null".into()))),
            (br#"{"load": 930}"#, Extract::Pointer("/load"), Ok(930.0)),
            (br#"{"a": {"b/c": [1, 2.5]}}"#, Extract::Pointer("/a/b~1c/1"), Ok(2.5)),
            (br#"{"m~n": 4}"#, Extract::Pointer("/m~0n"), Ok(4.0)),
            (
                br#"{"load": 930}"#,
                Extract::Pointer("/lod"),
                Err(FeedError::NoPointer("/lod".into())),
            ),
            (
                br#"{"load": true}"#,
                Extract::Pointer("/load"),
                Err(FeedError::NotANumber("true".into())),
            ),
            (b"inflight{pool=\"eu\"} 870\ninflight{pool=\"us\"} 5\n", metric, Ok(870.0)),
            (b"inflight{pool=\"eu\"} NaN\n", metric, Err(FeedError::Invalid(f64::NAN))),
            (b"inflight{pool=\"eu\"} +Inf\n", metric, Err(FeedError::Invalid(f64::INFINITY))),
        ];
        for (body, extract, want) in cases {
            let got = parse_body(body, *extract);
            let same = match (&got, want) {
                // NaN equals nothing; compare its text.
                (Err(FeedError::Invalid(a)), Err(FeedError::Invalid(b))) => {
                    a.to_string() == b.to_string()
                }
                _ => &got == want,
            };
            assert!(same, "{:?}: got {got:?}, want {want:?}", String::from_utf8_lossy(body));
        }
        // Errors that keep a parser's own message: only the kind matters.
        assert_eq!(parse_body(b"{", Extract::Number).unwrap_err().reason(), "json");
        assert_eq!(parse_body(b"", Extract::Pointer("/x")).unwrap_err().reason(), "json");
        assert_eq!(parse_body(b"x{", metric).unwrap_err().reason(), "exposition");
        assert_eq!(parse_body(b"other 1", metric).unwrap_err().reason(), "absent");
    }

    #[test]
    fn urls() {
        let ok = [
            (
                "http://127.0.0.1:9100/load",
                false,
                9100,
                "GET /load HTTP/1.1\r\nhost: 127.0.0.1:9100\r\n",
            ),
            ("http://[::1]/m?x=1", false, 80, "GET /m?x=1 HTTP/1.1\r\nhost: [::1]\r\n"),
            (
                "https://feeds.example.test",
                true,
                443,
                "GET / HTTP/1.1\r\nhost: feeds.example.test\r\n",
            ),
        ];
        for (url, https, port, head) in ok {
            let u = FeedUrl::parse(url, "*/*").unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!((u.https, u.port), (https, port), "{url}");
            let text = String::from_utf8(u.request.to_vec()).expect("ASCII");
            assert!(text.starts_with(head), "{url}: {text:?}");
            assert!(text.contains("accept: */*\r\n"), "{text:?}");
        }
        for url in ["ftp://h/x", "127.0.0.1:9100/load", "http://u:p@h/", "http:///x", "not a url"] {
            assert_eq!(FeedUrl::parse(url, "*/*").unwrap_err().reason(), "url", "{url}");
        }
    }
}

#[cfg(test)]
mod served {
    //! Feeds read from real HTTP servers on loopback.

    use std::net::SocketAddr;
    use std::time::Duration;

    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tokio::io::AsyncWriteExt;

    use super::*;

    async fn serve(app: Router) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(l, app).await });
        addr
    }

    async fn read(addr: SocketAddr, path: &str, extract: Extract<'_>) -> Result<f64, FeedError> {
        let url = FeedUrl::parse(&format!("http://{addr}{path}"), "*/*").expect("url");
        let sources = ProbeSource::default();
        Reader::default().read(&url, extract, Duration::from_millis(500), sources).await
    }

    #[tokio::test]
    async fn readings_and_failures() {
        let app = Router::new()
            .route("/n", get(|| async { "870" }))
            .route("/j", get(|| async { r#"{"load": {"now": 42}}"# }))
            .route("/m", get(|| async { "# TYPE q gauge\nq{pool=\"eu\"} 7\n" }))
            .route("/at-limit", get(|| async { format!("5{}", " ".repeat(MAX_BODY - 1)) }))
            .route("/big", get(|| async { format!("5{}", " ".repeat(MAX_BODY)) }))
            .route("/down", get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "1") }))
            .route("/text", get(|| async { "busy" }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "1"
                }),
            );
        let addr = serve(app).await;
        let labels = vec![("pool".to_string(), "eu".to_string())];
        assert_eq!(read(addr, "/n", Extract::Number).await, Ok(870.0));
        assert_eq!(read(addr, "/j", Extract::Pointer("/load/now")).await, Ok(42.0));
        let metric = Extract::Metric { name: "q", labels: &labels };
        assert_eq!(read(addr, "/m", metric).await, Ok(7.0));
        assert_eq!(read(addr, "/at-limit", Extract::Number).await, Ok(5.0));
        assert_eq!(read(addr, "/big", Extract::Number).await, Err(FeedError::TooBig));
        assert_eq!(read(addr, "/down", Extract::Number).await, Err(FeedError::Status(503)));
        assert_eq!(read(addr, "/text", Extract::Number).await.unwrap_err().reason(), "json");
        let slow = read(addr, "/slow", Extract::Number).await;
        assert_eq!(slow, Err(FeedError::Timeout(Duration::from_millis(500))));
    }

    #[tokio::test]
    async fn a_server_that_stops_midway_or_is_not_there() {
        // Promises 10 bytes, sends 3 and closes.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n123").await;
            }
        });
        let cut = read(addr, "/", Extract::Number).await;
        assert_eq!(cut.unwrap_err().reason(), "http");
        // A port nothing listens on: the listener's port, once it is closed.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let free = closed.local_addr().expect("addr");
        drop(closed);
        let refused = read(free, "/", Extract::Number).await;
        assert_eq!(refused.unwrap_err().reason(), "connect");
    }
}
