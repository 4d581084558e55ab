//! The admin API's certificate and key (`admin.tls`): PEM files read into a rustls server
//! configuration. A load checks the pair so that a broken one is a located error; the
//! admin listener reads it again whenever the files change.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::diag::{self, Limit};

/// A certificate chain or a key is a few kilobytes; a larger file is a mistake.
const PEM_FILE_LIMIT: Limit =
    Limit { bytes: 1 << 20, set_by: "the fixed limit for admin TLS files" };

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the admin TLS certificate {}: {source}", path.display())]
    ReadCert { path: PathBuf, source: diag::FileError },
    #[error("cannot read the admin TLS key {}: {source}", path.display())]
    ReadKey { path: PathBuf, source: diag::FileError },
    #[error("no PEM certificate in {}", path.display())]
    NoCert { path: PathBuf },
    #[error("no PEM private key in {}: {reason}", path.display())]
    NoKey { path: PathBuf, reason: String },
    #[error("the admin TLS certificate {} and key {} do not make a pair: {reason}", cert.display(), key.display())]
    Mismatch { cert: PathBuf, key: PathBuf, reason: String },
}

impl TlsError {
    /// Whether the key file is at fault (else the certificate file, or both).
    pub fn in_key(&self) -> bool {
        matches!(self, TlsError::ReadKey { .. } | TlsError::NoKey { .. })
    }
}

/// A server configuration (HTTP/1.1 by ALPN) with the chain in `cert` and the key in `key`.
pub fn load_pair(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_text = diag::read_limited(cert, PEM_FILE_LIMIT)
        .map_err(|source| TlsError::ReadCert { path: cert.to_path_buf(), source })?;
    let key_text = diag::read_limited(key, PEM_FILE_LIMIT)
        .map_err(|source| TlsError::ReadKey { path: key.to_path_buf(), source })?;
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_text.as_bytes()).filter_map(Result::ok).collect();
    if chain.is_empty() {
        return Err(TlsError::NoCert { path: cert.to_path_buf() });
    }
    let private = PrivateKeyDer::from_pem_slice(key_text.as_bytes())
        .map_err(|e| TlsError::NoKey { path: key.to_path_buf(), reason: e.to_string() })?;
    // The process's default provider is left alone: other rustls users decide theirs.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mismatch = |e: rustls::Error| TlsError::Mismatch {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        reason: e.to_string(),
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(mismatch)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(mismatch)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_pair(name: &str) -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec![name.to_string()]).expect("rcgen");
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    #[test]
    fn a_pair_loads_and_each_mistake_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_a, key_a) = pem_pair("a.test");
        let (_, key_b) = pem_pair("b.test");
        let cases: [(&str, &str, &str, Option<bool>); 5] = [
            ("good pair", &cert_a, &key_a, None),
            ("key of another certificate", &cert_a, &key_b, Some(false)),
            ("no certificate", "not PEM", &key_a, Some(false)),
            ("no key", &cert_a, "not PEM", Some(true)),
            ("key and certificate swapped", &key_a, &cert_a, Some(false)),
        ];
        for (what, cert, key, fails_in_key) in cases {
            let (c, k) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
            std::fs::write(&c, cert).unwrap();
            std::fs::write(&k, key).unwrap();
            match (load_pair(&c, &k), fails_in_key) {
                (Ok(config), None) => assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]),
                (Err(e), Some(in_key)) => assert_eq!(e.in_key(), in_key, "{what}: {e}"),
                (r, want) => panic!("{what}: {:?}, wanted failure in key: {want:?}", r.err()),
            }
        }
        let missing = load_pair(&dir.path().join("none.pem"), &dir.path().join("k.pem"));
        assert!(matches!(missing, Err(TlsError::ReadCert { .. })), "{:?}", missing.err());
    }
}
