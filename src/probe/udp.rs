//! The udp check: one datagram sent, the first reply judged by whether it matches the
//! expected pattern (`docs/probing.md`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::check::{Reason, classify, udp_socket};
use crate::model::probe_params::{ReplyPattern, UdpParams};

/// The most of a reply read; longer datagrams are cut here by the kernel.
pub const REPLY_LIMIT: usize = 4096;

/// The most of a reply shown in a failure's reason, before escaping.
pub const EXCERPT_LIMIT: usize = 64;

/// A prepared udp check.
pub struct UdpCheck {
    send: Vec<u8>,
    expect: Option<ReplyPattern>,
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
        judge(self.expect.as_ref(), &buf[..n])
    }
}

/// The verdict on a reply: any reply passes without a pattern.
fn judge(expect: Option<&ReplyPattern>, reply: &[u8]) -> Result<(), Reason> {
    match expect {
        Some(pattern) if !pattern.is_match(reply) => Err(Reason::Reply {
            pattern: shown_pattern(pattern.as_str()),
            got: reply[..reply.len().min(EXCERPT_LIMIT)].escape_ascii().to_string(),
            len: reply.len(),
        }),
        _ => Ok(()),
    }
}

/// Nine tenths of the timeout: the rest is left for the scheduler's overall timeout, which
/// would otherwise fire at the same instant with a vaguer reason.
pub fn reply_wait(timeout: Duration) -> Duration {
    timeout.mul_f64(0.9)
}

/// A pattern as written, on one line: control characters (a newline written in a YAML
/// double-quoted string) escaped as the pattern syntax reads them, backslashes left alone.
fn shown_pattern(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    for c in pattern.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_judged_with_their_excerpt() {
        let p = |text: &str| ReplyPattern::new(text).unwrap();
        let long = [b"SIP/2.0 503 ".as_slice(), [b'x'; 100].as_slice()].concat();
        // (pattern, reply, the reason's text or "ok")
        let cases: Vec<(Option<ReplyPattern>, &[u8], String)> = vec![
            (None, b"", "ok".into()),
            (Some(p("^PONG")), b"PONG 1", "ok".into()),
            (
                Some(p(r"^SIP/2\.0 2\d\d")),
                b"SIP/2.0 503\r\n\xff",
                r#"reply does not match "^SIP/2\.0 2\d\d": got "SIP/2.0 503\r\n\xff""#.into(),
            ),
            (
                Some(p("OK\r\n")),
                long.as_slice(),
                format!(
                    r#"reply does not match "OK\r\n": got "SIP/2.0 503 {}" (first 64 of 112 bytes)"#,
                    "x".repeat(52)
                ),
            ),
        ];
        for (pattern, reply, want) in cases {
            let got = match judge(pattern.as_ref(), reply) {
                Ok(()) => "ok".to_string(),
                Err(r) => {
                    assert_eq!(r.kind(), "reply");
                    r.to_string()
                }
            };
            assert_eq!(got, want, "{}", reply.escape_ascii());
        }
    }
}
