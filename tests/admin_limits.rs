//! The admin API's exposure and limits over real sockets: idle and slow connections are
//! closed after the header-read timeout, connections beyond the cap are closed at once, an
//! oversized body is 413, and an admin API reachable from other hosts needs a token (or
//! `admin.allow_unauthenticated: true`) for `check` and `serve` to accept the configuration.
//! With `admin.tls` a stalled handshake is bounded the same way.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use steerdns::server::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

/// Starts a server with the admin API on 127.0.0.1 and these `admin:` keys.
async fn start(admin_keys: &str) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    let yaml = format!("{}admin:\n{admin_keys}", with_admin(&steerdns_yaml(), None));
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    Harness::in_dir(dir).await
}

/// Waits until the server closes `s` (end of stream or reset); how long that took.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match timeout(limit.saturating_sub(t.elapsed()), s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(t.elapsed()),
            // A response (to a complete request): keep reading until the close.
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_are_closed_after_the_header_timeout() {
    let h = start("  header_read_timeout: 1s\n  max_connections: 1000\n").await;
    let addr = h.admin();
    let opened = Instant::now();
    let mut conns = Vec::new();
    for i in 0..300 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // Every third sends part of a head and stops; the rest never send anything.
        if i % 3 == 0 {
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        }
        conns.push(s);
    }
    // One that makes a keep-alive request, then idles.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    conns.push(kept);

    for (i, s) in conns.iter_mut().enumerate() {
        let took = closed_within(s, Duration::from_secs(10)).await;
        assert!(took.is_some(), "connection {i} still open after 10s");
    }
    assert!(opened.elapsed() < Duration::from_secs(10), "closing took {:?}", opened.elapsed());
    // Closed by the timeout, not at once: the first ones had their full second.
    assert!(opened.elapsed() >= Duration::from_millis(900), "closed after {:?}", opened.elapsed());
    // The API still answers.
    assert_eq!(http(addr, "GET", "/healthz", &[]).await.status, 200);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_closed_at_once() {
    let h = start("  header_read_timeout: 5s\n  max_connections: 4\n").await;
    let addr = h.admin();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // Accepted in order, so these come after the four that hold every slot.
    for _ in 0..3 {
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let took = closed_within(&mut extra, Duration::from_secs(2)).await;
        assert!(took.is_some(), "a connection beyond the cap was kept open");
    }
    // The held ones are served.
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    held[0].read_to_end(&mut reply).await.unwrap();
    assert!(reply.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&reply));

    // Closing them frees their slots.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply).await;
        if reply.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "slots were not released");
        sleep(Duration::from_millis(50)).await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_413() {
    let h = start("  max_connections: 8\n").await;
    let addr = h.admin();
    for (len, want) in [(100_000, 413), (4097, 413), (16, 200)] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /api/v1/reload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        // The head alone is enough for the limit; a small body is sent whole.
        if len <= 4096 {
            s.write_all(&vec![b'x'; len]).await.unwrap();
        }
        let mut reply = Vec::new();
        let _ = timeout(Duration::from_secs(10), s.read_to_end(&mut reply)).await;
        let text = String::from_utf8_lossy(&reply);
        assert!(text.starts_with(&format!("HTTP/1.1 {want}")), "body of {len}: {text}");
    }
    h.stop().await;
}

/// A configuration in `dir` with the admin API on `admin` and these `admin:` keys; the
/// path of `steerdns.yaml` and the line and column of the admin address.
fn exposed_config(dir: &Path, admin: &str, admin_keys: &str) -> (std::path::PathBuf, usize, usize) {
    write_config(dir, DEFAULT_PROFILES);
    let yaml = with_admin(&steerdns_yaml(), None).replace("\"127.0.0.1:0\"", admin);
    let yaml = if admin_keys.is_empty() { yaml } else { format!("{yaml}admin:\n{admin_keys}") };
    let (line, col) = yaml
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.strip_prefix("  admin: ").map(|_| (i + 1, "  admin: ".len() + 1)))
        .unwrap();
    let path = dir.join("steerdns.yaml");
    std::fs::write(&path, yaml).unwrap();
    (path, line, col)
}

