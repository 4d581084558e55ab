//! `routing: geoproximity` — the eligible endpoint nearest the client answers, where each
//! endpoint's great-circle distance counts as distance × (1 − bias/100): a positive bias
//! grows the area an endpoint serves, a negative one shrinks it. Ties go to the endpoint
//! listed first. A client the geo database has no coordinates for gets the first eligible
//! endpoint in configuration order. The answer depends on the client's coordinates, so
//! its ECS scope is the prefix of the database network that gave them.

use crate::geo::great_circle_km;
use crate::model::health::HealthView;
use crate::model::{Coordinates, Profile};

use super::{Ctx, Pick, Query, eligible};

pub fn pick<'a, H: HealthView + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    sites: &[Coordinates],
    q: Query<'_>,
) -> Pick<'a> {
    let all = eligible(ctx, profile, q.want);
    if all.is_empty() {
        return Pick::NoData { scope: 0 };
    }
    let located = q.client.located(ctx.world);
    let scope = located.prefix;
    ctx.note(|| located.to_string());
    let Some(client) = located.location.and_then(|l| l.coords()) else {
        let first = all[0].index;
        ctx.note(|| {
            format!(
                "no coordinates for the client: the first eligible endpoint, {}",
                profile.endpoints[first].name
            )
        });
        return Pick::One { index: first, scope };
    };
    ctx.note(|| format!("client coordinates: {:.4}, {:.4}", client.0, client.1));
    let mut best: Option<(usize, f64)> = None;
    for c in all.iter() {
        let ep = &profile.endpoints[c.index];
        let site = sites[c.index];
        let km = great_circle_km(client, (site.latitude, site.longitude));
        let biased = biased_km(km, ep.bias);
        ctx.note(|| {
            format!("endpoint {}: {km:.0} km, bias {:+}, biased {biased:.0} km", ep.name, ep.bias)
        });
        // Strictly less: on a tie the endpoint listed first keeps it.
        if best.is_none_or(|(_, b)| biased < b) {
            best = Some((c.index, biased));
        }
    }
    let (index, biased) = best.expect("at least one eligible endpoint");
    ctx.note(|| {
        format!("nearest by biased distance: {} ({biased:.0} km)", profile.endpoints[index].name)
    });
    Pick::One { index, scope }
}

