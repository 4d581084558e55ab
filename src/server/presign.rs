//! The pre-signer: one background thread that signs the answers of the running snapshot's
//! signed zones ahead of the queries (`model::presigned`) and stores the table in the
//! snapshot. It signs again after each reload, taking over the signatures of unchanged
//! RRsets, and every `REFRESH` so that no signature it hands out is past half its validity.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::model::Snapshot;
use crate::model::presigned::{self, Table};
use crate::wire::cookie::unix_now;

/// How often the thread looks for a new snapshot (and for shutdown).
const POLL: Duration = Duration::from_millis(200);
/// The longest time between two tables of one snapshot; shorter for short validities.
const REFRESH: u32 = 3600;

/// Starts the thread; it stops soon after `cancel` fires.
pub fn spawn(
    shared: Arc<ArcSwap<Snapshot>>,
    cancel: CancellationToken,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("presign".into()).spawn(move || run(&shared, &cancel))
}

fn run(shared: &ArcSwap<Snapshot>, cancel: &CancellationToken) {
    // Below the query threads: signing ahead must not delay answers.
    // SAFETY: setpriority with PRIO_PROCESS and 0 changes only the calling thread on Linux.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).div_ceil(2);
    let mut signed_for: Weak<Snapshot> = Weak::new();
    let mut table: Option<Arc<Table>> = None;
    let mut next = 0u32;
    while !cancel.is_cancelled() {
        let snap = shared.load_full();
        let now = unix_now();
        let fresh = !Weak::ptr_eq(&signed_for, &Arc::downgrade(&snap));
        let validity =
            snap.zones.iter().filter_map(|z| z.dnssec.as_ref()).map(|s| s.validity).min();
        if let Some(validity) = validity
            && (fresh || now >= next)
        {
            let interval = (validity / 8).clamp(60, REFRESH);
            let started = Instant::now();
            let known = presigned::known_rrsets(&snap, now.into());
            let (built, did) =
                presigned::build(&snap, &known, table.as_deref(), now, interval, threads);
            let built = Arc::new(built);
            snap.signatures.store(built.clone());
            tracing::info!(
                rrsets = known.len(),
                signed = did.signed,
                reused = did.reused,
                took_ms = started.elapsed().as_millis() as u64,
                "pre-signed the signed zones' answers"
            );
            table = Some(built);
            next = now.saturating_add(interval);
        }
        signed_for = Arc::downgrade(&snap);
        drop(snap);
        std::thread::sleep(POLL);
    }
}
