//! What a notification is about: one endpoint's or one profile's status change, and how a
//! profile's status is derived from its endpoints (`up` when every endpoint that takes
//! answers serves, `degraded` when some do, `down` when none do).

use std::time::SystemTime;

use crate::model::Profile;
use crate::model::events::{Event, Kind};
use crate::model::health::{HealthView, Status};
use crate::routing::{Ctx, status};

/// Whose status changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    Endpoint,
    Profile,
}

impl Subject {
    pub fn as_str(self) -> &'static str {
        match self {
            Subject::Endpoint => "endpoint",
            Subject::Profile => "profile",
        }
    }
}

/// One status change to notify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub subject: Subject,
    /// Absolute profile name.
    pub profile: String,
    /// Empty for a profile's change.
    pub endpoint: String,
    pub from: String,
    pub to: String,
    /// Whether the old and the new status serve answers (an alert fires while not).
    pub from_serving: bool,
    pub to_serving: bool,
    pub reason: String,
    pub at: SystemTime,
    /// The number of the endpoint status event this change is, or follows from.
    pub seq: u64,
}

impl Change {
    /// The change an endpoint status event records (`None` for other events).
    pub fn of_event(e: &Event) -> Option<Change> {
        if e.kind != Kind::Status {
            return None;
        }
        let (from, to) = (e.from.clone()?, e.to.clone()?);
        let serving = |s: &str| !matches!(s, "degraded" | "disabled" | "stopped");
        Some(Change {
            subject: Subject::Endpoint,
            profile: e.profile.clone(),
            endpoint: e.endpoint.clone(),
            from_serving: serving(&from),
            to_serving: serving(&to),
            from,
            to,
            reason: e.reason.clone().unwrap_or_default(),
            at: e.time,
            seq: e.seq,
        })
    }
}

impl Change {
    /// A new endpoint's first probe result, `checking` to `online`: it served before and
    /// does now, so nothing is sent. Without this every start and reload would send one
    /// message per endpoint, filling the queues while nothing failed.
    pub fn is_first_success(&self) -> bool {
        self.subject == Subject::Endpoint && self.from == "checking" && self.to == "online"
    }
}

/// A profile's status as notifications show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileStatus {
    Up,
    Degraded,
    Down,
}

impl ProfileStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileStatus::Up => "up",
            ProfileStatus::Degraded => "degraded",
            ProfileStatus::Down => "down",
        }
    }
}

/// The status of a profile with `serving` of `taking` endpoints serving. `None` when no
/// endpoint takes answers (disabled profile, every endpoint drained): an operator's
/// decision, not a status to notify.
pub fn profile_status(serving: usize, taking: usize) -> Option<ProfileStatus> {
    match (serving, taking) {
        (_, 0) => None,
        (0, _) => Some(ProfileStatus::Down),
        (s, t) if s >= t => Some(ProfileStatus::Up),
        _ => Some(ProfileStatus::Degraded),
    }
}

/// `p`'s status now, with the counts it comes from (serving, taking). Endpoints drained or
/// disabled, and nested ones whose child profile is disabled, do not take answers.
pub fn of_profile<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    p: &Profile,
) -> Option<(ProfileStatus, usize, usize)> {
    if !p.enabled {
        return None;
    }
    let (mut serving, mut taking) = (0, 0);
    for e in &p.endpoints {
        let st = status::endpoint_status(ctx, e);
        if st == Status::Disabled || st == Status::Stopped {
            continue;
        }
        taking += 1;
        serving += usize::from(st.is_serving());
    }
    profile_status(serving, taking).map(|s| (s, serving, taking))
}

/// The change of a profile from `from` to `to` (`serving` of `taking` endpoints serve),
/// following the endpoint event `seq` at `at`.
pub fn profile_change(
    profile: &str,
    from: ProfileStatus,
    (to, serving, taking): (ProfileStatus, usize, usize),
    at: SystemTime,
    seq: u64,
) -> Change {
    Change {
        subject: Subject::Profile,
        profile: profile.to_string(),
        endpoint: String::new(),
        from: from.as_str().into(),
        to: to.as_str().into(),
        from_serving: from == ProfileStatus::Up,
        to_serving: to == ProfileStatus::Up,
        reason: format!("{serving} of {taking} endpoints serving"),
        at,
        seq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Method;
    use crate::model::health::Status::*;
    use crate::routing::testkit::Lab;

    #[test]
    fn profile_status_by_serving_endpoints() {
        use ProfileStatus::*;
        // (serving, taking, want)
        let cases = [
            (0, 0, None),
            (0, 1, Some(Down)),
            (0, 3, Some(Down)),
            (1, 3, Some(Degraded)),
            (2, 3, Some(Degraded)),
            (3, 3, Some(Up)),
            (1, 1, Some(Up)),
        ];
        for (s, t, want) in cases {
            assert_eq!(profile_status(s, t), want, "{s} of {t}");
        }
    }

    #[test]
    fn a_profile_counts_its_endpoints_that_take_answers() {
        // (statuses of a, b, c; c drained; want)
        let cases = [
            ([Online, Checking, Online], false, Some((ProfileStatus::Up, 3, 3))),
            ([Online, Degraded, Online], false, Some((ProfileStatus::Degraded, 2, 3))),
            ([Degraded, Degraded, Online], true, Some((ProfileStatus::Down, 0, 2))),
            ([Online, Online, Degraded], true, Some((ProfileStatus::Up, 2, 2))),
        ];
        for (statuses, drained, want) in cases {
            let mut w = Lab::new();
            let p = w.profile("p", Method::Priority);
            for (name, addr) in [("a", "192.0.2.1"), ("b", "192.0.2.2"), ("c", "192.0.2.3")] {
                w.ep(p, name, addr);
            }
            w.profiles[p].endpoints[2].enabled = !drained;
            let w = w.finish();
            for (slot, st) in statuses.into_iter().enumerate() {
                w.health.set(slot, st);
            }
            assert_eq!(of_profile(w.ctx(), &w.profiles[p]), want, "{statuses:?} {drained}");
        }
    }

    #[test]
    fn status_events_become_endpoint_changes() {
        let e = Event::new(Kind::Status, "www.example.", "eu")
            .change(Status::Online, Status::Degraded)
            .reason("connection refused");
        let c = Change::of_event(&Event { seq: 4, ..e }).unwrap();
        assert_eq!(
            (c.subject, c.from.as_str(), c.to.as_str(), c.from_serving, c.to_serving, c.seq),
            (Subject::Endpoint, "online", "degraded", true, false, 4)
        );
        assert_eq!(Change::of_event(&Event::new(Kind::Drain, "p.", "e")), None);
        // (from, to, a first success)
        let cases = [
            ("checking", "online", true),
            ("checking", "degraded", false),
            ("degraded", "online", false),
            ("online", "degraded", false),
        ];
        for (from, to, want) in cases {
            let e = Event::new(Kind::Status, "p.", "e").change(from, to);
            assert_eq!(Change::of_event(&e).unwrap().is_first_success(), want, "{from} {to}");
        }
    }
}
