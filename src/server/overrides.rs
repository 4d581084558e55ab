//! Run-time overrides as the admin API changes them: what each change does to an
//! endpoint's overrides, what can go wrong, and the event and log line a change leaves.
//! `Control::change_override` applies them; in a cluster `cluster::overrides` writes them
//! to etcd and `Control::apply_shared_overrides` applies what etcd holds.

use std::path::PathBuf;

use crate::config::overrides::check_weight;
use crate::config::{Dropped, Override};
use crate::model::events::{Event, Kind};
use crate::model::{Endpoint, Profile, Snapshot};
use crate::wire::name::WireName;

/// One operator action on one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Drain,
    Undrain,
    Weight(u32),
    ClearWeight,
}

impl Change {
    /// The endpoint's overrides after this change.
    pub fn apply(self, o: Override) -> Override {
        match self {
            Change::Drain => Override { drained: true, ..o },
            Change::Undrain => Override { drained: false, ..o },
            Change::Weight(w) => Override { weight: Some(w), ..o },
            Change::ClearWeight => Override { weight: None, ..o },
        }
    }

    /// The changes that turn `before` into `after`: at most one for the drain and one for
    /// the weight (a hand edit in etcd can change both at once).
    pub fn between(before: Override, after: Override) -> Vec<Change> {
        let mut out = Vec::new();
        if before.drained != after.drained {
            out.push(if after.drained { Change::Drain } else { Change::Undrain });
        }
        if before.weight != after.weight {
            out.push(after.weight.map_or(Change::ClearWeight, Change::Weight));
        }
        out
    }

    pub fn kind(self) -> Kind {
        match self {
            Change::Drain => Kind::Drain,
            Change::Undrain => Kind::Undrain,
            Change::Weight(_) => Kind::Weight,
            Change::ClearWeight => Kind::WeightCleared,
        }
    }
}

/// Why a change was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    #[error("no profile named {0}")]
    NoProfile(String),
    #[error("profile {profile} has no endpoint named {endpoint:?}")]
    NoEndpoint { profile: String, endpoint: String },
    #[error("{0}")]
    Weight(String),
    #[error("cannot write the state file {}: {source}; nothing was changed", path.display())]
    Save { path: PathBuf, source: std::io::Error },
    #[error(
        "etcd did not take the change ({0}); replicas share overrides through etcd, so none \
         can change while it is unreachable"
    )]
    Unavailable(String),
    #[error(
        "the endpoint's overrides kept changing in etcd meanwhile; nothing was changed, try again"
    )]
    Contended,
}

/// The profile and endpoint `change` is about in `snapshot`, once it is known to apply
/// there: both exist, and a weight is one the profile's routing method takes.
pub fn check<'a>(
    snapshot: &'a Snapshot,
    profile: &WireName,
    endpoint: &str,
    change: Change,
) -> Result<(&'a Profile, &'a Endpoint), OverrideError> {
    let id = snapshot
        .profile_by_name(profile)
        .ok_or_else(|| OverrideError::NoProfile(profile.to_string()))?;
    let p = &snapshot.profiles[id];
    let ep = p.endpoints.iter().find(|e| e.name == endpoint).ok_or_else(|| {
        OverrideError::NoEndpoint { profile: p.name.clone(), endpoint: endpoint.to_string() }
    })?;
    if let Change::Weight(w) = change {
        check_weight(p.method, w).map_err(OverrideError::Weight)?;
    }
    Ok((p, ep))
}

/// An endpoint's overrides once a change is done, as the admin API answers them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverrideState {
    /// Absolute profile name.
    pub profile: String,
    pub endpoint: String,
    pub drained: bool,
    pub weight_override: Option<u32>,
}

