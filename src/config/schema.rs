//! JSON Schemas of `steerdns.yaml` and of a profile document, generated from the `Raw*`
//! structs that parse them, so editors validate and complete the files as the loader reads
//! them. `steerdns schema config|profile` prints them; `docs/schema/` holds copies.
//!
//! Draft 7, the newest draft yaml-language-server (and so most YAML editors) supports.
//! Serde's derive gives the shape: keys, nesting, required keys, unknown keys refused.
//! Values the loader parses by hand get the schemas below, each accepting at least all
//! that serde-saphyr and the checks accept (white space included), so an editor does not
//! flag what `steerdns check` takes. The one exception is booleans: the schema has YAML
//! 1.2's `true` and `false`, as editors read YAML, where serde-saphyr also takes YAML 1.1's
//! `yes`, `no`, `on` and `off`. Ranges, cross-references and the rules of each routing
//! method stay with `steerdns check`; the descriptions state them.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use super::raw::{Int, Loc, RawProfile, RawServer, SizeText, StatusSpec};
use crate::model::Method;

/// Which file a schema describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Document {
    /// `steerdns.yaml`.
    Config,
    /// One document of a profile file.
    Profile,
}

/// The schema of `document` as pretty-printed JSON, ending in a newline.
pub fn render(document: Document) -> String {
    let generator = SchemaSettings::draft07().into_generator();
    let schema = match document {
        Document::Config => generator.into_root_schema_for::<RawServer>(),
        Document::Profile => generator.into_root_schema_for::<RawProfile>(),
    };
    let mut schema = schema.to_value();
    unwrap_descriptions(&mut schema);
    let mut text = serde_json::to_string_pretty(&schema).expect("a schema is plain JSON");
    text.push('\n');
    text
}

/// Joins the lines of each description, which come from doc comments wrapped for the
/// source: editors that show them as plain text would break lines mid-sentence.
fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(text) if key == "description" => {
                        *text = text
                            .split("\n\n")
                            .map(|p| p.replace('\n', " "))
                            .collect::<Vec<_>>()
                            .join("\n\n");
                    }
                    _ => unwrap_descriptions(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

/// A located value has the schema of the value: the location is the parser's.
impl<T: JsonSchema> JsonSchema for Loc<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }

    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}

/// An integer; `Int` also reads a string of digits.
impl JsonSchema for Int {
    fn schema_name() -> Cow<'static, str> {
        "Integer".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An integer (a quoted one is read too).",
            "anyOf": [
                { "type": "integer" },
                { "type": "string", "pattern": INTEGER_PATTERN }
            ]
        })
    }
}

/// A byte count or a size with a unit, as `check::size` reads it.
impl JsonSchema for SizeText {
    fn schema_name() -> Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A number of bytes, or a size with a unit: 512KiB, 16MiB, 1GiB \
                (powers of 1024) or kB, MB, GB (powers of 1000). At least 1 byte.",
            "anyOf": [
                { "type": "integer", "minimum": 1 },
                { "type": "string", "pattern": SIZE_PATTERN }
            ]
        })
    }
}

/// A status code or a range of them, as `monitor::status_range` reads it.
impl JsonSchema for StatusSpec {
    fn schema_name() -> Cow<'static, str> {
        "StatusCodes".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An HTTP status code (301) or a range of them (\"200-299\"), \
                within 100..599.",
            "anyOf": [
                { "type": "integer" },
                { "type": "string", "pattern": STATUS_PATTERN }
            ]
        })
    }
}

/// A string value with a schema of its own, named in `#[schemars(with = ...)]` in `raw`.
macro_rules! text_schema {
    ($(#[$doc:meta])* $name:ident as $schema_name:literal, $schema:expr) => {
        $(#[$doc])*
        pub struct $name;

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                $schema_name.into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                $schema
            }
        }
    };
}

text_schema!(
    /// A duration as `check::duration` reads it: humantime's syntax, with a unit.
    DurationText as "Duration",
    json_schema!({
        "description": "A duration with a unit: 800ms, 10s, 5m, 1h (or 1h 30m).",
        "type": "string",
        "pattern": DURATION_PATTERN
    })
);

text_schema!(
    /// A CIDR or a `start-end` range, as `netrange::Range::parse` reads it.
    Network as "Network",
    json_schema!({
        "description": "A CIDR with the host bits clear (192.0.2.0/24, 2001:db8::/32) or a \
            start-end range of one family (198.51.100.10-198.51.100.20).",
        "type": "string",
        "pattern": NETWORK_PATTERN
    })
);

text_schema!(
    /// A socket address as `SocketAddr` parses it.
    ListenAddress as "ListenAddress",
    json_schema!({
        "description": "IP:PORT, or [IPv6]:PORT.",
        "type": "string",
        "pattern": LISTEN_PATTERN
    })
);

