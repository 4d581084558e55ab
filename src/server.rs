//! The imperative shell: binds the listeners, owns the shared snapshot, reloads it, and
//! shuts everything down through one cancellation token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ConfigErrors};
use crate::dns::{tcp, udp};
use crate::snapshot::Snapshot;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("configuration is invalid:\n{0}")]
    Config(#[from] ConfigErrors),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// A running server. Dropping it does not stop it; call `shutdown`.
pub struct Server {
    config_path: PathBuf,
    shared: Arc<ArcSwap<Snapshot>>,
    dns_addrs: Vec<SocketAddr>,
    cancel: CancellationToken,
    udp_threads: Vec<JoinHandle<()>>,
    tasks: JoinSet<()>,
}

impl Server {
    /// Loads the configuration and starts serving on every `listen.dns` address (UDP and
    /// TCP on the same port; port 0 picks a free one). Must run inside a tokio runtime.
    pub async fn start(config_path: &Path) -> Result<Server, ServerError> {
        let snap = config::load(config_path, None)?;
        let listen = snap.listen.dns.clone();
        let shared = Arc::new(ArcSwap::from_pointee(snap));
        let cancel = CancellationToken::new();
        let mut server = Server {
            config_path: config_path.to_path_buf(),
            shared,
            dns_addrs: Vec::new(),
            cancel,
            udp_threads: Vec::new(),
            tasks: JoinSet::new(),
        };
        for addr in listen {
            if let Err(e) = server.listen(addr) {
                server.shutdown().await;
                return Err(e);
            }
        }
        Ok(server)
    }

    /// Binds TCP first (to learn the port when 0 was asked), then UDP on the same port.
    fn listen(&mut self, addr: SocketAddr) -> Result<(), ServerError> {
        let bind_err = |addr, source| ServerError::Bind { addr, source };
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut attempt = 0;
        let (tcp, udp) = loop {
            let tcp = tcp::bind(addr).map_err(|e| bind_err(addr, e))?;
            let actual = tcp.local_addr().map_err(|e| bind_err(addr, e))?;
            match udp::bind(actual, workers) {
                Ok(udp) => break (tcp, udp),
                // Port 0: the kernel's free TCP port may be taken for UDP; try another.
                Err(_) if addr.port() == 0 && attempt < 20 => attempt += 1,
                Err(e) => return Err(bind_err(actual, e)),
            }
        };
        let actual = udp::local_addr(&udp[0]).map_err(|e| bind_err(addr, e))?;
        for (i, sock) in udp.into_iter().enumerate() {
            let (shared, cancel) = (self.shared.clone(), self.cancel.clone());
            let t = std::thread::Builder::new()
                .name(format!("udp-{}-{i}", actual.port()))
                .spawn(move || udp::serve(sock, shared, cancel))
                .map_err(|e| bind_err(addr, e))?;
            self.udp_threads.push(t);
        }
        self.tasks.spawn(tcp::serve(tcp, self.shared.clone(), self.cancel.clone()));
        tracing::info!(%actual, "listening (udp, tcp)");
        self.dns_addrs.push(actual);
        Ok(())
    }

    /// The addresses DNS is served on, with real ports.
    pub fn dns_addrs(&self) -> &[SocketAddr] {
        &self.dns_addrs
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.load_full()
    }

    /// Loads the configuration again and swaps it in whole; on error the old one stays.
    pub fn reload(&self) -> Result<u64, ConfigErrors> {
        let current = self.shared.load_full();
        let next = config::load(&self.config_path, Some(&current))?;
        let generation = next.generation;
        self.shared.store(Arc::new(next));
        Ok(generation)
    }

    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Stops every listener and waits for them.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
        let threads = std::mem::take(&mut self.udp_threads);
        let _ =
            tokio::task::spawn_blocking(move || threads.into_iter().for_each(|t| drop(t.join())))
                .await;
    }
}

/// `steerdns serve`: runs until SIGTERM or SIGINT; SIGHUP reloads.
pub async fn serve(config_path: &Path) -> Result<(), ServerError> {
    let server = Server::start(config_path).await?;
    let snap = server.snapshot();
    tracing::info!(
        zones = snap.zones.len(),
        profiles = snap.profiles.len(),
        endpoints = snap.endpoint_count(),
        "serving"
    );
    wait_for_signals(&server).await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signals(server: &Server) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = hup.recv() => match server.reload() {
                Ok(generation) => tracing::info!(generation, "configuration reloaded (SIGHUP)"),
                Err(errors) => {
                    for e in &errors.0 {
                        tracing::error!(error = %e, "reload rejected; keeping the running configuration");
                    }
                }
            },
        }
    }
}
