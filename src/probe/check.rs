//! One health check of one probe: an HTTP(S) GET, a TCP connect, or a dns query, udp
//! exchange, icmp echoes, gRPC health call or pulled health feed (`dns`, `udp`, `icmp`,
//! `grpc`, `feed`; `docs/probing.md`).
//!
//! Everything that does not change between runs (the request bytes, the TLS client and
//! server name) is prepared once per probe in `Check::new`; `Check::run` does the I/O, over
//! a fresh connection each time: accepting connections is part of being healthy. The hard overall
//! timeout is not applied here but by the scheduler around `run`, so it covers resolution,
//! connect, TLS, headers and body alike. Failures come back as a `Reason` whose text is what
//! operators read in the logs and the admin API.

use std::error::Error as StdError;
use std::fmt;
use std::future::{Future, poll_fn};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

use super::dns::DnsCheck;
use super::feed::FeedCheck;
use super::grpc::GrpcCheck;
use super::http::{self, HttpError};
use super::icmp::IcmpCheck;
use super::plan::{ProbeKey, ProbeTarget};
pub use super::tls::Clients;
use super::udp::UdpCheck;
use crate::model::Protocol;
use crate::model::probe_params::{ProbeParams, rcode_text};
use crate::model::snapshot::ProbeSource;

/// Where probes connect from: swapped on reload, read at every connect, so a new
/// `probe.source_address` applies from each probe's next check.
pub type Sources = Arc<ArcSwap<ProbeSource>>;

/// Only this much of a body is searched for `body_contains` (as Azure Traffic Manager).
pub const BODY_LIMIT: usize = 5120;

/// Why a check failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The status code is not in `expected_status`.
    Status {
        got: u16,
        expected: Vec<(u16, u16)>,
    },
    /// `body_contains` is not in the first `BODY_LIMIT` bytes.
    Body(String),
    Timeout(Duration),
    Refused,
    /// The TLS handshake failed; the rustls error text.
    Tls(String),
    /// A host-name target did not resolve.
    Resolve {
        name: String,
        error: String,
    },
    /// The probe cannot be sent at all (an invalid header, no TLS configuration).
    Setup(String),
    /// Any other I/O or protocol failure, with its innermost error text.
    Other(String),
    /// A host name with several addresses, every one of which failed.
    Addresses(Vec<(IpAddr, Reason)>),
    /// This host ran out of something (file descriptors, buffers, local ports, memory)
    /// before the check could ask the endpoint anything; the innermost error text.
    Local(String),
    /// dns: the answer's RCODE is not `expected_rcode`.
    Rcode {
        got: u16,
        expected: u16,
    },
    /// dns: no answer record holds `answer_contains`.
    Answer(String),
    /// udp: the reply does not match `expect`: the pattern, the escaped excerpt of the
    /// reply (its first `udp::EXCERPT_LIMIT` bytes) and the reply's length.
    Reply {
        pattern: String,
        got: String,
        len: usize,
    },
    /// udp: nothing came back within this long.
    NoReply(Duration),
    /// icmp: more echoes went unanswered than `max_loss` allows.
    Loss {
        lost: u8,
        sent: u8,
    },
    /// icmp: the slowest echo took longer than `max_rtt`.
    Rtt {
        got: Duration,
        max: Duration,
    },
    /// json, prometheus: the feed could not be read or parsed.
    Feed(String),
    /// json, prometheus: the feed answered without the value (the monitor's `missing`
    /// policy decides what that counts as).
    NoData(String),
    /// json, prometheus: the value read is not healthy.
    Value(String),
    /// grpc: the health answer is not SERVING, or the call failed.
    Grpc(String),
}

