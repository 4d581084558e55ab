//! `routing: groups` — Global Accelerator style endpoint groups with traffic dials. The
//! groups are ordered by the client's latency to each group's region; `dial::plan` turns
//! health and dials into traffic shares, a draw picks the group, and the group's endpoints
//! share its traffic by weight (0..255; 0 takes none).

use rand::Rng;

use crate::model::health::HealthView;
use crate::model::{Group, Profile};

use super::dial::{self, Plan};
use super::load;
use super::status::endpoint_status;
use super::weighted::{choose, sticky_key};
use super::{Candidate, Candidates, Ctx, Pick, Query, Scratch};
use crate::hash::mix;

pub fn pick<'a, H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    groups: &[Group],
    q: Query<'_>,
    rng: &mut R,
) -> Pick<'a> {
    let mut regions = Scratch::take();
    let scope = ctx.world.region_order(q.client, &mut regions);
    ctx.note(|| ctx.world.describe_latency(q.client));
    let order = group_order(groups, &regions);
    // Every group's serving endpoints, one group after another: group g's are
    // `serving[ends[g - 1]..ends[g]]`.
    let mut serving = Candidates::take();
    let mut ends: Scratch<usize> = Scratch::take();
    for g in groups {
        serving_in(ctx, profile, g, q, &mut serving);
        ends.push(serving.len());
    }
    let span = |g: usize| (if g == 0 { 0 } else { ends[g - 1] })..ends[g];
    let healthy: Scratch<bool> = Scratch::collect((0..groups.len()).map(|g| !span(g).is_empty()));
    let dials: Scratch<u8> = Scratch::collect(
        groups.iter().enumerate().map(|(g, group)| dial_of(ctx, profile, group, &serving[span(g)])),
    );
    let plan = dial::plan(&order, &healthy, &dials);
    ctx.note(|| trace_plan(ctx.world, groups, &order, &regions, &healthy, &plan));
    let (group, draw_scope) = match &plan {
        Plan::Shares(shares) => {
            let (u, s) = draw(profile, q, rng);
            match dial::draw(shares, u) {
                Some(g) => (g, s),
                None => return Pick::NoData { scope },
            }
        }
        Plan::Failover(g) => (*g, 0),
        Plan::FailOpen(g) => return fail_open(ctx, profile, &groups[*g], q, rng, scope),
    };
    ctx.note(|| format!("group {} takes this query", groups[group].name));
    let cands = &serving[span(group)];
    let weight = |c: &Candidate| profile.endpoints[c.index].weight;
    let (i, s) = if ctx.load.is_some() {
        load::weighted(ctx, profile, cands, weight, q.client, rng)
    } else {
        choose(profile, cands, weight, q.client, profile.sticky, rng)
    };
    Pick::One { index: i, scope: scope.max(draw_scope).max(s) }
}

/// Group indices ordered by the latency of their region (ties: configuration order).
/// A group's traffic dial scaled by the mean load share of its serving endpoints, so a
/// loaded group passes that much more of the traffic on to the next groups.
fn dial_of<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    group: &Group,
    serving: &[Candidate],
) -> u8 {
    if ctx.load.is_none() {
        return group.dial;
    }
    let mean = load::mean_share(ctx, profile, serving);
    if mean >= 1.0 {
        return group.dial;
    }
    let dial = (f64::from(group.dial) * mean).round() as u8;
    ctx.note(|| {
        format!(
            "group {}: traffic dial {}% × mean load share {mean:.2} → {dial}%",
            group.name, group.dial
        )
    });
    dial
}

fn group_order(groups: &[Group], regions: &[(usize, crate::geo::Metric)]) -> Scratch<usize> {
    let rank = |g: &Group| regions.iter().position(|(r, _)| *r == g.region).unwrap_or(usize::MAX);
    let mut order = Scratch::collect(0..groups.len());
    // Unstable on (rank, index): the same order as a stable sort, and no buffer to allocate.
    order.sort_unstable_by_key(|&g| (rank(&groups[g]), g));
    order
}

