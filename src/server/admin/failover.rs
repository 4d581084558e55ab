//! Whether a profile answers from its backup: the endpoint answering is not the one its
//! method prefers when every endpoint is healthy, because the preferred ones fail their
//! probes. The status page shows it as an amber badge beside the profile's status, which
//! stays `online` as long as something serves.
//!
//! - `priority`: preferred are the endpoints of the lowest priority that take answers
//!   (enabled and not drained); failover when none of them serves and one of a higher
//!   priority does.
//! - `weighted`: preferred are the endpoints of weight above 0 (the standbys of weight 0
//!   take answers only when none of them serves); failover when none of them serves and a
//!   standby does.
//! - Other methods pick per client (location, subnet, latency, zone) or hand out every
//!   serving endpoint (`multivalue`): no endpoint is preferred for every client, so they
//!   never show it; their failed endpoints show in the counts.
//!
//! Drained endpoints, and nested ones whose child profile is disabled (`stopped`), are left
//! out: taking them out was an operator's decision, shown as such.

use crate::model::health::{HealthView, Status};
use crate::model::{Endpoint, Method, Profile};
use crate::routing::{Ctx, status};

/// The endpoints preferred and the ones answering instead (names, in configuration order).
#[derive(Debug, PartialEq, Eq)]
pub struct Failover {
    pub preferred: Vec<String>,
    pub serving: Vec<String>,
}

/// `Some` when `p` answers from a backup.
pub fn failover<H: HealthView + ?Sized>(ctx: Ctx<'_, H>, p: &Profile) -> Option<Failover> {
    if !p.enabled {
        return None;
    }
    // Stopped: a nested endpoint whose child profile is disabled, on purpose like a drain.
    let takes: Vec<&Endpoint> = (p.endpoints.iter())
        .filter(|e| e.enabled && status::endpoint_status(ctx, e) != Status::Stopped)
        .collect();
    let serves = |e: &&Endpoint| status::endpoint_status(ctx, e).is_serving();
    let serves_ref = |e: &&&Endpoint| serves(e);
    let (preferred, backups): (Vec<&Endpoint>, Vec<&Endpoint>) = match p.method {
        Method::Priority => {
            let top = takes.iter().map(|e| e.priority).min()?;
            takes.iter().partition(|e| e.priority == top)
        }
        Method::Weighted => takes.iter().partition(|e| e.weight > 0),
        _ => return None,
    };
    if preferred.is_empty() || preferred.iter().any(serves) {
        return None;
    }
    let serving: Vec<&Endpoint> = match p.method {
        // The backups of the next priority that serves answer, not every backup.
        Method::Priority => {
            let next = backups.iter().filter(serves_ref).map(|e| e.priority).min()?;
            backups.into_iter().filter(|e| e.priority == next && serves(e)).collect()
        }
        _ => backups.into_iter().filter(|e| serves(e)).collect(),
    };
    if serving.is_empty() {
        return None;
    }
    let names = |list: Vec<&Endpoint>| list.iter().map(|e| e.name.clone()).collect();
    Some(Failover { preferred: names(preferred), serving: names(serving) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::Status::{self, *};
    use crate::routing::testkit::Lab;

    /// Endpoints (name, priority or weight, status, drained) of one profile.
    type Case = (Method, &'static [(&'static str, u32, Status, bool)]);

    /// The expected (preferred, serving) names, if failover.
    type Want = Option<(&'static [&'static str], &'static [&'static str])>;

    fn run((method, eps): Case) -> Option<(Vec<String>, Vec<String>)> {
        let mut w = Lab::new();
        let p = w.profile("p", method);
        for (i, (name, n, _, drained)) in eps.iter().enumerate() {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
            let ep = &mut w.profiles[p].endpoints[i];
            (ep.priority, ep.weight) = (*n, *n);
            ep.drained = *drained;
            ep.enabled = !drained;
        }
        let w = w.finish();
        for (slot, (_, _, st, _)) in eps.iter().enumerate() {
            w.health.set(slot, *st);
        }
        failover(w.ctx(), &w.profiles[p]).map(|f| (f.preferred, f.serving))
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn failover_is_a_backup_answering_for_failed_preferred_endpoints() {
        let cases: [(&str, Case, Want); 11] = [
            (
                "primary up",
                (Method::Priority, &[("a", 1, Online, false), ("b", 2, Online, false)]),
                None,
            ),
            (
                "primary down, backup answers",
                (Method::Priority, &[("a", 1, Degraded, false), ("b", 2, Online, false)]),
                Some((&["a"], &["b"])),
            ),
            (
                "the next priority that serves answers, not the one after",
                (
                    Method::Priority,
                    &[
                        ("a", 1, Degraded, false),
                        ("b", 2, Degraded, false),
                        ("c", 3, Online, false),
                        ("d", 4, Online, false),
                    ],
                ),
                Some((&["a"], &["c"])),
            ),
            (
                "nothing serves: degraded, not failover",
                (Method::Priority, &[("a", 1, Degraded, false), ("b", 2, Degraded, false)]),
                None,
            ),
            (
                "one of two preferred up",
                (
                    Method::Priority,
                    &[("a", 1, Degraded, false), ("b", 1, Online, false), ("c", 2, Online, false)],
                ),
                None,
            ),
            (
                "primary drained: the operator's choice",
                (Method::Priority, &[("a", 1, Online, true), ("b", 2, Online, false)]),
                None,
            ),
            (
                "primary stopped (its child profile disabled)",
                (Method::Priority, &[("a", 1, Stopped, false), ("b", 2, Online, false)]),
                None,
            ),
            (
                "weighted, one of two down",
                (
                    Method::Weighted,
                    &[("a", 3, Degraded, false), ("b", 1, Online, false), ("s", 0, Online, false)],
                ),
                None,
            ),
            (
                "weighted, standby answers",
                (
                    Method::Weighted,
                    &[
                        ("a", 3, Degraded, false),
                        ("b", 1, Degraded, false),
                        ("s", 0, Online, false),
                    ],
                ),
                Some((&["a", "b"], &["s"])),
            ),
            (
                "weighted, all weight 0 are equals",
                (Method::Weighted, &[("a", 0, Degraded, false), ("b", 0, Online, false)]),
                None,
            ),
            (
                "multivalue has no preferred endpoint",
                (Method::Multivalue, &[("a", 1, Degraded, false), ("b", 2, Online, false)]),
                None,
            ),
        ];
        for (what, case, want) in cases {
            let want = want.map(|(p, s)| (names(p), names(s)));
            assert_eq!(run(case), want, "{what}");
        }
    }
}
