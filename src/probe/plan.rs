//! Which probes a snapshot needs: one per distinct (target, monitor), with every endpoint
//! that uses it.
//!
//! Pure, so what is shared and what is probed at all is tested without sockets. An
//! endpoint is probed when it is a leaf (not nested), enabled, not `always_serve` and its
//! profile is enabled; the endpoints of a disabled profile are reported `stopped` instead,
//! since nothing can be served from them.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::dns::name::WireName;
use crate::model::{Monitor, Target};
use crate::snapshot::Snapshot;

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

/// An endpoint whose health slot a probe writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    pub slot: usize,
}

/// A leaf endpoint of the snapshot, in profile and endpoint order, with the probe (if any)
/// that decides its status.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub user: User,
    pub target: ProbeTarget,
    pub probe: Option<ProbeKey>,
}

/// The probes of a snapshot.
#[derive(Debug, Default)]
pub struct Plan {
    pub probes: HashMap<ProbeKey, Vec<User>>,
    pub leaves: Vec<Leaf>,
    /// Slots of monitored endpoints in disabled profiles: never probed, shown `stopped`.
    pub stopped: Vec<usize>,
}

pub fn plan(snap: &Snapshot) -> Plan {
    let mut out = Plan::default();
    for p in &snap.profiles {
        let profile: Arc<str> = Arc::from(p.name.as_str());
        for ep in &p.endpoints {
            let target = match &ep.target {
                Target::V4(ip) => ProbeTarget::Ip(IpAddr::V4(*ip)),
                Target::V6(ip) => ProbeTarget::Ip(IpAddr::V6(*ip)),
                Target::Host(name) => ProbeTarget::Host(name.clone()),
                Target::Nested(_) => continue,
            };
            let user = User {
                profile: profile.clone(),
                endpoint: Arc::from(ep.name.as_str()),
                slot: ep.health_slot,
            };
            let monitor = ep.monitor.as_ref().filter(|_| ep.enabled && !ep.always_serve);
            let key = match monitor {
                Some(_) if !p.enabled => {
                    out.stopped.push(ep.health_slot);
                    None
                }
                Some(m) => Some(ProbeKey { target: target.clone(), monitor: m.clone() }),
                None => None,
            };
            if let Some(key) = &key {
                out.probes.entry(key.clone()).or_default().push(user.clone());
            }
            out.leaves.push(Leaf { user, target, probe: key });
        }
    }
    out
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
        crate::config::load(&dir.path().join("steerdns.yaml"), None).unwrap()
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
        let plan = plan(&snap);
        let names = |users: &[User]| -> Vec<String> {
            users.iter().map(|u| format!("{}/{}", u.profile, u.endpoint)).collect()
        };
        let mut shared: Vec<Vec<String>> = plan.probes.values().map(|u| names(u)).collect();
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
        let leaves: Vec<(String, bool)> = plan
            .leaves
            .iter()
            .map(|l| (format!("{}/{}", l.user.profile, l.user.endpoint), l.probe.is_some()))
            .collect();
        assert_eq!(leaves.len(), 8);
        assert!(leaves.contains(&("a.tm.example.test./off".into(), false)));
        assert!(leaves.contains(&("a.tm.example.test./always".into(), false)));
        assert!(leaves.contains(&("c.tm.example.test./sleeping".into(), false)));
        let sleeping = plan.leaves.iter().find(|l| &*l.user.endpoint == "sleeping").unwrap();
        assert_eq!(plan.stopped, vec![sleeping.user.slot]);
    }
}