impl Reason {
    /// A short, fixed label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Reason::Status { .. } => "status",
            Reason::Body(_) => "body",
            Reason::Timeout(_) => "timeout",
            Reason::Refused => "refused",
            Reason::Tls(_) => "tls",
            Reason::Resolve { .. } => "resolve",
            Reason::Setup(_) => "setup",
            Reason::Other(_) => "error",
            Reason::Addresses(all) => all.first().map_or("error", |(_, r)| r.kind()),
            Reason::Local(_) => "local",
            Reason::Rcode { .. } => "rcode",
            Reason::Answer(_) => "answer",
            Reason::Reply { .. } => "reply",
            Reason::NoReply(_) => "timeout",
            Reason::Loss { .. } => "loss",
            Reason::Rtt { .. } => "rtt",
            Reason::Feed(_) => "feed",
            Reason::NoData(_) => "nodata",
            Reason::Value(_) => "value",
            Reason::Grpc(_) => "grpc",
        }
    }

    /// True when the failure says nothing about the endpoint: this host lacked a resource
    /// for at least one address, which might otherwise have answered. Such a result is no
    /// observation and must not count against the endpoint.
    pub fn is_local(&self) -> bool {
        match self {
            Reason::Local(_) => true,
            Reason::Addresses(all) => all.iter().any(|(_, r)| r.is_local()),
            _ => false,
        }
    }
}

/// Errors that describe this host, not the endpoint: out of file descriptors (per process
/// or system-wide), socket buffers, local ports or addresses, or memory.
pub fn local_errno(errno: i32) -> bool {
    matches!(
        errno,
        libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::EADDRNOTAVAIL | libc::ENOMEM
    )
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Status { got, expected } => {
                write!(f, "HTTP {got}, expected ")?;
                for (i, (lo, hi)) in expected.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    if lo == hi { write!(f, "{sep}{lo}")? } else { write!(f, "{sep}{lo}-{hi}")? }
                }
                Ok(())
            }
            Reason::Body(needle) => write!(f, "body does not contain {needle:?}"),
            Reason::Timeout(d) => write!(f, "timeout after {}", humantime::format_duration(*d)),
            Reason::Refused => f.write_str("connection refused"),
            Reason::Tls(e) => write!(f, "TLS: {e}"),
            Reason::Resolve { name, error } => write!(f, "cannot resolve {name}: {error}"),
            Reason::Setup(e) | Reason::Other(e) => f.write_str(e),
            Reason::Local(e) => write!(f, "local resources: {e}"),
            Reason::Rcode { got, expected } => {
                write!(f, "RCODE {}, expected {}", rcode_text(*got), rcode_text(*expected))
            }
            Reason::Answer(a) => write!(f, "answer does not contain {a:?}"),
            Reason::Reply { pattern, got, len } => {
                write!(f, "reply does not match \"{pattern}\": got \"{got}\"")?;
                if *len > super::udp::EXCERPT_LIMIT {
                    write!(f, " (first {} of {len} bytes)", super::udp::EXCERPT_LIMIT)?;
                }
                Ok(())
            }
            Reason::NoReply(d) => write!(f, "no reply within {}", humantime::format_duration(*d)),
            Reason::Feed(e) => write!(f, "feed: {e}"),
            Reason::NoData(e) => write!(f, "no data: {e}"),
            Reason::Value(e) => f.write_str(e),
            Reason::Grpc(e) => write!(f, "gRPC health: {e}"),
            Reason::Loss { lost, sent } => write!(f, "{lost} of {sent} echoes lost"),
            Reason::Rtt { got, max } => write!(
                f,
                "round trip {}, above max_rtt {}",
                humantime::format_duration(*got),
                humantime::format_duration(*max)
            ),
            Reason::Addresses(all) => {
                // The same failure everywhere reads better once, without addresses.
                if all.windows(2).all(|w| w[0].1 == w[1].1)
                    && let Some((_, r)) = all.first()
                {
                    return r.fmt(f);
                }
                for (i, (ip, r)) in all.iter().enumerate() {
                    write!(f, "{}{ip}: {r}", if i == 0 { "" } else { "; " })?;
                }
                Ok(())
            }
        }
    }
}

