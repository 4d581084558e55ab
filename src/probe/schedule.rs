//! The run loop of one probe: a tokio task that checks once per interval.
//!
//! Each distinct probe is its own task with its own hard timeout (shorter than the interval,
//! as validation guarantees), so a hanging backend only ever holds up its own probe and a
//! probe can never overlap itself. The first run is put at a stable, hash-derived offset
//! inside the interval so thousands of probes started together do not fire in one burst,
//! rounded up to a 10 ms grid shared by all probes so those due together share one wakeup;
//! a probe kept across a reload keeps its phase because its task simply keeps running.

use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::check::{Check, Reason};
use super::live::Live;
use super::plan::ProbeKey;
use crate::model::Protocol;

/// Something a probe task runs once per interval (the real `Check`, or a fake in tests).
pub trait Run: Send + Sync + 'static {
    fn run(&self) -> impl Future<Output = Result<(), Reason>> + Send + '_;
}

impl Run for Check {
    fn run(&self) -> impl Future<Output = Result<(), Reason>> + Send + '_ {
        Check::run(self)
    }
}

/// Runs start on a grid of this step from the prober's start: probes due within one step
/// run together, so the runtime wakes once per step instead of once per probe (at 1000
/// runs a second, most of the idle-to-busy switches), while a step is still short enough
/// to spread thousands of probes evenly. Intervals of whole 10 ms (any whole seconds) keep
/// later runs on the grid.
pub const GRID: Duration = Duration::from_millis(10);

/// Where in its interval a probe first runs: a hash of its key, so the spread is uniform
/// over many probes and a given probe always gets the same offset from its start.
fn first_offset(key: &ProbeKey) -> Duration {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    let nanos = key.monitor.interval.as_nanos().max(1);
    Duration::from_nanos((u128::from(h.finish()) % nanos) as u64)
}

/// When a probe starting now first runs: `first_offset` from now, moved up to the next
/// point of the grid that starts at `epoch`.
pub fn first_run(epoch: Instant, key: &ProbeKey) -> Instant {
    let due = Instant::now() + first_offset(key);
    let step = GRID.as_nanos();
    let since = due.saturating_duration_since(epoch).as_nanos().div_ceil(step) * step;
    epoch + Duration::from_nanos(u64::try_from(since).unwrap_or(u64::MAX))
}

/// Upper bounds (seconds) of the probe duration histogram's buckets, +Inf last.
pub const DURATION_BUCKETS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, f64::INFINITY];

/// Counters shared by every probe task: how many runs, how late they started, and how
/// long they took by protocol (http, https, tcp).
#[derive(Debug, Default)]
pub struct Stats {
    runs: AtomicU64,
    missed: AtomicU64,
    lag_sum_us: AtomicU64,
    max_lag_us: AtomicU64,
    durations: [Durations; 9],
    skipped_local: AtomicU64,
    /// When a skipped run was last logged (ms since the Unix epoch), for the rate limit.
    skipped_logged_ms: AtomicU64,
}

/// Skipped runs are logged at most once in this long: a host out of file descriptors
/// skips every probe, and a line per probe would flood the log it needs to be read in.
const SKIPPED_LOG_EVERY: Duration = Duration::from_secs(10);

/// A histogram of check durations.
#[derive(Debug, Default)]
struct Durations {
    sum_us: AtomicU64,
    buckets: [AtomicU64; DURATION_BUCKETS.len()],
}

/// A reading of one protocol's duration histogram: sum (seconds), count, and the count
/// in each bucket of `DURATION_BUCKETS` (not cumulative).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DurationHistogram {
    pub protocol: &'static str,
    pub sum: f64,
    pub count: u64,
    pub buckets: Vec<(f64, u64)>,
}

/// A reading of `Stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProberStats {
    /// Distinct probes running.
    pub probes: usize,
    /// Checks started since the prober started.
    pub runs: u64,
    /// Scheduled runs skipped because the probe was late by a whole interval or more.
    pub missed: u64,
    /// Sum over runs of how late each started after its scheduled time.
    pub lag_sum: Duration,
    /// The latest start of any run since the previous reading.
    pub max_lag: Duration,
    /// Runs whose result was discarded because this host lacked a resource (file
    /// descriptors, buffers, local ports, memory): no observation of the endpoint.
    pub skipped_local: u64,
}

