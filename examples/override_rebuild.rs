//! What an override change costs against a reload: times `config::rebuild` (the running
//! configuration with one more endpoint drained, no file read) and `config::load` with the
//! previous load (a reload with nothing changed) on a configuration made by
//! `bench/gen_profiles.py`.
//!
//! `python3 bench/gen_profiles.py 10000 /tmp/p10k && cargo run --release --example override_rebuild -- /tmp/p10k/steerdns.yaml`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use steerdns::config::{self, Override, Overrides};

fn main() {
    let path: PathBuf =
        std::env::args().nth(1).expect("usage: override_rebuild STEERDNS_YAML").into();
    let t = Instant::now();
    let mut loaded = config::load(&path, None).expect("the configuration loads");
    println!(
        "load: {} profiles, {} endpoints in {:?}",
        loaded.snapshot.profiles.len(),
        loaded.snapshot.endpoint_count(),
        t.elapsed()
    );
    let with_a =
        loaded.snapshot.profiles.iter().filter(|p| p.endpoints.iter().any(|e| e.name == "a"));
    let names: Vec<String> = with_a.map(|p| p.name.clone()).collect();
    let mut overrides = Overrides::default();
    let (mut rebuilds, mut reloads) = (Vec::new(), Vec::new());
    for (i, name) in names.iter().cycle().step_by(97).take(9).enumerate() {
        overrides.set(name, "a", Override { drained: true, weight: None });
        let t = Instant::now();
        let next = config::rebuild(loaded.previous(), &overrides);
        rebuilds.push(t.elapsed());
        assert!(next.dropped.is_empty(), "{:?}", next.dropped);
        drop(std::mem::replace(&mut loaded, next));
        if i % 3 == 0 {
            let t = Instant::now();
            let next = config::load(&path, Some(loaded.previous())).expect("reload");
            reloads.push(t.elapsed());
            drop(next);
        }
    }
    println!("rebuild with one more drain: {}", summary(&mut rebuilds));
    println!("reload, nothing changed:     {}", summary(&mut reloads));
}

fn summary(d: &mut [Duration]) -> String {
    d.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "median {:.1} ms, min {:.1} ms, max {:.1} ms ({} runs)",
        ms(d[d.len() / 2]),
        ms(d[0]),
        ms(d[d.len() - 1]),
        d.len()
    )
}
