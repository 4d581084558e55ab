//! The request bodies of the three webhook formats, made from a `Change`:
//!
//! - `generic`: one JSON object per change (`docs/notifications.md` lists its fields).
//! - `slack`: an incoming webhook's `{"text": ...}`, one line per change.
//! - `alertmanager`: Alertmanager's v2 API body, a JSON array of alerts. An alert fires
//!   while an endpoint does not serve, or while a profile is degraded or down, and is
//!   resolved by sending the same labels with `endsAt`. Changes between two serving
//!   statuses (`checking` to `online`) start or end no alert, and send nothing.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::change::{Change, Subject};
use crate::model::notify::Format;

/// The body of `change` in `format`; `None` when the format has nothing to say about it.
pub fn body(format: Format, change: &Change, server: &str) -> Option<Vec<u8>> {
    let value = match format {
        Format::Generic => generic(change, server),
        Format::Slack => json!({ "text": slack_text(change, server) }),
        Format::Alertmanager => {
            let alerts = alerts(change, server);
            if alerts.is_empty() {
                return None;
            }
            Value::Array(alerts)
        }
    };
    Some(serde_json::to_vec(&value).expect("JSON values serialise"))
}

/// Alertmanager's body that keeps the alerts of `open` firing (each the last change of its
/// subject, to a status that does not serve), with their first `startsAt`; `None` when
/// nothing is open. Alertmanager resolves an alert not sent again within its
/// `resolve_timeout`, so open alerts are sent again every `refresh` of the webhook.
pub fn refresh<'a>(open: impl IntoIterator<Item = &'a Change>, server: &str) -> Option<Vec<u8>> {
    let list: Vec<Value> = open.into_iter().map(|c| alert(c, &c.to, server)).collect();
    if list.is_empty() {
        return None;
    }
    Some(serde_json::to_vec(&Value::Array(list)).expect("JSON values serialise"))
}

pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

fn generic(c: &Change, server: &str) -> Value {
    json!({
        "kind": c.subject.as_str(),
        "profile": c.profile,
        "endpoint": (c.subject == Subject::Endpoint).then_some(&c.endpoint),
        "from": c.from,
        "to": c.to,
        "reason": c.reason,
        "at": rfc3339(c.at),
        "server": server,
        "seq": c.seq,
    })
}

fn slack_text(c: &Change, server: &str) -> String {
    let icon = if c.to_serving { ":white_check_mark:" } else { ":warning:" };
    let what = match c.subject {
        Subject::Endpoint => format!("endpoint {} of {}", c.endpoint, c.profile),
        Subject::Profile => format!("profile {}", c.profile),
    };
    format!("{icon} {what} is {} (was {}): {} [{server}]", c.to, c.from, c.reason)
}

/// The alerts `c` ends and starts: the old status's alert resolved when it had one, the
/// new status's fired when it has one.
fn alerts(c: &Change, server: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let at = rfc3339(c.at);
    if !c.from_serving {
        let mut a = alert(c, &c.from, server);
        a["endsAt"] = json!(at);
        out.push(a);
    }
    if !c.to_serving {
        out.push(alert(c, &c.to, server));
    }
    out
}

