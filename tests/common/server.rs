//! The server harness: writes the test configuration into a temporary directory and
//! starts a real `Server` on 127.0.0.1 (port chosen by the kernel), or, `Via::Xdp`, behind
//! the AF_XDP fast path in a network namespace of its own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use steerdns::server::Server;
use tokio::net::{TcpSocket, UdpSocket};

use super::fixtures::{
    DEFAULT_PROFILES, LOCATION_KEYS, ZONE_FILE, location_fixture, location_profiles, steerdns_yaml,
    with_admin,
};
use super::http::{Http, http_get};
use super::netns::{SERVER_V4, SERVER_V6, VethPair, client_v4};

/// The way the harness's UDP queries reach the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The server's UDP sockets on 127.0.0.1, from the test's own network namespace.
    Sockets,
    /// The AF_XDP fast path: the server in one namespace of a veth pair with `listen.xdp`
    /// on its end (port 53), the clients in the other. Its sockets listen on another port,
    /// so a UDP query the fast path does not take gets no answer, and TCP goes there.
    /// Needs root: without it, starting says so and gives `None`.
    Xdp,
}

impl Via {
    /// The `n`th (1-based, at most `netns::CLIENT_ADDRESSES`) IPv4 address the clients can
    /// send from; the first is the one `Harness::udp` and `fresh_udp` use. All in one /24.
    pub fn client_ip(self, n: u8) -> IpAddr {
        match self {
            Via::Sockets => Ipv4Addr::new(127, 0, 0, n).into(),
            Via::Xdp => client_v4(n).into(),
        }
    }
}

/// The port the fast path takes in `Via::Xdp`.
pub const XDP_PORT: u16 = 53;

pub struct Harness {
    pub server: Option<Server>,
    /// Where UDP queries go (on `Via::Xdp`, the fast path's address and port).
    pub addr: SocketAddr,
    /// Where TCP connections go: `addr`, or on `Via::Xdp` the server's sockets.
    pub tcp_addr: SocketAddr,
    pub dir: tempfile::TempDir,
    /// The client socket of `Harness::udp`, connected to `addr`.
    pub(super) sock: UdpSocket,
    /// On `Via::Xdp`, the namespaces, removed after the server is dropped.
    pub net: Option<VethPair>,
}

impl Harness {
    /// Starts a server with the default profiles.
    pub async fn start() -> Harness {
        Harness::with_profiles(DEFAULT_PROFILES).await
    }

    /// Starts a server with the default profiles, reached `via`; `None` when that way
    /// cannot be set up here (after saying why).
    pub async fn start_via(via: Via) -> Option<Harness> {
        let dir = tempfile::tempdir().expect("tempdir");
        write_config(dir.path(), DEFAULT_PROFILES);
        Harness::in_dir_via(dir, via).await
    }

