//! BIND's DNSSEC key files, as `dnssec-keygen`, `ldns-keygen` and `steerdns dnssec keygen`
//! write them: `K<zone>+<alg>+<tag>.key` holds the DNSKEY record (and, in comments, the
//! timing), `K<zone>+<alg>+<tag>.private` the private key and the timing. Text in, fields
//! out, and back; no I/O and no judgement of the values (`dnssec` does that).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;

use crate::model::dnssec::{Timing, ZoneKey};

/// What is wrong in a key file, and on which line (0: the file as a whole).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KeyFileError {
    pub line: u32,
    pub message: String,
}

fn err(line: u32, message: impl Into<String>) -> KeyFileError {
    KeyFileError { line, message: message.into() }
}

/// The parts of a key file's name: `K<zone>+<alg>+<tag>` and the extension.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyFileName<'a> {
    /// As written (`tm.example.com.`), compared without regard to case.
    pub zone: &'a str,
    /// The rest, `<alg>+<tag>`, parsed by `algorithm_and_tag`.
    pub rest: &'a str,
    pub kind: KeyFileKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFileKind {
    Public,
    Private,
}

impl<'a> KeyFileName<'a> {
    /// The parts of `name`, or `None` for a file that is not a key file (`.state`, `.ds`,
    /// anything else). The zone ends at the first `+`, which a zone name does not hold.
    pub fn parse(name: &'a str) -> Option<KeyFileName<'a>> {
        let (stem, kind) = if let Some(stem) = name.strip_suffix(".key") {
            (stem, KeyFileKind::Public)
        } else {
            (name.strip_suffix(".private")?, KeyFileKind::Private)
        };
        let (zone, rest) = stem.strip_prefix('K')?.split_once('+')?;
        Some(KeyFileName { zone, rest, kind })
    }

    /// The algorithm number and key tag the name gives (`013+55790`).
    pub fn algorithm_and_tag(&self) -> Option<(u8, u16)> {
        let (alg, tag) = self.rest.split_once('+')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(alg) || !digits(tag) {
            return None;
        }
        Some((alg.parse().ok()?, tag.parse().ok()?))
    }
}

/// The base name of a key's files, without the extension, as BIND makes it.
pub fn base_name(zone: &str, algorithm: u8, tag: u16) -> String {
    format!("K{zone}+{algorithm:03}+{tag:05}")
}

/// A `.key` file: one DNSKEY record, with the timing found in its comments.
#[derive(Debug, PartialEq, Eq)]
pub struct PublicFile {
    /// The line the record starts on.
    pub line: u32,
    pub owner: String,
    pub flags: u16,
    pub protocol: u8,
    pub algorithm: u8,
    pub public_key: Vec<u8>,
    /// From `; Publish: …` comments, which BIND and `steerdns dnssec keygen` write beside
    /// the record; used for a key without its `.private` file.
    pub timing: Timing,
}

/// Reads a `.key` file: comment lines (`;`), then `<owner> [TTL] [IN] DNSKEY <flags>
/// <protocol> <algorithm> <base64 key>`. The TTL and class may come in either order, the
/// key may be split by white space, and the record may span lines in parentheses.
pub fn parse_public(text: &str) -> Result<PublicFile, KeyFileError> {
    let mut timing = Timing::default();
    let mut record: Option<(u32, Vec<&str>)> = None;
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let (code, comment) = match line.split_once(';') {
            Some((code, comment)) => (code, Some(comment)),
            None => (line, None),
        };
        if code.trim().is_empty() && !open {
            if let Some(c) = comment
                && let Some((key, value)) = c.trim().split_once(':')
            {
                // The value is followed by the date in words: only its first word counts.
                let first = value.split_whitespace().next().unwrap_or("");
                set_timing(&mut timing, key.trim(), first, n)?;
            }
            continue;
        }
        let tokens =
            code.split_whitespace().flat_map(|t| t.split(['(', ')'])).filter(|t| !t.is_empty());
        match &mut record {
            Some((_, words)) if open => words.extend(tokens),
            Some(_) => return Err(err(n, "a second record: a .key file holds one DNSKEY record")),
            None => record = Some((n, tokens.collect())),
        }
        open = paren_depth(code, open, n)?;
    }
    if open {
        return Err(err(0, "a parenthesis is not closed"));
    }
    let Some((line, words)) = record else {
        return Err(err(0, "no DNSKEY record in the file"));
    };
    let mut words = words.into_iter();
    let owner = words.next().unwrap_or_default().to_string();
    let mut rtype = None;
    for w in words.by_ref() {
        if w.eq_ignore_ascii_case("DNSKEY") {
            rtype = Some(w);
            break;
        }
        let ttl = w.bytes().all(|b| b.is_ascii_digit());
        if w.eq_ignore_ascii_case("IN") || ttl {
            continue;
        }
        return Err(err(line, format!("expected `[TTL] IN DNSKEY` after the owner, found {w:?}")));
    }
    if rtype.is_none() {
        return Err(err(line, "the record is not a DNSKEY"));
    }
    let mut field = |name: &str| {
        words.next().ok_or_else(|| err(line, format!("the DNSKEY record has no {name}")))
    };
    let flags = field("flags")?;
    let flags = flags
        .parse()
        .map_err(|_| err(line, format!("DNSKEY flags {flags:?} are not a number 0..65535")))?;
    let protocol = field("protocol")?;
    let protocol = protocol
        .parse()
        .map_err(|_| err(line, format!("DNSKEY protocol {protocol:?} is not a number 0..255")))?;
    let algorithm = field("algorithm")?;
    let algorithm = algorithm_number(algorithm).ok_or_else(|| {
        err(
            line,
            format!("DNSKEY algorithm {algorithm:?} is neither a number 0..255 nor a known name"),
        )
    })?;
    let text: String = words.collect();
    if text.is_empty() {
        return Err(err(line, "the DNSKEY record has no public key"));
    }
    let public_key =
        base64(&text).map_err(|e| err(line, format!("the public key is not base64: {e}")))?;
    Ok(PublicFile { line, owner, flags, protocol, algorithm, public_key, timing })
}

