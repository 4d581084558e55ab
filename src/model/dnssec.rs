//! The DNSSEC keys of a signed zone: what the apex publishes as DNSKEY, which keys sign, and
//! the signing itself (ring). Read from key files by `config`, used by the responder to sign
//! answers; nothing here does I/O.

use std::fmt;
use std::sync::Arc;

use arrayvec::ArrayVec;

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};

/// A DNSSEC signing algorithm steerdns signs with (RFC 8624 recommends both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// 13: ECDSA over P-256 with SHA-256 (RFC 6605).
    EcdsaP256Sha256,
    /// 15: Ed25519 (RFC 8080).
    Ed25519,
}

impl Algorithm {
    pub fn number(self) -> u8 {
        match self {
            Algorithm::EcdsaP256Sha256 => 13,
            Algorithm::Ed25519 => 15,
        }
    }

    pub fn from_number(n: u8) -> Option<Algorithm> {
        match n {
            13 => Some(Algorithm::EcdsaP256Sha256),
            15 => Some(Algorithm::Ed25519),
            _ => None,
        }
    }

    /// The name BIND's key files and `dnssec-keygen -a` use.
    pub fn mnemonic(self) -> &'static str {
        match self {
            Algorithm::EcdsaP256Sha256 => "ECDSAP256SHA256",
            Algorithm::Ed25519 => "ED25519",
        }
    }

    /// Length of a signature, and of the public key in DNSKEY RDATA.
    pub fn signature_len(self) -> usize {
        64
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mnemonic())
    }
}

/// DNSKEY flags: ZONE (256) on every key, plus SEP (1) on a KSK or CSK.
pub const FLAGS_ZSK: u16 = 256;
pub const FLAGS_KSK: u16 = 257;

/// A private key that signs. Cheap to clone (shared).
#[derive(Clone)]
pub struct Signer(Arc<SignerKey>);

enum SignerKey {
    Ecdsa(EcdsaKeyPair, SystemRandom),
    Ed25519(Ed25519KeyPair),
}

/// A private key that does not match its public key, or is not a key of its algorithm.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadKey(pub String);

impl Signer {
    /// The signer for `private` (the P-256 scalar, or the Ed25519 seed, as BIND's
    /// `PrivateKey:` holds it: see `p256_scalar`), checked against `public` (the DNSKEY
    /// public key field).
    pub fn new(algorithm: Algorithm, private: &[u8], public: &[u8]) -> Result<Signer, BadKey> {
        let key = match algorithm {
            Algorithm::EcdsaP256Sha256 => {
                let scalar = p256_scalar(private)?;
                // ring wants the public key as an uncompressed SEC1 point; DNSKEY leaves
                // out the 0x04 prefix (RFC 6605 §4).
                let sec1 = [&[4u8][..], public].concat();
                let rng = SystemRandom::new();
                let pair = EcdsaKeyPair::from_private_key_and_public_key(
                    &ECDSA_P256_SHA256_FIXED_SIGNING,
                    &scalar,
                    &sec1,
                    &rng,
                )
                .map_err(|e| BadKey(format!("not a matching P-256 key pair: {e}")))?;
                SignerKey::Ecdsa(pair, rng)
            }
            Algorithm::Ed25519 => {
                let pair = Ed25519KeyPair::from_seed_and_public_key(private, public)
                    .map_err(|e| BadKey(format!("not a matching Ed25519 key pair: {e}")))?;
                SignerKey::Ed25519(pair)
            }
        };
        Ok(Signer(Arc::new(key)))
    }

    /// A new random key: the signer, and the private key as BIND's `PrivateKey:` holds it
    /// (the P-256 scalar, or the Ed25519 seed).
    pub fn generate(algorithm: Algorithm) -> Result<(Signer, [u8; 32]), BadKey> {
        let rng = SystemRandom::new();
        let no_random = |_| BadKey("the system random source failed".into());
        let (private, public) = match algorithm {
            Algorithm::EcdsaP256Sha256 => {
                let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map_err(no_random)?;
                p256_from_pkcs8(pkcs8.as_ref())?
            }
            Algorithm::Ed25519 => {
                let mut seed = [0u8; 32];
                rng.fill(&mut seed).map_err(no_random)?;
                let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
                    .map_err(|e| BadKey(format!("Ed25519 key from a seed: {e}")))?;
                (seed, pair.public_key().as_ref().to_vec())
            }
        };
        // Checks the pair too: a PKCS#8 layout other than the expected one fails here.
        Ok((Signer::new(algorithm, &private, &public)?, private))
    }

