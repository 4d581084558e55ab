//! `routing: geographic` — the client's location is matched from the most specific region
//! code up (subdivision → country → grouping → WORLD); the first endpoint mapped to a
//! matching code answers. A Stopped match, or no match, answers NODATA. `AS64496` codes
//! match the client's ASN (ASN database) and beat every region code.

use crate::geo::{ByAsn, ByRegion, Classes};
use crate::model::health::{HealthView, Status};
use crate::model::{Compiled, Endpoint, Profile, Want};

use rand::Rng;

use super::load::{self, share_of};
use super::status::endpoint_status;
use super::{Ctx, Pick, Query, Scratch};

/// A geographic profile's mapping: region codes (and their compiled form) and ASNs.
#[derive(Clone, Copy)]
pub struct Mapping<'r> {
    pub by_region: &'r ByRegion,
    pub compiled: &'r Compiled,
    pub by_asn: &'r ByAsn,
}

pub fn pick<'a, H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    m: Mapping<'_>,
    fallback_on_degraded: bool,
    q: Query<'_>,
    rng: &mut R,
) -> Pick<'a> {
    if m.by_asn.is_empty() {
        return by_place(ctx, profile, m.by_region, m.compiled, fallback_on_degraded, q, rng);
    }
    // An ASN match beats every region code. The answer holds for the ASN network around
    // the client when the ASN decided; else it depends on both, so on the narrower block.
    let hit = q.client.asn(ctx.world);
    ctx.note(|| super::asn::describe(ctx, q));
    if let Some((asn, i)) = hit.asn.and_then(|a| Some((a, m.by_asn.get(a)?))) {
        let ep = &profile.endpoints[i];
        if !ep.enabled {
            ctx.note(|| format!("AS{asn} maps to endpoint {}, which is drained", ep.name));
        } else {
            let status = endpoint_status(ctx, ep);
            ctx.note(|| format!("AS{asn} matches endpoint {} ({status})", ep.name));
            if nodata(ctx, ep, status, q.want) {
                return Pick::NoData { scope: hit.prefix };
            }
            if fallback_on_degraded && !status.is_serving() {
                ctx.note(|| "degraded_match: fallback — continuing with the region codes".into());
            } else if load::keeps(ctx, profile, i, rng) {
                return Pick::One { index: i, scope: hit.prefix };
            }
        }
    } else if let Some(asn) = hit.asn {
        ctx.note(|| format!("AS{asn} is not mapped"));
    }
    match by_place(ctx, profile, m.by_region, m.compiled, fallback_on_degraded, q, rng) {
        Pick::One { index, scope } => Pick::One { index, scope: scope.max(hit.prefix) },
        Pick::NoData { scope } => Pick::NoData { scope: scope.max(hit.prefix) },
        many => many,
    }
}

/// The match by region code alone.
fn by_place<'a, H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    by_region: &ByRegion,
    compiled: &Compiled,
    fallback_on_degraded: bool,
    q: Query<'_>,
    rng: &mut R,
) -> Pick<'a> {
    ctx.note(|| q.client.located(ctx.world).to_string());
    if let (Some(classes), Some(addr)) = (&compiled.0, q.client.looked_up_addr()) {
        match compiled_pick(ctx, profile, by_region, classes, addr, q) {
            // A loaded match may spill up the hierarchy, which the walk below follows.
            Pick::One { index, .. } if !share_of(ctx, &profile.endpoints[index]).is_full() => {}
            pick => return pick,
        }
    }
    // The answer depends only on the client's country and subdivision: its scope is the
    // widest block at that place, however many bits the client sent.
    let (chain, scope) = q.client.region_chain(ctx.world);
    ctx.note(|| format!("same place for the whole /{scope}"));
    // Endpoints whose load share spilled this query (usually none: taken only on a spill).
    let mut spilled: Option<Scratch<usize>> = None;
    let best = |spilled: &Option<Scratch<usize>>| {
        let list = spilled.as_deref()?;
        list.iter().fold(None, |b, &i| Some(load::better(ctx, profile, b, i)))
    };
    for &id in chain.ids() {
        let Some(i) = by_region.get(id) else { continue };
        if spilled.as_deref().is_some_and(|s| s.contains(&i)) {
            continue;
        }
        let ep = &profile.endpoints[i];
        let code = ctx.world.regions.code(id);
        if !ep.enabled {
            // Drained since the mapping was built: as if its codes were not mapped.
            ctx.note(|| format!("{code} maps to endpoint {}, which is drained", ep.name));
            continue;
        }
        let status = endpoint_status(ctx, ep);
        ctx.note(|| format!("{code} matches endpoint {} ({status})", ep.name));
        if nodata(ctx, ep, status, q.want) {
            return answer_spilled(ctx, profile, best(&spilled), scope);
        }
        if fallback_on_degraded && !status.is_serving() {
            ctx.note(|| "degraded_match: fallback — continuing up the hierarchy".to_string());
            continue;
        }
        if !load::keeps(ctx, profile, i, rng) {
            spilled.get_or_insert_with(Scratch::take).push(i);
            continue;
        }
        return Pick::One { index: i, scope };
    }
    if spilled.is_none() {
        ctx.note(|| "no region code matches".to_string());
    }
    answer_spilled(ctx, profile, best(&spilled), scope)
}