/// Whether a parenthesis is open after `code`, which continues a record when `open`.
fn paren_depth(code: &str, mut open: bool, line: u32) -> Result<bool, KeyFileError> {
    for c in code.chars() {
        match (c, open) {
            ('(', false) => open = true,
            (')', true) => open = false,
            ('(', true) => return Err(err(line, "a parenthesis inside parentheses")),
            (')', false) => return Err(err(line, "a closing parenthesis without an opening one")),
            _ => {}
        }
    }
    Ok(open)
}

/// A `.private` file's fields that steerdns uses.
#[derive(Debug, PartialEq, Eq)]
pub struct PrivateFile {
    pub algorithm: u8,
    /// The line of `Algorithm:`.
    pub algorithm_line: u32,
    /// `PrivateKey:` decoded, and its line; `None` when the file has none (an RSA key, or
    /// a key kept in a hardware module).
    pub private_key: Option<(Vec<u8>, u32)>,
    pub timing: Timing,
}

/// Reads a `.private` file: `Name: value` lines, `Private-key-format: v1.x` first.
/// `Algorithm`, `PrivateKey` and the timing lines `Publish`, `Activate`, `Inactive` and
/// `Delete` are read; every other line (`Created`, `Revoke`, `SyncPublish`, RSA's
/// fields, …) is accepted and not used.
pub fn parse_private(text: &str) -> Result<PrivateFile, KeyFileError> {
    let mut format = None;
    let mut algorithm = None;
    let mut private_key = None;
    let mut timing = Timing::default();
    for (i, line) in text.lines().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        if line.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(err(n, format!("expected `Name: value`, found {:?}", line.trim())));
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "Private-key-format" => {
                let minor = value.strip_prefix("v1.").filter(|m| m.parse::<u8>().is_ok());
                if minor.is_none() {
                    return Err(err(
                        n,
                        format!("unknown Private-key-format {value:?} (v1.2 and v1.3 are read)"),
                    ));
                }
                format = Some(n);
            }
            "Algorithm" => {
                let number = value.split_whitespace().next().unwrap_or("");
                let number = number.parse().map_err(|_| {
                    err(n, format!("Algorithm {value:?} does not start with a number"))
                })?;
                once(algorithm.replace((number, n)).is_some(), n, key)?;
            }
            "PrivateKey" => {
                let bytes =
                    base64(value).map_err(|e| err(n, format!("PrivateKey is not base64: {e}")))?;
                once(private_key.replace((bytes, n)).is_some(), n, key)?;
            }
            _ => set_timing(&mut timing, key, value, n)?,
        }
    }
    if format.is_none() {
        return Err(err(0, "not a private key file: no `Private-key-format:` line"));
    }
    let Some((algorithm, algorithm_line)) = algorithm else {
        return Err(err(0, "no `Algorithm:` line"));
    };
    Ok(PrivateFile { algorithm, algorithm_line, private_key, timing })
}

