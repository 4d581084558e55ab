//! `routing: performance` — the region with the lowest latency from the client that has an
//! eligible endpoint answers; endpoints of that region share it evenly and
//! deterministically per client subnet. Latency comes first from real user measurements of
//! the client's network (or its coarser aggregate): the row's preferred region, then its
//! other measured regions, fastest first. Regions without a measurement follow in the
//! static order: the latency table's most specific row for the client, or the great-circle
//! distance from its geo location.

use crate::geo::Metric;
use crate::geo::rum::MeasuredRow;
use crate::model::Profile;
use crate::model::health::HealthView;

use super::load::eligible_kept;
use super::weighted::sticky_pick;
use super::{Candidates, Ctx, Pick, Query, Scratch};

pub fn pick<'a, H: HealthView + ?Sized, R: rand::Rng + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    region_of: &[usize],
    q: Query<'_>,
    rng: &mut R,
) -> Pick<'a> {
    // Spilled endpoints are left out, so a loaded nearest region spills to the next.
    let Some(all) = eligible_kept(ctx, profile, q.want, rng) else {
        return Pick::NoData { scope: 0 };
    };
    let mut order = Scratch::take();
    let static_scope = ctx.world.region_order(q.client, &mut order);
    ctx.note(|| ctx.world.describe_latency(q.client));
    let row = ctx.measured.and_then(|m| m.lookup(q.client.addr));
    // How many regions lead the order on measurements (0 without a row).
    let measured = row.as_ref().map_or(0, |row| measured_first(row, &mut order));
    let mut here = Candidates::take();
    for (rank, &(region, metric)) in order.iter().enumerate() {
        // An answer from a measured region depends on the measured network alone; one
        // that fell past them depends on the static ranking too.
        let scope = match &row {
            Some(row) if rank < measured => row.network.prefix_len(),
            Some(row) => row.network.prefix_len().max(static_scope),
            None => static_scope,
        };
        here.clear();
        here.extend(all.iter().copied().filter(|c| region_of[c.index] == region));
        if here.is_empty() {
            continue;
        }
        if let Some(row) = &row {
            ctx.note(|| describe_measured(ctx, row, region));
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
    let scope = row.map_or(static_scope, |r| r.network.prefix_len().max(static_scope));
    Pick::NoData { scope }
}

/// Reorders the static ranking `order`: the row's preferred region, then its other measured
/// regions by measured time, then the rest as they were. The preference is the hysteresis
/// (it moves only past the margins), so it leads even when another region is a little
/// faster now. Returns how many regions were measured.
fn measured_first(row: &MeasuredRow<'_>, order: &mut Vec<(usize, Metric)>) -> usize {
    let mut ranked: Scratch<(usize, Metric)> = Scratch::take();
    let preferred = row.preferred_region();
    for (column, m) in row.regions() {
        let taken = ranked.iter().any(|&(r, _)| r == column.region);
        if m.is_measured() && !taken {
            ranked.push((column.region, Metric::RttMs(tenths(m.ms))));
        }
    }
    ranked.sort_unstable_by(|a, b| {
        let lead = |r: usize| Some(r) != preferred;
        (lead(a.0), a.1, a.0).cmp(&(lead(b.0), b.1, b.0))
    });
    let measured = ranked.len();
    for &(region, metric) in order.iter() {
        if !ranked[..measured].iter().any(|&(r, _)| r == region) {
            ranked.push((region, metric));
        }
    }
    order.clear();
    order.extend_from_slice(&ranked);
    measured
}

/// Milliseconds to a tenth, so traces show "23.4 ms" rather than an `f32`'s expansion.
fn tenths(ms: f32) -> f64 {
    (f64::from(ms) * 10.0).round() / 10.0
}

/// For traces: which source ranked the region that answers.
fn describe_measured<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    row: &MeasuredRow<'_>,
    region: usize,
) -> String {
    let from = if row.aggregate {
        format!("for the aggregate {}", row.network)
    } else {
        format!("from {}", row.network)
    };
    let figure = row.regions().find(|(c, m)| c.region == region && m.is_measured());
    match figure {
        Some((_, m)) => {
            let preferred =
                if row.preferred_region() == Some(region) { " (preferred)" } else { "" };
            format!(
                "measured: {} {} ms (median of {} samples) {from}{preferred}",
                ctx.world.region_name(region),
                tenths(m.ms),
                m.samples
            )
        }
        None => format!(
            "measured {from}: no measured region has an eligible endpoint; the latency table decides"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use std::net::IpAddr;
    use std::time::Duration;

    use crate::geo::rum::{Aggregation, Aggregator, MeasuredLatency};
    use crate::model::Want;
    use crate::model::health::Status;
    use crate::routing::testkit::*;
    use crate::routing::{Query, Trace, route};

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
            let w = performance_lab(false);
            for s in *down {
                w.health.set(*s, Status::Degraded);
            }
            let got = answer(&w, &client_in(ip, country, "", *coords, 16)).0;
            assert!(got.starts_with(want), "case {i}: {got}");
        }
    }

    #[test]
    fn scope_is_the_rows_block_whatever_the_source_prefix() {
        let w = performance_lab(false);
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
        let w = performance_lab(false);
        let a = answer(&w, &client_in("203.0.113.9", "", "", None, 16));
        for host in 0..20 {
            assert_eq!(answer(&w, &client_in(&format!("203.0.113.{host}"), "", "", None, 16)), a);
        }
        assert_eq!(a.1, 24, "the /24 hash decides within the region");
        let w2 = performance_lab(false);
        let mut seen = HashSet::new();
        // Different /24s inside 203.0.113.0/24 are impossible; use distance clients in CN.
        for n in 0..64 {
            w2.health.set(0, Status::Degraded); // beijing down → shanghai's two endpoints
            seen.insert(answer(&w2, &client_in(&format!("10.{n}.0.1"), "CN", "", BEIJING, 16)).0);
        }
        assert_eq!(seen, ["sh-1".to_string(), "sh-2".to_string()].into_iter().collect());
    }

    /// The lab's regions as measurement targets: column i is region i.
    fn columns() -> Vec<(String, usize)> {
        ["cn-beijing", "cn-shanghai", "eu-west"]
            .iter()
            .enumerate()
            .map(|(i, r)| (r.to_string(), i))
            .collect()
    }

    /// Reports (address, [(column, ms)]) one second apart, published through the same
    /// aggregator the server runs; `previous` carries a preference over.
    fn measure(
        a: &mut Aggregator,
        reports: &[(&str, &[(usize, f32)])],
        previous: Option<&MeasuredLatency>,
    ) -> MeasuredLatency {
        let mut t = a.len() as u64 * 100;
        for (ip, figures) in reports {
            t += 1;
            a.record(ip.parse::<IpAddr>().unwrap(), figures, Duration::from_secs(t));
        }
        a.publish(Duration::from_secs(t + 1), columns(), previous)
    }

    fn aggregator() -> Aggregator {
        let params = Aggregation { min_samples: 1, margin_ms: 10.0, ..Aggregation::default() };
        Aggregator::new(params, 3)
    }

    fn answer_measured(w: &Lab, t: &MeasuredLatency, client: &crate::geo::Client) -> (String, u8) {
        let mut ctx = w.ctx();
        ctx.measured = Some(t);
        let (n, s) = names(&route(ctx, 0, Query { want: Want::A, client }, &mut rng(1)));
        (n.first().cloned().unwrap_or_default(), s)
    }

    const BJ: usize = 0;
    const SH: usize = 1;
    const EU: usize = 2;

    #[test]
    fn measurements_rank_regions_before_the_static_order() {
        // (reports, client, degraded slots, expected endpoint prefix, scope). Statically,
        // 203.0.113.9 ranks shanghai 12 ms, beijing 40 ms, eu-west 200 ms (a /24 row), and
        // a Paris client with no row ranks eu-west first by distance.
        type Case = (
            &'static [(&'static str, &'static [(usize, f32)])],
            &'static str,
            Option<(f64, f64)>,
            &'static [usize],
            &'static str,
            u8,
        );
        let cases: &[Case] = &[
            // The measured row overrides the latency table.
            (&[("203.0.113.5", &[(EU, 5.0), (SH, 90.0)])], "203.0.113.9", None, &[], "eu-1", 24),
            // Unmeasured regions come after the measured ones, whatever the table says:
            // beijing and eu-west measured, shanghai (12 ms in the table) only after them.
            (&[("203.0.113.5", &[(BJ, 90.0), (EU, 100.0)])], "203.0.113.9", None, &[0], "eu-1", 24),
            // Every measured region down: the static order, scope still the /24.
            (&[("203.0.113.5", &[(EU, 5.0)])], "203.0.113.9", None, &[3], "sh-", 24),
            // The preferred region is down: the next measured one, not the table's first.
            (
                &[("203.0.113.5", &[(BJ, 20.0), (EU, 30.0), (SH, 40.0)])],
                "203.0.113.9",
                None,
                &[0],
                "eu-1",
                24,
            ),
            // A neighbour's /24 has no row: the /16 aggregate decides, scope 16.
            (&[("203.0.113.5", &[(EU, 5.0)])], "203.0.7.9", PARIS, &[], "eu-1", 16),
            (&[("203.0.113.5", &[(BJ, 5.0)])], "203.0.7.9", PARIS, &[], "bj-1", 16),
            // No row for the client at all: exactly the static answer (distance from Paris).
            (&[("192.0.2.1", &[(BJ, 5.0)])], "198.51.100.9", PARIS, &[], "eu-1", 16),
        ];
        for (i, (reports, ip, coords, down, want, scope)) in cases.iter().enumerate() {
            let w = performance_lab(false);
            for s in *down {
                w.health.set(*s, Status::Degraded);
            }
            let t = measure(&mut aggregator(), reports, None);
            let client = client_in(ip, "FR", "", *coords, 16);
            let got = answer_measured(&w, &t, &client);
            assert!(got.0.starts_with(want), "case {i}: {got:?}");
            assert_eq!(got.1, *scope, "case {i}: {got:?}");
        }
    }

    #[test]
    fn no_row_answers_as_without_measurements() {
        let t = measure(&mut aggregator(), &[("192.0.2.1", &[(EU, 5.0)])], None);
        for (ip, country, coords) in
            [("203.0.113.9", "", None), ("198.51.100.9", "CN", BEIJING), ("10.0.0.1", "FR", PARIS)]
        {
            let w = performance_lab(false);
            let client = client_in(ip, country, "", coords, 16);
            assert_eq!(answer_measured(&w, &t, &client), answer(&w, &client), "{ip}");
        }
    }

    #[test]
    fn the_preferred_region_leads_even_when_another_is_slightly_faster() {
        let mut a = aggregator();
        let t1 = measure(&mut a, &[("203.0.113.5", &[(BJ, 50.0), (SH, 60.0)])], None);
        // Shanghai now 5 ms faster than beijing: short of the 10 ms margin.
        let figures: &[(usize, f32)] = &[(BJ, 50.0), (SH, 45.0)];
        let more = [("203.0.113.5", figures); 3];
        let t2 = measure(&mut a, &more, Some(&t1));
        let row = t2.lookup("203.0.113.9".parse().unwrap()).unwrap();
        assert!(row.latency[SH].ms < row.latency[BJ].ms, "{row:?}");
        assert_eq!(row.preferred_region(), Some(BJ));
        let client = client_in("203.0.113.9", "", "", None, 16);
        assert_eq!(
            answer_measured(&performance_lab(false), &t2, &client),
            ("bj-1".to_string(), 24)
        );
        // Without the held preference the faster shanghai answers.
        let t3 = measure(&mut a, &[], None);
        assert!(answer_measured(&performance_lab(false), &t3, &client).0.starts_with("sh-"));
    }

    fn trace_of(w: &Lab, t: &MeasuredLatency, ip: &str) -> Vec<String> {
        let trace = Trace::default();
        let mut ctx = w.ctx();
        ctx.measured = Some(t);
        ctx.trace = Some(&trace);
        let client = client_in(ip, "", "", None, 16);
        route(ctx, 0, Query { want: Want::A, client: &client }, &mut rng(1));
        trace.into_lines()
    }

    #[test]
    fn traces_say_which_source_decided() {
        let reports: &[(&str, &[(usize, f32)])] = &[
            ("203.0.113.5", &[(EU, 23.0), (BJ, 80.0)]),
            ("203.0.113.6", &[(EU, 23.5), (BJ, 80.0)]),
            ("203.0.113.7", &[(EU, 22.0), (BJ, 81.0)]),
        ];
        let t = measure(&mut aggregator(), reports, None);
        let w = performance_lab(false);
        let lines = trace_of(&w, &t, "203.0.113.9");
        assert_eq!(
            lines[3..5],
            [
                "measured: eu-west 23 ms (median of 3 samples) from 203.0.113.0/24 (preferred)",
                "region eu-west (23 ms) has 1 eligible endpoint(s)",
            ],
            "{lines:#?}"
        );
        let lines = trace_of(&w, &t, "203.0.9.9");
        assert_eq!(
            lines[3],
            "measured: eu-west 23 ms (median of 3 samples) for the aggregate 203.0.0.0/16 \
             (preferred)"
        );
        // Eu-west down: beijing, measured but not preferred.
        w.health.set(3, Status::Degraded);
        let lines = trace_of(&w, &t, "203.0.113.9");
        assert_eq!(
            lines[3],
            "measured: cn-beijing 80 ms (median of 3 samples) from 203.0.113.0/24"
        );
        // Beijing down too: the latency table decides.
        w.health.set(0, Status::Degraded);
        let lines = trace_of(&w, &t, "203.0.113.9");
        assert_eq!(
            lines[3..5],
            [
                "measured from 203.0.113.0/24: no measured region has an eligible endpoint; \
                 the latency table decides",
                "region cn-shanghai (12 ms) has 2 eligible endpoint(s)",
            ]
        );
        // No row: the latency table's lines alone.
        let lines = trace_of(&w, &measure(&mut aggregator(), &[], None), "203.0.113.9");
        assert!(lines.iter().all(|l| !l.starts_with("measured")), "{lines:#?}");
    }
}
