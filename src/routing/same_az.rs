//! `routing: zone` — same availability zone first, with a safety threshold (Alibaba MSE):
//! when the client's availability zone (from `topology.zones`) holds at least
//! `safety_threshold`% of the profile's serving endpoints, one of them answers (evenly);
//! otherwise, or when the client's availability zone is unknown, any serving endpoint does.
//! The threshold keeps a small availability zone from being flooded. ("Zone" alone means a
//! DNS zone everywhere else in the code.)

use rand::Rng;

use crate::model::Profile;
use crate::model::health::HealthView;

use super::load::eligible_kept;
use super::weighted::choose;
use super::{Candidates, Ctx, Pick, Query};

pub fn pick<'a, H: HealthView + ?Sized, R: Rng + ?Sized>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    az_of: &[usize],
    threshold: u8,
    q: Query<'_>,
    rng: &mut R,
) -> Pick<'a> {
    // Spilled endpoints are left out before zones are counted: the method runs again
    // without them.
    let Some(all) = eligible_kept(ctx, profile, q.want, rng) else {
        return Pick::NoData { scope: 0 };
    };
    let hit = ctx.world.az_networks.lookup(q.client.addr);
    let scope = hit.scope;
    let mut local = Candidates::take();
    if let Some(&z) = hit.value {
        local.extend(all.iter().copied().filter(|c| az_of[c.index] == z));
    }
    let enough = !local.is_empty() && local.len() * 100 >= usize::from(threshold) * all.len();
    ctx.note(|| {
        let zone = hit.value.map_or("unknown", |&z| ctx.world.az_names[z].as_str());
        format!(
            "client zone {zone}: {} of {} serving endpoints there (threshold {threshold}%) → {}",
            local.len(),
            all.len(),
            if enough { "same zone" } else { "all zones" }
        )
    });
    let cands = if enough { &local[..] } else { &all[..] };
    let (i, s) = choose(profile, cands, |_| 1, q.client, profile.sticky, rng);
    Pick::One { index: i, scope: scope.max(s) }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use crate::model::health::Status;
    use crate::model::{Method, Rules, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Client, Query, route};

    /// a1, a2 in zone-a (10.1.0.0/16); b1, b2, b3 in zone-b (10.2.0.0/16).
    fn lab(threshold: u8) -> Lab {
        let mut w = Lab::new();
        w.availability_zones(&[("zone-a", &["10.1.0.0/16"]), ("zone-b", &["10.2.0.0/16"])]);
        let p = w.profile("svc", Method::SameAz);
        let zones = [0, 0, 1, 1, 1];
        for (i, name) in ["a1", "a2", "b1", "b2", "b3"].iter().enumerate() {
            w.ep(p, name, &format!("192.0.2.{}", i + 1));
        }
        w.profiles[p].rules = Rules::SameAz { az: zones.to_vec(), safety_threshold: threshold };
        w.finish()
    }

    fn seen(w: &Lab, ip: &str) -> HashSet<String> {
        let client = Client::from_addr(ip.parse().unwrap());
        let mut r = rng(5);
        (0..400)
            .map(|_| {
                names(&route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut r)).0[0]
                    .clone()
            })
            .collect()
    }

    fn set(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn safety_threshold_table() {
        // (threshold, degraded slots, client, endpoints that may answer)
        type Case = (u8, &'static [usize], &'static str, &'static [&'static str]);
        let cases: &[Case] = &[
            (20, &[], "10.1.2.3", &["a1", "a2"]), // 2 of 5 = 40% ≥ 20%
            (40, &[], "10.1.2.3", &["a1", "a2"]), // exactly at the threshold
            (50, &[], "10.1.2.3", &["a1", "a2", "b1", "b2", "b3"]), // 40% < 50%
            (30, &[0], "10.1.2.3", &["a2", "b1", "b2", "b3"]), // 1 of 4 = 25% < 30%
            (20, &[0], "10.1.2.3", &["a2"]),      // 25% ≥ 20%
            (20, &[0, 1], "10.1.2.3", &["b1", "b2", "b3"]), // zone empty
            (20, &[], "10.2.0.1", &["b1", "b2", "b3"]),
            (20, &[], "172.16.0.1", &["a1", "a2", "b1", "b2", "b3"]), // unknown zone
            (0, &[], "10.1.2.3", &["a1", "a2"]),
        ];
        for (i, (threshold, down, ip, want)) in cases.iter().enumerate() {
            let w = lab(*threshold);
            for s in *down {
                w.health.set(*s, Status::Degraded);
            }
            assert_eq!(seen(&w, ip), set(want), "case {i}");
        }
    }

    #[test]
    fn scope_is_the_availability_zone_network_whatever_the_source_prefix() {
        let w = lab(20);
        // (client, source prefix, scope): the block with the same availability zone, also
        // when it is narrower than the source (10.0.0.0/16 is in no zone, 10.1.0.0/16 is).
        let cases = [("10.1.2.3", 32, 16), ("10.1.0.0", 24, 16), ("10.0.0.0", 8, 16)];
        for (addr, source, want) in cases {
            let client = Client::new(addr.parse().unwrap(), source);
            let (_, scope) =
                names(&route(w.ctx(), 0, Query { want: Want::A, client: &client }, &mut rng(1)));
            assert_eq!(scope, want, "{addr}/{source}");
        }
    }
}