/// A prepared check of one probe.
pub struct Check {
    target: ProbeTarget,
    port: u16,
    kind: Kind,
    sources: Sources,
}

enum Kind {
    Tcp,
    // Boxed: a check is built once per probe, and tcp probes should not carry HTTP's size.
    Http(Box<Result<Http, String>>),
    Dns(Box<Result<DnsCheck, String>>),
    Udp(Box<UdpCheck>),
    Icmp(Box<IcmpCheck>, Option<String>),
    /// Reads its URL, not the target.
    Feed(Box<FeedCheck>),
    Grpc(Box<GrpcCheck>),
}

struct Http {
    /// The whole request, rendered once.
    request: Box<[u8]>,
    /// For https: the shared TLS client and the name the certificate must match (the
    /// host name, or the address for an address target).
    tls: Option<(TlsConnector, ServerName<'static>)>,
    expected: Vec<(u16, u16)>,
    body_contains: Option<String>,
}

impl Check {
    pub fn new(key: &ProbeKey, clients: &Clients, sources: Sources) -> Check {
        let m = &key.monitor;
        let kind = match m.protocol {
            Protocol::Tcp => Kind::Tcp,
            Protocol::Http | Protocol::Https => Kind::Http(Box::new(Http::new(key, clients))),
            // Never planned as probes (`plan` leaves them out); failing is the safe answer.
            Protocol::Pushed | Protocol::File => Kind::Http(Box::new(Err(format!(
                "{} monitors are not probed",
                m.protocol.as_str()
            )))),
            Protocol::Dns
            | Protocol::Udp
            | Protocol::Icmp
            | Protocol::Json
            | Protocol::Prometheus
            | Protocol::Grpc => match &m.params {
                ProbeParams::Dns(p) => Kind::Dns(Box::new(DnsCheck::new(p))),
                ProbeParams::Udp(p) => Kind::Udp(Box::new(UdpCheck::new(p, m.timeout))),
                ProbeParams::Icmp(p) => {
                    Kind::Icmp(Box::new(IcmpCheck::new(p, m.timeout)), IcmpCheck::setup_error())
                }
                ProbeParams::Feed(p) => Kind::Feed(Box::new(FeedCheck::new(p, m.timeout))),
                ProbeParams::Grpc(p) => {
                    let tls =
                        p.tls.then(|| Ok((clients.get(m.tls_verify)?, server_name(&key.target)?)));
                    Kind::Grpc(Box::new(GrpcCheck::new(&p.service, tls)))
                }
                ProbeParams::None => {
                    Kind::Dns(Box::new(Err("the monitor has no settings for its protocol".into())))
                }
            },
        };
        Check { target: key.target.clone(), port: m.port, kind, sources }
    }

    /// Why this check can never succeed, if its definition is unusable.
    pub fn setup_error(&self) -> Option<&str> {
        match &self.kind {
            Kind::Http(h) => h.as_ref().as_ref().err().map(String::as_str),
            Kind::Dns(d) => d.as_ref().as_ref().err().map(String::as_str),
            Kind::Icmp(_, e) => e.as_deref(),
            Kind::Feed(f) => f.setup_error(),
            Kind::Grpc(g) => g.setup_error(),
            Kind::Tcp | Kind::Udp(_) => None,
        }
    }

