//! How replicas keep pushed health in etcd: one key per endpoint,
//! `<prefix>health_pushed/<profile>/<endpoint>` (escaped as the overrides' keys are), holding the
//! push, `{"healthy", "reason", "by", "at", "ttl"}` with `at` the pushing replica's wall
//! clock (RFC 3339, UTC); or, for the moment before a clear deletes the key,
//! `{"cleared": true, "by", "at"}`, so that every replica learns who cleared it. `View` is
//! what one replica last read of that prefix (`mirror::View`), and `steps` what it must do
//! to the pushes it applied to hold the view's.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

pub use super::mirror::Target;
use super::mirror::{self, Stored};
use super::override_record::Authors;
use crate::probe::PushedHealth;
use crate::probe::pushed::{MAX_TEXT, MAX_TTL, MIN_TTL, expiry};

/// The largest value read: a record with `reason` and `by` at `MAX_TEXT` bytes each, every
/// byte escaped as JSON's six-character `\uXXXX`, and room for the rest.
pub const MAX_VALUE: usize = 2 * 6 * MAX_TEXT + 512;

/// A push as stored: what it says, when and by whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    pub healthy: bool,
    pub reason: String,
    pub by: String,
    pub at: SystemTime,
    pub ttl: Duration,
}

impl Push {
    pub fn of(p: &PushedHealth) -> Push {
        let (reason, by) = (p.reason.clone(), p.by.clone());
        Push { healthy: p.healthy, reason, by, at: p.at_wall, ttl: p.ttl }
    }

    /// The push as this replica applies it at `now` (`now_wall` on its wall clock): live
    /// for what the wall clocks leave of its ttl (`pushed::expiry`).
    pub fn applied(&self, now: Instant, now_wall: SystemTime) -> PushedHealth {
        PushedHealth {
            healthy: self.healthy,
            reason: self.reason.clone(),
            by: self.by.clone(),
            at_wall: self.at,
            ttl: self.ttl,
            expires: expiry(self.at, self.ttl, now, now_wall),
        }
    }
}

/// The value of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Push(Push),
    /// The push was cleared by `by`; the key is deleted next.
    Cleared {
        by: String,
    },
}

/// A record as JSON.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Raw {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    healthy: Option<bool>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    cleared: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default)]
    by: String,
    /// RFC 3339, UTC, to the millisecond.
    #[serde(default)]
    at: String,
    /// As the API takes it: `5m`, `1h 30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttl: Option<String>,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let raw = match self {
            Record::Push(p) => Raw {
                healthy: Some(p.healthy),
                reason: Some(p.reason.clone()),
                by: p.by.clone(),
                at: humantime::format_rfc3339_millis(p.at).to_string(),
                ttl: Some(humantime::format_duration(p.ttl).to_string()),
                ..Raw::default()
            },
            Record::Cleared { by } => Raw {
                cleared: true,
                by: by.clone(),
                at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                ..Raw::default()
            },
        };
        serde_json::to_vec(&raw).expect("a record serializes")
    }

    /// Reads a value, at most `MAX_VALUE` bytes, with the bounds the admin API puts on a
    /// push. `Err` says what is wrong with it.
    pub fn decode(value: &[u8]) -> Result<Record, String> {
        if value.len() > MAX_VALUE {
            return Err(format!("the value is {} bytes, more than {MAX_VALUE}", value.len()));
        }
        let raw: Raw = serde_json::from_slice(value)
            .map_err(|e| format!("the value is not a pushed health: {e}"))?;
        for (key, text) in [("reason", raw.reason.as_deref()), ("by", Some(raw.by.as_str()))] {
            if text.is_some_and(|t| t.len() > MAX_TEXT) {
                return Err(format!("{key} is longer than {MAX_TEXT} bytes"));
            }
        }
        match (raw.healthy, raw.cleared) {
            (Some(_), true) => {
                Err("a value is a push (healthy) or a clear (cleared), not both".into())
            }
            (None, true) => Ok(Record::Cleared { by: raw.by }),
            (None, false) => Err("missing field `healthy`".into()),
            (Some(healthy), false) => {
                let at = humantime::parse_rfc3339(&raw.at)
                    .map_err(|e| format!("at {:?} is not an RFC 3339 UTC time: {e}", raw.at))?;
                let ttl = raw.ttl.ok_or("missing field `ttl`")?;
                let ttl = humantime::parse_duration(ttl.trim())
                    .ok()
                    .filter(|t| (MIN_TTL..=MAX_TTL).contains(t))
                    .ok_or_else(|| format!("ttl {ttl:?} is not a duration from 1s to 7d"))?;
                let reason = raw.reason.unwrap_or_default();
                Ok(Record::Push(Push { healthy, reason, by: raw.by, at, ttl }))
            }
        }
    }
}

