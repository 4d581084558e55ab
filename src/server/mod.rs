//! The imperative shell: binds the listeners, owns the shared snapshot, reloads it, and
//! shuts everything down through one cancellation token.
//!
//! Everything here only moves data in and out of the core: `udp` and `tcp` feed packets to
//! the responder, `control` swaps snapshots, runs the reloads that `reloader` queues for
//! every trigger (`watch`, SIGHUP, `admin`, `key_timing`, `cluster`) and override changes
//! (`overrides`, from `admin`), `admin` serves the HTTP API, `dnstap` writes the query
//! log, `rum` takes real user measurements, and `load` turns endpoint loads into shares.

pub mod admin;
pub mod cluster;
pub mod conns;
pub mod control;
pub mod dnstap;
pub mod fdlimit;
pub mod key_timing;
pub mod last_reload;
pub mod load;
pub mod notify;
pub mod overrides;
pub mod presign;
pub mod pushes;
pub mod reloader;
pub mod rrl;
pub mod rum;
pub mod tcp;
pub mod totals;
pub mod udp;
pub mod watch;
pub mod xdp;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ConfigErrors};
use crate::model::events::Events;
use crate::model::snapshot::DEFAULT_UDP_RECEIVE_BUFFER;
use crate::model::{Listen, Snapshot};
use crate::probe::Prober;
use conns::Conns;
use control::Control;
use dnstap::QueryLog;
use reloader::{Reloader, Trigger};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("configuration is invalid:\n{0}")]
    Config(#[from] ConfigErrors),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Dnstap(#[from] dnstap::DnstapError),
    #[error(transparent)]
    Cluster(#[from] cluster::etcd::EtcdError),
    #[error(transparent)]
    Profiles(#[from] cluster::profiles::StartError),
    #[error(transparent)]
    AdminTls(#[from] config::admin_tls::TlsError),
    #[error(transparent)]
    Xdp(#[from] xdp::XdpError),
}

/// A running server. Dropping it does not stop it; call `shutdown`.
pub struct Server {
    control: Arc<Control>,
    dns_addrs: Vec<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    rum_addrs: Vec<SocketAddr>,
    cancel: CancellationToken,
    /// The UDP workers and the pre-signer, joined at shutdown.
    threads: Vec<JoinHandle<()>>,
    tasks: JoinSet<()>,
    /// The tasks that talk to etcd: a call in flight to an unreachable etcd may not end
    /// soon after the cancellation, so shutdown waits for them at most `CLUSTER_STOP`.
    cluster_tasks: JoinSet<()>,
    _watcher: Option<::notify::RecommendedWatcher>,
    /// The AF_XDP fast path's program and sockets, released after its workers stopped.
    xdp: Option<xdp::Running>,
}

impl Server {
    /// Loads the configuration and starts serving on every `listen.dns` address (UDP and
    /// TCP on the same port; port 0 picks a free one), the admin API when configured, and
    /// the file watcher. Must run inside a tokio runtime.
    pub async fn start(config_path: &Path) -> Result<Server, ServerError> {
        // Off the runtime's threads, so that signals are still handled while it loads.
        let path = config_path.to_path_buf();
        let settings = blocking(move || config::cluster_settings(&path)).await?;
        let session = match settings {
            Some(s) => {
                let client = cluster::etcd::client(&s.etcd).await?;
                let session = cluster::Session::new(Arc::new(s), client);
                // A refused login is a mistake to report now; an etcd that does not
                // answer is an outage, which the session rides out (it logs in later).
                match session.log_in().await {
                    Err(e) if e.is_refused_login() => return Err(e.into()),
                    _ => Some(session),
                }
            }
            None => None,
        };
        // With `profiles: etcd`, the profiles come from etcd (or the cache file), and a
        // watch follows them from where that read left off.
        let (loaded, remote, watch_from) = match &session {
            Some(s) if s.settings.profiles_from_etcd => {
                let started = cluster::profiles::start(config_path, s).await?;
                let remote = Some((started.applied, started.latest));
                (started.loaded, remote, Some(started.seen))
            }
            _ => {
                let path = config_path.to_path_buf();
                (blocking(move || config::load(&path, None)).await?, None, None)
            }
        };
        control::release_free_memory();
        let listen = loaded.snapshot.listen.clone();
        let dnstap = Arc::new(QueryLog::start(loaded.snapshot.dnstap.as_ref())?);
        let cancel = CancellationToken::new();
        // Before the listeners: probing starts as soon as the configuration is known.
        let events = Arc::new(Events::default());
        if let Some(path) = &loaded.cache.state_file {
            events.restore(config::overrides::read_events(path));
        }
        // Before the prober records its first change.
        let status_events = events.subscribe();
        let views = session.as_deref().map(cluster::health::HealthViews::new);
        let consensus = views.clone().map(|v| v as Arc<dyn crate::probe::Consensus>);
        let prober = Arc::new(Prober::start_with(
            &loaded.snapshot,
            cancel.clone(),
            events.clone(),
            consensus,
        ));
        let control = Arc::new(
            Control::new(
                config_path.to_path_buf(),
                loaded,
                prober,
                events,
                dnstap,
                session.clone(),
            )
            .with_remote(remote),
        );
        let mut server = Server {
            control,
            dns_addrs: Vec::new(),
            admin_addr: None,
            rum_addrs: Vec::new(),
            cancel,
            threads: Vec::new(),
            tasks: JoinSet::new(),
            cluster_tasks: JoinSet::new(),
            _watcher: None,
            xdp: None,
        };
        // The overrides and pushed health other replicas set apply before this one
        // answers a query; both are read at once.
        let (follower, pushes) = match &session {
            Some(s) => {
                let (control, cancel) = (server.control.clone(), server.cancel.clone());
                let overrides =
                    cluster::overrides::follow(control.clone(), s.clone(), cancel.clone());
                let pushes = cluster::pushed::follow(control, s.clone(), cancel);
                let (overrides, pushes) = tokio::join!(overrides, pushes);
                (Some(overrides), Some(pushes))
            }
            None => (None, None),
        };
        match presign::spawn(server.control.shared.clone(), server.cancel.clone()) {
            Ok(t) => server.threads.push(t),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the pre-signer; signing on demand only")
            }
        }
        if let Err(e) = server.start_listeners(&listen).await {
            server.shutdown().await;
            return Err(e);
        }
        server.tasks.spawn(key_timing::run(server.control.clone(), server.cancel.clone()));
        server.tasks.spawn(save_events(server.control.clone(), server.cancel.clone()));
        // In a cluster only the leader of the `load` role steps and every replica applies
        // what etcd holds: set before the loop starts, so that no replica steps alone.
        if let Some(s) = &session {
            let cancel = server.cancel.clone();
            let leading =
                cluster::leader::Leadership::start(s.clone(), cluster::load::ROLE, cancel);
            let (loads, shared) = (server.control.load.clone(), server.control.shared.clone());
            let cancel = server.cancel.clone();
            let publisher =
                cluster::load::ClusterLoad::start(s.clone(), leading, loads, shared, cancel);
            server.control.load.set_publisher(publisher);
        }
        // In a cluster only the leader of the `notify` role sends notifications.
        let leadership = session.as_ref().map(|s| {
            let cancel = server.cancel.clone();
            cluster::leader::Leadership::start(s.clone(), notify::ROLE, cancel)
        });
        let snapshots = notify::Snapshots {
            current: server.control.shared.clone(),
            replaced: server.control.served(),
        };
        let (notifier, task) =
            notify::Notifier::start(status_events, snapshots, leadership, server.cancel.clone());
        let _ = server.control.notify.set(notifier);
        server.tasks.spawn(async move {
            let _ = task.await;
        });
        // Idles until some endpoint is flattened.
        let (shared, cancel) = (server.control.shared.clone(), server.cancel.clone());
        server.tasks.spawn(crate::probe::flatten::run(shared, cancel));
        // Idles until some endpoint has a `load:`.
        server.tasks.spawn(load::run::run(server.control.clone(), server.cancel.clone()));
        if let Some(session) = session {
            server.cluster_tasks.spawn(session.clone().run(server.cancel.clone()));
            if let Some(views) = views {
                let (cancel, prober) = (server.cancel.clone(), server.control.prober.clone());
                server.cluster_tasks.spawn(views.clone().write(session.clone(), cancel.clone()));
                server.cluster_tasks.spawn(views.clone().watch(session.clone(), prober, cancel));
                let _ = server.control.health_views.set(views);
            }
            let (control, cancel) = (server.control.clone(), server.cancel.clone());
            if let Some(seen) = watch_from {
                let s = session.clone();
                server.cluster_tasks.spawn(cluster::profiles::watch(
                    control.clone(),
                    s,
                    seen,
                    cancel.clone(),
                ));
            }
            let record = server.node_record(&session);
            server.cluster_tasks.spawn(cluster::nodes::run(control, session, record, cancel));
        }
        if let Some(follower) = follower {
            server.cluster_tasks.spawn(follower.run(server.cancel.clone()));
        }
        if let Some(pushes) = pushes {
            server.cluster_tasks.spawn(pushes.run(server.cancel.clone()));
        }
        server._watcher = match watch::spawn(server.control.clone(), server.cancel.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the configuration; reload with SIGHUP or the API");
                None
            }
        };
        Ok(server)
    }

    async fn start_listeners(&mut self, listen: &Listen) -> Result<(), ServerError> {
        // Made before the DNS listeners, which read its published table on every query.
        if let Some(settings) = self.control.snapshot().rum.clone() {
            let rum = Arc::new(rum::Rum::new(settings));
            let (r, local) = (rum.clone(), self.control.cluster.is_none());
            blocking(move || {
                let saved = r.settings.state_file.as_ref();
                let seed = saved.and_then(|p| rum::persist::load_logged(&r, p));
                // In a cluster the table published is the shared one, followed in etcd.
                if local {
                    // The preferences saved are what the first table starts from.
                    if let Some(seed) = seed {
                        r.install(seed);
                    }
                    r.publish();
                }
            })
            .await;
            let _ = self.control.rum.set(rum);
        }
        let conns = Arc::new(tcp_table(listen.tcp.max_connections, listen.tcp.per_source));
        let mut skipped = None;
        for &addr in &listen.dns {
            match self.listen(addr, listen, &conns) {
                // A host without that address (e.g. no IPv6 loopback in a container) should
                // not stop the other listeners; any other failure (port in use, permission)
                // is fatal.
                Err(ServerError::Bind { addr, source }) if unavailable(&source) => {
                    tracing::warn!(%addr, error = %source, "address not available on this host; not listening on it");
                    skipped = Some(ServerError::Bind { addr, source });
                }
                other => other?,
            }
        }
        if let (true, Some(e)) = (self.dns_addrs.is_empty(), skipped) {
            return Err(e);
        }
        if let Some(config) = &listen.xdp {
            self.start_xdp(config)?;
        }
        if let Some(addr) = listen.admin {
            let certs = match &listen.admin_tls {
                Some(files) => Some(Arc::new(admin::tls::Certs::load(files)?)),
                None => None,
            };
            let l = admin::bind(addr).await.map_err(|source| ServerError::Bind { addr, source })?;
            let actual = l.local_addr().map_err(|source| ServerError::Bind { addr, source })?;
            let scheme = if certs.is_some() { "https" } else { "http" };
            tracing::info!(%actual, scheme = %scheme, "admin API listening");
            if !addr.ip().is_loopback() && listen.admin_tokens.is_empty() {
                // Only with `admin.allow_unauthenticated: true`: the load refuses it otherwise.
                tracing::warn!(%actual, "admin API reachable from other hosts without a token (admin.allow_unauthenticated)");
            }
            self.admin_addr = Some(actual);
            let (control, cancel) = (self.control.clone(), self.cancel.clone());
            self.tasks.spawn(admin::serve(l, control, cancel, listen.admin_limits, certs));
        }
        self.start_rum().await
    }

    /// The real user measurements listeners and their publisher, when `rum:` is set.
    async fn start_rum(&mut self) -> Result<(), ServerError> {
        let Some(rum) = self.control.rum.get().cloned() else { return Ok(()) };
        let settings = rum.settings.clone();
        for &addr in &settings.listen {
            let bind_err = |source| ServerError::Bind { addr, source };
            let l = tokio::net::TcpListener::bind(addr).await.map_err(bind_err)?;
            let actual = l.local_addr().map_err(bind_err)?;
            tracing::info!(%actual, "real user measurements listening");
            self.rum_addrs.push(actual);
            self.tasks.spawn(rum::serve(l, rum.clone(), self.cancel.clone()));
        }
        if let Some(path) = settings.state_file.clone() {
            self.tasks.spawn(rum::persist::save_every(rum.clone(), path, self.cancel.clone()));
        }
        match self.control.cluster.clone() {
            Some(session) => {
                let cancel = self.cancel.clone();
                let leadership =
                    cluster::leader::Leadership::start(session.clone(), "rum", cancel.clone());
                let leading = leadership.leading();
                cluster::rum::spawn(&mut self.cluster_tasks, rum, session, leading, cancel);
            }
            None => {
                self.tasks.spawn(rum::publish_every(rum, self.cancel.clone()));
            }
        }
        Ok(())
    }

    /// Starts the AF_XDP fast path; an interface that takes no XDP program leaves the
    /// sockets serving, with a warning.
    fn start_xdp(&mut self, config: &crate::model::snapshot::XdpListen) -> Result<(), ServerError> {
        let control = self.control.clone();
        let shared = || {
            let shared = xdp::worker::Shared {
                snapshot: control.shared.clone(),
                rum: control.rum.get().cloned(),
                limiter: control.limiter.clone(),
                stats: control.xdp_stats.clone(),
            };
            (shared, control.dnstap.udp())
        };
        match xdp::start(config, shared, &self.cancel)? {
            xdp::Started::Running(running, threads) => {
                tracing::info!(
                    interface = %config.interface,
                    queues = ?running.queues,
                    mode = ?running.mode,
                    copying = ?running.copying,
                    "answering UDP in AF_XDP sockets"
                );
                self.threads.extend(threads);
                self.xdp = Some(running);
            }
            xdp::Started::Fallback(e) => {
                tracing::warn!(interface = %config.interface, error = %e, "cannot attach the XDP program; sockets serve every query");
            }
        }
        Ok(())
    }

    /// Binds TCP first (to learn the port when 0 was asked), then UDP on the same port:
    /// `udp_threads` sockets, one per core by default.
    fn listen(
        &mut self,
        addr: SocketAddr,
        listen: &Listen,
        conns: &Arc<Conns>,
    ) -> Result<(), ServerError> {
        let bind_err = |addr, source| ServerError::Bind { addr, source };
        let cores = || std::thread::available_parallelism().map_or(2, |n| n.get());
        let workers = listen.udp_threads.unwrap_or_else(cores);
        let receive_buffer = listen.udp_receive_buffer.unwrap_or(DEFAULT_UDP_RECEIVE_BUFFER);
        let mut attempt = 0;
        let (tcp, udp) = loop {
            let tcp = tcp::bind(addr).map_err(|e| bind_err(addr, e))?;
            let actual = tcp.local_addr().map_err(|e| bind_err(addr, e))?;
            match udp::bind(actual, workers, receive_buffer) {
                Ok(udp) => break (tcp, udp),
                // Port 0: the kernel's free TCP port may be taken for UDP; try another.
                Err(_) if addr.port() == 0 && attempt < 20 => attempt += 1,
                Err(e) => return Err(bind_err(actual, e)),
            }
        };
        let udp::Bound { sockets: udp, receive_buffer: buffer } = udp;
        let actual = udp::local_addr(&udp[0]).map_err(|e| bind_err(addr, e))?;
        if buffer.capped() {
            tracing::warn!(%actual, asked = buffer.asked, got = buffer.got, "UDP receive buffer capped by net.core.rmem_max: raise it, or run with CAP_NET_ADMIN, to absorb bursts");
        }
        for (i, sock) in udp.into_iter().enumerate() {
            let (shared, cancel) = (self.control.shared.clone(), self.cancel.clone());
            let limiter = self.control.limiter.clone();
            let tap = self.control.dnstap.udp();
            let rum = self.control.rum.get().cloned();
            let t = std::thread::Builder::new()
                .name(format!("udp-{}-{i}", actual.port()))
                .spawn(move || udp::serve(sock, shared, rum, limiter, tap, cancel))
                .map_err(|e| bind_err(addr, e))?;
            self.threads.push(t);
        }
        let (shared, cancel) = (self.control.shared.clone(), self.cancel.clone());
        let log = self.control.dnstap.clone();
        let rum = self.control.rum.get().cloned();
        self.tasks.spawn(tcp::serve(tcp, shared, rum, conns.clone(), listen.tcp, log, cancel));
        tracing::info!(%actual, receive_buffer = buffer.got, "listening (udp, tcp)");
        self.dns_addrs.push(actual);
        Ok(())
    }

    /// What this replica registers in etcd, before the revision and generation it serves.
    fn node_record(&self, session: &cluster::Session) -> cluster::nodes::NodeRecord {
        cluster::nodes::NodeRecord {
            node: session.settings.node.clone(),
            revision: 0,
            generation: 0,
            version: env!("CARGO_PKG_VERSION").to_string(),
            started: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            dns: self.dns_addrs.iter().map(ToString::to_string).collect(),
            admin: self.admin_addr.map(|a| a.to_string()),
        }
    }

    /// The addresses DNS is served on, with real ports.
    pub fn dns_addrs(&self) -> &[SocketAddr] {
        &self.dns_addrs
    }

    /// The admin API's address, with its real port, when it is enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The real user measurements listeners' addresses, with real ports.
    pub fn rum_addrs(&self) -> &[SocketAddr] {
        &self.rum_addrs
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.control.snapshot()
    }

    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// The health prober (endpoint states, probe details).
    pub fn prober(&self) -> &Prober {
        &self.control.prober
    }

    /// The handle every reload trigger goes through.
    pub fn reloader(&self) -> Reloader {
        Reloader::new(self.control.clone())
    }

    /// Loads the configuration again and swaps it in whole; on error the old one stays.
    /// Goes through the `Reloader` like every trigger, and blocks until the reload that
    /// starts after this call is done.
    pub fn reload(&self) -> Result<u64, ConfigErrors> {
        match self.reloader().reload_blocking(Trigger::Request) {
            Ok(generation) => Ok(generation),
            Err(reloader::ReloadError::Config(errors)) => Err(errors),
            Err(e @ reloader::ReloadError::Aborted) => panic!("{e}"),
        }
    }

    /// Stops every listener and probe and waits for them; then the dnstap writer writes
    /// what they logged and closes its stream.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        let cluster = async { while self.cluster_tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(CLUSTER_STOP, cluster).await.is_err() {
            self.cluster_tasks.abort_all();
        }
        while self.tasks.join_next().await.is_some() {}
        self.control.prober.wait().await;
        let control = self.control.clone();
        let _ = tokio::task::spawn_blocking(move || control.save_events()).await;
        let threads = std::mem::take(&mut self.threads);
        let dnstap = self.control.dnstap.clone();
        let _ = tokio::task::spawn_blocking(move || {
            threads.into_iter().for_each(|t| drop(t.join()));
            dnstap.finish();
        })
        .await;
        // The workers are gone: closing the link detaches the program.
        self.xdp = None;
    }
}

