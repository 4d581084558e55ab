//! The grpc check: the standard `grpc.health.v1.Health/Check` over plaintext HTTP/2
//! (h2c), healthy when the answer is SERVING (`docs/probing.md`).

use std::error::Error as StdError;
use std::io;
use std::net::SocketAddr;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::check::{Reason, chain, classify, innermost};

/// The largest answer decoded: a health answer is a few bytes.
const MAX_ANSWER: usize = 1024;

/// A prepared grpc check.
pub struct GrpcCheck {
    /// The service asked about; empty for the server as a whole.
    service: String,
}

impl GrpcCheck {
    pub fn new(service: &str) -> GrpcCheck {
        GrpcCheck { service: service.to_string() }
    }

    /// One Check call over a fresh connection to `addr`.
    pub async fn run(&self, addr: SocketAddr) -> Result<(), Reason> {
        let uri = format!("http://{addr}");
        let endpoint = tonic::transport::Endpoint::from_shared(uri)
            .map_err(|e| Reason::Setup(format!("invalid gRPC address: {e}")))?;
        let channel = endpoint.connect().await.map_err(|e| transport_reason(&e))?;
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

/// A connection failure read like the other checks' (refused, local shortage, ...).
fn transport_reason(e: &(dyn StdError + 'static)) -> Reason {
    chain(e)
        .find_map(|x| x.downcast_ref::<io::Error>())
        .map_or_else(|| Reason::Other(innermost(e)), classify)
}
