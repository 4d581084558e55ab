//! etcd write load of health views: one replica with N probed endpoints at one interval,
//! counting etcd's writes from its `/metrics` (`etcd_mvcc_put_total`,
//! `etcd_mvcc_delete_total`, `etcd_mvcc_txn_total`): the start-up burst, then a minute of
//! steady state.
//!
//! ```text
//! cargo run --release --example cluster_health_load -- [endpoints=10000] [interval_s=10] \
//!     [flapping_percent=0] [measure_s=60]
//! ```
//!
//! It starts its own etcd (Debian's `etcd`, from `PATH` or `/usr/bin`) on free loopback
//! ports with a temporary data directory, and runs the backends in a child process (this
//! example re-executed with `backends`): a TCP listener on 0.0.0.0 for the steady
//! endpoints' tcp probes, each to its own address 127.10.Y.Z (the whole of 127/8 is
//! loopback), and an HTTP listener on 0.0.0.0 for the flapping ones, which answers 200 and
//! 503 in turn to each destination address. Flapping probes have `tolerated_failures: 0`,
//! so every check changes their status. The server (`steerdns::server::Server`) runs in
//! this process with `cluster:` pointing at that etcd.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The counters read from etcd's `/metrics`.
const COUNTERS: [&str; 3] =
    ["etcd_mvcc_put_total", "etcd_mvcc_delete_total", "etcd_mvcc_txn_total"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("backends") {
        return backends();
    }
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (endpoints, interval, flapping, measure) =
        (num(0, 10_000) as usize, num(1, 10), num(2, 0) as usize, num(3, 60));
    let flapping = endpoints * flapping / 100;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("backends")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the backends process");
    let ports: Vec<u16> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .next()
        .expect("backend ports")
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &etcd.url(), &ports, endpoints, flapping, interval);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(run(dir.path(), &etcd, endpoints, flapping, interval, measure));
    drop(etcd);
    let _ = child.kill();
    let _ = child.wait();
}

async fn run(
    dir: &Path,
    etcd: &Etcd,
    endpoints: usize,
    flapping: usize,
    interval: u64,
    measure: u64,
) {
    let before = etcd.counters();
    let started = Instant::now();
    let server = steerdns::server::Server::start(&dir.join("steerdns.yaml")).await.unwrap();
    println!(
        "{endpoints} endpoints ({flapping} flapping), interval {interval}s: started in {:?}",
        started.elapsed()
    );
    // Start-up: every probe writes `checking`, then its first result's status, within the
    // first interval; two more intervals let the writes settle.
    let warm = Duration::from_secs(2 * interval + 5);
    tokio::time::sleep(warm).await;
    let warmed = etcd.counters();
    let online = online(&server);
    println!(
        "start-up burst (first {:.0}s): {}; endpoints online {online}/{endpoints}",
        warm.as_secs_f64(),
        describe(&before, &warmed)
    );
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(measure)).await;
    let after = etcd.counters();
    let secs = t0.elapsed().as_secs_f64();
    let per_minute: Vec<f64> =
        (0..COUNTERS.len()).map(|i| (after[i] - warmed[i]) * 60.0 / secs).collect();
    println!(
        "steady state over {secs:.1}s, per minute: puts {:.0}, deletes {:.0}, txns {:.0}; probe runs {}",
        per_minute[0],
        per_minute[1],
        per_minute[2],
        server.prober().stats().runs
    );
    server.shutdown().await;
}

fn online(server: &steerdns::server::Server) -> usize {
    use steerdns::model::health::Status;
    let states = server.prober().endpoint_states();
    states.iter().filter(|s| s.status == Status::Online).count()
}

fn describe(from: &[f64], to: &[f64]) -> String {
    let parts: Vec<String> =
        COUNTERS.iter().enumerate().map(|(i, c)| format!("{c} +{:.0}", to[i] - from[i])).collect();
    parts.join(", ")
}

/// The target address of endpoint `i`: 127.10.Y.Z with Y, Z in 1..=250.
fn target(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 10, (i / 250 + 1) as u8, (i % 250 + 1) as u8)
}

