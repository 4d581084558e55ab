//! The thread that serves one AF_XDP socket: takes a batch of frames, reads each query out
//! of its frame, answers it with the same function as the UDP sockets, writes the reply
//! over the query's frame and sends the batch. Like the UDP workers, it loads the snapshot
//! once per batch and allocates nothing per packet.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio_util::sync::CancellationToken;

use crate::frame::{self, headers_len};
use crate::model::Tally;
use crate::model::snapshot::Snapshot;
use crate::responder::{Packet, Transport};
use crate::wire::cookie::unix_now;

use super::super::dnstap::{Exchange, Time, UdpLog};
use super::super::rrl::Limiter;
use super::super::rum::Rum;
use super::super::udp::answer;
use super::xsk::{FRAME_SIZE, Xsk};

/// Frames taken per batch.
const BATCH: usize = 64;
/// How long an idle worker waits before checking for shutdown, in milliseconds.
const POLL_MS: i32 = 200;

/// What the fast path counted that the responder's counters do not see.
#[derive(Debug, Default)]
pub struct Stats {
    /// Frames the XDP program sent to a socket that did not hold a whole UDP datagram.
    pub malformed: AtomicU64,
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
    let mut rng = SmallRng::from_os_rng();
    let mut tally = Tally::default();
    let mut descs = [libc::xdp_desc { addr: 0, len: 0, options: 0 }; BATCH];
    let mut replies = [libc::xdp_desc { addr: 0, len: 0, options: 0 }; BATCH];
    let mut unanswered = [0u64; BATCH];
    let mut scratch = [0u64; BATCH];
    let mut out = Vec::with_capacity(FRAME_SIZE);
    while !cancel.is_cancelled() {
        // Sent frames go back to the fill ring first, so the kernel can receive into them.
        while xsk.reclaim(&mut scratch) == BATCH {}
        let n = xsk.receive(&mut descs);
        if n == 0 {
            let _ = log.current();
            xsk.wait(POLL_MS);
            continue;
        }
        if xsk.fill_needs_wakeup() {
            xsk.wait(0);
        }
        let snap = shared.snapshot.load();
        let measured = shared.rum.as_ref().map(|r| r.published().load());
        let now = unix_now();
        let mut tap = log.current();
        let (mut sent, mut dropped) = (0, 0);
        for d in &descs[..n] {
            let frame = xsk.frame(d.addr);
            let len = (d.len as usize).min(frame.len());
            let query = match frame::parse(&frame[..len]) {
                Ok(q) => q,
                Err(_) => {
                    shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    unanswered[dropped] = d.addr;
                    dropped += 1;
                    continue;
                }
            };
            let sampled = tap.as_ref().is_some_and(|t| t.sampled(&mut rng));
            let query_time = if sampled { Time::now() } else { Time::default() };
            let packet = Packet {
                bytes: query.payload,
                src: query.src.ip(),
                transport: Transport::Udp,
                now,
                measured: measured.as_deref().map(|m| &**m),
            };
            let answered = answer(&snap, packet, &shared.limiter, &mut rng, &mut tally, &mut out);
            let start = headers_len(&query.src);
            if sampled && let Some(tap) = &mut tap {
                tap.offer(&Exchange {
                    transport: Transport::Udp,
                    client: query.src,
                    server: query.dst,
                    query: query.payload,
                    query_time,
                    response: answered.then(|| (&out[..], Time::now())),
                });
            }
            if !answered || start + out.len() > frame.len() {
                unanswered[dropped] = d.addr;
                dropped += 1;
                continue;
            }
            // The query's addressing is read before its bytes are overwritten.
            let query = frame::Datagram { payload: &[], ..query };
            frame[start..start + out.len()].copy_from_slice(&out);
            let len = frame::write_reply(&query, out.len(), frame);
            replies[sent] = libc::xdp_desc { addr: d.addr, len: len as u32, options: 0 };
            sent += 1;
        }
        tally.flush(&snap.counters);
        xsk.send(&replies[..sent]);
        xsk.recycle(&unanswered[..dropped]);
        if let Some(tap) = &mut tap {
            tap.flush();
        }
    }
}
