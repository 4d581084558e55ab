//! Query logs in dnstap: each logged exchange becomes an AUTH_QUERY and an AUTH_RESPONSE
//! message, written in Frame Streams to a file or to a reader's unix socket (`log.dnstap`).
//!
//! The query path only copies bytes into a ring no other producer writes to (`ring`): each
//! UDP worker has its own, and each TCP connection takes one from a fixed pool while it
//! lives. An exchange that does not fit is dropped and counted, so a slow or absent reader
//! never holds a query back and nothing is allocated per query. One writer thread
//! (`writer`) drains the rings, encodes the messages (`encode`) and frames them (`fstrm`),
//! reconnecting to a socket reader that went away. A reload that changes `log.dnstap`
//! starts, stops or replaces the writer (`query_log`).

mod encode;
mod fstrm;
mod query_log;
mod ring;
mod ring_pool;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use rand::RngCore;

use crate::model::snapshot::{Dnstap, DnstapOutput};
use ring::{Receiver, Sender};
use ring_pool::{RingPool, Taken};

pub use encode::Time;
pub use query_log::{QueryLog, TcpLog, UdpLog};
pub use ring::Exchange;

/// Bytes of each UDP ring: at 150,000 logged exchanges a second per UDP thread, about 50 ms
/// of them, far longer than the writer takes to come round (it is woken at a quarter full).
const RING_BYTES: usize = 2 << 20;

/// The TCP connections that can log at once, each with a ring of its own: a connection
/// past them counts its exchanges as dropped until one is free again.
pub const TCP_RINGS: usize = 64;

/// Bytes of each TCP ring: one connection answers one query per round trip, so a few
/// hundred exchanges are far more than it logs between two rounds of the writer.
const TCP_RING_BYTES: usize = 256 << 10;

/// How long a stopped writer keeps draining rings whose producers have not let go of them
/// yet (a UDP worker sees a replaced log at its next batch, a TCP connection at its next
/// query); later exchanges are counted as dropped.
const STOP_LIMIT: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum DnstapError {
    #[error("cannot open the dnstap file {path}: {source}")]
    File { path: std::path::PathBuf, source: std::io::Error },
    #[error("cannot start the dnstap writer thread: {0}")]
    Thread(std::io::Error),
}

/// What became of the dnstap messages, for `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Written to the file or socket.
    pub sent: AtomicU64,
    /// Dropped on the query path because the ring was full (or no TCP ring was free).
    pub dropped_queue_full: AtomicU64,
    /// Taken by the writer while it had no reader (or after the file failed) and lost.
    pub dropped_disconnected: AtomicU64,
}

/// What the query paths and one writer share.
struct Shared {
    /// The sampler's threshold (`Sampler::below`), changed in place by a reload.
    sample: SampleCell,
    stats: Arc<Stats>,
    /// Rings made since the writer last looked; it adopts them.
    new_rings: Mutex<Vec<Receiver>>,
    /// The TCP rings. A connection takes one (without a lock or a wait) at its first
    /// logged exchange and gives it back when it ends.
    tcp_pool: RingPool,
    /// A new `identity` and `version` for the writer's messages, set by a reload.
    encoder: Mutex<Option<(String, String)>>,
    /// Set once the writer should end: it drains what is left, at most until `stop_by`
    /// for rings still held, and closes.
    stop: AtomicBool,
    stop_by: OnceLock<Instant>,
    writer: OnceLock<Thread>,
}

impl Shared {
    fn wake(&self) {
        if let Some(t) = self.writer.get() {
            t.unpark();
        }
    }