/// 100 endpoints per profile; the first `flapping` are HTTP probes of the alternating
/// listener, the others tcp probes of the accepting one.
fn write_config(
    dir: &Path,
    etcd: &str,
    ports: &[u16],
    endpoints: usize,
    flapping: usize,
    interval: u64,
) {
    assert!(endpoints <= 250 * 250, "at most 62500 endpoints");
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(
        dir.join("steerdns.yaml"),
        format!(
            "listen: {{ dns: [\"127.0.0.1:0\"] }}\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: {{ rname: h.example.test. }}\n\
             cluster:\n  node: bench-1\n  etcd:\n    endpoints: [\"{etcd}\"]\n"
        ),
    )
    .unwrap();
    let timeout = (interval * 1000 / 2).min(2000);
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(dir.join("profiles/load.yaml")).unwrap());
    for i in 0..endpoints {
        if i % 100 == 0 {
            if i > 0 {
                writeln!(f, "---").unwrap();
            }
            write!(f, "name: p{}\nrouting: priority\nendpoints:\n", i / 100).unwrap();
        }
        let monitor = if i < flapping {
            format!(
                "{{ protocol: http, port: {}, interval: {interval}s, timeout: {timeout}ms, tolerated_failures: 0 }}",
                ports[1]
            )
        } else {
            format!(
                "{{ protocol: tcp, port: {}, interval: {interval}s, timeout: {timeout}ms }}",
                ports[0]
            )
        };
        writeln!(f, "  - {{ name: e{}, target: {}, monitor: {monitor} }}", i % 100, target(i))
            .unwrap();
    }
}

/// The child process: a listener that accepts (tcp probes) and one that answers 200 and
/// 503 in turn to each destination address (http probes); their ports on stdout.
fn backends() {
    // Gone with the parent: its end of stdin closes when it exits, however it exits.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let tcp = TcpListener::bind("0.0.0.0:0").await.unwrap();
        let http = TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = |l: &TcpListener| l.local_addr().unwrap().port();
        println!("{} {}", port(&tcp), port(&http));
        std::io::stdout().flush().unwrap();
        tokio::spawn(async move {
            while let Ok((conn, _)) = tcp.accept().await {
                drop(conn);
            }
        });
        let mut turns: std::collections::HashMap<std::net::IpAddr, bool> = Default::default();
        while let Ok((mut conn, _)) = http.accept().await {
            let local = conn.local_addr().unwrap().ip();
            let fail = turns.entry(local).or_insert(true);
            *fail = !*fail;
            let status = if *fail { "503 Unavailable" } else { "200 OK" };
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = conn.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK"
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
}

/// A single-member etcd on free loopback ports, killed on drop.
struct Etcd {
    child: Child,
    client: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Etcd {
    fn start() -> Etcd {
        let bin = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("etcd is not installed (Debian package etcd-server)");
        let free = || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let (client, peer) = (free(), free());
        let dir = tempfile::tempdir().unwrap();
        let (c, p) = (format!("http://{client}"), format!("http://{peer}"));
        let child = Command::new(bin)
            .args(["--name", "bench", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
            .args(["--listen-peer-urls", &p, "--initial-advertise-peer-urls", &p])
            .args(["--initial-cluster", &format!("bench={p}")])
            .args(["--log-level", "warn", "--logger", "zap"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        let etcd = Etcd { child, client, _dir: dir };
        let started = Instant::now();
        while etcd.get("/health").is_none_or(|b| !b.contains("true")) {
            assert!(started.elapsed() < Duration::from_secs(20), "etcd did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        etcd
    }

    fn url(&self) -> String {
        format!("http://{}", self.client)
    }

    /// The body of a GET, or `None` when etcd does not answer.
    fn get(&self, path: &str) -> Option<String> {
        let mut s = TcpStream::connect_timeout(&self.client, Duration::from_secs(1)).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.client).ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        text.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
    }

    /// The values of `COUNTERS` now.
    fn counters(&self) -> Vec<f64> {
        let text = self.get("/metrics").expect("etcd /metrics");
        COUNTERS
            .iter()
            .map(|name| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
                    .unwrap_or(0.0)
            })
            .collect()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
