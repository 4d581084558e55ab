//! `routing: performance` — the region with the lowest latency from the client that has an
//! eligible endpoint answers; endpoints of that region share it evenly and
//! deterministically per client subnet. Latency comes from the latency table's most
//! specific row for the client, or the great-circle distance from its geo location.

use crate::model::Profile;
use crate::model::health::HealthView;

use super::weighted::sticky_pick;
use super::{Candidates, Ctx, Pick, Query, Scratch, eligible};

pub fn pick<'a, H: HealthView + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    region_of: &[usize],
    q: Query<'_>,
) -> Pick<'a> {
    let all = eligible(ctx, profile, q.want);
    if all.is_empty() {
        return Pick::NoData { scope: 0 };
    }
    let mut order = Scratch::take();
    let scope = ctx.world.region_order(q.client, &mut order);
    let mut here = Candidates::take();
    ctx.note(|| ctx.world.describe_latency(q.client));
    for &(region, metric) in order.iter() {
        here.clear();
        here.extend(all.iter().copied().filter(|c| region_of[c.index] == region));
        if here.is_empty() {
            continue;
        }
        ctx.note(|| {
            format!(
                "region {} ({}) has {} eligible endpoint(s)",
                ctx.world.region_name(region),
                metric,
                here.len()
            )
        });
        if here.len() == 1 {
            return Pick::One { index: here[0].index, scope };
        }
        // Deterministic per client subnet: a rendezvous hash with equal weights.
        let (i, sticky) = sticky_pick(profile, &here, |_| 1, q.client);
        return Pick::One { index: i, scope: scope.max(sticky) };
    }
    Pick::NoData { scope }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use crate::model::health::Status;
    use crate::model::{Method, Rules, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Query, route};

    /// bj-1 (beijing), sh-1 and sh-2 (shanghai), eu-1 (eu-west).
    fn lab() -> Lab {
        let mut w = Lab::new();
        w.latency(LATENCY);
        let p = w.profile("perf", Method::Performance);
        let mut region = Vec::new();
        for (i, (name, r)) in [
            ("bj-1", "cn-beijing"),
            ("sh-1", "cn-shanghai"),
            ("sh-2", "cn-shanghai"),
            ("eu-1", "eu-west"),
        ]
        .iter()
        .enumerate()
        {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
            region.push(w.region(r));
        }
        w.profiles[p].rules = Rules::Performance { region };
        w.finish()
    }

    fn answer(w: &Lab, client: &crate::geo::Client) -> (String, u8) {
        let (n, s) = names(&route(w.ctx(), 0, Query { want: Want::A, client }, &mut rng(1)));
        (n.first().cloned().unwrap_or_default(), s)
    }

    #[test]
    fn lowest_latency_region_table() {
        // (client, country, coords, degraded slots, expected endpoint prefix)
        type Case =
            (&'static str, &'static str, Option<(f64, f64)>, &'static [usize], &'static str);
        let cases: &[Case] = &[
            ("203.0.113.9", "", None, &[], "sh-"), // CIDR row: shanghai 12 ms
            ("198.51.100.9", "CN", BEIJING, &[], "bj-1"), // country row: beijing 20 ms
            ("198.51.100.9", "FR", PARIS, &[], "eu-1"), // no row: distance
            ("198.51.100.9", "CN", BEIJING, &[0], "sh-"), // beijing down: next region
            ("203.0.113.9", "", None, &[1, 2], "bj-1"), // shanghai down
            ("203.0.113.9", "", None, &[0, 1, 2, 3], "sh-"), // all down: fail open
        ];
        for (i, (ip, country, coords, down, want)) in cases.iter().enumerate() {
            let w = lab();
            for s in *down {
                w.health.set(*s, Status::Degraded);
            }
            let got = answer(&w, &client_in(ip, country, "", *coords, 16)).0;
            assert!(got.starts_with(want), "case {i}: {got}");
        }
    }

    #[test]
    fn scope_is_the_rows_block_whatever_the_source_prefix() {
        let w = lab();
        // (client, country, located prefix, source prefix, answer, scope): a /16 question
        // decided by a /24 gets scope 24, so a resolver asks again outside that /24.
        let cases = [
            ("198.51.100.0", "CN", 24, 16, "bj-1", 24), // country row, one endpoint
            ("198.51.100.0", "CN", 24, 32, "bj-1", 24),
            ("203.0.113.0", "", 0, 8, "sh-", 24), // CIDR row 203.0.113.0/24
        ];
        for (ip, country, located, source, want, scope) in cases {
            let mut client = client_in(ip, country, "", BEIJING, located);
            client.prefix = source;
            let got = answer(&w, &client);
            assert!(got.0.starts_with(want), "{ip}/{source}: {got:?}");
            assert_eq!(got.1, scope, "{ip}/{source}: {got:?}");
        }
    }

    #[test]
    fn endpoints_of_a_region_share_it_deterministically_per_subnet() {
        let w = lab();
        let a = answer(&w, &client_in("203.0.113.9", "", "", None, 16));
        for host in 0..20 {
            assert_eq!(answer(&w, &client_in(&format!("203.0.113.{host}"), "", "", None, 16)), a);
        }
        assert_eq!(a.1, 24, "the /24 hash decides within the region");
        let w2 = lab();
        let mut seen = HashSet::new();
        // Different /24s inside 203.0.113.0/24 are impossible; use distance clients in CN.
        for n in 0..64 {
            w2.health.set(0, Status::Degraded); // beijing down → shanghai's two endpoints
            seen.insert(answer(&w2, &client_in(&format!("10.{n}.0.1"), "CN", "", BEIJING, 16)).0);
        }
        assert_eq!(seen, ["sh-1".to_string(), "sh-2".to_string()].into_iter().collect());
    }
}
