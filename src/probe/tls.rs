//! TLS for https probes: two client configurations every probe shares, one validating
//! certificates with the platform verifier (the system's roots, as browsers and the
//! previous reqwest-based client did), one accepting any certificate (`tls_verify: false`).
//!
//! They are built on first use, so a configuration without https never loads the
//! system's root store.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio_rustls::TlsConnector;

/// The TLS client configurations every probe shares.
#[derive(Default)]
pub struct Clients {
    verifying: OnceLock<Result<TlsConnector, String>>,
    lenient: OnceLock<Result<TlsConnector, String>>,
}

impl Clients {
    pub fn get(&self, tls_verify: bool) -> Result<TlsConnector, String> {
        let cell = if tls_verify { &self.verifying } else { &self.lenient };
        cell.get_or_init(|| connector(tls_verify)).clone()
    }
}

fn connector(tls_verify: bool) -> Result<TlsConnector, String> {
    // Passed explicitly, not installed as the process default: setting up probes should not
    // decide what other rustls users in the process get.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous();
    let verifier: Arc<dyn ServerCertVerifier> = if tls_verify {
        let v = rustls_platform_verifier::Verifier::new(provider)
            .map_err(|e| format!("cannot load the system's certificate roots: {e}"))?;
        Arc::new(v)
    } else {
        Arc::new(AcceptAny)
    };
    let mut config = builder.with_custom_certificate_verifier(verifier).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// `tls_verify: false`: any certificate and any handshake signature are accepted, so a
/// self-signed or expired certificate does not fail the probe.
#[derive(Debug)]
struct AcceptAny;

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        use SignatureScheme::*;
        vec![
            RSA_PKCS1_SHA1,
            ECDSA_SHA1_Legacy,
            RSA_PKCS1_SHA256,
            ECDSA_NISTP256_SHA256,
            RSA_PKCS1_SHA384,
            ECDSA_NISTP384_SHA384,
            RSA_PKCS1_SHA512,
            ECDSA_NISTP521_SHA512,
            RSA_PSS_SHA256,
            RSA_PSS_SHA384,
            RSA_PSS_SHA512,
            ED25519,
            ED448,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes bring their own provider, so building their clients must leave the process
    /// default alone. The check reads process-wide state: no other unit test of the library
    /// may install a default provider (tests/probe.rs does, in its own binary).
    #[test]
    fn building_the_clients_installs_no_process_default() {
        let clients = Clients::default();
        assert!(clients.get(false).is_ok());
        // May fail where the system has no roots; either way it must not install a default.
        let _ = clients.get(true);
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    }
}
