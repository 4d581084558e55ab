//! A name is a CNAME for every query type or for none (RFC 1034 §3.6.2, RFC 2181 §10.1).
//!
//! A profile whose endpoints (through nested children too) include both host names and
//! addresses would otherwise answer A from an IPv4 endpoint and AAAA with a host name's
//! CNAME, and a caching resolver answers the next A query from the cached CNAME. So for
//! such a name the kind of answer is decided once per client, over all endpoints, whatever
//! the query type: when the pick is a host name, every type gets its CNAME; when it is an
//! address, A and AAAA are routed over the address endpoints of their family only (NODATA
//! when there are none) and other types get NODATA. Names with one kind of endpoint are
//! routed as asked, in one pass.

use rand::Rng;

use super::{Ctx, Decision, Query, route};
use crate::geo::Client;
use crate::model::{HealthView, ProfileId, Target, Want};

/// The query type as a profile name sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    A,
    Aaaa,
    /// Any other type but ANY: only a CNAME can answer it.
    Other,
}

/// Routes a query of type `asked` for the name of `profile` (which must be enabled).
pub fn route_name<'a, H, R>(
    ctx: Ctx<'a, H>,
    profile: ProfileId,
    asked: Asked,
    client: &Client,
    rng: &mut R,
) -> Decision<'a>
where
    H: HealthView + ?Sized,
    R: Rng + ?Sized,
{
    let families = ctx.profiles[profile].families;
    let go = |want, rng: &mut R| route(ctx, profile, Query { want, client }, rng);
    if !families.is_mixed() {
        return match asked {
            Asked::A => go(Want::A, rng),
            Asked::Aaaa => go(Want::Aaaa, rng),
            Asked::Other if families.host => go(Want::Cname, rng),
            Asked::Other => Decision::NoData { scope: 0 },
        };
    }
    ctx.note(|| "host names and addresses: one kind of answer for every query type".into());
    let kind = go(Want::Any, rng);
    let (leaf, scope) = match &kind {
        Decision::Answer { endpoints, scope } => (endpoints.first(), *scope),
        Decision::NoData { .. } => return kind,
    };
    if leaf.is_some_and(|ep| matches!(ep.target, Target::Host(_))) {
        ctx.note(|| "a host name: its CNAME answers every type".into());
        return kind;
    }
    ctx.note(|| "an address: the address endpoints of the query's family answer".into());
    let then = match asked {
        Asked::A => go(Want::V4Address, rng),
        Asked::Aaaa => go(Want::V6Address, rng),
        Asked::Other => return Decision::NoData { scope },
    };
    match then {
        Decision::Answer { endpoints, scope: s } => {
            Decision::Answer { endpoints, scope: scope.max(s) }
        }
        Decision::NoData { scope: s } => Decision::NoData { scope: scope.max(s) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Method;
    use crate::model::health::Status;
    use crate::routing::testkit::*;

    /// The answer's endpoint names, or `None` for NODATA.
    fn answer(w: &Lab, pid: usize, asked: Asked, client: &str, seed: u64) -> Option<Vec<String>> {
        let client = Client::from_addr(client.parse().unwrap());
        match route_name(w.ctx(), pid, asked, &client, &mut rng(seed)) {
            Decision::Answer { endpoints, .. } => {
                Some(endpoints.iter().map(|e| e.name.clone()).collect())
            }
            Decision::NoData { .. } => None,
        }
    }

    /// `mixed` by priority: v4, v6, host, in the order given by `order` (priorities 1..3).
    fn mixed(order: [&str; 3]) -> Lab {
        let mut w = Lab::new();
        let p = w.profile("mixed", Method::Priority);
        for (i, name) in order.iter().enumerate() {
            let target = match *name {
                "v4" => "192.0.2.1",
                "v6" => "2001:db8::1",
                _ => "cdn.example.net.",
            };
            let e = w.ep(p, name, target);
            w.profiles[p].endpoints[e].priority = i as u32 + 1;
        }
        w.finish()
    }

    #[test]
    fn a_mixed_name_is_a_cname_for_every_type_or_for_none() {
        let some = |names: &[&str]| Some(names.iter().map(|n| n.to_string()).collect());
        // (priority order, degraded endpoint, answer to A, to AAAA, to other types)
        type Names = Option<Vec<String>>;
        type Case = ([&'static str; 3], Option<usize>, Names, Names, Names);
        let cases: Vec<Case> = vec![
            // An address first: A and AAAA from the addresses, no CNAME for any type.
            (["v4", "v6", "host"], None, some(&["v4"]), some(&["v6"]), None),
            (["v4", "host", "v6"], None, some(&["v4"]), some(&["v6"]), None),
            // The host name first: its CNAME for every type.
            (["host", "v4", "v6"], None, some(&["host"]), some(&["host"]), some(&["host"])),
            // The host name wins once the address before it is down.
            (["v4", "host", "v6"], Some(0), some(&["host"]), some(&["host"]), some(&["host"])),
            // An address wins: a family without a serving address answers NODATA.
            (["v6", "v4", "host"], Some(1), some(&["v4"]), some(&["v6"]), None),
        ];
        for (i, (order, down, a, aaaa, other)) in cases.into_iter().enumerate() {
            let w = mixed(order);
            if let Some(slot) = down {
                w.health.set(slot, Status::Degraded);
            }
            // Every client gets the same kind of answer for A, AAAA and other types.
            assert_eq!(answer(&w, 0, Asked::A, "198.51.100.1", 1), a, "case {i} A");
            assert_eq!(answer(&w, 0, Asked::Aaaa, "198.51.100.1", 1), aaaa, "case {i} AAAA");
            assert_eq!(answer(&w, 0, Asked::Other, "198.51.100.1", 1), other, "case {i} other");
        }
    }

    #[test]
    fn the_rule_holds_through_a_nested_child_and_for_sticky_choices() {
        // A parent of addresses only, nesting a child whose only endpoint is a host name:
        // the parent's name is mixed through its child.
        let mut w = Lab::new();
        let parent = w.profile("parent", Method::Weighted);
        let child = w.profile("child", Method::Priority);
        w.ep(child, "host", "cdn.example.net.");
        w.ep(parent, "v4", "192.0.2.1");
        w.ep(parent, "v6", "2001:db8::1");
        w.nested(parent, "nested", child, [1, 0, 0]);
        w.profiles[parent].sticky = true;
        let w = w.finish();
        assert!(w.profiles[parent].families.is_mixed());
        let mut kinds = std::collections::HashSet::new();
        for c in 0..200u32 {
            let client = format!("10.{}.{}.1", c / 256, c % 256);
            let a = answer(&w, parent, Asked::A, &client, 7);
            let aaaa = answer(&w, parent, Asked::Aaaa, &client, 8);
            let other = answer(&w, parent, Asked::Other, &client, 9);
            let cname = |x: &Option<Vec<String>>| x.as_deref() == Some(&["host".to_string()][..]);
            // Sticky: the kind is decided once per client /24, whatever the type and draw.
            assert_eq!(cname(&a), cname(&aaaa), "{client}: {a:?} / {aaaa:?}");
            assert_eq!(cname(&a), cname(&other), "{client}: {a:?} / {other:?}");
            if !cname(&a) {
                assert_eq!(
                    (a, aaaa, other),
                    (Some(vec!["v4".into()]), Some(vec!["v6".into()]), None)
                );
            }
            kinds.insert(cname(&answer(&w, parent, Asked::A, &client, 1)));
        }
        assert_eq!(kinds.len(), 2, "both kinds of answer occur over 200 clients");
    }

    #[test]
    fn names_of_one_kind_are_routed_as_asked() {
        let mut w = Lab::new();
        let p = w.profile("addresses", Method::Priority);
        w.ep(p, "v4", "192.0.2.1");
        w.ep(p, "v6", "2001:db8::1");
        let h = w.profile("hosts", Method::Priority);
        w.ep(h, "host", "cdn.example.net.");
        let w = w.finish();
        assert_eq!(answer(&w, p, Asked::A, "192.0.2.9", 1), Some(vec!["v4".into()]));
        assert_eq!(answer(&w, p, Asked::Aaaa, "192.0.2.9", 1), Some(vec!["v6".into()]));
        assert_eq!(answer(&w, p, Asked::Other, "192.0.2.9", 1), None);
        for asked in [Asked::A, Asked::Aaaa, Asked::Other] {
            assert_eq!(answer(&w, h, asked, "192.0.2.9", 1), Some(vec!["host".into()]));
        }
    }
}
