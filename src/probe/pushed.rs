//! Health pushed through the admin API (`PUT .../endpoints/{e}/health`): a status with a
//! time to live, by endpoint. It is the result of the endpoint's `pushed` monitor while
//! live, or, on an endpoint without one, overrides the endpoint's status for as long. Kept
//! under a mutex that only the API and the endpoints' status updates take; queries never.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::task::AbortHandle;
use tokio::time::Instant;

/// The shortest and longest time to live a push may ask for.
pub const MIN_TTL: Duration = Duration::from_secs(1);
pub const MAX_TTL: Duration = Duration::from_secs(7 * 86_400);

/// The longest reason and `by` kept, in bytes: they are shown and logged.
pub const MAX_TEXT: usize = 256;

/// One pushed status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushedHealth {
    pub healthy: bool,
    pub reason: String,
    /// Who pushed it (the request's `by`, else the caller's token name).
    pub by: String,
    /// When it was pushed, on the timer's clock and as a wall-clock time.
    pub at: Instant,
    pub at_wall: SystemTime,
    pub ttl: Duration,
}

impl PushedHealth {
    /// Whether it still holds at `now`.
    pub fn is_live(&self, now: Instant) -> bool {
        now < self.at + self.ttl
    }

    /// What the status page and logs say of it.
    pub fn describe(&self) -> String {
        let status = if self.healthy { "healthy" } else { "unhealthy" };
        match self.reason.is_empty() {
            true => format!("pushed {status} by {}", self.by),
            false => format!("pushed {status} by {}: {}", self.by, self.reason),
        }
    }
}

/// The pushed statuses, by (absolute profile name, endpoint name). Expired pushes are kept
/// until replaced, cleared or their endpoint is gone: a `last_known` monitor reads them.
#[derive(Debug, Default)]
pub struct PushedHealths {
    map: Mutex<HashMap<(String, String), PushedHealth>>,
    /// The task that re-evaluates an endpoint when its push expires: one per endpoint, so
    /// repeated pushes replace their timer rather than pile up tasks.
    timers: Mutex<HashMap<(String, String), AbortHandle>>,
}

impl PushedHealths {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), PushedHealth>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `push`; returns the push it replaces.
    pub fn set(&self, profile: &str, endpoint: &str, push: PushedHealth) -> Option<PushedHealth> {
        self.lock().insert((profile.to_string(), endpoint.to_string()), push)
    }

    /// Keeps `timer` as the expiry task of `endpoint`'s push, stopping the one before.
    pub fn set_timer(&self, profile: &str, endpoint: &str, timer: AbortHandle) {
        let key = (profile.to_string(), endpoint.to_string());
        let mut timers = self.timers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = timers.insert(key, timer) {
            old.abort();
        }
    }

    /// Forgets the push to `endpoint` (and stops its expiry task); returns it.
    pub fn clear(&self, profile: &str, endpoint: &str) -> Option<PushedHealth> {
        let key = (profile.to_string(), endpoint.to_string());
        let timer = self.timers.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
        if let Some(timer) = timer {
            timer.abort();
        }
        self.lock().remove(&key)
    }

    /// The last push to `endpoint`, live or not.
    pub fn get(&self, profile: &str, endpoint: &str) -> Option<PushedHealth> {
        self.lock().get(&(profile.to_string(), endpoint.to_string())).cloned()
    }

    /// Drops the pushes of endpoints `keep` says are gone (after a reload).
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.lock().retain(|(p, e), _| keep(p, e));
        let mut timers = self.timers.lock().unwrap_or_else(PoisonError::into_inner);
        timers.retain(|(p, e), timer| {
            let kept = keep(p, e);
            if !kept {
                timer.abort();
            }
            kept
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_lives_for_its_ttl_and_is_kept_after() {
        let store = PushedHealths::default();
        let at = Instant::now();
        let push = PushedHealth {
            healthy: false,
            reason: "maintenance".into(),
            by: "ops".into(),
            at,
            at_wall: SystemTime::now(),
            ttl: Duration::from_secs(60),
        };
        assert_eq!(store.set("p.", "e", push.clone()), None);
        let got = store.get("p.", "e").unwrap();
        assert!(got.is_live(at + Duration::from_secs(59)));
        assert!(!got.is_live(at + Duration::from_secs(60)));
        assert_eq!(got.describe(), "pushed unhealthy by ops: maintenance");
        assert_eq!(store.get("p.", "other"), None);
        store.retain(|_, e| e != "e");
        assert_eq!(store.clear("p.", "e"), None);
    }

    #[tokio::test]
    async fn a_new_timer_stops_the_one_before_and_clearing_stops_the_last() {
        let store = PushedHealths::default();
        let first = tokio::spawn(std::future::pending::<()>());
        store.set_timer("p.", "e", first.abort_handle());
        let second = tokio::spawn(std::future::pending::<()>());
        store.set_timer("p.", "e", second.abort_handle());
        assert!(first.await.unwrap_err().is_cancelled());
        let other = tokio::spawn(std::future::pending::<()>());
        store.set_timer("p.", "f", other.abort_handle());
        store.clear("p.", "e");
        assert!(second.await.unwrap_err().is_cancelled());
        store.retain(|_, e| e != "f");
        assert!(other.await.unwrap_err().is_cancelled());
    }
}
