//! An authoritative Knot DNS server (`knotd`) for one zone, on loopback, as a `Daemon`:
//! `Knot::start` writes the zone file and a configuration into a temporary directory and
//! starts it in the foreground; `Knot::replace_zone` writes a new zone file and has it
//! loaded with `knotc zone-reload`. Tests use it as someone else's zone (a CDN's) that
//! steerdns resolves through a resolver.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::daemon::{Daemon, fill_conf, next_daemon_addr};
use super::tools::require_tool;

/// Placeholders: {dir}, {listen_addr}, {listen_port}, {zone} (absolute).
const CONF: &str = r#"server:
    rundir: "{dir}"
    listen: {listen_addr}@{listen_port}
log:
  - target: stderr
    any: info
database:
    storage: "{dir}"
control:
    listen: "{dir}/knot.sock"
template:
  - id: default
    storage: "{dir}"
    # the zone file is the truth: never written back, no journal
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: none
zone:
  - domain: {zone}
    file: "{dir}/zone.db"
"#;

/// A running knotd; killed on drop.
pub struct Knot {
    pub addr: SocketAddr,
    knotc: PathBuf,
    daemon: Daemon,
    zone: String,
}

impl Knot {
    /// Whether knotd and knotc are installed; prints why the caller skips when not.
    pub fn available() -> bool {
        require_tool("knotd", "knot").is_some() && require_tool("knotc", "knot").is_some()
    }

    /// Starts knotd serving `zone` from `text` (a master file). `None` (with a message)
    /// when Knot is not installed.
    pub fn start(zone: &str, text: &str) -> Option<Knot> {
        let bin = require_tool("knotd", "knot")?;
        let knotc = require_tool("knotc", "knot")?;
        let (addr, _) = next_daemon_addr();
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = fill_conf(CONF, dir.path(), addr, addr, zone);
        let conf_path = dir.path().join("knot.conf");
        std::fs::write(&conf_path, conf).expect("write knot.conf");
        std::fs::write(dir.path().join("zone.db"), text).expect("write zone.db");
        let args = [OsStr::new("-c"), conf_path.as_os_str()];
        let daemon = Daemon::spawn("knotd", &bin, &args, dir, addr, &[]);
        Some(Knot { addr, knotc, daemon, zone: zone.to_string() })
    }

    /// Writes `text` as the zone file and has knotd load it (its serial must grow).
    pub fn replace_zone(&self, text: &str) {
        let dir = self.daemon.dir();
        std::fs::write(dir.join("zone.db"), text).expect("write zone.db");
        let out = std::process::Command::new(&self.knotc)
            .arg("-c")
            .arg(dir.join("knot.conf"))
            .args(["-b", "zone-reload", &self.zone])
            .output()
            .expect("knotc runs");
        assert!(out.status.success(), "knotc zone-reload: {out:?}\n{}", self.daemon.log());
    }

    /// The addresses Knot serves for `name`/`qtype`, as `kdig` (Debian package
    /// `knot-dnsutils`) reads them: what a test compares steerdns's flattened answers with.
    /// `None` (with a message) when kdig is not installed.
    pub fn kdig_addrs(&self, name: &str, qtype: &str) -> Option<Vec<std::net::IpAddr>> {
        let kdig = require_tool("kdig", "knot-dnsutils")?;
        let out = std::process::Command::new(kdig)
            .arg(format!("@{}", self.addr.ip()))
            .args(["-p", &self.addr.port().to_string(), "+short", name, qtype])
            .output()
            .expect("kdig runs");
        assert!(out.status.success(), "kdig: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    pub fn log(&self) -> String {
        self.daemon.log()
    }
}
