//! The etcd client as steerdns uses it: connecting with the settings of `cluster.etcd`,
//! reading a whole prefix at one revision in pages, reading a watch, and the backoff every
//! reconnecting loop waits by.

use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions, WatchResponse,
    WatchStream,
};

use crate::model::cluster::EtcdSettings;

/// The largest gRPC message read from etcd: above etcd's own default request limit
/// (1.5 MiB) with room for a page of large profile files.
pub const MAX_MESSAGE: usize = 64 << 20;

/// Keys a prefix read asks for at once, so that one response stays well within
/// `MAX_MESSAGE` and etcd does not build one huge reply.
const PAGE: i64 = 1000;

/// What went wrong with etcd, said as an operator reads it. The library's own error (a
/// gRPC status, a transport error and its causes) goes to a debug log line where it is
/// classified; every message starts with "etcd" so that `at` can name the endpoints.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No connection: refused, reset, a failed TLS handshake, a name that does not resolve.
    #[error("etcd is unreachable: {0}")]
    Unreachable(String),
    /// etcd answered and refused who we are (a token it no longer knows, a user without
    /// the permission).
    #[error("etcd refused the credentials: {0}")]
    Denied(String),
    #[error("etcd timed out after {}", seconds(*.0))]
    Timeout(std::time::Duration),
    /// etcd answered and refused the request for another reason, in its own words.
    #[error("etcd refused the request: {0}")]
    Refused(String),
    #[error("etcd did not let user {user:?} log in: {reason}")]
    LogIn { user: String, reason: String, refused: bool },
    #[error("cannot read {}: {source}", path.display())]
    File { path: std::path::PathBuf, source: std::io::Error },
    #[error("etcd key {key:?} is not UTF-8")]
    NotUtf8 { key: String },
}

/// `5s`, `1.5s`: a duration as a person writes it.
fn seconds(d: std::time::Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

impl From<etcd_client::Error> for EtcdError {
    fn from(e: etcd_client::Error) -> EtcdError {
        tracing::debug!(error = ?e, "etcd request failed");
        classify(&e)
    }
}

/// The plain reason of a library error (see `EtcdError`).
fn classify(e: &etcd_client::Error) -> EtcdError {
    use tonic::Code;
    let chain = causes(e);
    match e {
        etcd_client::Error::GRpcStatus(status) => match status.code() {
            Code::Unavailable => EtcdError::Unreachable(transport_reason(&chain)),
            Code::Unknown if transport_kind(&chain).is_some() => {
                EtcdError::Unreachable(transport_reason(&chain))
            }
            Code::DeadlineExceeded => EtcdError::Refused("the request took too long".into()),
            Code::Unauthenticated | Code::PermissionDenied => {
                EtcdError::Denied(etcd_words(status.message()))
            }
            Code::Cancelled => EtcdError::Unreachable("the connection was closed".into()),
            _ => EtcdError::Refused(etcd_words(status.message())),
        },
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            EtcdError::Unreachable(transport_reason(&chain))
        }
        etcd_client::Error::InvalidUri(_) | etcd_client::Error::InvalidArgs(_) => {
            EtcdError::Refused(e.to_string())
        }
        _ => EtcdError::Unreachable(transport_reason(&chain)),
    }
}

/// The reason when etcd closed the connection under a request.
const CONNECTION_CLOSED: &str = "the connection was closed";

/// The messages of `e` and of every cause under it, outermost first.
fn causes(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out = vec![e.to_string()];
    let mut next = e.source();
    while let Some(cause) = next {
        out.push(cause.to_string());
        next = cause.source();
    }
    out
}

/// What a failed connection comes down to, when one of the known cases.
fn transport_kind(chain: &[String]) -> Option<String> {
    let all = chain.join(": ").to_lowercase();
    let innermost = chain.last().map(String::as_str).unwrap_or_default();
    if all.contains("connection refused") {
        Some("connection refused".into())
    } else if all.contains("certificate") || all.contains("handshake") || all.contains("tls") {
        Some(format!("the TLS handshake failed: {innermost}"))
    } else if all.contains("connection reset") {
        Some("the connection was reset".into())
    } else if all.contains("dns error") || all.contains("failed to lookup") {
        Some("the host name does not resolve".into())
    } else if all.contains("timed out") || all.contains("deadline") {
        Some("no answer in time".into())
    } else if all.contains("closed") || all.contains("broken pipe") {
        Some(CONNECTION_CLOSED.into())
    } else {
        None
    }
}

fn transport_reason(chain: &[String]) -> String {
    transport_kind(chain)
        .unwrap_or_else(|| chain.last().cloned().unwrap_or_else(|| "no connection".into()))
}

/// etcd's own message without its `etcdserver: ` tag.
fn etcd_words(message: &str) -> String {
    message.strip_prefix("etcdserver: ").unwrap_or(message).to_string()
}

