//! A small HTTP/1.1 client for the admin API, and a minimal HTTP backend for probes.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Longest wait for one HTTP exchange.
pub const HTTP_WAIT: Duration = Duration::from_secs(10);

/// An HTTP response as read off the socket.
#[derive(Debug)]
pub struct Http {
    pub status: u16,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Http {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }

    /// The body as JSON (panics with the body when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.text()))
    }
}

/// One HTTP/1.1 exchange on a new connection (`Connection: close`, read to EOF).
/// `headers` are extra request header lines as (name, value).
pub async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Http {
    http_with_body(addr, method, path, headers, b"").await
}

/// `http` with a request body (sent with its `Content-Length`, also when empty, except
/// for GET and HEAD).
pub async fn http_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Http {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.expect("connect to the admin API");
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        if (method != "GET" && method != "HEAD") || !body.is_empty() {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        let mut req = req.into_bytes();
        req.extend_from_slice(body);
        s.write_all(&req).await.expect("write request");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.expect("read response");
        raw
    };
    let raw = timeout(HTTP_WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no response within {HTTP_WAIT:?}"));
    parse_http(&raw).unwrap_or_else(|e| {
        panic!("{method} {path}: bad HTTP response ({e}): {:?}", String::from_utf8_lossy(&raw))
    })
}

/// GET, with `Authorization: Bearer <token>` when a token is given.
pub async fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> Http {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> =
        auth.as_deref().map(|a| ("Authorization", a)).into_iter().collect();
    http(addr, "GET", path, &headers).await
}

/// POST with an empty body, with `Authorization: Bearer <token>` when a token is given.
pub async fn http_post(addr: SocketAddr, path: &str, token: Option<&str>) -> Http {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> =
        auth.as_deref().map(|a| ("Authorization", a)).into_iter().collect();
    http(addr, "POST", path, &headers).await
}

/// Splits a full HTTP/1.1 response into status, headers and body (de-chunking the body
/// when it is sent chunked).
pub fn parse_http(raw: &[u8]) -> Result<Http, String> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|e| e.to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty response")?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for l in lines {
        let (n, v) = l.split_once(':').ok_or_else(|| format!("bad header line {l:?}"))?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        body = dechunk(&body)?;
    } else if let Some((_, len)) = headers.iter().find(|(n, _)| n == "content-length") {
        let len: usize = len.parse().map_err(|_| format!("bad content-length {len:?}"))?;
        if body.len() != len {
            return Err(format!("content-length {len} but {} body bytes", body.len()));
        }
    }
    Ok(Http { status, headers, body })
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").ok_or("chunk size line")?;
        let size_text = std::str::from_utf8(&b[..eol]).map_err(|e| e.to_string())?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(b.get(..size).ok_or("short chunk")?);
        b = b.get(size + 2..).ok_or("short chunk trailer")?;
    }
}

/// Reads an HTTP request head from `conn`, up to its blank line or 16 KiB; `None` when
/// the connection ends or fails first.
pub async fn read_request_head<S: tokio::io::AsyncRead + Unpin>(conn: &mut S) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16384 {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(head)
}

/// Reads a request head from `conn` and answers it with `status`, body `ok`, closing the
/// connection.
async fn answer_ok(conn: &mut tokio::net::TcpStream, status: u16) {
    if read_request_head(conn).await.is_none() {
        return;
    }
    let reply = format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    let _ = conn.write_all(reply.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// A real HTTP backend for health probes: answers every request with the status set last
/// (200 at first) and closes the connection, until `stop`, after which its port refuses
/// connections.
pub struct HttpBackend {
    pub addr: SocketAddr,
    status: std::sync::Arc<std::sync::atomic::AtomicU16>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpBackend {
    /// Listens on `ip`, port chosen by the kernel.
    pub async fn start(ip: &str) -> HttpBackend {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind backend");
        HttpBackend::on(listener)
    }

    /// Listens on `addr` (that of a backend stopped before, to start it again).
    pub async fn start_at(addr: SocketAddr) -> HttpBackend {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind backend");
        HttpBackend::on(listener)
    }

    fn on(listener: tokio::net::TcpListener) -> HttpBackend {
        use std::sync::atomic::{AtomicU16, Ordering};
        let addr = listener.local_addr().expect("backend address");
        let status = std::sync::Arc::new(AtomicU16::new(200));
        let answer_with = status.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let status = answer_with.load(Ordering::SeqCst);
                tokio::spawn(async move { answer_ok(&mut conn, status).await });
            }
        });
        HttpBackend { addr, status, task }
    }

    /// The status every later request gets.
    pub fn set(&self, status: u16) {
        self.status.store(status, std::sync::atomic::Ordering::SeqCst);
    }

    /// Closes the listening socket: probes then get "connection refused".
    pub async fn stop(self) {
        self.task.abort();
        // Wait for the task to be dropped, so the port is closed when this returns.
        let _ = self.task.await;
    }
}

/// An HTTP backend for probes from several vantage points: answers 503 to connections
/// from the source addresses in its failing set and 200 to all others.
pub struct SourceBackend {
    pub addr: SocketAddr,
    failing: std::sync::Arc<std::sync::Mutex<Vec<std::net::IpAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SourceBackend {
    /// Listens on `ip`, port chosen by the kernel, failing nobody.
    pub async fn start(ip: &str) -> SourceBackend {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind backend");
        let addr = listener.local_addr().expect("backend address");
        let failing = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let list = failing.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, peer)) = listener.accept().await {
                let status = if list.lock().unwrap().contains(&peer.ip()) { 503 } else { 200 };
                tokio::spawn(async move { answer_ok(&mut conn, status).await });
            }
        });
        SourceBackend { addr, failing, task }
    }

    /// Connections from `sources` get 503 from now on, all others 200.
    pub fn fail_for(&self, sources: &[std::net::IpAddr]) {
        *self.failing.lock().unwrap() = sources.to_vec();
    }
}

impl Drop for SourceBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}
