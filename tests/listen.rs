//! Listener addresses: IPv4 and IPv6 listeners serve, an address this host does not have is
//! skipped with a warning when another listener is up, and is an error when it is the only one;
//! `listen.udp_threads` sets the UDP sockets (and threads) per address, and
//! `listen.udp_receive_buffer` the size of each one's receive buffer.

mod common;

use std::path::Path;

use common::daemon::free_port;
use common::tools::{require_tool, tools_required};
use steerdns::server::{Server, ServerError};

fn config(dir: &Path, listen: &str) -> std::path::PathBuf {
    config_with(dir, listen, "")
}

/// `more` is further `listen:` keys, each line indented by two spaces.
fn config_with(dir: &Path, listen: &str, more: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(
        dir.join("steerdns.yaml"),
        format!(
            "listen:\n  dns: [{listen}]\n{more}zones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: {{ rname: h.example.test. }}\n"
        ),
    )
    .unwrap();
    dir.join("steerdns.yaml")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv4_and_ipv6_listeners_and_unavailable_addresses() {
    let dir = tempfile::tempdir().unwrap();
    // 192.0.2.1 (TEST-NET-1) is not an address of this host.
    let path = config(dir.path(), "\"127.0.0.1:0\", \"[::1]:0\", \"192.0.2.1:0\"");
    let server = Server::start(&path).await.expect("the unavailable address is skipped");
    let families: Vec<bool> = server.dns_addrs().iter().map(|a| a.is_ipv6()).collect();
    assert!(families.contains(&false), "{:?}", server.dns_addrs());
    // IPv6 loopback may be missing in some containers; when present it serves.
    for addr in server.dns_addrs() {
        let sock =
            std::net::UdpSocket::bind(if addr.is_ipv6() { "[::1]:0" } else { "127.0.0.1:0" })
                .unwrap();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        // A bare SOA query for the apex.
        let mut q = vec![0xab, 0xcd, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        q.extend_from_slice(b"\x02tm\x07example\x04test\x00\x00\x06\x00\x01");
        sock.send_to(&q, addr).unwrap();
        let mut buf = [0u8; 512];
        let (n, _) = sock.recv_from(&mut buf).expect("an answer");
        assert!(n > 12 && buf[0..2] == [0xab, 0xcd] && buf[3] & 0x0f == 0, "{addr}");
    }
    server.shutdown().await;

    let only = config(dir.path(), "\"192.0.2.1:0\"");
    match Server::start(&only).await {
        Err(ServerError::Bind { addr, .. }) => assert_eq!(addr.to_string(), "192.0.2.1:0"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(s) => {
            s.shutdown().await;
            panic!("a server with no usable listener must not start");
        }
    }
}

/// Names of this process's threads (Linux: /proc/self/task/*/comm).
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_threads_sets_the_sockets_and_threads_per_address_and_is_at_least_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_with(dir.path(), "\"127.0.0.1:0\"", "  udp_threads: 3\n");
    let server = Server::start(&path).await.unwrap();
    let port = server.dns_addrs()[0].port();
    let prefix = format!("udp-{port}-");
    let want = ["0", "1", "2"].map(|i| format!("{prefix}{i}"));
    // A spawned thread names itself once it runs, which may be just after `start` returns.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let ours = loop {
        let mut ours: Vec<String> =
            thread_names().into_iter().filter(|n| n.starts_with(&prefix)).collect();
        ours.sort();
        if ours == want || std::time::Instant::now() > deadline {
            break ours;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(ours, want);
    server.shutdown().await;

    let zero = config_with(dir.path(), "\"127.0.0.1:0\"", "  udp_threads: 0\n");
    let errors = steerdns::config::load(&zero, None).unwrap_err().to_string();
    assert!(
        errors.contains("steerdns.yaml:3:16: listen.udp_threads must be between 1 and 1024, got 0"),
        "{errors}"
    );
}

/// The receive buffers of the UDP sockets bound to `port`, as `ss` (iproute2) reads them
/// from the kernel: `rb`, twice the size asked for (Linux doubles it for bookkeeping).
fn receive_buffers(ss: &Path, port: u16) -> Vec<u64> {
    let out = std::process::Command::new(ss)
        .args(["-H", "-u", "-a", "-n", "-m"])
        .arg(format!("sport = :{port}"))
        .output()
        .expect("run ss");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(",rb")
        .skip(1)
        .map(|t| t.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap())
        .collect()
}

fn rmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap()
}

/// Twice `net.core.rmem_max` (at least 1 MiB), so that only SO_RCVBUFFORCE can give it;
/// `None` when that is past the largest size the configuration takes.
fn past_rmem_max() -> Option<u64> {
    Some((2 * rmem_max()).max(1 << 20)).filter(|&b| b <= 256 << 20)
}

/// What a receive buffer test needs: `ss`, a size past rmem_max, and root (CAP_NET_ADMIN,
/// as in CI); `None`, after saying why, when one is missing.
fn buffer_test() -> Option<(std::path::PathBuf, u64)> {
    let ss = require_tool("ss", "iproute2")?;
    let Some(asked) = past_rmem_max() else {
        eprintln!("skipping: net.core.rmem_max is past the largest receive buffer");
        return None;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(!tools_required(), "a receive buffer past rmem_max needs root: CI runs as root");
        eprintln!("skipping: setting a receive buffer past net.core.rmem_max needs root");
        return None;
    }
    Some((ss, asked))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_receive_buffer_is_set_past_rmem_max_with_cap_net_admin() {
    let Some((ss, asked)) = buffer_test() else { return };
    let dir = tempfile::tempdir().unwrap();
    let more = format!("  udp_threads: 2\n  udp_receive_buffer: {asked}\n");
    let server = Server::start(&config_with(dir.path(), "\"127.0.0.1:0\"", &more)).await.unwrap();
    let port = server.dns_addrs()[0].port();
    assert_eq!(receive_buffers(&ss, port), [2 * asked; 2], "rmem_max {}", rmem_max());
    server.shutdown().await;

    // Without the key: 4 MiB, whatever rmem_max is.
    let path = config_with(dir.path(), "\"127.0.0.1:0\"", "  udp_threads: 1\n");
    let server = Server::start(&path).await.unwrap();
    assert_eq!(receive_buffers(&ss, server.dns_addrs()[0].port()), [2 * (4 << 20)]);
    server.shutdown().await;

    let small = config_with(dir.path(), "\"127.0.0.1:0\"", "  udp_receive_buffer: 1KiB\n");
    let errors = steerdns::config::load(&small, None).unwrap_err().to_string();
    assert!(
        errors.contains(
            "steerdns.yaml:3:23: listen.udp_receive_buffer must be between 64KiB and 256MiB, got 1024 bytes"
        ),
        "{errors}"
    );
}

/// Without CAP_NET_ADMIN (dropped from the bounding set with util-linux's `setpriv`) the
/// kernel caps the buffer at rmem_max, and the server says so.
#[test]
fn udp_receive_buffer_capped_by_rmem_max_without_cap_net_admin_is_a_warning() {
    let Some(setpriv) = require_tool("setpriv", "util-linux") else { return };
    let Some((ss, asked)) = buffer_test() else { return };
    let dir = tempfile::tempdir().unwrap();
    let addr = free_port(std::net::Ipv4Addr::LOCALHOST);
    let more = format!("  udp_threads: 1\n  udp_receive_buffer: {asked}\n");
    let path = config_with(dir.path(), &format!("\"{addr}\""), &more);
    let log = dir.path().join("stderr.txt");
    let mut child = std::process::Command::new(setpriv)
        .args(["--bounding-set=-net_admin", "--"])
        .arg(env!("CARGO_BIN_EXE_steerdns"))
        .args(["serve", "-c"])
        .arg(&path)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("listening (udp, tcp)") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let buffers = receive_buffers(&ss, addr.port());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(buffers, [2 * rmem_max()], "{text}");
    assert!(text.contains("UDP receive buffer capped by net.core.rmem_max"), "{text}");
}
