//! `routing: weighted` — random among eligible endpoints in proportion to weight.
//!
//! Weight-0 endpoints are standby: used only when no eligible endpoint has a weight; when
//! every candidate weighs 0 they share evenly. With `sticky`, the pick is a weighted
//! rendezvous hash of the client's /24 (IPv4) or /56 (IPv6), so a client keeps its endpoint
//! and, when one endpoint fails, only that endpoint's clients move.

use std::net::IpAddr;

use rand::Rng;

use crate::hash::mix;
use crate::model::Profile;

use super::{Candidate, Client, Ctx};
use crate::model::health::HealthView;

/// Prefix lengths sticky picks hash on.
pub const STICKY_V4: u8 = 24;
pub const STICKY_V6: u8 = 56;

/// Returns (index in profile, ECS scope).
pub fn pick<H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    eligible: &[Candidate],
    client: &Client,
    rng: &mut R,
) -> (usize, u8) {
    let any_weight = eligible.iter().any(|c| profile.endpoints[c.index].weight > 0);
    let weight = |c: &Candidate| match profile.endpoints[c.index].weight {
        0 if !any_weight => 1,
        w => w,
    };
    if ctx.load.is_some() {
        return super::load::weighted(ctx, profile, eligible, weight, client, rng);
    }
    choose(profile, eligible, weight, client, profile.sticky, rng)
}

/// Picks one of `cands` (not empty) in proportion to `weight` — at random, or with
/// `sticky` by a weighted rendezvous hash of the client subnet. Zero weights everywhere
/// mean equal chances. Returns (index in profile, ECS scope).
pub fn choose<R: Rng + ?Sized>(
    profile: &Profile,
    cands: &[Candidate],
    weight: impl Fn(&Candidate) -> u32,
    client: &Client,
    sticky: bool,
    rng: &mut R,
) -> (usize, u8) {
    let total: u64 = cands.iter().map(|c| u64::from(weight(c))).sum();
    let weight = |c: &Candidate| if total == 0 { 1 } else { weight(c) };
    if sticky {
        return sticky_pick(profile, cands, weight, client);
    }
    let total = if total == 0 { cands.len() as u64 } else { total };
    let mut point = rng.random_range(0..total);
    for c in cands {
        let w = u64::from(weight(c));
        if point < w {
            return (c.index, 0);
        }
        point -= w;
    }
    unreachable!("point < total")
}

/// The deterministic pick for the client's /24 (/56): weighted rendezvous hashing, so a
/// client keeps its endpoint while that endpoint stays eligible. Returns (index, scope).
pub fn sticky_pick(
    profile: &Profile,
    cands: &[Candidate],
    weight: impl Fn(&Candidate) -> u32,
    client: &Client,
) -> (usize, u8) {
    let (key, scope) = sticky_key(client);
    (rendezvous(profile, cands, weight, key), scope)
}

/// The client's subnet as a hash key, and its prefix length (the ECS scope).
pub fn sticky_key(client: &Client) -> (u64, u8) {
    match client.addr {
        IpAddr::V4(a) => {
            let prefix = STICKY_V4.min(client.prefix);
            let bits = u32::from(a) & mask32(prefix);
            (u64::from(bits) | (4 << 40), STICKY_V4)
        }
        IpAddr::V6(a) => {
            let prefix = STICKY_V6.min(client.prefix);
            let hi = (u128::from(a) >> 64) as u64;
            let bits = hi & mask64(prefix);
            (mix(bits ^ 6), STICKY_V6)
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) }
}

fn mask64(prefix: u8) -> u64 {
    if prefix == 0 { 0 } else { u64::MAX << (64 - prefix.min(64)) }
}

