//! `Raw*` structs mirror the YAML exactly (`docs/configuration.md`) and reject unknown keys.
//! Values that later checks may complain about are `Loc` (located), so every error can name
//! its FILE:LINE:COL. No meaning is given to anything here; `validate` does that.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::diag::{Located, Pos};

// Optional values of the per-profile structs are boxed: with a dozen absent keys per
// endpoint, inline values would make every endpoint several times larger, and large
// configurations slower to load (more to move and to fault in).

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<RawListen>,
    pub admin: Option<RawAdmin>,
    pub cookies: Option<RawCookies>,
    pub rate_limit: Option<Loc<RawRateLimit>>,
    pub log: Option<RawLog>,
    pub zones: Loc<Vec<Loc<RawZone>>>,
    pub geo: Option<RawGeo>,
    pub latency: Option<RawLatency>,
    pub topology: Option<RawTopology>,
    pub profiles: Option<Loc<String>>,
    // Size limits of the files a load reads.
    pub limits: Option<RawLimits>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    pub dns: Option<Loc<Vec<Loc<String>>>>,
    pub admin: Option<Loc<String>>,
    pub udp_threads: Option<Loc<Int>>,
    pub tcp_max_connections: Option<Loc<Int>>,
    pub tcp_per_source: Option<Loc<Int>>,
    pub tcp_idle_timeout: Option<Loc<String>>,
    pub tcp_io_timeout: Option<Loc<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub token_file: Option<Loc<String>>,
    // Exposure and limits of the admin listener.
    pub allow_unauthenticated: Option<Loc<bool>>,
    pub max_connections: Option<Loc<Int>>,
    pub header_read_timeout: Option<Loc<String>>,
}

/// `rate_limit:`: response rate limiting of UDP answers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    pub rate: Option<Loc<Int>>,
    pub burst: Option<Loc<Int>>,
    pub slip: Option<Loc<Int>>,
    pub ipv4_prefix: Option<Loc<Int>>,
    pub ipv6_prefix: Option<Loc<Int>>,
    #[serde(default)]
    pub exempt: Vec<Loc<String>>,
}

/// `log:`: query logs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub dnstap: Option<Loc<RawDnstap>>,
}

/// `log.dnstap:`: query logs in dnstap, to a socket or a file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDnstap {
    pub socket: Option<Loc<String>>,
    pub file: Option<Loc<String>>,
    pub sample: Option<Loc<f64>>,
    pub identity: Option<Loc<String>>,
    pub version: Option<Loc<String>>,
}

