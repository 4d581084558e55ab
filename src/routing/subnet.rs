//! `routing: subnet` — the endpoint whose ranges hold the client answers; otherwise the
//! fallback endpoint (the one without `subnets`); without one, NODATA. Lookup is a binary
//! search over non-overlapping ranges, as fast with 100k ranges as with 10.

use crate::model::Profile;
use crate::model::health::HealthView;
use crate::netrange::RangeMap;

use super::status::endpoint_status;
use rand::Rng;

use super::load;
use super::{Ctx, Pick, Query};

pub fn pick<'a, H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    ranges: &RangeMap<usize>,
    fallback: Option<usize>,
    fallback_on_degraded: bool,
    q: Query<'_>,
    rng: &mut R,
) -> Pick<'a> {
    let hit = ranges.lookup(q.client.addr);
    let scope = hit.scope;
    let answer = |i: usize| {
        let ep = &profile.endpoints[i];
        if ctx.can_answer(ep, q.want) {
            Pick::One { index: i, scope }
        } else {
            Pick::NoData { scope }
        }
    };
    let fallback_or_nodata = || match fallback.filter(|&f| profile.endpoints[f].enabled) {
        Some(f) => {
            ctx.note(|| format!("fallback endpoint {}", profile.endpoints[f].name));
            answer(f)
        }
        None => Pick::NoData { scope },
    };
    match hit.value {
        // Drained since the ranges were built: as if its ranges were not there. The scope
        // stays that of the range, within which every client gets the same answer.
        Some(&i) if !profile.endpoints[i].enabled => {
            let name = &profile.endpoints[i].name;
            ctx.note(|| {
                format!("client {} is in a range of {name}, which is drained", q.client.addr)
            });
            fallback_or_nodata()
        }
        Some(&i) => {
            let status = endpoint_status(ctx, &profile.endpoints[i]);
            ctx.note(|| {
                format!(
                    "client {} is in a range of {} ({status}); scope /{scope}",
                    q.client.addr, profile.endpoints[i].name
                )
            });
            if fallback_on_degraded && !status.is_serving() {
                ctx.note(|| "degraded_match: fallback".to_string());
                return fallback_or_nodata();
            }
            // A loaded match spills to the fallback endpoint, if there is one to take it.
            let other = fallback.filter(|&f| f != i && profile.endpoints[f].enabled);
            match other {
                Some(f) if !load::keeps(ctx, profile, i, rng) => {
                    if load::keeps(ctx, profile, f, rng) {
                        ctx.note(|| {
                            format!("spilled to fallback endpoint {}", profile.endpoints[f].name)
                        });
                        answer(f)
                    } else {
                        let best = load::better(ctx, profile, Some(i), f);
                        let name = &profile.endpoints[best].name;
                        ctx.note(|| {
                            format!("every candidate spilled: {name} has the highest share")
                        });
                        answer(best)
                    }
                }
                _ => answer(i),
            }
        }
        None => {
            ctx.note(|| format!("client {} is in no range; scope /{scope}", q.client.addr));
            fallback_or_nodata()
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::health::Status;
    use crate::model::{Method, Rules, Want};
    use crate::netrange::{Range, RangeMap};
    use crate::routing::testkit::*;
    use crate::routing::{Client, Query, route};

    /// a: 10.0.0.0/8, b: 192.0.2.10-192.0.2.20 and 2001:db8::/32, fb: fallback (if any).
    fn lab(fallback: bool, on_degraded: bool, disabled_b: bool) -> Lab {
        let mut w = Lab::new();
        let p = w.profile("net", Method::Subnet);
        w.ep(p, "a", "198.51.100.1");
        w.ep(p, "b", "198.51.100.2");
        w.ep(p, "fb", "198.51.100.3");
        w.profiles[p].endpoints[1].enabled = !disabled_b;
        let mut entries = vec![(Range::parse("10.0.0.0/8").unwrap(), 0)];
        if !disabled_b {
            entries.push((Range::parse("192.0.2.10-192.0.2.20").unwrap(), 1));
            entries.push((Range::parse("2001:db8::/32").unwrap(), 1));
        }
        w.profiles[p].rules = Rules::Subnet {
            ranges: RangeMap::new(entries).unwrap(),
            fallback: fallback.then_some(2),
            fallback_on_degraded: on_degraded,
        };
        w.finish()
    }

    #[test]
    fn match_table() {
        // (fallback, degraded_match fallback, b disabled, a degraded, client, answer, scope)
        type Case = (bool, bool, bool, bool, &'static str, Option<&'static str>, u8);
        let cases: &[Case] = &[
            (true, false, false, false, "10.1.2.3", Some("a"), 8),
            (true, false, false, false, "192.0.2.15", Some("b"), 30),
            (true, false, false, false, "2001:db8:5::1", Some("b"), 32),
            (true, false, false, false, "192.0.2.9", Some("fb"), 31),
            (true, false, false, false, "203.0.113.1", Some("fb"), 5),
            (false, false, false, false, "203.0.113.1", None, 5),
            (true, false, true, false, "192.0.2.15", Some("fb"), 1),
            (true, false, false, true, "10.1.2.3", Some("a"), 8),
            (true, true, false, true, "10.1.2.3", Some("fb"), 8),
            (false, true, false, true, "10.1.2.3", None, 8),
        ];
        for (i, (fb, on_deg, dis_b, a_down, ip, want, scope)) in cases.iter().enumerate() {
            let w = lab(*fb, *on_deg, *dis_b);
            if *a_down {
                w.health.set(0, Status::Degraded);
            }
            let client = Client::from_addr(ip.parse().unwrap());
            let d = route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut rng(1));
            let (got, s) = names(&d);
            assert_eq!(got.first().map(String::as_str), *want, "case {i}");
            assert_eq!(s, *scope, "case {i} scope");
        }
    }

    /// A drained endpoint keeps its ranges (they were built before the drain): its clients
    /// get the fallback, or NODATA, with the range's scope.
    #[test]
    fn a_drained_endpoints_clients_get_what_no_range_gets() {
        for (fallback, want) in [(true, Some("fb")), (false, None)] {
            let mut w = lab(fallback, false, false);
            let b = &mut w.profiles[0].endpoints[1];
            (b.enabled, b.drained) = (false, true);
            let client = Client::from_addr("192.0.2.15".parse().unwrap());
            let d = route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut rng(1));
            let (got, s) = names(&d);
            assert_eq!((got.first().map(String::as_str), s), (want, 30), "fallback {fallback}");
        }
    }
}
