//! A quick reader for profile documents in the shape operators write them: mappings,
//! sequences and scalars, without anchors, aliases, tags or merge keys. It feeds
//! granit-parser's events (the parser serde-saphyr itself runs) straight into the `Raw*`
//! structs, because serde-saphyr's own layer over those events (buffering, key
//! fingerprints, budgets, redaction scopes) costs more than the parsing itself (figures in
//! `bench/RESULTS.md`).
//!
//! It never decides anything serde-saphyr might decide differently. Whenever a document
//! holds something it does not read exactly as serde-saphyr does (an anchor or alias, a
//! tag, a null, `yes` or a float where a type is inferred, a duplicate key) or any error
//! at all, it gives up, and the caller parses the text with serde-saphyr. So values,
//! positions and every error stay those of the serde-saphyr path; this is only a shortcut.

use std::borrow::Cow;
use std::fmt;

use granit_parser::{Event, Parser, ScalarStyle, Span, StrInput};
use serde::de::value::{MapDeserializer, StrDeserializer};
use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess};
use serde::de::{IntoDeserializer, Visitor};
use smallvec::SmallVec;

use super::raw::SPANNED_NEWTYPE;

/// Every document of `text` (each a mapping), or `None` when serde-saphyr must read it.
pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Option<Vec<T>> {
    if text.len() > MAX_TEXT {
        return None;
    }
    // As serde-saphyr sets up the parser (comments are not events there either).
    let options = granit_parser::options! { emit_comments: false };
    let parser = Parser::new_from_str_with_options(text, options);
    let mut r = Reader { parser, peeked: None, events: 0, depth: 0 };
    if !matches!(r.next().ok()?.0, Event::StreamStart) {
        return None;
    }
    let mut docs = Vec::new();
    loop {
        match r.next().ok()?.0 {
            Event::StreamEnd => return Some(docs),
            // A `%YAML` version makes serde-saphyr check it; leave that to serde-saphyr.
            Event::DocumentStart(_, None) if docs.len() < MAX_DOCUMENTS => {}
            _ => return None,
        }
        // An empty or scalar document is skipped or refused by serde-saphyr: its call.
        if !matches!(r.peek().ok()?.0, Event::MappingStart(..)) {
            return None;
        }
        docs.push(T::deserialize(&mut r).ok()?);
        if !matches!(r.next().ok()?.0, Event::DocumentEnd) {
            return None;
        }
    }
}

// serde-saphyr's default budget refuses more than 1024 documents per input, 250k nodes per
// document, nesting deeper than 64 and 64 MiB of scalars. Staying well inside those limits
// leaves every such refusal to serde-saphyr; the event limit also bounds the work of one
// attempt.
const MAX_TEXT: usize = 32 << 20;
const MAX_DOCUMENTS: usize = 1024;
const MAX_EVENTS: usize = 200_000;
const MAX_DEPTH: usize = 48;
const MAX_KEYS: usize = 64;

/// Where an event starts, as serde-saphyr reports it (line from 1, column from 1). Only
/// this is kept of the parser's span, which is larger and copied with every event.
#[derive(Clone, Copy)]
struct Mark {
    line: u64,
    column: u64,
}

impl Mark {
    fn of(span: &Span) -> Mark {
        Mark { line: span.start.line() as u64, column: span.start.col() as u64 + 1 }
    }
}

/// The quick reader gave up. Nothing more is kept: serde-saphyr reads the text again and
/// reports whatever was wrong.
#[derive(Debug)]
struct GiveUp;

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("left to serde-saphyr")
    }
}

impl std::error::Error for GiveUp {}

impl de::Error for GiveUp {
    fn custom<T: fmt::Display>(_: T) -> GiveUp {
        GiveUp
    }
}

