//! Measures online signing (see bench/RESULTS.md, "Online DNSSEC signing"):
//!
//! - `dnssec_bench sign-rate [SECONDS]`: signatures per second on one core, for each
//!   algorithm, over a one-record A RRset (the usual profile answer).
//! - `dnssec_bench respond CONFIG NAME...`: nanoseconds per `respond` call for A queries of
//!   NAMEs, without and with DO, the zone signed and pre-signed (the user-space part only).
//!   `respond-once CONFIG plain|signed ROUNDS NAME...` answers them ROUNDS times in one mode,
//!   for instruction counts under callgrind (`bench/dnssec.sh` says how).
//! - `dnssec_bench presign CONFIG [THREADS]`: the time to pre-sign CONFIG's answers, then to
//!   build the table again from the first (a reload with nothing changed).
//! - `dnssec_bench serve CONFIG`: serves CONFIG with every zone signed by a fresh P-256 KSK
//!   and ZSK (or Ed25519 with `--ed25519`), until killed; for dnsperf `-D`.
//!
//! `cargo build --release --example dnssec_bench`

use std::sync::Arc;
use std::time::{Duration, Instant};

use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use steerdns::model::dnssec::{
    Algorithm, FLAGS_KSK, FLAGS_ZSK, Signer, Timing, ZoneKey, ZoneSigning, dnskey_rdata, key_tag,
};
use steerdns::model::signing::{self, Rrset};
use steerdns::wire::Rtype;

fn new_key(algorithm: Algorithm, flags: u16) -> ZoneKey {
    let rng = ring::rand::SystemRandom::new();
    let (private, public) = match algorithm {
        Algorithm::Ed25519 => {
            let mut seed = [0u8; 32];
            ring::rand::SecureRandom::fill(&rng, &mut seed).unwrap();
            let pair = Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
            (seed.to_vec(), pair.public_key().as_ref().to_vec())
        }
        Algorithm::EcdsaP256Sha256 => {
            let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
            let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
            // The private scalar's place in the PKCS#8 document ring writes.
            (pkcs8.as_ref()[36..68].to_vec(), pair.public_key().as_ref()[1..].to_vec())
        }
    };
    ZoneKey {
        flags,
        algorithm,
        key_tag: key_tag(&dnskey_rdata(flags, algorithm, &public)),
        signer: Some(Signer::new(algorithm, &private, &public).unwrap()),
        public_key: public.into(),
        timing: Timing::default(),
        source: "dnssec_bench".into(),
    }
}

fn signing(algorithm: Algorithm) -> ZoneSigning {
    let keys = vec![new_key(algorithm, FLAGS_KSK), new_key(algorithm, FLAGS_ZSK)];
    ZoneSigning { keys, validity: 14 * 86400, inception_offset: 3600 }
}

fn sign_rate(seconds: u64) {
    for algorithm in [Algorithm::EcdsaP256Sha256, Algorithm::Ed25519] {
        let zone = signing(algorithm);
        let key = &zone.keys[1];
        let mut scratch = signing::Scratch::new();
        let (start, mut n) = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(seconds) {
            let addr = (n as u32).to_be_bytes();
            let set = Rrset {
                owner: b"\x03www\x02tm\x07example\x04test\x00",
                rtype: Rtype::A,
                ttl: 30,
                rdata: std::iter::once(&addr[..]),
            };
            signing::sign(
                &zone,
                key,
                b"\x02tm\x07example\x04test\x00",
                &set,
                1_800_000_000,
                &mut scratch,
            );
            n += 1;
        }
        let rate = n as f64 / start.elapsed().as_secs_f64();
        println!("{algorithm}: {rate:.0} signatures/s on one core ({:.1} µs each)", 1e6 / rate);
    }
}