impl Stats {
    fn ran(&self, lag: Duration, interval: Duration) {
        let us = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.lag_sum_us.fetch_add(us, Ordering::Relaxed);
        self.max_lag_us.fetch_max(us, Ordering::Relaxed);
        let missed = lag.as_nanos() / interval.as_nanos().max(1);
        if missed > 0 {
            self.missed.fetch_add(u64::try_from(missed).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }

    fn took(&self, protocol: Protocol, d: Duration) {
        let h = &self.durations[protocol_index(protocol)];
        h.sum_us.fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        let secs = d.as_secs_f64();
        let i =
            DURATION_BUCKETS.iter().position(|b| secs <= *b).unwrap_or(DURATION_BUCKETS.len() - 1);
        h.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a run that found this host short of resources, and says whether to log it
    /// (the first one in `SKIPPED_LOG_EVERY`).
    fn skipped(&self) -> bool {
        self.skipped_local.fetch_add(1, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let last = self.skipped_logged_ms.load(Ordering::Relaxed);
        let every = u64::try_from(SKIPPED_LOG_EVERY.as_millis()).unwrap_or(u64::MAX);
        (last == 0 || now.saturating_sub(last) >= every)
            && self
                .skipped_logged_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    pub fn skipped_local(&self) -> u64 {
        self.skipped_local.load(Ordering::Relaxed)
    }

    pub fn durations(&self) -> Vec<DurationHistogram> {
        [
            Protocol::Http,
            Protocol::Https,
            Protocol::Tcp,
            Protocol::Dns,
            Protocol::Udp,
            Protocol::Icmp,
        ]
        .into_iter()
        .map(|p| {
            let h = &self.durations[protocol_index(p)];
            let buckets: Vec<(f64, u64)> = DURATION_BUCKETS
                .iter()
                .zip(&h.buckets)
                .map(|(b, n)| (*b, n.load(Ordering::Relaxed)))
                .collect();
            DurationHistogram {
                protocol: p.as_str(),
                sum: h.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
                count: buckets.iter().map(|(_, n)| n).sum(),
                buckets,
            }
        })
        .collect()
    }

    pub fn read(&self, probes: usize) -> ProberStats {
        ProberStats {
            probes,
            runs: self.runs.load(Ordering::Relaxed),
            missed: self.missed.load(Ordering::Relaxed),
            lag_sum: Duration::from_micros(self.lag_sum_us.load(Ordering::Relaxed)),
            max_lag: Duration::from_micros(self.max_lag_us.swap(0, Ordering::Relaxed)),
            skipped_local: self.skipped_local(),
        }
    }
}

fn protocol_index(p: Protocol) -> usize {
    match p {
        Protocol::Http => 0,
        Protocol::Https => 1,
        // pushed and file: never probed, so they are counted nowhere in practice.
        Protocol::Tcp | Protocol::Pushed | Protocol::File => 2,
        Protocol::Dns => 3,
        Protocol::Udp => 4,
        Protocol::Icmp => 5,
        Protocol::Json => 6,
        Protocol::Prometheus => 7,
        Protocol::Grpc => 8,
    }
}

/// Runs `check` every interval from `first` on, recording each result, until cancelled.
pub async fn run<R: Run>(
    live: Arc<Live>,
    check: R,
    first: Instant,
    cancel: CancellationToken,
    stats: Arc<Stats>,
) {
    let (interval, timeout) = (live.key.monitor.interval, live.key.monitor.timeout);
    let mut ticks = tokio::time::interval_at(first, interval);
    // Late (an overloaded runtime): run once now and keep the original phase.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        let due = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            due = ticks.tick() => due,
        };
        let started = Instant::now();
        stats.ran(started.saturating_duration_since(due), interval);
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            r = tokio::time::timeout(timeout, check.run()) => r.unwrap_or(Err(Reason::Timeout(timeout))),
        };
        let took = started.elapsed();
        stats.took(live.key.monitor.protocol, took);
        match result {
            // Out of descriptors or ports here says nothing about the endpoint: recording
            // it as a failure would move traffic away from a healthy endpoint.
            Err(r) if r.is_local() => {
                if stats.skipped() {
                    tracing::warn!(
                        target = %live.key.target,
                        reason = %r,
                        skipped = stats.skipped_local(),
                        "probe skipped: this host is short of resources; the endpoint keeps its status"
                    );
                }
            }
            result => live.record(result, took),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::model::Monitor;
    use crate::model::health::{HealthTable, HealthView, Status};
    use crate::probe::endpoint::alone;
    use crate::probe::live::Users;
    use crate::probe::plan::ProbeTarget;

    fn key(last_octet: u8, interval: Duration, timeout: Duration) -> ProbeKey {
        ProbeKey {
            target: ProbeTarget::Ip([192, 0, 2, last_octet].into()),
            monitor: Monitor {
                name: "tcp".into(),
                protocol: Protocol::Tcp,
                port: 80,
                path: "/".into(),
                interval,
                timeout,
                tolerated_failures: 1,
                expected_status: vec![(200, 299)],
                headers: vec![],
                body_contains: None,
                tls_verify: false,
                external: None,
                params: Default::default(),
            },
        }
    }

    /// A fake check: records when it ran, then answers `result` after `delay` (or never).
    struct Fake {
        runs: Arc<Mutex<Vec<Instant>>>,
        delay: Option<Duration>,
        result: Result<(), Reason>,
    }

    impl Run for Fake {
        fn run(&self) -> impl Future<Output = Result<(), Reason>> + Send + '_ {
            self.runs.lock().unwrap().push(Instant::now());
            async move {
                match self.delay {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
                self.result.clone()
            }
        }
    }

    fn spawn(
        key: ProbeKey,
        delay: Option<Duration>,
        result: Result<(), Reason>,
        cancel: &CancellationToken,
    ) -> (Arc<Live>, Arc<HealthTable>, Arc<Mutex<Vec<Instant>>>) {
        let table = Arc::new(HealthTable::new([Status::Checking]));
        let e = alone(&key.monitor, table.clone(), Arc::default());
        let live = Arc::new(Live::new(key, Users { list: vec![(e.clone(), 0)] }));
        e.ready();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let fake = Fake { runs: runs.clone(), delay, result };
        let first = first_run(Instant::now(), &live.key);
        let stats = Arc::new(Stats::default());
        tokio::spawn(run(live.clone(), fake, first, cancel.child_token(), stats));
        (live, table, runs)
    }

    #[test]
    fn first_runs_are_spread_over_the_interval() {
        let interval = Duration::from_secs(10);
        let mut buckets = [0usize; 10];
        for a in 0..=255u8 {
            for port in 0..8u16 {
                let mut k = key(a, interval, Duration::from_secs(1));
                k.monitor.port = 80 + port;
                let off = first_offset(&k);
                assert!(off < interval);
                buckets[off.as_secs() as usize] += 1;
            }
        }
        // 2048 probes over 10 one-second buckets: about 205 each; none may be far off.
        assert!(buckets.iter().all(|&n| (150..260).contains(&n)), "{buckets:?}");
        let k = key(1, interval, Duration::from_secs(1));
        assert_eq!(first_offset(&k), first_offset(&k.clone()), "stable for one key");
    }

    #[tokio::test(start_paused = true)]
    async fn first_runs_are_on_the_grid_of_the_epoch() {
        let epoch = Instant::now();
        tokio::time::advance(Duration::from_micros(12_345)).await;
        for a in 0..50u8 {
            let k = key(a, Duration::from_secs(10), Duration::from_secs(1));
            let first = first_run(epoch, &k);
            let due = Instant::now() + first_offset(&k);
            assert!(first >= due && first < due + GRID, "{first:?} vs {due:?}");
            assert_eq!((first - epoch).as_nanos() % GRID.as_nanos(), 0);
        }
    }

    /// Checks that run times follow offset + k * interval exactly: the tests run on tokio's
    /// paused clock, which jumps from timer to timer, so machine load cannot make them late.
    fn assert_on_schedule(
        runs: &[Instant],
        t0: Instant,
        off: Duration,
        interval: Duration,
        upto: Duration,
    ) {
        let due: Vec<Instant> =
            (0..100).map(|k| t0 + off + interval * k).take_while(|t| *t < t0 + upto).collect();
        let slack = Duration::from_millis(1);
        assert!(runs.len() + 1 >= due.len() && runs.len() <= due.len(), "{runs:?} vs {due:?}");
        for (run, due) in runs.iter().zip(&due) {
            assert!(*run >= *due && *run < *due + slack, "ran {run:?}, due {due:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn runs_at_offset_then_every_interval_and_a_hanging_probe_delays_nobody() {
        let cancel = CancellationToken::new();
        let (interval, timeout) = (Duration::from_millis(200), Duration::from_millis(50));
        let t0 = Instant::now();
        let quick = key(1, interval, timeout);
        let hang = key(2, interval, timeout);
        let (quick_off, hang_off) = (first_run(t0, &quick) - t0, first_run(t0, &hang) - t0);
        let (_, quick_table, quick_runs) =
            spawn(quick, Some(Duration::from_millis(5)), Ok(()), &cancel);
        let (hang_live, hang_table, hang_runs) = spawn(hang, None, Ok(()), &cancel);
        let upto = Duration::from_millis(1100);
        tokio::time::sleep_until(t0 + upto).await;
        cancel.cancel();

        assert_on_schedule(&quick_runs.lock().unwrap(), t0, quick_off, interval, upto);
        assert_on_schedule(&hang_runs.lock().unwrap(), t0, hang_off, interval, upto);
        assert_eq!(quick_table.status(0), Status::Online);
        // tolerated_failures 1: the second timeout degrades.
        assert_eq!(hang_table.status(0), Status::Degraded);
        let view = hang_live.view();
        assert_eq!(view.last.unwrap().reason.as_deref(), Some("timeout after 50ms"));
        assert_eq!(view.counts[3], view.counts.iter().sum::<u64>(), "all timeouts");
        let change = view.change.unwrap();
        assert_eq!((change.from, change.to), (Status::Checking, Status::Degraded));
        assert_eq!(change.reason, "timeout after 50ms");
    }

    /// A probe that only ever finds this host out of descriptors leaves its endpoint's
    /// status, results and failure count alone, and every such run is counted as skipped.
    #[tokio::test(start_paused = true)]
    async fn local_resource_failures_are_no_observation() {
        let cancel = CancellationToken::new();
        let k = key(4, Duration::from_millis(200), Duration::from_millis(50));
        let table = Arc::new(HealthTable::new([Status::Online]));
        let e = alone(&k.monitor, table.clone(), Arc::default());
        let live = Arc::new(Live::new(k, Users { list: vec![(e.clone(), 0)] }));
        e.ready();
        let emfile = Reason::Local("Too many open files (os error 24)".into());
        let runs = Arc::new(Mutex::new(Vec::new()));
        let fake =
            Fake { runs: runs.clone(), delay: Some(Duration::from_millis(1)), result: Err(emfile) };
        let stats = Arc::new(Stats::default());
        let first = first_run(Instant::now(), &live.key);
        tokio::spawn(run(live.clone(), fake, first, cancel.child_token(), stats.clone()));
        tokio::time::sleep(Duration::from_millis(1100)).await;
        cancel.cancel();

        let n = runs.lock().unwrap().len() as u64;
        assert!(n >= 5, "ran {n} times");
        assert_eq!(stats.read(1).skipped_local, n);
        // Checking until a real result; never degraded, however many runs were skipped.
        assert_eq!(live.view().status, Status::Checking);
        assert!(live.view().last.is_none());
        assert_eq!(live.view().counts.iter().sum::<u64>(), 0);
        assert_eq!(table.status(0), Status::Checking);
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_stops_a_probe_in_the_middle_of_a_check() {
        let cancel = CancellationToken::new();
        let k = key(3, Duration::from_millis(400), Duration::from_millis(300));
        let off = first_run(Instant::now(), &k) - Instant::now();
        let (live, _, runs) = spawn(k, None, Ok(()), &cancel);
        tokio::time::sleep(off + Duration::from_millis(150)).await;
        assert_eq!(runs.lock().unwrap().len(), 1);
        cancel.cancel();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(runs.lock().unwrap().len(), 1);
        assert!(live.view().last.is_none(), "the cancelled run records nothing");
    }
}
