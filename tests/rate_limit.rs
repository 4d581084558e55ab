//! Response rate limiting over real UDP: past the rate, a client network's answers are
//! dropped or, every `slip`-th, sent truncated; exempt networks, queries with a valid
//! server cookie and TCP are never limited; the counts show in the limiter's metrics.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use tokio::net::UdpSocket;

const RATE: usize = 5;
const SENT: usize = 40;

async fn limited_server() -> Harness {
    limited_server_with(&format!(
        "rate_limit:\n  rate: {RATE}\n  slip: 2\n  exempt: [\"127.0.0.2/32\", \"::1/128\"]\n"
    ))
    .await
}

async fn limited_server_with(block: &str) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), DEFAULT_PROFILES);
    let path = dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{yaml}{block}")).unwrap();
    Harness::in_dir(dir).await
}

/// What became of `SENT` queries sent at once from `from`: (answered, slipped, missing).
async fn burst(server: SocketAddr, from: &str, query: impl Fn(u16) -> Vec<u8>) -> [usize; 3] {
    let sock = UdpSocket::bind(format!("{from}:0")).await.unwrap();
    for id in 0..SENT as u16 {
        sock.send_to(&query(id), server).await.unwrap();
    }
    let mut seen: HashMap<u16, bool> = HashMap::new();
    let mut buf = [0u8; 2048];
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(700), sock.recv(&mut buf)).await
    {
        let reply = Reply::new(buf[..n].to_vec());
        // A slipped answer is truncated, or BADCOOKIE when the query had a client cookie.
        let slipped = (reply.tc() || reply.rcode() == BADCOOKIE) && reply.msg.answers.is_empty();
        seen.insert(u16::from_be_bytes([buf[0], buf[1]]), slipped);
    }
    let truncated = seen.values().filter(|tc| **tc).count();
    [seen.len() - truncated, truncated, SENT - seen.len()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_past_the_rate_are_dropped_or_slip_and_proven_clients_pass() {
    let h = limited_server().await;
    let plain = |id: u16| Q::new(&fq("www"), T_A).id(id).bytes();
    let [answered, truncated, missing] = burst(h.addr, "127.0.0.1", plain).await;
    // Within one second: RATE answered; the rest half dropped, half slipped. A second
    // boundary during the burst allows one more second's worth.
    assert!((RATE..=2 * RATE).contains(&answered), "answered {answered}");
    assert!(truncated >= (SENT - 2 * RATE) / 2 - 1, "truncated {truncated}");
    assert!(missing >= (SENT - 2 * RATE) / 2 - 1, "missing {missing}");
    let limiter = &h.server().control().limiter;
    let counted = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed) as usize;
    assert_eq!((counted(&limiter.slipped), counted(&limiter.dropped)), (truncated, missing));

    // An exempt network is never limited.
    assert_eq!(burst(h.addr, "127.0.0.2", plain).await, [SENT, 0, 0], "exempt 127.0.0.2");

    // TCP is never limited: the client's address is proven.
    for _ in 0..2 * RATE {
        let r = h.tcp(&Q::new(&fq("www"), T_A)).await;
        assert_eq!((r.rcode(), r.msg.answers.len()), (NOERROR, 1), "{r:#?}");
    }

    // A query with a server cookie we made for its address is never limited. The cookie is
    // fetched from 127.0.0.3 in a new second, when the /24's count starts over.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let sock = UdpSocket::bind("127.0.0.3:0").await.unwrap();
    sock.connect(h.addr).await.unwrap();
    let first = Q::new(&fq("www"), T_A).edns().option(10, &[7; 8]).bytes();
    let r = Reply::new(udp_exchange(&sock, &first).await.expect("an answer with a cookie"));
    let wire = Wire::parse(&r.raw).unwrap();
    let cookie = wire.opt_options().into_iter().find(|(c, _)| *c == 10).expect("a cookie").1;
    let with_cookie = |id: u16| Q::new(&fq("www"), T_A).id(id).edns().option(10, &cookie).bytes();
    assert_eq!(burst(h.addr, "127.0.0.3", with_cookie).await, [SENT, 0, 0], "valid cookie");
    // A cookie made for another address proves nothing.
    let [answered, slipped, _] = burst(h.addr, "127.0.0.4", with_cookie).await;
    assert!(answered <= 2 * RATE, "a cookie of another address: {answered} answered");
    assert!(slipped > 0, "and its limited answers slip as BADCOOKIE");
    h.stop().await;
}

/// Past the rate, a query with a client cookie slips as BADCOOKIE with a fresh server
/// cookie rather than as a truncated reply: a resolver that retries with it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_query_with_a_client_cookie_gets_badcookie_and_its_retry_passes() {
    let h = limited_server_with("rate_limit:\n  rate: 1\n  burst: 1\n  slip: 1\n").await;
    let sock = UdpSocket::bind("127.0.0.5:0").await.unwrap();
    sock.connect(h.addr).await.unwrap();
    let client_only = Q::new(&fq("www"), T_A).edns().option(10, &[5; 8]);
    let mut badcookie = None;
    for id in 0..10 {
        let r = Reply::new(udp_exchange(&sock, &client_only.clone().id(id).bytes()).await.unwrap());
        if r.rcode() == BADCOOKIE {
            assert!(r.msg.answers.is_empty() && !r.tc(), "{r:#?}");
            badcookie = Some(r);
        }
    }
    let r = badcookie.expect("a limited query with a client cookie gets BADCOOKIE");
    let wire = Wire::parse(&r.raw).unwrap();
    let cookie = wire.opt_options().into_iter().find(|(c, _)| *c == 10).expect("a cookie").1;
    assert_eq!((cookie.len(), &cookie[..8]), (24, &[5u8; 8][..]), "client + server cookie");
    // The retry with the server cookie is answered, every time.
    let with_cookie = |id: u16| Q::new(&fq("www"), T_A).id(id).edns().option(10, &cookie).bytes();
    assert_eq!(burst(h.addr, "127.0.0.5", with_cookie).await, [SENT, 0, 0]);
    // A query without a cookie still slips as a truncated reply.
    let plain = |id: u16| Q::new(&fq("www"), T_A).id(id).bytes();
    let [_, truncated, _] = burst(h.addr, "127.0.0.5", plain).await;
    assert!(truncated >= SENT - 4, "truncated {truncated}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rate_limit_nothing_is_held_back() {
    let h = Harness::start().await;
    let plain = |id: u16| Q::new(&fq("www"), T_A).id(id).bytes();
    assert_eq!(burst(h.addr, "127.0.0.1", plain).await, [SENT, 0, 0]);
    h.stop().await;
}
