//! Query logs in dnstap: each logged exchange becomes an AUTH_QUERY and an AUTH_RESPONSE
//! message, written in Frame Streams to a file or to a reader's unix socket (`log.dnstap`).
//!
//! The query path only copies bytes: each UDP worker has a ring of its own, the TCP
//! connections share one (`ring`), and an exchange that does not fit is dropped and
//! counted, so a slow or absent reader never holds a query back and nothing is allocated
//! per query. One writer thread (`writer`) drains the rings, encodes the messages
//! (`encode`) and frames them (`fstrm`), reconnecting to a socket reader that went away.
//! Everything is set up once at start: a change of `log.dnstap` needs a restart.

mod encode;
mod fstrm;
mod ring;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};

use rand::RngCore;

use crate::model::snapshot::{Dnstap, DnstapOutput};
use ring::{Receiver, Sender};

pub use encode::Time;
pub use ring::Exchange;

/// Bytes of each ring: at 150,000 logged exchanges a second per UDP thread, about 50 ms of
/// them, far longer than the writer takes to come round (it is woken at a quarter full).
const RING_BYTES: usize = 2 << 20;

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
    /// Dropped on the query path because the ring was full.
    pub dropped_queue_full: AtomicU64,
    /// Taken by the writer while it had no reader (or after the file failed) and lost.
    pub dropped_disconnected: AtomicU64,
}

/// What the query paths and the writer share.
struct Shared {
    stats: Arc<Stats>,
    /// Rings made since the writer last looked; it adopts them.
    new_rings: Mutex<Vec<Receiver>>,
    /// Set once every producer is done: the writer drains what is left and closes.
    stop: AtomicBool,
    writer: OnceLock<Thread>,
}

impl Shared {
    fn wake(&self) {
        if let Some(t) = self.writer.get() {
            t.unpark();
        }
    }

    fn ring(&self) -> Sender {
        let (tx, rx) = ring::ring(RING_BYTES);
        self.new_rings.lock().unwrap_or_else(|e| e.into_inner()).push(rx);
        tx
    }
}

/// Which exchanges are logged: a fraction `sample` of them, drawn with the caller's RNG.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampler {
    /// An exchange is logged when a random u32 falls below this; `None`: every one.
    below: Option<u32>,
}

impl Sampler {
    /// `sample` in (0, 1].
    pub fn new(sample: f64) -> Sampler {
        let below = (sample < 1.0).then(|| ((sample * 4_294_967_296.0) as u32).max(1));
        Sampler { below }
    }

    #[inline]
    pub fn take(&self, rng: &mut impl RngCore) -> bool {
        match self.below {
            None => true,
            Some(below) => rng.next_u32() < below,
        }
    }
}

/// The running dnstap writer and the way in for the query paths.
pub struct Tap {
    shared: Arc<Shared>,
    sample: Sampler,
    tcp: Arc<TcpTap>,
    thread: Option<JoinHandle<()>>,
}

impl Tap {
    /// Opens the output (a file is created or truncated here, so that a bad path fails the
    /// start) and starts the writer thread. A socket reader need not be there yet.
    pub fn start(config: &Dnstap) -> Result<Tap, DnstapError> {
        let output = match &config.output {
            DnstapOutput::File(path) => writer::Output::file(path)
                .map_err(|source| DnstapError::File { path: path.clone(), source })?,
            DnstapOutput::Socket(path) => writer::Output::socket(path),
        };
        let shared = Arc::new(Shared {
            stats: Arc::default(),
            new_rings: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            writer: OnceLock::new(),
        });
        let sample = Sampler::new(config.sample);
        let tcp =
            Arc::new(TcpTap { sender: Mutex::new(shared.ring()), sample, shared: shared.clone() });
        let w = writer::Writer::new(shared.clone(), output, &config.identity, &config.version);
        let thread = std::thread::Builder::new()
            .name("dnstap".into())
            .spawn(move || w.run())
            .map_err(DnstapError::Thread)?;
        let _ = shared.writer.set(thread.thread().clone());
        tracing::info!(output = ?config.output, sample = config.sample, "dnstap query log on");
        Ok(Tap { shared, sample, tcp, thread: Some(thread) })
    }

    /// A ring for one UDP worker thread.
    pub fn udp(&self) -> UdpTap {
        UdpTap {
            sender: self.shared.ring(),
            sample: self.sample,
            shared: self.shared.clone(),
            dropped: 0,
        }
    }

    /// The ring every TCP connection shares.
    pub fn tcp(&self) -> Arc<TcpTap> {
        self.tcp.clone()
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.shared.stats.clone()
    }

    /// Call once the query paths are done: the writer writes what is left, closes the
    /// stream (STOP, and the reader's FINISH on a socket) and ends. Blocks until it has.
    pub fn finish(mut self) {
        self.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
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
    sample: Sampler,
    shared: Arc<Shared>,
    /// Messages dropped since the last `flush`: counted into the shared total once a batch.
    dropped: u64,
}

impl UdpTap {
    /// Whether to log the next exchange.
    #[inline]
    pub fn sampled(&self, rng: &mut impl RngCore) -> bool {
        self.sample.take(rng)
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
            self.shared.stats.dropped_queue_full.fetch_add(self.dropped, Ordering::Relaxed);
            self.dropped = 0;
        }
        if self.sender.filling() {
            self.shared.wake();
        }
    }
}

/// The TCP connections' way in. They run on several threads, so the ring's producer end is
/// behind a mutex held only to copy one exchange; the writer and the reloader never take it.
pub struct TcpTap {
    sender: Mutex<Sender>,
    sample: Sampler,
    shared: Arc<Shared>,
}

impl TcpTap {
    #[inline]
    pub fn sampled(&self, rng: &mut impl RngCore) -> bool {
        self.sample.take(rng)
    }

    pub fn offer(&self, ex: &Exchange<'_>) {
        let (taken, filling) = {
            let mut sender = self.sender.lock().unwrap_or_else(|e| e.into_inner());
            (sender.offer(ex), sender.filling())
        };
        if !taken {
            let n = ex.messages();
            self.shared.stats.dropped_queue_full.fetch_add(n, Ordering::Relaxed);
        }
        if filling {
            self.shared.wake();
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
        assert_eq!(Sampler::new(1e-12).below, Some(1));
    }
}