/// The alert of `c`'s subject being in `status` (a status that does not serve).
fn alert(c: &Change, status: &str, server: &str) -> Value {
    let (alertname, severity) = match (c.subject, status) {
        (Subject::Endpoint, _) => ("SteerdnsEndpointDown", "warning"),
        (Subject::Profile, "down") => ("SteerdnsProfileDown", "critical"),
        (Subject::Profile, _) => ("SteerdnsProfileDegraded", "warning"),
    };
    let mut labels = json!({ "alertname": alertname, "profile": c.profile, "severity": severity });
    let summary = match c.subject {
        Subject::Endpoint => {
            labels["endpoint"] = json!(c.endpoint);
            format!("endpoint {} of {} is {status}", c.endpoint, c.profile)
        }
        Subject::Profile => format!("profile {} is {status}", c.profile),
    };
    json!({
        "labels": labels,
        "annotations": {
            "summary": summary,
            "description": c.reason,
            "server": server,
        },
        "startsAt": rfc3339(c.at),
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn change(subject: Subject, from: &str, to: &str) -> Change {
        let serving = |s: &str| !matches!(s, "degraded" | "down" | "disabled");
        Change {
            subject,
            profile: "www.example.".into(),
            endpoint: if subject == Subject::Endpoint { "eu".into() } else { String::new() },
            from: from.into(),
            to: to.into(),
            from_serving: serving(from),
            to_serving: serving(to),
            reason: "HTTP 503, expected 200-299".into(),
            at: UNIX_EPOCH + Duration::from_millis(1_764_000_000_250),
            seq: 42,
        }
    }

    fn parse(bytes: Option<Vec<u8>>) -> Value {
        serde_json::from_slice(&bytes.expect("a body")).expect("JSON")
    }

    #[test]
    fn generic_names_every_field() {
        let v =
            parse(body(Format::Generic, &change(Subject::Endpoint, "online", "degraded"), "ns1"));
        let want = json!({
            "kind": "endpoint", "profile": "www.example.", "endpoint": "eu",
            "from": "online", "to": "degraded", "reason": "HTTP 503, expected 200-299",
            "at": "2025-11-24T16:00:00.250Z", "server": "ns1", "seq": 42,
        });
        assert_eq!(v, want);
        let v = parse(body(Format::Generic, &change(Subject::Profile, "up", "degraded"), "ns1"));
        assert_eq!((v["kind"].as_str(), v["endpoint"].is_null()), (Some("profile"), true));
        // RFC 3339, as an independent parser reads it.
        let at = humantime::parse_rfc3339(v["at"].as_str().unwrap()).unwrap();
        assert_eq!(at, UNIX_EPOCH + Duration::from_millis(1_764_000_000_250));
    }

    #[test]
    fn slack_is_one_text_line() {
        let v = parse(body(Format::Slack, &change(Subject::Endpoint, "online", "degraded"), "ns1"));
        let obj = v.as_object().unwrap();
        assert_eq!(obj.keys().collect::<Vec<_>>(), ["text"]);
        let text = v["text"].as_str().unwrap();
        assert!(!text.contains('\n'), "{text}");
        for part in ["endpoint eu of www.example.", "is degraded (was online)", "HTTP 503", "ns1"] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }

    /// The shape of Alertmanager's `postableAlerts`: an array of objects with string maps
    /// `labels` (required) and `annotations`, and date-times `startsAt`, `endsAt`.
    fn check_postable(v: &Value) -> Vec<(String, bool)> {
        let list = v.as_array().expect("an array");
        list.iter()
            .map(|a| {
                let obj = a.as_object().unwrap();
                for k in obj.keys() {
                    assert!(
                        ["labels", "annotations", "startsAt", "endsAt", "generatorURL"]
                            .contains(&k.as_str()),
                        "{k}"
                    );
                }
                for map in ["labels", "annotations"] {
                    assert!(obj[map].as_object().unwrap().values().all(Value::is_string), "{map}");
                }
                for t in ["startsAt", "endsAt"] {
                    if let Some(t) = obj.get(t) {
                        humantime::parse_rfc3339(t.as_str().unwrap()).unwrap();
                    }
                }
                (
                    obj["labels"]["alertname"].as_str().unwrap().to_string(),
                    obj.contains_key("endsAt"),
                )
            })
            .collect()
    }

    #[test]
    fn alertmanager_fires_and_resolves_with_the_same_labels() {
        let fire = parse(body(
            Format::Alertmanager,
            &change(Subject::Endpoint, "online", "degraded"),
            "ns1",
        ));
        assert_eq!(check_postable(&fire), [("SteerdnsEndpointDown".to_string(), false)]);
        let resolve = parse(body(
            Format::Alertmanager,
            &change(Subject::Endpoint, "degraded", "online"),
            "ns2",
        ));
        assert_eq!(check_postable(&resolve), [("SteerdnsEndpointDown".to_string(), true)]);
        assert_eq!(fire[0]["labels"], resolve[0]["labels"], "the server is no label");
        assert_eq!(
            fire[0]["labels"],
            json!({"alertname": "SteerdnsEndpointDown", "profile": "www.example.", "endpoint": "eu", "severity": "warning"})
        );
        assert_eq!(
            body(Format::Alertmanager, &change(Subject::Endpoint, "checking", "online"), "ns1"),
            None
        );
        // degraded -> down: the warning resolves, the critical fires.
        let worse =
            parse(body(Format::Alertmanager, &change(Subject::Profile, "degraded", "down"), "ns1"));
        assert_eq!(
            check_postable(&worse),
            [
                ("SteerdnsProfileDegraded".to_string(), true),
                ("SteerdnsProfileDown".to_string(), false)
            ]
        );
        assert_eq!(worse[1]["labels"]["severity"], "critical");
        assert!(worse[1]["labels"].get("endpoint").is_none());
    }

    #[test]
    fn a_refresh_fires_the_open_alerts_again_as_they_started() {
        let ep = change(Subject::Endpoint, "online", "degraded");
        let profile = change(Subject::Profile, "degraded", "down");
        let again = parse(refresh([&ep, &profile], "ns2"));
        assert_eq!(
            check_postable(&again),
            [
                ("SteerdnsEndpointDown".to_string(), false),
                ("SteerdnsProfileDown".to_string(), false)
            ]
        );
        let first = parse(body(Format::Alertmanager, &ep, "ns1"));
        assert_eq!(
            (&again[0]["labels"], &again[0]["startsAt"]),
            (&first[0]["labels"], &first[0]["startsAt"])
        );
        assert_eq!(refresh([], "ns1"), None);
    }
}