    /// Signs `data` (RFC 4034 §3.1.8.1: RRSIG RDATA without the signature, then the
    /// RRset in canonical form); the signature as RRSIG carries it (64 bytes: r | s for
    /// ECDSA, RFC 6605 §4; the Ed25519 signature, RFC 8080 §4).
    pub fn sign(&self, data: &[u8]) -> [u8; 64] {
        let mut out = [0u8; 64];
        match &*self.0 {
            SignerKey::Ecdsa(pair, rng) => {
                // Signing fails only when the system's random source does.
                let sig = pair.sign(rng, data).expect("the system random source works");
                out.copy_from_slice(sig.as_ref());
            }
            SignerKey::Ed25519(pair) => out.copy_from_slice(pair.sign(data).as_ref()),
        }
        out
    }

    /// The public key, as the DNSKEY public key field holds it.
    pub fn public_key(&self) -> Vec<u8> {
        match &*self.0 {
            SignerKey::Ecdsa(pair, _) => pair.public_key().as_ref()[1..].to_vec(),
            SignerKey::Ed25519(pair) => pair.public_key().as_ref().to_vec(),
        }
    }
}

/// The 32-byte P-256 scalar of a `PrivateKey:` field. BIND writes the scalar as a number
/// without its leading zero bytes (about one key in 256 has 31 bytes, one in 65536 has 30),
/// so a shorter field is padded on the left. A field over 32 bytes, or a zero scalar, is no
/// P-256 key; one not below the group order is refused by ring when the pair is checked.
pub fn p256_scalar(private: &[u8]) -> Result<[u8; 32], BadKey> {
    if private.len() > 32 {
        return Err(BadKey(format!(
            "PrivateKey holds {} bytes, more than the 32 of a P-256 private key",
            private.len()
        )));
    }
    if private.iter().all(|&b| b == 0) {
        return Err(BadKey("PrivateKey is zero, which is no P-256 private key".into()));
    }
    let mut scalar = [0u8; 32];
    scalar[32 - private.len()..].copy_from_slice(private);
    Ok(scalar)
}

/// The start of the PKCS#8 document ring writes for a new P-256 key, up to the private
/// scalar (RFC 5208 `PrivateKeyInfo` holding an RFC 5915 `ECPrivateKey`): SEQUENCE, version
/// 0, the algorithm (id-ecPublicKey, prime256v1), then the OCTET STRING of the
/// `ECPrivateKey`: SEQUENCE, version 1, OCTET STRING of 32 bytes.
const P256_PKCS8_HEAD: [u8; 36] = [
    0x30, 0x81, 0x87, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02,
    0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x6d, 0x30, 0x6b, 0x02,
    0x01, 0x01, 0x04, 0x20,
];

/// After the scalar: `[1]` publicKey, a BIT STRING of 66 bytes (no unused bits), holding the
/// uncompressed point (0x04, x, y).
const P256_PKCS8_PUBLIC: [u8; 6] = [0xa1, 0x44, 0x03, 0x42, 0x00, 0x04];

/// The scalar (bytes 36..68) and the public key as DNSKEY holds it, x and y (bytes
/// 74..138), of ring's P-256 PKCS#8 document. ring offers no other way to the raw scalar,
/// which BIND's key files hold; the layout is checked byte for byte rather than assumed.
fn p256_from_pkcs8(doc: &[u8]) -> Result<([u8; 32], Vec<u8>), BadKey> {
    let layout_ok =
        doc.len() == 138 && doc[..36] == P256_PKCS8_HEAD && doc[68..74] == P256_PKCS8_PUBLIC;
    if !layout_ok {
        return Err(BadKey("ring wrote a P-256 PKCS#8 document of an unknown layout".into()));
    }
    let mut scalar = [0u8; 32];
    scalar.copy_from_slice(&doc[36..68]);
    Ok((scalar, doc[74..].to_vec()))
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Signer(..)")
    }
}

/// When a key is published and used, in Unix seconds (BIND's key file timing metadata).
/// `None`: no such event (published and active from the start, never retired).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    pub publish: Option<u64>,
    pub activate: Option<u64>,
    pub inactive: Option<u64>,
    pub delete: Option<u64>,
}

impl Timing {
    /// Whether the DNSKEY is in the apex's DNSKEY RRset at `now`.
    pub fn published(&self, now: u64) -> bool {
        self.publish.is_none_or(|t| t <= now) && self.delete.is_none_or(|t| now < t)
    }

    /// Whether the key signs at `now` (it must also be published and have a private key).
    pub fn active(&self, now: u64) -> bool {
        self.published(now)
            && self.activate.is_none_or(|t| t <= now)
            && self.inactive.is_none_or(|t| now < t)
    }
}

