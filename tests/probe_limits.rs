//! Probe memory stays bounded whatever a backend sends: real `Server` probes against
//! loopback backends that never stop sending (interim responses, a header, a body). Each
//! probe fails with the limit it hit, and the process's peak memory does not grow with what
//! the backends sent.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::Running;
use steerdns::model::health::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::{Instant, sleep};

/// A backend that reads the request, writes `head` once, then `repeat` until the probe
/// hangs up. Returns its address and the bytes it has sent so far.
async fn endless(head: &'static str, repeat: &'static str) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.6:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let total = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let total = total.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let block = repeat.repeat(64 * 1024 / repeat.len());
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                while conn.write_all(block.as_bytes()).await.is_ok() {
                    total.fetch_add(block.len() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    (addr, sent)
}

/// A value of this process's /proc status, in KiB.
fn proc_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_responses_fail_the_probe_with_bounded_memory() {
    let interim = endless("", "HTTP/1.1 100 Continue\r\n\r\n").await;
    let header = endless("HTTP/1.1 200 OK\r\nX-Endless: ", "a").await;
    let body = endless("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", "no match here ").await;
    // (endpoint, backend, extra monitor keys, expected reason)
    let cases = [
        ("interim", &interim, "", "more than 8 interim responses"),
        ("header", &header, "", "response head larger than 16384 bytes"),
        ("body", &body, ", body_contains: OK", "body does not contain \"OK\""),
    ];
    let mut profile = String::from(
        "name: www\nrouting: priority\n\
         monitor: { interval: 1s, timeout: 900ms, tolerated_failures: 0 }\nendpoints:\n",
    );
    for (name, (addr, _), extra, _) in &cases {
        profile += &format!(
            "  - {{ name: {name}, target: 127.0.0.6, monitor: {{ port: {}{extra} }} }}\n",
            addr.port()
        );
    }
    let hwm_before = proc_kib("VmHWM:");
    let running = Running::start(&profile).await;
    let server = &running.server;

    // Every endpoint degrades with its limit as the reason, and keeps failing so for a few
    // runs (each a fresh connection answered without end).
    let deadline = Instant::now() + Duration::from_secs(20);
    let runs_before = server.prober().stats().runs;
    loop {
        let states = server.prober().endpoint_states();
        let done = cases.iter().all(|(name, _, _, reason)| {
            let s = states.iter().find(|s| s.endpoint == *name).unwrap();
            s.status == Status::Degraded
                && s.last_probe.as_ref().and_then(|p| p.reason.as_deref()) == Some(*reason)
        });
        if done && server.prober().stats().runs >= runs_before + 9 {
            break;
        }
        assert!(Instant::now() < deadline, "not all degraded with their reason: {states:#?}");
        sleep(Duration::from_millis(100)).await;
    }
    let hwm_after = proc_kib("VmHWM:");
    let sent: u64 = cases.iter().map(|(_, (_, s), _, _)| s.load(Ordering::Relaxed)).sum();
    running.stop().await;

    // Each probe reads at most a head, a few interim heads or the body limit: a few hundred
    // KiB for all, however much the backends wrote (they stop when the probe hangs up).
    let grown_mib = hwm_after.saturating_sub(hwm_before) / 1024;
    assert!(grown_mib < 64, "peak memory grew by {grown_mib} MiB (backends sent {sent} bytes)");
}