/// Weighted rendezvous hashing: the candidate with the highest `w / -ln(u)` wins.
fn rendezvous(
    profile: &Profile,
    cands: &[Candidate],
    weight: impl Fn(&Candidate) -> u32,
    key: u64,
) -> usize {
    let mut best = (f64::NEG_INFINITY, cands[0].index);
    for c in cands {
        let w = weight(c);
        if w == 0 {
            continue;
        }
        let h = mix(profile.hash_seed ^ mix(key ^ profile.endpoints[c.index].name_hash));
        // 53 random bits into (0, 1).
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let score = f64::from(w) / -u.ln();
        if score > best.0 {
            best = (score, c.index);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::model::health::Status;
    use crate::model::{Method, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Client, Decision, Query, route};

    fn world(weights: &[u32], sticky: bool) -> Lab {
        let mut w = Lab::new();
        let p = w.profile("www", Method::Weighted);
        for (i, wt) in weights.iter().enumerate() {
            w.ep(p, &format!("e{i}"), &format!("192.0.2.{}", i + 1));
            w.profiles[p].endpoints[i].weight = *wt;
        }
        w.profiles[p].sticky = sticky;
        w.finish()
    }

    fn pick(w: &Lab, client: &str, r: &mut rand::rngs::SmallRng) -> (String, u8) {
        let client = Client::from_addr(client.parse().unwrap());
        match route(w.ctx(), 0, Query { want: Want::A, client: &client }, r) {
            Decision::Answer { endpoints, scope } => (endpoints[0].name.clone(), scope),
            other => panic!("{other:?}"),
        }
    }

    fn shares(w: &Lab, n: usize) -> HashMap<String, f64> {
        let mut r = rng(7);
        let mut counts = HashMap::new();
        for _ in 0..n {
            *counts.entry(pick(w, "198.51.100.1", &mut r).0).or_insert(0.0) += 1.0;
        }
        counts.values_mut().for_each(|v| *v /= n as f64);
        counts
    }

    #[test]
    fn distribution_table() {
        use Status::*;
        // weights, statuses, expected share of each endpoint
        let cases: &[(&[u32], &[Status], &[f64])] = &[
            (&[1, 1], &[Online, Online], &[0.5, 0.5]),
            (&[3, 1], &[Online, Online], &[0.75, 0.25]),
            (&[1, 2, 7], &[Online, Online, Online], &[0.1, 0.2, 0.7]),
            (&[3, 1], &[Degraded, Online], &[0.0, 1.0]),
            (&[5, 0], &[Online, Online], &[1.0, 0.0]),
            (&[5, 0], &[Degraded, Online], &[0.0, 1.0]),
            (&[0, 0], &[Online, Online], &[0.5, 0.5]),
            (&[0, 0, 4], &[Online, Online, Degraded], &[0.5, 0.5, 0.0]),
            (&[2, 2], &[Degraded, Degraded], &[0.5, 0.5]),
        ];
        for (i, (weights, sts, want)) in cases.iter().enumerate() {
            let w = world(weights, false);
            for (slot, st) in sts.iter().enumerate() {
                w.health.set(slot, *st);
            }
            let got = shares(&w, 20_000);
            for (e, share) in want.iter().enumerate() {
                let g = got.get(&format!("e{e}")).copied().unwrap_or(0.0);
                assert!((g - share).abs() < 0.02, "case {i}: e{e} got {g}, want {share}");
            }
        }
    }

    #[test]
    fn sticky_is_stable_per_subnet_and_reports_scope() {
        let w = world(&[1, 1, 1, 1], true);
        let mut r = rng(3);
        let (first, scope) = pick(&w, "198.51.100.7", &mut r);
        assert_eq!(scope, 24);
        for host in 0..50 {
            let (again, _) = pick(&w, &format!("198.51.100.{host}"), &mut r);
            assert_eq!(again, first, "same /24 must stick");
        }
        let (_, scope6) = pick(&w, "2001:db8:1:2::1", &mut r);
        assert_eq!(scope6, 56);
        // Different subnets spread over the endpoints.
        let spread: std::collections::HashSet<String> =
            (0..64).map(|n| pick(&w, &format!("10.{n}.0.1"), &mut r).0).collect();
        assert_eq!(spread.len(), 4);
    }

    #[test]
    fn sticky_moves_only_the_failed_endpoints_clients() {
        let w = world(&[1, 1, 1], true);
        let mut r = rng(3);
        let before: Vec<String> =
            (0..200).map(|n| pick(&w, &format!("10.0.{n}.1"), &mut r).0).collect();
        w.health.set(0, Status::Degraded);
        for (n, was) in before.iter().enumerate() {
            let now = pick(&w, &format!("10.0.{n}.1"), &mut r).0;
            if was != "e0" {
                assert_eq!(&now, was, "client {n} moved although its endpoint is healthy");
            } else {
                assert_ne!(now, "e0");
            }
        }
    }
}
