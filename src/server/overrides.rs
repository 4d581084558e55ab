//! Run-time overrides as the admin API changes them: what each change does to an
//! endpoint's overrides, what can go wrong, and the event and log line a change leaves.
//! `Control::change_override` applies them; in a cluster `cluster::overrides` writes them
//! to etcd and `Control::apply_shared_overrides` applies what etcd holds.

use std::path::PathBuf;

use crate::config::overrides::{check_bias, check_weight};
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
    /// `routing: geoproximity`: the endpoint's bias.
    Bias(i8),
    ClearBias,
}

impl Change {
    /// The endpoint's overrides after this change.
    pub fn apply(self, o: Override) -> Override {
        match self {
            Change::Drain => Override { drained: true, ..o },
            Change::Undrain => Override { drained: false, ..o },
            Change::Weight(w) => Override { weight: Some(w), ..o },
            Change::ClearWeight => Override { weight: None, ..o },
            Change::Bias(b) => Override { bias: Some(b), ..o },
            Change::ClearBias => Override { bias: None, ..o },
        }
    }

    /// The changes that turn `before` into `after`: at most one for the drain, one for
    /// the weight and one for the bias (a hand edit in etcd can change all at once).
    pub fn between(before: Override, after: Override) -> Vec<Change> {
        let mut out = Vec::new();
        if before.drained != after.drained {
            out.push(if after.drained { Change::Drain } else { Change::Undrain });
        }
        if before.weight != after.weight {
            out.push(after.weight.map_or(Change::ClearWeight, Change::Weight));
        }
        if before.bias != after.bias {
            out.push(after.bias.map_or(Change::ClearBias, Change::Bias));
        }
        out
    }

    pub fn kind(self) -> Kind {
        match self {
            Change::Drain => Kind::Drain,
            Change::Undrain => Kind::Undrain,
            Change::Weight(_) => Kind::Weight,
            Change::ClearWeight => Kind::WeightCleared,
            Change::Bias(_) => Kind::Bias,
            Change::ClearBias => Kind::BiasCleared,
        }
    }

    /// What the change moves, before and after, as events and log lines show it: the
    /// effective weights or biases, from an endpoint's (weight, bias) before and after;
    /// `None` for a drain or an undrain.
    pub fn values(self, before: (u32, i8), after: (u32, i8)) -> Option<(i64, i64)> {
        match self {
            Change::Weight(_) | Change::ClearWeight => Some((before.0.into(), after.0.into())),
            Change::Bias(_) | Change::ClearBias => Some((before.1.into(), after.1.into())),
            Change::Drain | Change::Undrain => None,
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
    #[error("{0}")]
    Bias(String),
    /// The profile's routing method has no weights (or biases) to change.
    #[error("{0}")]
    NotTaken(String),
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
/// there: both exist, and a weight or bias is one the profile's routing method takes.
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
        let has_weights = crate::config::overrides::takes_weights(p.method);
        check_weight(p.method, w).map_err(if has_weights {
            OverrideError::Weight
        } else {
            OverrideError::NotTaken
        })?;
    }
    if let Change::Bias(b) = change {
        let has_biases = p.method == crate::model::Method::Geoproximity;
        check_bias(p.method, b).map_err(if has_biases {
            OverrideError::Bias
        } else {
            OverrideError::NotTaken
        })?;
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
    pub bias_override: Option<i8>,
}

/// The event of a change made by `by`; `values` are what it moved, before and after
/// (`Change::values`: weight and bias changes show them).
pub fn event(change: Change, state: &OverrideState, values: Option<(i64, i64)>, by: &str) -> Event {
    let e = Event::new(change.kind(), &state.profile, &state.endpoint).by(by);
    match values {
        Some((from, to)) => e.change(from, to),
        None => e,
    }
}

/// The log line of a change: who changed what (and, for weights and biases, from what to
/// what).
pub fn log(change: Change, state: &OverrideState, values: Option<(i64, i64)>, by: &str) {
    let (profile, endpoint, action) = (&state.profile, &state.endpoint, change.kind().as_str());
    match values {
        Some((from, to)) => tracing::info!(
            %profile, %endpoint, action, from, to, by,
            "endpoint override changed"
        ),
        None => tracing::info!(%profile, %endpoint, action, by, "endpoint override changed"),
    }
}

/// The event of an override a load could not apply.
pub fn dropped_event(d: &Dropped) -> Event {
    Event::new(Kind::OverrideDropped, &d.profile, &d.endpoint).reason(dropped_reason(d))
}

/// What was dropped and why, in words.
pub fn dropped_reason(d: &Dropped) -> String {
    let what = match (d.dropped.drained, d.dropped.weight, d.dropped.bias) {
        (true, Some(w), _) => format!("drain and weight {w}"),
        (true, None, _) => "drain".to_string(),
        (false, Some(w), _) => format!("weight {w}"),
        (false, None, Some(b)) => format!("bias {b}"),
        (false, None, None) => "override".to_string(),
    };
    format!("{what} dropped: {}", d.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_touch_only_their_part() {
        let none = Override::default();
        let o = |drained, weight| Override { drained, weight, bias: None };
        let both = o(true, Some(3));
        let cases = [
            (Change::Drain, none, o(true, None)),
            (Change::Drain, both, both),
            (Change::Undrain, both, o(false, Some(3))),
            (Change::Weight(7), both, o(true, Some(7))),
            (Change::ClearWeight, both, o(true, None)),
            (Change::Bias(-20), both, Override { bias: Some(-20), ..both }),
            (Change::ClearBias, Override { bias: Some(5), ..both }, both),
            (Change::ClearWeight, none, none),
        ];
        for (change, before, after) in cases {
            assert_eq!(change.apply(before), after, "{change:?} on {before:?}");
        }
    }

    #[test]
    fn changes_between_two_overrides() {
        let o = |drained, weight| Override { drained, weight, bias: None };
        let cases = [
            (o(false, None), o(false, None), vec![]),
            (o(false, None), o(true, None), vec![Change::Drain]),
            (o(true, Some(2)), o(false, Some(2)), vec![Change::Undrain]),
            (o(false, Some(2)), o(false, Some(5)), vec![Change::Weight(5)]),
            (o(true, Some(2)), o(false, None), vec![Change::Undrain, Change::ClearWeight]),
            (o(false, None), Override { bias: Some(9), ..o(false, None) }, vec![Change::Bias(9)]),
            (Override { bias: Some(9), ..o(true, None) }, o(true, None), vec![Change::ClearBias]),
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
            bias_override: None,
        };
        let e = event(Change::Drain, &state, None, "alice");
        assert_eq!(
            (e.kind, e.by.as_deref(), e.from.as_deref()),
            (Kind::Drain, Some("alice"), None)
        );
        let values = Change::Weight(5).values((1, 0), (5, 0));
        let e = event(Change::Weight(5), &state, values, "bob");
        assert_eq!((e.from.as_deref(), e.to.as_deref()), (Some("1"), Some("5")));
        let values = Change::Bias(-20).values((5, 10), (5, -20));
        let e = event(Change::Bias(-20), &state, values, "bob");
        assert_eq!(e.kind, Kind::Bias);
        assert_eq!((e.from.as_deref(), e.to.as_deref()), (Some("10"), Some("-20")));
        assert_eq!(Change::Drain.values((1, 2), (1, 2)), None);
        let d = Dropped {
            profile: "www.tm.example.test.".into(),
            endpoint: "a".into(),
            dropped: Override { drained: true, ..Override::default() },
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
