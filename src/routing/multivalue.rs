//! `routing: multivalue` — up to `max_return` eligible endpoints, in rotating order so
//! that clients taking the first record spread over all of them.

use arrayvec::ArrayVec;
use rand::Rng;

use crate::model::{Endpoint, Profile};

use super::{Candidate, MAX_ANSWERS};

pub fn pick<'a, R: Rng + ?Sized>(
    profile: &'a Profile,
    eligible: &[Candidate],
    rng: &mut R,
) -> ArrayVec<&'a Endpoint, MAX_ANSWERS> {
    let n = eligible.len();
    let take = n.min(usize::from(profile.max_return)).min(MAX_ANSWERS);
    let start = rng.random_range(0..n);
    (0..take).map(|k| &profile.endpoints[eligible[(start + k) % n].index]).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::model::health::Status;
    use crate::model::{Method, Want};
    use crate::routing::testkit::*;
    use crate::routing::{Client, Decision, Query, route};

    fn world(n: usize, max_return: u8) -> Lab {
        let mut w = Lab::new();
        let p = w.profile("mv", Method::Multivalue);
        for i in 0..n {
            w.ep(p, &format!("e{i}"), &format!("192.0.2.{}", i + 1));
        }
        w.ep(p, "v6", "2001:db8::1");
        w.profiles[p].max_return = max_return;
        w.finish()
    }

    fn names(w: &Lab, want: Want, r: &mut rand::rngs::SmallRng) -> Vec<String> {
        let client = Client::from_addr("198.51.100.1".parse().unwrap());
        match route(w.ctx(), 0, Query { want, client: &client }, r) {
            Decision::Answer { endpoints, scope } => {
                assert_eq!(scope, 0);
                endpoints.iter().map(|e| e.name.clone()).collect()
            }
            Decision::NoData { .. } => vec![],
        }
    }

    #[test]
    fn count_table() {
        // endpoints (v4), max_return, degraded slots, expected count for A
        let cases: &[(usize, u8, &[usize], usize)] = &[
            (4, 2, &[], 2),
            (4, 10, &[], 4),
            (1, 3, &[], 1),
            (4, 3, &[0, 1], 2),
            (3, 2, &[0, 1, 2], 2), // fail open: degraded ones serve
            (10, 10, &[], 10),
        ];
        for (i, (n, max, down, want)) in cases.iter().enumerate() {
            let w = world(*n, *max);
            for s in *down {
                w.health.set(*s, Status::Degraded);
            }
            let got = names(&w, Want::A, &mut rng(1));
            assert_eq!(got.len(), *want, "case {i}: {got:?}");
            assert!(got.iter().all(|n| n != "v6"));
            if down.len() < *n {
                for s in *down {
                    assert!(!got.contains(&format!("e{s}")), "case {i}: degraded e{s} served");
                }
            }
        }
        assert_eq!(names(&world(3, 2), Want::Aaaa, &mut rng(1)), vec!["v6"]);
    }

    #[test]
    fn rotation_puts_each_endpoint_first_evenly() {
        let w = world(4, 2);
        let mut r = rng(9);
        let mut first: HashMap<String, usize> = HashMap::new();
        for _ in 0..4000 {
            let got = names(&w, Want::A, &mut r);
            *first.entry(got[0].clone()).or_default() += 1;
        }
        assert_eq!(first.len(), 4);
        for (name, c) in first {
            assert!((800..1200).contains(&c), "{name} first {c} times");
        }
    }
}