/// One key of a zone.
#[derive(Clone, Debug)]
pub struct ZoneKey {
    /// `FLAGS_ZSK` or `FLAGS_KSK`.
    pub flags: u16,
    pub algorithm: Algorithm,
    /// The DNSKEY public key field.
    pub public_key: Box<[u8]>,
    pub key_tag: u16,
    /// `None` when only the public key is there: published, never signing.
    pub signer: Option<Signer>,
    pub timing: Timing,
    /// Where it was read from, for messages.
    pub source: String,
}

impl ZoneKey {
    /// Whether this key has the SEP flag (a KSK or CSK): it signs the DNSKEY RRset and
    /// gives the DS records.
    pub fn is_sep(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The DNSKEY RDATA: flags, protocol 3, algorithm, public key (RFC 4034 §2.1).
    pub fn dnskey_rdata(&self) -> DnskeyRdata {
        dnskey_rdata(self.flags, self.algorithm, &self.public_key)
    }

    /// The DS RDATA with a SHA-256 digest (RFC 4034 §5.1.4, RFC 4509), for `owner` (the
    /// zone's apex, wire format, lower case). CDS carries the same. Allocates nothing, so
    /// the query path answers CDS with it.
    pub fn ds_rdata(&self, owner: &[u8]) -> [u8; 36] {
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        digest.update(owner);
        digest.update(&self.dnskey_rdata());
        let mut out = [0u8; 36];
        out[..2].copy_from_slice(&self.key_tag.to_be_bytes());
        out[2] = self.algorithm.number();
        out[3] = 2;
        out[4..].copy_from_slice(digest.finish().as_ref());
        out
    }
}

/// DNSKEY RDATA, held inline: a P-256 public key (64 bytes) and the four bytes before it.
pub type DnskeyRdata = ArrayVec<u8, 68>;

/// DNSKEY RDATA from its fields; a public key longer than 64 bytes (no algorithm steerdns
/// signs with has one, and `config` refuses it) is cut there.
pub fn dnskey_rdata(flags: u16, algorithm: Algorithm, public_key: &[u8]) -> DnskeyRdata {
    let mut out = DnskeyRdata::new();
    out.extend(flags.to_be_bytes());
    out.extend([3, algorithm.number()]);
    let _ = out.try_extend_from_slice(&public_key[..public_key.len().min(64)]);
    out
}

/// The key tag of a DNSKEY RDATA (RFC 4034 Appendix B).
pub fn key_tag(dnskey_rdata: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    for (i, b) in dnskey_rdata.iter().enumerate() {
        acc += if i & 1 == 0 { u32::from(*b) << 8 } else { u32::from(*b) };
    }
    acc += (acc >> 16) & 0xffff;
    (acc & 0xffff) as u16
}

/// How a zone is signed: its keys and the signatures' timing.
#[derive(Clone, Debug)]
pub struct ZoneSigning {
    /// The keys published when the configuration was loaded (a key whose time comes
    /// later is added or removed by a reload at that time); a key signs while it has a
    /// signer and `timing.active(now)`.
    pub keys: Vec<ZoneKey>,
    /// How long a signature is valid from its inception (seconds).
    pub validity: u32,
    /// How far before the signing time the inception is set, for clocks behind ours.
    pub inception_offset: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::unhex;

    /// RFC 6605 §6.1: the P-256 example key's DNSKEY, key tag and SHA-256 DS.
    #[test]
    fn rfc6605_example_key_tag_and_ds() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let public = b64
            .decode(
                "GojIhhXUN/u4v54ZQqGSnyhWJwaubCvTmeexv7bR6edbkrSqQpF64cYbcB7wNcP+e+MAnLr+Wi9xMWyQLc8NAA==",
            )
            .unwrap();
        let private = b64.decode("GU6SnQ/Ou+xC5RumuIUIuJZteXT2z0O/ok1s38Et6mQ=").unwrap();
        let signer = Signer::new(Algorithm::EcdsaP256Sha256, &private, &public).unwrap();
        assert_eq!(signer.public_key(), public);
        let rdata = dnskey_rdata(FLAGS_KSK, Algorithm::EcdsaP256Sha256, &public);
        let key = ZoneKey {
            flags: FLAGS_KSK,
            algorithm: Algorithm::EcdsaP256Sha256,
            public_key: public.into(),
            key_tag: key_tag(&rdata),
            signer: Some(signer),
            timing: Timing::default(),
            source: "RFC 6605".into(),
        };
        assert_eq!(key.key_tag, 55648);
        // As `dnssec-dsfromkey -2` prints it.
        let owner = b"\x07example\x03net\x00";
        let want = "D9600D02 B4C8C1FE2E7477127B27115656AD6256F424625BF5C1E2770CE6D6E37DF61D17";
        assert_eq!(key.ds_rdata(owner).to_vec(), unhex(want));
    }

