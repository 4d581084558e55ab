//! Signing one RRset of a signed zone: which keys sign it, the key that names it in a
//! signature cache, the RRSIG itself and when it must be made again. Shared by the
//! responder (signing on a cache miss) and the pre-signer (signing ahead of queries).

use std::hash::Hasher;
use std::sync::OnceLock;

use arrayvec::ArrayVec;
use siphasher::sip128::{Hasher128, SipHasher13};

use super::dnssec::{ZoneKey, ZoneSigning};
use crate::wire::Rtype;
use crate::wire::dnssec::{Canonical, RrsigHead, label_count, signed_data};

/// One RRSIG's signature with its validity period; the other RRSIG fields follow from the
/// key and the RRset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    pub inception: u32,
    pub expiration: u32,
    pub bytes: [u8; 64],
}

impl Signature {
    /// Whether the signature may still be handed out at `now`: more than half of its
    /// validity remains. Past that it is made again, so a resolver that caches it for its
    /// TTL never holds an expired one.
    pub fn fresh(&self, now: u32) -> bool {
        let validity = self.expiration.wrapping_sub(self.inception);
        now >= self.inception && self.expiration.saturating_sub(now) > validity / 2
    }
}

/// One RRset to sign. `owner` is lower-case, uncompressed wire format; `rdata` yields the
/// RDATA of each record (in any order).
#[derive(Clone, Copy, Debug)]
pub struct Rrset<'a, I> {
    pub owner: &'a [u8],
    pub rtype: Rtype,
    pub ttl: u32,
    pub rdata: I,
}

/// The apex types the SEP keys sign (RFC 4035 §2.1, RFC 7344 §4.1).
pub fn is_key_set(rtype: Rtype) -> bool {
    matches!(rtype, Rtype::DNSKEY | Rtype::CDS | Rtype::CDNSKEY)
}

/// Whether `key` signs RRsets of `rtype` at `now` (Unix seconds). Only active keys with a
/// private key sign. SEP keys (KSK, CSK) sign DNSKEY, CDS and CDNSKEY; every other RRset is
/// signed by the zone-signing keys, and by a SEP key only when no zone-signing key of its
/// algorithm is active (then it is a CSK). Should a zone have no active SEP key, its
/// zone-signing keys sign the key sets too.
pub fn signs(signing: &ZoneSigning, key: &ZoneKey, rtype: Rtype, now: u64) -> bool {
    let able = |k: &ZoneKey| k.signer.is_some() && k.timing.active(now);
    if !able(key) {
        return false;
    }
    if is_key_set(rtype) {
        key.is_sep() || !signing.keys.iter().any(|k| k.is_sep() && able(k))
    } else {
        !key.is_sep()
            || !signing.keys.iter().any(|k| !k.is_sep() && k.algorithm == key.algorithm && able(k))
    }
}

/// The per-process key of the content hash: the cache is keyed by what an attacker can
/// partly choose (a query name), so its collisions must not be predictable.
fn hash_keys() -> (u64, u64) {
    static KEYS: OnceLock<(u64, u64)> = OnceLock::new();
    *KEYS.get_or_init(|| {
        let mut b = [0u8; 16];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
            .expect("the system random source works");
        let (a, c) = b.split_at(8);
        (u64::from_le_bytes(a.try_into().unwrap()), u64::from_le_bytes(c.try_into().unwrap()))
    })
}

/// What names one signature in a cache: the key and the RRset's content
/// (owner, type, TTL and the set of RDATA, whatever their order). Equal keys mean the same
/// data to sign, so a signature is reused wherever the same RRset appears, across reloads.
pub fn content_key<'r, I>(key: &ZoneKey, set: &Rrset<'_, I>) -> u128
where
    I: Iterator<Item = &'r [u8]> + Clone,
{
    rrset_hash(set) ^ key_id(key)
}