impl EtcdError {
    /// Whether etcd answered and refused the login (a wrong user or password, or
    /// authentication not enabled in etcd), rather than not being reached: a mistake in
    /// the configuration, not an outage to ride out.
    pub fn is_refused_login(&self) -> bool {
        matches!(self, EtcdError::LogIn { refused: true, .. })
    }

    /// Whether etcd refused the credentials: logging in again may help.
    pub fn is_denied(&self) -> bool {
        matches!(self, EtcdError::Denied(_))
    }

    /// The message naming where etcd is: `etcd at 127.0.0.1:2379 is unreachable: …`.
    pub fn at(&self, endpoints: &str) -> String {
        let mut text = self.to_string();
        // Over TLS, etcd requiring a client certificate ends the handshake by closing the
        // connection, often before the client can read why: say what it likely means.
        let tls = endpoints.split(',').all(|e| e.starts_with("https://"));
        if tls && matches!(self, EtcdError::Unreachable(r) if r == CONNECTION_CLOSED) {
            text.push_str(
                " during or right after the TLS handshake (etcd ends it so when it requires a client certificate and none is shown: tls.cert, tls.key)",
            );
        }
        match text.strip_prefix("etcd ") {
            Some(rest) if !rest.starts_with("key ") => format!("etcd at {endpoints} {rest}"),
            _ => format!("etcd at {endpoints}: {text}"),
        }
    }

    fn log_in(user: &str, e: etcd_client::Error) -> EtcdError {
        use etcd_client::Error::GRpcStatus;
        use tonic::Code;
        tracing::debug!(error = ?e, user, "etcd login failed");
        let refused = matches!(&e, GRpcStatus(status) if matches!(
            status.code(),
            Code::InvalidArgument
                | Code::FailedPrecondition
                | Code::PermissionDenied
                | Code::Unauthenticated
        ));
        let reason = match (&e, refused) {
            (GRpcStatus(status), true) => etcd_words(status.message()),
            _ => classify(&e).to_string(),
        };
        EtcdError::LogIn { user: user.to_string(), reason, refused }
    }
}

/// One etcd request, given at most `limit`.
pub async fn within<T>(
    limit: Duration,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(limit, request).await {
        Ok(answer) => answer.map_err(EtcdError::from),
        Err(_) => Err(EtcdError::Timeout(limit)),
    }
}

/// The next response of a watch; the stream's end is a lost connection.
pub async fn next_response(stream: &mut WatchStream) -> Result<WatchResponse, EtcdError> {
    match stream.message().await {
        Ok(Some(resp)) => Ok(resp),
        Ok(None) => Err(EtcdError::Unreachable("the connection was closed".into())),
        Err(e) => Err(e.into()),
    }
}

/// A client for `settings`. Nothing is sent yet: the channel connects on first use and
/// reconnects by itself after etcd comes back. With a user (`cluster.etcd.username`),
/// requests carry no token until `log_in` succeeds.
pub async fn client(settings: &EtcdSettings) -> Result<Client, EtcdError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(10))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
        .with_keep_alive_while_idle(true)
        // After `log_in`: a token etcd no longer knows (it expired, or etcd restarted)
        // is replaced by logging in again, and the request retried once.
        .with_auto_token_refresh(true);
    if let Some(tls) = &settings.tls {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|source| EtcdError::File { path: path.into(), source })
        };
        let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
        if let Some((cert, key)) = &tls.cert_key {
            t = t.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        options = options.with_tls(t);
    }
    Ok(Client::connect(&settings.endpoints, Some(options)).await?)
}

/// Logs `client` (and its clones) in as `cluster.etcd.username`, when set: every request
/// after it carries the token. A failed login changes nothing.
pub async fn log_in(client: &Client, settings: &EtcdSettings) -> Result<(), EtcdError> {
    let Some(auth) = &settings.auth else { return Ok(()) };
    let user = Some((auth.username.clone(), auth.password.clone()));
    // The clones of a client share its credentials and token.
    let logged_in = client.clone().update_user(user).await;
    logged_in.map_err(|e| EtcdError::log_in(&auth.username, e))
}

/// `client`, logged in: for the commands, which need etcd at once.
pub async fn connect(settings: &EtcdSettings) -> Result<Client, EtcdError> {
    let client = client(settings).await?;
    log_in(&client, settings).await?;
    Ok(client)
}

/// One key and its value as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// Every key under a prefix as of one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    /// The store's revision the keys were read at: a watch from `revision + 1` misses
    /// nothing.
    pub revision: i64,
    pub entries: Vec<Entry>,
}

/// Reads every key under `prefix` in pages, all at the revision of the first page.
pub async fn fetch_prefix(client: &Client, prefix: &str) -> Result<Fetched, EtcdError> {
    fetch_range(client, prefix, &prefix_end(prefix.as_bytes())).await
}

