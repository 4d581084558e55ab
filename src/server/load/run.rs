//! The control loop: every `load.interval`, read every pulled feed at once (each read
//! bounded by `load.timeout` and the body limit; at most `MAX_READS` connections open,
//! one per feed, since a step waits for all its reads before the next starts), take the
//! pushed loads, step every endpoint (`plan`) and hand the map to the publisher.
//!
//! The loop idles while the running configuration has no load feed, and follows reloads:
//! each step reads the snapshot running then. Readings age by the loop's clock (tokio's).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::plan::{self, Pulled, PulledReads};
use super::publisher::{LoadPublisher, LocalPublisher};
use super::{LoadMap, Loads};
use crate::model::Snapshot;
use crate::model::load::{FeedSource, LoadRules, MetricSelector};
use crate::model::snapshot::ProbeSource;
use crate::probe::pull::{Extract, FeedError, FeedUrl, Reader};
use crate::server::control::Control;

/// The most feed reads in flight at once.
pub const MAX_READS: usize = 256;

/// One pulled feed to read, owned so that its read can run as a task.
struct Job {
    key: (String, String),
    url: Result<FeedUrl, FeedError>,
    what: What,
}

enum What {
    Number,
    Pointer(String),
    Metric(MetricSelector),
}

impl What {
    fn extract(&self) -> Extract<'_> {
        match self {
            What::Number => Extract::Number,
            What::Pointer(p) => Extract::Pointer(p),
            What::Metric(m) => Extract::Metric { name: &m.name, labels: &m.labels },
        }
    }
}

/// The pulled feeds of `snap`, with their URLs parsed.
fn jobs(snap: &Snapshot) -> Vec<Arc<Job>> {
    plan::feeds(snap)
        .filter_map(|(profile, endpoint, feed)| {
            let (url, what, accept) = match &feed.source {
                FeedSource::Pushed => return None,
                FeedSource::Json { url, pointer } => {
                    let what = pointer.clone().map_or(What::Number, What::Pointer);
                    (url, what, "application/json")
                }
                FeedSource::Prometheus { url, metric } => {
                    (url, What::Metric(metric.clone()), "text/plain;version=0.0.4")
                }
            };
            let key = (profile.to_string(), endpoint.to_string());
            Some(Arc::new(Job { key, url: FeedUrl::parse(url, accept), what }))
        })
        .collect()
}

/// Runs the loop until `cancel` fires.
pub async fn run(control: Arc<Control>, cancel: CancellationToken) {
    let loads = control.load.clone();
    let local: Arc<dyn LoadPublisher> =
        Arc::new(LocalPublisher { loads: loads.clone(), shared: control.shared.clone() });
    let mut served = control.served();
    let mut stepper = Stepper::new(loads.clone());
    loop {
        let snap = control.snapshot();
        let Some(rules) = snap.load_rules.clone() else {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = served.changed() => if changed.is_err() { return },
            }
            continue;
        };
        let started = Instant::now();
        let publisher = loads.publisher().unwrap_or_else(|| local.clone());
        if publisher.leads() {
            let map = tokio::select! {
                _ = cancel.cancelled() => return,
                map = stepper.step(&snap, &rules) => map,
            };
            publisher.publish(Arc::new(map)).await;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep_until(started + rules.interval) => {}
        }
    }
}

/// What the loop keeps from one step to the next.
pub struct Stepper {
    loads: Arc<Loads>,
    reader: Arc<Reader>,
    slots: Arc<Semaphore>,
    /// The generation `jobs` were made for.
    generation: Option<u64>,
    jobs: Vec<Arc<Job>>,
    /// Each pulled feed's last good reading and whether its last read failed.
    last_ok: HashMap<(String, String), (f64, Instant, SystemTime)>,
    failing: HashMap<(String, String), String>,
}

impl Stepper {
    pub fn new(loads: Arc<Loads>) -> Stepper {
        Stepper {
            loads,
            reader: Arc::new(Reader::default()),
            slots: Arc::new(Semaphore::new(MAX_READS)),
            generation: None,
            jobs: Vec::new(),
            last_ok: HashMap::new(),
            failing: HashMap::new(),
        }
    }

    /// Reads every feed of `snap` and steps every endpoint: the next map.
    pub async fn step(&mut self, snap: &Snapshot, rules: &LoadRules) -> LoadMap {
        if self.generation != Some(snap.generation) {
            self.follow(snap);
        }
        let reads = self.read_all(rules, snap.probe_source).await;
        let prev = self.loads.current();
        let number = prev.step + 1;
        let (now, wall) = (Instant::now(), SystemTime::now());
        plan::next_map(
            plan::feeds(snap),
            rules,
            &prev,
            &reads,
            &self.loads.pushed,
            number,
            now,
            wall,
        )
    }

    /// A new configuration: its feeds, and nothing kept of endpoints it no longer has.
    fn follow(&mut self, snap: &Snapshot) {
        self.generation = Some(snap.generation);
        self.jobs = jobs(snap);
        let pulled: std::collections::HashSet<&(String, String)> =
            self.jobs.iter().map(|j| &j.key).collect();
        self.last_ok.retain(|k, _| pulled.contains(k));
        self.failing.retain(|k, _| pulled.contains(k));
        let pushed: std::collections::HashSet<(&str, &str)> = plan::feeds(snap)
            .filter(|(_, _, f)| f.source == FeedSource::Pushed)
            .map(|(p, e, _)| (p, e))
            .collect();
        self.loads.pushed.retain(|p, e| pushed.contains(&(p, e)));
    }

    /// Reads every pulled feed, connecting from `sources` (`probe.source_address`), as
    /// health feeds do.
    async fn read_all(&mut self, rules: &LoadRules, sources: ProbeSource) -> PulledReads {
        let mut tasks = JoinSet::new();
        for job in &self.jobs {
            let (job, reader, slots) = (job.clone(), self.reader.clone(), self.slots.clone());
            let timeout = rules.timeout;
            tasks.spawn(async move {
                let _slot = slots.acquire_owned().await;
                let got = match &job.url {
                    Ok(url) => reader.read(url, job.what.extract(), timeout, sources).await,
                    Err(e) => Err(e.clone()),
                };
                (job, got)
            });
        }
        let mut reads = PulledReads::with_capacity(self.jobs.len());
        while let Some(done) = tasks.join_next().await {
            let Ok((job, got)) = done else { continue };
            let now = match got {
                Ok(load) => {
                    self.last_ok.insert(job.key.clone(), (load, Instant::now(), SystemTime::now()));
                    if self.failing.remove(&job.key).is_some() {
                        tracing::info!(profile = %job.key.0, endpoint = %job.key.1, "load feed read again");
                    }
                    Ok(load)
                }
                Err(e) => {
                    self.loads.count_error(&job.key.0, &job.key.1, e.reason());
                    let text = e.to_string();
                    if self.failing.insert(job.key.clone(), text.clone()).as_ref() != Some(&text) {
                        tracing::warn!(profile = %job.key.0, endpoint = %job.key.1, error = %text, "cannot read a load feed");
                    }
                    Err(text)
                }
            };
            let last_ok = self.last_ok.get(&job.key).copied();
            reads.insert(job.key.clone(), Pulled { now, last_ok });
        }
        reads
    }
}
