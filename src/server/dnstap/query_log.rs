//! The query log as reloads change it: `log.dnstap` turned on, off, or to another output
//! starts, stops or replaces the writer; a new `sample`, `identity` or `version` alone is
//! taken by the running writer. The query paths follow through a generation number they
//! read once a batch (UDP) or once a query (TCP) with one atomic load: when it moved, they
//! let go of their ring in the old writer and take one in the new, so no query waits for
//! a reload. The old writer drains what its rings still hold, at most `STOP_LIMIT` for
//! those not let go of yet, and closes its stream.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;

use super::{DnstapError, Shared, Stats, Tap, TcpTap, UdpTap};
use crate::model::snapshot::Dnstap;

/// The running query log, if any, and the writers a reload replaced that are still ending.
pub struct QueryLog {
    /// What the query paths log into; `None` while `log.dnstap` is unset.
    current: ArcSwapOption<Shared>,
    /// One more at each change of `current`.
    generation: AtomicU64,
    /// The counts of every writer started, kept across reloads.
    stats: Arc<Stats>,
    /// `log.dnstap` was set at some time: its metrics are shown from then on.
    ever: AtomicBool,
    /// Taken by reloads and shutdown only.
    writers: Mutex<Writers>,
}

#[derive(Default)]
struct Writers {
    running: Option<Tap>,
    /// Replaced writers, joined at shutdown (and forgotten once they ended).
    stopped: Vec<Tap>,
}

impl QueryLog {
    /// Starts the writer when `config` is set; an output that cannot be opened is an error.
    pub fn start(config: Option<&Dnstap>) -> Result<QueryLog, DnstapError> {
        let stats = Arc::<Stats>::default();
        let running = config.map(|c| Tap::start_counting(c, stats.clone())).transpose()?;
        Ok(QueryLog {
            current: ArcSwapOption::new(running.as_ref().map(|t| t.shared.clone())),
            generation: AtomicU64::new(0),
            stats,
            ever: AtomicBool::new(running.is_some()),
            writers: Mutex::new(Writers { running, stopped: Vec::new() }),
        })
    }

    /// Makes the running log what a reloaded configuration says. An output that cannot be
    /// opened leaves the running log as it is (the error says why); the next reload tries
    /// again.
    pub fn apply(&self, config: Option<&Dnstap>) -> Result<(), DnstapError> {
        let mut writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        writers.stopped.retain(|t| !t.ended());
        let running = writers.running.as_mut();
        match (running, config) {
            (None, None) => return Ok(()),
            (Some(tap), Some(next)) if tap.config.output == next.output => {
                if tap.config != *next {
                    tap.adjust(next);
                    tracing::info!(output = ?next.output, sample = next.sample, "dnstap query log settings changed");
                }
                return Ok(());
            }
            _ => {}
        }
        let next = config.map(|c| Tap::start_counting(c, self.stats.clone())).transpose()?;
        self.current.store(next.as_ref().map(|t| t.shared.clone()));
        self.generation.fetch_add(1, Ordering::Release);
        if next.is_some() {
            self.ever.store(true, Ordering::Relaxed);
        }
        if let Some(old) = std::mem::replace(&mut writers.running, next) {
            old.stop();
            if writers.running.is_none() {
                tracing::info!(output = ?old.config.output, "dnstap query log off");
            }
            writers.stopped.push(old);
        }
        Ok(())
    }

    /// The settings of the running log.
    pub fn running(&self) -> Option<Dnstap> {
        let writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        writers.running.as_ref().map(|t| t.config.clone())
    }

    /// The counts, once `log.dnstap` has been set (at start or by a reload).
    pub fn stats(&self) -> Option<&Stats> {
        self.ever.load(Ordering::Relaxed).then_some(&*self.stats)
    }

    /// The way in for one UDP worker thread.
    pub fn udp(self: &Arc<Self>) -> UdpLog {
        Following::new(self, UdpTap::new)
    }

    /// The way in for one TCP connection.
    pub fn tcp(self: &Arc<Self>) -> TcpLog {
        Following::new(self, TcpTap::new)
    }

    /// Call once the query paths are done: every writer writes what is left, closes its
    /// stream and ends. Blocks until they have.
    pub fn finish(&self) {
        let mut writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        self.current.store(None);
        self.generation.fetch_add(1, Ordering::Release);
        let taps: Vec<Tap> =
            writers.running.take().into_iter().chain(writers.stopped.drain(..)).collect();
        drop(writers);
        taps.into_iter().for_each(Tap::finish);
    }
}

/// A way into the query log that follows reloads: a UDP worker's ring (`UdpLog`) or a TCP
/// connection's (`TcpLog`).
pub struct Following<T> {
    log: Arc<QueryLog>,
    seen: u64,
    tap: Option<T>,
    /// Makes the way into a writer the first time this path follows it.
    make: fn(Arc<Shared>) -> T,
}

/// A UDP worker's way in: call `current` once a batch.
pub type UdpLog = Following<UdpTap>;
/// A TCP connection's way in: call `current` once a query.
pub type TcpLog = Following<TcpTap>;

impl<T> Following<T> {
    fn new(log: &Arc<QueryLog>, make: fn(Arc<Shared>) -> T) -> Following<T> {
        let mut way = Following { log: log.clone(), seen: 0, tap: None, make };
        way.follow(log.generation.load(Ordering::Acquire));
        way
    }

    /// Where to log, if the log is on.
    #[inline]
    pub fn current(&mut self) -> Option<&mut T> {
        let generation = self.log.generation.load(Ordering::Acquire);
        if generation != self.seen {
            self.follow(generation);
        }
        self.tap.as_mut()
    }

    /// Lets go of the old way in (its writer drains it) and takes one in the current log.
    #[cold]
    fn follow(&mut self, generation: u64) {
        self.seen = generation;
        self.tap = None;
        self.tap = self.log.current.load_full().map(self.make);
    }
}