/// Appends a group's serving endpoints with weight > 0 that can answer the query to `out`.
fn serving_in<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    g: &Group,
    q: Query<'_>,
    out: &mut Candidates,
) {
    out.extend(
        g.endpoints
            .clone()
            .map(|index| (index, &profile.endpoints[index]))
            .filter(|(_, ep)| ep.enabled && ep.weight > 0 && ctx.can_answer(ep, q.want))
            .map(|(index, ep)| Candidate { index, status: endpoint_status(ctx, ep) })
            .filter(|c| c.status.is_serving()),
    );
}

/// A point in [0, 1) for the group draw: random, or from the client subnet when sticky.
fn draw<R: Rng + ?Sized>(profile: &Profile, q: Query<'_>, rng: &mut R) -> (f64, u8) {
    if profile.sticky {
        let (key, scope) = sticky_key(q.client);
        let h = mix(key ^ profile.hash_seed);
        return ((h >> 11) as f64 / (1u64 << 53) as f64, scope);
    }
    (rng.random::<f64>(), 0)
}

/// No group tried is healthy: a random enabled endpoint of the closest group (or NODATA
/// with `fail_open: false`).
fn fail_open<'a, H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    g: &Group,
    q: Query<'_>,
    rng: &mut R,
    scope: u8,
) -> Pick<'a> {
    if !profile.fail_open {
        return Pick::NoData { scope };
    }
    let cands = Candidates::collect(
        g.endpoints
            .clone()
            .filter(|&i| {
                let ep = &profile.endpoints[i];
                ep.enabled && ctx.can_answer(ep, q.want)
            })
            .map(|index| Candidate {
                index,
                status: endpoint_status(ctx, &profile.endpoints[index]),
            })
            .filter(|c| {
                c.status == crate::model::health::Status::Degraded || c.status.is_serving()
            }),
    );
    if cands.is_empty() {
        return Pick::NoData { scope };
    }
    ctx.note(|| format!("fail open to a random endpoint of group {}", g.name));
    let (i, s) = choose(profile, &cands, |_| 1, q.client, profile.sticky, rng);
    Pick::One { index: i, scope: scope.max(s) }
}

