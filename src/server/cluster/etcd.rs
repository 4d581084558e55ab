//! The etcd client as steerdns uses it: connecting with the settings of `cluster.etcd`,
//! reading a whole prefix at one revision in pages, and the backoff every reconnecting
//! loop waits by.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};

use crate::model::cluster::EtcdSettings;

/// The largest gRPC message read from etcd: above etcd's own default request limit
/// (1.5 MiB) with room for a page of large profile files.
pub const MAX_MESSAGE: usize = 64 << 20;

/// Keys a prefix read asks for at once, so that one response stays well within
/// `MAX_MESSAGE` and etcd does not build one huge reply.
const PAGE: i64 = 1000;

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("etcd did not let user {user:?} log in: {source}")]
    LogIn { user: String, source: etcd_client::Error },
    #[error("cannot read {}: {source}", path.display())]
    File { path: std::path::PathBuf, source: std::io::Error },
    #[error("etcd key {key:?} is not UTF-8")]
    NotUtf8 { key: String },
    #[error("etcd did not answer within {0:?}")]
    Timeout(std::time::Duration),
}

impl EtcdError {
    /// Whether etcd answered and refused the login (a wrong user or password, or
    /// authentication not enabled in etcd), rather than not being reached: a mistake in
    /// the configuration, not an outage to ride out.
    pub fn is_refused_login(&self) -> bool {
        use etcd_client::Error::GRpcStatus;
        use tonic::Code;
        match self {
            EtcdError::LogIn { source: GRpcStatus(status), .. } => matches!(
                status.code(),
                Code::InvalidArgument
                    | Code::FailedPrecondition
                    | Code::PermissionDenied
                    | Code::Unauthenticated
            ),
            _ => false,
        }
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
    logged_in.map_err(|source| EtcdError::LogIn { user: auth.username.clone(), source })
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
    let mut kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
    let end = prefix_end(prefix.as_bytes());
    let mut from = prefix.as_bytes().to_vec();
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