    /// Starts a server with the test zone and the given profile files (name, YAML).
    pub async fn with_profiles(profiles: &[(&str, &str)]) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        write_config(dir.path(), profiles);
        Harness::in_dir(dir).await
    }

    /// Starts a server with the test zone, the location data (geo database built from
    /// `tests/fixtures/location/city.csv`, latency table, topology), every profile of
    /// `tests/fixtures/location/profiles/` and the `extra` profile files.
    pub async fn location(extra: &[(&str, &str)]) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut profiles = location_profiles();
        profiles.extend(extra.iter().map(|(n, t)| (n.to_string(), t.to_string())));
        write_location_config(dir.path(), &profiles);
        Harness::in_dir(dir).await
    }

    /// Starts a server on a directory that already holds `steerdns.yaml`.
    pub async fn in_dir(dir: tempfile::TempDir) -> Harness {
        let server = Server::start(&dir.path().join("steerdns.yaml"))
            .await
            .unwrap_or_else(|e| panic!("server did not start: {e}"));
        let addr = server.dns_addrs()[0];
        let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind client");
        sock.connect(addr).await.expect("connect client");
        Harness { server: Some(server), addr, tcp_addr: addr, dir, sock, net: None }
    }

    /// Starts a server on a directory that already holds `steerdns.yaml` listening on
    /// `127.0.0.1:0`, reached `via`. On `Via::Xdp` that listener moves to the server's
    /// addresses in its namespace, next to `listen.xdp` on its interface; an admin API on
    /// 127.0.0.1 is then reachable from the server's namespace (see `admin_get`).
    pub async fn in_dir_via(dir: tempfile::TempDir, via: Via) -> Option<Harness> {
        if via == Via::Sockets {
            return Some(Harness::in_dir(dir).await);
        }
        // One queue each way: the fast path has one socket, and no query can land on a
        // queue without one (the server cannot see this namespace's /sys to count them).
        let net = VethPair::new(1)?;
        let path = dir.path().join("steerdns.yaml");
        let yaml = std::fs::read_to_string(&path).unwrap();
        let listen = "  dns: [\"127.0.0.1:0\"]\n";
        assert!(yaml.contains(listen), "unexpected steerdns.yaml: {yaml}");
        let xdp = format!(
            "  dns: [\"{SERVER_V4}:0\", \"[{SERVER_V6}]:0\"]\n  xdp: {{ interface: {}, queues: [0], \
             addresses: [{SERVER_V4}, \"{SERVER_V6}\"], port: {XDP_PORT} }}\n",
            net.server_if
        );
        std::fs::write(&path, yaml.replacen(listen, &xdp, 1)).unwrap();
        // Everything the server binds or attaches while starting is made on this thread
        // (its UDP and fast path threads are started from it too), so all of it lands in
        // the server's namespace. The test's tasks run on tokio's workers, which stay in
        // the test's own namespace.
        let server = {
            let _in = net.enter_server();
            Server::start(&path).await.unwrap_or_else(|e| panic!("server did not start: {e}"))
        };
        // Falling back to the sockets would pass most cases without the fast path.
        let link = net.in_server(&["ip", "link", "show", "dev", &net.server_if]);
        assert!(link.contains("prog/xdp"), "no XDP program attached: {link}");
        let addr = SocketAddr::new(SERVER_V4.into(), XDP_PORT);
        let tcp_addr = server.dns_addrs()[0];
        assert_eq!(tcp_addr.ip(), IpAddr::from(SERVER_V4));
        let sock = client_udp(Some(&net), Via::Xdp.client_ip(1));
        sock.connect(addr).await.expect("connect client");
        Some(Harness { server: Some(server), addr, tcp_addr, dir, sock, net: Some(net) })
    }

    /// The way queries reach this harness's server.
    pub fn via(&self) -> Via {
        if self.net.is_some() { Via::Xdp } else { Via::Sockets }
    }

    /// A UDP socket on `from` (port 0) where the clients live: on `Via::Xdp`, in the
    /// client's namespace, whose addresses are `netns::client_v4`'s and `client_v6`'s.
    pub fn bind_udp(&self, from: IpAddr) -> UdpSocket {
        client_udp(self.net.as_ref(), from)
    }

    /// A TCP socket of `addr`'s family where the clients live, not yet connected.
    pub fn tcp_socket(&self, addr: SocketAddr) -> TcpSocket {
        let _in = self.net.as_ref().map(VethPair::enter_client);
        let sock = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() };
        sock.expect("a TCP socket")
    }

    /// GET `path` of the admin API (which must be on), from the server's namespace on
    /// `Via::Xdp`.
    pub async fn admin_get(&self, path: &str) -> Http {
        let addr = self.admin();
        // The connection is made in the first poll, on this thread: tokio's test runtime
        // runs the test's own future on the thread that started it, never on a worker.
        let _in = self.net.as_ref().map(VethPair::enter_server);
        http_get(addr, path, None).await
    }

    /// Starts a server with the given profiles and the admin API on 127.0.0.1:0; with
    /// `token`, the API requires it (written to `admin.token`).
    pub async fn with_admin(profiles: &[(&str, &str)], token: Option<&str>) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        write_config(dir.path(), profiles);
        if let Some(t) = token {
            std::fs::write(dir.path().join("admin.token"), format!("{t}\n")).unwrap();
        }
        let yaml = with_admin(&steerdns_yaml(), token.map(|_| "admin.token"));
        std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
        Harness::in_dir(dir).await
    }

    /// Starts a server with the given profiles, the admin API on 127.0.0.1:0 (no token) and
    /// `keys` (top-level YAML, such as a `rate_limit:` block) added to `steerdns.yaml`.
    pub async fn with_admin_and_keys(profiles: &[(&str, &str)], keys: &str) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        write_config(dir.path(), profiles);
        let yaml = with_admin(&steerdns_yaml(), None);
        std::fs::write(dir.path().join("steerdns.yaml"), format!("{yaml}{keys}")).unwrap();
        Harness::in_dir(dir).await
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("server running")
    }

    /// The admin API's address (panics when it is not enabled).
    pub fn admin(&self) -> SocketAddr {
        self.server().admin_addr().expect("admin API enabled")
    }

    /// Path of a profile file in the harness's profiles directory.
    pub fn profile_path(&self, file: &str) -> PathBuf {
        self.dir.path().join("profiles").join(file)
    }
}

/// A UDP socket on `from` (port 0), in the client's namespace of `net` when there is one.
fn client_udp(net: Option<&VethPair>, from: IpAddr) -> UdpSocket {
    let sock = {
        let _in = net.map(VethPair::enter_client);
        std::net::UdpSocket::bind(SocketAddr::new(from, 0)).expect("bind client")
    };
    sock.set_nonblocking(true).unwrap();
    UdpSocket::from_std(sock).expect("a tokio socket")
}

pub fn write_config(dir: &Path, profiles: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::create_dir_all(dir.join("zones")).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), steerdns_yaml()).unwrap();
    std::fs::write(dir.join("zones/extra.zone"), ZONE_FILE).unwrap();
    for (name, text) in profiles {
        std::fs::write(dir.join("profiles").join(name), text).unwrap();
    }
}

/// Writes a configuration with location data into `dir`: the test zone plus
/// `LOCATION_KEYS`, the geo database compiled by `steerdns::geo::build` from the CSV
/// fixture, the latency table fixture, and exactly the given profile files.
pub fn write_location_config(dir: &Path, profiles: &[(String, String)]) {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::create_dir_all(dir.join("zones")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), format!("{}{LOCATION_KEYS}", steerdns_yaml()))
        .unwrap();
    std::fs::write(dir.join("zones/extra.zone"), ZONE_FILE).unwrap();
    steerdns::geo::build(&location_fixture("city.csv"), &dir.join("data/city.mmdb"))
        .unwrap_or_else(|e| panic!("geo build of the fixture CSV failed: {e:?}"));
    std::fs::copy(location_fixture("latency.yaml"), dir.join("data/latency.yaml")).unwrap();
    for (name, text) in profiles {
        std::fs::write(dir.join("profiles").join(name), text).unwrap();
    }
}
