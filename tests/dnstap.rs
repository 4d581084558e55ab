//! Query logs in dnstap over real UDP and TCP: a `file:` log and a `socket:` log (captured
//! by `fstrm_capture`, started after the server) read back by BIND's `dnstap-read`,
//! sampling, a reader that stops reading (queries are still answered, losses counted), the
//! configuration checks, reloads that turn the log on, move it, change its settings and
//! turn it off, TCP connections past the pool of TCP rings, and the queries the AF_XDP fast
//! path answers (that run needs root; without it, it says so and passes, unless
//! STEERDNS_REQUIRE_TOOLS=1).

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::netns::{SERVER_V6, client_v6};
use common::*;
use steerdns::server::dnstap::Stats;

/// Starts a server with the default profiles and this `log:` block.
async fn logging(block: &str) -> Harness {
    logging_via(block, Via::Sockets).await.expect("sockets are always there")
}

/// `logging`, reached `via`; `None` when that way cannot be set up here.
async fn logging_via(block: &str, via: Via) -> Option<Harness> {
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), DEFAULT_PROFILES);
    let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).unwrap();
    std::fs::write(dir.path().join("steerdns.yaml"), format!("{yaml}log:\n{block}")).unwrap();
    Harness::in_dir_via(dir, via).await
}

fn stats(h: &Harness) -> &Stats {
    h.server().control().dnstap.stats().expect("dnstap is on")
}

fn load(n: &std::sync::atomic::AtomicU64) -> u64 {
    n.load(Ordering::Relaxed)
}

/// Polls `done` every 20 ms until it holds; panics with `what` after `limit`.
async fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn have(tool: &str, package: &str) -> bool {
    have_tool(tool, package)
}

/// The data frames of a Frame Streams file, after checking that it starts with START for
/// dnstap and ends with STOP.
fn frames(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let (mut at, mut out, mut controls) = (0, Vec::new(), Vec::new());
    while at < bytes.len() {
        let len = word(at);
        if len == 0 {
            let clen = word(at + 4);
            controls.push((word(at + 8), bytes[at + 12..at + 8 + clen].to_vec()));
            at += 8 + clen;
        } else {
            out.push(bytes[at + 4..at + 4 + len].to_vec());
            at += 4 + len;
        }
    }
    let start_fields = [&[0, 0, 0, 1, 0, 0, 0, 22][..], b"protobuf:dnstap.Dnstap"].concat();
    assert_eq!(controls.first(), Some(&(2, start_fields)), "START with the dnstap type");
    assert_eq!(controls.last(), Some(&(3, vec![])), "STOP at the end");
    assert_eq!(controls.len(), 2, "one stream: {controls:?}");
    out
}

/// One message as `dnstap-read -y` prints it: the top-level fields, the message's fields
/// (indented under `message:`, prefixed `message.`, quotes removed) and the question.
#[derive(Debug)]
struct Shown {
    fields: Vec<(String, String)>,
    question: String,
}

impl Shown {
    fn get(&self, key: &str) -> &str {
        self.fields.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v.as_str())
    }
}

/// Runs `dnstap-read -y` on a file and reads its YAML documents.
fn dnstap_read(path: &Path) -> Vec<Shown> {
    let out = Command::new("dnstap-read").arg("-y").arg(path).output().unwrap();
    assert!(out.status.success(), "dnstap-read: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut docs = Vec::new();
    for doc in text.split("\n---").filter(|d| !d.trim().is_empty()) {
        let (mut fields, mut question) = (Vec::new(), String::new());
        let mut lines = doc.lines();
        while let Some(line) = lines.next() {
            let indent = line.len() - line.trim_start().len();
            let Some((k, v)) = line.trim().split_once(':') else { continue };
            if k == "QUESTION_SECTION" && question.is_empty() {
                let q = lines.next().unwrap_or_default().trim();
                question = q.trim_start_matches("- ").trim_matches('\'').to_string();
                continue;
            }
            let key = match indent {
                0 => k.to_string(),
                2 => format!("message.{k}"),
                _ => continue,
            };
            fields.push((key, v.trim().trim_matches('"').to_string()));
        }
        docs.push(Shown { fields, question });
    }
    docs
}

/// The messages of this type, over this protocol, for this question.
fn select<'a>(docs: &'a [Shown], kind: &str, proto: &str, question: &str) -> Vec<&'a Shown> {
    docs.iter()
        .filter(|d| {
            d.get("message.type") == kind
                && d.get("message.socket_protocol") == proto
                && d.question == question
        })
        .collect()
}

