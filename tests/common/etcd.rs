//! A real etcd for the cluster tests: a single member on free loopback ports with a
//! temporary data directory, started from Debian's `etcd-server` binary. `Etcd::start`
//! returns `None` (after printing why) when etcd is not installed; `stop` and `start_again`
//! take it down and bring it back on the same ports and data. `Etcd::start_tls` serves
//! clients over TLS only, asking them for a certificate of `TestPki`'s authority. `Proxy`
//! stands between etcd and a client and can cut it off while etcd stays up.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

use steerdns::model::cluster::{ClusterSettings, EtcdSettings, Quorum};
use steerdns::server::cluster::{self, Session};
use tokio_util::sync::CancellationToken;

use super::daemon::free_port;
use super::tools::require_tool;

/// Longest wait for etcd to report itself healthy.
const ETCD_READY: Duration = Duration::from_secs(20);

pub struct Etcd {
    /// `http://127.0.0.1:PORT` (`https://` with TLS), for `cluster.etcd.endpoints`.
    pub url: String,
    pub client: SocketAddr,
    peer: SocketAddr,
    bin: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// With TLS: how the health probe connects (the test CA, a client certificate).
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Etcd {
    /// A running etcd, or `None` when the `etcd` binary is missing (the caller skips).
    /// With `STEERDNS_REQUIRE_TOOLS=1` (CI sets it) a missing etcd fails the test instead,
    /// so that the cluster tests cannot be skipped there unnoticed.
    pub fn start() -> Option<Etcd> {
        Etcd::start_with(&[])
    }

    /// As `start`, with more command-line flags (`--max-request-bytes=…`).
    pub fn start_with(extra: &[&str]) -> Option<Etcd> {
        Etcd::launch(extra, None)
    }

    /// As `start`, serving clients over TLS with `pki`'s server certificate and accepting
    /// only clients with a certificate of its authority (`--client-cert-auth`).
    pub fn start_tls(pki: &TestPki) -> Option<Etcd> {
        let path = |p: &Path| p.to_str().expect("UTF-8 path").to_string();
        let flags = [
            "--cert-file".to_string(),
            path(&pki.server_cert),
            "--key-file".into(),
            path(&pki.server_key),
            "--trusted-ca-file".into(),
            path(&pki.ca),
            "--client-cert-auth".into(),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        Etcd::launch(&flags, Some(pki.health_client()))
    }

    fn launch(extra: &[&str], tls: Option<Arc<rustls::ClientConfig>>) -> Option<Etcd> {
        let bin = require_tool("etcd", "etcd-server")?;
        let client = free_port(Ipv4Addr::LOCALHOST);
        let peer = free_port(Ipv4Addr::LOCALHOST);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut etcd = Etcd {
            url: format!("{scheme}://{client}"),
            client,
            peer,
            bin,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
            tls,
        };
        etcd.start_again();
        Some(etcd)
    }

    /// Starts the stopped etcd again, on the same ports and data directory.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "etcd is running");
        let (client, peer) = (self.url.clone(), format!("http://{}", self.peer));
        let log = |name: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.path().join(name))
                .expect("etcd log file")
        };
        let child = Command::new(&self.bin)
            .args(["--name", "test", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(["--log-level", "warn", "--logger", "zap"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log("stdout.txt"))
            .stderr(log("stderr.txt"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        self.child = Some(child);
        self.wait_healthy();
    }

    /// Stops etcd (SIGKILL: nothing is flushed that a real crash would keep).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes etcd (SIGSTOP): connections stay open and nothing answers, as behind a
    /// network partition. `resume` thaws it.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        let child = self.child.as_ref().expect("etcd is running");
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "cannot signal etcd");
    }

    fn wait_healthy(&mut self) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().expect("try_wait"))
            {
                panic!("etcd exited ({status}) before it was healthy:\n{}", self.log());
            }
            if self.healthy() {
                return;
            }
            if started.elapsed() > ETCD_READY {
                panic!("etcd was not healthy within {ETCD_READY:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET /health` says `"health":"true"`.
    fn healthy(&self) -> bool {
        let Ok(mut s) = TcpStream::connect_timeout(&self.client, Duration::from_millis(200)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let req = format!("GET /health HTTP/1.0\r\nHost: {}\r\n\r\n", self.client);
        let mut reply = String::new();
        match &self.tls {
            None => {
                s.write_all(req.as_bytes()).is_ok()
                    && s.read_to_string(&mut reply).is_ok()
                    && reply.contains("\"health\":\"true\"")
            }
            Some(config) => {
                let name = ServerName::IpAddress(self.client.ip().into());
                let mut conn = rustls::ClientConnection::new(config.clone(), name).expect("TLS");
                let mut tls = rustls::Stream::new(&mut conn, &mut s);
                // etcd may close without a TLS close_notify: what was read counts.
                let _ = tls.write_all(req.as_bytes()).and_then(|_| tls.read_to_string(&mut reply));
                reply.contains("\"health\":\"true\"")
            }
        }
    }

    /// The end of etcd's output, for failure messages.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("stderr.txt")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// A certificate authority with a server certificate for 127.0.0.1 and a client
/// certificate, and a second, unrelated authority: PEM files in a temporary directory, for
/// `Etcd::start_tls` and `cluster.etcd.tls`.
pub struct TestPki {
    pub dir: tempfile::TempDir,
    /// The authority that signed the server and client certificates.
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// An authority that signed neither.
    pub other_ca: PathBuf,
    ca_der: CertificateDer<'static>,
    client_der: CertificateDer<'static>,
    client_key_der: Vec<u8>,
}

impl TestPki {
    pub fn new() -> TestPki {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, pem: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).expect("write PEM");
            path
        };
        let authority = |name: &str| {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.distinguished_name.push(rcgen::DnType::CommonName, name);
            let key = rcgen::KeyPair::generate().unwrap();
            rcgen::CertifiedIssuer::self_signed(params, key).unwrap()
        };
        let ca = authority("steerdns test CA");
        let other = authority("another CA");
        let leaf = |names: Vec<String>, cn: &str, usage| {
            let mut params = rcgen::CertificateParams::new(names).unwrap();
            params.distinguished_name.push(rcgen::DnType::CommonName, cn);
            params.extended_key_usages = vec![usage];
            let key = rcgen::KeyPair::generate().unwrap();
            (params.signed_by(&key, &ca).unwrap(), key)
        };
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let (server, server_key) = leaf(names, "etcd", rcgen::ExtendedKeyUsagePurpose::ServerAuth);
        let (client, client_key) =
            leaf(vec![], "steerdns-client", rcgen::ExtendedKeyUsagePurpose::ClientAuth);
        TestPki {
            ca: write("ca.pem", ca.pem()),
            server_cert: write("server.pem", server.pem()),
            server_key: write("server-key.pem", server_key.serialize_pem()),
            client_cert: write("client.pem", client.pem()),
            client_key: write("client-key.pem", client_key.serialize_pem()),
            other_ca: write("other-ca.pem", other.pem()),
            ca_der: ca.der().clone(),
            client_der: client.der().clone(),
            client_key_der: client_key.serialize_der(),
            dir,
        }
    }

    /// A rustls client trusting the authority and showing the client certificate.
    fn health_client(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.client_key_der.clone()));
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![self.client_der.clone()], key)
            .unwrap();
        Arc::new(config)
    }
}