impl Stored for Record {
    fn decode(value: &[u8]) -> Result<Record, String> {
        Record::decode(value)
    }

    /// Only a clear names who made it: a push's `by` is part of the push.
    fn author(&self) -> Option<&str> {
        match self {
            Record::Cleared { by } if !by.is_empty() => Some(by),
            _ => None,
        }
    }
}

/// The pushed-health prefix as one replica last read it: every valid key's target and
/// record.
pub type View = mirror::View<Record>;

impl View {
    /// The pushes that apply. Two keys for one endpoint (spelled differently) is a hand
    /// edit: the later key wins.
    pub fn pushes(&self) -> BTreeMap<Target, Push> {
        let pushes = self.records().filter_map(|(t, r)| match r {
            Record::Push(p) => Some((t.clone(), p.clone())),
            Record::Cleared { .. } => None,
        });
        pushes.collect()
    }

    /// Who cleared each endpoint whose clear is still in etcd.
    pub fn clearers(&self) -> Authors {
        self.authors()
    }
}

/// One change to the pushes a replica applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Set(Target, Push),
    /// Cleared by this author (`UNKNOWN_AUTHOR` when etcd no longer says).
    Clear(Target, String),
}

/// What turns the pushes `applied` into `next`: the new and changed pushes, then the ones
/// gone, each cleared by its author in `clearers`.
pub fn steps(
    applied: &BTreeMap<Target, Push>,
    next: &BTreeMap<Target, Push>,
    clearers: &Authors,
) -> Vec<Step> {
    let set = next.iter().filter(|(t, p)| applied.get(*t) != Some(p));
    let mut out: Vec<Step> = set.map(|(t, p)| Step::Set(t.clone(), p.clone())).collect();
    for target in applied.keys().filter(|t| !next.contains_key(*t)) {
        let by =
            clearers.get(target).map_or(super::override_record::UNKNOWN_AUTHOR, String::as_str);
        out.push(Step::Clear(target.clone(), by.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::cluster::override_record::key;

    const P: &str = "/s/health_pushed/";

    fn push(healthy: bool, by: &str) -> Push {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_250);
        Push {
            healthy,
            reason: "maintenance".into(),
            by: by.into(),
            at,
            ttl: Duration::from_secs(300),
        }
    }

    #[test]
    fn records_read_what_they_write() {
        let p = push(false, "alice");
        let written = Record::Push(p.clone()).encode();
        let text = String::from_utf8(written.clone()).unwrap();
        assert_eq!(
            text,
            r#"{"healthy":false,"reason":"maintenance","by":"alice","at":"2027-01-15T08:00:00.250Z","ttl":"5m"}"#
        );
        assert_eq!(Record::decode(&written), Ok(Record::Push(p)));
        let cleared = Record::Cleared { by: "bob".into() }.encode();
        let text = String::from_utf8(cleared.clone()).unwrap();
        assert!(text.starts_with(r#"{"cleared":true,"by":"bob","at":""#), "{text}");
        assert_eq!(Record::decode(&cleared), Ok(Record::Cleared { by: "bob".into() }));
    }

    #[test]
    fn values_outside_the_bounds_are_refused() {
        let at = r#""at":"2027-01-15T08:00:00Z""#;
        let ok = |s: &str| Record::decode(s.as_bytes());
        let push = ok(&format!(r#"{{"healthy":true,{at},"ttl":"1h 30m","colour":1}}"#)).unwrap();
        let Record::Push(p) = push else { panic!("{push:?}") };
        assert_eq!((p.ttl, p.reason.as_str(), p.by.as_str()), (Duration::from_secs(5400), "", ""));
        let long = "x".repeat(MAX_TEXT + 1);
        let escaped = "\\u0041".repeat(MAX_TEXT);
        let cases = [
            (format!(r#"{{{at},"ttl":"5m"}}"#), "missing field `healthy`"),
            (format!(r#"{{"healthy":true,{at}}}"#), "missing field `ttl`"),
            (format!(r#"{{"healthy":true,{at},"ttl":"8d"}}"#), "from 1s to 7d"),
            (format!(r#"{{"healthy":true,{at},"ttl":"500ms"}}"#), "from 1s to 7d"),
            (format!(r#"{{"healthy":true,{at},"ttl":"soon"}}"#), "from 1s to 7d"),
            (r#"{"healthy":true,"at":"yesterday","ttl":"5m"}"#.to_string(), "RFC 3339"),
            (r#"{"healthy":true,"ttl":"5m"}"#.to_string(), "RFC 3339"),
            (format!(r#"{{"healthy":true,"cleared":true,{at}}}"#), "not both"),
            (format!(r#"{{"healthy":"yes",{at},"ttl":"5m"}}"#), "not a pushed health"),
            (
                format!(r#"{{"healthy":true,{at},"ttl":"5m","reason":"{long}"}}"#),
                "reason is longer",
            ),
            (format!(r#"{{"cleared":true,"by":"{long}"}}"#), "by is longer"),
            ("[1, 2]".to_string(), "not a pushed health"),
            ("{".to_string(), "not a pushed health"),
            (" ".repeat(MAX_VALUE + 1), "more than"),
        ];
        for (value, want) in cases {
            let got = ok(&value).unwrap_err();
            assert!(got.contains(want), "{value:.80}: {got}");
        }
        // Escaped to the limit, a reason and a by at MAX_TEXT bytes still fit.
        let value =
            format!(r#"{{"healthy":true,{at},"ttl":"5m","reason":"{escaped}","by":"{escaped}"}}"#);
        assert!(value.len() <= MAX_VALUE);
        assert!(ok(&value).is_ok());
    }

    #[test]
    fn a_stored_push_applies_for_what_is_left_of_it() {
        let p = push(true, "alice");
        let now = Instant::now();
        let applied = p.applied(now, p.at + Duration::from_secs(100));
        assert_eq!(applied.expires, now + Duration::from_secs(200));
        assert_eq!((applied.at_wall, applied.ttl, applied.healthy), (p.at, p.ttl, true));
        assert!(!p.applied(now, p.at + Duration::from_secs(300)).is_live(now), "expired");
    }

    #[test]
    fn a_view_follows_puts_and_deletes_and_says_what_changes() {
        let mut v = View::new(P);
        let (a, b) = (key(P, "w.t.", "a"), key(P, "w.t.", "b"));
        let target = |e: &str| ("w.t.".to_string(), e.to_string());
        v.put(&a, &Record::Push(push(false, "alice")).encode()).unwrap();
        v.put(&b, &Record::Push(push(true, "bob")).encode()).unwrap();
        assert!(
            v.put("/s/health_pushed/not-absolute/a", &Record::Push(push(true, "x")).encode())
                .is_err()
        );
        assert!(v.put(&key(P, "w.t.", "c"), b"{").is_err());
        let first = v.pushes();
        let none = BTreeMap::new();
        let want = vec![
            Step::Set(target("a"), push(false, "alice")),
            Step::Set(target("b"), push(true, "bob")),
        ];
        assert_eq!(steps(&none, &first, &Authors::new()), want);
        assert!(steps(&first, &first, &Authors::new()).is_empty(), "nothing changed");

        // a cleared by carol (the clear still in etcd), b deleted by hand.
        v.put(&a, &Record::Cleared { by: "carol".into() }.encode()).unwrap();
        v.delete(&b);
        let next = v.pushes();
        assert!(next.is_empty());
        let want =
            vec![Step::Clear(target("a"), "carol".into()), Step::Clear(target("b"), "etcd".into())];
        assert_eq!(steps(&first, &next, &v.clearers()), want);

        // A new push replaces the one before.
        v.put(&a, &Record::Push(push(true, "dave")).encode()).unwrap();
        assert_eq!(
            steps(&first, &v.pushes(), &Authors::new()),
            [Step::Set(target("a"), push(true, "dave")), Step::Clear(target("b"), "etcd".into())]
        );
        // A bad value takes the key out.
        assert!(v.put(&a, b"[]").is_err());
        assert!(v.pushes().is_empty() && v.clearers().is_empty());
    }
}
