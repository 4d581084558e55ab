//! One endpoint's health as several replicas see it: each replica is a vantage point with
//! its own view (`View`: its monitors' results combined by the endpoint's rule), and the
//! quorum rule of `cluster.health.quorum` turns the fresh views into the one status every
//! replica serves (`verdict`).
//!
//! Pure: the views come in, a status and the reason operators read come out. Which views
//! are fresh (their replica's lease is alive) is decided by whoever collects them.

use std::time::SystemTime;

use super::cluster::Quorum;
use super::health::Status;

/// One vantage point's view of an endpoint: the rule over its own monitors' results, why,
/// and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The replica's `cluster.node`.
    pub node: String,
    /// `online`, `checking` or `degraded`.
    pub status: Status,
    /// The reason of the view's last change (`probe succeeded`, `HTTP 503, expected 200-299`,
    /// `1 of 2 monitors failing: …; rule all`).
    pub reason: String,
    /// When the view last changed.
    pub at: SystemTime,
}

/// The status the fresh views decide, with the reason to log and show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub status: Status,
    pub reason: String,
}

/// The statuses a view may have: those the rule gives.
pub fn view_status(text: &str) -> Option<Status> {
    match text {
        "online" => Some(Status::Online),
        "checking" => Some(Status::Checking),
        "degraded" => Some(Status::Degraded),
        _ => None,
    }
}

