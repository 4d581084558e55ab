//! Response rate limiting over real UDP: past the rate, a client network's answers are
//! dropped or, every `slip`-th, sent truncated; exempt networks, queries with a valid
//! server cookie and TCP are never limited; the counts show in the limiter's metrics. Each
//! case runs against the UDP sockets and again through the AF_XDP fast path (which needs
//! root; without it those runs say so and pass, unless STEERDNS_REQUIRE_TOOLS=1).

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;

const RATE: usize = 5;
const SENT: usize = 40;

/// Rate limited, with the clients' second address exempt.
async fn limited_server(via: Via) -> Option<Harness> {
    let exempt = via.client_ip(2);
    limited_server_with(
        via,
        &format!(
            "rate_limit:\n  rate: {RATE}\n  slip: 2\n  exempt: [\"{exempt}/32\", \"::1/128\"]\n"
        ),
    )
    .await
}

/// The default configuration with the admin API on and `block` added.
async fn limited_server_with(via: Via, block: &str) -> Option<Harness> {
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), DEFAULT_PROFILES);
    let path = dir.path().join("steerdns.yaml");
    let yaml = with_admin(&std::fs::read_to_string(&path).unwrap(), None);
    std::fs::write(&path, format!("{yaml}{block}")).unwrap();
    Harness::in_dir_via(dir, via).await
}

/// What became of `SENT` queries sent at once from the clients' `from`th address:
/// (answered, slipped, missing).
async fn burst(h: &Harness, from: u8, query: impl Fn(u16) -> Vec<u8>) -> [usize; 3] {
    let sock = h.bind_udp(h.via().client_ip(from));
    for id in 0..SENT as u16 {
        sock.send_to(&query(id), h.addr).await.unwrap();
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

/// `steerdns_rate_limited_total` by action: (slipped, dropped).
async fn limited_metrics(h: &Harness) -> (usize, usize) {
    let text = h.admin_get("/metrics").await.text();
    let prom = Prom::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let count = |action| prom.sum("steerdns_rate_limited_total", &[("action", action)]) as usize;
    (count("slipped"), count("dropped"))
}

async fn past_the_rate(via: Via) {
    let Some(h) = limited_server(via).await else { return };
    let plain = |id: u16| Q::new(&fq("www"), T_A).id(id).bytes();
    let [answered, truncated, missing] = burst(&h, 1, plain).await;
    // Within one second: RATE answered; the rest half dropped, half slipped. A second
    // boundary during the burst allows one more second's worth.
    assert!((RATE..=2 * RATE).contains(&answered), "answered {answered}");
    assert!(truncated >= (SENT - 2 * RATE) / 2 - 1, "truncated {truncated}");
    assert!(missing >= (SENT - 2 * RATE) / 2 - 1, "missing {missing}");
    let limiter = &h.server().control().limiter;
    let counted = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed) as usize;
    assert_eq!((counted(&limiter.slipped), counted(&limiter.dropped)), (truncated, missing));
    assert_eq!(limited_metrics(&h).await, (truncated, missing));

    // An exempt network is never limited.
    assert_eq!(burst(&h, 2, plain).await, [SENT, 0, 0], "exempt {}", via.client_ip(2));

    // TCP is never limited: the client's address is proven.
    for _ in 0..2 * RATE {
        let r = h.tcp(&Q::new(&fq("www"), T_A)).await;
        assert_eq!((r.rcode(), r.msg.answers.len()), (NOERROR, 1), "{r:#?}");
    }

    // A query with a server cookie we made for its address is never limited. The cookie is
    // fetched from the third address in a new second, when the /24's count starts over.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let sock = h.bind_udp(via.client_ip(3));
    sock.connect(h.addr).await.unwrap();
    let first = Q::new(&fq("www"), T_A).edns().option(10, &[7; 8]).bytes();
    let r = Reply::new(udp_exchange(&sock, &first).await.expect("an answer with a cookie"));
    let wire = Wire::parse(&r.raw).unwrap();
    let cookie = wire.opt_options().into_iter().find(|(c, _)| *c == 10).expect("a cookie").1;
    let with_cookie = |id: u16| Q::new(&fq("www"), T_A).id(id).edns().option(10, &cookie).bytes();
    assert_eq!(burst(&h, 3, with_cookie).await, [SENT, 0, 0], "valid cookie");
    // A cookie made for another address proves nothing.
    let [answered, slipped, _] = burst(&h, 4, with_cookie).await;
    assert!(answered <= 2 * RATE, "a cookie of another address: {answered} answered");
    assert!(slipped > 0, "and its limited answers slip as BADCOOKIE");
    h.stop().await;
}

/// Past the rate, a query with a client cookie slips as BADCOOKIE with a fresh server
/// cookie rather than as a truncated reply: a resolver that retries with it passes.
async fn client_cookie_gets_badcookie(via: Via) {
    let block = "rate_limit:\n  rate: 1\n  burst: 1\n  slip: 1\n";
    let Some(h) = limited_server_with(via, block).await else { return };
    let sock = h.bind_udp(via.client_ip(5));
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
    assert_eq!(burst(&h, 5, with_cookie).await, [SENT, 0, 0]);
    // A query without a cookie still slips as a truncated reply.
    let plain = |id: u16| Q::new(&fq("www"), T_A).id(id).bytes();
    let [_, truncated, _] = burst(&h, 5, plain).await;
    assert!(truncated >= SENT - 4, "truncated {truncated}");
    let (slipped, _) = limited_metrics(&h).await;
    assert!(slipped >= truncated, "{slipped} slipped counted, {truncated} seen");
    h.stop().await;
}

async fn nothing_held_back(via: Via) {
    let Some(h) = Harness::start_via(via).await else { return };
    let plain = |id: u16| Q::new(&fq("www"), T_A).id(id).bytes();
    assert_eq!(burst(&h, 1, plain).await, [SENT, 0, 0]);
    h.stop().await;
}

/// Each case on the UDP sockets and through the AF_XDP fast path.
macro_rules! on_both_paths {
    ($($case:ident => $sockets:ident, $xdp:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sockets() {
            $case(Via::Sockets).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $xdp() {
            $case(Via::Xdp).await
        }
    )*};
}

on_both_paths! {
    past_the_rate =>
        answers_past_the_rate_are_dropped_or_slip_and_proven_clients_pass,
        through_xdp_answers_past_the_rate_are_dropped_or_slip_and_proven_clients_pass;
    client_cookie_gets_badcookie =>
        a_limited_query_with_a_client_cookie_gets_badcookie_and_its_retry_passes,
        through_xdp_a_limited_query_with_a_client_cookie_gets_badcookie_and_its_retry_passes;
    nothing_held_back =>
        without_rate_limit_nothing_is_held_back,
        through_xdp_without_rate_limit_nothing_is_held_back;
}
