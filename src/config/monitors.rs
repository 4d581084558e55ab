//! An endpoint's monitors and the rule that combines them: its own `monitors` or
//! `monitor`, else the profile's, each entry resolved over the profile's `monitor`
//! defaults (`docs/configuration.md`, "monitors").

use std::collections::HashSet;

use super::raw::{Loc, RawEndpoint, RawMonitor, RawMonitorRule, RawProfile};
use crate::diag::{Pos, Sink};
use crate::model::{Monitor, MonitorRule};

/// The most monitors one endpoint may have: each is a probe or a source to follow.
pub const MAX_MONITORS: usize = 16;

/// The monitors of a leaf endpoint, and their rule.
pub fn resolve(
    sink: &mut Sink<'_>,
    raw: &RawProfile,
    ep: &Loc<RawEndpoint>,
) -> (Vec<Monitor>, MonitorRule) {
    let e = &ep.value;
    let start = sink.errors.len();
    let defaults = raw.monitor.as_deref().map(|m| &m.value);
    if let (Some(_), Some(list)) = (&e.monitor, &e.monitors) {
        sink.on(&**list, "monitor and monitors cannot both be set (monitors holds every monitor)");
    }
    let monitors = match (&e.monitors, &e.monitor, &raw.monitors) {
        (Some(list), _, _) | (None, None, Some(list)) => named(sink, defaults, list),
        (None, own, _) => {
            let own = own.as_deref().map(|m| &m.value);
            super::monitor::resolve(sink, defaults, own, Pos::of(ep)).into_iter().collect()
        }
    };
    let rule = e.monitor_rule.as_deref().or(raw.monitor_rule.as_deref());
    let rule = rule.and_then(|r| self::rule(sink, r, monitors.len())).unwrap_or_default();
    // The profile's list and rule are checked again for every endpoint using them: one
    // error each is enough.
    dedupe(sink, start);
    (monitors, rule)
}

/// A `monitors` list: every entry named, names unique.
fn named(
    sink: &mut Sink<'_>,
    defaults: Option<&RawMonitor>,
    list: &Loc<Vec<Loc<RawMonitor>>>,
) -> Vec<Monitor> {
    if list.value.is_empty() || list.value.len() > MAX_MONITORS {
        sink.on(list, format!("monitors must hold 1 to {MAX_MONITORS} monitors"));
    }
    let mut names = HashSet::new();
    let mut out = Vec::new();
    for entry in &list.value {
        match entry.value.name.as_deref() {
            None => sink.on(entry, "every monitor in monitors needs a name"),
            Some(n) if !names.insert(n.value.as_str()) => {
                sink.on(n, format!("duplicate monitor name {:?}", n.value));
            }
            Some(_) => {}
        }
        let at = Pos::of(entry);
        out.extend(super::monitor::resolve(sink, defaults, Some(&entry.value), at));
    }
    out
}

fn rule(sink: &mut Sink<'_>, v: &Loc<RawMonitorRule>, monitors: usize) -> Option<MonitorRule> {
    match &v.value {
        RawMonitorRule::Name(n) if n == "all" => Some(MonitorRule::All),
        RawMonitorRule::Name(n) if n == "any" => Some(MonitorRule::Any),
        RawMonitorRule::Name(n) => {
            sink.on(v, format!("monitor_rule must be all, any or {{at_least: N}}, got {n:?}"));
            None
        }
        RawMonitorRule::AtLeast(a) => {
            let n = a.at_least.0;
            if n < 1 || n > monitors as i64 {
                let msg = format!(
                    "monitor_rule at_least must be between 1 and the number of monitors \
                     ({monitors}), got {n}"
                );
                sink.on(v, msg);
                return None;
            }
            u16::try_from(n).ok().map(MonitorRule::AtLeast)
        }
    }
}

/// Drops the errors recorded since `start` that repeat an earlier one.
fn dedupe(sink: &mut Sink<'_>, start: usize) {
    let mut i = start;
    while i < sink.errors.len() {
        if sink.errors[..i].contains(&sink.errors[i]) {
            sink.errors.remove(i);
        } else {
            i += 1;
        }
    }
}
