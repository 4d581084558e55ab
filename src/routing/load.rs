//! Load shares in routing (`docs/load.md`): an endpoint at share s < 1 keeps fraction s of
//! the traffic its method would give it, and the rest spills to where the method would
//! send it without the endpoint. Weighted choices scale weights by the share; every other
//! method draws once per candidate (kept with probability s) and runs on the ones kept.
//!
//! An endpoint above its high watermark takes no answers while another candidate is not;
//! when every candidate spilled, the one with the highest share answers (one not above
//! high first). With `ctx.load` unset (no `load:` anywhere) none of this runs.

use rand::Rng;

use crate::model::health::HealthView;
use crate::model::load::Share;
use crate::model::{Endpoint, Profile, Want};

use super::weighted::{choose, sticky_key};
use super::{Candidate, Candidates, Client, Ctx, eligible};

/// The share routing applies to `ep`: full without a load table or a feed.
#[inline]
pub fn share_of<H: HealthView + ?Sized>(ctx: Ctx<'_, H>, ep: &Endpoint) -> Share {
    match (ctx.load, ep.health_slot) {
        (Some(table), Some(slot)) if ep.load.is_some() => table.get(slot),
        _ => Share::FULL,
    }
}

/// What the draw did with one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drawn {
    Kept,
    Spilled,
    /// Above high while another candidate is not: no draw.
    AboveHigh,
}

/// Draws for one endpoint at `share`: kept with probability `share` (no draw when full).
#[inline]
fn draw<R: Rng + ?Sized>(share: Share, others_below_high: bool, rng: &mut R) -> Drawn {
    if share.is_full() {
        Drawn::Kept
    } else if share.above_high && others_below_high {
        Drawn::AboveHigh
    } else if rng.random_range(0..u16::MAX) < share.fraction {
        Drawn::Kept
    } else {
        Drawn::Spilled
    }
}

/// The order in which spilled candidates are taken back: not above high first, then the
/// highest share.
fn rank(s: Share) -> (bool, u16) {
    (!s.above_high, s.fraction)
}

/// Keeps each candidate with the probability of its share (above-high ones not at all
/// unless every candidate is above high); when none is kept, the best of them stays.
pub fn thin<H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    list: &mut Vec<Candidate>,
    rng: &mut R,
) {
    if ctx.load.is_none() || list.is_empty() {
        return;
    }
    let share = |c: &Candidate| share_of(ctx, &profile.endpoints[c.index]);
    let below = list.iter().any(|c| !share(c).above_high);
    let mut best: Option<((bool, u16), Candidate)> = None;
    list.retain(|c| {
        let s = share(c);
        if best.is_none_or(|(r, _)| rank(s) > r) {
            best = Some((rank(s), *c));
        }
        let drawn = draw(s, below, rng);
        if !s.is_full() {
            note(ctx, &profile.endpoints[c.index], profile, s, outcome(drawn));
        }
        drawn == Drawn::Kept
    });
    if list.is_empty()
        && let Some((_, c)) = best
    {
        let ep = &profile.endpoints[c.index];
        ctx.note(|| format!("every candidate spilled: {} has the highest share", ep.name));
        list.push(c);
    }
}

/// The eligible candidates for `want` (`eligible`) that keep this query by their shares
/// (`thin`): how a method that groups the candidates by the client (performance, zone)
/// starts, so that spilled ones count in no group. `None` when none is eligible.
pub fn eligible_kept<H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    want: Want,
    rng: &mut R,
) -> Option<Candidates> {
    let mut all = eligible(ctx, profile, want);
    if all.is_empty() {
        return None;
    }
    thin(ctx, profile, &mut all, rng);
    Some(all)
}

fn outcome(d: Drawn) -> &'static str {
    match d {
        Drawn::Kept => "kept",
        Drawn::Spilled => "spilled",
        Drawn::AboveHigh => "spilled (above high)",
    }
}