    fn ring(&self, bytes: usize) -> Sender {
        let (tx, rx) = ring::ring(bytes);
        self.new_rings.lock().unwrap_or_else(|e| e.into_inner()).push(rx);
        tx
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    #[inline]
    fn sampled(&self, rng: &mut impl RngCore) -> bool {
        Sampler { below: self.sample.0.load(Ordering::Relaxed) }.take(rng)
    }

    fn count_dropped(&self, messages: u64) {
        self.stats.dropped_queue_full.fetch_add(messages, Ordering::Relaxed);
    }
}

/// The sampler's threshold on a cache line of its own: every logged-or-not decision reads
/// it, apart from the fields beside it that change (the mutexes, the stop flag).
#[repr(align(128))]
struct SampleCell(AtomicU64);

/// Which exchanges are logged: a fraction `sample` of them, drawn with the caller's RNG.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampler {
    /// An exchange is logged when a random u32 falls below this; above `u32::MAX`: every one.
    below: u64,
}

impl Sampler {
    /// `sample` in (0, 1].
    pub fn new(sample: f64) -> Sampler {
        let below = if sample < 1.0 { ((sample * 4_294_967_296.0) as u64).max(1) } else { ALL };
        Sampler { below }
    }

    #[inline]
    pub fn take(&self, rng: &mut impl RngCore) -> bool {
        self.below == ALL || u64::from(rng.next_u32()) < self.below
    }
}

/// `Sampler::below` for logging every exchange (no random draw).
const ALL: u64 = 1 << 32;

/// One running dnstap writer and the way in for the query paths.
pub struct Tap {
    shared: Arc<Shared>,
    config: Dnstap,
    thread: Option<JoinHandle<()>>,
}

impl Tap {
    /// Opens the output (a file is created or truncated here, so that a bad path fails the
    /// start) and starts the writer thread. A socket reader need not be there yet.
    pub fn start(config: &Dnstap) -> Result<Tap, DnstapError> {
        Tap::start_counting(config, Arc::default())
    }

    /// `start`, counting into `stats` (which a replaced writer's counts went into too).
    fn start_counting(config: &Dnstap, stats: Arc<Stats>) -> Result<Tap, DnstapError> {
        let output = match &config.output {
            DnstapOutput::File(path) => writer::Output::file(path)
                .map_err(|source| DnstapError::File { path: path.clone(), source })?,
            DnstapOutput::Socket(path) => writer::Output::socket(path),
        };
        let (tcp, rings): (Vec<Sender>, Vec<Receiver>) =
            (0..TCP_RINGS).map(|_| ring::ring(TCP_RING_BYTES)).unzip();
        let shared = Arc::new(Shared {
            sample: SampleCell(AtomicU64::new(Sampler::new(config.sample).below)),
            stats,
            new_rings: Mutex::new(rings),
            tcp_pool: RingPool::new(tcp),
            encoder: Mutex::new(None),
            stop: AtomicBool::new(false),
            stop_by: OnceLock::new(),
            writer: OnceLock::new(),
        });
        let w = writer::Writer::new(shared.clone(), output, &config.identity, &config.version);
        let thread = std::thread::Builder::new()
            .name("dnstap".into())
            .spawn(move || w.run())
            .map_err(DnstapError::Thread)?;
        let _ = shared.writer.set(thread.thread().clone());
        tracing::info!(output = ?config.output, sample = config.sample, "dnstap query log on");
        Ok(Tap { shared, config: config.clone(), thread: Some(thread) })
    }

    /// A ring for one UDP worker thread.
    pub fn udp(&self) -> UdpTap {
        UdpTap::new(self.shared.clone())
    }

    /// The way in for one TCP connection; it takes a ring from the pool when it first logs.
    pub fn tcp(&self) -> TcpTap {
        TcpTap::new(self.shared.clone())
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.shared.stats.clone()
    }

    /// Takes a new sampling fraction, identity and version without a new stream (the
    /// output stays the same).
    fn adjust(&mut self, config: &Dnstap) {
        self.shared.sample.0.store(Sampler::new(config.sample).below, Ordering::Relaxed);
        if (&config.identity, &config.version) != (&self.config.identity, &self.config.version) {
            let next = (config.identity.clone(), config.version.clone());
            *self.shared.encoder.lock().unwrap_or_else(|e| e.into_inner()) = Some(next);
            self.shared.wake();
        }
        self.config = config.clone();
    }

