//! Running out of file descriptors must never move traffic: `steerdns serve` is started
//! as a child process with a low open-file limit, then flooded with TCP connections, while
//! its one monitored endpoint (a real HTTP backend on loopback) stays healthy.

mod common;

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// The child's open-file limit, soft and hard: `serve` cannot raise it, and its DNS TCP
/// table is capped at max(16, (256 − 512) / 2) = 16 connections.
const FD_LIMIT: u64 = 256;
/// Connections of each flood: far more than the child may open.
const FLOOD: usize = 1100;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An HTTP backend that answers 200 to every request.
async fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = conn.read(&mut buf).await;
                let reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK";
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

/// The status of endpoint `a` of profile `www`, from the admin API.
async fn status(admin: SocketAddr) -> String {
    let v = http_get(admin, "/api/v1/profiles/www", None).await.json();
    let eps = v["endpoints"].as_array().cloned().unwrap_or_default();
    let a = eps.iter().find(|e| e["name"] == "a").cloned().unwrap_or_default();
    a["status"].as_str().unwrap_or("").to_string()
}

/// Opens up to `n` connections to `to` and keeps them open.
async fn flood(to: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(to)).await {
            Ok(Ok(s)) => held.push(s),
            _ => break,
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_exhaustion_never_moves_traffic() {
    // The test itself holds two floods of connections.
    if let Some((soft, hard)) = steerdns::server::fdlimit::nofile()
        && soft < 3000
    {
        if hard < 3000 {
            eprintln!("open-file hard limit {hard} < 3000: skipping the descriptor flood test");
            return;
        }
        steerdns::server::fdlimit::raise_nofile().unwrap();
    }
    let http = backend().await;
    let (dns_port, admin_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &[(
            "www.yaml",
            &format!(
                "name: www\nrouting: priority\n\
                 monitor: {{ interval: 1s, timeout: 500ms, tolerated_failures: 0 }}\nendpoints:\n\
                 \x20 - {{ name: a, target: 127.0.0.1, monitor: {{ port: {} }} }}\n\
                 \x20 - {{ name: b, target: 192.0.2.77, always_serve: true }}\n",
                http.port()
            ),
        )],
    );
    let listen = "  dns: [\"127.0.0.1:0\"]\n";
    let yaml = steerdns_yaml().replacen(
        listen,
        &format!("  dns: [\"127.0.0.1:{dns_port}\"]\n  admin: \"127.0.0.1:{admin_port}\"\n"),
        1,
    );
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steerdns"));
    cmd.arg("serve").arg("--config").arg(dir.path().join("steerdns.yaml"));
    cmd.stdout(Stdio::null()).stderr(log);
    // SAFETY: only setrlimit, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: FD_LIMIT, rlim_max: FD_LIMIT };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let _child = Child(cmd.spawn().expect("start steerdns serve"));
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    let dns: SocketAddr = format!("127.0.0.1:{dns_port}").parse().unwrap();
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(dns).await.unwrap();
    let answer = async || {
        let r = udp_exchange(&sock, &Q::new(&fq("www"), T_A).bytes()).await.expect("a UDP answer");
        Reply::new(r).single()
    };
    let log = || std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();

    let end = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(admin).await.is_err() || status(admin).await != "online" {
        assert!(Instant::now() < end, "never online; log:\n{}", log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answer().await, "A 127.0.0.1");

    // DNS TCP: the table's cap keeps descriptors free; the admin API keeps answering.
    let held = flood(dns, FLOOD).await;
    eprintln!("dns flood: {} connections open from the test", held.len());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(status(admin).await, "online", "log:\n{}", log());
    assert_eq!(answer().await, "A 127.0.0.1");
    let mut tcp = TcpStream::connect(dns).await.unwrap();
    tcp_send(&mut tcp, &Q::new(&fq("www"), T_A).bytes()).await;
    let reply = tcp_recv(&mut tcp).await.expect("a newcomer is answered over TCP");
    assert_eq!(Reply::new(reply).single(), "A 127.0.0.1");
    drop((held, tcp));

    // The admin API has no such cap: its flood takes every descriptor, so probes fail
    // with EMFILE for a while. They must be skipped, not counted against the endpoint.
    let held = flood(admin, FLOOD).await;
    eprintln!("admin flood: {} connections open from the test", held.len());
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(answer().await, "A 127.0.0.1", "answers stay on the healthy endpoint");
    drop(held);

    let end = Instant::now() + Duration::from_secs(10);
    let skipped = loop {
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(admin)).await
        {
            let m = scrape(admin, None).await;
            break m.sum("steerdns_probe_skipped_total", &[("reason", "local_resources")]);
        }
        assert!(Instant::now() < end, "the admin API never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("probe runs skipped: {skipped}");
    let text = log();
    assert!(skipped >= 1.0, "no probe run skipped; log:\n{text}");
    assert!(text.contains("probe skipped"), "log:\n{text}");
    let degraded = |l: &&str| l.contains("endpoint status changed") && l.contains("degraded");
    assert!(!text.lines().any(|l| degraded(&l)), "log:\n{text}");
    assert_eq!(status(admin).await, "online");
    assert_eq!(answer().await, "A 127.0.0.1");
}

/// The server process, stopped when the test ends, passed or failed.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