    /// Runs the check once, against every address of a host-name target.
    pub async fn run(&self) -> Result<(), Reason> {
        if let Kind::Feed(f) = &self.kind {
            return f.run(**self.sources.load()).await;
        }
        match &self.target {
            ProbeTarget::Ip(ip) => self.one(*ip).await,
            ProbeTarget::Host(name) => {
                let ips = resolve(&host_text(name), self.port).await?;
                any_ok(ips.into_iter().map(|ip| (ip, Box::pin(self.one(ip)) as BoxCheck<'_>))).await
            }
        }
    }

    async fn one(&self, ip: IpAddr) -> Result<(), Reason> {
        let addr = SocketAddr::new(ip, self.port);
        let source = self.sources.load().for_target(ip);
        match &self.kind {
            Kind::Tcp => connect(addr, source).await.map(drop),
            Kind::Http(h) => match h.as_ref() {
                Err(e) => Err(Reason::Setup(e.clone())),
                Ok(h) => h.get(addr, source).await,
            },
            Kind::Dns(d) => match d.as_ref() {
                Err(e) => Err(Reason::Setup(e.clone())),
                Ok(d) => d.run(addr, source).await,
            },
            Kind::Udp(u) => u.run(addr, source).await,
            Kind::Icmp(i, _) => i.run(ip, source).await,
            Kind::Feed(f) => f.run(**self.sources.load()).await,
            Kind::Grpc(g) => g.run(addr, source).await,
        }
    }
}

impl Http {
    fn new(key: &ProbeKey, clients: &Clients) -> Result<Http, String> {
        let m = &key.monitor;
        let https = m.protocol == Protocol::Https;
        let tls = if https {
            Some((clients.get(m.tls_verify)?, server_name(&key.target)?))
        } else {
            None
        };
        Ok(Http {
            request: http::request(&m.path, &host_header(key), &m.headers)?.into_boxed_slice(),
            tls,
            expected: m.expected_status.clone(),
            body_contains: m.body_contains.clone(),
        })
    }

    /// One GET over a fresh connection to `addr`, from `source` when given.
    async fn get(&self, addr: SocketAddr, source: Option<IpAddr>) -> Result<(), Reason> {
        let tcp = connect(addr, source).await?;
        match &self.tls {
            None => self.exchange(tcp).await,
            Some((connector, name)) => {
                // The request follows the handshake at once; Nagle would hold it back.
                let _ = tcp.set_nodelay(true);
                let tls = connector.connect(name.clone(), tcp).await.map_err(|e| classify(&e))?;
                self.exchange(tls).await
            }
        }
    }

    /// Sends the request and judges the response.
    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(&self, mut s: S) -> Result<(), Reason> {
        s.write_all(&self.request).await.map_err(|e| classify(&e))?;
        s.flush().await.map_err(|e| classify(&e))?;
        let resp = http::read_head(&mut s).await.map_err(|e| http_reason(&e))?;
        let got = resp.status;
        if !self.expected.iter().any(|(lo, hi)| (*lo..=*hi).contains(&got)) {
            return Err(Reason::Status { got, expected: self.expected.clone() });
        }
        let Some(needle) = &self.body_contains else { return Ok(()) };
        let body = resp.body(BODY_LIMIT).await.map_err(|e| http_reason(&e))?;
        if contains(&body, needle.as_bytes()) { Ok(()) } else { Err(Reason::Body(needle.clone())) }
    }
}

/// The default Host header, as a URL client would send it: an address with its port unless
/// it is the scheme's default; a host name alone (the port is not part of its name).
fn host_header(key: &ProbeKey) -> String {
    let m = &key.monitor;
    let default_port = if m.protocol == Protocol::Https { 443 } else { 80 };
    let ip = match &key.target {
        ProbeTarget::Host(name) => return host_text(name),
        ProbeTarget::Ip(IpAddr::V4(ip)) => ip.to_string(),
        ProbeTarget::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
    };
    if m.port == default_port { ip } else { format!("{ip}:{}", m.port) }
}

/// A host name as written in URLs and Host headers: without the root's trailing dot.
/// The name a certificate must match: the host name, or the address for an address target.
fn server_name(target: &ProbeTarget) -> Result<ServerName<'static>, String> {
    match target {
        ProbeTarget::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        ProbeTarget::Host(name) => ServerName::try_from(host_text(name))
            .map_err(|e| format!("invalid TLS server name: {e}")),
    }
}

fn host_text(name: &crate::wire::name::WireName) -> String {
    let text = name.to_string();
    text.strip_suffix('.').map(str::to_string).unwrap_or(text)
}

/// A UDP socket connected to `addr`, bound to `source` when given: replies from any other
/// address are dropped by the kernel, and an ICMP port unreachable reads as `Refused`.
pub(super) async fn udp_socket(
    addr: SocketAddr,
    source: Option<IpAddr>,
) -> Result<tokio::net::UdpSocket, Reason> {
    let any = if addr.is_ipv4() {
        IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED)
    };
    let local = SocketAddr::new(source.unwrap_or(any), 0);
    let socket = tokio::net::UdpSocket::bind(local).await.map_err(|e| match source {
        Some(source) => bind_reason(source, &e),
        None => classify(&e),
    })?;
    socket.connect(addr).await.map_err(|e| classify(&e))?;
    Ok(socket)
}

/// A fresh connection to `addr`, bound to `source` when given; a tcp check is just this.
pub(super) async fn connect(addr: SocketAddr, source: Option<IpAddr>) -> Result<TcpStream, Reason> {
    connect_from(addr, source).await.map_err(|e| match e {
        ConnectError::Source(source, e) => bind_reason(source, &e),
        ConnectError::Connect(e) => classify(&e),
    })
}

/// Why `connect_from` failed: binding the source address, or anything else.
#[derive(Debug)]
pub(super) enum ConnectError {
    Source(IpAddr, io::Error),
    Connect(io::Error),
}

/// `connect` for callers with errors of their own (the feed reader): the I/O error, and
/// whether it came from binding the source address.
pub(super) async fn connect_from(
    addr: SocketAddr,
    source: Option<IpAddr>,
) -> Result<TcpStream, ConnectError> {
    let Some(source) = source else {
        return TcpStream::connect(addr).await.map_err(ConnectError::Connect);
    };
    let socket = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() };
    let socket = socket.map_err(ConnectError::Connect)?;
    defer_port_choice(&socket);
    socket.bind(SocketAddr::new(source, 0)).map_err(|e| ConnectError::Source(source, e))?;
    socket.connect(addr).await.map_err(ConnectError::Connect)
}

/// A source address this host does not have is a configuration mistake, shown as the
/// probe's failure; a shortage of ports or descriptors is no observation, as ever.
fn bind_reason(source: IpAddr, err: &io::Error) -> Reason {
    match classify(err) {
        Reason::Local(_) if err.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {
            Reason::Setup(format!("cannot use source address {source}: {err}"))
        }
        other => other,
    }
}

/// Lets the kernel pick the local port at connect, per destination, instead of at bind,
/// where every port is reserved for the source address whatever the destination: binding
/// first would otherwise cap a replica at one connection per local port over all probes.
fn defer_port_choice(socket: &TcpSocket) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on a socket this function's caller owns, with a valid int.
        // A kernel without the option (before 4.2) refuses it; the bind then picks the
        // port as before.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = socket;
}

