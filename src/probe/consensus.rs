//! The hook through which replicas agree on health: with a `Consensus`, an endpoint's own
//! status (its monitors' results on this replica, combined by its rule) is one view among
//! those of every replica, and the endpoint gets the verdict the consensus gives instead.
//! The server's cluster part implements it (publishing this replica's views to etcd and
//! reading the others'); without one, the endpoint's own status is what it gets, as on a
//! single server.

use std::sync::Arc;
use std::time::SystemTime;

use crate::model::health::Status;
use crate::model::vantage::{Verdict, View};
use crate::model::{Monitor, MonitorRule};

/// What an endpoint's view is a view of: the endpoint, and everything that decides its
/// own status. Replicas whose keys differ (a definition changed during a rolling change)
/// see different things and do not count each other's views.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EndpointKey {
    /// Absolute profile name.
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    /// The address or host name probed.
    pub target: String,
    pub rule: MonitorRule,
    /// Every monitor, in configuration order.
    pub monitors: Arc<[Monitor]>,
}

/// This replica's own view of an endpoint: its monitors' results combined by its rule,
/// the reason of its last change and when that was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnView {
    pub status: Status,
    pub reason: String,
    pub at: SystemTime,
}

impl OwnView {
    /// An endpoint whose monitors have no result yet.
    pub fn starting() -> OwnView {
        OwnView {
            status: Status::Checking,
            reason: "not probed yet".to_string(),
            at: SystemTime::now(),
        }
    }
}

/// Turns this replica's views into the statuses endpoints get. Called under an endpoint's
/// own mutex: implementations must not call back into the prober from these methods
/// (`Prober::republish` is for the moments other views change).
pub trait Consensus: Send + Sync {
    /// This replica's view of `key` is now `own` (also when an endpoint starts).
    fn changed(&self, key: &EndpointKey, own: &OwnView);
    /// `key` is no longer monitored here: its view is withdrawn.
    fn stopped(&self, key: &EndpointKey);
    /// The status of `key`'s endpoint, with this replica's view being `own`.
    fn verdict(&self, key: &EndpointKey, own: &OwnView) -> Verdict;
    /// Every view of `key` counted in its verdict, `own` included, by node.
    fn views(&self, key: &EndpointKey, own: &OwnView) -> Vec<View>;
}
