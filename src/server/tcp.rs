//! The TCP front end (RFC 7766): a small tokio loop that reads length-prefixed queries and
//! answers each through the same responder as UDP, without the UDP size limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::model::snapshot::Snapshot;
use crate::responder::{Packet, Transport, respond};
use crate::wire::cookie::unix_now;

/// Connections served at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 1024;
/// A connection with no complete query for this long is closed.
const IDLE: Duration = Duration::from_secs(10);

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

/// Accepts connections until `cancel` fires.
pub async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<ArcSwap<Snapshot>>,
    cancel: CancellationToken,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return tracing::error!(error = %e, "tcp listener unusable"),
    };
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "too many tcp connections; closing");
            continue;
        };
        let (shared, cancel) = (shared.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                r = connection(stream, peer, shared) => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "tcp connection ended");
                },
            }
            drop(permit);
        });
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<ArcSwap<Snapshot>>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    // Buffered both ways: pipelined queries are read with one system call and their answers
    // leave together when no more input is waiting.
    let mut reader = BufReader::with_capacity(16 * 1024, rd);
    let mut writer = BufWriter::with_capacity(16 * 1024, wr);
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let mut query = Vec::with_capacity(512);
    let mut out = Vec::with_capacity(4096);
    loop {
        if reader.buffer().is_empty() {
            writer.flush().await?;
        }
        let ready = reader.buffer().len() >= 2;
        let Some(len) = idle_or(ready, reader.read_u16()).await? else {
            return Ok(());
        };
        query.resize(usize::from(len), 0);
        let ready = reader.buffer().len() >= query.len();
        if idle_or(ready, reader.read_exact(&mut query)).await?.is_none() {
            return Ok(());
        }
        let answered = {
            let snap = shared.load();
            let now = unix_now();
            let packet = Packet { bytes: &query, src: peer.ip(), transport: Transport::Tcp, now };
            let outcome = respond(&snap, &*snap.health, packet, &mut rng, &mut out, None);
            outcome.map(|o| snap.counters.record(&o)).is_some()
        };
        if !answered {
            writer.flush().await?;
            return Ok(());
        }
        writer.write_all(&(out.len() as u16).to_be_bytes()).await?;
        writer.write_all(&out).await?;
    }
}

/// Runs a read: directly when its bytes are already buffered (`ready`), else under the idle
/// timeout, so a timer is armed only when the read may wait. `None`: the peer closed the
/// connection or stayed silent too long.
async fn idle_or<T>(
    ready: bool,
    read: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<Option<T>> {
    if ready {
        return read.await.map(Some);
    }
    match tokio::time::timeout(IDLE, read).await {
        Ok(Ok(v)) => Ok(Some(v)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(None),
    }
}