async fn resolve(name: &str, port: u16) -> Result<Vec<IpAddr>, Reason> {
    let failed = |error: String| Reason::Resolve { name: name.to_string(), error };
    let addrs = tokio::net::lookup_host((name, port)).await.map_err(|e| match classify(&e) {
        local @ Reason::Local(_) => local,
        _ => failed(e.to_string()),
    })?;
    let mut ips: Vec<IpAddr> = Vec::new();
    for a in addrs {
        if !ips.contains(&a.ip()) {
            ips.push(a.ip());
        }
    }
    if ips.is_empty() {
        return Err(failed("no addresses".to_string()));
    }
    Ok(ips)
}

type BoxCheck<'a> = Pin<Box<dyn Future<Output = Result<(), Reason>> + Send + 'a>>;

/// Runs the checks of every address concurrently: Ok as soon as one succeeds, else every
/// address with its reason. Polled in place (not spawned): the checks borrow the probe,
/// and a task per address would cost a spawn per run.
async fn any_ok(checks: impl Iterator<Item = (IpAddr, BoxCheck<'_>)>) -> Result<(), Reason> {
    let mut pending: Vec<(IpAddr, Option<BoxCheck<'_>>)> =
        checks.map(|(ip, c)| (ip, Some(c))).collect();
    let mut failed: Vec<(IpAddr, Reason)> = Vec::new();
    poll_fn(|cx| {
        for (ip, slot) in pending.iter_mut() {
            let Some(check) = slot else { continue };
            if let Poll::Ready(result) = check.as_mut().poll(cx) {
                *slot = None;
                match result {
                    Ok(()) => return Poll::Ready(Ok(())),
                    Err(r) => failed.push((*ip, r)),
                }
            }
        }
        if pending.iter().all(|(_, s)| s.is_none()) {
            return Poll::Ready(Err(match failed.len() {
                1 => failed.pop().map(|(_, r)| r).unwrap_or(Reason::Refused),
                _ => Reason::Addresses(std::mem::take(&mut failed)),
            }));
        }
        Poll::Pending
    })
    .await
}

/// The reason of an I/O failure: a rustls error inside is a TLS failure, a refused
/// connect is `Refused`, a local resource shortage is `Local`, anything else reads as its
/// innermost error.
pub(super) fn classify(err: &io::Error) -> Reason {
    let found = chain(err).find_map(|e| {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(Reason::Tls(tls.to_string()));
        }
        let io = e.downcast_ref::<io::Error>()?;
        if io.raw_os_error().is_some_and(local_errno) {
            return Some(Reason::Local(io.to_string()));
        }
        (io.kind() == io::ErrorKind::ConnectionRefused).then_some(Reason::Refused)
    });
    found.unwrap_or_else(|| Reason::Other(innermost(err)))
}

fn http_reason(err: &HttpError) -> Reason {
    match err {
        HttpError::Io(io) => classify(io),
        other => Reason::Other(other.to_string()),
    }
}

/// `err` and the errors beneath it, outermost first. An `io::Error`'s `source()` is its
/// wrapped error's source, skipping the wrapped error itself (a rustls error, say), so the
/// chain steps into it with `get_ref` instead.
pub(super) fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&e: &&'a (dyn StdError + 'static)| {
        match e.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
            None => e.source(),
        }
    })
}