struct Reader<'a> {
    parser: Parser<'a, StrInput<'a>>,
    peeked: Option<(Event<'a>, Mark)>,
    events: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Mark), GiveUp> {
        if let Some(ev) = self.peeked.take() {
            return Ok(ev);
        }
        self.events += 1;
        if self.events > MAX_EVENTS {
            return Err(GiveUp);
        }
        match self.parser.next() {
            Some(Ok((ev, span))) => Ok((ev, Mark::of(&span))),
            _ => Err(GiveUp),
        }
    }

    fn peek(&mut self) -> Result<&(Event<'a>, Mark), GiveUp> {
        if self.peeked.is_none() {
            self.peeked = Some(self.next()?);
        }
        Ok(self.peeked.as_ref().expect("just filled"))
    }

    /// The next node's scalar text and style; anything else gives up.
    fn scalar(&mut self) -> Result<(Cow<'a, str>, ScalarStyle), GiveUp> {
        match self.next()?.0 {
            Event::Scalar(text, style, 0, None) => Ok((text, style)),
            _ => Err(GiveUp),
        }
    }

    /// Reads one collection: its start (`is_start`, without anchor or tag), its entries
    /// (`entries`, which stops before the end), then its end (`is_end`).
    fn nested<R>(
        &mut self,
        is_start: fn(&Event<'_>) -> bool,
        is_end: fn(&Event<'_>) -> bool,
        entries: impl FnOnce(&mut Self) -> Result<R, GiveUp>,
    ) -> Result<R, GiveUp> {
        if !is_start(&self.next()?.0) || self.depth == MAX_DEPTH {
            return Err(GiveUp);
        }
        self.depth += 1;
        let value = entries(self)?;
        self.depth -= 1;
        if is_end(&self.next()?.0) { Ok(value) } else { Err(GiveUp) }
    }
}

fn is_mapping(ev: &Event<'_>) -> bool {
    matches!(ev, Event::MappingStart(_, 0, None))
}

fn is_sequence(ev: &Event<'_>) -> bool {
    matches!(ev, Event::SequenceStart(_, 0, None))
}

/// What serde-saphyr makes of a plain scalar where the target type is not known (integers
/// here, and `expected_status` entries): only the spellings whose reading is certain.
enum Plain {
    Bool(bool),
    Unsigned(u64),
    Negative(i64),
    Text,
}

fn classify(text: &str) -> Result<Plain, GiveUp> {
    let digits = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    match text {
        "true" => return Ok(Plain::Bool(true)),
        "false" => return Ok(Plain::Bool(false)),
        _ => {}
    }
    if let Some(magnitude) = text.strip_prefix('-') {
        return match digits(magnitude) && magnitude != "0" {
            true => text.parse().map(Plain::Negative).map_err(|_| GiveUp),
            false => Err(GiveUp),
        };
    }
    if digits(text) {
        return text.parse().map(Plain::Unsigned).map_err(|_| GiveUp);
    }
    if maybe_typed(text) { Err(GiveUp) } else { Ok(Plain::Text) }
}

/// Text that serde-saphyr may read as a null, a YAML 1.1 boolean or a number (any radix,
/// float, infinity or NaN spelling): all start with one of a few characters or are one of
/// a few words. A status range (`200-299`) starts with a digit but is no number in any
/// spelling: a `-` inside a number only follows an exponent's `e`.
fn maybe_typed(text: &str) -> bool {
    const WORDS: &[&str] =
        &["y", "yes", "n", "no", "on", "off", "true", "false", "null", "inf", "infinity", "nan"];
    let range = text.split_once('-').is_some_and(|(from, to)| {
        [from, to].iter().all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
    });
    !range
        && (text.is_empty()
            || text.starts_with(|c: char| c.is_ascii_digit() || "+-.~".contains(c))
            || WORDS.iter().any(|w| text.eq_ignore_ascii_case(w)))
}

/// Plain text serde-saphyr refuses as a string (it is a null).
fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

macro_rules! give_up {
    ($($method:ident($($arg:ty),*);)*) => {
        $(fn $method<V: Visitor<'de>>(self, $(_: $arg,)* _: V) -> Result<V::Value, GiveUp> {
            Err(GiveUp)
        })*
    };
}

