//! The thread that serves one AF_XDP socket: takes a batch of frames, reads each query out
//! of its frame, answers it with the same function as the UDP sockets, writes the reply
//! over the query's frame and sends the batch. Like the UDP workers, it loads the snapshot
//! once per batch and allocates nothing per packet (`handle`, the work on one frame, is
//! public so that tests can count its allocations without a socket).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio_util::sync::CancellationToken;

use crate::frame::{self, headers_len};
use crate::geo::rum::MeasuredLatency;
use crate::model::Tally;
use crate::model::snapshot::Snapshot;
use crate::responder::{Packet, Transport};
use crate::wire::cookie::unix_now;

use super::super::dnstap::{Exchange, Time, UdpLog, UdpTap};
use super::super::rrl::Limiter;
use super::super::rum::Rum;
use super::super::udp::answer;
use super::xsk::{FRAME_SIZE, KernelDrops, Xsk};

/// Frames taken per batch: as many as the kernel sends per wakeup in copy mode, so that a
/// batch's replies leave in one call and reach the peer no faster than it takes them.
const BATCH: usize = 32;
/// How long an idle worker waits before checking for shutdown, in milliseconds.
const POLL_MS: i32 = 200;
/// A busy worker reads the kernel's drop counts once per this many batches (an idle one
/// on every wakeup).
const DROPS_EVERY: u32 = 1024;

/// What the fast path counted that the responder's counters do not see.
#[derive(Debug, Default)]
pub struct Stats {
    /// Frames the XDP program sent to a socket that did not hold a whole UDP datagram.
    pub malformed: AtomicU64,
    /// Frames the kernel dropped for want of a free frame to receive into.
    pub no_free_frame: AtomicU64,
    /// Frames the kernel dropped because a socket's RX ring was full.
    pub rx_ring_full: AtomicU64,
}

impl Stats {
    /// Adds what one socket's kernel counts grew by since `last`, and remembers them.
    fn add_drops(&self, xsk: &Xsk, last: &mut KernelDrops) {
        let Ok(now) = xsk.drops() else { return };
        let grown = |now: u64, then: u64| now.saturating_sub(then);
        self.no_free_frame
            .fetch_add(grown(now.no_free_frame, last.no_free_frame), Ordering::Relaxed);
        self.rx_ring_full.fetch_add(grown(now.rx_ring_full, last.rx_ring_full), Ordering::Relaxed);
        *last = now;
    }
}

/// Everything a worker shares with the rest of the server.
pub struct Shared {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub rum: Option<Arc<Rum>>,
    pub limiter: Arc<Limiter>,
    pub stats: Arc<Stats>,
}

/// Serves `xsk` until `cancel` fires. Blocking: run it on its own thread.
pub fn serve(mut xsk: Xsk, shared: Shared, mut log: UdpLog, cancel: CancellationToken) {
    let mut state = State::new(SmallRng::from_os_rng());
    let mut descs = [libc::xdp_desc { addr: 0, len: 0, options: 0 }; BATCH];
    let mut replies = [libc::xdp_desc { addr: 0, len: 0, options: 0 }; BATCH];
    let mut unanswered = [0u64; BATCH];
    let mut scratch = [0u64; BATCH];
    let mut drops = KernelDrops::default();
    let mut batches = 0u32;
    while !cancel.is_cancelled() {
        // Sent frames go back to the fill ring first, so the kernel can receive into them.
        while xsk.reclaim(&mut scratch) == BATCH {}
        // Replies the kernel did not take last time (a busy device) go before new ones.
        xsk.kick();
        let n = xsk.receive(&mut descs);
        batches = batches.wrapping_add(1);
        if n == 0 || batches.is_multiple_of(DROPS_EVERY) {
            shared.stats.add_drops(&xsk, &mut drops);
        }
        if n == 0 {
            let _ = log.current();
            xsk.wait(if xsk.sending() { 1 } else { POLL_MS });
            continue;
        }
        if xsk.fill_needs_wakeup() {
            xsk.wait(0);
        }
        let snap = shared.snapshot.load();
        let measured = shared.rum.as_ref().map(|r| r.published().load());
        let batch = Batch {
            snap: &snap,
            measured: measured.as_deref().map(|m| &**m),
            limiter: &shared.limiter,
            now: unix_now(),
        };
        let mut tap = log.current();
        let (mut sent, mut dropped) = (0, 0);
        for d in &descs[..n] {
            let frame = xsk.frame(d.addr);
            match handle(frame, d.len as usize, &batch, &mut state, tap.as_deref_mut()) {
                Handled::Reply(len) => {
                    replies[sent] = libc::xdp_desc { addr: d.addr, len: len as u32, options: 0 };
                    sent += 1;
                }
                Handled::Unanswered => {
                    unanswered[dropped] = d.addr;
                    dropped += 1;
                }
                Handled::Malformed => {
                    shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    unanswered[dropped] = d.addr;
                    dropped += 1;
                }
            }
        }
        state.tally.flush(&snap.counters);
        xsk.send(&replies[..sent]);
        xsk.recycle(&unanswered[..dropped]);
        if let Some(tap) = &mut tap {
            tap.flush();
        }
    }
}

