//! The server harness: writes the test configuration into a temporary directory and
//! starts a real `Server` on 127.0.0.1 (port chosen by the kernel).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use steerdns::server::Server;
use tokio::net::UdpSocket;

use super::fixtures::{
    DEFAULT_PROFILES, LOCATION_KEYS, ZONE_FILE, location_fixture, location_profiles, steerdns_yaml,
    with_admin,
};

pub struct Harness {
    pub server: Option<Server>,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    /// The client socket of `Harness::udp`, connected to `addr`.
    pub(super) sock: UdpSocket,
}

impl Harness {
    /// Starts a server with the default profiles.
    pub async fn start() -> Harness {
        Harness::with_profiles(DEFAULT_PROFILES).await
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
        Harness { server: Some(server), addr, dir, sock }
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
