//! `zones[].dnssec:`: a signed zone's keys, read from its key directory (BIND's key files,
//! `keyfile`), and the signatures' timing. Every problem is an error at the key file (and
//! line) or at `dnssec.keys` in `steerdns.yaml`. Key timing (Publish, Activate, Inactive,
//! Delete) is evaluated at the time of the load: the zone gets the keys published then.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::check;
use super::keyfile::{self, KeyFileKind, KeyFileName, PrivateFile, PublicFile};
use super::raw::{Loc, RawDnssec};
use crate::diag::{self, Limit, Pos, Sink};
use crate::model::dnssec::{
    Algorithm, FLAGS_KSK, FLAGS_ZSK, Signer, ZoneKey, ZoneSigning, dnskey_rdata, key_tag,
    p256_scalar,
};
use crate::wire::name::WireName;

/// `signature_validity` when not given: 7 days.
pub const DEFAULT_VALIDITY: u32 = 7 * 86_400;
/// `inception_offset` when not given: 1 hour.
pub const DEFAULT_INCEPTION_OFFSET: u32 = 3_600;

/// What the server acts on after a load: the key directories, which the file watcher
/// watches, and the next time (Unix seconds) a key's timing changes which keys are
/// published or sign, when the server loads the configuration again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyWatch {
    pub dirs: Vec<PathBuf>,
    pub next_change: Option<u64>,
}

/// A key file is a few lines; a larger file is a mistake (a log, `/dev/zero`).
const KEY_FILE_LIMIT: Limit =
    Limit { bytes: 64 << 10, set_by: "the fixed limit for DNSSEC key files" };

/// The zone's signing, or `None` after an error (recorded in `sink`).
pub fn build(
    sink: &mut Sink<'_>,
    raw: &Loc<RawDnssec>,
    origin: &WireName,
    base: &Path,
    now: u64,
    watch: &mut KeyWatch,
) -> Option<ZoneSigning> {
    let d = &raw.value;
    let validity = seconds(
        sink,
        d.signature_validity.as_ref(),
        "signature_validity",
        (3_600, "1h"),
        (365 * 86_400, "365d"),
    )
    .unwrap_or(DEFAULT_VALIDITY);
    let inception_offset = seconds(
        sink,
        d.inception_offset.as_ref(),
        "inception_offset",
        (0, "0s"),
        (7 * 86_400, "7d"),
    )
    .unwrap_or(DEFAULT_INCEPTION_OFFSET);
    if validity <= inception_offset {
        let at = d.signature_validity.as_ref().map_or(raw.pos, |v| v.pos);
        sink.at(at, format!("dnssec.signature_validity ({validity} s) must be longer than inception_offset ({inception_offset} s): signatures would expire as they are made"));
    }
    let dir = base.join(&d.keys.value);
    if !watch.dirs.contains(&dir) {
        watch.dirs.push(dir.clone());
    }
    let errors_before = sink.errors.len();
    let files = key_files(sink, &d.keys, &dir, origin)?;
    if files.is_empty() {
        if sink.errors.len() > errors_before {
            return None;
        }
        sink.on(&d.keys, format!("no key files for {origin} in {}: a key is K{origin}+<algorithm>+<tag>.key and .private (`steerdns dnssec keygen --zone {origin} -o {}` makes them)", dir.display(), dir.display()));
        return None;
    }
    let read: Vec<ZoneKey> =
        files.into_iter().filter_map(|(name, pair)| read_key(sink, origin, name, pair)).collect();
    for key in &read {
        let t = key.timing;
        for at in [t.publish, t.activate, t.inactive, t.delete].into_iter().flatten() {
            if at > now && watch.next_change.is_none_or(|n| at < n) {
                watch.next_change = Some(at);
            }
        }
    }
    // An error in a key file says more than what it leaves missing.
    if sink.errors.len() == errors_before {
        for missing in unsigned_algorithms(&read, now) {
            let of = missing.map_or(String::new(), |a| {
                format!(" of algorithm {}", keyfile::algorithm_text(a.number()))
            });
            let keys: Vec<String> = read.iter().map(|k| describe(k, now)).collect();
            sink.on(&d.keys, format!("{origin} has no active SEP key{of}: a key with DNSKEY flags 257 (a KSK or CSK), its .private file, activated and not inactive, must sign the DNSKEY RRset; its keys in {}: {}", dir.display(), keys.join("; ")));
        }
    }
    let keys = read.into_iter().filter(|k| k.timing.published(now)).collect();
    Some(ZoneSigning { keys, validity, inception_offset })
}