/// Where the walk ends without a kept match: the best spilled endpoint, else NODATA.
fn answer_spilled<'a, H: HealthView + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &Profile,
    best: Option<usize>,
    scope: u8,
) -> Pick<'a> {
    match best {
        Some(i) => {
            let name = &profile.endpoints[i].name;
            ctx.note(|| format!("every match spilled: {name} has the highest share"));
            Pick::One { index: i, scope }
        }
        None => Pick::NoData { scope },
    }
}

/// The same decision from the compiled mapping: one walk gives the endpoint (class
/// `i + 1`, or 0 when no code matches) and the widest block with that answer.
fn compiled_pick<'a, H: HealthView + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    by_region: &ByRegion,
    classes: &Classes,
    addr: std::net::IpAddr,
    q: Query<'_>,
) -> Pick<'a> {
    let (class, scope) = classes.lookup(addr);
    ctx.note(|| format!("same answer for the whole /{scope}"));
    let Some(i) = (class as usize).checked_sub(1) else {
        ctx.note(|| "no region code matches".to_string());
        return Pick::NoData { scope };
    };
    let ep = &profile.endpoints[i];
    let status = endpoint_status(ctx, ep);
    ctx.note(|| {
        let (chain, _) = q.client.region_chain(ctx.world);
        let id = chain.ids().iter().copied().find(|&id| by_region.get(id) == Some(i));
        let code = id.map_or("?", |id| ctx.world.regions.code(id));
        format!("{code} matches endpoint {} ({status})", ep.name)
    });
    if nodata(ctx, ep, status, q.want) {
        return Pick::NoData { scope };
    }
    Pick::One { index: i, scope }
}

/// A matched endpoint that is stopped, or cannot answer the query's type, answers NODATA:
/// a less specific region does not answer in its place.
fn nodata<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    ep: &Endpoint,
    status: Status,
    want: Want,
) -> bool {
    status == Status::Stopped || !ctx.can_answer(ep, want)
}

#[cfg(test)]
mod tests {
    use crate::geo::{ByRegion, Regions};
    use crate::model::health::Status;
    use crate::model::{Method, Rules, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Query, route};

    /// Endpoints: fr → FR, eu → GEO-EU, usca → US-CA, any → WORLD (if `world`).
    fn lab(fallback: bool, world: bool) -> Lab {
        let mut w = Lab::new();
        let p = w.profile("geo", Method::Geographic);
        let mut by_region = Vec::new();
        for (i, (name, code)) in
            [("fr", "FR"), ("eu", "GEO-EU"), ("usca", "US-CA"), ("any", "WORLD")].iter().enumerate()
        {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
            if *code != "WORLD" || world {
                by_region.push((id(code), i));
            }
        }
        let by_region = ByRegion::new(by_region);
        w.profiles[p].rules = Rules::Geographic {
            by_region,
            fallback_on_degraded: fallback,
            compiled: Default::default(),
            by_asn: Default::default(),
        };
        w.finish()
    }

    fn id(code: &str) -> crate::geo::RegionId {
        Regions::builtin().id(code).unwrap()
    }

    fn answer(w: &Lab, client: &crate::geo::Client) -> (Vec<String>, u8) {
        names(&route(w.ctx(), 0, Query { want: Want::A, client }, &mut rng(1)))
    }

