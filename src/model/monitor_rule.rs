//! How an endpoint's several monitors make one status: the rule (`all`, `any`,
//! `at_least: N`) over each monitor's result, with a reason naming the failing monitors.
//!
//! Pure, so every combination is a table test. A monitor still `checking` (no result yet)
//! counts neither way: the endpoint stays `checking` until the results there are decide
//! the rule whatever the others turn out to be.

use std::fmt::Write;

use super::health::Status;

/// `monitor_rule`: how many of an endpoint's monitors must be up for it to be online.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MonitorRule {
    /// Every monitor.
    #[default]
    All,
    /// One monitor.
    Any,
    /// At least this many monitors (1..=the number of monitors).
    AtLeast(u16),
}

impl MonitorRule {
    /// How many monitors of `n` must be up.
    pub fn needed(self, n: usize) -> usize {
        match self {
            MonitorRule::All => n,
            MonitorRule::Any => n.min(1),
            MonitorRule::AtLeast(k) => usize::from(k),
        }
    }
}

impl std::fmt::Display for MonitorRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MonitorRule::All => f.write_str("all"),
            MonitorRule::Any => f.write_str("any"),
            MonitorRule::AtLeast(n) => write!(f, "at_least {n}"),
        }
    }
}

/// One monitor's current result, as the rule reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorResult<'a> {
    pub name: &'a str,
    /// `Online` is up, `Checking` is not known yet, anything else is down.
    pub status: Status,
    /// Why it has its status (shown for failing monitors).
    pub reason: &'a str,
}

/// The endpoint's status and its reason under `rule`. A single monitor under any rule
/// passes its own reason through, so one monitor reads as it always did.
pub fn combine(rule: MonitorRule, results: &[MonitorResult<'_>]) -> (Status, String) {
    let n = results.len();
    let up = results.iter().filter(|r| r.status == Status::Online).count();
    let unknown = results.iter().filter(|r| r.status == Status::Checking).count();
    let down = n - up - unknown;
    let needed = rule.needed(n);
    let status = if up >= needed {
        Status::Online
    } else if up + unknown < needed {
        Status::Degraded
    } else {
        Status::Checking
    };
    if let [only] = results {
        return (status, only.reason.to_string());
    }
    let mut reason = String::new();
    if down > 0 {
        let _ = write!(reason, "{down} of {n} monitors failing: ");
        let failing =
            results.iter().filter(|r| !matches!(r.status, Status::Online | Status::Checking));
        for (i, r) in failing.enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(reason, "{sep}{} ({})", r.name, r.reason);
        }
    } else if unknown == 0 {
        let _ = write!(reason, "{n} of {n} monitors up");
    }
    if unknown > 0 {
        let sep = if reason.is_empty() { "" } else { "; " };
        let _ = write!(reason, "{sep}waiting for ");
        let waiting = results.iter().filter(|r| r.status == Status::Checking);
        for (i, r) in waiting.enumerate() {
            let _ = write!(reason, "{}{}", if i == 0 { "" } else { ", " }, r.name);
        }
    }
    let _ = write!(reason, "; rule {rule}");
    (status, reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::{Checking as C, Degraded as D, Online as O};

    fn results(statuses: &[Status]) -> Vec<MonitorResult<'static>> {
        const NAMES: [&str; 3] = ["web", "db", "ops"];
        const REASONS: [&str; 3] =
            ["HTTP 503, expected 200-299", "connection refused", "pushed down"];
        statuses
            .iter()
            .enumerate()
            .map(|(i, s)| MonitorResult {
                name: NAMES[i],
                status: *s,
                reason: if *s == O { "probe succeeded" } else { REASONS[i] },
            })
            .collect()
    }

    /// Every combination of three monitors up, down and checking, under every rule: the
    /// status is the one the rule's count decides, independently of which monitors.
    #[test]
    fn every_rule_over_every_combination_of_three() {
        let rules = [
            MonitorRule::All,
            MonitorRule::Any,
            MonitorRule::AtLeast(1),
            MonitorRule::AtLeast(2),
            MonitorRule::AtLeast(3),
        ];
        for code in 0..27 {
            let statuses: Vec<Status> =
                (0..3).map(|i| [O, D, C][(code / 3usize.pow(i)) % 3]).collect();
            let up = statuses.iter().filter(|s| **s == O).count();
            let known_down = statuses.iter().filter(|s| **s == D).count();
            for rule in rules {
                let need = match rule {
                    MonitorRule::All => 3,
                    MonitorRule::Any => 1,
                    MonitorRule::AtLeast(k) => usize::from(k),
                };
                // Online once enough are up; degraded once too many are down for the rest
                // to make it; checking in between.
                let want = if up >= need {
                    O
                } else if 3 - known_down < need {
                    D
                } else {
                    C
                };
                let (got, reason) = combine(rule, &results(&statuses));
                assert_eq!(got, want, "rule {rule}, monitors {statuses:?}: {reason}");
                assert!(reason.ends_with(&format!("; rule {rule}")), "{reason}");
            }
        }
    }

    #[test]
    fn reasons_name_the_failing_and_waiting_monitors() {
        let cases: &[(MonitorRule, &[Status], Status, &str)] = &[
            (
                MonitorRule::All,
                &[D, D, O],
                D,
                "2 of 3 monitors failing: web (HTTP 503, expected 200-299), db (connection refused); rule all",
            ),
            (
                MonitorRule::Any,
                &[D, O, D],
                O,
                "2 of 3 monitors failing: web (HTTP 503, expected 200-299), ops (pushed down); rule any",
            ),
            (MonitorRule::All, &[O, O, O], O, "3 of 3 monitors up; rule all"),
            (MonitorRule::All, &[O, C, C], C, "waiting for db, ops; rule all"),
            (
                MonitorRule::AtLeast(2),
                &[D, C, O],
                C,
                "1 of 3 monitors failing: web (HTTP 503, expected 200-299); waiting for db; rule at_least 2",
            ),
            (
                MonitorRule::AtLeast(2),
                &[D, D, O],
                D,
                "2 of 3 monitors failing: web (HTTP 503, expected 200-299), db (connection refused); rule at_least 2",
            ),
        ];
        for (rule, statuses, want, reason) in cases {
            assert_eq!(
                combine(*rule, &results(statuses)),
                (*want, reason.to_string()),
                "{rule} {statuses:?}"
            );
        }
    }

    /// One monitor reads as it did before there could be several: its own reason.
    #[test]
    fn a_single_monitor_keeps_its_reason() {
        for (s, reason) in [
            (O, "probe succeeded"),
            (D, "HTTP 503, expected 200-299"),
            (C, "HTTP 503, expected 200-299"),
        ] {
            let one = [MonitorResult { name: "http", status: s, reason }];
            assert_eq!(combine(MonitorRule::All, &one), (s, reason.to_string()));
        }
    }
}