text_schema!(
    /// `probe.source_address`, as `probe::build` reads it.
    SourceAddress as "SourceAddress",
    json_schema!({
        "description": "An IPv4 or IPv6 address, or a list of at most one of each.",
        "anyOf": [
            { "type": "string" },
            { "type": "array", "items": { "type": "string" }, "maxItems": 2 }
        ]
    })
);

text_schema!(
    /// An endpoint name, as `profiles::Builder::endpoint` checks it.
    EndpointName as "EndpointName",
    json_schema!({
        "description": "An endpoint name: lower-case letters, digits, - and _.",
        "type": "string",
        "pattern": "^[a-z0-9_-]+$"
    })
);

text_schema!(
    /// An endpoint target, as `profiles::Builder::address_or_host` reads it.
    Target as "Target",
    json_schema!({
        "description": "An IPv4 address, an IPv6 address, or an absolute host name ending \
            in a dot (cdn.example.net.).",
        "type": "string",
        "pattern": TARGET_PATTERN
    })
);

text_schema!(
    /// `monitor.protocol`, as `monitor::protocol` reads it.
    ProbeProtocol as "Protocol",
    json_schema!({ "type": "string", "enum": PROTOCOLS })
);

text_schema!(
    /// `monitor.missing`, as `monitor::missing` and `probe_params::missing` read it.
    MissingPolicy as "MissingPolicy",
    json_schema!({ "type": "string", "enum": ["healthy", "unhealthy", "last_known"] })
);

text_schema!(
    /// `monitor_rule`, as `monitor::rule` reads it.
    MonitorRuleSpec as "MonitorRule",
    json_schema!({
        "oneOf": [
            { "type": "string", "enum": ["all", "any"] },
            {
                "type": "object",
                "properties": { "at_least": { "type": "integer", "minimum": 1 } },
                "required": ["at_least"],
                "additionalProperties": false
            }
        ]
    })
);

text_schema!(
    /// An autonomous system number, as `rules::Builder::asn` reads it.
    AsnNumber as "AsnNumber",
    json_schema!({
        "description": "An autonomous system number, 1..4294967295 (64496, not AS64496).",
        "type": "integer",
        "minimum": 1,
        "maximum": 4294967295u64
    })
);

text_schema!(
    /// `degraded_match`, as `rules::Builder::degraded_match` reads it.
    DegradedMatch as "DegradedMatch",
    json_schema!({ "type": "string", "enum": ["serve", "fallback"] })
);

text_schema!(
    /// `load.on_stale`, as `load::rules` reads it.
    OnStaleName as "OnStale",
    json_schema!({ "type": "string", "enum": ["ignore", "overloaded"] })
);

text_schema!(
    /// `notify.webhooks[].format`, as `notify::format` reads it.
    WebhookFormatName as "WebhookFormat",
    json_schema!({ "type": "string", "enum": ["generic", "slack", "alertmanager"] })
);

text_schema!(
    /// `admin.tokens[].role`, as `config::token_role` reads it.
    TokenRoleName as "TokenRole",
    json_schema!({ "type": "string", "enum": ["read", "write"] })
);

/// `routing:`: every method `Method::parse` accepts.
pub struct RoutingMethod;

impl JsonSchema for RoutingMethod {
    fn schema_name() -> Cow<'static, str> {
        "RoutingMethod".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = Method::ALL.iter().map(|m| m.as_str()).collect();
        json_schema!({ "type": "string", "enum": names })
    }
}

const PROTOCOLS: [&str; 11] =
    ["http", "https", "tcp", "dns", "udp", "icmp", "json", "prometheus", "grpc", "pushed", "file"];

/// `str::trim`, then `i64` parsing (which takes a sign).
const INTEGER_PATTERN: &str = r"^\s*[+-]?[0-9]+\s*$";

/// Digits, then one of `check::parse_size`'s units, with white space around.
const SIZE_PATTERN: &str = r"^\s*[0-9]+\s*(B|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB)?\s*$";

/// One code, or two joined by `-`, each trimmed and parsed as a `u16` (which takes `+`).
const STATUS_PATTERN: &str = r"^\s*\+?[0-9]+\s*(-\s*\+?[0-9]+\s*)?$";

/// humantime: numbers (white space may split their digits, a fraction may follow), each
/// with one of its units; `check::duration` wants the text to end in a unit.
const DURATION_PATTERN: &str = r"^\s*([0-9][0-9\s]*(\.[0-9\s]*)?(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\s*)+$";

/// An address (IPv4 or IPv6 characters) with a prefix length, or two joined by `-`.
const NETWORK_PATTERN: &str = r"^\s*[0-9A-Fa-f:.]+\s*(/[0-9]+|-\s*[0-9A-Fa-f:.]+)\s*$";

/// IPv4:port, or [IPv6]:port with an optional numeric scope.
const LISTEN_PATTERN: &str =
    r"^([0-9]{1,3}(\.[0-9]{1,3}){3}|\[[0-9A-Fa-f:.]+(%[0-9]+)?\]):[0-9]{1,5}$";

