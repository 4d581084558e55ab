//! Stable hashing for sticky answers: the same on every run, build and server, so replicas
//! with the same configuration give a client the same endpoint. The configuration hashes
//! names once at load; routing mixes them with the client per query.

/// SplitMix64 finaliser: a fixed, fast, well-mixed 64-bit hash step, identical on every
/// server so sticky answers agree across a fleet.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a string, mixed: stable across runs and builds.
pub fn hash_str(s: &str) -> u64 {
    let h = s
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    mix(h)
}