fn check(path: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_steerdns")).args(["check", "-c"]).arg(path).output();
    let out = out.unwrap();
    (out.status.code().unwrap(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exposed_admin_api_needs_a_token_or_an_explicit_opt_out() {
    for admin in ["\"0.0.0.0:0\"", "\"[::]:0\""] {
        let dir = tempfile::tempdir().unwrap();
        let (path, line, col) = exposed_config(dir.path(), admin, "");
        let (code, out) = check(&path);
        assert_eq!(code, 1, "{admin}: {out}");
        let addr = admin.trim_matches('"');
        let want = format!(
            "{}:{line}:{col}: the admin API on {addr} is reachable from other hosts without a \
             token: set admin.token_file, listen on a loopback address, or set \
             admin.allow_unauthenticated: true",
            path.display()
        );
        assert_eq!(out.trim_end(), want, "{admin}");
        // `serve` refuses it the same way.
        let err = Server::start(&path).await.err().expect("serve refuses").to_string();
        assert!(err.contains(&want), "{err}");
    }

    for keys in ["  allow_unauthenticated: true\n", "  token_file: admin.token\n"] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("admin.token"), "s3cret\n").unwrap();
        let (path, _, _) = exposed_config(dir.path(), "\"0.0.0.0:0\"", keys);
        let (code, out) = check(&path);
        assert_eq!((code, out.starts_with("ok: ")), (0, true), "{keys}: {out}");
    }

    // `allow_unauthenticated: false` is the same as leaving it out.
    let dir = tempfile::tempdir().unwrap();
    let (path, _, _) =
        exposed_config(dir.path(), "\"0.0.0.0:0\"", "  allow_unauthenticated: false\n");
    assert_eq!(check(&path).0, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_limit_keys_are_checked() {
    let cases = [
        ("  max_connections: 0\n", "admin.max_connections must be between 1 and 65536, got 0"),
        ("  header_read_timeout: 0s\n", "admin.header_read_timeout must be above 0"),
        ("  header_read_timeout: 10\n", "admin.header_read_timeout: invalid duration \"10\""),
    ];
    for (keys, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (path, _, _) = exposed_config(dir.path(), "\"127.0.0.1:0\"", keys);
        let (code, out) = check(&path);
        assert_eq!(code, 1, "{keys}: {out}");
        assert!(out.contains(want), "{keys}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_a_stalled_handshake_is_closed_and_holds_a_slot_until_then() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    let pair = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    std::fs::write(dir.path().join("admin.pem"), pair.cert.pem()).unwrap();
    std::fs::write(dir.path().join("admin.key"), pair.signing_key.serialize_pem()).unwrap();
    let keys = "  header_read_timeout: 1s\n  max_connections: 2\n  \
                tls: { cert: admin.pem, key: admin.key }\n";
    let yaml = format!("{}admin:\n{keys}", with_admin(&steerdns_yaml(), None));
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    let h = Harness::in_dir(dir).await;
    let addr = h.admin();
    // Two connections that never send a ClientHello take both slots...
    let mut stalled =
        [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
    sleep(Duration::from_millis(200)).await;
    // ...so a third is closed at once, before any handshake.
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut third, Duration::from_secs(5)).await.is_some());
    // The stalled ones are closed by the timeout, and their slots come back.
    for s in &mut stalled {
        assert!(closed_within(s, Duration::from_secs(10)).await.is_some(), "still open after 10s");
    }
    let mut hello = None;
    for _ in 0..50 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // Any bytes that are not TLS: a server with a free slot answers with an alert
        // (or closes after reading them); one without closes before reading.
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        if let Ok(Ok(n)) = timeout(Duration::from_secs(5), s.read(&mut buf)).await
            && n > 0
        {
            hello = Some(buf[0]);
            break;
        }
        sleep(Duration::from_millis(100)).await;
    }
    // 0x15: a TLS alert record, the server's answer to bytes that are no ClientHello.
    assert_eq!(hello, Some(0x15), "no TLS answer once the slots were free");
    h.stop().await;
}
