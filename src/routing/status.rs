//! Endpoint statuses as routing sees them, including the status a parent derives for a
//! nested endpoint from its child profile (after Azure Traffic Manager; `docs/routing.md`, "Nested endpoints").

use crate::model::health::{HealthView, Status};
use crate::model::{Endpoint, Nested, Target};

use super::Ctx;

/// The status of one endpoint: disabled (drained ones too), unmonitored, probed, or
/// derived from a child.
pub fn endpoint_status<H: HealthView + ?Sized>(ctx: Ctx<'_, H>, ep: &Endpoint) -> Status {
    if !ep.enabled {
        return Status::Disabled;
    }
    monitored_status(ctx, ep)
}

/// The status an endpoint's probes (or its child profile) give it, drained or not: what
/// the admin API shows, beside `drained`, so that operators see whether a drained endpoint
/// is fit to come back. Routing reads `endpoint_status`.
pub fn health_status<H: HealthView + ?Sized>(ctx: Ctx<'_, H>, ep: &Endpoint) -> Status {
    if !ep.configured_enabled {
        return Status::Disabled;
    }
    monitored_status(ctx, ep)
}

fn monitored_status<H: HealthView + ?Sized>(ctx: Ctx<'_, H>, ep: &Endpoint) -> Status {
    // `always_serve` endpoints hold `unmonitored` in the health table (the prober never
    // writes them), so one lookup serves every leaf and `explain --down` can override any.
    match &ep.target {
        Target::Nested(n) => child_status(ctx, n),
        // Addresses past the stale bound, or never resolved: not serving, whatever probes say.
        Target::Flat(_) if !ctx.flat_serves(ep, crate::model::Want::Any) => Status::Degraded,
        _ => ep.health_slot.map_or(Status::Degraded, |slot| ctx.health.status(slot)),
    }
}

/// A nested endpoint is Online when the child has `min_child` Online (or Unmonitored)
/// endpoints and the per-family minimums of serving endpoints, Checking when Online plus
/// Checking reach that, Degraded otherwise, and Stopped when the child is disabled.
pub fn child_status<H: HealthView + ?Sized>(ctx: Ctx<'_, H>, n: &Nested) -> Status {
    let child = &ctx.profiles[n.child];
    if !child.enabled {
        return Status::Stopped;
    }
    let (mut online, mut checking, mut v4, mut v6) = (0u32, 0u32, 0u32, 0u32);
    for ep in &child.endpoints {
        let st = endpoint_status(ctx, ep);
        match st {
            Status::Online | Status::Unmonitored => online += 1,
            Status::Checking => checking += 1,
            _ => continue,
        }
        let fam = ep.families(ctx.profiles);
        v4 += u32::from(fam.v4);
        v6 += u32::from(fam.v6);
    }
    let families_ok = v4 >= n.min_child_v4 && v6 >= n.min_child_v6;
    if families_ok && online >= n.min_child {
        Status::Online
    } else if families_ok && online + checking >= n.min_child {
        Status::Checking
    } else {
        Status::Degraded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::Overlay;
    use crate::routing::testkit::*;

    /// Child "c" with endpoints c1 (v4), c2 (v4), c3 (v6); parent "p" nests it.
    fn world(min: u32, min4: u32, min6: u32, child_enabled: bool) -> Lab {
        let mut w = Lab::new();
        let c = w.profile("c", crate::model::Method::Priority);
        w.ep(c, "c1", "192.0.2.1");
        w.ep(c, "c2", "192.0.2.2");
        w.ep(c, "c3", "2001:db8::3");
        w.profiles[c].enabled = child_enabled;
        let p = w.profile("p", crate::model::Method::Priority);
        w.nested(p, "n", c, [min, min4, min6]);
        w.finish()
    }

    #[test]
    fn nested_status_table() {
        use Status::*;
        // (min, min4, min6, child enabled, statuses of c1 c2 c3, expected)
        type Case = (u32, u32, u32, bool, [Status; 3], Status);
        let cases: &[Case] = &[
            (1, 0, 0, true, [Online, Online, Online], Online),
            (1, 0, 0, true, [Checking, Degraded, Degraded], Checking),
            (1, 0, 0, true, [Degraded, Degraded, Degraded], Degraded),
            (2, 0, 0, true, [Online, Checking, Degraded], Checking),
            (2, 0, 0, true, [Online, Degraded, Degraded], Degraded),
            (3, 0, 0, true, [Online, Online, Online], Online),
            (1, 0, 1, true, [Online, Online, Degraded], Degraded),
            (1, 2, 0, true, [Online, Degraded, Online], Degraded),
            (1, 2, 1, true, [Online, Checking, Online], Online),
            (1, 0, 0, false, [Online, Online, Online], Stopped),
            (1, 0, 0, true, [Disabled, Disabled, Online], Online),
        ];
        for (i, &(min, min4, min6, enabled, sts, want)) in cases.iter().enumerate() {
            let w = world(min, min4, min6, enabled);
            let ov: Vec<(usize, Status)> = sts.iter().enumerate().map(|(s, st)| (s, *st)).collect();
            let h = Overlay { base: &w.health, overrides: &ov };
            let ctx = Ctx::new(&w.profiles, &h, &w.world);
            let p = &w.profiles[1];
            assert_eq!(endpoint_status(ctx, &p.endpoints[0]), want, "case {i}");
        }
    }

    #[test]
    fn unmonitored_counts_online_and_disabled_endpoint_is_disabled() {
        let mut w = Lab::new();
        let c = w.profile("c", crate::model::Method::Priority);
        w.ep(c, "c1", "192.0.2.1");
        w.profiles[c].endpoints[0].always_serve = true;
        let p = w.profile("p", crate::model::Method::Priority);
        w.nested(p, "n", c, [1, 0, 0]);
        w.ep(p, "off", "192.0.2.9");
        w.profiles[p].endpoints[1].enabled = false;
        let w = w.finish();
        let ctx = w.ctx();
        assert_eq!(endpoint_status(ctx, &w.profiles[p].endpoints[0]), Status::Online);
        assert_eq!(endpoint_status(ctx, &w.profiles[p].endpoints[1]), Status::Disabled);
    }
}
