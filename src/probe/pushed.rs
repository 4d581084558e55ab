//! Health pushed through the admin API (`PUT .../endpoints/{e}/health`): a status with a
//! time to live, by endpoint. It is the result of the endpoint's `pushed` monitor while
//! live, or, on an endpoint without one, overrides the endpoint's status for as long. Kept
//! under a mutex that only the API and the endpoints' status updates take; queries never.
//! In a cluster the pushes come from etcd, stamped with the pushing replica's wall clock:
//! `expiry` puts their end on this replica's timer clock.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::model::health::Status;

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
    /// When it was pushed, as a wall-clock time (the pushing replica's, in a cluster).
    pub at_wall: SystemTime,
    pub ttl: Duration,
    /// When it stops holding, on this replica's timer clock.
    pub expires: Instant,
}

impl PushedHealth {
    /// A push made now, for `ttl`.
    pub fn new(healthy: bool, reason: String, by: String, ttl: Duration) -> PushedHealth {
        let expires = Instant::now() + ttl;
        PushedHealth { healthy, reason, by, at_wall: SystemTime::now(), ttl, expires }
    }

    /// Whether it still holds at `now`.
    pub fn is_live(&self, now: Instant) -> bool {
        now < self.expires
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

/// When a push made at `at_wall` for `ttl` stops holding on the timer clock, read at `now`
/// when the wall clock says `now_wall`: what is left of it by the wall clocks, never more
/// than `ttl` (a push stamped ahead of this clock lasts its `ttl` from now), and `now`
/// itself when nothing is left (it is expired already). So replicas whose wall clocks agree
/// end it at the same moment; a clock behind the pusher's holds it longer by the difference
/// (up to `ttl` from when it applied it), a clock ahead ends it that much sooner.
pub fn expiry(at_wall: SystemTime, ttl: Duration, now: Instant, now_wall: SystemTime) -> Instant {
    let left = at_wall
        .checked_add(ttl)
        .and_then(|end| end.duration_since(now_wall).ok())
        .unwrap_or_default();
    now + left.min(ttl)
}

/// The pushed statuses, by (absolute profile name, endpoint name). Expired pushes are kept
/// until replaced, cleared or their endpoint is gone (in a cluster, until etcd drops them):
/// a `last_known` monitor reads them.
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

    /// What a `pushed` monitor knows of `endpoint` from its last push, live or not: the
    /// status it says and why.
    pub fn known(&self, profile: &str, endpoint: &str) -> Option<(Status, String)> {
        let push = self.get(profile, endpoint)?;
        let status = if push.healthy { Status::Online } else { Status::Degraded };
        Some((status, push.describe()))
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
        let push =
            PushedHealth::new(false, "maintenance".into(), "ops".into(), Duration::from_secs(60));
        let at = push.expires - Duration::from_secs(60);
        assert_eq!(store.set("p.", "e", push.clone()), None);
        let got = store.get("p.", "e").unwrap();
        assert!(got.is_live(at + Duration::from_secs(59)));
        assert!(!got.is_live(at + Duration::from_secs(60)));
        assert_eq!(got.describe(), "pushed unhealthy by ops: maintenance");
        let known = (Status::Degraded, "pushed unhealthy by ops: maintenance".to_string());
        assert_eq!(store.known("p.", "e"), Some(known), "live or not");
        assert_eq!(store.get("p.", "other"), None);
        store.retain(|_, e| e != "e");
        assert_eq!(store.clear("p.", "e"), None);
    }

    #[test]
    fn expiry_is_what_the_wall_clocks_leave_of_the_ttl() {
        let s = Duration::from_secs;
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + s(1_800_000_000);
        // (pushed this long before now by the wall clock, or after it when negative; ttl;
        // seconds left on the timer clock).
        let cases: &[(i64, u64, u64)] = &[
            (0, 60, 60),
            (10, 60, 50),
            (59, 60, 1),
            (60, 60, 0),
            (3600, 60, 0),
            // Stamped ahead of this clock: the ttl from now, no more.
            (-30, 60, 60),
            (-7 * 86_400, 7 * 86_400, 7 * 86_400),
            (7 * 86_400 - 1, 7 * 86_400, 1),
        ];
        for &(ago, ttl, left) in cases {
            let at = match ago >= 0 {
                true => wall - s(ago.unsigned_abs()),
                false => wall + s(ago.unsigned_abs()),
            };
            let expires = expiry(at, s(ttl), now, wall);
            assert_eq!(expires, now + s(left), "pushed {ago}s ago for {ttl}s");
            let push =
                PushedHealth { expires, ..PushedHealth::new(true, "".into(), "".into(), s(ttl)) };
            assert_eq!(push.is_live(now), left > 0, "pushed {ago}s ago for {ttl}s");
        }
        assert_eq!(expiry(SystemTime::UNIX_EPOCH, s(60), now, wall), now, "long expired");
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