/// What keeps the zone from being signed at `now`: each algorithm of its published keys
/// without an active SEP key (every algorithm of the DNSKEY RRset must sign it, RFC 4035
/// §2.2), or `None` when no key is published at all.
fn unsigned_algorithms(keys: &[ZoneKey], now: u64) -> Vec<Option<Algorithm>> {
    let mut published: Vec<Algorithm> =
        keys.iter().filter(|k| k.timing.published(now)).map(|k| k.algorithm).collect();
    published.dedup();
    if published.is_empty() {
        return vec![None];
    }
    let mut missing: Vec<Option<Algorithm>> = Vec::new();
    for a in published {
        if !missing.contains(&Some(a))
            && !keys.iter().any(|k| k.algorithm == a && signs_dnskey(k, now))
        {
            missing.push(Some(a));
        }
    }
    missing
}

/// Whether `key` signs the DNSKEY RRset at `now`: an active SEP key with a private key.
fn signs_dnskey(key: &ZoneKey, now: u64) -> bool {
    key.is_sep() && key.signer.is_some() && key.timing.active(now)
}

/// A key and its state at `now`, for the message that no key can sign.
fn describe(key: &ZoneKey, now: u64) -> String {
    let kind = if key.is_sep() { "KSK/CSK" } else { "ZSK" };
    let t = key.timing;
    let when = |at: u64| format!("{} UTC", keyfile::format_time(at));
    let state = match (t.publish, t.activate, t.inactive, t.delete) {
        (_, _, _, Some(d)) if d <= now => format!("deleted at {}", when(d)),
        (Some(p), ..) if p > now => format!("not published until {}", when(p)),
        (_, _, Some(i), _) if i <= now => format!("inactive since {}", when(i)),
        (_, Some(a), ..) if a > now => format!("not active until {}", when(a)),
        _ if key.signer.is_none() => "published only (no .private file)".to_string(),
        _ => "active".to_string(),
    };
    format!("{} {} {kind} {state}", key.key_tag, key.algorithm)
}

/// A duration key in whole seconds within `lo..=hi` (each with its text for messages).
fn seconds(
    sink: &mut Sink<'_>,
    v: Option<&Loc<String>>,
    key: &str,
    (lo, lo_text): (u32, &str),
    (hi, hi_text): (u32, &str),
) -> Option<u32> {
    let v = v?;
    let key = format!("dnssec.{key}");
    let d = check::duration(sink, v, &key)?;
    match u32::try_from(d.as_secs()) {
        Ok(s) if (lo..=hi).contains(&s) && d.subsec_nanos() == 0 => Some(s),
        _ => {
            sink.on(v, format!("{key} must be whole seconds between {lo_text} and {hi_text}"));
            None
        }
    }
}

/// The two files of one key, by their name's algorithm and tag.
#[derive(Default)]
struct Pair {
    public: Option<PathBuf>,
    private: Option<PathBuf>,
}

/// The key files of the zone `origin` in `dir`, by algorithm and tag. Files of other
/// zones (a key directory may be shared, as BIND's is) and other files are left alone;
/// a file named for this zone whose name does not say an algorithm and tag is an error.
fn key_files(
    sink: &mut Sink<'_>,
    at: &Loc<String>,
    dir: &Path,
    origin: &WireName,
) -> Option<BTreeMap<(u8, u16), Pair>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            sink.on(at, format!("cannot read the key directory {}: {e}", dir.display()));
            return None;
        }
    };
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort();
    let zone = origin.to_string();
    let mut out: BTreeMap<(u8, u16), Pair> = BTreeMap::new();
    for name in &names {
        let Some(parsed) = KeyFileName::parse(name) else { continue };
        if !parsed.zone.eq_ignore_ascii_case(&zone) {
            continue;
        }
        let path = dir.join(name);
        let Some(key) = parsed.algorithm_and_tag() else {
            let mut file = Sink { file: &path, errors: sink.errors };
            file.at(Pos::default(), format!("a key file's name is K{zone}+<algorithm>+<tag>.key or .private, such as {}.key", keyfile::base_name(&zone, 13, 12345)));
            continue;
        };
        let pair = out.entry(key).or_default();
        match parsed.kind {
            KeyFileKind::Public => pair.public = Some(path),
            KeyFileKind::Private => pair.private = Some(path),
        }
    }
    Some(out)
}