/// What a worker keeps from frame to frame: the random source of routing and of the query
/// log's sampling, the counts it adds up over a batch, and the buffer replies are written
/// into before they are copied over their query's frame.
pub struct State {
    pub rng: SmallRng,
    /// Flushed into the snapshot's counters once per batch.
    pub tally: Tally,
    out: Vec<u8>,
}

impl State {
    pub fn new(rng: SmallRng) -> State {
        State { rng, tally: Tally::default(), out: Vec::with_capacity(FRAME_SIZE) }
    }
}

/// What the frames of one batch are answered from, loaded once per batch.
pub struct Batch<'a> {
    pub snap: &'a Snapshot,
    pub measured: Option<&'a MeasuredLatency>,
    pub limiter: &'a Limiter,
    /// Unix seconds, for cookies and rate limiting.
    pub now: u32,
}

/// What became of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// The frame now holds the reply, this many bytes long: send it.
    Reply(usize),
    /// No reply (a response, a dropped answer, or one too big for the frame).
    Unanswered,
    /// Not a whole UDP datagram: count it.
    Malformed,
}

/// The fast path's work on one frame, whose first `len` bytes arrived: reads the query out
/// of it, answers it with the same function as the UDP sockets, hands the exchange to
/// `tap` when the tap samples it, and writes the reply over the frame, headers swapped.
/// Allocates nothing.
pub fn handle(
    frame: &mut [u8],
    len: usize,
    batch: &Batch<'_>,
    state: &mut State,
    tap: Option<&mut UdpTap>,
) -> Handled {
    let len = len.min(frame.len());
    let Ok(query) = frame::parse(&frame[..len]) else { return Handled::Malformed };
    let sampled = tap.as_ref().is_some_and(|t| t.sampled(&mut state.rng));
    let query_time = if sampled { Time::now() } else { Time::default() };
    let packet = Packet {
        bytes: query.payload,
        src: query.src.ip(),
        transport: Transport::Udp,
        now: batch.now,
        measured: batch.measured,
    };
    let out = &mut state.out;
    let answered = answer(batch.snap, packet, batch.limiter, &mut state.rng, &mut state.tally, out);
    if sampled && let Some(tap) = tap {
        tap.offer(&Exchange {
            transport: Transport::Udp,
            client: query.src,
            server: query.dst,
            query: query.payload,
            query_time,
            response: answered.then(|| (&out[..], Time::now())),
        });
    }
    let start = headers_len(&query.src);
    if !answered || start + out.len() > frame.len() {
        return Handled::Unanswered;
    }
    // The query's addressing is read before its bytes are overwritten.
    let query = frame::Datagram { payload: &[], ..query };
    frame[start..start + out.len()].copy_from_slice(&out[..]);
    Handled::Reply(frame::write_reply(&query, out.len(), frame))
}