/// The text of the deepest error in a chain.
pub(super) fn innermost(err: &(dyn StdError + 'static)) -> String {
    chain(err).last().unwrap_or(err).to_string()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_texts() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let cases: Vec<(Reason, &str)> = vec![
            (Reason::Status { got: 503, expected: vec![(200, 299)] }, "HTTP 503, expected 200-299"),
            (
                Reason::Status { got: 500, expected: vec![(200, 299), (301, 301)] },
                "HTTP 500, expected 200-299, 301",
            ),
            (Reason::Timeout(Duration::from_millis(800)), "timeout after 800ms"),
            (Reason::Timeout(Duration::from_secs(10)), "timeout after 10s"),
            (Reason::Refused, "connection refused"),
            (Reason::Body("OK".into()), "body does not contain \"OK\""),
            (Reason::Tls("certificate expired".into()), "TLS: certificate expired"),
            (
                Reason::Addresses(vec![
                    (ip("192.0.2.1"), Reason::Refused),
                    (ip("::1"), Reason::Refused),
                ]),
                "connection refused",
            ),
            (
                Reason::Addresses(vec![
                    (ip("192.0.2.1"), Reason::Refused),
                    (ip("::1"), Reason::Timeout(Duration::from_secs(1))),
                ]),
                "192.0.2.1: connection refused; ::1: timeout after 1s",
            ),
        ];
        for (reason, text) in cases {
            assert_eq!(reason.to_string(), text);
        }
    }

    #[tokio::test]
    async fn any_address_succeeding_is_enough() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let fail = |r: Reason| Box::pin(async move { Err(r) }) as BoxCheck<'static>;
        let ok = || Box::pin(async { Ok(()) }) as BoxCheck<'static>;
        let slow_ok = || {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(())
            }) as BoxCheck<'static>
        };
        let got =
            any_ok([(ip("192.0.2.1"), fail(Reason::Refused)), (ip("::1"), slow_ok())].into_iter());
        assert_eq!(got.await, Ok(()));
        let got = any_ok([(ip("192.0.2.1"), ok()), (ip("::1"), fail(Reason::Refused))].into_iter());
        assert_eq!(got.await, Ok(()));
        let got = any_ok([(ip("192.0.2.1"), fail(Reason::Refused))].into_iter());
        assert_eq!(got.await, Err(Reason::Refused));
        let got = any_ok(
            [(ip("192.0.2.1"), fail(Reason::Refused)), (ip("::1"), fail(Reason::Body("x".into())))]
                .into_iter(),
        );
        assert_eq!(
            got.await.unwrap_err().to_string(),
            "192.0.2.1: connection refused; ::1: body does not contain \"x\""
        );
    }

    /// An `io::Error` inside an `io::Error` (as stream adapters wrap them) is looked into
    /// by `classify` as far as by `innermost`, so the reason and its text agree.
    #[test]
    fn wrapped_io_errors_are_classified_by_what_they_wrap() {
        let refused = io::Error::other(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&refused), Reason::Refused);
        assert_eq!(classify(&refused).to_string(), innermost(&refused));

        let bad_cert = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        let tls = io::Error::other(io::Error::new(io::ErrorKind::InvalidData, bad_cert.clone()));
        assert_eq!(classify(&tls), Reason::Tls(bad_cert.to_string()));
        assert_eq!(innermost(&tls), bad_cert.to_string());

        let reset = io::Error::other(io::Error::new(io::ErrorKind::ConnectionReset, "peer reset"));
        assert_eq!(classify(&reset), Reason::Other("peer reset".into()));
    }

    /// Which I/O errors are this host's shortage (no observation) and which are the
    /// endpoint's failure, however deeply they are wrapped.
    #[test]
    fn local_resource_errors_are_told_apart() {
        let os = io::Error::from_raw_os_error;
        let cases: Vec<(io::Error, bool)> = vec![
            (os(libc::EMFILE), true),
            (os(libc::ENFILE), true),
            (os(libc::ENOBUFS), true),
            (os(libc::EADDRNOTAVAIL), true),
            (os(libc::ENOMEM), true),
            (io::Error::other(os(libc::EMFILE)), true),
            (os(libc::ECONNREFUSED), false),
            (os(libc::ECONNRESET), false),
            (os(libc::EHOSTUNREACH), false),
            (os(libc::ENETUNREACH), false),
            (os(libc::ETIMEDOUT), false),
            (io::Error::from(io::ErrorKind::UnexpectedEof), false),
        ];
        for (err, local) in cases {
            let r = classify(&err);
            assert_eq!(r.is_local(), local, "{err}: {r:?}");
            assert_eq!(r.kind() == "local", local, "{err}");
        }
        let emfile = classify(&os(libc::EMFILE));
        assert!(emfile.to_string().starts_with("local resources: "), "{emfile}");
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mixed =
            Reason::Addresses(vec![(ip("192.0.2.1"), Reason::Refused), (ip("::1"), emfile)]);
        assert!(mixed.is_local(), "one address unasked: no verdict on the host name");
        let all_failed = Reason::Addresses(vec![(ip("192.0.2.1"), Reason::Refused)]);
        assert!(!all_failed.is_local());
    }

    #[test]
    fn body_search() {
        assert!(contains(b"all OK here", b"OK"));
        assert!(!contains(b"all ok here", b"OK"));
        assert!(!contains(b"O", b"OK"));
        assert!(contains(b"", b""));
    }
}