/// The distance an endpoint with `bias` (-99..=99) counts as being at: +50 halves it,
/// -50 makes it one and a half times as far.
pub fn biased_km(km: f64, bias: i8) -> f64 {
    km * (1.0 - f64::from(bias) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::biased_km;
    use crate::model::health::Status;
    use crate::model::{Coordinates, Method, Rules, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Query, Trace, route};

    /// Endpoints on the equator, at the given longitudes, with the given biases.
    fn lab(sites: &[(&str, f64, i8)]) -> Lab {
        let mut w = Lab::new();
        let p = w.profile("near", Method::Geoproximity);
        let mut coords = Vec::new();
        for (i, (name, lon, bias)) in sites.iter().enumerate() {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
            let ep = &mut w.profiles[p].endpoints[i];
            (ep.bias, ep.configured_bias) = (*bias, *bias);
            coords.push(Coordinates { latitude: 0.0, longitude: *lon });
        }
        w.profiles[p].rules = Rules::Geoproximity { sites: coords };
        w.finish()
    }

    fn answer(w: &Lab, at: Option<(f64, f64)>) -> (String, u8) {
        let client = client_in("198.51.100.7", "", "", at, 22);
        let (n, s) =
            names(&route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut rng(1)));
        (n.first().cloned().unwrap_or_default(), s)
    }

    #[test]
    fn the_biased_distance_rule() {
        // (km, bias, counted as): distance × (1 − bias/100).
        let cases = [
            (1000.0, 0, 1000.0),
            (1000.0, 50, 500.0),
            (1000.0, -50, 1500.0),
            (1000.0, 99, 10.0),
            (1000.0, -99, 1990.0),
            (0.0, -99, 0.0),
        ];
        for (km, bias, want) in cases {
            let got = biased_km(km, bias);
            assert!((got - want).abs() < 1e-9, "{km} km, bias {bias}: {got}");
        }
    }

    #[test]
    fn bias_moves_the_boundary_between_two_endpoints() {
        // a at 0°, b at 10° east on the equator; distances along the equator are in
        // proportion to the longitudes, so the boundary follows from the rule alone:
        // a client at x° goes to b when (10 − x)(1 − bias_b/100) < x (1 − bias_a/100).
        // (bias a, bias b, client longitude, expected)
        let cases = [
            (0, 0, 4.0, "a"),
            (0, 0, 6.0, "b"),
            // At 4°: b counts 6 × (1 − b/100), under 4 from b = 34 on.
            (0, 33, 4.0, "a"),
            (0, 34, 4.0, "b"),
            // The same flip by shrinking a instead: 4 × (1 − a/100) over 6 past a = -50.
            (-49, 0, 4.0, "a"),
            (-51, 0, 4.0, "b"),
            // -99 on a: the boundary moves to 10 / 2.99 = 3.344° from a.
            (-99, 0, 3.3, "a"),
            (-99, 0, 3.4, "b"),
            // +99 on b: b's area reaches to 0.1 / 1.01 = 0.099° from a.
            (0, 99, 0.09, "a"),
            (0, 99, 0.11, "b"),
            // Both at the extremes: a keeps 1.99x < 0.01 (10 − x), x < 0.05°.
            (-99, 99, 0.04, "a"),
            (-99, 99, 0.06, "b"),
            // +99 against +99: as without bias.
            (99, 99, 4.9, "a"),
            (99, 99, 5.1, "b"),
        ];
        for (bias_a, bias_b, x, want) in cases {
            let w = lab(&[("a", 0.0, bias_a), ("b", 10.0, bias_b)]);
            let got = answer(&w, Some((0.0, x)));
            assert_eq!(got, (want.to_string(), 22), "bias a {bias_a}, b {bias_b}, client {x}°");
        }
    }

    #[test]
    fn ties_go_to_the_endpoint_listed_first() {
        // Same place, same bias: equal biased distances.
        let w = lab(&[("x", 5.0, 0), ("y", 5.0, 0)]);
        assert_eq!(answer(&w, Some((10.0, 20.0))).0, "x");
        let w = lab(&[("y", 5.0, 0), ("x", 5.0, 0)]);
        assert_eq!(answer(&w, Some((10.0, 20.0))).0, "y");
        // A bias of 1 breaks the tie.
        let w = lab(&[("x", 5.0, 0), ("y", 5.0, 1)]);
        assert_eq!(answer(&w, Some((10.0, 20.0))).0, "y");
    }

    #[test]
    fn health_fail_open_and_clients_without_coordinates() {
        // (degraded slots, drained endpoints, client, expected, scope)
        type Case = (&'static [usize], &'static [usize], Option<(f64, f64)>, &'static str, u8);
        let cases: &[Case] = &[
            (&[], &[], Some((0.0, 1.0)), "a", 22),
            (&[0], &[], Some((0.0, 1.0)), "b", 22), // nearest is down: the next nearest
            (&[0, 1], &[], Some((0.0, 1.0)), "c", 22),
            (&[0, 1, 2], &[], Some((0.0, 1.0)), "a", 22), // none serving: fail open
            (&[], &[0], Some((0.0, 1.0)), "b", 22),       // drained: never
            (&[], &[], None, "a", 22),                    // no coordinates: first eligible
            (&[0], &[], None, "b", 22),
            (&[], &[0, 1], None, "c", 22),
        ];
        for (i, (down, drained, at, want, scope)) in cases.iter().enumerate() {
            let mut w = lab(&[("a", 0.0, 0), ("b", 10.0, 0), ("c", 20.0, 0)]);
            for &d in *drained {
                let ep = &mut w.profiles[0].endpoints[d];
                (ep.enabled, ep.drained) = (false, true);
            }
            for &s in *down {
                w.health.set(s, Status::Degraded);
            }
            assert_eq!(answer(&w, *at), (want.to_string(), *scope), "case {i}");
        }
        // Nothing eligible: NODATA, scope 0 (the client was not looked at).
        let mut w = lab(&[("a", 0.0, 0)]);
        w.profiles[0].endpoints[0].enabled = false;
        assert_eq!(answer(&w, Some((0.0, 1.0))), (String::new(), 0));
    }

    #[test]
    fn the_trace_shows_each_distance_bias_and_the_winner() {
        let w = lab(&[("a", 0.0, 0), ("b", 10.0, 34)]);
        let trace = Trace::default();
        let mut ctx = w.ctx();
        ctx.trace = Some(&trace);
        let client = client_in("198.51.100.7", "", "", Some((0.0, 4.0)), 22);
        route(ctx, 0, Query { want: Want::A, client: &client }, &mut rng(1));
        let lines = trace.into_lines();
        // One degree of the equator is 2π × 6371.0088 km / 360 = 111.195 km.
        assert_eq!(
            lines[2..],
            [
                "client location: continent -, country -, subdivision - (network /22)",
                "client coordinates: 0.0000, 4.0000",
                "endpoint a: 445 km, bias +0, biased 445 km",
                "endpoint b: 667 km, bias +34, biased 440 km",
                "nearest by biased distance: b (440 km)",
                "picked endpoint b",
            ],
            "{lines:#?}"
        );
    }
}
