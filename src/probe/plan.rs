//! Which probes a snapshot needs: one per distinct (target, monitor), with every endpoint
//! monitor that uses it, and which endpoints combine several monitors.
//!
//! Pure, so what is shared and what is probed at all is tested without sockets. An
//! endpoint is probed when it is a leaf (not nested), enabled in the configuration
//! (drained or not), not `always_serve` and its profile is enabled; the endpoints of a disabled profile are reported `stopped` instead,
//! since nothing can be served from them. A plan is built against the previous one and
//! shares every profile that did not change, since reloads mostly change little and a
//! fresh plan of a large configuration is mostly allocation.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::snapshot::Snapshot;
use crate::model::{Endpoint, Monitor, MonitorRule, Profile, Target};
use crate::wire::name::WireName;

/// What a probe connects to: an address, or a host name resolved on every run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProbeTarget {
    Ip(IpAddr),
    Host(WireName),
}

impl fmt::Display for ProbeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeTarget::Ip(ip) => ip.fmt(f),
            ProbeTarget::Host(name) => name.fmt(f),
        }
    }
}

/// The identity of a probe. Two endpoints with equal keys share one probe, its schedule
/// and its state; every monitor field is part of it, since any of them changes what a
/// result means.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProbeKey {
    pub target: ProbeTarget,
    pub monitor: Monitor,
}

/// An endpoint monitor a probe decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    pub slot: usize,
    /// Position of the monitor in the endpoint's `monitors`.
    pub monitor: usize,
}

/// A leaf endpoint of a profile, with the probe its monitor asks for (if any). Its health
/// slot is not kept: a profile's leaves have consecutive slots (`config::assign_slots`), so
/// it is the profile's base plus the leaf's position, and a profile keeps its `Leaves` when
/// profiles before it gain or lose endpoints.
#[derive(Debug)]
pub struct Leaf {
    pub endpoint: Arc<str>,
    pub target: ProbeTarget,
    /// Set when the endpoint is monitored (enabled, not `always_serve`), in configuration
    /// order; its monitors run only if the profile is enabled too, and it is shown
    /// `stopped` otherwise.
    pub monitors: Vec<LeafMonitor>,
    pub rule: MonitorRule,
}

/// One monitor of a leaf endpoint.
#[derive(Debug)]
pub struct LeafMonitor {
    pub monitor: Monitor,
    /// The probe deciding it; `None` for `pushed` and `file` monitors. Its monitor has no
    /// name, so that endpoints naming the same probe differently share it.
    pub probe: Option<ProbeKey>,
}

impl Leaf {
    /// Whether the endpoint has monitors (and so a status of its own to decide).
    pub fn is_monitored(&self) -> bool {
        !self.monitors.is_empty()
    }
}

/// The leaf endpoints of one profile, in endpoint order. Shared by consecutive plans for
/// as long as none of it changes: building it allocates, comparing it does not.
#[derive(Debug)]
pub struct Leaves {
    pub name: Arc<str>,
    pub enabled: bool,
    pub leaves: Vec<Leaf>,
}

/// A profile's `Leaves` where the snapshot puts them: `base` is the first leaf's slot.
#[derive(Clone, Debug)]
pub struct Placed {
    pub base: usize,
    /// Whether any leaf has a monitor: lets `probes` and `stopped` skip the others without
    /// reading their `Leaves`.
    pub monitored: bool,
    pub leaves: Arc<Leaves>,
}

impl Placed {
    /// The health slot of the leaf at position `i`.
    pub fn slot(&self, i: usize) -> usize {
        self.base.wrapping_add(i)
    }

    /// The monitors deciding `leaf`'s status: none when its profile is disabled.
    pub fn monitors<'a>(&self, leaf: &'a Leaf) -> &'a [LeafMonitor] {
        if self.leaves.enabled { &leaf.monitors } else { &[] }
    }
}

