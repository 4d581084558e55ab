//! Where a control step runs and where its result goes. Without a cluster every replica
//! steps on its own and applies its map at once (`LocalPublisher`); in a cluster only the
//! leader steps, writes the map to etcd, and every replica (the leader too) applies what
//! etcd holds through `Loads::apply`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::pushed::PushedLoad;
use super::{LoadMap, Loads};
use crate::model::Snapshot;

/// A boxed future, as a trait object's async method returns.
pub type Publishing<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What keeping or clearing a pushed load comes to: whether it began a run of pushes (or
/// cleared one), or why it could not be kept.
pub type Pushing<'a> = Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;

/// The seam between the control loop and what it steps for.
pub trait LoadPublisher: Send + Sync {
    /// Whether this replica runs the next step (a cluster's followers do not).
    fn leads(&self) -> bool;

    /// Hands a step's map on. The next step starts from what `Loads::current` holds then,
    /// so a publisher that applies later (through etcd) steps from what was applied.
    fn publish(&self, map: Arc<LoadMap>) -> Publishing<'_>;

    /// Keeps a load pushed through the admin API where the stepping replica reads it.
    fn push(&self, profile: &str, endpoint: &str, load: PushedLoad) -> Pushing<'_>;

    /// Forgets the load pushed to an endpoint.
    fn clear(&self, profile: &str, endpoint: &str) -> Pushing<'_>;

    /// In a cluster, the node that runs the steps (`Some(None)`: none known now);
    /// `None` without a cluster.
    fn leader(&self) -> Option<Option<String>> {
        None
    }
}

/// No cluster: steps here, applied here at once.
pub struct LocalPublisher {
    pub loads: Arc<Loads>,
    pub shared: Arc<ArcSwap<Snapshot>>,
}

impl LoadPublisher for LocalPublisher {
    fn leads(&self) -> bool {
        true
    }

    fn publish(&self, map: Arc<LoadMap>) -> Publishing<'_> {
        self.loads.apply(map, &self.shared);
        Box::pin(std::future::ready(()))
    }

    fn push(&self, profile: &str, endpoint: &str, load: PushedLoad) -> Pushing<'_> {
        Box::pin(std::future::ready(Ok(self.loads.pushed.set(profile, endpoint, load))))
    }

    fn clear(&self, profile: &str, endpoint: &str) -> Pushing<'_> {
        Box::pin(std::future::ready(Ok(self.loads.pushed.clear(profile, endpoint))))
    }
}