    /// BIND leaves out a scalar's leading zero bytes: the same key written short loads and
    /// signs as when written in full; a zero or too long field is no key.
    #[test]
    fn short_p256_scalars_are_padded() {
        let b64 = |t: &str| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(t).unwrap()
        };
        // RFC 6605 §6.1's key, its scalar with two leading zero bytes put in place of
        // its first two (a different, valid key), written in full and without them.
        let mut full = [0u8; 32];
        full[2..].copy_from_slice(&b64("GU6SnQ/Ou+xC5RumuIUIuJZteXT2z0O/ok1s38Et6mQ=")[2..]);
        assert_eq!(p256_scalar(&full[1..]).unwrap(), full);
        assert_eq!(p256_scalar(&full[2..]).unwrap(), full);
        assert_eq!(p256_scalar(&full).unwrap(), full);
        let cases: [(&[u8], &str); 4] = [
            (&[0; 31], "is zero"),
            (&[], "is zero"),
            (&[1; 33], "holds 33 bytes, more than the 32"),
            // The group order n: not below it.
            (
                &unhex("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551"),
                "not a matching P-256 key pair",
            ),
        ];
        let public = [0u8; 64];
        for (private, want) in cases {
            let e = Signer::new(Algorithm::EcdsaP256Sha256, private, &public).unwrap_err();
            assert!(e.0.contains(want), "{private:02x?}: {e}");
        }
    }

    #[test]
    fn a_key_pair_that_does_not_match_is_refused() {
        let a = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let a = Ed25519KeyPair::from_pkcs8(a.as_ref()).unwrap();
        let seed = [7u8; 32];
        assert!(Signer::new(Algorithm::Ed25519, &seed, a.public_key().as_ref()).is_err());
        let own = Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
        let signer = Signer::new(Algorithm::Ed25519, &seed, own.public_key().as_ref()).unwrap();
        let sig = signer.sign(b"data");
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, signer.public_key())
            .verify(b"data", &sig)
            .expect("the signature verifies");
    }

    #[test]
    fn generated_keys_sign_and_verify() {
        use ring::signature::{
            ECDSA_P256_SHA256_FIXED, ED25519, UnparsedPublicKey, VerificationAlgorithm,
        };
        let algorithms: [(Algorithm, &'static dyn VerificationAlgorithm); 2] = [
            (Algorithm::EcdsaP256Sha256, &ECDSA_P256_SHA256_FIXED),
            (Algorithm::Ed25519, &ED25519),
        ];
        for (algorithm, verify) in algorithms {
            let (signer, private) = Signer::generate(algorithm).unwrap();
            let public = signer.public_key();
            assert_eq!(public.len(), if algorithm == Algorithm::Ed25519 { 32 } else { 64 });
            // The private bytes alone give the same signer back (as read from a file).
            Signer::new(algorithm, &private, &public).expect("the pair matches");
            let sig = signer.sign(b"data");
            let key = match algorithm {
                Algorithm::EcdsaP256Sha256 => [&[4u8][..], &public].concat(),
                Algorithm::Ed25519 => public.clone(),
            };
            UnparsedPublicKey::new(verify, key).verify(b"data", &sig).expect("verifies");
            let (other, _) = Signer::generate(algorithm).unwrap();
            assert_ne!(other.public_key(), public, "each key is new");
        }
    }

    /// The offsets `p256_from_pkcs8` reads, on a document of ring's: the scalar is where
    /// the layout says, since it gives back the document's own public key.
    #[test]
    fn p256_pkcs8_layout() {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let (scalar, public) = p256_from_pkcs8(doc.as_ref()).unwrap();
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref(), &rng).unwrap();
        assert_eq!(pair.public_key().as_ref()[1..], public[..]);
        Signer::new(Algorithm::EcdsaP256Sha256, &scalar, &public).unwrap();
        let mut other = doc.as_ref().to_vec();
        other[5] = 1;
        assert!(p256_from_pkcs8(&other).is_err());
        assert!(p256_from_pkcs8(&doc.as_ref()[..137]).is_err());
    }

    #[test]
    fn timing_table() {
        let t = Timing {
            publish: Some(100),
            activate: Some(200),
            inactive: Some(300),
            delete: Some(400),
        };
        let cases = [
            (50, false, false),
            (150, true, false),
            (250, true, true),
            (350, true, false),
            (450, false, false),
        ];
        for (now, published, active) in cases {
            assert_eq!((t.published(now), t.active(now)), (published, active), "at {now}");
        }
        assert!(Timing::default().active(0));
    }
}