/// The DNS TCP connection table, shared by every listener: `configured` connections, fewer
/// when the open-file limit would not leave room for probes, the admin API and reloads.
fn tcp_table(configured: usize, per_source: usize) -> Conns {
    let max = match fdlimit::nofile() {
        Some((soft, _)) => conns::cap_for_fd_limit(configured, soft),
        None => configured,
    };
    if max < configured {
        tracing::warn!(
            configured,
            max,
            "open-file limit too low for listen.tcp_max_connections; capped"
        );
    }
    Conns::new(max, per_source)
}

fn unavailable(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::AddrNotAvailable
        || matches!(e.raw_os_error(), Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL))
}

/// How often events recorded since are written to the state file: status changes can come
/// in bursts, and each write rewrites the whole file.
const EVENT_SAVE_INTERVAL: Duration = Duration::from_secs(1);

/// Writes new events to the state file every `EVENT_SAVE_INTERVAL` until `cancel` fires
/// (shutdown writes the last ones).
async fn save_events(control: Arc<Control>, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(EVENT_SAVE_INTERVAL) => {}
        }
        let c = control.clone();
        let _ = tokio::task::spawn_blocking(move || c.save_events()).await;
    }
}

/// How long shutdown waits for the tasks that talk to etcd (the lease's revocation
/// included) before it drops them.
const CLUSTER_STOP: Duration = Duration::from_millis(1500);