fn once(repeated: bool, line: u32, key: &str) -> Result<(), KeyFileError> {
    if repeated { Err(err(line, format!("{key} is given twice"))) } else { Ok(()) }
}

/// Sets the timing event `key` names from `value` (YYYYMMDDHHMMSS, UTC); other keys are
/// left alone.
fn set_timing(timing: &mut Timing, key: &str, value: &str, line: u32) -> Result<(), KeyFileError> {
    let slot = match key {
        "Publish" => &mut timing.publish,
        "Activate" => &mut timing.activate,
        "Inactive" => &mut timing.inactive,
        "Delete" => &mut timing.delete,
        _ => return Ok(()),
    };
    let t = parse_time(value)
        .ok_or_else(|| err(line, format!("{key}: {value:?} is not a time YYYYMMDDHHMMSS (UTC)")))?;
    if slot.replace(t).is_some() {
        return Err(err(line, format!("{key} is given twice")));
    }
    Ok(())
}

/// A key file time, YYYYMMDDHHMMSS in UTC, in Unix seconds.
pub fn parse_time(text: &str) -> Option<u64> {
    if text.len() != 14 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let t = &text;
    let rfc3339 =
        format!("{}-{}-{}T{}:{}:{}Z", &t[..4], &t[4..6], &t[6..8], &t[8..10], &t[10..12], &t[12..]);
    let at = humantime::parse_rfc3339(&rfc3339).ok()?;
    at.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// Unix seconds as a key file time, YYYYMMDDHHMMSS in UTC.
pub fn format_time(unix: u64) -> String {
    rfc3339(unix).chars().filter(char::is_ascii_digit).collect()
}

fn rfc3339(unix: u64) -> String {
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(unix))
        .to_string()
}

/// Both files of a key, as BIND writes them.
pub struct KeyFiles {
    pub public: String,
    pub private: String,
}

/// The files of `key`, a new key of `zone` (absolute, as text) made at `created`, whose
/// private key is `private_key`.
pub fn render(zone: &str, key: &ZoneKey, private_key: &[u8], created: u64) -> KeyFiles {
    let b64 = base64::engine::general_purpose::STANDARD;
    let (algorithm, timing) = (key.algorithm, key.timing);
    let kind = if key.is_sep() { "key-signing" } else { "zone-signing" };
    let events = [
        ("Created", Some(created)),
        ("Publish", timing.publish),
        ("Activate", timing.activate),
        ("Inactive", timing.inactive),
        ("Delete", timing.delete),
    ];
    let mut public = format!("; This is a {kind} key, keyid {}, for {zone}\n", key.key_tag);
    let mut private = format!(
        "Private-key-format: v1.3\nAlgorithm: {} ({})\nPrivateKey: {}\n",
        algorithm.number(),
        algorithm.mnemonic(),
        b64.encode(private_key)
    );
    for (name, at) in events {
        if let Some(at) = at {
            public.push_str(&format!("; {name}: {} ({})\n", format_time(at), rfc3339(at)));
            private.push_str(&format!("{name}: {}\n", format_time(at)));
        }
    }
    public.push_str(&format!(
        "{zone} IN DNSKEY {} 3 {} {}\n",
        key.flags,
        algorithm.number(),
        b64.encode(&key.public_key)
    ));
    KeyFiles { public, private }
}

