//! Pushed health as the server reports it: the log line and the event of a push or a clear,
//! made through this server's admin API or, in a cluster, read from etcd (every replica
//! reports what it applies, with the `by` stored there).

use crate::model::events::{Event, Events, Kind};
use crate::probe::PushedHealth;

/// Logs `push` to `endpoint` of `profile` and records its `health_pushed` event.
pub fn pushed(events: &Events, profile: &str, endpoint: &str, push: &PushedHealth) {
    let status = if push.healthy { "healthy" } else { "unhealthy" };
    let ttl = humantime::format_duration(push.ttl);
    tracing::info!(%profile, %endpoint, status, reason = push.reason, %ttl, by = %push.by, "health pushed");
    let event = Event::new(Kind::HealthPushed, profile, endpoint).by(&push.by);
    let mut event = if push.reason.is_empty() { event } else { event.reason(push.reason.as_str()) };
    event.to = Some(status.to_string());
    events.record(event);
}

/// Logs the clear of `endpoint`'s pushed health by `by` and records its `health_cleared`
/// event.
pub fn cleared(events: &Events, profile: &str, endpoint: &str, by: &str) {
    tracing::info!(%profile, %endpoint, %by, "pushed health cleared");
    events.record(Event::new(Kind::HealthCleared, profile, endpoint).by(by));
}
