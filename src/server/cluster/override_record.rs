//! How replicas keep run-time overrides in etcd: one key per endpoint,
//! `<prefix>overrides/<profile>/<endpoint>` (each part percent-escaped, so that a `/` in a
//! name cannot move it), holding `{"drained", "weight", "by", "at"}`; and `View`, what one
//! replica last read of that prefix (`mirror::View`), turned into the `Overrides` every
//! load applies.

use std::collections::BTreeMap;
use std::time::SystemTime;

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use serde::{Deserialize, Serialize};

use super::mirror::{self, Stored};
use crate::config::{Override, Overrides};
use crate::wire::name::WireName;

/// Escaped in each part of a key: the separator, the escape itself, and what would make
/// the key awkward to type or read with `etcdctl`.
const ESCAPED: &AsciiSet = &CONTROLS.add(b'/').add(b'%').add(b' ');

/// The author of a change whose value etcd no longer holds: a key deleted by hand, or
/// while this replica was away.
pub const UNKNOWN_AUTHOR: &str = "etcd";

/// The key of `endpoint` of `profile` (absolute) under `prefix` (`<prefix>overrides/`; the
/// pushed health and the pushed loads lay their keys out the same way).
pub fn key(prefix: &str, profile: &str, endpoint: &str) -> String {
    format!("{prefix}{}/{}", escape(profile), escape(endpoint))
}

/// One part of a key, escaped as `key` escapes it (the load shares use it too).
pub fn escape(part: &str) -> String {
    utf8_percent_encode(part, ESCAPED).to_string()
}

/// The (profile, endpoint) of a key under `prefix`; the profile as `Profile::name` spells
/// it. `Err` says what is wrong with the key.
pub fn parse_key(prefix: &str, key: &str) -> Result<(String, String), String> {
    let rest = key.strip_prefix(prefix).ok_or("outside the prefix")?;
    let (profile, endpoint) = rest
        .split_once('/')
        .filter(|(_, e)| !e.contains('/'))
        .ok_or("the key must be <profile>/<endpoint> after the prefix")?;
    let unescape = |s: &str| {
        percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| "an escaped part is not UTF-8".to_string())
    };
    let (profile, endpoint) = (unescape(profile)?, unescape(endpoint)?);
    if !profile.ends_with('.') {
        return Err(format!("profile {profile:?} must be absolute (end in '.')"));
    }
    if endpoint.is_empty() {
        return Err("the endpoint name is empty".into());
    }
    Ok((WireName::parse(&profile)?.to_string(), endpoint))
}

/// The value of a key: the endpoint's overrides, who set them last and when.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default)]
    pub drained: bool,
    #[serde(default)]
    pub weight: Option<u32>,
    /// Left out when not set, so records without one read as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bias: Option<i8>,
    #[serde(default)]
    pub by: String,
    /// RFC 3339, UTC.
    #[serde(default)]
    pub at: String,
}

impl Record {
    pub fn new(o: Override, by: &str, at: SystemTime) -> Record {
        let at = humantime::format_rfc3339_seconds(at).to_string();
        Record { drained: o.drained, weight: o.weight, bias: o.bias, by: by.to_string(), at }
    }

    pub fn overrides(&self) -> Override {
        Override { drained: self.drained, weight: self.weight, bias: self.bias }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record serializes")
    }

    pub fn decode(value: &[u8]) -> Result<Record, String> {
        serde_json::from_slice(value).map_err(|e| format!("the value is not an override: {e}"))
    }
}

impl Stored for Record {
    fn decode(value: &[u8]) -> Result<Record, String> {
        Record::decode(value)
    }

    fn author(&self) -> Option<&str> {
        Some(self.by.as_str()).filter(|by| !by.is_empty())
    }
}

/// The overrides prefix as one replica last read it: every valid key's target and record.
pub type View = mirror::View<Record>;