/// The whole log of `h`'s queries, after its shutdown closed the stream.
const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_log_reads_back_with_dnstap_read() {
    if !have("dnstap-read", "bind9-dnsutils") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("queries.fstrm");
    let block = format!("  dnstap:\n    file: {}\n    identity: ns-test\n", path.display());
    let h = logging(&block).await;
    let port = h.addr.port().to_string();
    // A response sent to the server is dropped unanswered: only its query is logged.
    let mut stray = Q::new(&fq("info"), T_TXT).bytes();
    stray[2] |= 0x80;
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.send_to(&stray, h.addr).unwrap();
    assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    assert_eq!(h.tcp(&Q::new(&fq("api"), T_A)).await.rcode(), NOERROR);
    let s = stats(&h);
    wait_for(WAIT, "5 messages written", || load(&s.sent) == 5).await;
    let sent = load(&s.sent);
    h.stop().await;

    assert_eq!(frames(&path).len() as u64, sent);
    let docs = dnstap_read(&path);
    assert_eq!(docs.len(), 5, "{docs:#?}");
    for (kind, proto, name) in [
        ("AUTH_QUERY", "UDP", "www"),
        ("AUTH_RESPONSE", "UDP", "www"),
        ("AUTH_QUERY", "TCP", "api"),
        ("AUTH_RESPONSE", "TCP", "api"),
        ("AUTH_QUERY", "UDP", "info"),
    ] {
        let question = format!("{} IN {}", fq(name), if name == "info" { "TXT" } else { "A" });
        let found = select(&docs, kind, proto, &question);
        assert_eq!(found.len(), 1, "one {kind} over {proto} for {question}: {docs:#?}");
        let d = found[0];
        assert_eq!(d.get("type"), "MESSAGE");
        assert_eq!(d.get("identity"), "ns-test");
        assert!(d.get("version").starts_with("steerdns "), "{d:?}");
        assert_eq!(d.get("message.socket_family"), "INET");
        assert_eq!(d.get("message.query_address"), "127.0.0.1");
        assert_eq!(d.get("message.response_address"), "127.0.0.1");
        assert_eq!(d.get("message.response_port"), port);
        assert!(d.get("message.query_port").parse::<u16>().unwrap() > 0, "{d:?}");
        let time = if kind == "AUTH_QUERY" { "query_time" } else { "response_time" };
        assert!(d.get(&format!("message.{time}")).starts_with("!!timestamp 20"), "{d:?}");
    }
    let info = format!("{} IN TXT", fq("info"));
    assert!(select(&docs, "AUTH_RESPONSE", "UDP", &info).is_empty(), "no response was sent");
}

/// Queries the AF_XDP fast path answers are logged as the sockets' are, with the client's
/// address and port and the fast path's, on both families.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xdp_answers_are_logged_with_their_addresses_and_ports() {
    if !have("dnstap-read", "bind9-dnsutils") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("queries.fstrm");
    let block = format!("  dnstap:\n    file: {}\n", path.display());
    let Some(h) = logging_via(&block, Via::Xdp).await else { return };
    let v4 = h.fresh_udp().await;
    let v6 = h.bind_udp(client_v6(1).into());
    let server6 = SocketAddr::new(SERVER_V6.into(), XDP_PORT);
    v6.connect(server6).await.unwrap();
    let mut asked = Vec::new();
    for (sock, server, name) in [(&v4, h.addr, "www"), (&v6, server6, "api")] {
        let reply = udp_exchange(sock, &Q::new(&fq(name), T_A).bytes()).await;
        assert_eq!(Reply::new(reply.expect("an answer")).rcode(), NOERROR);
        asked.push((sock.local_addr().unwrap(), server, name));
    }
    let s = stats(&h);
    wait_for(WAIT, "4 messages written", || load(&s.sent) == 4).await;
    h.stop().await;

    let docs = dnstap_read(&path);
    assert_eq!(docs.len(), 4, "{docs:#?}");
    for (client, server, name) in asked {
        let family = if client.is_ipv4() { "INET" } else { "INET6" };
        for kind in ["AUTH_QUERY", "AUTH_RESPONSE"] {
            let found = select(&docs, kind, "UDP", &format!("{} IN A", fq(name)));
            assert_eq!(found.len(), 1, "one {kind} for {name}: {docs:#?}");
            let d = found[0];
            assert_eq!(d.get("message.socket_family"), family, "{d:?}");
            assert_eq!(d.get("message.query_address"), client.ip().to_string(), "{d:?}");
            assert_eq!(d.get("message.query_port"), client.port().to_string(), "{d:?}");
            assert_eq!(d.get("message.response_address"), server.ip().to_string(), "{d:?}");
            assert_eq!(d.get("message.response_port"), server.port().to_string(), "{d:?}");
        }
    }
}