/// One endpoint matched by a method that picks one endpoint (geographic, subnet): whether
/// it keeps this query. Above high, it spills without a draw; the method continues to
/// its next match, and takes the best of the spilled ones back (`better`) when none keeps.
pub fn keeps<H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    index: usize,
    rng: &mut R,
) -> bool {
    let ep = &profile.endpoints[index];
    let s = share_of(ctx, ep);
    if s.is_full() {
        return true;
    }
    let drawn = draw(s, true, rng);
    note(ctx, ep, profile, s, outcome(drawn));
    drawn == Drawn::Kept
}

/// The better of two spilled endpoints to answer with when every match spilled.
pub fn better<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    a: Option<usize>,
    b: usize,
) -> usize {
    let s = |i: usize| rank(share_of(ctx, &profile.endpoints[i]));
    match a {
        Some(a) if s(a) >= s(b) => a,
        _ => b,
    }
}

/// A weighted choice with each weight scaled by the endpoint's share (in integer
/// arithmetic: weight × share in 1/65535ths). Above-high endpoints weigh nothing unless
/// every candidate is above high; with every weight at 0 the best share answers.
pub fn weighted<H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    cands: &[Candidate],
    weight: impl Fn(&Candidate) -> u32,
    client: &Client,
    rng: &mut R,
) -> (usize, u8) {
    let share = |c: &Candidate| share_of(ctx, &profile.endpoints[c.index]);
    let below = cands.iter().any(|c| !share(c).above_high);
    let effective = |c: &Candidate| {
        let s = share(c);
        if s.above_high && below { 0 } else { weight(c) * u32::from(s.fraction) }
    };
    if ctx.trace.is_some() {
        for c in cands {
            let s = share(c);
            if !s.is_full() {
                let w = weight(c);
                let what = if s.above_high && below {
                    format!("weight {w} → 0 (above high)")
                } else {
                    format!("weight {w} → {:.2}", f64::from(w) * s.as_f64())
                };
                note(ctx, &profile.endpoints[c.index], profile, s, &what);
            }
        }
    }
    let live = cands.iter().any(|c| effective(c) > 0);
    if !live && cands.iter().any(|c| weight(c) > 0) {
        let weighed = cands.iter().filter(|c| weight(c) > 0);
        // The first of the best, as `thin` takes it.
        let best = weighed
            .reduce(|a, b| if rank(share(b)) > rank(share(a)) { b } else { a })
            .expect("one has weight");
        let ep = &profile.endpoints[best.index];
        ctx.note(|| format!("every candidate spilled: {} has the highest share", ep.name));
        let scope = if profile.sticky { sticky_key(client).1 } else { 0 };
        return (best.index, scope);
    }
    choose(profile, cands, effective, client, profile.sticky, rng)
}

/// The mean share of `cands`, above-high endpoints counted at 0 unless all are: what a
/// group's traffic dial is scaled by.
pub fn mean_share<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    cands: &[Candidate],
) -> f64 {
    if cands.is_empty() {
        return 1.0;
    }
    let share = |c: &Candidate| share_of(ctx, &profile.endpoints[c.index]);
    let below = cands.iter().any(|c| !share(c).above_high);
    let sum: f64 = cands
        .iter()
        .map(|c| {
            let s = share(c);
            if s.above_high && below { 0.0 } else { s.as_f64() }
        })
        .sum();
    sum / cands.len() as f64
}