/// One key from its files, or `None` after recording what is wrong with them.
fn read_key(
    sink: &mut Sink<'_>,
    origin: &WireName,
    (name_alg, name_tag): (u8, u16),
    pair: Pair,
) -> Option<ZoneKey> {
    let Some(public_path) = pair.public else {
        let path = pair.private?;
        let mut file = Sink { file: &path, errors: sink.errors };
        let want = keyfile::base_name(&origin.to_string(), name_alg, name_tag);
        file.at(
            Pos::default(),
            format!("a private key without its public key: {want}.key is missing"),
        );
        return None;
    };
    let mut file = Sink { file: &public_path, errors: sink.errors };
    let public = read(&mut file, &public_path, keyfile::parse_public)?;
    let algorithm = check_public(&mut file, &public, origin, name_alg, name_tag)?;
    let tag = key_tag(&dnskey_rdata(public.flags, algorithm, &public.public_key));
    let mut private_part = None;
    if let Some(path) = &pair.private {
        let mut file = Sink { file: path, errors: sink.errors };
        let private = read(&mut file, path, keyfile::parse_private)?;
        let key = private_key(&mut file, &private, algorithm)?;
        let public_name =
            public_path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        match Signer::new(algorithm, key.0, &public.public_key) {
            Ok(signer) => private_part = Some((signer, private.timing)),
            Err(e) => {
                let pos = Pos { line: key.1, col: 1 };
                file.at(
                    pos,
                    format!(
                        "the private key does not belong to the public key in {public_name}: {e}"
                    ),
                );
                return None;
            }
        }
    }
    let (signer, timing) = match private_part {
        Some((signer, timing)) => (Some(signer), timing),
        None => (None, public.timing),
    };
    Some(ZoneKey {
        flags: public.flags,
        algorithm,
        public_key: public.public_key.into(),
        key_tag: tag,
        signer,
        timing,
        source: public_path.display().to_string(),
    })
}

/// Reads and parses a key file, recording the error.
fn read<T>(
    file: &mut Sink<'_>,
    path: &Path,
    parse: impl Fn(&str) -> Result<T, keyfile::KeyFileError>,
) -> Option<T> {
    let text = match diag::read_limited(path, KEY_FILE_LIMIT) {
        Ok(text) => text,
        Err(e) => {
            file.at(Pos::default(), format!("cannot read: {e}"));
            return None;
        }
    };
    parse(&text)
        .map_err(|e| file.at(Pos { line: e.line, col: if e.line == 0 { 0 } else { 1 } }, e.message))
        .ok()
}

/// The DNSKEY of a `.key` file checked against its zone and file name: its algorithm.
fn check_public(
    file: &mut Sink<'_>,
    public: &PublicFile,
    origin: &WireName,
    name_alg: u8,
    name_tag: u16,
) -> Option<Algorithm> {
    let at = Pos { line: public.line, col: 1 };
    let mut fail = |message: String| {
        file.at(at, message);
        None
    };
    match WireName::parse(&public.owner) {
        Ok(owner) if owner == *origin => {}
        Ok(owner) => {
            return fail(format!(
                "the DNSKEY's owner is {owner}, not {origin} as the file name says"
            ));
        }
        Err(e) => return fail(format!("the DNSKEY's owner: {e}")),
    }
    let Some(algorithm) = Algorithm::from_number(public.algorithm) else {
        return fail(format!(
            "algorithm {} is not supported: steerdns signs with {} and {}",
            keyfile::algorithm_text(public.algorithm),
            keyfile::algorithm_text(Algorithm::EcdsaP256Sha256.number()),
            keyfile::algorithm_text(Algorithm::Ed25519.number()),
        ));
    };
    if public.algorithm != name_alg {
        return fail(format!(
            "the DNSKEY's algorithm is {}, the file name says {}",
            keyfile::algorithm_text(public.algorithm),
            keyfile::algorithm_text(name_alg)
        ));
    }
    if public.protocol != 3 {
        return fail(format!("DNSKEY protocol {}: it is always 3", public.protocol));
    }
    match public.flags {
        FLAGS_ZSK | FLAGS_KSK => {}
        f if f & 0x80 != 0 => {
            return fail(format!(
                "flags {f}: a revoked key (REVOKE, 128), which steerdns does not publish"
            ));
        }
        f if f & 0x100 == 0 => {
            return fail(format!("flags {f}: not a zone key (no ZONE flag, 256)"));
        }
        f => return fail(format!("flags {f}: steerdns reads 256 (ZSK) and 257 (KSK or CSK)")),
    }
    let want = match algorithm {
        Algorithm::EcdsaP256Sha256 => 64,
        Algorithm::Ed25519 => 32,
    };
    if public.public_key.len() != want {
        return fail(format!(
            "the public key is {} bytes; an {algorithm} public key is {want}",
            public.public_key.len()
        ));
    }
    let tag = key_tag(&dnskey_rdata(public.flags, algorithm, &public.public_key));
    if tag != name_tag {
        return fail(format!("the key's tag is {tag}, the file name says {name_tag}"));
    }
    Some(algorithm)
}