/// The keyed hash of an RRset: computed once per RRset, whatever the number of keys that
/// sign it. The owner decides the zone, so the zone's origin need not be hashed. The fields
/// go to the hasher in one piece: many small writes cost more than the hashing.
pub fn rrset_hash<'r, I>(set: &Rrset<'_, I>) -> u128
where
    I: Iterator<Item = &'r [u8]> + Clone,
{
    let (k0, k1) = hash_keys();
    let mut buf: ArrayVec<u8, { 255 + 2 + 4 + 2 + 2 + 512 }> = ArrayVec::new();
    let _ = buf.try_extend_from_slice(set.owner);
    let _ = buf.try_extend_from_slice(&set.rtype.to_be_bytes());
    let _ = buf.try_extend_from_slice(&set.ttl.to_be_bytes());
    let mut records = set.rdata.clone();
    match (records.next(), records.next()) {
        (None, _) => buf.push(0),
        // One record, the usual answer: hashed as it is, when it fits.
        (Some(rd), None) if rd.len() <= 512 => {
            buf.push(1);
            let _ = buf.try_extend_from_slice(&(rd.len() as u16).to_be_bytes());
            let _ = buf.try_extend_from_slice(rd);
        }
        // A sum of per-record hashes: the same set in another order has the same key.
        _ => {
            let mut sum = 0u128;
            let mut count = 0u16;
            for rd in set.rdata.clone() {
                let mut r = SipHasher13::new_with_keys(k0, k1);
                r.write(rd);
                sum = sum.wrapping_add(r.finish128().as_u128());
                count = count.wrapping_add(1);
            }
            buf.push(2);
            let _ = buf.try_extend_from_slice(&count.to_be_bytes());
            let _ = buf.try_extend_from_slice(&sum.to_be_bytes());
        }
    }
    let mut h = SipHasher13::new_with_keys(k0, k1);
    h.write(&buf);
    h.finish128().as_u128()
}

/// What tells a zone's keys apart in a content key: the public key's first bytes (random
/// for every key), its tag, algorithm and flags.
pub fn key_id(key: &ZoneKey) -> u128 {
    let mut b = [0u8; 16];
    let n = key.public_key.len().min(12);
    b[..n].copy_from_slice(&key.public_key[..n]);
    b[12..14].copy_from_slice(&key.key_tag.to_be_bytes());
    b[14] = key.algorithm.number();
    b[15] = key.flags as u8;
    u128::from_le_bytes(b)
}

/// Reused space for making signatures: the canonical RRset and the signed data. One per
/// signing thread; sized once for the usual RRsets, it grows to the largest signed and
/// then stays, so signing allocates nothing.
#[derive(Debug)]
pub struct Scratch {
    canonical: Canonical,
    data: Vec<u8>,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch { canonical: Canonical::with_capacity(64, 4096), data: Vec::with_capacity(8192) }
    }
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch::new()
    }
}

/// Signs `set`, all of its records, with `key` for the zone at `origin`: inception
/// `now - inception_offset`, expiration `validity` later.
pub fn sign<'r, I>(
    signing: &ZoneSigning,
    key: &ZoneKey,
    origin: &[u8],
    set: &Rrset<'_, I>,
    now: u32,
    scratch: &mut Scratch,
) -> Option<Signature>
where
    I: Iterator<Item = &'r [u8]> + Clone,
{
    let signer = key.signer.as_ref()?;
    let inception = now.saturating_sub(signing.inception_offset);
    let expiration = inception.saturating_add(signing.validity);
    let head = rrsig_head(
        key,
        set.owner,
        set.rtype,
        set.ttl,
        Signature { inception, expiration, bytes: [0; 64] },
    );
    let Scratch { canonical, data } = scratch;
    signed_data(&head, origin, set.owner, set.rdata.clone(), canonical, data);
    Some(Signature { inception, expiration, bytes: signer.sign(data) })
}

/// The RRSIG fields of `sig`, made by `key` over the RRset of `rtype` at `owner`.
pub fn rrsig_head(
    key: &ZoneKey,
    owner: &[u8],
    rtype: Rtype,
    ttl: u32,
    sig: Signature,
) -> RrsigHead {
    RrsigHead {
        type_covered: rtype,
        algorithm: key.algorithm.number(),
        labels: label_count(owner),
        original_ttl: ttl,
        expiration: sig.expiration,
        inception: sig.inception,
        key_tag: key.key_tag,
    }
}

