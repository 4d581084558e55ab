//! BIND's `named` as a resolver in front of steerdns, with DNS cookies and response rate
//! limiting at one answer a second (burst 1, nothing slipped): named's queries all come
//! from 127.0.0.1, one client network, so past its first answer the limiter would drop
//! nearly all of them. Only a query with a valid server cookie passes it.
//!
//! - With cookies (named's default), named learns our server cookie from its first answer
//!   and sends it back: many distinct names asked at once all resolve, every query after
//!   the first carries a valid server cookie, and nothing is dropped.
//! - With `send-cookie no`, the same names mostly time out: the limiter is what stops them,
//!   so the first case proves that the cookies made the difference.
//!
//! Without `named` (Debian package `bind9`) both are skipped, with a message.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::*;
use tokio::net::UdpSocket;
use tokio::time::timeout;

/// Distinct names asked, each a profile of its own.
const NAMES: usize = 30;
/// One answer a second to a client network, after a burst of one; no truncated replies.
const RATE_LIMIT: &str = "rate_limit: { rate: 1, burst: 1, slip: 0 }\n";
/// Longest wait for an answer that should come: named's own timeouts and retries fit in it.
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// How long the control case waits for answers the limiter holds back.
const HELD_BACK_WAIT: Duration = Duration::from_secs(3);

fn name(i: usize) -> String {
    fq(&format!("n{i:02}"))
}

fn address(i: usize) -> String {
    format!("203.0.113.{}", 100 + i)
}

/// `NAMES` profiles, `n00` to `n29`, each answering its own address.
fn profiles() -> String {
    let one = |i| {
        format!(
            "name: n{i:02}\nrouting: priority\nendpoints:\n  - {{ name: only, target: {}, always_serve: true }}\n",
            address(i)
        )
    };
    (0..NAMES).map(one).collect::<Vec<_>>().join("---\n")
}

async fn limited_server() -> Harness {
    Harness::with_admin_and_keys(&[("names.yaml", &profiles())], RATE_LIMIT).await
}

/// Asks named for name `i` once (named retries upstream on its own) and waits up to
/// `wait`: Ok with its address, or what came instead.
async fn ask(named: SocketAddr, i: usize, wait: Duration) -> Result<(), String> {
    let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.expect("bind");
    sock.connect(named).await.expect("connect");
    let q = Q::new(&name(i), T_A).edns().rd();
    sock.send(&q.bytes()).await.expect("send");
    let mut buf = vec![0u8; 65535];
    loop {
        let n = match timeout(wait, sock.recv(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(format!("{}: {e}", name(i))),
            Err(_) => return Err(format!("{}: no answer within {wait:?}", name(i))),
        };
        if n < 2 || buf[..2] != q.id.to_be_bytes() {
            continue;
        }
        let r = Reply::new(buf[..n].to_vec());
        let got: Vec<String> = r.msg.answers.iter().map(|rr| rdata_string(&rr.data)).collect();
        let want = format!("A {}", address(i));
        return if r.rcode() == NOERROR && got == [want.clone()] {
            Ok(())
        } else {
            Err(format!("{}: rcode {}, answers {got:?}, want {want}", name(i), r.rcode()))
        };
    }
}

/// Asks for names `1..NAMES` all at once; the results in order.
async fn ask_the_rest(named: SocketAddr, wait: Duration) -> Vec<Result<(), String>> {
    let tasks: Vec<_> = (1..NAMES).map(|i| tokio::spawn(ask(named, i, wait))).collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("query task"));
    }
    out
}

/// What steerdns counted: answered queries by cookie, and answers dropped by the limiter.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Counts {
    absent: f64,
    client_only: f64,
    valid: f64,
    invalid: f64,
    dropped: f64,
}

async fn counts(h: &Harness) -> Counts {
    let m = scrape(h.admin(), None).await;
    let cookie = |kind| m.sum("steerdns_cookie_queries_total", &[("cookie", kind)]);
    Counts {
        absent: cookie("absent"),
        client_only: cookie("client_only"),
        valid: cookie("valid"),
        invalid: cookie("invalid"),
        dropped: m.sum("steerdns_rate_limited_total", &[("action", "dropped")]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_returns_our_server_cookie_and_passes_the_rate_limit() {
    if !Named::available() {
        return;
    }
    let h = limited_server().await;
    let named = Named::start(h.addr, ORIGIN, Cookies::Send).expect("named was found");

    // The first exchange: named has a client cookie only, and learns our server cookie.
    if let Err(e) = ask(named.addr, 0, ANSWER_WAIT).await {
        panic!("the first name does not resolve: {e}\n{}", named.log());
    }
    let first = counts(&h).await;
    assert!(first.client_only >= 1.0, "named's first query has a client cookie only: {first:?}");

    let failed: Vec<String> =
        ask_the_rest(named.addr, ANSWER_WAIT).await.into_iter().filter_map(Result::err).collect();
    let then = counts(&h).await;
    println!("with cookies: after the first name {first:?}, after all {NAMES}: {then:?}");
    assert!(
        failed.is_empty(),
        "{} of {} names did not resolve through named:\n  {}\ncounts after the first name \
         {first:?}, now {then:?}\n{}",
        failed.len(),
        NAMES - 1,
        failed.join("\n  "),
        named.log()
    );
    assert!(
        then.valid - first.valid >= (NAMES - 1) as f64,
        "each name's query carries a valid server cookie: {first:?} then {then:?}"
    );
    assert_eq!(
        (then.absent, then.client_only, then.invalid, then.dropped),
        (first.absent, first.client_only, first.invalid, first.dropped),
        "after the first exchange no query goes without a valid cookie, none is dropped"
    );
    drop(named);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_without_cookies_is_held_back_by_the_rate_limit() {
    if !Named::available() {
        return;
    }
    let h = limited_server().await;
    let named = Named::start(h.addr, ORIGIN, Cookies::Off).expect("named was found");

    // The burst of one answers the first name.
    if let Err(e) = ask(named.addr, 0, ANSWER_WAIT).await {
        panic!("the first name does not resolve: {e}\n{}", named.log());
    }
    let first = counts(&h).await;
    let results = ask_the_rest(named.addr, HELD_BACK_WAIT).await;
    let resolved = results.iter().filter(|r| r.is_ok()).count();
    let then = counts(&h).await;
    println!("without cookies: {resolved} of {} names resolved; {then:?}", NAMES - 1);
    // One answer a second reaches named, a few in the time waited: far from all of them.
    assert!(
        resolved < (NAMES - 1) / 2,
        "{resolved} of {} names resolved without cookies: the limiter let them through",
        NAMES - 1
    );
    assert!(then.dropped > first.dropped, "the limiter dropped answers: {then:?}");
    assert_eq!(then.valid + then.client_only + then.invalid, 0.0, "named sent no cookie: {then:?}");
    drop(named);
    h.stop().await;
}
