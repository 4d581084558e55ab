//! DNSSEC on the wire: answers of a zone signed with key files made by BIND's
//! `dnssec-keygen`, validated by `delv` with the zone's own KSK as trust anchor; compact
//! denial, the apex key sets, signed answers too large for UDP, key rollovers by reload, and
//! the pre-signer's counts.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use steerdns::model::dnssec::ZoneKey;

const T_RRSIG: u16 = 46;
const T_NSEC: u16 = 47;
const T_DNSKEY: u16 = 48;
const T_CDS: u16 = 59;
const T_CDNSKEY: u16 = 60;
const T_NXNAME: u16 = 128;

const ECDSA: &str = "ECDSAP256SHA256";
const ED25519: &str = "ED25519";

/// Whether BIND's `dnssec-keygen` (and `dnssec-settime`) run here.
fn keygen_installed() -> bool {
    have_tool("dnssec-keygen", "bind9-utils")
}

/// Runs `dnssec-keygen -K keys/` for the test zone with `args`; returns the key's base name
/// (`K<zone>+<alg>+<tag>`).
fn keygen(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("dnssec-keygen")
        .arg("-K")
        .arg(dir.join("keys"))
        .args(args)
        .arg(ORIGIN)
        .output()
        .expect("dnssec-keygen runs");
    assert!(
        out.status.success(),
        "dnssec-keygen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs `dnssec-settime -K keys/ args base`.
fn settime(dir: &Path, base: &str, args: &[&str]) {
    let out = Command::new("dnssec-settime")
        .arg("-K")
        .arg(dir.join("keys"))
        .args(args)
        .arg(base)
        .output()
        .expect("dnssec-settime runs");
    assert!(
        out.status.success(),
        "dnssec-settime {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The key tag a base name `K<zone>+<alg>+<tag>` says.
fn tag_of(base: &str) -> u16 {
    base.rsplit('+').next().unwrap().parse().unwrap()
}

/// Adds `dnssec: { keys: keys/ }` to the test zone of the configuration in `dir`, and makes
/// the key directory.
fn sign_config(dir: &Path) {
    let path = dir.join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let at = "    file: zones/extra.zone\n";
    assert!(yaml.contains(at), "{yaml}");
    let yaml = yaml.replacen(at, &format!("{at}    dnssec:\n      keys: keys/\n"), 1);
    std::fs::write(&path, yaml).unwrap();
    std::fs::create_dir_all(dir.join("keys")).unwrap();
}

/// Removes every key file.
fn clear_keys(dir: &Path) {
    for entry in std::fs::read_dir(dir.join("keys")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
}

/// Loads the key files again (as the file watcher would).
fn reload(h: &Harness) {
    h.server().reload().unwrap_or_else(|e| panic!("reload failed:\n{e}"));
}

/// The running configuration's key with this tag.
fn key(h: &Harness, tag: u16) -> ZoneKey {
    let snap = h.server().snapshot();
    let signing = snap.zones[0].dnssec.as_ref().expect("the zone is signed");
    signing.keys.iter().find(|k| k.key_tag == tag).expect("a key with that tag").clone()
}

fn delv_installed() -> bool {
    have_tool("delv", "bind9-dnsutils")
}

/// A `delv` trust anchor file for `key` at the test zone.
fn anchors(dir: &Path, key: &ZoneKey) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&key.public_key);
    let alg = key.algorithm.number();
    let text =
        format!("trust-anchors {{ {ORIGIN} static-key {} 3 {alg} \"{b64}\"; }};\n", key.flags);
    let path = dir.join("anchors.conf");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// What `delv` prints for `name`/`qtype`, validating from `anchors` against the harness.
fn delv(h: &Harness, anchors: &str, name: &str, qtype: &str) -> String {
    delv_with(h, anchors, name, qtype, &[])
}

/// `delv` with more options (`+tcp`).
fn delv_with(h: &Harness, anchors: &str, name: &str, qtype: &str, more: &[&str]) -> String {
    let port = h.addr.port().to_string();
    let out = std::process::Command::new("delv")
        .args(["@127.0.0.1", "-p", &port, "-a", anchors, &format!("+root={ORIGIN}")])
        .args(more)
        .args([name, qtype])
        .output()
        .expect("delv runs");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Whether `delv` said the answer validated.
fn validated(out: &str) -> bool {
    // "; fully validated", or "; negative response, fully validated".
    out.lines().any(|l| l.starts_with("; ") && l.ends_with("fully validated"))
}

/// BIND's SHA-256 DS of the key in `key_file`: the line `dnssec-dsfromkey -2` prints
/// (`<zone> IN DS <tag> <alg> 2 <HEX>`), and its RDATA.
fn bind_ds(key_file: &Path) -> (String, Vec<u8>) {
    let out = Command::new("dnssec-dsfromkey").arg("-2").arg(key_file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f[..3], [ORIGIN, "IN", "DS"], "{line}");
    let mut rdata = f[3].parse::<u16>().unwrap().to_be_bytes().to_vec();
    rdata.push(f[4].parse().unwrap());
    rdata.push(f[5].parse().unwrap());
    let hex = f[6..].concat();
    for i in (0..hex.len()).step_by(2) {
        rdata.push(u8::from_str_radix(&hex[i..i + 2], 16).unwrap());
    }
    (line, rdata)
}

/// A server with the location data, so that every routing method has a profile, and the
/// test zone signed with the key files `make_keys` writes into `keys/`.
async fn every_method(make_keys: impl FnOnce(&Path)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let mut profiles = location_profiles();
    profiles.extend(DEFAULT_PROFILES.iter().map(|(n, t)| (n.to_string(), t.to_string())));
    write_location_config(dir.path(), &profiles);
    sign_config(dir.path());
    make_keys(dir.path());
    Harness::in_dir(dir).await
}

/// A server with the default profiles and the test zone signed with `make_keys`'s keys;
/// `admin` turns the admin API on.
async fn signed(make_keys: impl FnOnce(&Path), admin: bool) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    if admin {
        let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).unwrap();
        std::fs::write(dir.path().join("steerdns.yaml"), with_admin(&yaml, None)).unwrap();
    }
    sign_config(dir.path());
    make_keys(dir.path());
    Harness::in_dir(dir).await
}

/// (name, type) pairs that `delv` must find fully validated.
const VALIDATED: &[(&str, &str)] = &[
    ("www", "A"),        // priority
    ("www", "AAAA"),     // priority, the other family
    ("api", "A"),        // weighted
    ("pool", "A"),       // multivalue
    ("global", "A"),     // nested
    ("geo", "A"),        // geographic
    ("fast", "A"),       // performance
    ("office", "A"),     // subnet
    ("ga-100-100", "A"), // groups
    ("svc", "A"),        // zone
    ("alias", "CNAME"),  // a profile's CNAME
    ("docs", "A"),       // a static CNAME to a profile, followed in the zone
    ("chain", "A"),      // static CNAMEs to a static name
    ("mail", "MX"),      // static records
    ("@", "SOA"),
    ("@", "NS"),
    ("@", "DNSKEY"),
    ("@", "CDS"),
    ("@", "CDNSKEY"),
    ("missing", "A"), // NXDOMAIN, as compact denial
    ("www", "TXT"),   // NODATA at a profile
    ("b", "A"),       // NODATA at an empty non-terminal
    ("mail", "A"),    // NODATA at a static name
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delv_validates_every_kind_of_answer() {
    if !delv_installed() || !keygen_installed() {
        return;
    }
    let mut ksk = String::new();
    let h = every_method(|dir| ksk = keygen(dir, &["-a", ECDSA, "-f", "KSK"])).await;
    let dir = h.dir.path().to_path_buf();
    for algorithm in [ECDSA, ED25519] {
        // A KSK and a ZSK, then one CSK.
        for split in [true, false] {
            clear_keys(&dir);
            ksk = keygen(&dir, &["-a", algorithm, "-f", "KSK"]);
            if split {
                keygen(&dir, &["-a", algorithm]);
            }
            reload(&h);
            let anchors = anchors(&dir, &key(&h, tag_of(&ksk)));
            for (name, qtype) in VALIDATED {
                let out = delv(&h, &anchors, &fq(name), qtype);
                assert!(validated(&out), "{algorithm}, split {split}: {name} {qtype}:\n{out}");
            }
        }
    }
    // Another key of the zone as trust anchor, given as its DS (what a parent would
    // publish, from `dnssec-dsfromkey`): the same anchor trusts the zone's own KSK, and
    // the other key's makes validation fail for want of a DNSKEY it names.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join("keys")).unwrap();
    let stranger = keygen(other.path(), &["-a", ECDSA, "-f", "KSK"]);
    let ds_anchors = |key_file: &Path, name: &str| {
        let (line, _) = bind_ds(key_file);
        let f: Vec<&str> = line.split_whitespace().collect();
        let text = format!(
            "trust-anchors {{ {ORIGIN} static-ds {} {} {} \"{}\"; }};\n",
            f[3],
            f[4],
            f[5],
            f[6..].concat()
        );
        let path = other.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let own = ds_anchors(&dir.join(format!("keys/{ksk}.key")), "own.conf");
    let out = delv(&h, &own, &fq("www"), "A");
    assert!(validated(&out), "the zone's own DS as anchor:\n{out}");
    let wrong = ds_anchors(&other.path().join(format!("keys/{stranger}.key")), "wrong.conf");
    let out = delv(&h, &wrong, &fq("www"), "A");
    assert!(!validated(&out), "{out}");
    // What delv 9.18 says when the DNSKEY RRset has no signature by a key the DS names
    // (a malformed anchor file fails earlier, with a parse error).
    let failed = out.contains(&format!(
        ";; validating {}/DNSKEY: no valid signature found (DS)",
        ORIGIN.trim_end_matches('.')
    )) && out.contains(";; resolution failed: broken trust chain");
    assert!(failed, "the validation fails, not the anchor file:\n{out}");
    h.stop().await;
}

/// The RRSIGs of `section` covering `rtype`.
fn rrsigs(section: &[Rr], rtype: u16) -> Vec<&Rr> {
    section.iter().filter(|r| r.rtype == T_RRSIG && r.rdata[..2] == rtype.to_be_bytes()).collect()
}

/// The types set in an NSEC's bitmap (the next name at its start is skipped).
fn nsec_types(rdata: &[u8]) -> Vec<u16> {
    let (_, mut pos) = read_name(rdata, 0).unwrap();
    let mut types = Vec::new();
    while pos + 2 <= rdata.len() {
        let (window, len) = (u16::from(rdata[pos]), usize::from(rdata[pos + 1]));
        for (i, byte) in rdata[pos + 2..pos + 2 + len].iter().enumerate() {
            for bit in 0..8 {
                if byte & (0x80 >> bit) != 0 {
                    types.push(window * 256 + (i * 8 + bit) as u16);
                }
            }
        }
        pos += 2 + len;
    }
    types
}

fn wire(r: &Reply) -> Wire {
    Wire::parse(&r.raw).expect("a well-formed reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_answers_on_the_wire() {
    if !keygen_installed() {
        return;
    }
    let (mut ksk, mut zsk) = (String::new(), String::new());
    let make = |dir: &Path| {
        ksk = keygen(dir, &["-a", ECDSA, "-f", "KSK"]);
        zsk = keygen(dir, &["-a", ECDSA]);
    };
    let h = signed(make, false).await;
    let ksk_base = ksk.clone();
    let (ksk, zsk) = (key(&h, tag_of(&ksk)), key(&h, tag_of(&zsk)));

    // Without DO: no signatures, NXDOMAIN as ever, but the apex has its key sets.
    let plain = wire(&h.udp(&Q::new(&fq("www"), T_A).edns()).await);
    assert!(plain.answers.iter().all(|r| r.rtype == T_A), "{plain:?}");
    let r = h.udp(&Q::new(&fq("missing"), T_A).edns()).await;
    r.assert_negative(NXDOMAIN);
    for (qtype, count) in [(T_DNSKEY, 2), (T_CDS, 1), (T_CDNSKEY, 1)] {
        let w = wire(&h.udp(&Q::new(ORIGIN, qtype)).await);
        assert_eq!(w.rcode(), NOERROR);
        let records: Vec<_> = w.answers.iter().filter(|r| r.rtype == qtype).collect();
        assert_eq!(records.len(), count, "{qtype}: {w:?}");
        assert!(rrsigs(&w.answers, qtype).is_empty());
    }
    let cds = wire(&h.udp(&Q::new(ORIGIN, T_CDS)).await);
    let origin = encode_name(ORIGIN);
    let (_, bind) = bind_ds(&h.dir.path().join(format!("keys/{ksk_base}.key")));
    assert_eq!(cds.answers[0].rdata, bind, "CDS is the KSK's SHA-256 DS, as BIND makes it");

    // With DO: one RRSIG by the ZSK; the owner keeps the query's case.
    let w = wire(&h.udp(&Q::new("wWw.Tm.Example.Test.", T_A).dnssec_ok()).await);
    let sigs = rrsigs(&w.answers, T_A);
    assert_eq!(sigs.len(), 1, "{w:?}");
    let sig = &sigs[0].rdata;
    assert_eq!(sig[2], 13, "algorithm");
    assert_eq!(sig[3], 4, "labels of www.tm.example.test.");
    assert_eq!(sig[16..18], zsk.key_tag.to_be_bytes());
    assert_eq!(&sig[18..18 + origin.len()], &origin[..], "signer");
    assert_eq!(sigs[0].name, encode_name("wWw.Tm.Example.Test."));
    // The DNSKEY RRset is signed by the KSK.
    let w = wire(&h.udp(&Q::new(ORIGIN, T_DNSKEY).dnssec_ok()).await);
    let sigs = rrsigs(&w.answers, T_DNSKEY);
    assert_eq!(sigs.len(), 1);
    assert_eq!(sigs[0].rdata[16..18], ksk.key_tag.to_be_bytes());

    // Compact denial: NOERROR, the SOA and an NSEC at the name saying NXNAME, each signed.
    let name = fq("missing");
    let w = wire(&h.udp(&Q::new(&name, T_A).dnssec_ok()).await);
    assert_eq!(w.rcode(), NOERROR);
    assert!(w.answers.is_empty());
    let nsec: Vec<_> = w.authority.iter().filter(|r| r.rtype == T_NSEC).collect();
    assert_eq!(nsec.len(), 1, "{w:?}");
    assert_eq!(nsec[0].name, encode_name(&name));
    assert_eq!(nsec[0].ttl, 30, "the negative TTL");
    let next = [&[1u8, 0][..], &encode_name(&name)].concat();
    assert!(nsec[0].rdata.starts_with(&next), "next name \\000.<qname>");
    assert_eq!(nsec_types(&nsec[0].rdata), [T_RRSIG, T_NSEC, T_NXNAME]);
    assert_eq!(rrsigs(&w.authority, T_NSEC).len(), 1);
    assert_eq!(rrsigs(&w.authority, T_SOA).len(), 1);
    let co_flag = |w: &Wire| w.opt().unwrap().ttl & 0x4000 != 0;
    assert!(!co_flag(&w));
    // With CO the RCODE stays NXDOMAIN, and CO is echoed.
    let w = wire(&h.udp(&Q::new(&name, T_A).dnssec_ok().compact_ok()).await);
    assert_eq!(w.rcode(), NXDOMAIN);
    assert!(co_flag(&w));
    assert_eq!(w.authority.iter().filter(|r| r.rtype == T_NSEC).count(), 1);

    // NODATA: the types the name has, never the one asked.
    let w = wire(&h.udp(&Q::new(&fq("www"), T_MX).dnssec_ok()).await);
    assert_eq!(w.rcode(), NOERROR);
    let nsec = w.authority.iter().find(|r| r.rtype == T_NSEC).expect("an NSEC");
    assert_eq!(nsec_types(&nsec.rdata), [T_A, T_AAAA, T_RRSIG, T_NSEC]);
    let w = wire(&h.udp(&Q::new(&fq("prio2"), T_AAAA).dnssec_ok()).await);
    let nsec = w.authority.iter().find(|r| r.rtype == T_NSEC).expect("an NSEC");
    assert_eq!(nsec_types(&nsec.rdata), [T_A, T_RRSIG, T_NSEC]);
    let w = wire(&h.udp(&Q::new(&fq("mail"), T_A).dnssec_ok()).await);
    let nsec = w.authority.iter().find(|r| r.rtype == T_NSEC).expect("an NSEC");
    assert_eq!(nsec_types(&nsec.rdata), [T_MX, T_RRSIG, T_NSEC]);

    // NXNAME is a meta-type: FORMERR. A name outside every zone stays REFUSED, unsigned.
    let r = h.udp(&Q::new(&fq("www"), T_NXNAME).dnssec_ok()).await;
    assert_eq!(r.rcode(), FORMERR);
    let w = wire(&h.udp(&Q::new("www.elsewhere.test.", T_A).dnssec_ok()).await);
    assert_eq!(w.rcode(), REFUSED);
    assert!(w.answers.is_empty() && w.authority.is_empty());

    // Glue is not signed.
    let w = wire(&h.udp(&Q::new(ORIGIN, T_NS).dnssec_ok()).await);
    assert_eq!(rrsigs(&w.answers, T_NS).len(), 1);
    assert!(!w.additional.is_empty() && w.additional.iter().all(|r| r.rtype != T_RRSIG));
    h.stop().await;
}

/// Signed answers that do not fit the client's UDP size are truncated, and complete over
/// TCP. Each name here fits unsigned and not signed, at 512 bytes or at 1232.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_answers_too_large_for_udp_are_truncated() {
    if !keygen_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    // Four TXT records of 255 bytes: about 1120 bytes unsigned.
    let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).unwrap();
    let wide: String =
        (0..4).map(|i| format!("      - 'wide TXT \"{}\"'\n", "w".repeat(250 + i))).collect();
    let yaml =
        yaml.replace("    file: zones/extra.zone", &format!("{wide}    file: zones/extra.zone"));
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    sign_config(dir.path());
    // Two KSKs and two zone-signing keys: two RRSIGs per RRset.
    for algorithm in [ECDSA, ED25519] {
        keygen(dir.path(), &["-a", algorithm, "-f", "KSK"]);
        keygen(dir.path(), &["-a", algorithm]);
    }
    let h = Harness::in_dir(dir).await;
    for (name, qtype, payload) in [(ORIGIN.to_string(), T_DNSKEY, 512), (fq("wide"), T_TXT, 1232)] {
        let plain = h.tcp(&Q::new(&name, qtype).payload(payload)).await;
        let signed = h.tcp(&Q::new(&name, qtype).payload(payload).dnssec_ok()).await;
        let (plain_len, signed_len) = (plain.raw.len(), signed.raw.len());
        assert!(plain_len <= usize::from(payload), "{name} unsigned: {plain_len} bytes");
        assert!(signed_len > usize::from(payload), "{name} signed: {signed_len} bytes");
        let udp = h.udp(&Q::new(&name, qtype).payload(payload)).await;
        assert!(!udp.tc(), "{name} unsigned fits");
        let udp = h.udp(&Q::new(&name, qtype).payload(payload).dnssec_ok()).await;
        assert!(udp.tc() && udp.answers.is_empty(), "{name} signed: {udp:#?}");
        assert!(!signed.tc());
        assert_eq!(rrsigs(&wire(&signed).answers, qtype).len(), 2, "complete over TCP");
    }
    h.stop().await;
}

/// Adds `records` (zone file lines, relative names) to the test zone in `dir`.
fn add_records(dir: &Path, records: &[String]) {
    let path = dir.join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let lines: String = records.iter().map(|r| format!("      - '{r}'\n")).collect();
    let at = "    file: zones/extra.zone";
    assert!(yaml.contains(at), "{yaml}");
    std::fs::write(&path, yaml.replace(at, &format!("{lines}{at}"))).unwrap();
}

/// RRsets of 65 and 300 records (TXT, and A at one name) are signed whole: `delv` validates
/// each over TCP, with a KSK and a ZSK and with a CSK, and every record is in the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_rrsets_are_signed_whole() {
    if !delv_installed() || !keygen_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    let mut records = Vec::new();
    for n in [65, 300] {
        records.extend((0..n).map(|i| format!("txt{n} TXT \"record {i} of {n}\"")));
        records.extend((0..n).map(|i| format!("a{n} A 10.0.{}.{}", i / 250, i % 250 + 1)));
    }
    add_records(dir.path(), &records);
    sign_config(dir.path());
    let mut ksk = keygen(dir.path(), &["-a", ECDSA, "-f", "KSK"]);
    keygen(dir.path(), &["-a", ECDSA]);
    let h = Harness::in_dir(dir).await;
    let dir = h.dir.path().to_path_buf();
    for layout in ["KSK and ZSK", "CSK"] {
        if layout == "CSK" {
            clear_keys(&dir);
            ksk = keygen(&dir, &["-a", ED25519, "-f", "KSK"]);
            reload(&h);
        }
        let anchors = anchors(&dir, &key(&h, tag_of(&ksk)));
        for n in [65, 300] {
            for (name, qtype, rtype) in
                [(format!("txt{n}"), "TXT", T_TXT), (format!("a{n}"), "A", T_A)]
            {
                let w = wire(&h.tcp(&Q::new(&fq(&name), rtype).dnssec_ok()).await);
                let records = w.answers.iter().filter(|r| r.rtype == rtype).count();
                assert_eq!(records, n, "{layout}: {name}");
                assert_eq!(rrsigs(&w.answers, rtype).len(), 1, "{layout}: {name}");
                let out = delv_with(&h, &anchors, &fq(&name), qtype, &["+tcp"]);
                assert!(validated(&out), "{layout}: {name} {qtype}:\n{out}");
                let count = out.lines().filter(|l| l.contains(&format!("\tIN\t{qtype}\t"))).count();
                assert_eq!(count, n, "{layout}: delv prints every record of {name}:\n{out}");
            }
        }
    }
    h.stop().await;
}

/// A P-256 key whose scalar starts with a zero byte, as `dnssec-keygen` (BIND 9.18) wrote
/// it: `PrivateKey:` holds 31 bytes (tests/fixtures/dnssec/). BIND signs a zone with it
/// (`dnssec-signzone`, checked by `dnssec-verify`), and steerdns serves answers signed with
/// it that `delv` validates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_a_short_scalar_signs() {
    if !delv_installed() || !have_tool("dnssec-signzone", "bind9-utils") {
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dnssec");
    let base = "Ktm.example.test.+013+22343";
    let private = std::fs::read_to_string(fixtures.join(format!("{base}.private"))).unwrap();
    let scalar = private.lines().find_map(|l| l.strip_prefix("PrivateKey: ")).unwrap();
    use base64::Engine;
    let scalar = base64::engine::general_purpose::STANDARD.decode(scalar).unwrap();
    assert_eq!(scalar.len(), 31, "the fixture is a short-scalar key");
    let copy_key = |dir: &Path| {
        for ext in ["key", "private"] {
            let name = format!("{base}.{ext}");
            std::fs::copy(fixtures.join(&name), dir.join("keys").join(&name)).unwrap();
        }
    };

    // BIND: a zone signed with the key alone (a CSK, -z) verifies.
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(work.path().join("keys")).unwrap();
    copy_key(work.path());
    let zone = work.path().join("zone.db");
    let text = format!(
        "$ORIGIN {ORIGIN}\n$TTL 300\n@ SOA ns1 hostmaster.example.test. 1 3600 600 604800 300\n@ NS ns1\nns1 A 192.0.2.53\n"
    );
    std::fs::write(&zone, text).unwrap();
    let signed_zone = work.path().join("signed.db");
    let out = Command::new("dnssec-signzone")
        .args(["-S", "-z", "-K"])
        .arg(work.path().join("keys"))
        .arg("-d")
        .arg(work.path())
        .args(["-o", ORIGIN, "-f"])
        .arg(&signed_zone)
        .arg(&zone)
        .output()
        .unwrap();
    assert!(out.status.success(), "dnssec-signzone: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new("dnssec-verify")
        .args(["-z", "-o", ORIGIN])
        .arg(&signed_zone)
        .output()
        .unwrap();
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("Zone fully signed"), "{said}");

    // steerdns: the same key signs its answers.
    let h = signed(|dir| copy_key(dir), false).await;
    let anchors = anchors(h.dir.path(), &key(&h, 22343));
    for (name, qtype) in [("www", "A"), ("@", "DNSKEY"), ("@", "SOA"), ("missing", "A")] {
        let out = delv(&h, &anchors, &fq(name), qtype);
        assert!(validated(&out), "{name} {qtype}:\n{out}");
    }
    h.stop().await;
}

/// The pre-signer fills the table after a load, queries take their signatures from it, and
/// `/metrics` shows both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_come_presigned_and_are_counted() {
    if !keygen_installed() {
        return;
    }
    let h = signed(|dir| drop(keygen(dir, &["-a", ED25519, "-f", "KSK"])), true).await;
    let before = scrape(h.admin(), None).await;
    let presigned =
        |p: &Prom| p.sum("steerdns_dnssec_signatures_total", &[("source", "presigned")]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while scrape(h.admin(), None).await.sum("steerdns_dnssec_presigned", &[]) == 0.0 {
        assert!(std::time::Instant::now() < deadline, "no pre-signed table");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Counts are added in every 64 answers per thread: more than enough answers.
    for i in 0..200 {
        let name = ["www", "api", "info", "@"][i % 4];
        let r =
            h.udp(&Q::new(&fq(name), if name == "info" { T_TXT } else { T_A }).dnssec_ok()).await;
        assert!(!r.answers.is_empty() || name == "@", "{name}: {r:#?}");
    }
    let after = scrape(h.admin(), None).await;
    // This server's own counts (other tests of this binary count apart): what these
    // queries added.
    let added =
        |name: &str, labels: &[(&str, &str)]| after.sum(name, labels) - before.sum(name, labels);
    let signed = added("steerdns_dnssec_signed_answers_total", &[]);
    assert!((64.0..=200.0).contains(&signed), "signed answers: {signed}");
    assert!(presigned(&after) > presigned(&before), "signatures from the table");
    let cached = added("steerdns_dnssec_signatures_total", &[("source", "cache")]);
    assert!(cached > 0.0, "signatures from the threads' caches");
    h.stop().await;
}

/// A zone-signing key rollover by pre-publication (RFC 6781 §4.1.1.1), the key files changed
/// with `dnssec-keygen` and `dnssec-settime` and reloaded at each step: every step validates,
/// and the answers are signed by the key active at that step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delv_validates_through_a_key_rollover() {
    if !delv_installed() || !keygen_installed() {
        return;
    }
    let (mut ksk, mut old) = (String::new(), String::new());
    let make = |dir: &Path| {
        ksk = keygen(dir, &["-a", ECDSA, "-f", "KSK"]);
        old = keygen(dir, &["-a", ECDSA]);
    };
    let h = signed(make, false).await;
    let dir = h.dir.path().to_path_buf();
    let anchors = anchors(&dir, &key(&h, tag_of(&ksk)));
    let mut new = String::new();
    for step in ["start", "new key published", "new key signing", "old key removed"] {
        match step {
            "new key published" => new = keygen(&dir, &["-a", ECDSA, "-P", "now", "-A", "+1d"]),
            "new key signing" => {
                settime(&dir, &new, &["-A", "now"]);
                settime(&dir, &old, &["-I", "now"]);
            }
            "old key removed" => settime(&dir, &old, &["-D", "now"]),
            _ => {}
        }
        reload(&h);
        for (name, qtype) in [("www", "A"), ("missing", "A"), ("@", "DNSKEY"), ("@", "SOA")] {
            let out = delv(&h, &anchors, &fq(name), qtype);
            assert!(
                out.lines().any(|l| l.starts_with("; ") && l.ends_with("fully validated")),
                "{step}: {name} {qtype}:\n{out}"
            );
        }
        let published = if matches!(step, "start" | "old key removed") { 2 } else { 3 };
        let w = wire(&h.udp(&Q::new(ORIGIN, T_DNSKEY).dnssec_ok()).await);
        assert_eq!(w.answers.iter().filter(|r| r.rtype == T_DNSKEY).count(), published, "{step}");
        let w = wire(&h.udp(&Q::new(&fq("www"), T_A).dnssec_ok()).await);
        let sigs = rrsigs(&w.answers, T_A);
        assert_eq!(sigs.len(), 1, "{step}");
        let new_signs = matches!(step, "new key signing" | "old key removed");
        let signer = tag_of(if new_signs { &new } else { &old });
        assert_eq!(sigs[0].rdata[16..18], signer.to_be_bytes(), "{step}: the signing key");
    }
    h.stop().await;
}

/// Flattened answers (a profile at the apex, and a flattened endpoint below it) are signed
/// online like every other: `delv` validates them, and the apex's own records and NODATA
/// beside them. The addresses come from a CDN zone in Knot, resolved through Unbound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delv_validates_flattened_answers() {
    if !delv_installed() || !keygen_installed() || !Knot::available() || !Resolver::available() {
        return;
    }
    let cdn = "cdn.example.";
    let zone = format!(
        "$ORIGIN {cdn}\n$TTL 60\n@ 3600 IN SOA ns hostmaster 1 3600 600 86400 60\n\
         @ 3600 IN NS ns\nns IN A 127.0.0.1\nwww IN A 192.0.2.10\nwww IN AAAA 2001:db8::10\n\
         edge IN CNAME www\n"
    );
    let knot = Knot::start(cdn, &zone).unwrap();
    let resolver = Resolver::start(knot.addr, cdn).unwrap();
    let apex = format!(
        "name: {ORIGIN}\nrouting: priority\nttl: 300\nflatten: true\n\
         endpoints:\n  - {{ name: cdn, target: edge.{cdn}, always_serve: true }}\n"
    );
    let flat = format!(
        "name: flat\nrouting: priority\nendpoints:\n\
         \x20 - {{ name: cdn, target: edge.{cdn}, flatten: true, always_serve: true }}\n"
    );
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &[("apex.yaml", &apex), ("flat.yaml", &flat)]);
    let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).unwrap();
    let keys = format!("flatten:\n  resolvers: [\"{}\"]\n", resolver.addr);
    std::fs::write(dir.path().join("steerdns.yaml"), format!("{yaml}{keys}")).unwrap();
    sign_config(dir.path());
    let ksk = keygen(dir.path(), &["-a", ECDSA, "-f", "KSK"]);
    let h = Harness::in_dir(dir).await;
    // Wait for the first lookups (queries never wait for them).
    let started = std::time::Instant::now();
    for name in [ORIGIN.to_string(), fq("flat")] {
        for qtype in [T_A, T_AAAA] {
            while h.udp(&Q::new(&name, qtype)).await.addrs().is_empty() {
                assert!(
                    started.elapsed().as_secs() < 15,
                    "{name} not resolved:\n{}",
                    resolver.log()
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    let w = wire(&h.udp(&Q::new(ORIGIN, T_A).dnssec_ok()).await);
    assert_eq!(rrsigs(&w.answers, T_A).len(), 1, "{w:?}");
    let anchors = anchors(h.dir.path(), &key(&h, tag_of(&ksk)));
    let cases = [
        (ORIGIN.to_string(), "A"),
        (ORIGIN.to_string(), "AAAA"),
        (fq("flat"), "A"),
        (fq("flat"), "AAAA"),
        (ORIGIN.to_string(), "NS"),
        (ORIGIN.to_string(), "SOA"),
        (ORIGIN.to_string(), "TXT"),
        (ORIGIN.to_string(), "MX"), // NODATA at the apex
        (fq("flat"), "TXT"),        // NODATA at a flattened name
    ];
    for (name, qtype) in cases {
        let out = delv(&h, &anchors, &name, qtype);
        assert!(validated(&out), "{name} {qtype}:\n{out}");
    }
    let out = delv(&h, &anchors, ORIGIN, "A");
    assert!(out.contains("192.0.2.10"), "the CDN's address:\n{out}");
    h.stop().await;
}
