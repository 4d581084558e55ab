//! The TCP front end (RFC 7766): a small tokio loop that reads length-prefixed queries and
//! answers each through the same responder as UDP, without the UDP size limit.
//!
//! No client may hold it alone: connections go through the shared table of `conns` (a cap
//! per source, the longest-idle connection evicted when full), a connection with no
//! complete query for `idle_timeout` is closed (RFC 7766 §6.2.3), and so is one whose
//! answers cannot be written within `io_timeout`, a client that pipelines and never reads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::conns::{Admitted, Conns};
use super::dnstap::{Exchange, QueryLog, TcpLog, Time};
use super::rum::Rum;
use crate::model::TcpLimits;
use crate::model::snapshot::Snapshot;
use crate::responder::{Packet, Transport, respond};
use crate::wire::cookie::unix_now;

/// Answers gathered before they are written out.
const WRITE_BUFFER: usize = 16 * 1024;

/// Binds a listening socket (SO_REUSEADDR so restarts do not wait for TIME_WAIT).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Accepts connections into `conns` until `cancel` fires. While the query log is on, a
/// sample of the exchanges goes to its writer, through a ring of the connection's own.
pub async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<ArcSwap<Snapshot>>,
    rum: Option<Arc<Rum>>,
    conns: Arc<Conns>,
    limits: TcpLimits,
    log: Arc<QueryLog>,
    cancel: CancellationToken,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return tracing::error!(error = %e, "tcp listener unusable"),
    };
    loop {
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, "tcp accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let admitted = match conns.admit(peer.ip()) {
            Ok(a) => a,
            Err(why) => {
                tracing::debug!(%peer, ?why, "tcp connection refused; closing");
                continue;
            }
        };
        let (shared, cancel, mut log) = (shared.clone(), cancel.clone(), log.tcp());
        let rum = rum.clone();
        tokio::spawn(async move {
            let evicted = admitted.conn.evicted.clone();
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = evicted.cancelled() => tracing::debug!(%peer, "tcp connection evicted: the table is full"),
                r = connection(stream, peer, shared, rum, &admitted, limits, &mut log) => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "tcp connection ended");
                },
            }
        });
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<ArcSwap<Snapshot>>,
    rum: Option<Arc<Rum>>,
    admitted: &Admitted,
    limits: TcpLimits,
    log: &mut TcpLog,
) -> std::io::Result<()> {
    let (idle, io) = (limits.idle_timeout, limits.io_timeout);
    let _ = stream.set_nodelay(true);
    // Our end of the connection, for the query log (looked up at the first exchange logged).
    let mut local = None;
    let (rd, wr) = stream.into_split();
    // Buffered both ways: pipelined queries are read with one system call and their answers
    // leave together when no more input is waiting.
    let mut reader = BufReader::with_capacity(16 * 1024, rd);
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER, wr);
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let mut query = Vec::with_capacity(512);
    let mut out = Vec::with_capacity(4096);
    loop {
        if reader.buffer().is_empty() && !writer.buffer().is_empty() {
            timed(io, writer.flush()).await?;
        }
        let ready = reader.buffer().len() >= 2;
        let Some(len) = idle_or(idle, ready, reader.read_u16()).await? else {
            return Ok(());
        };
        query.resize(usize::from(len), 0);
        let ready = reader.buffer().len() >= query.len();
        if idle_or(idle, ready, reader.read_exact(&mut query)).await?.is_none() {
            return Ok(());
        }
        admitted.touch();
        let answered = {
            let snap = shared.load();
            let measured = rum.as_ref().map(|r| r.published().load());
            let now = unix_now();
            let packet = Packet {
                bytes: &query,
                src: peer.ip(),
                transport: Transport::Tcp,
                now,
                measured: measured.as_deref().map(|m| &**m),
            };
            let logged = match log.current() {
                Some(tap) if tap.sampled(&mut rng) => Some((tap, Time::now())),
                _ => None,
            };
            let outcome = respond(&snap, &*snap.health, packet, &mut rng, &mut out, None);
            let answered = outcome.map(|o| snap.counters.record(&o)).is_some();
            if let Some((tap, query_time)) = logged {
                let server = match local {
                    Some(a) => a,
                    None => *local.insert(reader.get_ref().local_addr()?),
                };
                tap.offer(&Exchange {
                    transport: Transport::Tcp,
                    client: peer,
                    server,
                    query: &query,
                    query_time,
                    response: answered.then(|| (&out[..], Time::now())),
                });
            }
            answered
        };
        if !answered {
            timed(io, writer.flush()).await?;
            return Ok(());
        }
        let len = (out.len() as u16).to_be_bytes();
        if WRITE_BUFFER - writer.buffer().len() >= len.len() + out.len() {
            // Fits in the buffer: no system call, so nothing that could wait.
            writer.write_all(&len).await?;
            writer.write_all(&out).await?;
        } else {
            timed(io, async {
                writer.write_all(&len).await?;
                writer.write_all(&out).await
            })
            .await?;
        }
    }
}

/// Runs a write under the I/O timeout: a client that does not read its answers fills the
/// socket buffers, and would otherwise hold its connection (and a slot) forever.
async fn timed(
    limit: Duration,
    write: impl std::future::Future<Output = std::io::Result<()>>,
) -> std::io::Result<()> {
    match tokio::time::timeout(limit, write).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client did not read its answers in time",
        )),
    }
}

/// Runs a read: directly when its bytes are already buffered (`ready`), else under the idle
/// timeout, so a timer is armed only when the read may wait. `None`: the peer closed the
/// connection or stayed silent too long.
async fn idle_or<T>(
    idle: Duration,
    ready: bool,
    read: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<Option<T>> {
    if ready {
        return read.await.map(Some);
    }
    match tokio::time::timeout(idle, read).await {
        Ok(Ok(v)) => Ok(Some(v)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(None),
    }
}