/// An IPv4 or IPv6 address, or anything ending in a dot (the host name is checked later).
const TARGET_PATTERN: &str = r"^\s*([0-9.]+|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*|.*\.)\s*$";

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::path::Path;

    use super::*;
    use crate::config::check;
    use crate::diag::{Pos, Sink};
    use crate::netrange::Range;

    fn matches(pattern: &str, text: &str) -> bool {
        let schema = serde_json::json!({ "type": "string", "pattern": pattern });
        jsonschema::draft7::is_valid(&schema, &serde_json::json!(text))
    }

    fn loc<T>(value: T) -> Loc<T> {
        Loc { value, pos: Pos { line: 1, col: 1 } }
    }

    /// Every pattern takes all that its parser takes: the cases are the parser's
    /// accepted spellings, with the odd white space and signs they allow.
    #[test]
    fn patterns_accept_what_the_parsers_accept() {
        let mut errors = Vec::new();
        let mut sink = Sink { file: Path::new("t.yaml"), errors: &mut errors };
        for text in ["800ms", " 10s ", "1h 30m", "1h30m", "1.5s", "2 min", "1 0s", "3µs", "1M"] {
            assert!(check::duration(&mut sink, &loc(text.to_string()), "t").is_some(), "{text}");
            assert!(matches(DURATION_PATTERN, text), "duration {text:?}");
        }
        for text in ["10", "", "s", "10 s x", "1h 30"] {
            assert!(check::duration(&mut sink, &loc(text.to_string()), "t").is_none(), "{text}");
            assert!(!matches(DURATION_PATTERN, text), "duration {text:?}");
        }
        for text in ["4096", "16MiB", " 16 MiB ", "2kB", "1TB"] {
            assert!(check::size(&mut sink, &loc(SizeText(text.into())), "t").is_some(), "{text}");
            assert!(matches(SIZE_PATTERN, text), "size {text:?}");
        }
        assert!(!matches(SIZE_PATTERN, "16mib"));
        let networks = [
            "192.0.2.0/24",
            " 10.0.0.0/8 ",
            "2001:db8::/32",
            "10.0.0.1 - 10.0.0.9",
            "::ffff:0:0/96",
        ];
        for text in networks {
            assert!(Range::parse(text).is_ok(), "{text}");
            assert!(matches(NETWORK_PATTERN, text), "network {text:?}");
        }
        assert!(!matches(NETWORK_PATTERN, "192.0.2.1"), "a bare address is no network");
        for text in ["127.0.0.1:5353", "[::1]:53", "[fe80::1%2]:53", "0.0.0.0:0"] {
            assert!(text.parse::<SocketAddr>().is_ok(), "{text}");
            assert!(matches(LISTEN_PATTERN, text), "listen {text:?}");
        }
        assert!(!matches(LISTEN_PATTERN, "localhost:53"));
        for text in ["30", " +30 ", "-1"] {
            assert!(text.trim().parse::<i64>().is_ok(), "{text}");
            assert!(matches(INTEGER_PATTERN, text), "integer {text:?}");
        }
        for text in ["200", "200-299", " 200 - 299 ", "+200"] {
            assert!(matches(STATUS_PATTERN, text), "status {text:?}");
        }
        for text in ["192.0.2.10", "2001:db8::10", "::ffff:192.0.2.1", "cdn.example.net.", " a. "] {
            assert!(matches(TARGET_PATTERN, text), "target {text:?}");
        }
        assert!(!matches(TARGET_PATTERN, "cdn.example.net"), "a host name without its dot");
    }

    /// The protocols offered are the ones a monitor takes.
    #[test]
    fn every_protocol_offered_builds_a_monitor() {
        for protocol in PROTOCOLS {
            let raw = super::super::raw::RawMonitor {
                protocol: Some(Box::new(loc(protocol.to_string()))),
                port: (!matches!(protocol, "icmp" | "json" | "prometheus" | "pushed" | "file"))
                    .then(|| Box::new(loc(Int(8080)))),
                file: (protocol == "file").then(|| Box::new(loc("/run/health".to_string()))),
                query_name: (protocol == "dns").then(|| Box::new(loc("example.com.".to_string()))),
                send: (protocol == "udp").then(|| Box::new(loc("ping".to_string()))),
                url: matches!(protocol, "json" | "prometheus")
                    .then(|| Box::new(loc("http://127.0.0.1/".to_string()))),
                pointer: (protocol == "json").then(|| Box::new(loc("/status".to_string()))),
                metric: (protocol == "prometheus").then(|| Box::new(loc("up".to_string()))),
                healthy_when: (protocol == "prometheus").then(|| Box::new(loc(">= 1".to_string()))),
                ..Default::default()
            };
            let mut errors = Vec::new();
            let mut sink = Sink { file: Path::new("t.yaml"), errors: &mut errors };
            let at = Pos { line: 1, col: 1 };
            let monitor = crate::config::monitor::resolve(&mut sink, Some(&raw), None, at);
            assert!(monitor.is_some(), "{protocol}: {errors:?}");
        }
    }
}
