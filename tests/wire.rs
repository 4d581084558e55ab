//! Answers on the wire and routing as seen on the wire: each test starts a real server on
//! 127.0.0.1 and checks real UDP/TCP responses. The UDP cases are in
//! tests/common/wire_cases.rs, shared with the AF_XDP fast path's run of them in
//! tests/xdp.rs; the cases of TCP alone are here.

mod common;

use std::collections::BTreeSet;

use common::wire_cases::assert_still_serving;
use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

wire_tests!(Via::Sockets);

// ---------------------------------------------------------------------------------------
// TCP
// ---------------------------------------------------------------------------------------

fn big_txt_strings() -> BTreeSet<String> {
    (0..BIG_TXT_RECORDS).map(|i| format!("TXT {:?}", big_txt_string(i))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_answer_is_complete_over_tcp() {
    let h = Harness::start().await;
    for q in [Q::new(&fq("big"), T_TXT), Q::new(&fq("big"), T_TXT).payload(4096)] {
        let r = h.tcp(&q).await;
        assert!(r.raw.len() > 1232, "{} bytes", r.raw.len());
        assert!(!r.tc());
        assert_eq!(r.rcode(), NOERROR);
        assert!(r.aa());
        let got: BTreeSet<String> = r.answer_strings().into_iter().collect();
        assert_eq!(got, big_txt_strings());
        assert_eq!(r.msg.answers.len(), BIG_TXT_RECORDS);
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connection_serves_several_queries_in_order() {
    let h = Harness::start().await;
    let mut s = h.tcp_connect().await;
    let qs = [Q::new(&fq("www"), T_A), Q::new(&fq("big"), T_TXT), Q::new(&fq("nope"), T_A)];
    let mut all = Vec::new();
    for q in &qs {
        let b = q.bytes();
        all.extend_from_slice(&(b.len() as u16).to_be_bytes());
        all.extend_from_slice(&b);
    }
    tokio::io::AsyncWriteExt::write_all(&mut s, &all).await.unwrap();
    for q in &qs {
        let r = Reply::new(tcp_recv(&mut s).await.expect("reply"));
        assert_eq!(r.wire.id, q.id);
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_abuse_does_not_break_the_server() {
    use tokio::io::AsyncWriteExt;
    let h = Harness::start().await;
    let mut rng = SmallRng::seed_from_u64(7);

    // Length prefix, then close.
    let mut s = h.tcp_connect().await;
    s.write_all(&[0x00, 0x40]).await.unwrap();
    drop(s);
    // Half a length prefix, then close.
    let mut s = h.tcp_connect().await;
    s.write_all(&[0x00]).await.unwrap();
    drop(s);
    // Length prefix and part of a query, then close.
    let mut s = h.tcp_connect().await;
    let q = Q::new(&fq("www"), T_A).bytes();
    let mut partial = (q.len() as u16).to_be_bytes().to_vec();
    partial.extend_from_slice(&q[..q.len() / 2]);
    s.write_all(&partial).await.unwrap();
    drop(s);
    // A zero-length message.
    let mut s = h.tcp_connect().await;
    s.write_all(&[0, 0]).await.unwrap();
    let _ = tcp_recv(&mut s).await;
    drop(s);
    // Garbage: whatever comes back, if anything, must be a parseable reply.
    for _ in 0..5 {
        let mut s = h.tcp_connect().await;
        let junk: Vec<u8> = (0..2000).map(|_| rng.random()).collect();
        let _ = s.write_all(&junk).await;
        let _ = s.shutdown().await;
        drop(s);
    }
    // Framed garbage: each frame holds random bytes with QR clear.
    let mut s = h.tcp_connect().await;
    for _ in 0..20 {
        let len = rng.random_range(12..100);
        let mut p: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        p[2] &= 0x7f;
        tcp_send(&mut s, &p).await;
    }
    drop(s);
    // Connections that stay open and silent while others are served.
    let mut idle = Vec::new();
    for _ in 0..5 {
        let mut s = h.tcp_connect().await;
        s.write_all(&[0x01]).await.unwrap();
        idle.push(s);
    }
    assert_still_serving(&h).await;
    // A connection after a dropped response (QR=1) still works afterwards on a new one.
    let mut s = h.tcp_connect().await;
    let mut resp = Q::new(&fq("www"), T_A).bytes();
    resp[2] |= 0x80;
    tcp_send(&mut s, &resp).await;
    drop(s);
    assert_still_serving(&h).await;
    drop(idle);
    h.stop().await;
}