impl View {
    /// What the configuration applies. Two keys for one endpoint (spelled differently) is
    /// a hand edit: the later key wins.
    pub fn overrides(&self) -> Overrides {
        let mut out = Overrides::default();
        for ((profile, endpoint), record) in self.records() {
            out.set(profile, endpoint, record.overrides());
        }
        out
    }
}

/// Who set the overrides of each (profile, endpoint).
pub type Authors = BTreeMap<(String, String), String>;

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/s/overrides/";

    #[test]
    fn keys_round_trip_and_escape_what_would_split_them() {
        let cases = [
            ("www.tm.example.test.", "eu-1", "/s/overrides/www.tm.example.test./eu-1"),
            ("_a.tm.example.test.", "x%y/z w", "/s/overrides/_a.tm.example.test./x%25y%2Fz%20w"),
        ];
        for (profile, endpoint, want) in cases {
            let k = key(P, profile, endpoint);
            assert_eq!(k, want);
            assert_eq!(parse_key(P, &k), Ok((profile.to_string(), endpoint.to_string())));
        }
        assert_eq!(
            parse_key(P, "/s/overrides/WWW.tm.example.test./a"),
            Ok(("www.tm.example.test.".into(), "a".into()))
        );
        let bad = [
            ("/t/overrides/w.t./a", "outside the prefix"),
            ("/s/overrides/w.t.", "the key must be <profile>/<endpoint> after the prefix"),
            ("/s/overrides/w.t./a/b", "the key must be <profile>/<endpoint> after the prefix"),
            ("/s/overrides/w.t/a", "profile \"w.t\" must be absolute (end in '.')"),
            ("/s/overrides/w.t./", "the endpoint name is empty"),
            ("/s/overrides/w.t./%FF", "an escaped part is not UTF-8"),
            ("/s/overrides/a%2Fb.t./a", "invalid name \"a/b.t.\": Malformed label: a/b"),
        ];
        for (k, want) in bad {
            assert_eq!(parse_key(P, k), Err(want.to_string()), "{k}");
        }
    }

    #[test]
    fn records_read_what_they_write_and_default_missing_fields() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let r = Record::new(Override { drained: true, weight: Some(3), bias: None }, "alice", at);
        assert_eq!(r.at, "2027-01-15T08:00:00Z");
        assert!(!String::from_utf8(r.encode()).unwrap().contains("bias"), "unset: left out");
        assert_eq!(Record::decode(&r.encode()), Ok(r));
        let bare = Record::decode(br#"{"weight": 5}"#).unwrap();
        assert_eq!(bare.overrides(), Override { drained: false, weight: Some(5), bias: None });
        let biased = Record::new(Override { bias: Some(-20), ..Override::default() }, "bob", at);
        assert_eq!(Record::decode(&biased.encode()).unwrap().overrides().bias, Some(-20));
        assert!(
            Record::decode(b"drained").unwrap_err().starts_with("the value is not an override")
        );
    }

    #[test]
    fn a_view_follows_puts_and_deletes() {
        let mut v = View::new(P);
        let drained = Record::new(
            Override { drained: true, ..Override::default() },
            "alice",
            SystemTime::now(),
        );
        let k = key(P, "w.t.", "a");
        v.put(&k, &drained.encode()).unwrap();
        v.put(&key(P, "w.t.", "b"), &Record::default().encode()).unwrap();
        let mut want = Overrides::default();
        want.set("w.t.", "a", Override { drained: true, ..Override::default() });
        assert_eq!(v.overrides(), want, "an empty record is no override");
        assert_eq!(v.authors()[&("w.t.".to_string(), "a".to_string())], "alice");
        // A bad value takes the key out.
        assert!(v.put(&k, b"{").is_err());
        assert_eq!(v.overrides(), Overrides::default());
        v.put(&k, &drained.encode()).unwrap();
        v.delete(&k);
        assert_eq!(v.overrides(), Overrides::default());
    }
}
