//! `routing: asn` — the client's network operator decides: the first eligible endpoint
//! whose `asns` hold the client's ASN answers; else the first eligible endpoint without
//! `asns` (a fallback); else NODATA. Eligibility (health, fail-open) is that of every
//! method. The scope is the ASN database's network around the client.

use crate::model::Profile;
use crate::model::health::HealthView;

use super::{Ctx, Pick, Query, eligible};

pub fn pick<'a, H: HealthView + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    asns: &[Vec<u32>],
    q: Query<'_>,
) -> Pick<'a> {
    let hit = q.client.asn(ctx.world);
    let scope = hit.prefix;
    ctx.note(|| describe(ctx, q));
    let eligible = eligible(ctx, profile, q.want);
    let lists = |i: usize, asn: u32| asns.get(i).is_some_and(|l| l.binary_search(&asn).is_ok());
    if let Some(asn) = hit.asn {
        if let Some(c) = eligible.iter().find(|c| lists(c.index, asn)) {
            let name = &profile.endpoints[c.index].name;
            ctx.note(|| format!("AS{asn} matches endpoint {name} ({})", c.status));
            return Pick::One { index: c.index, scope };
        }
        ctx.note(|| {
            let listed: Vec<&str> = (0..profile.endpoints.len())
                .filter(|&i| lists(i, asn))
                .map(|i| profile.endpoints[i].name.as_str())
                .collect();
            if listed.is_empty() {
                format!("no endpoint lists AS{asn}")
            } else {
                format!("AS{asn} is listed by {}, none of them eligible", listed.join(", "))
            }
        });
    }
    let fallback = |i: usize| asns.get(i).is_none_or(|l| l.is_empty());
    if let Some(c) = eligible.iter().find(|c| fallback(c.index)) {
        let name = &profile.endpoints[c.index].name;
        ctx.note(|| format!("fallback endpoint {name} ({})", c.status));
        return Pick::One { index: c.index, scope };
    }
    ctx.note(|| "no eligible fallback endpoint (without asns)".to_string());
    Pick::NoData { scope }
}

