//! The grpc check: the standard `grpc.health.v1.Health/Check` over plaintext HTTP/2
//! (h2c), or over TLS with ALPN h2 (`tls: true`), healthy when the answer is SERVING
//! (`docs/probing.md`). The channel dials as every other probe connects (`check::connect`,
//! from `probe.source_address`), not through tonic's own connector.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::check::{Reason, chain, classify, connect, innermost};

/// The largest answer decoded: a health answer is a few bytes.
const MAX_ANSWER: usize = 1024;

/// A prepared grpc check.
pub struct GrpcCheck {
    /// The service asked about; empty for the server as a whole.
    service: String,
    /// For `tls: true`: the TLS client (ALPN h2) and the name the certificate must match,
    /// or why they could not be set up.
    tls: Option<Result<(TlsConnector, ServerName<'static>), String>>,
}

impl GrpcCheck {
    /// `tls` holds the shared client for the monitor's `tls_verify`; its ALPN is replaced
    /// by h2, which gRPC servers require.
    pub fn new(
        service: &str,
        tls: Option<Result<(TlsConnector, ServerName<'static>), String>>,
    ) -> GrpcCheck {
        let tls = tls.map(|t| {
            t.map(|(connector, name)| {
                let mut config = connector.config().as_ref().clone();
                config.alpn_protocols = vec![b"h2".to_vec()];
                (TlsConnector::from(Arc::new(config)), name)
            })
        });
        GrpcCheck { service: service.to_string(), tls }
    }

    /// Why this check can never succeed, if its TLS client could not be set up.
    pub fn setup_error(&self) -> Option<&str> {
        self.tls.as_ref()?.as_ref().err().map(String::as_str)
    }

    /// One Check call over a fresh connection to `addr`, from `source` when given.
    pub async fn run(&self, addr: SocketAddr, source: Option<IpAddr>) -> Result<(), Reason> {
        // `http` even over TLS: the dialer below connects, and tonic must not add its own TLS.
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Reason::Setup(format!("invalid gRPC address: {e}")))?;
        let tls = match &self.tls {
            None => None,
            Some(Err(e)) => return Err(Reason::Setup(e.clone())),
            Some(Ok(tls)) => Some(tls.clone()),
        };
        // The channel dials through this: TCP to `addr` from the source address, as every
        // other probe connects, then the TLS handshake for `tls: true`.
        let dial = tower::service_fn(move |_: http::Uri| {
            let tls = tls.clone();
            async move {
                let tcp = connect(addr, source).await.map_err(Dial)?;
                let stream = match tls {
                    None => Either::Left(tcp),
                    Some((connector, name)) => Either::Right(
                        connector.connect(name, tcp).await.map_err(|e| Dial(classify(&e)))?,
                    ),
                };
                Ok::<_, Dial>(TokioIo::new(stream))
            }
        });
        let channel = endpoint.connect_with_connector(dial).await;
        let channel = channel.map_err(|e| transport_reason(&e))?;
        let mut client = HealthClient::new(channel).max_decoding_message_size(MAX_ANSWER);
        let request = HealthCheckRequest { service: self.service.clone() };
        let answer = client
            .check(request)
            .await
            .map_err(|s| Reason::Grpc(format!("RPC failed: {:?}: {}", s.code(), s.message())))?;
        match answer.into_inner().status() {
            ServingStatus::Serving => Ok(()),
            other => Err(Reason::Grpc(format!("status {}", other.as_str_name()))),
        }
    }
}

/// A failure of the dialer, carried through tonic's error as the reason it already is.
#[derive(Debug)]
struct Dial(Reason);

impl fmt::Display for Dial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl StdError for Dial {}

/// A connection failure read like the other checks' (refused, local shortage, a source
/// address this host lacks, ...).
fn transport_reason(e: &(dyn StdError + 'static)) -> Reason {
    if let Some(Dial(reason)) = chain(e).find_map(|x| x.downcast_ref::<Dial>()) {
        return reason.clone();
    }
    chain(e)
        .find_map(|x| x.downcast_ref::<io::Error>())
        .map_or_else(|| Reason::Other(innermost(e)), classify)
}
