//! The hook through which replicas agree on health: with a `Consensus`, a probe's own
//! status is one view among those of every replica, and the endpoints get the verdict the
//! consensus gives instead. The server's cluster part implements it (publishing this
//! replica's views to etcd and reading the others'); without one, a probe's own status is
//! what its endpoints get, as on a single server.

use std::time::SystemTime;

use super::plan::ProbeKey;
use crate::model::health::Status;
use crate::model::vantage::{Verdict, View};

/// This replica's own view of a probe: its status machine's status, the reason of its
/// last change and when that was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnView {
    pub status: Status,
    pub reason: String,
    pub at: SystemTime,
}

impl OwnView {
    /// A probe that has not had a result yet.
    pub fn starting() -> OwnView {
        OwnView {
            status: Status::Checking,
            reason: "not probed yet".to_string(),
            at: SystemTime::now(),
        }
    }
}

/// Turns this replica's views into the statuses endpoints get. Called under a probe's
/// own mutex: implementations must not call back into the prober from these methods
/// (`Prober::republish` is for the moments other views change).
pub trait Consensus: Send + Sync {
    /// This replica's view of `key` is now `own` (also when a probe starts).
    fn changed(&self, key: &ProbeKey, own: &OwnView);
    /// `key` is no longer probed here: its view is withdrawn.
    fn stopped(&self, key: &ProbeKey);
    /// The status of `key`'s endpoints, with this replica's view being `own`.
    fn verdict(&self, key: &ProbeKey, own: &OwnView) -> Verdict;
    /// Every view of `key` counted in its verdict, `own` included, by node.
    fn views(&self, key: &ProbeKey, own: &OwnView) -> Vec<View>;
}
