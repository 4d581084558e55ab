//! BIND's `named` as a recursive resolver between a test and a steerdns server, all on
//! loopback: `Named::start` writes a configuration into a temporary directory and starts
//! `named` in the foreground as a `Daemon` (it waits until named answers; dropping the
//! `Named` kills it).
//!
//! named forwards the zone under test to the steerdns server and nothing else: every other
//! name fails without a query leaving the machine. It sends DNS cookies upstream (its
//! default) unless started with `Cookies::Off`. DNSSEC validation is off, as the test zone
//! is unsigned and has no trust anchor.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use super::daemon::{Daemon, fill_conf, free_port};
use super::tools::require_tool;

/// Whether named sends DNS cookies to the steerdns server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cookies {
    Send,
    Off,
}

/// The configuration. Placeholders: {dir} (the temporary directory), {listen_addr},
/// {listen_port}, {auth_addr}, {auth_port}, {zone} (absolute), {send_cookie} (yes or no).
const CONF: &str = r#"options {
    // process: every file in {dir}
    directory "{dir}";
    pid-file "{dir}/named.pid";
    session-keyfile "{dir}/session.key";
    managed-keys-directory "{dir}";
    dump-file "{dir}/cache.db";
    statistics-file "{dir}/named.stats";
    max-cache-size 16m;

    // listen: one loopback address and port, UDP and TCP, IPv4 only
    listen-on port {listen_port} { {listen_addr}; };
    listen-on-v6 { none; };
    allow-query { 127.0.0.0/8; };
    recursion yes;
    allow-recursion { 127.0.0.0/8; };

    // upstream: from 127.0.0.1, the network steerdns rate-limits as one
    query-source address 127.0.0.1;

    // an unsigned test zone: no validation, and no log noise from it
    dnssec-validation no;
    notify no;
    querylog yes;
};

// no rndc control channel (it would need a key and a port)
controls { };

// the server statement decides whether named sends cookies to steerdns
server {auth_addr} {
    send-cookie {send_cookie};
};

zone "{zone}" {
    type forward;
    forward only;
    forwarders { {auth_addr} port {auth_port}; };
};
"#;

/// A running named; killed on drop.
pub struct Named {
    /// Where it answers (UDP and TCP).
    pub addr: SocketAddr,
    daemon: Daemon,
}

impl Named {
    /// Whether `named` is installed; prints why the caller skips when it is not.
    pub fn available() -> bool {
        require_tool("named", "bind9").is_some()
    }

    /// Starts named forwarding `zone` to the authoritative server `auth`. `None` (with a
    /// message) when `named` is not installed; panics with its log when it does not answer
    /// within `DAEMON_READY`.
    pub fn start(auth: SocketAddr, zone: &str, cookies: Cookies) -> Option<Named> {
        let bin = require_tool("named", "bind9")?;
        // named listens only on the addresses of network interfaces: 127.0.0.1, not the
        // rest of 127.0.0.0/8.
        let addr = free_port(Ipv4Addr::LOCALHOST);
        let dir = tempfile::tempdir().expect("tempdir");
        let send_cookie = if cookies == Cookies::Send { "yes" } else { "no" };
        let conf =
            fill_conf(CONF, dir.path(), addr, auth, zone).replace("{send_cookie}", send_cookie);
        let conf_path = dir.path().join("named.conf");
        std::fs::write(&conf_path, conf).expect("write named.conf");
        // -g: foreground, log to stderr; -4: IPv4 only; -n 1: one worker thread (tests run
        // in parallel on few cores). Without -u named keeps the user that started it.
        let conf_arg = conf_path.display().to_string();
        let args = ["-g", "-4", "-n", "1", "-c", &conf_arg];
        let daemon = Daemon::spawn("named", &bin, &args, dir, addr, &[]);
        Some(Named { addr, daemon })
    }

    /// The end of named's log (its stderr).
    pub fn log(&self) -> String {
        self.daemon.log()
    }

    pub fn dir(&self) -> &Path {
        self.daemon.dir()
    }
}