    #[test]
    fn hierarchy_table() {
        // (fallback mode, WORLD mapped, degraded slots, country, subdivision, expected, scope)
        type Case =
            (bool, bool, &'static [usize], &'static str, &'static str, Option<&'static str>);
        let cases: &[Case] = &[
            (false, true, &[], "FR", "IDF", Some("fr")),
            (false, true, &[], "DE", "", Some("eu")),
            (false, true, &[], "US", "CA", Some("usca")),
            (false, true, &[], "US", "NY", Some("any")),
            (false, true, &[], "", "", Some("any")),
            (false, false, &[], "US", "NY", None),
            (false, true, &[0], "FR", "", Some("fr")), // serve: matched endpoint whatever its health
            (true, true, &[0], "FR", "", Some("eu")),  // fallback: continue up the hierarchy
            (true, true, &[0, 1], "FR", "", Some("any")),
            (true, false, &[0, 1], "FR", "", None),
        ];
        for (i, (fallback, world, down, country, sub, want)) in cases.iter().enumerate() {
            let w = lab(*fallback, *world);
            for s in *down {
                w.health.set(*s, Status::Degraded);
            }
            let client = client_in("198.51.100.7", country, sub, None, 24);
            let (got, scope) = answer(&w, &client);
            assert_eq!(got.first().map(String::as_str), *want, "case {i}");
            assert_eq!(scope, 24, "case {i}: scope is the geo network's prefix");
        }
    }

    /// A drained endpoint's codes stay in the mapping (built before the drain): the walk
    /// goes past them as if they were not mapped.
    #[test]
    fn a_drained_match_is_skipped_like_an_unmapped_code() {
        for (fallback, world, want) in [(false, true, Some("eu")), (true, true, Some("eu"))] {
            let mut w = lab(fallback, world);
            let fr = &mut w.profiles[0].endpoints[0];
            (fr.enabled, fr.drained) = (false, true);
            let (got, scope) = answer(&w, &client_in("198.51.100.7", "FR", "IDF", None, 24));
            assert_eq!((got.first().map(String::as_str), scope), (want, 24));
        }
        let mut w = lab(false, false);
        for i in [0, 1] {
            w.profiles[0].endpoints[i].enabled = false;
        }
        let (got, _) = answer(&w, &client_in("198.51.100.7", "FR", "", None, 24));
        assert!(got.is_empty(), "nothing left above FR: NODATA");
    }

    #[test]
    fn scope_is_the_answers_block_even_past_the_client_prefix() {
        // A /20 client whose place was decided by a /24: the answer holds for the /24 only.
        let w = lab(false, true);
        let mut client = client_in("198.51.100.0", "FR", "", None, 24);
        client.prefix = 20;
        assert_eq!(answer(&w, &client), (vec!["fr".to_string()], 24));
    }

    #[test]
    fn stopped_match_and_wrong_family_answer_nodata() {
        let mut w = Lab::new();
        let child = w.profile("child", Method::Priority);
        w.ep(child, "c", "192.0.2.9");
        w.profiles[child].enabled = false;
        let p = w.profile("geo", Method::Geographic);
        w.nested(p, "nested-fr", child, [1, 0, 0]);
        w.ep(p, "v6-world", "2001:db8::1");
        let by_region = ByRegion::new(vec![(id("FR"), 0), (id("WORLD"), 1)]);
        w.profiles[p].rules = Rules::Geographic {
            by_region,
            fallback_on_degraded: false,
            compiled: Default::default(),
            by_asn: Default::default(),
        };
        let w = w.finish();
        let fr = client_in("198.51.100.7", "FR", "", None, 24);
        let d = route(w.ctx(), p, Query { want: Want::A, client: &fr }, &mut rng(1));
        assert_eq!(names(&d), (vec![], 24));
        let de = client_in("198.51.100.7", "DE", "", None, 24);
        let d = route(w.ctx(), p, Query { want: Want::A, client: &de }, &mut rng(1));
        assert_eq!(
            names(&d).0,
            Vec::<String>::new(),
            "WORLD matches a v6-only endpoint: NODATA for A"
        );
        let d = route(w.ctx(), p, Query { want: Want::Aaaa, client: &de }, &mut rng(1));
        assert_eq!(names(&d).0, vec!["v6-world"]);
    }
}