fn trace_plan(
    world: &crate::geo::World,
    groups: &[Group],
    order: &[usize],
    regions: &[(usize, crate::geo::Metric)],
    healthy: &[bool],
    plan: &Plan,
) -> String {
    let latency = |g: &Group| {
        regions
            .iter()
            .find(|(r, _)| *r == g.region)
            .map_or("unknown".into(), |(_, m)| m.to_string())
    };
    let ordered: Vec<String> = order
        .iter()
        .map(|&g| {
            format!(
                "{} ({} {}, dial {}%, {})",
                groups[g].name,
                world.region_name(groups[g].region),
                latency(&groups[g]),
                groups[g].dial,
                if healthy[g] { "healthy" } else { "unhealthy" }
            )
        })
        .collect();
    let outcome = match plan {
        Plan::Shares(s) => s
            .iter()
            .map(|(g, sh)| format!("{} {:.1}%", groups[*g].name, sh * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
        Plan::Failover(g) => format!("first group unhealthy: {} takes everything", groups[*g].name),
        Plan::FailOpen(g) => format!("no healthy group: fail open in {}", groups[*g].name),
    };
    format!("groups by latency: {}; shares: {outcome}", ordered.join(" > "))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::model::health::Status;
    use crate::model::{Group, Method, Rules, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Query, route};

    /// Groups bj (cn-beijing: bj-1, bj-2) and sh (cn-shanghai: sh-1) with the given dials.
    fn lab(dials: [u8; 2], weights: [u32; 3]) -> Lab {
        let mut w = Lab::new();
        w.latency(LATENCY);
        let p = w.profile("ga", Method::Groups);
        for (i, name) in ["bj-1", "bj-2", "sh-1"].iter().enumerate() {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
            w.profiles[p].endpoints[i].weight = weights[i];
        }
        let groups = vec![
            Group {
                name: "bj".into(),
                region: w.region("cn-beijing"),
                dial: dials[0],
                endpoints: 0..2,
            },
            Group {
                name: "sh".into(),
                region: w.region("cn-shanghai"),
                dial: dials[1],
                endpoints: 2..3,
            },
        ];
        w.profiles[p].rules = Rules::Groups { groups };
        w.finish()
    }

    /// Share of answers per endpoint over `n` queries from a CN client (beijing closest).
    fn shares(w: &Lab, n: usize) -> HashMap<String, f64> {
        let client = client_in("198.51.100.9", "CN", "", BEIJING, 24);
        let mut r = rng(11);
        let mut counts: HashMap<String, f64> = HashMap::new();
        for _ in 0..n {
            let (names, _) =
                names(&route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut r));
            *counts.entry(names.first().cloned().unwrap_or_default()).or_default() +=
                1.0 / n as f64;
        }
        counts
    }

    fn group_share(s: &HashMap<String, f64>, prefix: &str) -> f64 {
        s.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum()
    }

    #[test]
    fn seed_distributions_on_the_routing_path() {
        // (dials, statuses of bj-1 bj-2 sh-1, expected share of bj)
        use Status::*;
        let cases: &[([u8; 2], [Status; 3], f64)] = &[
            ([100, 100], [Online; 3], 1.0),
            ([50, 100], [Online; 3], 0.5),
            ([30, 100], [Online; 3], 0.3),
            ([50, 50], [Online; 3], 0.625),
            ([1, 100], [Online; 3], 0.01),
            ([0, 100], [Online; 3], 0.0),
            ([50, 50], [Degraded, Degraded, Online], 0.0), // closest unhealthy: dials ignored
            ([0, 0], [Degraded, Degraded, Online], 0.0),   // failover includes dial-0 groups
            ([50, 50], [Degraded, Online, Degraded], 1.0), // sh unhealthy: bj alone
        ];
        for (i, (dials, sts, bj)) in cases.iter().enumerate() {
            let w = lab(*dials, [128, 128, 128]);
            for (slot, st) in sts.iter().enumerate() {
                w.health.set(slot, *st);
            }
            let s = shares(&w, 20_000);
            let got = group_share(&s, "bj");
            assert!((got - bj).abs() < 0.015, "case {i}: bj got {got:.3}, want {bj}");
        }
    }

    #[test]
    fn no_healthy_group_fails_open_to_the_closest() {
        let w = lab([100, 100], [128, 128, 128]);
        for slot in 0..3 {
            w.health.set(slot, Status::Degraded);
        }
        let s = shares(&w, 2000);
        assert!((group_share(&s, "bj") - 1.0).abs() < 1e-9, "{s:?}");
        let mut w = lab([100, 100], [128, 128, 128]);
        w.profiles[0].fail_open = false;
        for slot in 0..3 {
            w.health.set(slot, Status::Degraded);
        }
        let nodata = shares(&w, 10).get("").copied().unwrap_or(0.0);
        assert!((nodata - 1.0).abs() < 1e-9, "NODATA without fail_open");
    }

    #[test]
    fn endpoint_weights_inside_a_group() {
        let w = lab([100, 100], [192, 64, 128]);
        let s = shares(&w, 20_000);
        assert!((s["bj-1"] - 0.75).abs() < 0.015, "{s:?}");
        let w = lab([100, 100], [128, 0, 128]);
        let s = shares(&w, 2000);
        assert_eq!(s.get("bj-2"), None, "weight 0 takes no traffic");
        // A group whose only traffic-taking endpoint is down is unhealthy.
        w.health.set(0, Status::Degraded);
        assert!((group_share(&shares(&w, 2000), "sh") - 1.0).abs() < 1e-9);
    }

    #[test]
    fn latency_orders_the_groups() {
        let w = lab([100, 100], [128, 128, 128]);
        // 203.0.113.0/24 has shanghai at 12 ms: sh is closest and takes everything.
        let client = client_in("203.0.113.5", "", "", None, 24);
        let (names, _) =
            names(&route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut rng(1)));
        assert_eq!(names, vec!["sh-1"]);
    }

    #[test]
    fn scope_is_the_rows_block_whatever_the_source_prefix() {
        // Dials of 100%: the closest group takes everything, so only the latency row decides.
        let w = lab([100, 100], [128, 128, 128]);
        // (client, source prefix, scope): the CIDR row 203.0.113.0/24 decides, also for a
        // /8 question, whose answer holds for that /24 only.
        for (addr, source, scope) in [("203.0.113.5", 32, 24), ("203.0.113.0", 8, 24)] {
            let mut client = client_in(addr, "", "", None, 0);
            client.prefix = source;
            let (names, got) =
                names(&route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut rng(1)));
            assert_eq!((names, got), (vec!["sh-1".to_string()], scope), "{addr}/{source}");
        }
    }
}