/// For traces: the client's ASN, operator and the database network around it.
pub(super) fn describe<H: HealthView + ?Sized>(ctx: Ctx<'_, H>, q: Query<'_>) -> String {
    let Some(db) = &ctx.world.asn else {
        return "client ASN unknown: no ASN database".to_string();
    };
    let addr = q.client.addr;
    let hit = q.client.asn(ctx.world);
    crate::geo::asn::Describe { addr, hit, organization: db.organization(addr) }.to_string()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::UNIX_EPOCH;

    use crate::geo::asn_build::build_asn_bytes;
    use crate::geo::{AsnDb, ByAsn, ByRegion, Regions, World};
    use crate::model::health::Status;
    use crate::model::{Method, Rules, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Client, Query, route};

    const CSV: &str = "\
192.0.2.0/26,64496,Transit
192.0.2.64/26,64497,\"Mobile, Inc.\"
2001:db8::/32,64498,V6 Net
";

    fn world() -> World {
        let (bytes, _) = build_asn_bytes(CSV, Path::new("asn.csv"), UNIX_EPOCH).unwrap();
        let db = AsnDb::from_bytes(Path::new("asn.mmdb"), bytes).unwrap();
        World::empty().with_asn(Some(db))
    }

    /// t: [64496], m1: [64497], m2: [64497, 64498], fb and fb2: fallbacks.
    fn lab(fail_open: bool) -> Lab {
        let mut w = Lab::new();
        let p = w.profile("net", Method::Asn);
        let lists: [&[u32]; 5] = [&[64496], &[64497], &[64497, 64498], &[], &[]];
        for (i, name) in ["t", "m1", "m2", "fb", "fb2"].iter().enumerate() {
            w.ep(p, name, &format!("198.51.100.{}", i + 1));
        }
        w.profiles[p].rules = Rules::Asn { asns: lists.iter().map(|l| l.to_vec()).collect() };
        w.profiles[p].fail_open = fail_open;
        w.world = world();
        w.finish()
    }

    fn answer(w: &Lab, client: &str) -> (Option<String>, u8) {
        let client = Client::from_addr(client.parse().unwrap());
        let d = route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut rng(1));
        let (names, scope) = names(&d);
        (names.into_iter().next(), scope)
    }

    #[test]
    fn match_table() {
        // (fail_open, degraded slots, disabled slots, client, answer, scope)
        type Case =
            (bool, &'static [usize], &'static [usize], &'static str, Option<&'static str>, u8);
        let cases: &[Case] = &[
            (true, &[], &[], "192.0.2.1", Some("t"), 26),
            (true, &[], &[], "192.0.2.70", Some("m1"), 26),
            (true, &[], &[], "2001:db8:5::1", Some("m2"), 32),
            // The first eligible endpoint listing the ASN: m1 down, m2 answers.
            (true, &[1], &[], "192.0.2.70", Some("m2"), 26),
            // Every endpoint listing it down, others serving: the fallback.
            (true, &[1, 2], &[], "192.0.2.70", Some("fb"), 26),
            // Not in the database: the fallback; the scope is the empty network's (/5:
            // 200.0.0.0/5 holds no data, 192.0.2.0/26 is the nearest network).
            (true, &[], &[], "203.0.113.5", Some("fb"), 5),
            (true, &[3], &[], "203.0.113.5", Some("fb2"), 5),
            (true, &[], &[3], "203.0.113.5", Some("fb2"), 5),
            (true, &[], &[3, 4], "203.0.113.5", None, 5),
            (true, &[], &[0], "192.0.2.1", Some("fb"), 26),
            // Nothing serving: fail-open serves the degraded ones, by the same rule.
            (true, &[0, 1, 2, 3, 4], &[], "192.0.2.1", Some("t"), 26),
            (true, &[0, 1, 2, 3, 4], &[], "192.0.2.70", Some("m1"), 26),
            (false, &[0, 1, 2, 3, 4], &[], "192.0.2.1", None, 26),
            (false, &[0], &[], "192.0.2.1", Some("fb"), 26),
        ];
        for (i, (fail_open, down, disabled, client, want, scope)) in cases.iter().enumerate() {
            let mut w = lab(*fail_open);
            for &s in *disabled {
                w.profiles[0].endpoints[s].enabled = false;
            }
            for &s in *down {
                w.health.set(s, Status::Degraded);
            }
            let got = answer(&w, client);
            assert_eq!((got.0.as_deref(), got.1), (*want, *scope), "case {i}: {client}");
        }
    }

    #[test]
    fn without_a_database_every_client_gets_the_fallback_with_scope_0() {
        let mut w = lab(true);
        w.world = World::empty();
        assert_eq!(answer(&w, "192.0.2.1"), (Some("fb".to_string()), 0));
    }

    /// geographic: fr → [FR], t → [AS64496], world → [WORLD]. An ASN match beats the
    /// country; the scope is the ASN network when the ASN decided, else the narrower of the
    /// ASN network and the place's block.
    #[test]
    fn geographic_asn_codes_beat_region_codes() {
        let id = |c: &str| Regions::builtin().id(c).unwrap();
        for fallback in [false, true] {
            let mut w = Lab::new();
            let p = w.profile("geo", Method::Geographic);
            for (i, name) in ["fr", "t", "world"].iter().enumerate() {
                w.ep(p, name, &format!("198.51.100.{}", i + 1));
            }
            w.profiles[p].rules = Rules::Geographic {
                by_region: ByRegion::new(vec![(id("FR"), 0), (id("WORLD"), 2)]),
                fallback_on_degraded: fallback,
                compiled: Default::default(),
                by_asn: ByAsn::new(vec![(64496, 1)]),
            };
            w.world = world();
            let w = w.finish();
            let route_at = |addr: &str, country: &str, geo_len: u8| {
                let client = client_in(addr, country, "", None, geo_len);
                let d = route(w.ctx(), p, Query { want: Want::A, client: &client }, &mut rng(1));
                let (names, scope) = names(&d);
                (names.into_iter().next(), scope)
            };
            let s = |x: &str| Some(x.to_string());
            assert_eq!(route_at("192.0.2.1", "FR", 24), (s("t"), 26), "ASN beats FR");
            assert_eq!(route_at("192.0.2.70", "FR", 24), (s("fr"), 26), "unmapped ASN");
            assert_eq!(route_at("192.0.2.70", "FR", 28), (s("fr"), 28), "narrower place");
            assert_eq!(route_at("203.0.113.5", "DE", 24), (s("world"), 24), "no ASN");
            w.health.set(1, Status::Degraded);
            let degraded = route_at("192.0.2.1", "FR", 24);
            w.health.set(1, Status::Online);
            if fallback {
                assert_eq!(degraded, (s("fr"), 26), "degraded_match: fallback goes on to FR");
            } else {
                assert_eq!(degraded, (s("t"), 26), "degraded_match: serve keeps the ASN match");
            }
            // Drained: its ASNs count as unmapped, and the place decides.
            let mut w = w;
            let t = &mut w.profiles[p].endpoints[1];
            (t.enabled, t.drained) = (false, true);
            let client = client_in("192.0.2.1", "FR", "", None, 24);
            let d = route(w.ctx(), p, Query { want: Want::A, client: &client }, &mut rng(1));
            assert_eq!(names(&d), (vec!["fr".to_string()], 26), "drained ASN match");
        }
    }
}