/// A TCP proxy in front of etcd that can cut every connection and refuse new ones: etcd
/// stays up (and can be changed and compacted) while a replica cannot reach it.
pub struct Proxy {
    pub url: String,
    open: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (open, rx) = tokio::sync::watch::channel(true);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !*rx.borrow() {
                    continue;
                }
                let mut rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = rx.wait_for(|open| !open) => {}
                    }
                });
            }
        });
        Proxy { url, open }
    }

    pub fn cut(&self) {
        self.open.send_replace(false);
    }

    pub fn restore(&self) {
        self.open.send_replace(true);
    }
}

/// Settings of a replica `node` reaching etcd at `url` under `prefix`: no TLS, no login, a
/// majority quorum, leases of `lease`, profiles from files.
pub fn cluster_settings(node: &str, url: &str, prefix: &str, lease: Duration) -> ClusterSettings {
    ClusterSettings {
        node: node.into(),
        etcd: EtcdSettings {
            endpoints: vec![url.to_string()],
            prefix: prefix.into(),
            tls: None,
            auth: None,
        },
        quorum: Quorum::Majority,
        lease_ttl: lease,
        profiles_from_etcd: false,
        cache_file: PathBuf::new(),
    }
}

/// A session of `settings`, connected but not running.
pub async fn connect(settings: ClusterSettings) -> Arc<Session> {
    let client = cluster::etcd::client(&settings.etcd).await.unwrap();
    Session::new(Arc::new(settings), client)
}

/// A running session of replica `node` (as `cluster_settings`) through a `Proxy` of its
/// own, so that a test can cut this replica off alone; it runs until `stop`.
pub async fn proxied_session(
    etcd: &Etcd,
    node: &str,
    prefix: &str,
    lease: Duration,
    stop: &CancellationToken,
) -> (Proxy, Arc<Session>) {
    let proxy = Proxy::start(etcd.client).await;
    let session = connect(cluster_settings(node, &proxy.url, prefix, lease)).await;
    tokio::spawn(session.clone().run(stop.clone()));
    (proxy, session)
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}
