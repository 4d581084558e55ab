//! Loads pushed through the admin API (`PUT .../endpoints/{e}/load`), for endpoints with
//! `load: {pushed: true}`. Each is a load with a time to live: the control loop takes it
//! as fresh until it expires, then as stale; an endpoint never pushed to, or whose load
//! was cleared (`DELETE`), has no load known and takes its full share. Kept under a mutex
//! that only the API and the control loop take.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::model::load::Reading;

/// The longest time to live a push may ask for.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// One pushed load.
#[derive(Clone, Debug, PartialEq)]
pub struct PushedLoad {
    pub load: f64,
    /// When it was pushed, on the loop's clock and as a wall-clock time.
    pub at: Instant,
    pub at_wall: SystemTime,
    pub ttl: Duration,
    /// The name of the token that pushed it.
    pub by: String,
}

/// The pushed loads, by (absolute profile name, endpoint name).
#[derive(Debug, Default)]
pub struct Pushed {
    loads: Mutex<HashMap<(String, String), PushedLoad>>,
}

impl Pushed {
    /// Keeps `load`; whether it starts a run of pushes (none was live before), which is
    /// worth an event where every later push is not.
    pub fn set(&self, profile: &str, endpoint: &str, load: PushedLoad) -> bool {
        let mut loads = self.loads.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (profile.to_string(), endpoint.to_string());
        let live = loads.get(&key).is_some_and(|p| p.at + p.ttl > load.at);
        loads.insert(key, load);
        !live
    }

    /// Forgets the load pushed to `endpoint`; whether there was one.
    pub fn clear(&self, profile: &str, endpoint: &str) -> bool {
        let mut loads = self.loads.lock().unwrap_or_else(PoisonError::into_inner);
        loads.remove(&(profile.to_string(), endpoint.to_string())).is_some()
    }

    /// What the control loop reads for `endpoint` at `now`, and the pushed load itself.
    pub fn reading(
        &self,
        profile: &str,
        endpoint: &str,
        now: Instant,
    ) -> (Reading, Option<PushedLoad>) {
        let loads = self.loads.lock().unwrap_or_else(PoisonError::into_inner);
        match loads.get(&(profile.to_string(), endpoint.to_string())) {
            None => (Reading::NoFeed, None),
            Some(p) if now < p.at + p.ttl => (Reading::Fresh { load: p.load }, Some(p.clone())),
            Some(p) => (Reading::Stale, Some(p.clone())),
        }
    }

    /// Drops the loads of endpoints `keep` says are gone (after a reload).
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        let mut loads = self.loads.lock().unwrap_or_else(PoisonError::into_inner);
        loads.retain(|(p, e), _| keep(p, e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(load: f64, at: Instant, ttl_s: u64) -> PushedLoad {
        let ttl = Duration::from_secs(ttl_s);
        PushedLoad { load, at, at_wall: SystemTime::now(), ttl, by: "ops".into() }
    }

    #[test]
    fn pushed_loads_live_until_their_ttl() {
        let pushed = Pushed::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(pushed.reading("p.", "a", t0).0, Reading::NoFeed);
        assert!(pushed.set("p.", "a", push(870.0, t0, 30)), "the first push starts a run");
        assert!(!pushed.set("p.", "a", push(880.0, t0 + s(10), 30)), "a live one continues it");
        assert_eq!(pushed.reading("p.", "a", t0 + s(39)).0, Reading::Fresh { load: 880.0 });
        assert_eq!(pushed.reading("p.", "a", t0 + s(40)).0, Reading::Stale);
        assert_eq!(pushed.reading("p.", "b", t0).0, Reading::NoFeed);
        assert!(pushed.set("p.", "a", push(5.0, t0 + s(41), 30)), "after expiry: a new run");
        assert!(pushed.clear("p.", "a"));
        assert!(!pushed.clear("p.", "a"));
        assert_eq!(pushed.reading("p.", "a", t0 + s(42)).0, Reading::NoFeed);
    }
}