/// The trace line of a loaded endpoint: what the control loop last read of it (when
/// `explain` was given it), its share, and what routing did.
fn note<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    ep: &Endpoint,
    profile: &Profile,
    s: Share,
    what: &str,
) {
    let Some(trace) = ctx.trace else { return };
    let line = match (trace.load_of(&profile.name, &ep.name), ep.load.as_deref()) {
        (Some(l), Some(feed)) => {
            let reading = match (l.load, l.utilisation) {
                (Some(load), Some(u)) => {
                    let high = if l.above_high { ", above high" } else { "" };
                    format!("load {load}/{} (utilisation {u:.2}{high})", feed.capacity)
                }
                _ if l.stale && l.above_high => "load stale (counted above high)".to_string(),
                _ if l.stale => "load stale".to_string(),
                _ => "no load read".to_string(),
            };
            format!(
                "endpoint {}: {reading}: share {:.2}, target {:.2}, {what}",
                ep.name,
                s.as_f64(),
                l.target
            )
        }
        _ => {
            let high = if s.above_high { " (above high)" } else { "" };
            format!("endpoint {}: share {:.2}{high}, {what}", ep.name, s.as_f64())
        }
    };
    ctx.note(|| line);
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::geo::{ByRegion, Client, Regions};
    use crate::model::{Group, Method, Rules, Want};
    use crate::netrange::{Range, RangeMap};
    use crate::routing::testkit::*;
    use crate::routing::{Query, route};

    const DRAWS: usize = 20_000;

    /// How often each endpoint is in the answer over `DRAWS` seeded queries.
    fn frequencies(w: &Lab, client: &Client) -> HashMap<String, f64> {
        let mut r = rng(42);
        let mut counts: HashMap<String, f64> = HashMap::new();
        for _ in 0..DRAWS {
            let (answer, _) = names(&route(w.ctx(), 0, Query { want: Want::A, client }, &mut r));
            for name in answer {
                *counts.entry(name).or_default() += 1.0 / DRAWS as f64;
            }
        }
        counts
    }

    fn anywhere() -> Client {
        Client::from_addr("198.51.100.1".parse().unwrap())
    }

    /// Each case: the fraction of answers per endpoint, within 0.015 (over 20 000 draws a
    /// fraction's standard deviation is at most 0.0036: four of them).
    fn assert_near(got: &HashMap<String, f64>, want: &[(&str, f64)], case: &str) {
        for (name, w) in want {
            let g = got.get(*name).copied().unwrap_or(0.0);
            assert!((g - w).abs() < 0.015, "{case}: {name} {g:.4}, want {w:.4} ({got:?})");
        }
    }

    /// Endpoints e0.. with the given weights (or priorities in order), each fed.
    /// Sets the (share, above high) of each endpoint `e0`, `e1`, … of `w`'s profile, then
    /// checks the fraction of queries each answers against `want`.
    fn assert_shares(w: &Lab, shares: &[(f64, bool)], want: &[f64], case: &str) {
        for (e, &(s, high)) in shares.iter().enumerate() {
            w.share(0, e, s, high);
        }
        let want: Vec<(String, f64)> =
            want.iter().enumerate().map(|(e, f)| (format!("e{e}"), *f)).collect();
        let want: Vec<(&str, f64)> = want.iter().map(|(n, f)| (n.as_str(), *f)).collect();
        assert_near(&frequencies(w, &anywhere()), &want, case);
    }

    fn plain(method: Method, n: usize, weights: &[u32]) -> Lab {
        let mut w = Lab::new();
        let p = w.profile("www", method);
        for i in 0..n {
            w.ep(p, &format!("e{i}"), &format!("192.0.2.{}", i + 1));
            w.profiles[p].endpoints[i].weight = weights.get(i).copied().unwrap_or(1);
            w.fed(p, i);
        }
        w.profiles[p].max_return = n as u8;
        w.finish()
    }

    #[test]
    fn weighted_scales_each_weight_by_its_share() {
        // (weights, shares as (share, above high), expected fractions)
        type Case = (&'static [u32], &'static [(f64, bool)], &'static [f64]);
        let cases: &[Case] = &[
            (&[1, 1, 2], &[(1.0, false), (1.0, false), (1.0, false)], &[0.25, 0.25, 0.5]),
            // 0.5 : 1 : 2
            (
                &[1, 1, 2],
                &[(0.5, false), (1.0, false), (1.0, false)],
                &[0.5 / 3.5, 1.0 / 3.5, 2.0 / 3.5],
            ),
            // 3 × 0.2 : 1 × 0.6 = 0.6 : 0.6
            (&[3, 1], &[(0.2, false), (0.6, false)], &[0.5, 0.5]),
            // Above high weighs nothing while another is not.
            (&[1, 1, 2], &[(0.8, false), (1.0, false), (0.9, true)], &[0.8 / 1.8, 1.0 / 1.8, 0.0]),
            // Every candidate above high: by share.
            (&[1, 1], &[(0.3, true), (0.6, true)], &[1.0 / 3.0, 2.0 / 3.0]),
            // Every share 0: the one not above high answers.
            (&[1, 1], &[(0.0, true), (0.0, false)], &[0.0, 1.0]),
            // Every share 0, all above high: the highest share (a tie: the first).
            (&[1, 1], &[(0.0, true), (0.0, true)], &[1.0, 0.0]),
        ];
        for (i, (weights, shares, want)) in cases.iter().enumerate() {
            let w = plain(Method::Weighted, weights.len(), weights);
            assert_shares(&w, shares, want, &format!("case {i}"));
        }
    }

    #[test]
    fn priority_keeps_the_share_and_spills_the_rest_to_the_next() {
        type Case = (&'static [(f64, bool)], &'static [f64]);
        let cases: &[Case] = &[
            (&[(0.3, false), (1.0, false), (1.0, false)], &[0.3, 0.7, 0.0]),
            // The spill of e0 is itself shared by e1: 0.7 × 0.5 go on to e2.
            (&[(0.3, false), (0.5, false), (1.0, false)], &[0.3, 0.35, 0.35]),
            (&[(0.9, true), (1.0, false), (1.0, false)], &[0.0, 1.0, 0.0]),
            // All above high: drawn by share; when both spill (0.7 × 0.5), e1's higher
            // share answers.
            (&[(0.3, true), (0.5, true)], &[0.3, 0.7]),
        ];
        for (i, (shares, want)) in cases.iter().enumerate() {
            let w = plain(Method::Priority, shares.len(), &[]);
            assert_shares(&w, shares, want, &format!("case {i}"));
        }
    }

    #[test]
    fn multivalue_keeps_each_address_with_its_share() {
        let w = plain(Method::Multivalue, 4, &[]);
        w.share(0, 0, 0.5, false);
        w.share(0, 3, 0.25, false);
        let got = frequencies(&w, &anywhere());
        assert_near(&got, &[("e0", 0.5), ("e1", 1.0), ("e2", 1.0), ("e3", 0.25)], "multivalue");
    }

    #[test]
    fn a_loaded_nearest_region_spills_in_proportion_to_the_next() {
        // A CN client has beijing nearest (20 ms), then shanghai (30 ms).
        let cn = client_in("198.51.100.9", "CN", "", BEIJING, 24);
        let w = performance_lab(true);
        w.share(0, 0, 0.5, false);
        let got = frequencies(&w, &cn);
        let sh = got.get("sh-1").copied().unwrap_or(0.0) + got.get("sh-2").copied().unwrap_or(0.0);
        assert_near(&got, &[("bj-1", 0.5), ("eu-1", 0.0)], "beijing at 0.5");
        assert!((sh - 0.5).abs() < 0.015, "shanghai takes the rest: {got:?}");
        // Beijing above high: all to shanghai; shanghai's both endpoints at 0.5 as well:
        // a quarter of the queries spill on to eu-west.
        w.share(0, 0, 0.5, true);
        w.share(0, 1, 0.5, false);
        w.share(0, 2, 0.5, false);
        let got = frequencies(&w, &cn);
        assert_near(&got, &[("bj-1", 0.0), ("eu-1", 0.25)], "beijing above high");
    }

    /// fr → FR, eu → GEO-EU, any → WORLD.
    fn geographic() -> Lab {
        let mut w = Lab::new();
        let p = w.profile("geo", Method::Geographic);
        let mut by_region = Vec::new();
        for (i, (name, code)) in
            [("fr", "FR"), ("eu", "GEO-EU"), ("any", "WORLD")].iter().enumerate()
        {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
            by_region.push((Regions::builtin().id(code).unwrap(), i));
            w.fed(p, i);
        }
        let by_region = ByRegion::new(by_region);
        w.profiles[p].rules = Rules::Geographic {
            by_region,
            fallback_on_degraded: false,
            compiled: Default::default(),
            by_asn: Default::default(),
        };
        w.finish()
    }

    #[test]
    fn a_loaded_geographic_match_spills_up_the_hierarchy() {
        let fr = client_in("198.51.100.7", "FR", "IDF", None, 24);
        type Case = (&'static [(f64, bool)], &'static [(&'static str, f64)]);
        let cases: &[Case] = &[
            (
                &[(0.4, false), (1.0, false), (1.0, false)],
                &[("fr", 0.4), ("eu", 0.6), ("any", 0.0)],
            ),
            (
                &[(0.4, false), (0.5, false), (1.0, false)],
                &[("fr", 0.4), ("eu", 0.3), ("any", 0.3)],
            ),
            (&[(0.9, true), (1.0, false), (1.0, false)], &[("fr", 0.0), ("eu", 1.0)]),
            // Every match spills: the highest share (fr) answers.
            (&[(0.0, false), (0.0, false), (0.0, false)], &[("fr", 1.0)]),
            (&[(0.0, true), (0.0, false), (0.0, true)], &[("eu", 1.0)]),
        ];
        for (i, (shares, want)) in cases.iter().enumerate() {
            let w = geographic();
            for (e, &(s, high)) in shares.iter().enumerate() {
                w.share(0, e, s, high);
            }
            assert_near(&frequencies(&w, &fr), want, &format!("case {i}"));
        }
    }

    #[test]
    fn a_loaded_subnet_match_spills_to_the_fallback() {
        let mut w = Lab::new();
        let p = w.profile("net", Method::Subnet);
        w.ep(p, "a", "198.51.100.1");
        w.ep(p, "fb", "198.51.100.3");
        w.fed(p, 0);
        w.fed(p, 1);
        let ranges = RangeMap::new(vec![(Range::parse("10.0.0.0/8").unwrap(), 0)]).unwrap();
        w.profiles[p].rules =
            Rules::Subnet { ranges, fallback: Some(1), fallback_on_degraded: false };
        let w = w.finish();
        let inside = Client::from_addr("10.1.2.3".parse().unwrap());
        w.share(0, 0, 0.25, false);
        assert_near(&frequencies(&w, &inside), &[("a", 0.25), ("fb", 0.75)], "a at 0.25");
        w.share(0, 0, 0.25, true);
        assert_near(&frequencies(&w, &inside), &[("a", 0.0), ("fb", 1.0)], "a above high");
        // Both spill (0.75 × 0.9 of the time): a's higher share answers then.
        w.share(0, 0, 0.25, false);
        w.share(0, 1, 0.1, false);
        let want = [("a", 0.25 + 0.75 * 0.9), ("fb", 0.75 * 0.1)];
        assert_near(&frequencies(&w, &inside), &want, "both loaded");
        // Outside every range the fallback has nowhere to spill to: it answers.
        let outside = Client::from_addr("203.0.113.1".parse().unwrap());
        assert_near(&frequencies(&w, &outside), &[("fb", 1.0)], "fallback alone");
    }

    #[test]
    fn a_groups_dial_shifts_by_its_mean_share() {
        let mut w = Lab::new();
        w.latency(LATENCY);
        let p = w.profile("ga", Method::Groups);
        for (i, name) in ["bj-1", "bj-2", "sh-1"].iter().enumerate() {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
            w.profiles[p].endpoints[i].weight = 128;
            w.fed(p, i);
        }
        let group = |name: &str, region, dial, endpoints| Group {
            name: name.into(),
            region,
            dial,
            endpoints,
        };
        let groups = vec![
            group("bj", w.region("cn-beijing"), 100, 0..2),
            group("sh", w.region("cn-shanghai"), 100, 2..3),
        ];
        w.profiles[p].rules = Rules::Groups { groups };
        let w = w.finish();
        let cn = client_in("198.51.100.9", "CN", "", BEIJING, 24);
        let bj = |got: &HashMap<String, f64>| {
            got.get("bj-1").copied().unwrap_or(0.0) + got.get("bj-2").copied().unwrap_or(0.0)
        };
        assert!((bj(&frequencies(&w, &cn)) - 1.0).abs() < 1e-9, "dial 100: beijing takes all");
        // Mean share (0.5 + 0.3) / 2 = 0.4: dial 40%, the other 60% to shanghai; inside
        // the group, weights 128 × 0.5 and 128 × 0.3.
        w.share(0, 0, 0.5, false);
        w.share(0, 1, 0.3, false);
        let got = frequencies(&w, &cn);
        assert_near(
            &got,
            &[("bj-1", 0.4 * 0.625), ("bj-2", 0.4 * 0.375), ("sh-1", 0.6)],
            "dial 40",
        );
        // bj-2 above high counts 0 in the mean (0.25: dial 25%) and takes nothing.
        w.share(0, 1, 0.3, true);
        let got = frequencies(&w, &cn);
        assert_near(&got, &[("bj-1", 0.25), ("bj-2", 0.0), ("sh-1", 0.75)], "bj-2 above high");
    }

    #[test]
    fn same_zone_first_runs_without_spilled_endpoints() {
        let mut w = Lab::new();
        w.availability_zones(&[("zone-a", &["10.1.0.0/16"]), ("zone-b", &["10.2.0.0/16"])]);
        let p = w.profile("svc", Method::SameAz);
        for (i, name) in ["a1", "b1", "b2"].iter().enumerate() {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
            w.fed(p, i);
        }
        w.profiles[p].rules = Rules::SameAz { az: vec![0, 1, 1], safety_threshold: 20 };
        let w = w.finish();
        let in_a = Client::from_addr("10.1.0.9".parse().unwrap());
        assert_near(&frequencies(&w, &in_a), &[("a1", 1.0)], "same zone");
        w.share(0, 0, 0.4, false);
        let got = frequencies(&w, &in_a);
        let b = got.get("b1").copied().unwrap_or(0.0) + got.get("b2").copied().unwrap_or(0.0);
        assert_near(&got, &[("a1", 0.4)], "a1 at 0.4");
        assert!((b - 0.6).abs() < 0.015, "zone b takes the rest: {got:?}");
    }

    /// Sticky weighted: the rendezvous hash weighs each endpoint by weight × share, so
    /// clients spread in proportion, and a client of an unloaded endpoint keeps it when
    /// another endpoint sheds.
    #[test]
    fn sticky_weighted_spreads_clients_by_weight_times_share() {
        let mut w = plain(Method::Weighted, 2, &[1, 1]);
        w.profiles[0].sticky = true;
        let pick = |w: &Lab, n: usize| {
            let client =
                Client::from_addr(format!("10.{}.{}.1", n / 256, n % 256).parse().unwrap());
            names(&route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut rng(1))).0[0]
                .clone()
        };
        let before: Vec<String> = (0..DRAWS).map(|n| pick(&w, n)).collect();
        w.share(0, 0, 0.25, false);
        let after: Vec<String> = (0..DRAWS).map(|n| pick(&w, n)).collect();
        let e0 = after.iter().filter(|n| *n == "e0").count() as f64 / DRAWS as f64;
        // Rendezvous with weights 0.25 : 1 gives e0 0.25 / 1.25 of the clients.
        assert!((e0 - 0.2).abs() < 0.015, "e0 has {e0}");
        let moved_off_e1 =
            before.iter().zip(&after).filter(|(b, a)| *b == "e1" && *a != "e1").count();
        assert_eq!(moved_off_e1, 0, "no client of e1 moves when e0 sheds");
    }

    /// Without a load table nothing is drawn: the same seed gives the same answers as a
    /// profile without feeds, whatever the shares say.
    #[test]
    fn without_a_load_table_shares_are_not_applied() {
        let mut w = plain(Method::Weighted, 2, &[1, 1]);
        w.share(0, 0, 0.0, true);
        w.load = None;
        assert_near(&frequencies(&w, &anywhere()), &[("e0", 0.5), ("e1", 0.5)], "no table");
    }
}
