//! Load measurement of the health prober: N distinct probes at one interval against local
//! listeners, reporting the prober process's CPU use and whether probes keep their schedule.
//!
//! The listeners run in a child process (this example re-executed with `backends`), so the
//! CPU figures are the prober's alone.
//!
//! ```text
//! cargo run --release --example probe_load -- tcp  [probes=10000] [interval_s=10] [measure_s=60]
//! cargo run --release --example probe_load -- http [probes=10000] [interval_s=10] [measure_s=60]
//! ```
//!
//! tcp: 100 listeners (10 addresses 127.0.2.1-10 x 10 ports); probes are made distinct by
//! listener, `timeout` and `tolerated_failures`, as distinct probes are in the key.
//! http: one HTTP/1.1 server on 127.0.0.1; probes are made distinct by `path`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use steerdns::model::health::Status;
use steerdns::probe::Prober;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const ADDRS: u8 = 10;
const PORTS_PER_ADDR: usize = 10;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("tcp", String::as_str).to_string();
    if mode == "backends" {
        return backends(args.get(1).map_or("tcp", String::as_str));
    }
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (probes, interval, measure) = (num(1, 10_000) as usize, num(2, 10), num(3, 60));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["backends", &mode])
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
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(measure_prober(&mode, &ports, probes, interval, measure));
    let _ = child.kill();
    let _ = child.wait();
}

/// Writes a configuration of `probes` endpoints (100 per profile).
fn write_config(dir: &std::path::Path, mode: &str, ports: &[u16], probes: usize, interval: u64) {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(
        dir.join("steerdns.yaml"),
        "listen: { dns: [\"127.0.0.1:0\"] }\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: { rname: h.example.test. }\n",
    )
    .unwrap();
    let mut f = std::fs::File::create(dir.join("profiles/load.yaml")).unwrap();
    for i in 0..probes {
        if i % 100 == 0 {
            if i > 0 {
                writeln!(f, "---").unwrap();
            }
            let monitor = match mode {
                "http" => format!(
                    "{{ protocol: http, port: {}, interval: {interval}s, timeout: 2s }}",
                    ports[0]
                ),
                _ => format!("{{ protocol: tcp, interval: {interval}s }}"),
            };
            write!(f, "name: p{}\nrouting: priority\nmonitor: {monitor}\nendpoints:\n", i / 100)
                .unwrap();
        }
        let (target, monitor) = match mode {
            "http" => ("127.0.0.1".to_string(), format!("{{ path: /p/{i} }}")),
            _ => {
                let listener = i % ports.len();
                let variant = i / ports.len();
                let addr = format!("127.0.2.{}", listener / PORTS_PER_ADDR + 1);
                let monitor = format!(
                    "{{ port: {}, timeout: {}ms, tolerated_failures: {} }}",
                    ports[listener],
                    1000 + (variant / 10) * 10,
                    variant % 10
                );
                (addr, monitor)
            }
        };
        writeln!(f, "  - {{ name: e{}, target: {target}, monitor: {monitor} }}", i % 100).unwrap();
    }
}

async fn measure_prober(mode: &str, ports: &[u16], probes: usize, interval: u64, measure: u64) {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), mode, ports, probes, interval);
    let t = Instant::now();
    let snap = steerdns::config::load(&dir.path().join("steerdns.yaml"), None).unwrap().snapshot;
    println!("config: {} endpoints loaded in {:?}", snap.endpoint_count(), t.elapsed());
    let cancel = CancellationToken::new();
    let t = Instant::now();
    let prober = Prober::start(&snap, cancel.clone(), Default::default());
    println!("prober: {} distinct probes started in {:?}", prober.stats().probes, t.elapsed());

    // Warm up: every probe has run at least once after one interval.
    tokio::time::sleep(Duration::from_secs(interval + 2)).await;
    let online = prober.endpoint_states().iter().filter(|s| s.status == Status::Online).count();
    println!("after warm-up: {online} of {probes} endpoints online");
    let _ = prober.stats(); // reset max_lag
    let (cpu0, wall0, s0) = (cpu_time(), Instant::now(), prober.stats());
    let mut worst = Duration::ZERO;
    for _ in 0..measure / interval.max(1) {
        tokio::time::sleep(Duration::from_secs(interval.max(1))).await;
        worst = worst.max(prober.stats().max_lag);
    }
    let (cpu1, wall, s1) = (cpu_time(), wall0.elapsed(), prober.stats());
    worst = worst.max(s1.max_lag);
    let runs = s1.runs - s0.runs;
    let cpu = cpu1 - cpu0;
    let states = prober.endpoint_states();
    let online = states.iter().filter(|s| s.status == Status::Online).count();
    let reasons: std::collections::BTreeMap<String, usize> = states
        .iter()
        .filter_map(|s| s.last_probe.as_ref()?.reason.clone())
        .fold(Default::default(), |mut m, r| {
            *m.entry(r).or_default() += 1;
            m
        });
    println!(
        "measured {:.1}s: {runs} runs ({:.0}/s, expected {:.0}/s), CPU {:.3}s = {:.1}% of one core, \
         mean lag {:?}, max lag {worst:?}, missed runs {}, online {online}/{probes}, failures {reasons:?}, max RSS {} MiB",
        wall.as_secs_f64(),
        runs as f64 / wall.as_secs_f64(),
        probes as f64 / interval as f64,
        cpu.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        (s1.lag_sum - s0.lag_sum) / u32::try_from(runs.max(1)).unwrap_or(u32::MAX),
        s1.missed - s0.missed,
        max_rss_mib(),
    );
    cancel.cancel();
    prober.wait().await;
}

fn rusage() -> libc::rusage {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid starting value.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    }
}

/// User plus system CPU time of this process.
fn cpu_time() -> Duration {
    let ru = rusage();
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn max_rss_mib() -> i64 {
    rusage().ru_maxrss / 1024
}

/// The child process: listeners that accept (tcp) or answer 200 (http), ports on stdout.
fn backends(mode: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut listeners = Vec::new();
        if mode == "http" {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        } else {
            for a in 1..=ADDRS {
                for _ in 0..PORTS_PER_ADDR {
                    listeners.push(TcpListener::bind((format!("127.0.2.{a}"), 0)).await.unwrap());
                }
            }
        }
        let ports: Vec<String> =
            listeners.iter().map(|l| l.local_addr().unwrap().port().to_string()).collect();
        println!("{}", ports.join(" "));
        std::io::stdout().flush().unwrap();
        let http = mode == "http";
        for l in listeners {
            tokio::spawn(async move {
                while let Ok((mut conn, _)) = l.accept().await {
                    if http {
                        tokio::spawn(async move {
                            let mut buf = [0u8; 2048];
                            let _ = conn.read(&mut buf).await;
                            let _ = conn
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK")
                                .await;
                        });
                    }
                }
            });
        }
        std::future::pending::<()>().await;
    });
}