/// The probes of a snapshot, as its profiles' leaves. Each reload plans against the
/// previous plan and takes over every profile whose leaves did not change, so a reload
/// costs a comparison per endpoint and allocations only for what changed.
#[derive(Debug, Default)]
pub struct Plan {
    /// In snapshot order (profiles without leaves included).
    pub profiles: Vec<Placed>,
    /// Position in `profiles` by absolute name; shared while no profile moved.
    pub index: Arc<HashMap<Arc<str>, usize>>,
}

/// Plans `snap`, taking over what it can from `previous`.
pub fn plan(snap: &Snapshot, previous: &Plan) -> Plan {
    let mut moved = snap.profiles.len() != previous.profiles.len();
    let mut profiles = Vec::with_capacity(snap.profiles.len());
    for (i, p) in snap.profiles.iter().enumerate() {
        let old = match previous.profiles.get(i) {
            Some(o) if *o.leaves.name == *p.name => Some(o),
            _ => {
                moved = true;
                previous.index.get(p.name.as_str()).map(|&j| &previous.profiles[j])
            }
        };
        let kept = old.and_then(|o| Some(Placed { base: unchanged(&o.leaves, p)?, ..o.clone() }));
        profiles.push(kept.unwrap_or_else(|| build(p)));
    }
    let index = if moved {
        let names = profiles.iter().enumerate().map(|(i, p)| (p.leaves.name.clone(), i));
        Arc::new(names.collect())
    } else {
        previous.index.clone()
    };
    Plan { profiles, index }
}

impl Plan {
    /// Every probe to run, with the endpoints whose slots it writes.
    pub fn probes(&self) -> HashMap<&ProbeKey, Vec<User>> {
        let mut out: HashMap<&ProbeKey, Vec<User>> = HashMap::new();
        for placed in self.profiles.iter().filter(|p| p.monitored && p.leaves.enabled) {
            let p = &placed.leaves;
            for (i, leaf) in p.leaves.iter().enumerate() {
                for (monitor, m) in placed.monitors(leaf).iter().enumerate() {
                    let Some(key) = &m.probe else { continue };
                    let user = User {
                        profile: p.name.clone(),
                        endpoint: leaf.endpoint.clone(),
                        slot: placed.slot(i),
                        monitor,
                    };
                    out.entry(key).or_default().push(user);
                }
            }
        }
        out
    }

    /// Slots of monitored endpoints in disabled profiles: never probed, shown `stopped`.
    pub fn stopped(&self) -> impl Iterator<Item = usize> + '_ {
        let disabled = self.profiles.iter().filter(|p| p.monitored && !p.leaves.enabled);
        disabled.flat_map(|p| {
            let leaves = p.leaves.leaves.iter().enumerate();
            leaves.filter(|(_, l)| l.is_monitored()).map(|(i, _)| p.slot(i))
        })
    }
}

/// The probe target of a leaf endpoint; `None` for a nested one.
fn leaf_target(target: &Target) -> Option<ProbeTarget> {
    match target {
        Target::V4(ip) => Some(ProbeTarget::Ip(IpAddr::V4(*ip))),
        Target::V6(ip) => Some(ProbeTarget::Ip(IpAddr::V6(*ip))),
        // A flattened host name is probed by name, as a CNAME target is: the probe resolves
        // it itself.
        Target::Host(name) | Target::Flat(name) => Some(ProbeTarget::Host(name.clone())),
        Target::Nested(_) => None,
    }
}

/// `leaf_target(t) == Some(probe)`, without cloning a host name.
fn same_target(probe: &ProbeTarget, t: &Target) -> bool {
    match (probe, t) {
        (ProbeTarget::Ip(IpAddr::V4(a)), Target::V4(b)) => a == b,
        (ProbeTarget::Ip(IpAddr::V6(a)), Target::V6(b)) => a == b,
        (ProbeTarget::Host(a), Target::Host(b) | Target::Flat(b)) => a == b,
        _ => false,
    }
}

/// The monitors of `ep`, whether or not its profile is enabled. A drained endpoint is
/// probed as before, so its health is known when it is undrained.
fn monitors(ep: &Endpoint) -> &[Monitor] {
    if ep.configured_enabled && !ep.always_serve { &ep.monitors } else { &[] }
}