/// Base64 with the padding BIND and ldns write.
fn base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    base64::engine::general_purpose::STANDARD.decode(text)
}

/// DNSSEC algorithm numbers and the names key files and tools give them (IANA registry).
const ALGORITHMS: &[(u8, &str)] = &[
    (1, "RSAMD5"),
    (3, "DSA"),
    (5, "RSASHA1"),
    (6, "DSA-NSEC3-SHA1"),
    (7, "NSEC3RSASHA1"),
    (8, "RSASHA256"),
    (10, "RSASHA512"),
    (12, "ECC-GOST"),
    (13, "ECDSAP256SHA256"),
    (14, "ECDSAP384SHA384"),
    (15, "ED25519"),
    (16, "ED448"),
];

/// The name of algorithm `number`, for messages (`8 (RSASHA256)`).
pub fn algorithm_text(number: u8) -> String {
    match ALGORITHMS.iter().find(|(n, _)| *n == number) {
        Some((_, name)) => format!("{number} ({name})"),
        None => number.to_string(),
    }
}

fn algorithm_number(text: &str) -> Option<u8> {
    text.parse().ok().or_else(|| {
        ALGORITHMS.iter().find(|(_, name)| name.eq_ignore_ascii_case(text)).map(|(n, _)| *n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dnssec::Algorithm;

    #[test]
    fn file_names() {
        let n = KeyFileName::parse("Ktm.example.test.+013+05790.key").unwrap();
        assert_eq!(
            (n.zone, n.kind, n.algorithm_and_tag()),
            ("tm.example.test.", KeyFileKind::Public, Some((13, 5790)))
        );
        let n = KeyFileName::parse("K.+015+00001.private").unwrap();
        assert_eq!(
            (n.zone, n.kind, n.algorithm_and_tag()),
            (".", KeyFileKind::Private, Some((15, 1)))
        );
        for other in [
            "Ktm.example.test.+013+55790.state",
            "Ktm.example.test.+013+55790.ds",
            "tm.key",
            "K.key",
            "README",
        ] {
            assert_eq!(KeyFileName::parse(other), None, "{other}");
        }
        for bad in
            ["Kz.+013.key", "Kz.+13x+1.key", "Kz.+013+70000.key", "Kz.+013+.key", "Kz.+256+1.key"]
        {
            let n = KeyFileName::parse(bad).unwrap();
            assert_eq!(n.algorithm_and_tag(), None, "{bad}");
        }
        assert_eq!(base_name("tm.example.test.", 13, 5790), "Ktm.example.test.+013+05790");
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("19700101000000"), Some(0));
        assert_eq!(parse_time("20261201182435"), Some(1_796_149_475));
        assert_eq!(format_time(1_796_149_475), "20261201182435");
        for bad in [
            "2026120118243",
            "202612011824355",
            "20261301182435",
            "20260230000000",
            "2026120118243x",
            "",
        ] {
            assert_eq!(parse_time(bad), None, "{bad:?}");
        }
    }

    /// As `dnssec-keygen -a ECDSAP256SHA256` (BIND 9.18) writes it.
    const BIND_KEY: &str = "\
; This is a zone-signing key, keyid 55790, for tm.example.test.
; Created: 20261201182435 (Tue Dec  1 18:24:35 2026)
; Publish: 20261201182435 (Tue Dec  1 18:24:35 2026)
; Activate: 20261201182435 (Tue Dec  1 18:24:35 2026)
tm.example.test. IN DNSKEY 256 3 13 r2hCyoAxo7brPtBPFfwccfKIQurfeJO7fT2fKegyDPbaLLJit/yfAZ0y ajgzZoc7olUumg5sqECJ+Kc4QOx4Pg==
";

    const BIND_PRIVATE: &str = "\
Private-key-format: v1.3
Algorithm: 13 (ECDSAP256SHA256)
PrivateKey: ckxEg/rhBrDwsTPsgDWo0rhSLNh6OCLGhr1S/dEwy/Y=
Created: 20261201182435
Publish: 20261201182435
Activate: 20261201182435
Revoke: 20261204182552
SyncPublish: 20261202182552
";

    #[test]
    fn bind_files() {
        let t = 1_796_149_475;
        let k = parse_public(BIND_KEY).unwrap();
        assert_eq!(
            (k.line, k.owner.as_str(), k.flags, k.protocol, k.algorithm),
            (5, "tm.example.test.", 256, 3, 13)
        );
        assert_eq!(k.public_key.len(), 64);
        assert_eq!(
            k.timing,
            Timing { publish: Some(t), activate: Some(t), inactive: None, delete: None }
        );
        let p = parse_private(BIND_PRIVATE).unwrap();
        assert_eq!((p.algorithm, p.algorithm_line), (13, 2));
        assert_eq!(p.private_key.as_ref().map(|(k, line)| (k.len(), *line)), Some((32, 3)));
        assert_eq!(p.timing, k.timing);
        let signer = crate::model::dnssec::Signer::new(
            Algorithm::EcdsaP256Sha256,
            &p.private_key.unwrap().0,
            &k.public_key,
        );
        assert!(signer.is_ok(), "the pair matches");
    }

    /// A key `dnssec-keygen` (BIND 9.18) wrote with a 31-byte `PrivateKey:`: its P-256
    /// scalar starts with a zero byte, which BIND leaves out. It still matches its public key.
    #[test]
    fn bind_short_scalar() {
        let key = "tm.example.test. IN DNSKEY 257 3 13 SJbFxlyj/5+VlDXwUozUjGXbycOnRi0n/Bd86Omp/ZDNJqbGH5RHidtT pIFy2A0PtjlnRfPmk1xlCD09Txcgyw==\n";
        let private = "Private-key-format: v1.3\nAlgorithm: 13 (ECDSAP256SHA256)\nPrivateKey: Ja7NiYgN/V38sw47yk+gMS96tyu/izZzvSQuothToA==\n";
        let k = parse_public(key).unwrap();
        let (scalar, _) = parse_private(private).unwrap().private_key.unwrap();
        assert_eq!(scalar.len(), 31);
        let signer =
            crate::model::dnssec::Signer::new(Algorithm::EcdsaP256Sha256, &scalar, &k.public_key);
        assert_eq!(signer.unwrap().public_key(), k.public_key, "the padded scalar is the key");
    }

    /// ldns-keygen: tabs, a trailing comment, format v1.2, no timing.
    #[test]
    fn ldns_files() {
        let key = "tm.example.test.\tIN\tDNSKEY\t256 3 15 kiEje7XS+DAlxY0HXjj3Jj4lcyrb1PiVRRxKKGAjaQE= ;{id = 19967 (zsk), size = 256b}\n";
        let k = parse_public(key).unwrap();
        assert_eq!(
            (k.flags, k.algorithm, k.public_key.len(), k.timing),
            (256, 15, 32, Timing::default())
        );
        let private = "Private-key-format: v1.2\nAlgorithm: 15 (ED25519)\nPrivateKey: uY43hiHY1jtGBCJeHcbEJyewbGAJWhMkJPJYIdMCmtM=\n";
        let p = parse_private(private).unwrap();
        assert_eq!((p.algorithm, p.timing), (15, Timing::default()));
    }

    #[test]
    fn record_variants() {
        let key = "K3GmvqZ8E2YGQcYN0iX+5PI+9DFrvCAtKvoZpvVWL9k=";
        for text in [
            format!("tm.example.test. 3600 IN DNSKEY 257 3 15 {key}"),
            format!("tm.example.test. IN 3600 dnskey 257 3 ED25519 {key}"),
            format!("tm.example.test. DNSKEY 257 3 15 {key}"),
            format!("; c\ntm.example.test. IN DNSKEY (\n 257 3 15 ; flags\n {key} )\n"),
        ] {
            let k = parse_public(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                (k.flags, k.protocol, k.algorithm, k.public_key.len()),
                (257, 3, 15, 32),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_public_files() {
        let key = "K3GmvqZ8E2YGQcYN0iX+5PI+9DFrvCAtKvoZpvVWL9k=";
        let cases = [
            (String::new(), 0, "no DNSKEY record"),
            ("; only a comment\n".to_string(), 0, "no DNSKEY record"),
            (format!("z. IN DS 257 3 15 {key}"), 1, "expected `[TTL] IN DNSKEY`"),
            ("z. IN DNSKEY 257 3\n".to_string(), 1, "has no algorithm"),
            ("z. IN DNSKEY 257 3 15\n".to_string(), 1, "has no public key"),
            (format!("z. IN DNSKEY 70000 3 15 {key}"), 1, "flags \"70000\""),
            (format!("z. IN DNSKEY 257 3 FOO {key}"), 1, "algorithm \"FOO\""),
            ("z. IN DNSKEY 257 3 15 abc!\n".to_string(), 1, "not base64"),
            (
                format!("z. IN DNSKEY 257 3 15 {key}\nz. IN DNSKEY 256 3 15 {key}\n"),
                2,
                "a second record",
            ),
            (format!("z. IN DNSKEY ( 257 3 15 {key}\n"), 0, "not closed"),
            (
                format!("; Publish: 2026\nz. IN DNSKEY 257 3 15 {key}\n"),
                1,
                "Publish: \"2026\" is not a time",
            ),
        ];
        for (text, line, want) in cases {
            let e = parse_public(&text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn bad_private_files() {
        let head = "Private-key-format: v1.3\nAlgorithm: 15 (ED25519)\n";
        let cases = [
            ("Algorithm: 15\nPrivateKey: AAAA\n".to_string(), 0, "no `Private-key-format:`"),
            ("Private-key-format: v2.0\n".to_string(), 1, "unknown Private-key-format"),
            ("Private-key-format: v1.3\nPrivateKey: AAAA\n".to_string(), 0, "no `Algorithm:`"),
            (
                "Private-key-format: v1.3\nAlgorithm: ED25519\n".to_string(),
                2,
                "does not start with a number",
            ),
            (format!("{head}PrivateKey: AA!A\n"), 3, "not base64"),
            (format!("{head}PrivateKey: AAAA\nPrivateKey: AAAA\n"), 4, "given twice"),
            (format!("{head}just text\n"), 3, "expected `Name: value`"),
            (format!("{head}Activate: tomorrow\n"), 3, "Activate: \"tomorrow\" is not a time"),
        ];
        for (text, line, want) in cases {
            let e = parse_private(&text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(want), "{text:?}: {e}");
        }
        // Unknown lines and fields of other algorithms are accepted.
        let p = parse_private(&format!("{head}Modulus: AAAA\nLabel: pkcs11:x\n")).unwrap();
        assert_eq!(p.private_key, None);
    }

    #[test]
    fn rendered_files_read_back() {
        let (signer, private) = crate::model::dnssec::Signer::generate(Algorithm::Ed25519).unwrap();
        let public = signer.public_key();
        let timing =
            Timing { publish: Some(100), activate: Some(200), inactive: None, delete: Some(400) };
        let key = ZoneKey {
            flags: 257,
            algorithm: Algorithm::Ed25519,
            public_key: public.clone().into(),
            key_tag: 4242,
            signer: Some(signer),
            timing,
            source: String::new(),
        };
        let files = render("tm.example.test.", &key, &private, 50);
        assert!(files.public.starts_with("; This is a key-signing key, keyid 4242, for tm.example.test.\n; Created: 19700101000050 (1970-01-01T00:00:50Z)\n"), "{}", files.public);
        let k = parse_public(&files.public).unwrap();
        assert_eq!(
            (k.owner.as_str(), k.flags, k.algorithm, &k.public_key, k.timing),
            ("tm.example.test.", 257, 15, &public, timing)
        );
        let p = parse_private(&files.private).unwrap();
        assert_eq!(
            (p.algorithm, p.private_key.map(|(k, _)| k), p.timing),
            (15, Some(private.to_vec()), timing)
        );
        assert!(files.private.contains("\nCreated: 19700101000050\n"), "{}", files.private);
    }

    #[test]
    fn algorithm_names() {
        assert_eq!(algorithm_text(8), "8 (RSASHA256)");
        assert_eq!(algorithm_text(200), "200");
        assert_eq!(algorithm_number("ecdsap256sha256"), Some(13));
    }
}
