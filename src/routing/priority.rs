//! `routing: priority` — the eligible endpoint with the lowest priority number answers.

use crate::model::Profile;

use super::Candidate;

/// Index (in the profile) of the eligible endpoint with the lowest priority.
pub fn pick(profile: &Profile, eligible: &[Candidate]) -> usize {
    eligible
        .iter()
        .min_by_key(|c| profile.endpoints[c.index].priority)
        .map(|c| c.index)
        .expect("route() never calls a method with no eligible endpoint")
}

#[cfg(test)]
mod tests {
    use crate::model::health::Status;
    use crate::model::{Method, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Client, Decision, Query, route};

    fn answer(w: &Lab, want: Want) -> Option<String> {
        let client = Client::from_addr("198.51.100.1".parse().unwrap());
        match route(w.ctx(), 0, Query { want, client: &client }, &mut rng(1)) {
            Decision::Answer { endpoints, .. } => Some(endpoints[0].name.clone()),
            Decision::NoData { .. } => None,
        }
    }

    #[test]
    fn priority_table() {
        use Status::*;
        // statuses of p1 (prio 1), p2 (prio 2), p3 (prio 3); fail_open; expected answer
        let cases: &[([Status; 3], bool, Option<&str>)] = &[
            ([Online, Online, Online], true, Some("p1")),
            ([Checking, Online, Online], true, Some("p1")),
            ([Degraded, Online, Online], true, Some("p2")),
            ([Degraded, Degraded, Checking], true, Some("p3")),
            ([Degraded, Degraded, Degraded], true, Some("p1")),
            ([Degraded, Degraded, Degraded], false, None),
            ([Disabled, Degraded, Degraded], true, Some("p2")),
            ([Disabled, Disabled, Disabled], true, None),
        ];
        for (i, (sts, fail_open, want)) in cases.iter().enumerate() {
            let mut w = Lab::new();
            let p = w.profile("www", Method::Priority);
            // Config order differs from priority order to prove the number decides.
            w.ep(p, "p3", "192.0.2.3");
            w.ep(p, "p1", "192.0.2.1");
            w.ep(p, "p2", "192.0.2.2");
            w.profiles[p].endpoints[0].priority = 3;
            w.profiles[p].endpoints[1].priority = 1;
            w.profiles[p].endpoints[2].priority = 2;
            w.profiles[p].fail_open = *fail_open;
            // Endpoint index == health slot here: p3 is 0, p1 is 1, p2 is 2.
            for (index, st) in [(1usize, sts[0]), (2, sts[1]), (0, sts[2])] {
                w.profiles[p].endpoints[index].enabled = st != Disabled;
            }
            let w = w.finish();
            for (slot, st) in [(1usize, sts[0]), (2, sts[1]), (0, sts[2])] {
                w.health.set(slot, st);
            }
            assert_eq!(answer(&w, Want::A).as_deref(), *want, "case {i}");
        }
    }

    #[test]
    fn family_filters_candidates() {
        let mut w = Lab::new();
        let p = w.profile("www", Method::Priority);
        w.ep(p, "v4", "192.0.2.1");
        w.ep(p, "v6", "2001:db8::1");
        w.ep(p, "host", "backend.example.net.");
        let w = w.finish();
        assert_eq!(answer(&w, Want::A).as_deref(), Some("v4"));
        assert_eq!(answer(&w, Want::Aaaa).as_deref(), Some("v6"));
        assert_eq!(answer(&w, Want::Cname).as_deref(), Some("host"));
        w.health.set(0, Status::Degraded);
        assert_eq!(answer(&w, Want::A).as_deref(), Some("host"));
    }
}
