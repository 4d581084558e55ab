//! The `expect` pattern of a udp monitor: a regular expression over the bytes of a reply,
//! compiled once when the configuration loads (`docs/probing.md`).

use std::hash::{Hash, Hasher};

use regex::bytes::{Regex, RegexBuilder};

/// The most heap a compiled pattern may take. A pattern is at most 512 bytes of text, but
/// counted repetitions multiply (`(a{100}){100}`), so the compiled size is bounded too.
pub const COMPILED_LIMIT: usize = 128 * 1024;

/// The most the lazy DFA of one pattern may cache while matching: replies are at most a
/// few KiB, and a larger cache would only grow with the probes configured.
const CACHE_LIMIT: usize = 256 * 1024;

/// A compiled reply pattern. Two are the same setting when their text is, so that a reload
/// that keeps the text keeps the probe.
#[derive(Clone, Debug)]
pub struct ReplyPattern {
    regex: Regex,
}

/// Why a pattern cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Not a regular expression; `at` counts characters from 1.
    #[error("invalid pattern at character {at}: {why}")]
    Syntax { at: usize, why: String },
    #[error("the pattern compiles to more than {COMPILED_LIMIT} bytes; simplify it")]
    TooBig,
}

impl ReplyPattern {
    /// Compiles `text` as a pattern over bytes (Unicode off: `.` and classes match single
    /// bytes, `\xHH` is the byte HH, `(?i)` folds ASCII case only).
    pub fn new(text: &str) -> Result<ReplyPattern, PatternError> {
        // Parsed on its own first for a one-line reason with a position; `regex`'s own
        // error is a multi-line drawing of the pattern.
        let parsed =
            regex_syntax::ParserBuilder::new().unicode(false).utf8(false).build().parse(text);
        if let Err(e) = parsed {
            let (offset, why) = match &e {
                regex_syntax::Error::Parse(e) => (e.span().start.offset, e.kind().to_string()),
                regex_syntax::Error::Translate(e) => (e.span().start.offset, e.kind().to_string()),
                other => (0, other.to_string()),
            };
            let at = text.get(..offset).map_or(1, |before| before.chars().count() + 1);
            return Err(PatternError::Syntax { at, why });
        }
        let regex = RegexBuilder::new(text)
            .unicode(false)
            .size_limit(COMPILED_LIMIT)
            .dfa_size_limit(CACHE_LIMIT)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => PatternError::TooBig,
                // The parser above accepted it; whatever else fails is said in one line.
                other => PatternError::Syntax {
                    at: 1,
                    why: other.to_string().split_whitespace().collect::<Vec<_>>().join(" "),
                },
            })?;
        Ok(ReplyPattern { regex })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        self.regex.as_str()
    }

    /// Whether the pattern matches anywhere in `reply`.
    pub fn is_match(&self, reply: &[u8]) -> bool {
        self.regex.is_match(reply)
    }
}

impl PartialEq for ReplyPattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ReplyPattern {}

impl Hash for ReplyPattern {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_reply_bytes() {
        // (pattern, reply, matches)
        let cases: &[(&str, &[u8], bool)] = &[
            ("200 OK", b"SIP/2.0 200 OK\r\n", true),
            ("^200", b"SIP/2.0 200 OK", false),
            (r"^SIP/2\.0 [23]\d\d ", b"SIP/2.0 202 Accepted", true),
            (r"^SIP/2\.0 [23]\d\d ", b"SIP/2.0 503 Busy", false),
            // `.` is any byte but a newline; `\xHH` is a byte, valid UTF-8 or not.
            (r"a.b", b"a\xffb", true),
            (r"\xff\x00", b"x\xff\x00y", true),
            (r"\x00", b"no nul", false),
            (r"\r\n\r\n$", b"head\r\n\r\n", true),
            ("(?i)pong", b"PONG", true),
            ("(?s)start.*end", b"start\nend", true),
            ("start.*end", b"start\nend", false),
            // A literal non-ASCII character matches its UTF-8 bytes.
            ("é", "café".as_bytes(), true),
            ("", b"anything", true),
        ];
        for (pattern, reply, want) in cases {
            let p = ReplyPattern::new(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
            assert_eq!(p.is_match(reply), *want, "{pattern} on {}", reply.escape_ascii());
        }
    }

    #[test]
    fn bad_patterns_say_why_in_one_line() {
        let cases: &[(&str, &str)] = &[
            ("(unclosed", "invalid pattern at character 1: unclosed group"),
            ("ok|*", "invalid pattern at character 4: repetition operator missing expression"),
            (
                "é[z-a]",
                "invalid pattern at character 3: invalid character class range, the start must \
                 be <= the end",
            ),
            (r"\p{Greek}", "invalid pattern at character 1: Unicode not allowed here"),
            ("(a{100}){100}", "the pattern compiles to more than 131072 bytes; simplify it"),
        ];
        for (pattern, want) in cases {
            let got = ReplyPattern::new(pattern).map(|p| p.as_str().to_string());
            assert_eq!(got.map_err(|e| e.to_string()), Err(want.to_string()), "{pattern}");
        }
    }

    #[test]
    fn the_same_text_is_the_same_setting() {
        let a = ReplyPattern::new("PONG.*").unwrap();
        assert_eq!(a, ReplyPattern::new("PONG.*").unwrap());
        assert_ne!(a, ReplyPattern::new("PONG.+").unwrap());
        let hash = |p: &ReplyPattern| {
            let mut h = std::hash::DefaultHasher::new();
            p.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&a), hash(&ReplyPattern::new("PONG.*").unwrap()));
    }
}
