//! What an override change costs against a reload, on a configuration made by
//! `bench/gen_profiles.py`: one drain (or undrain) through `Control::change_override`, as the
//! admin API makes it (check, new snapshot, swap, probe hand-over, counters), and
//! `Control::reload` with nothing changed, for comparison. Changes are made one after the
//! other, as an operator's script would.
//!
//! `python3 bench/gen_profiles.py 10000 /tmp/p10k && cargo run --release --example override_rebuild -- /tmp/p10k/steerdns.yaml`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use steerdns::config;
use steerdns::model::events::Events;
use steerdns::probe::Prober;
use steerdns::server::control::Control;
use steerdns::server::dnstap::QueryLog;
use steerdns::server::overrides::Change;
use steerdns::server::reloader::{Reloader, Trigger};
use steerdns::wire::name::WireName;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() {
    let path: PathBuf =
        std::env::args().nth(1).expect("usage: override_rebuild STEERDNS_YAML").into();
    let t = Instant::now();
    let loaded = config::load(&path, None).expect("the configuration loads");
    println!(
        "load: {} profiles, {} endpoints in {:?}",
        loaded.snapshot.profiles.len(),
        loaded.snapshot.endpoint_count(),
        t.elapsed()
    );
    let with_a =
        loaded.snapshot.profiles.iter().filter(|p| p.endpoints.iter().any(|e| e.name == "a"));
    let names: Vec<String> = with_a.map(|p| p.name.clone()).collect();
    let events = Arc::new(Events::with_capacity(1000));
    let prober =
        Arc::new(Prober::start(&loaded.snapshot, CancellationToken::new(), events.clone()));
    let query_log = Arc::new(QueryLog::start(None).expect("no query log"));
    let control = Arc::new(Control::new(path.clone(), loaded, prober, events, query_log, None));
    let reloader = Reloader::new(control.clone());
    // Changes first: a change waits for the previous swap's old snapshot to be freed,
    // which after a reload is the whole previous configuration.
    let (mut changes, mut cpu) = (Vec::new(), Vec::new());
    let picked = names.iter().cycle().step_by(97).take(10);
    for (name, change) in picked.flat_map(|name| [(name, Change::Drain), (name, Change::Undrain)]) {
        let profile = WireName::parse(name).expect("a profile name");
        let (t, c) = (Instant::now(), thread_cpu());
        control.change_override(&profile, "a", change, "bench").expect("the change applies");
        changes.push(t.elapsed());
        cpu.push(thread_cpu() - c);
    }
    let mut reloads = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        reloader.reload_blocking(Trigger::Request).expect("reload");
        reloads.push(t.elapsed());
    }
    println!("one drain or undrain:    {}", summary(&mut changes));
    println!("  its CPU (this thread): {}", summary(&mut cpu));
    println!("reload, nothing changed: {}", summary(&mut reloads));
}

/// CPU time of the calling thread: on a busy machine, the work without the waits for a core.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `t` is.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn summary(d: &mut [Duration]) -> String {
    d.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "median {:.2} ms, min {:.2} ms, max {:.2} ms ({} runs)",
        ms(d[d.len() / 2]),
        ms(d[0]),
        ms(d[d.len() - 1]),
        d.len()
    )
}