/// A Frame Streams reader: `fstrm_capture` writing what it receives on `sock` to `out`.
struct Capture(Child);

impl Capture {
    fn start(sock: &Path, out: &Path) -> Capture {
        let child = Command::new("fstrm_capture")
            .args(["-t", "protobuf:dnstap.Dnstap", "-u"])
            .arg(sock)
            .arg("-w")
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fstrm_capture starts");
        Capture(child)
    }

    /// Stops it as an operator would (SIGINT): it closes its file with STOP.
    fn stop(mut self) {
        // SAFETY: signals our own child by its process id.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.0.wait();
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_reader_started_late_gets_the_log() {
    if !have("dnstap-read", "bind9-dnsutils") || !have("fstrm_capture", "fstrm-bin") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let (sock, file) = (out.path().join("dnstap.sock"), out.path().join("captured.fstrm"));
    let h = logging(&format!("  dnstap:\n    socket: {}\n", sock.display())).await;
    // Nobody listens yet: the exchange is answered, and its messages are lost and counted.
    assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    let s = stats(&h);
    wait_for(WAIT, "the lost messages counted", || load(&s.dropped_disconnected) == 2).await;

    let capture = Capture::start(&sock, &file);
    // The writer reconnects on its own; until then these are lost too.
    let deadline = Instant::now() + WAIT;
    while load(&s.sent) == 0 {
        assert!(Instant::now() < deadline, "the writer never reached fstrm_capture");
        assert_eq!(h.udp(&Q::new(&fq("pool"), T_A)).await.rcode(), NOERROR);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = load(&s.sent);
    assert_eq!(h.tcp(&Q::new(&fq("api"), T_AAAA)).await.rcode(), NOERROR);
    wait_for(WAIT, "the TCP exchange written", || load(&s.sent) == before + 2).await;
    let sent = load(&s.sent);
    // The server closes the stream (STOP, then the reader's FINISH) before the reader stops.
    h.stop().await;
    capture.stop();

    assert_eq!(frames(&file).len() as u64, sent);
    let docs = dnstap_read(&file);
    let api = format!("{} IN AAAA", fq("api"));
    assert_eq!(select(&docs, "AUTH_QUERY", "TCP", &api).len(), 1, "{docs:#?}");
    assert_eq!(select(&docs, "AUTH_RESPONSE", "TCP", &api).len(), 1, "{docs:#?}");
    let pool = format!("{} IN A", fq("pool"));
    assert!(!select(&docs, "AUTH_RESPONSE", "UDP", &pool).is_empty(), "{docs:#?}");
    let www = format!("{} IN A", fq("www"));
    assert!(select(&docs, "AUTH_QUERY", "UDP", &www).is_empty(), "sent while no reader was there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_percent_sample_logs_some_exchanges_but_few() {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("sampled.fstrm");
    let h = logging(&format!("  dnstap:\n    file: {}\n    sample: 0.01\n", path.display())).await;
    const QUERIES: u64 = 2000;
    for _ in 0..QUERIES {
        assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    }
    let s = stats(&h);
    let sent = load(&s.sent);
    h.stop().await;
    let logged = frames(&path).len() as u64;
    assert!(logged >= sent, "the writer wrote the rest at shutdown");
    assert_eq!(logged % 2, 0, "a query and its response each time");
    // 20 exchanges expected. None at all has probability 0.99^2000 < 2e-9; more than 200
    // is further out still.
    let exchanges = logged / 2;
    assert!((1..=200).contains(&exchanges), "{exchanges} of {QUERIES} exchanges logged");
}

/// Where a stalled reader keeps its connections open, never reading past the handshake.
fn stalled_reader(sock: &Path) {
    let listener = UnixListener::bind(sock).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            // READY in, ACCEPT out, START in; then nothing more is read.
            let control = |conn: &mut UnixStream| {
                let mut head = [0u8; 8];
                conn.read_exact(&mut head)?;
                let len = u32::from_be_bytes(head[4..8].try_into().unwrap()) as usize;
                conn.read_exact(&mut vec![0u8; len])
            };
            let accept = [
                &[0, 0, 0, 0, 0, 0, 0, 34, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 22][..],
                b"protobuf:dnstap.Dnstap",
            ]
            .concat();
            let ok = control(&mut conn).is_ok()
                && conn.write_all(&accept).is_ok()
                && control(&mut conn).is_ok();
            if ok {
                held.push(conn);
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_costs_log_messages_not_answers() {
    let out = tempfile::tempdir().unwrap();
    let sock = out.path().join("stalled.sock");
    stalled_reader(&sock);
    let h = logging(&format!("  dnstap:\n    socket: {}\n", sock.display())).await;
    // Each exchange is about 1 KB of messages (an 800-byte TXT answer): a few hundred fill
    // the socket's buffers; then the writer's write times out, it reconnects (the reader
    // takes the connection and stalls again), and the messages meanwhile are lost.
    let mid = Q::new(&fq("mid"), T_TXT).edns();
    let started = Instant::now();
    for _ in 0..3000 {
        let r = h.udp(&mid).await;
        assert_eq!((r.rcode(), r.msg.answers.len()), (NOERROR, MID_TXT_RECORDS));
    }
    let s = stats(&h);
    let lost = || load(&s.dropped_disconnected) + load(&s.dropped_queue_full);
    wait_for(WAIT, "lost messages counted", || lost() > 0).await;
    assert!(load(&s.sent) < 6000, "a reader that does not read cannot have taken them all");
    eprintln!("3000 answers in {:?}, {} messages lost", started.elapsed(), lost());
    let text = steerdns::server::admin::metrics::render(h.server().control());
    let prom = Prom::parse(&text).unwrap();
    assert!(prom.sum("steerdns_dnstap_dropped_total", &[]) > 0.0, "{text}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_never_accepts_costs_log_messages_not_answers() {
    let out = tempfile::tempdir().unwrap();
    let sock = out.path().join("silent.sock");
    // Listening, but never accepting: connections wait in the backlog, unanswered.
    let _listener = UnixListener::bind(&sock).unwrap();
    let h = logging(&format!("  dnstap:\n    socket: {}\n", sock.display())).await;
    for _ in 0..20 {
        assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    }
    let s = stats(&h);
    wait_for(WAIT, "all 40 messages counted lost", || load(&s.dropped_disconnected) == 40).await;
    assert_eq!(load(&s.sent), 0);
    h.stop().await;
}

const SERVER: &str = "zones:
  - origin: tm.example.test.
    ns: [ns1.tm.example.test.]
    soa: { rname: hostmaster.example.test. }
";

#[test]
fn the_log_block_is_checked_with_positions() {
    let cases: &[(&str, &str, &str)] = &[
        ("log:\n  dnstap:\n    sample: 0.5\n", "steerdns.yaml:7:5", "needs socket"),
        (
            "log:\n  dnstap:\n    socket: a.sock\n    file: q.fstrm\n",
            "steerdns.yaml:8:11",
            "not both",
        ),
        ("log:\n  dnstap:\n    file: q.fstrm\n    sample: 0\n", "steerdns.yaml:8:13", "above 0"),
        (
            "log:\n  dnstap:\n    file: q.fstrm\n    sample: 1.5\n",
            "steerdns.yaml:8:13",
            "at most 1",
        ),
        ("log:\n  dnstap:\n    file: q.fstrm\n    sample: all\n", "steerdns.yaml:8:13", ""),
        ("log:\n  dnstap:\n    file: \"\"\n", "steerdns.yaml:7:11", "must not be empty"),
        (
            "log:\n  dnstap:\n    file: q.fstrm\n    rotate: 1h\n",
            "steerdns.yaml:8:5",
            "unknown field",
        ),
        ("log:\n  syslog: {}\n", "steerdns.yaml:6:3", "unknown field `syslog`"),
    ];
    let long = format!("log:\n  dnstap:\n    socket: /{}\n", "s".repeat(120));
    let cases =
        cases.iter().copied().chain([(long.as_str(), "steerdns.yaml:7:13", "unix socket path")]);
    for (log, at, msg) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("profiles")).unwrap();
        let path = dir.path().join("steerdns.yaml");
        std::fs::write(&path, format!("{SERVER}{log}")).unwrap();
        let errors = match steerdns::config::load(&path, None) {
            Ok(_) => vec![],
            Err(e) => located(&e),
        };
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{at}: ")) && e.contains(msg)),
            "{log}: want {at}: ..{msg}.., got {errors:#?}"
        );
    }
}

/// Rewrites the `log:` block of `h`'s `steerdns.yaml` (`None`: no `log:` at all) and
/// reloads.
fn reload_with_log(h: &Harness, block: Option<&str>) {
    let config = h.dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap();
    let base = yaml.split("log:\n").next().unwrap();
    let text = match block {
        Some(b) => format!("{base}log:\n{b}"),
        None => base.to_string(),
    };
    std::fs::write(&config, text).unwrap();
    h.server().reload().expect("the reload applies");
    assert!(h.server().control().restart_needed().is_empty(), "a log change needs no restart");
}

/// Whether a Frame Streams file ends with its STOP frame: its writer closed it.
fn closed(path: &Path) -> bool {
    std::fs::read(path).unwrap_or_default().ends_with(&[0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 3])
}

/// Sends `q` on an open TCP connection and checks that it is answered.
async fn tcp_on(conn: &mut tokio::net::TcpStream, q: &Q) {
    tcp_send(conn, &q.bytes()).await;
    let reply = tcp_recv(conn).await.expect("a TCP reply");
    assert_eq!(Reply::new(reply).rcode(), NOERROR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_turn_the_log_on_move_it_to_a_reader_and_turn_it_off() {
    if !have("dnstap-read", "bind9-dnsutils") || !have("fstrm_capture", "fstrm-bin") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let first = out.path().join("first.fstrm");
    let (sock, captured) = (out.path().join("dnstap.sock"), out.path().join("captured.fstrm"));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    let h = Harness::in_dir(dir).await;
    assert!(h.server().control().dnstap.stats().is_none(), "no log at start");
    // One TCP connection stays open throughout: it follows the log into each writer.
    let mut conn = h.tcp_connect().await;
    tcp_on(&mut conn, &Q::new(&fq("www"), T_A)).await;

    // On: a file.
    reload_with_log(&h, Some(&format!("  dnstap:\n    file: {}\n", first.display())));
    let s = stats(&h);
    assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    tcp_on(&mut conn, &Q::new(&fq("api"), T_A)).await;
    wait_for(WAIT, "4 messages in the first file", || load(&s.sent) == 4).await;

    // Moved: to a socket reader, with another identity; the file is closed.
    let capture = Capture::start(&sock, &captured);
    let moved = format!("  dnstap:\n    socket: {}\n    identity: moved\n", sock.display());
    reload_with_log(&h, Some(&moved));
    wait_for(WAIT, "the first file closed", || closed(&first)).await;
    let deadline = Instant::now() + WAIT;
    while load(&s.sent) == 4 {
        assert!(Instant::now() < deadline, "the new writer never reached fstrm_capture");
        assert_eq!(h.udp(&Q::new(&fq("pool"), T_A)).await.rcode(), NOERROR);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = load(&s.sent);
    tcp_on(&mut conn, &Q::new(&fq("api"), T_AAAA)).await;
    wait_for(WAIT, "the TCP exchange sent to the reader", || load(&s.sent) == before + 2).await;

    // Off: nothing more is logged, and the counts stay readable.
    reload_with_log(&h, None);
    assert_eq!(h.server().control().dnstap.running(), None);
    assert_eq!(h.udp(&Q::new(&fq("info"), T_TXT)).await.rcode(), NOERROR);
    tcp_on(&mut conn, &Q::new(&fq("info"), T_TXT)).await;
    let sent = load(&s.sent);
    drop(conn);
    h.stop().await;
    capture.stop();

    let docs = dnstap_read(&first);
    assert_eq!(frames(&first).len(), 4);
    let (www, api) = (format!("{} IN A", fq("www")), format!("{} IN A", fq("api")));
    for (kind, proto, question) in [
        ("AUTH_QUERY", "UDP", &www),
        ("AUTH_RESPONSE", "UDP", &www),
        ("AUTH_QUERY", "TCP", &api),
        ("AUTH_RESPONSE", "TCP", &api),
    ] {
        assert_eq!(select(&docs, kind, proto, question).len(), 1, "{kind} {proto} {question}");
    }
    assert!(select(&docs, "AUTH_QUERY", "TCP", &www).is_empty(), "asked before the log was on");

    let docs = dnstap_read(&captured);
    assert_eq!(frames(&captured).len() as u64, sent - 4);
    let aaaa = format!("{} IN AAAA", fq("api"));
    let found = select(&docs, "AUTH_RESPONSE", "TCP", &aaaa);
    assert_eq!(found.len(), 1, "{docs:#?}");
    assert_eq!(found[0].get("identity"), "moved");
    let info = format!("{} IN TXT", fq("info"));
    assert!(docs.iter().all(|d| d.question != info), "asked after the log was turned off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_sample_or_identity_keeps_the_stream_and_applies_at_once() {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("queries.fstrm");
    let file = format!("    file: {}\n", path.display());
    let h = logging(&format!("  dnstap:\n{file}    identity: ns-before\n")).await;
    let s = stats(&h);
    assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    wait_for(WAIT, "2 messages written", || load(&s.sent) == 2).await;

    reload_with_log(&h, Some(&format!("  dnstap:\n{file}    identity: ns-after\n")));
    assert_eq!(h.tcp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    wait_for(WAIT, "4 messages written", || load(&s.sent) == 4).await;

    // About one exchange in a billion: none of these is logged.
    let rare = format!("  dnstap:\n{file}    identity: ns-after\n    sample: 0.000000001\n");
    reload_with_log(&h, Some(&rare));
    assert_eq!(h.server().control().dnstap.running().map(|d| d.sample), Some(0.000000001));
    for _ in 0..10 {
        assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
        assert_eq!(h.tcp(&Q::new(&fq("api"), T_A)).await.rcode(), NOERROR);
    }
    h.stop().await;
    // One stream (`frames` checks one START and one STOP): the file was not started again.
    let frames = frames(&path);
    assert_eq!(frames.len(), 4);
    let has = |f: &[u8], id: &[u8]| f.windows(id.len()).any(|w| w == id);
    assert!(frames[..2].iter().all(|f| has(f, b"ns-before") && !has(f, b"ns-after")));
    assert!(frames[2..].iter().all(|f| has(f, b"ns-after") && !has(f, b"ns-before")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_an_output_that_cannot_open_keeps_the_running_log() {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("queries.fstrm");
    let h = logging(&format!("  dnstap:\n    file: {}\n", path.display())).await;
    let running = h.server().control().dnstap.running();
    let missing = out.path().join("no-such-directory/queries.fstrm");
    // The rest of the configuration applies; the log stays where it was.
    reload_with_log(&h, Some(&format!("  dnstap:\n    file: {}\n", missing.display())));
    assert_eq!(h.server().control().dnstap.running(), running);
    assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    let s = stats(&h);
    wait_for(WAIT, "the exchange written to the running log", || load(&s.sent) == 2).await;
    h.stop().await;
    assert_eq!(frames(&path).len(), 2);
    assert!(!missing.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connections_past_the_ring_pool_count_drops_and_are_answered() {
    use steerdns::server::dnstap::TCP_RINGS;
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("queries.fstrm");
    let h = logging(&format!("  dnstap:\n    file: {}\n", path.display())).await;
    let s = stats(&h);
    let q = Q::new(&fq("www"), T_A);
    // Every connection logs one exchange and stays open, holding its ring. The per-source
    // cap is 64 by default, so the last connections come from another loopback address.
    let mut conns = Vec::new();
    for i in 0..TCP_RINGS + 1 {
        let mut conn = if i < 60 {
            h.tcp_connect().await
        } else {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
            socket.connect(h.addr).await.unwrap()
        };
        tcp_on(&mut conn, &q).await;
        conns.push(conn);
    }
    let rings = TCP_RINGS as u64;
    wait_for(WAIT, "every ring's exchange written", || load(&s.sent) == 2 * rings).await;
    assert_eq!(load(&s.dropped_queue_full), 2, "the connection past the pool: {s:?}");
    // A connection that ends gives its ring back; the one without takes it.
    drop(conns.remove(0));
    let last = conns.last_mut().unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let dropped = load(&s.dropped_queue_full);
        tcp_on(last, &q).await;
        wait_for(WAIT, "the exchange written or dropped", || {
            load(&s.sent) + load(&s.dropped_queue_full) >= 2 * rings + dropped + 2
        })
        .await;
        if load(&s.dropped_queue_full) == dropped {
            break;
        }
        assert!(Instant::now() < deadline, "the ring never came back to the pool");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(load(&s.sent), 2 * rings + 2);
    drop(conns);
    h.stop().await;
    assert_eq!(frames(&path).len() as u64, 2 * rings + 2);
}