/// How long `serve` waits for listeners and probes to stop after SIGTERM or SIGINT.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(3);

/// `steerdns serve`: runs until SIGTERM or SIGINT; SIGHUP reloads. The handlers are
/// installed before any port is bound, so a SIGHUP sent as soon as the server answers
/// reloads it instead of killing it. Stopping never waits for a reload (nor for the
/// first load): it returns within `SHUTDOWN_LIMIT`, and the caller must not wait for the
/// runtime's blocking threads either (`main` uses `Runtime::shutdown_timeout`).
pub async fn serve(config_path: &Path) -> Result<(), ServerError> {
    let mut signals = Signals::install();
    match fdlimit::raise_nofile() {
        Ok((before, after)) => tracing::info!(before, after, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
    let server = tokio::select! {
        started = Server::start(config_path) => started?,
        () = signals.stopped() => {
            tracing::info!("stopped while loading the configuration");
            return Ok(());
        }
    };
    log_startup(&server.snapshot());
    signals.wait(&server.reloader()).await;
    tracing::info!("shutting down");
    if tokio::time::timeout(SHUTDOWN_LIMIT, server.shutdown()).await.is_err() {
        tracing::warn!(limit = ?SHUTDOWN_LIMIT, "listeners or probes did not stop in time; exiting anyway");
    }
    Ok(())
}

fn log_startup(snap: &Snapshot) {
    let zones: Vec<String> = snap.zones.iter().map(|z| z.origin.to_string()).collect();
    tracing::info!(zones = ?zones, profiles = snap.profiles.len(), endpoints = snap.endpoint_count(), "serving");
    if let Some(db) = &snap.world.db {
        tracing::info!(path = %db.path().display(), info = %db.metadata(), "geo database");
    }
    if let Some(db) = &snap.world.asn {
        let (path, kind, records) = (db.path().display(), db.database_type(), db.record_count());
        tracing::info!(path = %path, database_type = kind, records, "ASN database");
    }
}

struct Signals {
    streams: Option<[tokio::signal::unix::Signal; 3]>,
}

/// A future that never completes: no signal handlers means no signal to wait for.
async fn never() {
    std::future::pending::<()>().await
}

impl Signals {
    fn install() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let kinds = [SignalKind::terminate(), SignalKind::interrupt(), SignalKind::hangup()];
        let streams = match kinds.map(signal) {
            [Ok(t), Ok(i), Ok(h)] => Some([t, i, h]),
            _ => {
                tracing::error!("cannot install signal handlers");
                None
            }
        };
        Signals { streams }
    }

    /// Until SIGTERM or SIGINT (SIGHUPs meanwhile are left for `wait`).
    async fn stopped(&mut self) {
        let Some([term, int, _]) = &mut self.streams else { return never().await };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }

    /// Until SIGTERM or SIGINT, asking `reloader` for a reload at each SIGHUP (without
    /// waiting for it: SIGHUPs during a reload are coalesced into one more).
    async fn wait(mut self, reloader: &Reloader) {
        let Some([term, int, hup]) = &mut self.streams else { return };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = int.recv() => return,
                _ = hup.recv() => reloader.request(Trigger::Signal),
            }
        }
    }
}

/// Runs `f` on the blocking pool and waits for it, passing a panic on.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
