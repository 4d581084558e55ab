//! Traffic-dial arithmetic for `routing: groups` (Alibaba Cloud Global Accelerator's
//! rules in `docs/routing.md`, "groups"): how much of the traffic each endpoint group takes, given the
//! client's group order, which groups are healthy and each group's dial.

use super::Scratch;

/// Groups tried after an unhealthy first group (dials ignored).
pub const FAILOVER_TRIES: usize = 3;

/// Where the traffic goes for one client order.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// (group, share) with shares summing to 1, in client order.
    Shares(Scratch<(usize, f64)>),
    /// The first group is unhealthy: this later group takes everything.
    Failover(usize),
    /// No group tried is healthy: fail open to the first group.
    FailOpen(usize),
}

/// `order`: group indices, closest first. `healthy[g]`, `dial[g]` (percent) per group.
pub fn plan(order: &[usize], healthy: &[bool], dial: &[u8]) -> Plan {
    let Some(&first) = order.first() else {
        return Plan::Shares(Scratch::take());
    };
    if !healthy[first] {
        return order[1..]
            .iter()
            .take(FAILOVER_TRIES)
            .find(|&&g| healthy[g])
            .map_or(Plan::FailOpen(first), |&g| Plan::Failover(g));
    }
    let live = || order.iter().copied().filter(|&g| healthy[g]);
    let dialled = live().filter(|&g| dial[g] > 0).count();
    if dialled == 0 {
        return Plan::Shares(Scratch::collect([(first, 1.0)]));
    }
    let mut left = 1.0;
    let mut shares = Scratch::collect(live().map(|g| {
        let take = left * f64::from(dial[g]) / 100.0;
        left -= take;
        (g, take)
    }));
    // What no group took in the first round is shared evenly among the dialled groups.
    let bonus = left / dialled as f64;
    for (g, share) in shares.iter_mut() {
        if dial[*g] > 0 {
            *share += bonus;
        }
    }
    Plan::Shares(shares)
}

/// Picks the group for a draw `u` in [0, 1) from cumulative shares.
pub fn draw(shares: &[(usize, f64)], u: f64) -> Option<usize> {
    let mut acc = 0.0;
    let mut last = None;
    for &(g, share) in shares {
        if share <= 0.0 {
            continue;
        }
        acc += share;
        last = Some(g);
        if u < acc {
            return Some(g);
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares_of(dials: &[u8], healthy: &[bool]) -> Vec<f64> {
        let order: Vec<usize> = (0..dials.len()).collect();
        match plan(&order, healthy, dials) {
            Plan::Shares(s) => {
                let mut out = vec![0.0; dials.len()];
                for &(g, sh) in s.iter() {
                    out[g] = sh;
                }
                out
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn seed_examples() {
        // (dials, healthy, expected shares) — the shares table of `docs/routing.md` and the Alibaba Cloud GA examples.
        let cases: &[(&[u8], &[bool], &[f64])] = &[
            (&[100, 100], &[true, true], &[1.0, 0.0]),
            (&[50, 100], &[true, true], &[0.5, 0.5]),
            (&[30, 100], &[true, true], &[0.3, 0.7]),
            (&[50, 50], &[true, true], &[0.625, 0.375]),
            (&[1, 100], &[true, true], &[0.01, 0.99]),
            (&[0, 100], &[true, true], &[0.0, 1.0]),
            (&[0, 0], &[true, true], &[1.0, 0.0]),
            (
                &[50, 50, 50],
                &[true, true, true],
                &[0.5 + 0.125 / 3.0, 0.25 + 0.125 / 3.0, 0.125 + 0.125 / 3.0],
            ),
            (&[50, 50, 50], &[true, false, true], &[0.625, 0.0, 0.375]),
            (&[40], &[true], &[1.0]),
        ];
        for (i, (dials, healthy, want)) in cases.iter().enumerate() {
            let got = shares_of(dials, healthy);
            for (g, (a, b)) in got.iter().zip(want.iter()).enumerate() {
                assert!((a - b).abs() < 1e-9, "case {i} group {g}: {a} vs {b}");
            }
            assert!((got.iter().sum::<f64>() - 1.0).abs() < 1e-9, "case {i} sums to 1");
        }
    }

    #[test]
    fn failover_ignores_dials_and_tries_three() {
        let dials = [100, 0, 50, 100, 100];
        assert_eq!(plan(&[0, 1, 2], &[false, true, true, true, true], &dials), Plan::Failover(1));
        assert_eq!(
            plan(&[0, 1, 2, 3], &[false, false, false, true, true], &dials),
            Plan::Failover(3)
        );
        assert_eq!(
            plan(&[0, 1, 2, 3, 4], &[false, false, false, false, true], &dials),
            Plan::FailOpen(0)
        );
        assert_eq!(plan(&[2, 0], &[false, false, false, false, false], &dials), Plan::FailOpen(2));
    }

    #[test]
    fn order_decides_who_is_first() {
        let dials = [50, 50];
        let Plan::Shares(s) = plan(&[1, 0], &[true, true], &dials) else { panic!() };
        assert_eq!(s.as_slice(), &[(1, 0.625), (0, 0.375)]);
    }

    #[test]
    fn draw_follows_cumulative_shares() {
        let s = [(3, 0.25), (1, 0.0), (2, 0.75)];
        assert_eq!(draw(&s, 0.0), Some(3));
        assert_eq!(draw(&s, 0.2499), Some(3));
        assert_eq!(draw(&s, 0.25), Some(2));
        assert_eq!(draw(&s, 0.99999), Some(2));
        assert_eq!(draw(&[], 0.5), None);
    }
}
