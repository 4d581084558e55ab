//! The udp check: one datagram sent, the first reply judged by whether it contains the
//! expected bytes (`docs/probing.md`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::check::{Reason, classify, udp_socket};
use crate::model::probe_params::UdpParams;

/// The most of a reply read; longer datagrams are cut here by the kernel.
pub const REPLY_LIMIT: usize = 4096;

/// A prepared udp check.
pub struct UdpCheck {
    send: Vec<u8>,
    expect: Vec<u8>,
    /// How long to wait for a reply: a little less than the monitor's timeout, so that
    /// silence is told apart from a slow resolution or a stuck send.
    wait: Duration,
}

impl UdpCheck {
    pub fn new(p: &UdpParams, timeout: Duration) -> UdpCheck {
        UdpCheck { send: p.send.clone(), expect: p.expect.clone(), wait: reply_wait(timeout) }
    }

    pub async fn run(&self, addr: SocketAddr, source: Option<IpAddr>) -> Result<(), Reason> {
        let socket = udp_socket(addr, source).await?;
        socket.send(&self.send).await.map_err(|e| classify(&e))?;
        let mut buf = vec![0; REPLY_LIMIT];
        let n = match tokio::time::timeout(self.wait, socket.recv(&mut buf)).await {
            Err(_) => return Err(Reason::NoReply(self.wait)),
            Ok(r) => r.map_err(|e| classify(&e))?,
        };
        let reply = &buf[..n];
        if super::check::contains(reply, &self.expect) {
            Ok(())
        } else {
            Err(Reason::Reply { expected: shown(&self.expect), got: shown(&reply[..n.min(64)]) })
        }
    }
}

/// Nine tenths of the timeout: the rest is left for the scheduler's overall timeout, which
/// would otherwise fire at the same instant with a vaguer reason.
pub fn reply_wait(timeout: Duration) -> Duration {
    timeout.mul_f64(0.9)
}

/// Bytes as printable ASCII with escapes, for reasons and logs.
fn shown(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}