/// The monitors of a leaf endpoint, with the probe of each probed one.
fn leaf_monitors(ep: &Endpoint, target: &ProbeTarget) -> Vec<LeafMonitor> {
    let probe = |m: &Monitor| {
        let monitor = Monitor { name: String::new(), ..m.clone() };
        ProbeKey { target: target.clone(), monitor }
    };
    let all = monitors(ep).iter();
    all.map(|m| LeafMonitor { monitor: m.clone(), probe: m.is_probed().then(|| probe(m)) })
        .collect()
}

/// The base slot `p` puts `old` at, if `old` still describes `p` exactly. `old` was looked
/// up by `p`'s name, so the name is not compared again.
fn unchanged(old: &Leaves, p: &Profile) -> Option<usize> {
    if old.enabled != p.enabled {
        return None;
    }
    let mut olds = old.leaves.iter();
    let mut base = None;
    let leaves = p.endpoints.iter().filter(|e| !matches!(e.target, Target::Nested(_)));
    for (i, ep) in leaves.enumerate() {
        let l = olds.next()?;
        let slot = ep.health_slot?;
        let base = *base.get_or_insert(slot);
        let same = *l.endpoint == *ep.name
            && base + i == slot
            && same_target(&l.target, &ep.target)
            && l.rule == ep.monitor_rule
            && l.monitors.iter().map(|m| &m.monitor).eq(monitors(ep));
        if !same {
            return None;
        }
    }
    olds.next().is_none().then_some(base.unwrap_or(0))
}