/// Reads every key from `start` up to `end` (excluded) in pages, all at the revision of
/// the first page.
pub async fn fetch_range(client: &Client, start: &str, end: &[u8]) -> Result<Fetched, EtcdError> {
    let mut kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
    let end = end.to_vec();
    let mut from = start.as_bytes().to_vec();
    let mut out = Fetched::default();
    loop {
        let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        if out.revision > 0 {
            options = options.with_revision(out.revision);
        }
        let mut resp = kv.get(from.clone(), Some(options)).await?;
        if out.revision == 0 {
            out.revision = resp.header().map_or(0, |h| h.revision());
        }
        let more = resp.more();
        for kv in resp.take_kvs() {
            let mod_revision = kv.mod_revision();
            let (key, value) = kv.into_key_value();
            let key = String::from_utf8(key).map_err(|e| EtcdError::NotUtf8 {
                key: String::from_utf8_lossy(e.as_bytes()).into_owned(),
            })?;
            out.entries.push(Entry { key, value, mod_revision });
        }
        match (more, out.entries.last()) {
            (true, Some(last)) => {
                from = last.key.as_bytes().to_vec();
                from.push(0);
            }
            _ => return Ok(out),
        }
    }
}

/// The end of the key range of `prefix` (etcd's `WithPrefix`): the prefix with its last
/// byte below 0xff incremented.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Exponential backoff with jitter, for every loop that reconnects to etcd: from 100 ms,
/// doubling to at most `MAX`, so that a restarted etcd is not met by every replica at once.
#[derive(Debug, Default)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    pub const MAX: Duration = Duration::from_secs(5);

    /// The wait before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let base = Duration::from_millis(100).saturating_mul(1 << self.attempt.min(6));
        self.attempt = self.attempt.saturating_add(1);
        let base = base.min(Self::MAX);
        // Between half and all of it.
        let jitter = rand::random::<f64>() * 0.5 + 0.5;
        base.mul_f64(jitter)
    }

    /// After a success: the next failure waits the shortest time again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/steerdns/"), b"/steerdns0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    /// The causes tonic and hyper give for a failed connection, as an operator reads them.
    #[test]
    fn transport_failures_read_plainly() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["status: Unavailable", "tcp connect error", "Connection refused (os error 111)"],
                "connection refused",
            ),
            (
                &["transport error", "invalid peer certificate: UnknownIssuer"],
                "the TLS handshake failed: invalid peer certificate: UnknownIssuer",
            ),
            (
                &["transport error", "received fatal alert: CertificateRequired"],
                "the TLS handshake failed: received fatal alert: CertificateRequired",
            ),
            (&["h2 protocol error", "connection reset by peer"], "the connection was reset"),
            (
                &["dns error", "failed to lookup address information"],
                "the host name does not resolve",
            ),
            (&["operation timed out"], "no answer in time"),
            (&["connection closed before message completed"], "the connection was closed"),
            (&["something new"], "something new"),
        ];
        for (chain, want) in cases {
            let chain: Vec<String> = chain.iter().map(|s| s.to_string()).collect();
            assert_eq!(transport_reason(&chain), *want, "{chain:?}");
        }
    }

    #[test]
    fn messages_name_the_endpoints() {
        let at = "http://127.0.0.1:2379";
        let cases = [
            (
                EtcdError::Unreachable("connection refused".into()),
                "etcd at http://127.0.0.1:2379 is unreachable: connection refused",
            ),
            (
                EtcdError::Timeout(Duration::from_secs(5)),
                "etcd at http://127.0.0.1:2379 timed out after 5s",
            ),
            (
                EtcdError::Denied("permission denied".into()),
                "etcd at http://127.0.0.1:2379 refused the credentials: permission denied",
            ),
            (
                EtcdError::NotUtf8 { key: "k".into() },
                "etcd at http://127.0.0.1:2379: etcd key \"k\" is not UTF-8",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.at(at), want);
        }
        let closed = EtcdError::Unreachable(CONNECTION_CLOSED.into());
        assert_eq!(
            closed.at(at),
            "etcd at http://127.0.0.1:2379 is unreachable: the connection was closed"
        );
        let over_tls = closed.at("https://127.0.0.1:2379");
        assert!(over_tls.ends_with("closed during or right after the TLS handshake (etcd ends it so when it requires a client certificate and none is shown: tls.cert, tls.key)"), "{over_tls}");
    }

    #[test]
    fn backoff_grows_to_its_cap_and_resets() {
        let mut b = Backoff::default();
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        for _ in 0..20 {
            assert!(b.next_delay() <= Backoff::MAX);
        }
        assert!(b.next_delay() >= Backoff::MAX / 2);
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