    /// Call once the query paths are done: the writer writes what is left, closes the
    /// stream (STOP, and the reader's FINISH on a socket) and ends. Blocks until it has.
    pub fn finish(mut self) {
        self.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Tells the writer to end once its rings are empty and let go of, or at `STOP_LIMIT`.
    fn stop(&self) {
        let _ = self.shared.stop_by.set(Instant::now() + STOP_LIMIT);
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
    }

    /// Whether the writer has ended (after `stop`).
    fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Tap {
    /// Without `finish` (a server dropped without shutdown), the writer still closes its
    /// stream, on its own time.
    fn drop(&mut self) {
        self.stop();
    }
}

/// One UDP worker's way in: the worker alone writes to its ring.
pub struct UdpTap {
    sender: Sender,
    shared: Arc<Shared>,
    /// Messages dropped since the last `flush`: counted into the shared total once a batch.
    dropped: u64,
}

impl UdpTap {
    fn new(shared: Arc<Shared>) -> UdpTap {
        UdpTap { sender: shared.ring(RING_BYTES), shared, dropped: 0 }
    }

    /// Whether to log the next exchange.
    #[inline]
    pub fn sampled(&self, rng: &mut impl RngCore) -> bool {
        self.shared.sampled(rng)
    }

    /// Copies an exchange into the ring, or counts it as dropped when the ring is full.
    pub fn offer(&mut self, ex: &Exchange<'_>) {
        if !self.sender.offer(ex) {
            self.dropped += ex.messages();
        }
    }

    /// At the end of a batch: publishes the drops and wakes the writer if the ring fills.
    pub fn flush(&mut self) {
        if self.dropped > 0 {
            self.shared.count_dropped(self.dropped);
            self.dropped = 0;
        }
        if self.sender.filling() {
            self.shared.wake();
        }
    }
}

/// One TCP connection's way in. The connection alone writes to its ring, which it takes
/// from the pool at its first logged exchange and gives back when it ends, so no two
/// connections share a ring and no query takes a lock.
pub struct TcpTap {
    ring: Option<Taken>,
    shared: Arc<Shared>,
}

impl TcpTap {
    fn new(shared: Arc<Shared>) -> TcpTap {
        TcpTap { ring: None, shared }
    }

    #[inline]
    pub fn sampled(&self, rng: &mut impl RngCore) -> bool {
        self.shared.sampled(rng)
    }

    /// Copies an exchange into the connection's ring, or counts it as dropped when the
    /// ring is full or none is free.
    pub fn offer(&mut self, ex: &Exchange<'_>) {
        if self.ring.is_none() && !self.shared.stopping() {
            self.ring = self.shared.tcp_pool.take();
        }
        let Some(Taken { sender, .. }) = &mut self.ring else {
            return self.shared.count_dropped(ex.messages());
        };
        if !sender.offer(ex) {
            self.shared.count_dropped(ex.messages());
        }
        if sender.filling() {
            self.shared.wake();
        }
    }
}

impl Drop for TcpTap {
    fn drop(&mut self) {
        let Some(ring) = self.ring.take() else { return };
        // A stopping writer waits for its rings to be let go of: drop it then (a ring
        // given back meanwhile is dropped by the writer's next round).
        if !self.shared.stopping() {
            self.shared.tcp_pool.give_back(ring);
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    #[test]
    fn sampling_takes_about_the_fraction_asked() {
        let mut rng = SmallRng::seed_from_u64(7);
        let n = 100_000;
        let count = |s: Sampler, rng: &mut SmallRng| (0..n).filter(|_| s.take(rng)).count();
        assert_eq!(count(Sampler::new(1.0), &mut rng), n);
        let one_percent = count(Sampler::new(0.01), &mut rng);
        assert!((800..1200).contains(&one_percent), "{one_percent}");
        let half = count(Sampler::new(0.5), &mut rng);
        assert!((48_000..52_000).contains(&half), "{half}");
        // The smallest fractions still log something now and then.
        assert_eq!(Sampler::new(1e-12).below, 1);
        assert_eq!(Sampler::new(1.0).below, ALL);
    }
}