/// `cookies:`: the DNS cookie secrets, shared by replicas.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCookies {
    pub secret_file: Loc<String>,
    pub previous_secret_file: Option<Loc<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGeo {
    pub database: Loc<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLatency {
    pub table: Loc<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTopology {
    #[serde(default)]
    pub zones: BTreeMap<String, Vec<Loc<String>>>,
}

/// `limits:`: sizes written with a unit (`16MiB`) or as a number of bytes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub profile_file: Option<Loc<SizeText>>,
    pub profiles_total: Option<Loc<SizeText>>,
    pub zone_file: Option<Loc<SizeText>>,
    pub latency_table: Option<Loc<SizeText>>,
}

/// A size as written, a number or a string; `check::size` gives it meaning.
#[derive(Debug)]
pub struct SizeText(pub String);

impl<'de> Deserialize<'de> for SizeText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SizeText, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SizeText;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a size such as 16MiB")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawZone {
    pub origin: Loc<String>,
    pub ns: Loc<Vec<Loc<String>>>,
    pub soa: Loc<RawSoa>,
    pub ttl: Option<Loc<Int>>,
    #[serde(default)]
    pub records: Vec<Loc<String>>,
    pub file: Option<Loc<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSoa {
    pub mname: Option<Loc<String>>,
    pub rname: Loc<String>,
    pub refresh: Option<Loc<Int>>,
    pub retry: Option<Loc<Int>>,
    pub expire: Option<Loc<Int>>,
    pub minimum: Option<Loc<Int>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    pub name: Loc<String>,
    pub ttl: Option<Box<Loc<Int>>>,
    pub enabled: Option<bool>,
    pub routing: Loc<String>,
    pub fail_open: Option<bool>,
    pub max_return: Option<Box<Loc<Int>>>,
    pub sticky: Option<Box<Loc<bool>>>,
    pub degraded_match: Option<Box<Loc<String>>>,
    pub safety_threshold: Option<Box<Loc<Int>>>,
    pub monitor: Option<Box<Loc<RawMonitor>>>,
    pub endpoints: Option<Box<Loc<Vec<Loc<RawEndpoint>>>>>,
    pub groups: Option<Box<Loc<Vec<Loc<RawGroup>>>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMonitor {
    pub protocol: Option<Box<Loc<String>>>,
    pub port: Option<Box<Loc<Int>>>,
    pub path: Option<Box<Loc<String>>>,
    pub interval: Option<Box<Loc<String>>>,
    pub timeout: Option<Box<Loc<String>>>,
    pub tolerated_failures: Option<Box<Loc<Int>>>,
    pub expected_status: Option<Box<Loc<Vec<Loc<StatusSpec>>>>>,
    pub headers: Option<Box<Loc<BTreeMap<String, String>>>>,
    pub body_contains: Option<Box<Loc<String>>>,
    pub tls_verify: Option<Box<Loc<bool>>>,
}

/// `expected_status` entries may be written as numbers (`200`) or strings (`"200-299"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StatusSpec {
    Code(Int),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEndpoint {
    pub name: Loc<String>,
    pub target: Option<Box<Loc<String>>>,
    pub profile: Option<Box<Loc<String>>>,
    pub enabled: Option<bool>,
    pub always_serve: Option<Box<Loc<bool>>>,
    pub priority: Option<Box<Loc<Int>>>,
    pub weight: Option<Box<Loc<Int>>>,
    pub location: Option<Box<Loc<String>>>,
    pub geo: Option<Box<Loc<Vec<Loc<String>>>>>,
    pub subnets: Option<Box<Loc<Vec<Loc<String>>>>>,
    pub zone: Option<Box<Loc<String>>>,
    pub monitor: Option<Box<Loc<RawMonitor>>>,
    pub min_child_endpoints: Option<Box<Loc<Int>>>,
    pub min_child_endpoints_ipv4: Option<Box<Loc<Int>>>,
    pub min_child_endpoints_ipv6: Option<Box<Loc<Int>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    pub name: Loc<String>,
    pub location: Option<Box<Loc<String>>>,
    pub traffic_dial: Option<Box<Loc<Int>>>,
    pub endpoints: Loc<Vec<Loc<RawEndpoint>>>,
}

/// An integer that reports a readable error ("expected an integer, got \"abc\"") where
/// the YAML has something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int(pub i64);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Int, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Int;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Int, E> {
                i64::try_from(v).map(Int).map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Int, E> {
                v.trim()
                    .parse()
                    .map(Int)
                    .map_err(|_| E::custom(format!("expected an integer, got {v:?}")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Int, E> {
                Err(E::custom(format!("expected an integer, got {v}")))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Int, E> {
                Err(E::custom(format!("expected an integer, got {v}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A value and where it was written (the use site: for an alias, the alias).
///
/// serde-saphyr's own `Spanned` reads the same positions, but through a synthetic map of
/// four entries whose two locations are maps of their own, with a `String` allocated for
/// the first key, and it keeps two full locations (56 bytes) where only line and column
/// are used.
#[derive(Debug)]
pub struct Loc<T> {
    pub value: T,
    pub pos: Pos,
}

impl<T> Located for Loc<T> {
    fn pos(&self) -> Pos {
        self.pos
    }
}

/// serde-saphyr's names for its span protocol (see `serde_saphyr::Spanned`'s
/// `Deserialize`): asking for this newtype makes it present the next node as the struct
/// below, where `referenced` is a struct with `line` and `column`.
pub(super) const SPANNED_NEWTYPE: &str = "__yaml_spanned";
pub(super) const SPANNED_MARKER: &str = "__serde_saphyr_private_spanned";
const SPANNED_FIELDS: &[&str] = &[SPANNED_MARKER, "value", "referenced", "defined"];
const LOCATION_FIELDS: &[&str] = &["line", "column", "span", "source_id"];

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Loc<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Loc<T>, D::Error> {
        d.deserialize_newtype_struct(SPANNED_NEWTYPE, LocVisitor(PhantomData))
    }
}

struct LocVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for LocVisitor<T> {
    type Value = Loc<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML node")
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Loc<T>, D::Error> {
        d.deserialize_struct("Spanned", SPANNED_FIELDS, self)
    }

    /// Reads `value` and `referenced`, in the order serde-saphyr gives them, and leaves
    /// `defined` unread.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loc<T>, A::Error> {
        // Without the marker this is not serde-saphyr's span protocol (e.g. a value
        // buffered for an untagged enum): there is no position to read.
        if map.next_key::<Key>()? != Some(Key::Marker) {
            return Err(de::Error::custom("internal: a located value read without positions"));
        }
        map.next_value::<IgnoredAny>()?;
        let mut value = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Value => value = Some(map.next_value()?),
                Key::Referenced => {
                    let pos = map.next_value_seed(PosSeed)?;
                    let value = value.ok_or_else(|| de::Error::missing_field("value"))?;
                    return Ok(Loc { value, pos });
                }
                Key::Marker | Key::Line | Key::Column | Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Err(de::Error::missing_field("referenced"))
    }
}

/// The keys of the span protocol, read without allocating.
#[derive(PartialEq, Eq)]
enum Key {
    Marker,
    Value,
    Referenced,
    Line,
    Column,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    SPANNED_MARKER => Key::Marker,
                    "value" => Key::Value,
                    "referenced" => Key::Referenced,
                    "line" => Key::Line,
                    "column" => Key::Column,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

thread_local! {
    /// Lines of the file before the text being parsed: profile files are parsed a piece
    /// at a time (see `files`), and positions name lines of the whole file.
    static LINE_BASE: Cell<u32> = const { Cell::new(0) };
}

/// Runs a parse whose positions are `lines_before` lines further down the file. The outer
/// base comes back even if the parse panics (a caller catching that on the same thread
/// would otherwise shift every later position).
pub fn with_line_base<R>(lines_before: u32, parse: impl FnOnce() -> R) -> R {
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            LINE_BASE.set(self.0);
        }
    }
    let _restore = Restore(LINE_BASE.replace(lines_before));
    parse()
}

/// Reads line and column of a location and stops there (the span is not needed).
struct PosSeed;

impl<'de> DeserializeSeed<'de> for PosSeed {
    type Value = Pos;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Pos, D::Error> {
        d.deserialize_struct("Location", LOCATION_FIELDS, self)
    }
}

impl<'de> Visitor<'de> for PosSeed {
    type Value = Pos;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a location")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pos, A::Error> {
        let (mut line, mut col): (Option<u32>, Option<u32>) = (None, None);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Line => line = Some(map.next_value()?),
                Key::Column => col = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if let (Some(line), Some(col)) = (line, col) {
                let base = if line > 0 { LINE_BASE.get() } else { 0 };
                return Ok(Pos { line: line + base, col });
            }
        }
        Err(de::Error::missing_field("line"))
    }
}

#[cfg(test)]
mod tests {
    use serde_saphyr::Spanned;

    use super::*;

    /// `Loc` speaks serde-saphyr's internal span protocol; this pins its positions to what
    /// `Spanned` reports, so a serde-saphyr release that changes the protocol fails here.
    #[test]
    fn loc_positions_match_spanned() {
        #[derive(Deserialize)]
        struct Ours {
            a: Loc<String>,
            b: Vec<Loc<Int>>,
            c: Option<Box<Loc<BTreeMap<String, String>>>>,
            d: Loc<String>,
        }
        #[derive(Deserialize)]
        struct Theirs {
            a: Spanned<String>,
            b: Vec<Spanned<Int>>,
            c: Option<Box<Spanned<BTreeMap<String, String>>>>,
            d: Spanned<String>,
        }
        let text = "a: &x hello\nb: [1,   2]\nc:\n  k: v\nd: *x\n";
        let ours: Ours = serde_saphyr::from_str(text).unwrap();
        let theirs: Theirs = serde_saphyr::from_str(text).unwrap();
        let ours_c = ours.c.as_deref().unwrap();
        let theirs_c = theirs.c.as_deref().unwrap();
        let ours_pos = [Pos::of(&ours.a), Pos::of(&ours.b[1]), Pos::of(ours_c), Pos::of(&ours.d)];
        let theirs_pos =
            [Pos::of(&theirs.a), Pos::of(&theirs.b[1]), Pos::of(theirs_c), Pos::of(&theirs.d)];
        assert_eq!(ours_pos, theirs_pos);
        assert_eq!(ours.d.value, "hello");
        assert_eq!(ours.d.pos, Pos { line: 5, col: 4 });
    }
}
