//! A steerdns `Server` run in this process on the test zone (`ZONE_ONLY_SERVER`) with one
//! profile file, for tests of what its prober does: endpoint states read from the prober,
//! waited for with a deadline instead of asserted at a time.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use steerdns::model::health::{HealthView, Status};
use steerdns::probe::EndpointState;
use steerdns::server::Server;
use tokio::net::UdpSocket;
use tokio::time::{Instant, sleep};

use super::config_errors::{ZONE_ONLY_SERVER, config_dir};
use super::dns::{Q, T_A, udp_exchange};
use super::fixtures::fq;
use super::reply::Reply;

/// Longest wait for anything the prober should do within a few intervals.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// A running server and the directory of its configuration.
pub struct Running {
    pub server: Server,
    dir: tempfile::TempDir,
}

impl Running {
    /// Starts a server on the test zone with `profiles` as its one profile file.
    pub async fn start(profiles: &str) -> Running {
        Running::start_with(ZONE_ONLY_SERVER, profiles).await
    }

    /// Starts a server with `server` as `steerdns.yaml` and `profiles` as its one profile
    /// file.
    pub async fn start_with(server: &str, profiles: &str) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let path = config_dir(dir.path(), server, &[("p.yaml", profiles)]);
        let server =
            Server::start(&path).await.unwrap_or_else(|e| panic!("server did not start: {e}"));
        Running { server, dir }
    }

    pub fn dns(&self) -> SocketAddr {
        self.server.dns_addrs()[0]
    }

    /// Replaces the profile file; a reload applies it.
    pub fn rewrite(&self, profiles: &str) {
        std::fs::write(self.dir.path().join("profiles/p.yaml"), profiles).unwrap();
    }

    /// Replaces `steerdns.yaml`; a reload applies it.
    pub fn rewrite_server(&self, server: &str) {
        std::fs::write(self.server_file(), server).unwrap();
    }

    pub fn server_file(&self) -> PathBuf {
        self.dir.path().join("steerdns.yaml")
    }

    /// What the prober says of `endpoint` of `profile` (a name under the test zone).
    pub fn state(&self, profile: &str, endpoint: &str) -> EndpointState {
        let profile = fq(profile);
        self.server
            .prober()
            .endpoint_states()
            .into_iter()
            .find(|s| s.profile == profile && s.endpoint == endpoint)
            .unwrap_or_else(|| panic!("no endpoint {profile}/{endpoint}"))
    }

    /// The status queries see now for a leaf endpoint (from the served health table).
    pub fn served_status(&self, profile: &str, endpoint: &str) -> Status {
        let snap = self.server.snapshot();
        let p = snap.profiles.iter().find(|p| p.name == fq(profile));
        let ep = p.unwrap().endpoints.iter().find(|e| e.name == endpoint).unwrap();
        snap.health.status(ep.health_slot.unwrap())
    }

    /// Waits until `endpoint` of `profile` has been probed and has `want`, then returns
    /// its state.
    pub async fn wait_status(&self, profile: &str, endpoint: &str, want: Status) -> EndpointState {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let s = self.state(profile, endpoint);
            if s.status == want && s.last_probe.is_some() {
                return s;
            }
            assert!(Instant::now() < deadline, "{profile}/{endpoint} never became {want}: {s:#?}");
            sleep(Duration::from_millis(50)).await;
        }
    }

    /// The A answer of `name` (under the test zone) over UDP: the RCODE and the addresses.
    pub async fn query_a(&self, name: &str) -> (u16, Vec<IpAddr>) {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(self.dns()).await.unwrap();
        let raw = udp_exchange(&sock, &Q::new(&fq(name), T_A).bytes()).await;
        let reply = Reply::new(raw.unwrap_or_else(|| panic!("no answer from {}", self.dns())));
        (reply.rcode(), reply.addrs())
    }

    /// Polls the A answer of `profile` until it is exactly `want`.
    pub async fn wait_answer(&self, profile: &str, want: &[&str]) {
        let want: Vec<IpAddr> = want.iter().map(|a| a.parse().unwrap()).collect();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let (_, got) = self.query_a(profile).await;
            if got == want {
                return;
            }
            assert!(Instant::now() < deadline, "{profile}: answer {got:?}, want {want:?}");
            sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn stop(self) {
        self.server.shutdown().await;
        drop(self.dir);
    }
}
