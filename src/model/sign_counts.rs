//! The DNSSEC signing counts of one server (`/metrics`): signed answers, where each
//! signature came from, and the queries the signing budget dropped. Shared by the
//! snapshots of one server (a reload hands them on), so two servers in one process count
//! apart. Query threads add to them in batches (`responder::signed`), lock-free.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct SignCounts {
    /// Answers that carried signatures.
    pub answers: AtomicU64,
    /// Signatures found in a thread's cache.
    pub cached: AtomicU64,
    /// Signatures found in the pre-signed table.
    pub presigned: AtomicU64,
    /// Signatures made while answering (cache misses).
    pub made: AtomicU64,
    /// Queries left unanswered because the budget was spent.
    pub dropped: AtomicU64,
}

/// The counts at one moment, for `/metrics` and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignTotals {
    pub answers: u64,
    pub cached: u64,
    pub presigned: u64,
    pub made: u64,
    pub dropped: u64,
}

impl SignCounts {
    /// Adds one batch of counts.
    pub fn add(&self, n: &SignTotals) {
        for (count, to) in [
            (n.answers, &self.answers),
            (n.cached, &self.cached),
            (n.presigned, &self.presigned),
            (n.made, &self.made),
            (n.dropped, &self.dropped),
        ] {
            if count > 0 {
                to.fetch_add(count, Ordering::Relaxed);
            }
        }
    }

    pub fn totals(&self) -> SignTotals {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        SignTotals {
            answers: load(&self.answers),
            cached: load(&self.cached),
            presigned: load(&self.presigned),
            made: load(&self.made),
            dropped: load(&self.dropped),
        }
    }
}