/// The keys in the apex's DNSKEY RRset at `now` (at most 16).
pub fn published(signing: &ZoneSigning, now: u64) -> impl Iterator<Item = &ZoneKey> + Clone {
    signing.keys.iter().filter(move |k| k.timing.published(now)).take(16)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::dnssec::{Algorithm, FLAGS_KSK, FLAGS_ZSK, Signer, Timing, key_tag};

    /// A zone key made from a fixed seed (Ed25519) or a fresh P-256 key.
    pub(crate) fn test_key(algorithm: Algorithm, flags: u16, seed: u8) -> ZoneKey {
        use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let (private, public) = match algorithm {
            Algorithm::Ed25519 => {
                let pair = Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap();
                (vec![seed; 32], pair.public_key().as_ref().to_vec())
            }
            Algorithm::EcdsaP256Sha256 => {
                let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
                let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
                let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
                // The private scalar sits at a fixed place in ring's PKCS#8 document.
                let doc = pkcs8.as_ref();
                (doc[36..68].to_vec(), pair.public_key().as_ref()[1..].to_vec())
            }
        };
        let signer = Signer::new(algorithm, &private, &public).unwrap();
        let rdata = crate::model::dnssec::dnskey_rdata(flags, algorithm, &public);
        ZoneKey {
            flags,
            algorithm,
            public_key: public.into(),
            key_tag: key_tag(&rdata),
            signer: Some(signer),
            timing: Timing::default(),
            source: "test".into(),
        }
    }

    fn zone(keys: Vec<ZoneKey>) -> ZoneSigning {
        ZoneSigning { keys, validity: 1000, inception_offset: 100 }
    }

    #[test]
    fn which_keys_sign_what() {
        let ksk = test_key(Algorithm::Ed25519, FLAGS_KSK, 1);
        let zsk = test_key(Algorithm::Ed25519, FLAGS_ZSK, 2);
        let mut retired = test_key(Algorithm::Ed25519, FLAGS_ZSK, 3);
        retired.timing.inactive = Some(50);
        let mut public_only = test_key(Algorithm::Ed25519, FLAGS_ZSK, 4);
        public_only.signer = None;
        let split = zone(vec![ksk.clone(), zsk.clone(), retired.clone(), public_only.clone()]);
        let csk = zone(vec![ksk.clone(), retired.clone()]);
        let zsk_only = zone(vec![zsk.clone()]);
        // (zone, key, type, signs)
        let cases = [
            (&split, &ksk, Rtype::DNSKEY, true),
            (&split, &ksk, Rtype::A, false),
            (&split, &zsk, Rtype::DNSKEY, false),
            (&split, &zsk, Rtype::CDS, false),
            (&split, &zsk, Rtype::A, true),
            (&split, &retired, Rtype::A, false),
            (&split, &public_only, Rtype::A, false),
            (&csk, &ksk, Rtype::A, true),
            (&csk, &ksk, Rtype::CDNSKEY, true),
            (&zsk_only, &zsk, Rtype::DNSKEY, true),
        ];
        for (i, (z, k, t, want)) in cases.into_iter().enumerate() {
            assert_eq!(signs(z, k, t, 100), want, "case {i}");
        }
    }

    #[test]
    fn a_signature_is_fresh_until_half_its_validity_is_left() {
        let sig = Signature { inception: 900, expiration: 1900, bytes: [0; 64] };
        let cases = [(899, false), (900, true), (1399, true), (1400, false), (1900, false)];
        for (now, want) in cases {
            assert_eq!(sig.fresh(now), want, "at {now}");
        }
    }

    #[test]
    fn content_keys_ignore_order_and_tell_sets_apart() {
        let key = test_key(Algorithm::Ed25519, FLAGS_KSK, 1);
        let other = test_key(Algorithm::Ed25519, FLAGS_KSK, 2);
        let set = |owner: &'static [u8], ttl, rd: &'static [&'static [u8]]| Rrset {
            owner,
            rtype: Rtype::A,
            ttl,
            rdata: rd.iter().copied(),
        };
        let k = |key: &ZoneKey, s: &Rrset<'static, _>| content_key(key, s);
        let ab = set(b"\x01w\x02ex\x00", 60, &[&[1, 2, 3, 4], &[5, 6, 7, 8]]);
        let ba = set(b"\x01w\x02ex\x00", 60, &[&[5, 6, 7, 8], &[1, 2, 3, 4]]);
        assert_eq!(k(&key, &ab), k(&key, &ba));
        let differ = [
            set(b"\x01w\x02ex\x00", 61, &[&[1, 2, 3, 4], &[5, 6, 7, 8]]),
            set(b"\x01v\x02ex\x00", 60, &[&[1, 2, 3, 4], &[5, 6, 7, 8]]),
            set(b"\x01w\x02ex\x00", 60, &[&[1, 2, 3, 4]]),
            set(b"\x01w\x02ex\x00", 60, &[&[1, 2, 3, 4], &[5, 6, 7, 8], &[5, 6, 7, 8]]),
        ];
        for d in &differ {
            assert_ne!(k(&key, &ab), k(&key, d), "{d:?}");
        }
        assert_ne!(k(&key, &ab), k(&other, &ab));
    }

    #[test]
    fn a_signature_verifies_over_the_canonical_rrset() {
        for algorithm in [Algorithm::Ed25519, Algorithm::EcdsaP256Sha256] {
            let key = test_key(algorithm, FLAGS_KSK, 9);
            let z = zone(vec![key.clone()]);
            let rdatas: [&[u8]; 2] = [&[192, 0, 2, 2], &[192, 0, 2, 1]];
            let set = Rrset {
                owner: b"\x01w\x02ex\x00",
                rtype: Rtype::A,
                ttl: 60,
                rdata: rdatas.iter().copied(),
            };
            let mut scratch = Scratch::new();
            let sig = sign(&z, &key, b"\x02ex\x00", &set, 10_000, &mut scratch).unwrap();
            assert_eq!((sig.inception, sig.expiration), (9_900, 10_900));
            let verifier: &'static dyn ring::signature::VerificationAlgorithm = match algorithm {
                Algorithm::Ed25519 => &ring::signature::ED25519,
                Algorithm::EcdsaP256Sha256 => &ring::signature::ECDSA_P256_SHA256_FIXED,
            };
            let public = match algorithm {
                Algorithm::Ed25519 => key.public_key.to_vec(),
                Algorithm::EcdsaP256Sha256 => [&[4u8][..], &key.public_key].concat(),
            };
            // The signed data, rebuilt independently of `sign`'s order.
            let head = rrsig_head(&key, set.owner, Rtype::A, 60, sig);
            let mut data = head.bytes().to_vec();
            data.extend_from_slice(b"\x02ex\x00");
            for a in [1u8, 2] {
                data.extend_from_slice(b"\x01w\x02ex\x00\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04");
                data.extend_from_slice(&[192, 0, 2, a]);
            }
            ring::signature::UnparsedPublicKey::new(verifier, public)
                .verify(&data, &sig.bytes)
                .expect("the signature verifies");
        }
    }

    /// RFC 8080 §6.1 and §6.2 (as corrected by erratum 4935: Labels 2): Ed25519 signs
    /// deterministically, so the example zone's DNSKEY, key tag, DS and the MX RRset's
    /// signature are exact bytes.
    #[test]
    fn rfc8080_ed25519_examples() {
        use base64::Engine;
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.decode(t).unwrap();
        let origin = b"\x07example\x03com\x00";
        // (private key, public key, key tag, DS digest, MX RRSIG signature)
        let cases = [
            (
                "ODIyNjAzODQ2MjgwODAxMjI2NDUxOTAyMDQxNDIyNjI=",
                "l02Woi0iS8Aa25FQkUd9RMzZHJpBoRQwAQEX1SxZJA4=",
                3613,
                "3aa5ab37efce57f737fc1627013fee07bdf241bd10f3b1964ab55c78e79a304b",
                "oL9krJun7xfBOIWcGHi7mag5/hdZrKWw15jPGrHpjQeRAvTdszaPD+QLs3fx8A4M3e23mRZ9VrbpMngwcrqNAg==",
            ),
            (
                "DSSF3o0s0f+ElWzj9E/Osxw8hLpk55chkmx0LYN5WiY=",
                "zPnZ/QwEe7S8C5SPz2OfS5RR40ATk2/rYnE9xHIEijs=",
                35217,
                "401781b934e392de492ec77ae2e15d70f6575a1c0bc59c5275c04ebe80c6614c",
                "zXQ0bkYgQTEFyfLyi9QoiY6D8ZdYo4wyUhVioYZXFdT410QPRITQSqJSnzQoSm5poJ7gD7AQR0O7KuI5k2pcBg==",
            ),
        ];
        for (private, public, tag, ds, sig) in cases {
            let (private, public) = (b64(private), b64(public));
            let signer = Signer::new(Algorithm::Ed25519, &private, &public).unwrap();
            let dnskey = crate::model::dnssec::dnskey_rdata(FLAGS_KSK, Algorithm::Ed25519, &public);
            // 257 3 15 and the RFC's public key, which the seed gives (`Signer::new` checks).
            assert_eq!(dnskey.to_vec(), [&[1, 1, 3, 15][..], &public].concat());
            assert_eq!(signer.public_key(), public);
            let key = ZoneKey {
                flags: FLAGS_KSK,
                algorithm: Algorithm::Ed25519,
                public_key: public.into(),
                key_tag: key_tag(&dnskey),
                signer: Some(signer),
                timing: Timing::default(),
                source: "RFC 8080".into(),
            };
            assert_eq!(key.key_tag, tag);
            let want_ds = [&tag.to_be_bytes()[..], &[15, 2], &crate::wire::unhex(ds)].concat();
            assert_eq!(key.ds_rdata(origin).to_vec(), want_ds, "{tag}");
            // example.com. 3600 IN MX 10 mail.example.com., signed from 2015-07-29 22:00
            // (1438207200) to 2015-08-19 22:00 (1440021600).
            let z =
                ZoneSigning { keys: vec![key.clone()], validity: 1_814_400, inception_offset: 0 };
            let mx: &[u8] = b"\x00\x0a\x04mail\x07example\x03com\x00";
            let set = Rrset { owner: origin, rtype: Rtype::MX, ttl: 3600, rdata: [mx].into_iter() };
            let made = sign(&z, &key, origin, &set, 1_438_207_200, &mut Scratch::new()).unwrap();
            assert_eq!((made.inception, made.expiration), (1_438_207_200, 1_440_021_600));
            assert_eq!(made.bytes.to_vec(), b64(sig), "{tag}");
            assert_eq!(rrsig_head(&key, origin, Rtype::MX, 3600, made).labels, 2);
        }
    }
}
