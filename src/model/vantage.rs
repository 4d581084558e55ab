//! One probe's health as several replicas see it: each replica is a vantage point with its
//! own view (`View`), and the quorum rule of `cluster.health.quorum` turns the fresh views
//! into the one status every replica serves (`verdict`).
//!
//! Pure: the views come in, a status and the reason operators read come out. Which views
//! are fresh (their replica's lease is alive) is decided by whoever collects them.

use std::time::SystemTime;

use super::cluster::Quorum;
use super::health::Status;

/// One vantage point's view of a probe: its own probe's status, why, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The replica's `cluster.node`.
    pub node: String,
    /// `online`, `checking` or `degraded`.
    pub status: Status,
    /// The reason of the view's last change (`probe succeeded`, `HTTP 503, expected 200-299`).
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

/// The statuses a view may have: a probe's own statuses.
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

    #[test]
    fn view_statuses() {
        assert_eq!(view_status("online"), Some(Online));
        assert_eq!(view_status("checking"), Some(Checking));
        assert_eq!(view_status("degraded"), Some(Degraded));
        assert_eq!(view_status("stopped"), None);
        assert_eq!(view_status("Online"), None);
    }
}