/// The private key of a `.private` file of a key of `algorithm`, and its line.
fn private_key<'a>(
    file: &mut Sink<'_>,
    private: &'a PrivateFile,
    algorithm: Algorithm,
) -> Option<(&'a [u8], u32)> {
    if private.algorithm != algorithm.number() {
        let at = Pos { line: private.algorithm_line, col: 1 };
        file.at(
            at,
            format!(
                "Algorithm is {}, the public key's is {}",
                keyfile::algorithm_text(private.algorithm),
                keyfile::algorithm_text(algorithm.number())
            ),
        );
        return None;
    }
    let Some((key, line)) = &private.private_key else {
        file.at(Pos::default(), "no `PrivateKey:` line");
        return None;
    };
    // A P-256 scalar may be shorter (BIND leaves out leading zero bytes, `p256_scalar`);
    // an Ed25519 seed is always 32 bytes.
    let bad = match algorithm {
        Algorithm::EcdsaP256Sha256 => p256_scalar(key).err().map(|e| e.0),
        Algorithm::Ed25519 => (key.len() != 32).then(|| {
            format!(
                "PrivateKey holds {} bytes, an {algorithm} private key 32: truncated, or not a key of this algorithm",
                key.len()
            )
        }),
    };
    if let Some(message) = bad {
        file.at(Pos { line: *line, col: 1 }, message);
        return None;
    }
    Some((key, *line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dnssec::Timing;

    fn key(flags: u16, signer: bool, timing: Timing) -> ZoneKey {
        let (s, _) = Signer::generate(Algorithm::Ed25519).unwrap();
        ZoneKey {
            flags,
            algorithm: Algorithm::Ed25519,
            public_key: s.public_key().into(),
            key_tag: 1,
            signer: signer.then_some(s),
            timing,
            source: String::new(),
        }
    }

    #[test]
    fn key_states() {
        let t =
            |publish, activate, inactive, delete| Timing { publish, activate, inactive, delete };
        let cases = [
            (key(257, true, Timing::default()), true, "active"),
            (key(257, false, Timing::default()), false, "published only"),
            (key(256, true, Timing::default()), false, "ZSK active"),
            (
                key(257, true, t(Some(200), None, None, None)),
                false,
                "not published until 19700101000320 UTC",
            ),
            (key(257, true, t(None, Some(200), None, None)), false, "not active until"),
            (key(257, true, t(None, None, Some(100), None)), false, "inactive since"),
            (key(257, true, t(None, None, None, Some(100))), false, "deleted at"),
            (key(257, true, t(Some(50), Some(100), Some(200), Some(300))), true, "active"),
        ];
        for (i, (k, signs, state)) in cases.iter().enumerate() {
            assert_eq!(signs_dnskey(k, 150), *signs, "case {i}");
            let text = describe(k, 150);
            assert!(text.contains(state), "case {i}: {text}");
            let missing = unsigned_algorithms(std::slice::from_ref(k), 150);
            let want = match (signs, k.timing.published(150)) {
                (true, _) => vec![],
                (false, true) => vec![Some(Algorithm::Ed25519)],
                (false, false) => vec![None],
            };
            assert_eq!(missing, want, "case {i}");
        }
    }

    /// A published algorithm needs an active SEP key of its own: a ZSK of another
    /// algorithm does not count, nor does a SEP key of another algorithm.
    #[test]
    fn every_published_algorithm_signs() {
        let mut ecdsa = key(257, true, Timing::default());
        let (s, _) = Signer::generate(Algorithm::EcdsaP256Sha256).unwrap();
        ecdsa.algorithm = Algorithm::EcdsaP256Sha256;
        ecdsa.public_key = s.public_key().into();
        ecdsa.signer = Some(s);
        let ed_zsk = key(256, true, Timing::default());
        let ed_ksk = key(257, true, Timing::default());
        let later = Timing { publish: Some(200), ..Timing::default() };
        let ed_later = key(257, true, later);
        assert_eq!(
            unsigned_algorithms(&[ecdsa.clone(), ed_zsk.clone()], 150),
            vec![Some(Algorithm::Ed25519)]
        );
        assert_eq!(unsigned_algorithms(&[ecdsa.clone(), ed_zsk, ed_ksk], 150), vec![]);
        assert_eq!(unsigned_algorithms(&[ecdsa, ed_later], 150), vec![]);
    }
}