fn build(p: &Profile) -> Placed {
    let mut base = None;
    let mut leaves = Vec::new();
    for ep in &p.endpoints {
        let Some(target) = leaf_target(&ep.target) else { continue };
        let slot = ep.health_slot.expect("a load gives every leaf endpoint a health slot");
        let base = *base.get_or_insert(slot);
        debug_assert_eq!(slot, base + leaves.len(), "slots not consecutive");
        let monitors = leaf_monitors(ep, &target);
        let endpoint = Arc::from(ep.name.as_str());
        leaves.push(Leaf { endpoint, target, monitors, rule: ep.monitor_rule });
    }
    let monitored = leaves.iter().any(Leaf::is_monitored);
    let leaves = Leaves { name: Arc::from(p.name.as_str()), enabled: p.enabled, leaves };
    Placed { base: base.unwrap_or(0), monitored, leaves: Arc::new(leaves) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(profiles: &str) -> Snapshot {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
        std::fs::write(
            dir.path().join("steerdns.yaml"),
            "listen: { dns: [\"127.0.0.1:0\"] }\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: { rname: h.example.test. }\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("profiles/p.yaml"), profiles).unwrap();
        crate::config::load(&dir.path().join("steerdns.yaml"), None).unwrap().snapshot
    }

    #[test]
    fn shared_probes_and_what_is_never_probed() {
        let snap = load(
            "name: a\nrouting: priority\nmonitor: { interval: 5s }\nendpoints:\n\
             \x20 - { name: one, target: 192.0.2.1 }\n\
             \x20 - { name: two, target: 192.0.2.2, monitor: { path: /x } }\n\
             \x20 - { name: off, target: 192.0.2.3, enabled: false }\n\
             \x20 - { name: always, target: 192.0.2.4, always_serve: true }\n\
             \x20 - { name: host, target: www.example.net. }\n\
             \x20 - { name: kid, profile: c }\n\
             ---\nname: b\nrouting: weighted\nmonitor: { interval: 5s }\nendpoints:\n\
             \x20 - { name: same, target: 192.0.2.1 }\n\
             \x20 - { name: other-interval, target: 192.0.2.2, monitor: { path: /x, interval: 6s } }\n\
             ---\nname: c\nrouting: priority\nenabled: false\nendpoints:\n\
             \x20 - { name: sleeping, target: 192.0.2.1 }\n",
        );
        let plan = plan(&snap, &Plan::default());
        let names = |users: &[User]| -> Vec<String> {
            users.iter().map(|u| format!("{}/{}", u.profile, u.endpoint)).collect()
        };
        let mut shared: Vec<Vec<String>> = plan.probes().values().map(|u| names(u)).collect();
        shared.sort();
        assert_eq!(
            shared,
            vec![
                vec!["a.tm.example.test./host"],
                vec!["a.tm.example.test./one", "b.tm.example.test./same"],
                vec!["a.tm.example.test./two"],
                vec!["b.tm.example.test./other-interval"],
            ]
        );
        // Every leaf is listed (the nested one is not a leaf), probed or not.
        let leaves = listed(&plan);
        assert_eq!(leaves.len(), 8);
        assert!(leaves.contains(&("a.tm.example.test./off".into(), false, 2)));
        assert!(leaves.contains(&("a.tm.example.test./always".into(), false, 3)));
        let sleeping = ("c.tm.example.test./sleeping".to_string(), false, 7);
        assert!(leaves.contains(&sleeping));
        assert_eq!(plan.stopped().collect::<Vec<_>>(), vec![sleeping.2]);
    }

    /// (profile/endpoint, probed, slot) of every leaf.
    fn listed(plan: &Plan) -> Vec<(String, bool, usize)> {
        let mut out = Vec::new();
        for p in &plan.profiles {
            for (i, l) in p.leaves.leaves.iter().enumerate() {
                let name = format!("{}/{}", p.leaves.name, l.endpoint);
                out.push((name, !p.monitors(l).is_empty(), p.slot(i)));
            }
        }
        out
    }

    fn profile<'a>(plan: &'a Plan, name: &str) -> &'a Placed {
        &plan.profiles[plan.index[name]]
    }

    const THREE: &str = "name: a\nrouting: priority\nmonitor: { interval: 5s }\nendpoints:\n\
        \x20 - { name: one, target: 192.0.2.1 }\n\
        ---\nname: b\nrouting: priority\nmonitor: { interval: 5s }\nendpoints:\n\
        \x20 - { name: two, target: 192.0.2.2 }\n\x20 - { name: host, target: www.example.net. }\n\
        ---\nname: c\nrouting: priority\nendpoints:\n\x20 - { name: three, target: 192.0.2.3 }\n";

    #[test]
    fn unchanged_profiles_are_taken_over() {
        let first = plan(&load(THREE), &Plan::default());
        // The same configuration again: nothing is rebuilt, not even the index.
        let again = plan(&load(THREE), &first);
        assert!(Arc::ptr_eq(&first.index, &again.index));
        for (a, b) in first.profiles.iter().zip(&again.profiles) {
            assert!(Arc::ptr_eq(&a.leaves, &b.leaves));
        }
        assert_eq!(listed(&first), listed(&again));
        // `a` gains an endpoint: it is rebuilt; `b` and `c` are kept, at shifted slots.
        let grown = THREE.replace(
            "\x20 - { name: one, target: 192.0.2.1 }\n",
            "\x20 - { name: one, target: 192.0.2.1 }\n\x20 - { name: new, target: 192.0.2.9 }\n",
        );
        let next = plan(&load(&grown), &again);
        let (a, b, c) = ("a.tm.example.test.", "b.tm.example.test.", "c.tm.example.test.");
        assert!(!Arc::ptr_eq(&profile(&again, a).leaves, &profile(&next, a).leaves));
        assert!(Arc::ptr_eq(&profile(&again, b).leaves, &profile(&next, b).leaves));
        assert!(Arc::ptr_eq(&profile(&again, c).leaves, &profile(&next, c).leaves));
        assert_eq!(profile(&next, b).base, profile(&again, b).base + 1);
        let fresh = plan(&load(&grown), &Plan::default());
        assert_eq!(listed(&next), listed(&fresh));
        // A changed monitor is a change too.
        let slower = grown.replace(
            "name: b\nrouting: priority\nmonitor: { interval: 5s }",
            "name: b\nrouting: priority\nmonitor: { interval: 7s }",
        );
        let last = plan(&load(&slower), &next);
        assert!(!Arc::ptr_eq(&profile(&next, b).leaves, &profile(&last, b).leaves));
        assert!(Arc::ptr_eq(&profile(&next, c).leaves, &profile(&last, c).leaves));
    }
}
