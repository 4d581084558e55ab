//! What one TCP client may hold: the per-source cap, eviction of the longest-idle
//! connection when the table is full, the idle timeout and the write timeout; all over real
//! sockets, with short limits configured in `listen:`.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, timeout};

/// Starts a server with the default profiles and these extra `listen:` keys.
async fn start(keys: &str) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    let listen = "  dns: [\"127.0.0.1:0\"]\n";
    let yaml = steerdns_yaml().replacen(listen, &format!("{listen}{keys}"), 1);
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    Harness::in_dir(dir).await
}

/// A connection from `from` (any 127/8 address is this host's).
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    timeout(TCP_WAIT, s.connect(to)).await.expect("connect timed out").expect("connect")
}

/// Whether a query on `s` is answered (`false`: the server closed the connection).
async fn answered(s: &mut TcpStream) -> bool {
    let q = Q::new(&fq("www"), T_A).bytes();
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    if s.write_all(&framed).await.is_err() {
        return false;
    }
    tcp_recv(s).await.is_some_and(|r| Reply::new(r).single() == "A 192.0.2.10")
}

/// Waits until the server closes `s` (EOF or reset); panics after `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) {
    let mut buf = [0u8; 512];
    let end = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Err(_) => panic!("still open after {within:?}"),
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_source_cap_leaves_room_for_other_clients() {
    let h = start("  tcp_per_source: 4\n").await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = connect_from("127.0.0.1", h.addr).await;
        assert!(answered(&mut s).await);
        held.push(s);
    }
    let mut fifth = connect_from("127.0.0.1", h.addr).await;
    assert!(!answered(&mut fifth).await, "the fifth connection from 127.0.0.1 is closed");
    let mut other = connect_from("127.0.0.2", h.addr).await;
    assert!(answered(&mut other).await, "another source is served");
    assert!(answered(&mut held[0]).await, "the first four keep being served");
    // A connection closed frees its slot for the same source.
    drop(held.pop());
    let end = Instant::now() + TCP_WAIT;
    loop {
        let mut again = connect_from("127.0.0.1", h.addr).await;
        if answered(&mut again).await {
            break;
        }
        assert!(Instant::now() < end, "the freed slot was never reused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_table_evicts_the_longest_idle_connection() {
    let h = start("  tcp_max_connections: 4\n").await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = connect_from("127.0.0.1", h.addr).await;
        assert!(answered(&mut s).await);
        held.push(s);
        // Distinct activity times (the table keeps milliseconds).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Connection 0 becomes the most recently active; 1 is now the longest idle.
    assert!(answered(&mut held[0]).await);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut newcomer = connect_from("127.0.0.3", h.addr).await;
    assert!(answered(&mut newcomer).await, "the newcomer is served, not refused");
    closed_within(&mut held[1], TCP_WAIT).await;
    for i in [0, 2, 3] {
        assert!(answered(&mut held[i]).await, "connection {i} was not the longest idle");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_idle_timeout() {
    let h = start("  tcp_idle_timeout: 300ms\n").await;
    let mut silent = connect_from("127.0.0.1", h.addr).await;
    let opened = Instant::now();
    closed_within(&mut silent, TCP_WAIT).await;
    assert!(opened.elapsed() >= Duration::from_millis(250), "closed before the idle timeout");
    // A connection that keeps asking stays open past the timeout.
    let mut busy = connect_from("127.0.0.1", h.addr).await;
    for _ in 0..6 {
        assert!(answered(&mut busy).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_dropped() {
    let h = start("  tcp_io_timeout: 200ms\n").await;
    let mut greedy = connect_from("127.0.0.1", h.addr).await;
    // Answers of several KB each, never read: the socket buffers fill, then the server's
    // write waits for the client; the write timeout ends the connection.
    let q = Q::new(&fq("big"), T_TXT).bytes();
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    let batch: Vec<u8> = framed.iter().copied().cycle().take(framed.len() * 100).collect();
    let writer = tokio::spawn(async move {
        // Ends when the server resets the connection (it closed with unread queries).
        let started = Instant::now();
        while greedy.write_all(&batch).await.is_ok() {
            assert!(started.elapsed() < Duration::from_secs(20), "never disconnected");
        }
        started.elapsed()
    });
    let mut other = connect_from("127.0.0.2", h.addr).await;
    assert!(answered(&mut other).await, "others are answered meanwhile");
    let took = timeout(Duration::from_secs(30), writer).await.expect("disconnected").unwrap();
    eprintln!("the reading-less client was dropped after {took:?}");
    assert!(answered(&mut other).await, "others are still answered");
    h.stop().await;
}

/// Connections in the table for `accepts_per_second_at_the_cap`: the client ends of these
/// and the server's share this process's descriptors.
const BENCH_TABLE: usize = 6000;
/// Newcomers timed against the full table, each evicting one.
const BENCH_NEWCOMERS: usize = 3000;
/// Clients connecting at once.
const BENCH_CLIENTS: usize = 4;

/// Not a test: how many connections a full table admits per second (each one evicts the
/// longest idle). Prints the figure; run with
/// `cargo test --release --test tcp_limits accepts_per_second -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test"]
async fn accepts_per_second_at_the_cap() {
    let keys = format!(
        "  tcp_max_connections: {BENCH_TABLE}\n  tcp_per_source: 1000000\n  tcp_idle_timeout: 1h\n"
    );
    let h = start(&keys).await;
    let mut held = Vec::with_capacity(BENCH_TABLE);
    for _ in 0..BENCH_TABLE {
        let mut s = connect_from("127.0.0.1", h.addr).await;
        assert!(answered(&mut s).await, "admitted while the table fills");
        held.push(s);
    }
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..BENCH_CLIENTS {
        let addr = h.addr;
        clients.push(tokio::spawn(async move {
            let from = format!("127.0.1.{}", c + 1);
            let mut kept = Vec::with_capacity(BENCH_NEWCOMERS / BENCH_CLIENTS);
            for _ in 0..BENCH_NEWCOMERS / BENCH_CLIENTS {
                let mut s = connect_from(&from, addr).await;
                assert!(answered(&mut s).await, "a newcomer is served");
                kept.push(s);
            }
            kept
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let took = started.elapsed();
    let rate = BENCH_NEWCOMERS as f64 / took.as_secs_f64();
    eprintln!(
        "{BENCH_NEWCOMERS} connections admitted into a full table of {BENCH_TABLE} in {took:?}: {rate:.0} accepts/s"
    );
    drop(held);
    h.stop().await;
}