impl<'de> Deserializer<'de> for &mut Reader<'_> {
    type Error = GiveUp;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match &self.peek()?.0 {
            Event::MappingStart(..) => return self.deserialize_map(visitor),
            Event::SequenceStart(..) => return self.deserialize_seq(visitor),
            _ => {}
        }
        let (text, style) = self.scalar()?;
        if style != ScalarStyle::Plain {
            return visitor.visit_str(&text);
        }
        match classify(&text)? {
            Plain::Bool(b) => visitor.visit_bool(b),
            Plain::Unsigned(n) => visitor.visit_u64(n),
            Plain::Negative(n) => visitor.visit_i64(n),
            Plain::Text => visitor.visit_str(&text),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match self.scalar()? {
            (text, ScalarStyle::Plain) if text == "true" => visitor.visit_bool(true),
            (text, ScalarStyle::Plain) if text == "false" => visitor.visit_bool(false),
            _ => Err(GiveUp),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match self.scalar()? {
            (text, ScalarStyle::Plain) if is_null(&text) => Err(GiveUp),
            (text, _) => visitor.visit_str(&text),
        }
    }

    /// Coordinates: plain decimals only (`50.11`, `-6`), whose reading is certain; an
    /// exponent, a `+`, `.5`, `.inf` or a quoted number is left to serde-saphyr.
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        let (text, style) = self.scalar()?;
        let magnitude = text.strip_prefix('-').unwrap_or(&text);
        let (whole, fraction) = magnitude.split_once('.').unwrap_or((magnitude, "1"));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let plain_decimal = style == ScalarStyle::Plain
            && digits(whole)
            && (whole == "0" || !whole.starts_with('0'))
            && digits(fraction);
        if !plain_decimal {
            return Err(GiveUp);
        }
        visitor.visit_f64(text.parse().map_err(|_| GiveUp)?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match &self.peek()?.0 {
            Event::Scalar(text, ScalarStyle::Plain, ..) if is_null(text) => Err(GiveUp),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, GiveUp> {
        if name != SPANNED_NEWTYPE {
            return visitor.visit_newtype_struct(self);
        }
        let pos = self.peek()?.1;
        visitor.visit_map(Located { reader: self, pos, step: 0 })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        self.nested(
            is_mapping,
            |e| matches!(e, Event::MappingEnd),
            |reader| visitor.visit_map(&mut Mapping { reader, keys: SmallVec::new() }),
        )
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, GiveUp> {
        self.deserialize_map(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        self.nested(
            is_sequence,
            |e| matches!(e, Event::SequenceEnd),
            |reader| visitor.visit_seq(&mut Sequence { reader }),
        )
    }

    // Nothing in a profile document is read as these (and nothing is ignored: every
    // struct refuses unknown keys); serde-saphyr's rules for them are not repeated here.
    give_up! {
        deserialize_i8(); deserialize_i16(); deserialize_i32(); deserialize_i64();
        deserialize_i128(); deserialize_u8(); deserialize_u16(); deserialize_u32();
        deserialize_u64(); deserialize_u128(); deserialize_f32();
        deserialize_char(); deserialize_bytes(); deserialize_byte_buf(); deserialize_unit();
        deserialize_ignored_any(); deserialize_unit_struct(&'static str);
        deserialize_tuple(usize); deserialize_tuple_struct(&'static str, usize);
        deserialize_enum(&'static str, &'static [&'static str]);
    }
}

/// The entries of one mapping. Keys are plain or quoted scalars; a duplicate key, a merge
/// key (`<<`) or a plain key that may be typed gives up, as serde-saphyr has its own rules
/// for all three.
struct Mapping<'r, 'a> {
    reader: &'r mut Reader<'a>,
    keys: SmallVec<[Cow<'a, str>; 16]>,
}

impl<'de> MapAccess<'de> for &mut Mapping<'_, '_> {
    type Error = GiveUp;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, GiveUp> {
        // The end itself is read by `nested`.
        if matches!(self.reader.peek()?.0, Event::MappingEnd) {
            return Ok(None);
        }
        let (key, style) = self.reader.scalar()?;
        let plain = style == ScalarStyle::Plain;
        // serde-saphyr also takes plain keys that read as the same number or boolean
        // (`1`, `0x1`) for duplicates: any plain key that may be typed is its call.
        let many = self.keys.len() >= MAX_KEYS; // keeps the duplicate check linear
        if many || (plain && (key == "<<" || maybe_typed(&key))) || self.keys.contains(&key) {
            return Err(GiveUp);
        }
        let value = seed.deserialize(StrDeserializer::<GiveUp>::new(&key))?;
        self.keys.push(key);
        Ok(Some(value))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, GiveUp> {
        seed.deserialize(&mut *self.reader)
    }
}

struct Sequence<'r, 'a> {
    reader: &'r mut Reader<'a>,
}

impl<'de> SeqAccess<'de> for &mut Sequence<'_, '_> {
    type Error = GiveUp;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, GiveUp> {
        if matches!(self.reader.peek()?.0, Event::SequenceEnd) {
            return Ok(None);
        }
        seed.deserialize(&mut *self.reader).map(Some)
    }
}

/// serde-saphyr's span protocol (see `raw::Loc`), spoken for the next node: a marker, the
/// value, then where it was written (`referenced`) as a map of line and column.
struct Located<'r, 'a> {
    reader: &'r mut Reader<'a>,
    pos: Mark,
    step: u8,
}

impl<'de> MapAccess<'de> for Located<'_, '_> {
    type Error = GiveUp;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, GiveUp> {
        const KEYS: [&str; 3] = [super::raw::SPANNED_MARKER, "value", "referenced"];
        let Some(key) = KEYS.get(usize::from(self.step)) else { return Ok(None) };
        seed.deserialize(StrDeserializer::<GiveUp>::new(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, GiveUp> {
        self.step += 1;
        match self.step {
            1 => seed.deserialize(true.into_deserializer()),
            2 => seed.deserialize(&mut *self.reader),
            _ => {
                let Mark { line, column } = self.pos;
                let entries = [("line", line), ("column", column)].into_iter();
                seed.deserialize(MapDeserializer::new(entries))
            }
        }
    }
}

/// Debug builds check every quick read against serde-saphyr, so that every configuration
/// the test suite loads doubles as a test that the two agree.
#[cfg(debug_assertions)]
pub fn check_against_serde_saphyr<T: DeserializeOwned + fmt::Debug>(text: &str, quick: &[T]) {
    let slow: Vec<T> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| {
        panic!("the quick reader took a text serde-saphyr refuses ({e}):\n{text}")
    });
    assert_eq!(format!("{quick:?}"), format!("{slow:?}"), "the readers disagree on:\n{text}");
}

#[cfg(test)]
mod tests {
    use super::super::raw::RawProfile;
    use super::*;

    fn quick(text: &str) -> Option<Vec<RawProfile>> {
        from_multiple(text)
    }

    /// Documents in the shapes operators write are read quickly, to exactly what
    /// serde-saphyr makes of them, positions included.
    #[test]
    fn common_documents_read_as_serde_saphyr_reads_them() {
        let texts = [
            "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, priority: 1 }\n  - name: b\n    target: \"2001:db8::1\"\n    priority: 2\n    enabled: false\n",
            "# comment\nname: 'it''s'   # trailing\nttl: 30\nenabled: true\nrouting: weighted\nfail_open: false\nsticky: true\nmax_return: 2\nsafety_threshold: -1\ndegraded_match: \"a\\tb\"\nmonitor:\n  protocol: https\n  port: 8443\n  path: /health\n  interval: 10s\n  timeout: 2s\n  tolerated_failures: 0\n  expected_status: [200, \"200-299\", '301', 404-410]\n  headers: { Host: example.com, \"X-Token\": abc, '123': v }\n  body_contains: |\n    ok\n    fine\n  tls_verify: false\nendpoints: []\n",
            "name: geo\nrouting: geographic\nendpoints:\n  - name: eu\n    target: eu.example.net.\n    geo: [EU, DE, \"US-CA\"]\n    subnets:\n      - 10.0.0.0/8\n      - 2001:db8::/32\n    location: fra\n    zone: z1\n    monitor:\n      path: >-\n        /folded\n        path\n",
            "name: nested\nrouting: priority\nendpoints:\n  - { name: n, profile: child, min_child_endpoints: 2, min_child_endpoints_ipv4: 1, min_child_endpoints_ipv6: 0 }\n---\nname: dial\nrouting: groups\ngroups:\n  - name: g1\n    location: fra\n    traffic_dial: 50\n    endpoints: [ { name: a, target: 192.0.2.9 } ]\n...\n---\nname: 123\nrouting: multi\n  line plain\n",
            "{ name: flow, routing: priority, endpoints: [ { name: a,\n    target: 192.0.2.1 } ] }\n",
            "name: near\nrouting: geoproximity\nendpoints:\n  - { name: a, target: 192.0.2.1, coordinates: { latitude: 50.11, longitude: -6 }, bias: -20 }\n  - name: b\n    target: 192.0.2.2\n    coordinates:\n      latitude: -0.000001\n      longitude: 0\n    bias: 99\n",
        ];
        for text in texts {
            let quick = quick(text).unwrap_or_else(|| panic!("gave up on:\n{text}"));
            let slow: Vec<RawProfile> = serde_saphyr::from_multiple(text).unwrap();
            assert_eq!(format!("{quick:?}"), format!("{slow:?}"), "{text}");
        }
    }

    /// The shipped profile files, whose first line names their JSON Schema for editors,
    /// are read quickly: a comment line costs nothing.
    #[test]
    fn example_profiles_read_quickly() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for dir in ["profiles", "docker/profiles"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(text.starts_with("# yaml-language-server: $schema="), "{path:?}");
                let quick = quick(&text).unwrap_or_else(|| panic!("gave up on {path:?}"));
                let slow: Vec<RawProfile> = serde_saphyr::from_multiple(&text).unwrap();
                assert_eq!(format!("{quick:?}"), format!("{slow:?}"), "{path:?}");
            }
        }
    }

    /// Whatever serde-saphyr may read its own way is left to it, accepted or refused.
    #[test]
    fn anything_unusual_is_left_to_serde_saphyr() {
        let base = "name: a\nrouting: priority\n";
        let extras = [
            "ttl: &t 30\nmax_return: *t\n",
            "ttl: !!int 30\n",
            "degraded_match: !!str 1\n",
            "ttl: 0x1e\n",
            "ttl: 010\n",
            "ttl: ~\n",
            "ttl:\n",
            "ttl: null\n",
            "enabled: yes\n",
            "enabled: True\n",
            "enabled: \"true\"\n",
            "degraded_match: NULL\n",
            "monitor: { expected_status: [[200]] }\n",
            "monitor: { headers: { ~: x } }\n",
            "monitor: { headers: { 1: a, 0x1: b } }\n",
            "monitor: { headers: { 1: a } }\n",
            "monitor: { headers: { true: a, TRUE: b } }\n",
            "name: b\n",
            "\"name\": b\n",
            "unknown: 1\n",
            "endpoints: [ { <<: { name: x }, target: 192.0.2.1 } ]\n",
            "endpoints: [ { name: a, coordinates: { latitude: 1e1, longitude: 0 } } ]\n",
            "endpoints: [ { name: a, coordinates: { latitude: .5, longitude: 0 } } ]\n",
            "endpoints: [ { name: a, coordinates: { latitude: +1.5, longitude: 0 } } ]\n",
            "endpoints: [ { name: a, coordinates: { latitude: \"1.5\", longitude: 0 } } ]\n",
            "endpoints: [ { name: a, coordinates: { latitude: 01.5, longitude: 0 } } ]\n",
            "endpoints: [ { name: a, coordinates: { latitude: 1., longitude: 0 } } ]\n",
            "endpoints: [ { name: a, coordinates: { latitude: .inf, longitude: 0 } } ]\n",
        ];
        for extra in extras {
            let text = format!("{base}{extra}");
            assert!(quick(&text).is_none(), "read quickly:\n{text}");
        }
        // Where a plain scalar may be a number or a word (`expected_status` entries), any
        // spelling serde-saphyr may type is its call; read as text it would be accepted.
        let typed = [
            "0x1e",
            "0o17",
            "1_000",
            "+5",
            "010",
            "-0",
            "99999999999999999999",
            "1.5",
            "1e3",
            ".inf",
            "Infinity",
            "nan",
            "no",
            "Yes",
            "on",
            "~",
            "null",
        ];
        for scalar in typed {
            let text = format!("{base}monitor: {{ expected_status: [{scalar}] }}\n");
            assert!(quick(&text).is_none(), "read quickly:\n{text}");
        }
        let keys = |n: usize| (0..n).map(|i| format!("h{i}: v")).collect::<Vec<_>>().join(", ");
        let headers = |n| format!("{base}monitor: {{ headers: {{ {} }} }}\n", keys(n));
        assert!(quick(&headers(MAX_KEYS)).is_some(), "{}", headers(MAX_KEYS));
        assert!(quick(&headers(MAX_KEYS + 1)).is_none(), "a long mapping is serde-saphyr's");
        for text in ["---\n", "hello\n", "%YAML 1.2\n---\nname: a\nrouting: x\n", "- a\n"] {
            assert!(quick(text).is_none(), "read quickly: {text:?}");
        }
    }

    /// Nesting is bounded before the stack is: one level under the limit is read, as
    /// serde-saphyr reads it; at the limit, and far past it, the reader gives up.
    #[test]
    fn nesting_deeper_than_the_limit_gives_up() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(untagged)]
        #[allow(dead_code)] // read through Debug
        enum Tree {
            Leaf(u64),
            List(Vec<Tree>),
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)] // read through Debug
        struct Doc {
            tree: Tree,
        }
        let nested = |d: usize| format!("tree: {}1{}\n", "[".repeat(d), "]".repeat(d));
        // The document's mapping is one level of its own.
        let within = nested(MAX_DEPTH - 1);
        let quick: Vec<Doc> = from_multiple(&within).expect("within the limit");
        let slow: Vec<Doc> = serde_saphyr::from_multiple(&within).unwrap();
        assert_eq!(format!("{quick:?}"), format!("{slow:?}"));
        assert!(from_multiple::<Doc>(&nested(MAX_DEPTH)).is_none());
        assert!(from_multiple::<Doc>(&nested(5000)).is_none());
    }

    #[test]
    fn plain_scalars_are_typed_only_when_certain() {
        let cases: &[(&str, Option<&str>)] = &[
            ("0", Some("u0")),
            ("42", Some("u42")),
            ("-42", Some("i-42")),
            ("true", Some("btrue")),
            ("false", Some("bfalse")),
            ("abc", Some("t")),
            ("a1", Some("t")),
            ("example.com", Some("t")),
            ("200-299", Some("t")),
            ("200-", None),
            ("2-3-4", None),
            ("1e-5", None),
            ("-0", None),
            ("007", None),
            ("1a", None),
            ("-", None),
            ("+1", None),
            (".5", None),
            ("~", None),
            ("", None),
            ("TRUE", None),
            ("Off", None),
            ("y", None),
            ("NaN", None),
            ("infinity", None),
            ("18446744073709551616", None),
        ];
        for (text, want) in cases {
            let got = classify(text).ok().map(|p| match p {
                Plain::Bool(b) => format!("b{b}"),
                Plain::Unsigned(n) => format!("u{n}"),
                Plain::Negative(n) => format!("i{n}"),
                Plain::Text => "t".to_string(),
            });
            assert_eq!(got.as_deref(), *want, "{text:?}");
        }
    }
}