/// The event of a change made by `by`; `weights` are the effective weights before and
/// after (weight changes show them).
pub fn event(change: Change, state: &OverrideState, weights: (u32, u32), by: &str) -> Event {
    let e = Event::new(change.kind(), &state.profile, &state.endpoint).by(by);
    match change {
        Change::Weight(_) | Change::ClearWeight => e.change(weights.0, weights.1),
        Change::Drain | Change::Undrain => e,
    }
}

/// The log line of a change: who changed what (and, for weights, from what to what).
pub fn log(change: Change, state: &OverrideState, weights: (u32, u32), by: &str) {
    let (profile, endpoint, action) = (&state.profile, &state.endpoint, change.kind().as_str());
    match change {
        Change::Weight(_) | Change::ClearWeight => tracing::info!(
            %profile, %endpoint, action, from = weights.0, to = weights.1, by,
            "endpoint override changed"
        ),
        Change::Drain | Change::Undrain => {
            tracing::info!(%profile, %endpoint, action, by, "endpoint override changed")
        }
    }
}

/// The event of an override a load could not apply.
pub fn dropped_event(d: &Dropped) -> Event {
    Event::new(Kind::OverrideDropped, &d.profile, &d.endpoint).reason(dropped_reason(d))
}

/// What was dropped and why, in words.
pub fn dropped_reason(d: &Dropped) -> String {
    let what = match (d.dropped.drained, d.dropped.weight) {
        (true, Some(w)) => format!("drain and weight {w}"),
        (true, None) => "drain".to_string(),
        (false, Some(w)) => format!("weight {w}"),
        (false, None) => "override".to_string(),
    };
    format!("{what} dropped: {}", d.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_touch_only_their_part() {
        let none = Override::default();
        let both = Override { drained: true, weight: Some(3) };
        let cases = [
            (Change::Drain, none, Override { drained: true, weight: None }),
            (Change::Drain, both, both),
            (Change::Undrain, both, Override { drained: false, weight: Some(3) }),
            (Change::Weight(7), both, Override { drained: true, weight: Some(7) }),
            (Change::ClearWeight, both, Override { drained: true, weight: None }),
            (Change::ClearWeight, none, none),
        ];
        for (change, before, after) in cases {
            assert_eq!(change.apply(before), after, "{change:?} on {before:?}");
        }
    }

    #[test]
    fn changes_between_two_overrides() {
        let o = |drained, weight| Override { drained, weight };
        let cases = [
            (o(false, None), o(false, None), vec![]),
            (o(false, None), o(true, None), vec![Change::Drain]),
            (o(true, Some(2)), o(false, Some(2)), vec![Change::Undrain]),
            (o(false, Some(2)), o(false, Some(5)), vec![Change::Weight(5)]),
            (o(true, Some(2)), o(false, None), vec![Change::Undrain, Change::ClearWeight]),
        ];
        for (before, after, want) in cases {
            assert_eq!(Change::between(before, after), want, "{before:?} -> {after:?}");
        }
    }

    #[test]
    fn events_carry_who_and_the_weights() {
        let state = OverrideState {
            profile: "www.tm.example.test.".into(),
            endpoint: "a".into(),
            drained: true,
            weight_override: Some(5),
        };
        let e = event(Change::Drain, &state, (1, 1), "alice");
        assert_eq!(
            (e.kind, e.by.as_deref(), e.from.as_deref()),
            (Kind::Drain, Some("alice"), None)
        );
        let e = event(Change::Weight(5), &state, (1, 5), "bob");
        assert_eq!((e.from.as_deref(), e.to.as_deref()), (Some("1"), Some("5")));
        let d = Dropped {
            profile: "www.tm.example.test.".into(),
            endpoint: "a".into(),
            dropped: Override { drained: true, weight: None },
            reason: "the endpoint is no longer in the profile".into(),
        };
        let e = dropped_event(&d);
        assert_eq!(e.kind, Kind::OverrideDropped);
        assert_eq!(
            e.reason.as_deref(),
            Some("drain dropped: the endpoint is no longer in the profile")
        );
    }
}
