//! Query logs in dnstap over real UDP and TCP: a `file:` log and a `socket:` log (captured
//! by `fstrm_capture`, started after the server) read back by BIND's `dnstap-read`,
//! sampling, a reader that stops reading (queries are still answered, losses counted), the
//! configuration checks and a reload that changes the log.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use steerdns::server::dnstap::Stats;

/// Starts a server with the default profiles and this `log:` block.
async fn logging(block: &str) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), DEFAULT_PROFILES);
    let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).unwrap();
    std::fs::write(dir.path().join("steerdns.yaml"), format!("{yaml}log:\n{block}")).unwrap();
    Harness::in_dir(dir).await
}

fn stats(h: &Harness) -> &Stats {
    h.server().control().dnstap.as_deref().expect("dnstap is on")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_the_log_applies_the_rest_and_asks_for_a_restart() {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("queries.fstrm");
    let h = logging(&format!("  dnstap:\n    file: {}\n", path.display())).await;
    assert!(h.server().control().restart_needed().is_empty());
    let config = h.dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, yaml.replace("dnstap:\n", "dnstap:\n    sample: 0.5\n")).unwrap();
    h.server().reload().expect("the reload applies");
    assert_eq!(h.server().control().restart_needed(), ["log.dnstap"]);
    assert_eq!(h.server().snapshot().dnstap.as_ref().map(|d| d.sample), Some(0.5));
    // The running log keeps logging every exchange.
    for _ in 0..10 {
        assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.rcode(), NOERROR);
    }
    let s = stats(&h);
    wait_for(WAIT, "every exchange written", || load(&s.sent) == 20).await;
    h.stop().await;
    assert_eq!(frames(&path).len(), 20);
}