fn serve(config: &str, algorithm: Algorithm) {
    // The pre-signer logs how long it took.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let server = steerdns::server::Server::start(config.as_ref()).await.expect("starts");
        let mut snap = steerdns::config::load(config.as_ref(), None).expect("loads").snapshot;
        for zone in &mut snap.zones {
            zone.dnssec = Some(signing(algorithm));
        }
        server.control().shared.store(Arc::new(snap));
        println!("serving {:?}, signed with {algorithm}", server.dns_addrs());
        std::future::pending::<()>().await;
    });
}

fn query(name: &str, dnssec_ok: bool) -> Vec<u8> {
    let mut q = vec![0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q.extend_from_slice(&[0, 0, 41, 4, 208, 0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
    q
}

fn respond_cost(config: &str, names: &[String], modes: &[bool], rounds: usize, print: bool) {
    use rand::SeedableRng;
    use steerdns::responder::{Packet, Transport, respond};
    let mut snap = steerdns::config::load(config.as_ref(), None).expect("loads").snapshot;
    for zone in &mut snap.zones {
        zone.dnssec = Some(signing(Algorithm::EcdsaP256Sha256));
    }
    let now = steerdns::wire::cookie::unix_now();
    let known = steerdns::model::presigned::known_rrsets(&snap, now.into());
    let (table, _) = steerdns::model::presigned::build(&snap, &known, None, now, 3600, 1);
    snap.signatures.store(Arc::new(table));
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut out = Vec::with_capacity(1500);
    let src = "127.0.0.1".parse().unwrap();
    for &dnssec_ok in modes {
        let queries: Vec<Vec<u8>> = names.iter().map(|n| query(n, dnssec_ok)).collect();
        let start = Instant::now();
        for _ in 0..rounds {
            for q in &queries {
                let packet =
                    Packet { bytes: q, src, transport: Transport::Udp, now, measured: None };
                respond(&snap, &*snap.health, packet, &mut rng, &mut out, None);
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / (rounds * queries.len()) as f64;
        if !print {
            continue;
        }
        println!("DO={dnssec_ok}: {ns:.0} ns per respond ({} bytes last)", out.len());
    }
}

fn presign(config: &str, threads: usize) {
    let mut snap = steerdns::config::load(config.as_ref(), None).expect("loads").snapshot;
    for zone in &mut snap.zones {
        zone.dnssec = Some(signing(Algorithm::EcdsaP256Sha256));
    }
    let now = steerdns::wire::cookie::unix_now();
    let start = Instant::now();
    let known = steerdns::model::presigned::known_rrsets(&snap, now.into());
    let listed = start.elapsed();
    let (table, built) = steerdns::model::presigned::build(&snap, &known, None, now, 3600, threads);
    println!(
        "{} RRsets listed in {listed:.2?}; {} signed on {threads} thread(s) in {:.2?}",
        known.len(),
        built.signed,
        start.elapsed() - listed
    );
    let start = Instant::now();
    let (_, again) =
        steerdns::model::presigned::build(&snap, &known, Some(&table), now, 3600, threads);
    println!("again from the first table: {} reused in {:.2?}", again.reused, start.elapsed());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("sign-rate") => sign_rate(args.get(1).map_or(3, |s| s.parse().unwrap())),
        Some("respond") if args.len() >= 3 => {
            respond_cost(&args[1], &args[2..], &[false, true, false, true], 200_000, true)
        }
        Some("respond-once") if args.len() >= 5 => {
            let signed = args[2] == "signed";
            respond_cost(&args[1], &args[4..], &[signed], args[3].parse().unwrap(), false)
        }
        Some("presign") if args.len() >= 2 => {
            presign(&args[1], args.get(2).map_or(1, |s| s.parse().unwrap()))
        }
        Some("serve") if args.len() >= 2 => {
            let ed = args.iter().any(|a| a == "--ed25519");
            serve(&args[1], if ed { Algorithm::Ed25519 } else { Algorithm::EcdsaP256Sha256 });
        }
        _ => eprintln!("usage: dnssec_bench sign-rate [SECONDS] | serve CONFIG [--ed25519]"),
    }
}
