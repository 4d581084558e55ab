//! Load feedback in the server (`docs/load.md`): reading each endpoint's load (with the
//! probes' feed reader, `probe::pull`; pushed loads kept by `pushed`), the
//! control loop (`run`) that turns loads into effective shares every `load.interval`
//! through `model::load::step` (`plan`), and where a step's result goes (`publisher`).
//!
//! `Loads` is what the rest of the server sees: the map of the last step applied (for the
//! admin API, the status page, metrics and explain), the pushed loads, and the feed error
//! counts. A step's map is applied by writing each endpoint's share into the running
//! snapshot's `LoadTable`; a reload applies it to the new snapshot before it is swapped in.

pub mod plan;
pub mod publisher;
pub mod pushed;
pub mod run;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::model::Snapshot;
use crate::model::load::EndpointLoad;
pub use publisher::{LoadPublisher, LocalPublisher};
pub use pushed::Pushed;

/// One endpoint's state after a step: the controller's state and what the step read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadEntry {
    /// Absolute profile name.
    pub profile: String,
    pub endpoint: String,
    #[serde(flatten)]
    pub state: EndpointLoad,
    /// When the reading the step used was taken (Unix milliseconds); `None`: no reading.
    pub read_at_ms: Option<u64>,
    /// Why the last read of the feed failed, when it did.
    pub error: Option<String>,
}

/// The result of one control step: every endpoint with a load feed, sorted by profile and
/// endpoint name. What a cluster's leader writes to etcd and every replica applies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadMap {
    /// The step's number: 1 for the first step of the process (of the leader, in a
    /// cluster), then one more each step; 0 before any.
    pub step: u64,
    /// When the step ran (Unix milliseconds).
    pub at_ms: u64,
    pub entries: Vec<LoadEntry>,
}

impl LoadMap {
    /// The entry of `endpoint` of `profile`.
    pub fn get(&self, profile: &str, endpoint: &str) -> Option<&LoadEntry> {
        let found = self.entries.binary_search_by(|e| {
            (e.profile.as_str(), e.endpoint.as_str()).cmp(&(profile, endpoint))
        });
        found.ok().map(|i| &self.entries[i])
    }

    /// Writes every entry's share into `snap`'s table; endpoints without an entry keep
    /// what the table holds (carried over from the previous configuration, or full).
    pub fn apply_to(&self, snap: &Snapshot) {
        if self.entries.is_empty() {
            return;
        }
        for p in &snap.profiles {
            for ep in p.endpoints.iter().filter(|e| e.load.is_some()) {
                if let (Some(slot), Some(e)) = (ep.health_slot, self.get(&p.name, &ep.name)) {
                    snap.load.set(slot, e.state.share, e.state.above_high);
                }
            }
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The load feedback state of one running server.
pub struct Loads {
    /// The map last applied; taken (briefly) by a step's publication and by a reload's
    /// swap, so that whichever comes second applies the newest map to the newest snapshot.
    applied: Mutex<Arc<LoadMap>>,
    /// The same map, for readers (API, metrics) that should not wait for that mutex.
    current: ArcSwap<LoadMap>,
    pub pushed: Pushed,
    /// Failed feed reads by (profile, endpoint, reason).
    errors: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    /// Where steps go: local unless the cluster set its own at startup.
    publisher: OnceLock<Arc<dyn LoadPublisher>>,
}

impl Default for Loads {
    fn default() -> Loads {
        Loads {
            applied: Mutex::default(),
            current: ArcSwap::from_pointee(LoadMap::default()),
            pushed: Pushed::default(),
            errors: Mutex::default(),
            publisher: OnceLock::new(),
        }
    }
}

impl Loads {
    /// The map last applied.
    pub fn current(&self) -> Arc<LoadMap> {
        self.current.load_full()
    }

    /// Applies `map` to the running snapshot `shared` holds, and keeps it as the current map.
    /// Every replica of a cluster calls this with what etcd holds.
    pub fn apply(&self, map: Arc<LoadMap>, shared: &ArcSwap<Snapshot>) {
        let mut applied = self.lock_applied();
        map.apply_to(&shared.load());
        self.current.store(map.clone());
        *applied = map;
    }

    /// Applies the current map to `next`, a snapshot about to be swapped in; the caller
    /// swaps it in while holding the guard, so that no step's map lands on the old one
    /// unseen.
    pub fn prepare_swap(&self, next: &Snapshot) -> MutexGuard<'_, Arc<LoadMap>> {
        let applied = self.lock_applied();
        applied.apply_to(next);
        applied
    }

    fn lock_applied(&self) -> MutexGuard<'_, Arc<LoadMap>> {
        self.applied.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets where steps go (the cluster's publisher); only before the loop starts.
    pub fn set_publisher(&self, publisher: Arc<dyn LoadPublisher>) -> bool {
        self.publisher.set(publisher).is_ok()
    }

    pub fn publisher(&self) -> Option<Arc<dyn LoadPublisher>> {
        self.publisher.get().cloned()
    }

    pub fn count_error(&self, profile: &str, endpoint: &str, reason: &'static str) {
        let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        *errors.entry((profile.to_string(), endpoint.to_string(), reason)).or_default() += 1;
    }

    /// `((profile, endpoint, reason), count)` of every feed error counted.
    pub fn error_counts(&self) -> Vec<((String, String, &'static str), u64)> {
        let errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        errors.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

/// How long ago `read_at_ms` was, at `now`.
pub fn age(read_at_ms: Option<u64>, now: SystemTime) -> Option<Duration> {
    read_at_ms.map(|t| Duration::from_millis(unix_ms(now).saturating_sub(t)))
}
