//! HTTPS for the admin API (`admin.tls`): the certificate and key files are checked at
//! every new connection, and a changed pair is loaded for the connections after it, so
//! that a renewed certificate is served without a restart. A pair that does not load is
//! logged once and the one in use stays.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rustls::ServerConfig;

use crate::config::admin_tls::{TlsError, load_pair};
use crate::model::AdminTls;

/// What identifies one version of a file: a rewrite or a rename over it changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp { modified: m.modified().ok(), len: m.len(), inode: m.ino() })
}

/// The files a configuration was loaded from, as they were then.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Version {
    files: AdminTls,
    stamps: (Option<Stamp>, Option<Stamp>),
}

impl Version {
    fn now(files: &AdminTls) -> Version {
        Version { files: files.clone(), stamps: (stamp(&files.cert), stamp(&files.key)) }
    }
}

/// The certificate served to new connections.
pub struct Certs {
    inner: Mutex<Inner>,
}

struct Inner {
    config: Arc<ServerConfig>,
    /// The files `config` came from.
    loaded: Version,
    /// The last version that failed to load: not tried (nor logged) again until it changes.
    failed: Option<Version>,
}

impl Certs {
    /// Loads the pair in `files`.
    pub fn load(files: &AdminTls) -> Result<Certs, TlsError> {
        let loaded = Version::now(files);
        let config = load_pair(&files.cert, &files.key)?;
        Ok(Certs { inner: Mutex::new(Inner { config, loaded, failed: None }) })
    }

    /// The configuration for a new connection: the pair in `files` (the running
    /// configuration's `admin.tls`, which a reload may point elsewhere; `None`: the files
    /// in use) when it changed since the last load and loads, else the one in use.
    pub fn current(&self, files: Option<&AdminTls>) -> Arc<ServerConfig> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let files = files.unwrap_or(&inner.loaded.files).clone();
        let files = &files;
        let now = Version::now(files);
        if now == inner.loaded || inner.failed.as_ref() == Some(&now) {
            return inner.config.clone();
        }
        match load_pair(&files.cert, &files.key) {
            Ok(config) => {
                tracing::info!(cert = %files.cert.display(), key = %files.key.display(), "admin API certificate loaded");
                *inner = Inner { config, loaded: now, failed: None };
            }
            Err(e) => {
                tracing::error!(error = %e, "admin API certificate not loaded; the one in use stays");
                inner.failed = Some(now);
            }
        }
        inner.config.clone()
    }
}
