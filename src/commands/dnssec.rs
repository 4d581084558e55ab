//! `steerdns dnssec keygen` (new keys in BIND's key file format) and `steerdns dnssec ds`
//! (the DS records of the configured signed zones, for their parents).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use crate::config::{self, ConfigErrors, keyfile};
use crate::model::dnssec::{
    Algorithm, FLAGS_KSK, FLAGS_ZSK, Signer, Timing, ZoneKey, dnskey_rdata, key_tag,
};
use crate::wire::name::WireName;

/// How many keys are made before giving up on a tag not yet taken in the directory.
const TAG_ATTEMPTS: usize = 100;

/// Writes a CSK (flags 257), or with `ksk_zsk` a KSK (257) and a ZSK (256), for `zone`
/// into `dir`, published and active from now; returns the files' base names.
pub fn keygen(
    zone: &str,
    algorithm: Algorithm,
    ksk_zsk: bool,
    dir: &Path,
) -> anyhow::Result<Vec<String>> {
    let origin = WireName::parse(zone.trim()).map_err(anyhow::Error::msg)?;
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let timing = Timing { publish: Some(now), activate: Some(now), inactive: None, delete: None };
    let flags: &[u16] = if ksk_zsk { &[FLAGS_KSK, FLAGS_ZSK] } else { &[FLAGS_KSK] };
    let mut made: Vec<(String, u16)> = Vec::new();
    for &flags in flags {
        let (key, private, base) = new_key(&origin, flags, algorithm, timing, dir, &made)?;
        let files = keyfile::render(&origin.to_string(), &key, &private, now);
        write_pair(dir, &base, &files)?;
        made.push((base, key.key_tag));
    }
    Ok(made.into_iter().map(|(base, _)| base).collect())
}

/// A new key whose tag no key file in `dir`, and no key made before it, has (a resolver
/// tries every key of a tag, so BIND avoids sharing them too).
fn new_key(
    origin: &WireName,
    flags: u16,
    algorithm: Algorithm,
    timing: Timing,
    dir: &Path,
    made: &[(String, u16)],
) -> anyhow::Result<(ZoneKey, [u8; 32], String)> {
    for _ in 0..TAG_ATTEMPTS {
        let (signer, private) = Signer::generate(algorithm)?;
        let public = signer.public_key();
        let tag = key_tag(&dnskey_rdata(flags, algorithm, &public));
        let base = keyfile::base_name(&origin.to_string(), algorithm.number(), tag);
        let taken = made.iter().any(|(_, t)| *t == tag)
            || dir.join(format!("{base}.key")).exists()
            || dir.join(format!("{base}.private")).exists();
        if taken {
            continue;
        }
        let key = ZoneKey {
            flags,
            algorithm,
            public_key: public.into(),
            key_tag: tag,
            signer: Some(signer),
            timing,
            source: String::new(),
        };
        return Ok((key, private, base));
    }
    bail!("no free key tag in {} after {TAG_ATTEMPTS} keys", dir.display())
}

/// Writes `.private` (mode 0600) then `.key`, never over an existing file; a `.private`
/// whose `.key` cannot be written is removed again.
fn write_pair(dir: &Path, base: &str, files: &keyfile::KeyFiles) -> anyhow::Result<()> {
    let private = dir.join(format!("{base}.private"));
    let public = dir.join(format!("{base}.key"));
    write_new(&private, &files.private, 0o600)?;
    if let Err(e) = write_new(&public, &files.public, 0o644) {
        let _ = std::fs::remove_file(&private);
        return Err(e);
    }
    Ok(())
}

fn write_new(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// `steerdns dnssec ds`: for every signed zone, the DS record (SHA-256) of each published
/// SEP key, in zone-file form, as `dnssec-dsfromkey -2` prints it. Empty when no zone is
/// signed.
pub fn ds(path: &Path) -> Result<Vec<String>, ConfigErrors> {
    let snap = config::load(path, None)?.snapshot;
    let mut out = Vec::new();
    for zone in &snap.zones {
        let Some(signing) = &zone.dnssec else { continue };
        for key in signing.keys.iter().filter(|k| k.is_sep()) {
            out.push(ds_line(&zone.origin, key));
        }
    }
    Ok(out)
}

/// `tm.example.com. IN DS 12345 13 2 ABCD…`.
fn ds_line(origin: &WireName, key: &ZoneKey) -> String {
    let rdata = key.ds_rdata(origin.as_bytes());
    let digest: String = rdata[4..].iter().map(|b| format!("{b:02X}")).collect();
    format!("{origin} IN DS {} {} {} {digest}", key.key_tag, rdata[2], rdata[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keygen_writes_pairs_that_load() {
        let dir = tempfile::tempdir().unwrap();
        let made = keygen("Tm.Example.Test", Algorithm::EcdsaP256Sha256, true, dir.path()).unwrap();
        assert_eq!(made.len(), 2);
        for (base, flags) in made.iter().zip([FLAGS_KSK, FLAGS_ZSK]) {
            assert!(base.starts_with("Ktm.example.test.+013+"), "{base}");
            let key = std::fs::read_to_string(dir.path().join(format!("{base}.key"))).unwrap();
            let parsed = keyfile::parse_public(&key).unwrap();
            assert_eq!((parsed.owner.as_str(), parsed.flags), ("tm.example.test.", flags));
            let private = dir.path().join(format!("{base}.private"));
            let mode = std::fs::metadata(&private).unwrap().permissions();
            assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
        }
        assert!(
            keygen("tm.example.test.", Algorithm::Ed25519, false, &dir.path().join("no")).is_err()
        );
    }

    /// RFC 6605 §6.1's key gives its DS as `dnssec-dsfromkey -2` prints it.
    #[test]
    fn ds_lines() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let public = b64
            .decode("GojIhhXUN/u4v54ZQqGSnyhWJwaubCvTmeexv7bR6edbkrSqQpF64cYbcB7wNcP+e+MAnLr+Wi9xMWyQLc8NAA==")
            .unwrap();
        let key = ZoneKey {
            flags: FLAGS_KSK,
            algorithm: Algorithm::EcdsaP256Sha256,
            key_tag: key_tag(&dnskey_rdata(FLAGS_KSK, Algorithm::EcdsaP256Sha256, &public)),
            public_key: public.into(),
            signer: None,
            timing: Timing::default(),
            source: String::new(),
        };
        let origin = WireName::parse("example.net.").unwrap();
        assert_eq!(
            ds_line(&origin, &key),
            "example.net. IN DS 55648 13 2 B4C8C1FE2E7477127B27115656AD6256F424625BF5C1E2770CE6D6E37DF61D17"
        );
    }
}