/// The verdict of `views` (every fresh view, this replica's own included) under `quorum`:
/// `degraded` when enough of them fail, else `online` when any is online, else `checking`.
pub fn verdict(quorum: Quorum, views: &[View]) -> Verdict {
    let mut sorted: Vec<&View> = views.iter().collect();
    sorted.sort_by(|a, b| a.node.cmp(&b.node));
    let fresh = sorted.len();
    let failing: Vec<&View> =
        sorted.iter().copied().filter(|v| v.status == Status::Degraded).collect();
    let online = sorted.iter().filter(|v| v.status == Status::Online).count();
    let listed = || {
        let parts: Vec<String> =
            failing.iter().map(|v| format!("{}: {}", v.node, v.reason)).collect();
        parts.join("; ")
    };
    let points = |n: usize| if n == 1 { "vantage point" } else { "vantage points" };
    let (f, n) = (failing.len(), fresh);
    if quorum.fails(f, n) {
        let reason = format!("{f} of {n} {} failing (quorum {quorum}): {}", points(n), listed());
        return Verdict { status: Status::Degraded, reason };
    }
    let below = (f > 0).then(|| {
        format!("{f} of {n} {} failing, not enough for quorum {quorum}: {}", points(n), listed())
    });
    if online > 0 {
        let reason = below.unwrap_or_else(|| format!("{online} of {n} {} online", points(n)));
        return Verdict { status: Status::Online, reason };
    }
    let reason = match below {
        Some(b) => format!("no vantage point online yet; {b}"),
        None => "no vantage point online yet".to_string(),
    };
    Verdict { status: Status::Checking, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    fn views(list: &[(&str, Status, &str)]) -> Vec<View> {
        list.iter()
            .map(|(node, status, reason)| View {
                node: node.to_string(),
                status: *status,
                reason: reason.to_string(),
                at: SystemTime::UNIX_EPOCH,
            })
            .collect()
    }

    const OK: &str = "probe succeeded";
    const E503: &str = "HTTP 503, expected 200-299";

    #[test]
    fn verdict_table() {
        let m = Quorum::Majority;
        // (quorum, views, status, reason)
        type Case<'a> = (Quorum, Vec<(&'a str, Status, &'a str)>, Status, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (
                m,
                vec![("node-2", Online, OK), ("node-0", Degraded, E503), ("node-1", Online, OK)],
                Online,
                "1 of 3 vantage points failing, not enough for quorum majority: node-0: HTTP 503, expected 200-299",
            ),
            (
                m,
                vec![
                    ("node-2", Degraded, "connection refused"),
                    ("node-0", Degraded, E503),
                    ("node-1", Online, OK),
                ],
                Degraded,
                "2 of 3 vantage points failing (quorum majority): node-0: HTTP 503, expected 200-299; node-2: connection refused",
            ),
            (m, vec![("a", Online, OK), ("b", Online, OK)], Online, "2 of 2 vantage points online"),
            (
                m,
                vec![("a", Online, OK), ("b", Checking, "")],
                Online,
                "1 of 2 vantage points online",
            ),
            (
                m,
                vec![("a", Checking, ""), ("b", Checking, "")],
                Checking,
                "no vantage point online yet",
            ),
            (
                m,
                vec![("a", Checking, ""), ("b", Checking, ""), ("c", Degraded, E503)],
                Checking,
                "no vantage point online yet; 1 of 3 vantage points failing, not enough for quorum majority: c: HTTP 503, expected 200-299",
            ),
            (
                Quorum::Any,
                vec![("a", Online, OK), ("b", Degraded, E503), ("c", Online, OK)],
                Degraded,
                "1 of 3 vantage points failing (quorum any): b: HTTP 503, expected 200-299",
            ),
            (
                Quorum::All,
                vec![("a", Online, OK), ("b", Degraded, E503), ("c", Degraded, E503)],
                Online,
                "2 of 3 vantage points failing, not enough for quorum all: b: HTTP 503, expected 200-299; c: HTTP 503, expected 200-299",
            ),
            (
                Quorum::All,
                vec![("a", Degraded, E503), ("b", Degraded, E503)],
                Degraded,
                "2 of 2 vantage points failing (quorum all): a: HTTP 503, expected 200-299; b: HTTP 503, expected 200-299",
            ),
            // A single view decides alone under every rule.
            (
                Quorum::All,
                vec![("a", Degraded, E503)],
                Degraded,
                "1 of 1 vantage point failing (quorum all): a: HTTP 503, expected 200-299",
            ),
            (
                Quorum::Percent(34),
                vec![("a", Online, OK), ("b", Degraded, E503), ("c", Online, OK)],
                Online,
                "1 of 3 vantage points failing, not enough for quorum 34%: b: HTTP 503, expected 200-299",
            ),
            (
                Quorum::Percent(33),
                vec![("a", Online, OK), ("b", Degraded, E503), ("c", Online, OK)],
                Degraded,
                "1 of 3 vantage points failing (quorum 33%): b: HTTP 503, expected 200-299",
            ),
            (m, vec![], Checking, "no vantage point online yet"),
        ];
        for (i, (q, list, status, reason)) in cases.into_iter().enumerate() {
            let v = verdict(q, &views(&list));
            assert_eq!((v.status, v.reason.as_str()), (status, reason), "case {i}");
        }
    }

    /// Each replica combines its own monitors by the endpoint's rule into its view, and the
    /// quorum is taken over those views. With A seeing `m1` failing, B `m2` and C neither,
    /// rule `all` makes A's and B's views failing: a majority, whereas each monitor alone
    /// fails on one replica of three only.
    #[test]
    fn the_rule_on_each_replica_then_the_quorum() {
        use crate::model::MonitorRule::{self, All, Any, AtLeast};
        use crate::model::monitor_rule::{MonitorResult, combine};
        let abc: [[Status; 2]; 3] = [[Degraded, Online], [Online, Degraded], [Online, Online]];
        let ab_both: [[Status; 2]; 3] =
            [[Degraded, Degraded], [Degraded, Degraded], [Online, Online]];
        let a_only: [[Status; 2]; 3] = [[Degraded, Online], [Online, Online], [Online, Online]];
        // (rule, quorum, each replica's two monitors, verdict)
        let cases: [(MonitorRule, Quorum, [[Status; 2]; 3], Status); 8] = [
            (All, Quorum::Majority, abc, Degraded),
            (AtLeast(2), Quorum::Majority, abc, Degraded),
            (Any, Quorum::Majority, abc, Online),
            (AtLeast(1), Quorum::Majority, abc, Online),
            (All, Quorum::All, abc, Online),
            (Any, Quorum::Majority, ab_both, Degraded),
            (All, Quorum::Majority, a_only, Online),
            (All, Quorum::Any, a_only, Degraded),
        ];
        for (i, (rule, quorum, replicas, want)) in cases.into_iter().enumerate() {
            let views: Vec<View> = replicas
                .iter()
                .enumerate()
                .map(|(n, monitors)| {
                    let results = [
                        MonitorResult { name: "m1", status: monitors[0], reason: "m1 says so" },
                        MonitorResult { name: "m2", status: monitors[1], reason: "m2 says so" },
                    ];
                    let (status, reason) = combine(rule, &results);
                    let node = ["a", "b", "c"][n].to_string();
                    View { node, status, reason, at: SystemTime::UNIX_EPOCH }
                })
                .collect();
            let v = verdict(quorum, &views);
            assert_eq!(v.status, want, "case {i}: {}", v.reason);
        }
        let all_abc = (0..3).map(|n| {
            let m = abc[n];
            let results = [
                MonitorResult { name: "m1", status: m[0], reason: "HTTP 503, expected 200-299" },
                MonitorResult { name: "m2", status: m[1], reason: "connection refused" },
            ];
            let (status, reason) = combine(All, &results);
            View { node: ["a", "b", "c"][n].into(), status, reason, at: SystemTime::UNIX_EPOCH }
        });
        let v = verdict(Quorum::Majority, &all_abc.collect::<Vec<_>>());
        assert_eq!(
            v.reason,
            "2 of 3 vantage points failing (quorum majority): \
             a: 1 of 2 monitors failing: m1 (HTTP 503, expected 200-299); rule all; \
             b: 1 of 2 monitors failing: m2 (connection refused); rule all"
        );
    }

    #[test]
    fn view_statuses() {
        assert_eq!(view_status("online"), Some(Online));
        assert_eq!(view_status("checking"), Some(Checking));
        assert_eq!(view_status("degraded"), Some(Degraded));
        assert_eq!(view_status("stopped"), None);
        assert_eq!(view_status("Online"), None);
    }
}
