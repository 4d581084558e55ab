//! DNSSEC keys: key files made by BIND's `dnssec-keygen` load with the right flags, tags
//! and signers; keys made by `steerdns dnssec keygen` give BIND's `dnssec-dsfromkey` the
//! DS that `steerdns dnssec ds` prints, and sign a zone with `dnssec-signzone`; every bad
//! key file is a located error from `steerdns check`; key timing decides which keys a load
//! gets, and the server reloads when a key file changes or a key's time comes.

#[allow(dead_code)]
#[path = "common/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use steerdns::commands::dnssec::keygen;
use steerdns::config;
use steerdns::model::dnssec::{Algorithm, ZoneSigning};
use steerdns::server::Server;

const ZONE: &str = "tm.example.test.";

/// `steerdns.yaml` with one signed zone; `dnssec:` is line 7, `keys:` on line 8 col 13.
fn server_yaml(dnssec_extra: &str) -> String {
    format!(
        "listen: {{ dns: [\"127.0.0.1:0\"] }}
zones:
  - origin: {ZONE}
    ns: [ns1.{ZONE}]
    soa: {{ rname: hostmaster.example.test. }}
    records: [\"ns1 A 192.0.2.53\"]
    dnssec:
      keys: keys/
{dnssec_extra}"
    )
}

/// A configuration directory with an empty `keys/`; returns the config path.
fn setup(dir: &Path, dnssec_extra: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    std::fs::write(dir.join("steerdns.yaml"), server_yaml(dnssec_extra)).unwrap();
    dir.join("steerdns.yaml")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Whether one of BIND's key tools runs here.
fn have(tool: &str) -> bool {
    tools::have_tool(tool, "bind9-utils")
}

/// Runs `dnssec-keygen -K dir` with `args`; returns the key's base name.
fn bind_keygen(dir: &Path, args: &[&str]) -> String {
    let out =
        Command::new("dnssec-keygen").arg("-K").arg(dir).args(args).arg(ZONE).output().unwrap();
    assert!(
        out.status.success(),
        "dnssec-keygen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn signing(path: &Path) -> ZoneSigning {
    let loaded = config::load(path, None).unwrap_or_else(|e| panic!("load failed:\n{e}"));
    loaded.snapshot.zones[0].dnssec.clone().expect("the zone is signed")
}

/// The algorithm number and tag a base name `K<zone>+<alg>+<tag>` says.
fn name_parts(base: &str) -> (u8, u16) {
    let mut parts = base.rsplit('+');
    let tag = parts.next().unwrap().parse().unwrap();
    (parts.next().unwrap().parse().unwrap(), tag)
}

#[test]
fn keys_from_dnssec_keygen_load_with_flags_tags_and_signers() {
    if !have("dnssec-keygen") {
        return;
    }
    for (alg, number) in [("ECDSAP256SHA256", 13), ("ED25519", 15)] {
        // KSK + ZSK; then a CSK alone; then the ZSK without its .private (published only).
        let dir = tempfile::tempdir().unwrap();
        let path = setup(dir.path(), "      signature_validity: 2d\n      inception_offset: 30m\n");
        let keys = dir.path().join("keys");
        let ksk = bind_keygen(&keys, &["-a", alg, "-f", "KSK"]);
        let zsk = bind_keygen(&keys, &["-a", alg]);
        let s = signing(&path);
        assert_eq!((s.validity, s.inception_offset), (2 * 86_400, 1_800));
        let got: Vec<(u16, u8, u16, bool)> = s
            .keys
            .iter()
            .map(|k| (k.flags, k.algorithm.number(), k.key_tag, k.signer.is_some()))
            .collect();
        let mut want =
            vec![(257, number, name_parts(&ksk).1, true), (256, number, name_parts(&zsk).1, true)];
        want.sort_by_key(|k| k.2);
        assert_eq!(got, want, "{alg}");
        for k in &s.keys {
            assert_eq!(k.signer.as_ref().unwrap().public_key(), &*k.public_key, "{alg}");
            assert!(k.timing.active(now()), "{alg}: {:?}", k.timing);
        }

        std::fs::remove_file(keys.join(format!("{zsk}.private"))).unwrap();
        let s = signing(&path);
        let zsk_key = s.keys.iter().find(|k| k.flags == 256).unwrap();
        assert!(zsk_key.signer.is_none(), "{alg}: published only");

        for f in [format!("{ksk}.key"), format!("{ksk}.private"), format!("{zsk}.key")] {
            std::fs::remove_file(keys.join(f)).unwrap();
        }
        let csk = bind_keygen(&keys, &["-a", alg, "-f", "KSK"]);
        let s = signing(&path);
        assert_eq!((s.validity, s.inception_offset), (2 * 86_400, 1_800));
        let got: Vec<(u16, u16, bool)> =
            s.keys.iter().map(|k| (k.flags, k.key_tag, k.signer.is_some())).collect();
        assert_eq!(got, vec![(257, name_parts(&csk).1, true)], "{alg}");
    }
}

#[test]
fn defaults_and_other_zones_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), "");
    let keys = dir.path().join("keys");
    keygen(ZONE, Algorithm::Ed25519, false, &keys).unwrap();
    // A shared key directory: another zone's keys, BIND's state files and the like are
    // not this zone's business.
    keygen("other.test.", Algorithm::Ed25519, true, &keys).unwrap();
    std::fs::write(keys.join("Ktm.example.test.+015+00001.state"), "junk").unwrap();
    std::fs::write(keys.join("README"), "junk").unwrap();
    let s = signing(&path);
    assert_eq!((s.validity, s.inception_offset, s.keys.len()), (7 * 86_400, 3_600, 1));
}

fn steerdns(args: &[&str], config: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_steerdns")).args(args).arg(config).output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap(), text(out.stdout), text(out.stderr))
}

#[test]
fn steerdns_keys_give_bind_the_same_ds_and_sign_a_zone() {
    if !have("dnssec-dsfromkey") {
        return;
    }
    for (algorithm, layout) in
        [("ecdsap256sha256", false), ("ed25519", false), ("13", true), ("ed25519", true)]
    {
        let dir = tempfile::tempdir().unwrap();
        let path = setup(dir.path(), "");
        let keys = dir.path().join("keys");
        let mut args = vec!["dnssec", "keygen", "--zone", ZONE, "--algorithm", algorithm];
        if layout {
            args.push("--ksk-zsk");
        }
        args.push("-o");
        let (code, out, err) = steerdns(&args, &keys);
        assert_eq!(code, 0, "{err}");
        let made: Vec<&str> = out.lines().collect();
        assert_eq!(made.len(), if layout { 2 } else { 1 }, "{out}");

        let (code, ds, err) = steerdns(&["dnssec", "ds", "-c"], &path);
        assert_eq!(code, 0, "{err}");
        // The first key made is the SEP key: BIND's DS of it is ours.
        let bind = Command::new("dnssec-dsfromkey")
            .arg("-2")
            .arg(keys.join(format!("{}.key", made[0])))
            .output()
            .unwrap();
        assert!(bind.status.success(), "{}", String::from_utf8_lossy(&bind.stderr));
        assert_eq!(ds, String::from_utf8(bind.stdout).unwrap(), "{algorithm} {layout}");
        assert!(ds.starts_with(&format!("{ZONE} IN DS {} ", name_parts(made[0]).1)), "{ds}");

        // BIND reads the private keys too: it signs a zone with them, and the result
        // verifies (a CSK signs everything: -z).
        if !have("dnssec-signzone") {
            continue;
        }
        let zone = dir.path().join("zone.db");
        std::fs::write(&zone, "$TTL 300\n@ SOA ns1 hostmaster.example.test. 1 3600 600 604800 300\n@ NS ns1\nns1 A 192.0.2.53\n").unwrap();
        let signed = dir.path().join("signed.db");
        let csk = if layout { &[][..] } else { &["-z"][..] };
        // `-d`: the dsset file it writes goes there, not into the working directory.
        let sign = Command::new("dnssec-signzone")
            .args(["-S", "-K"])
            .arg(&keys)
            .arg("-d")
            .arg(dir.path())
            .args(csk)
            .args(["-o", ZONE, "-f"])
            .arg(&signed)
            .arg(&zone)
            .output()
            .unwrap();
        assert!(sign.status.success(), "{}", String::from_utf8_lossy(&sign.stderr));
        let verify = Command::new("dnssec-verify")
            .args(csk)
            .args(["-o", ZONE])
            .arg(&signed)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&verify.stdout),
            String::from_utf8_lossy(&verify.stderr)
        );
        assert!(verify.status.success() && said.contains("Zone fully signed"), "{said}");
    }
}

/// A P-256 key `dnssec-keygen` wrote with a 31-byte `PrivateKey:` (its scalar starts with a
/// zero byte): `steerdns check` accepts it, and `steerdns dnssec ds` prints BIND's DS of it.
#[test]
fn a_bind_key_with_a_short_scalar_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), "");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dnssec");
    let base = "Ktm.example.test.+013+22343";
    for ext in ["key", "private"] {
        let name = format!("{base}.{ext}");
        std::fs::copy(fixtures.join(&name), dir.path().join("keys").join(&name)).unwrap();
    }
    let (code, _, err) = steerdns(&["check", "-c"], &path);
    assert_eq!(code, 0, "{err}");
    let keys = signing(&path).keys;
    assert!(keys.len() == 1 && keys[0].signer.is_some(), "{keys:?}");
    let (code, ds, err) = steerdns(&["dnssec", "ds", "-c"], &path);
    assert_eq!(code, 0, "{err}");
    if !have("dnssec-dsfromkey") {
        return;
    }
    let bind = Command::new("dnssec-dsfromkey")
        .arg("-2")
        .arg(dir.path().join(format!("keys/{base}.key")))
        .output()
        .unwrap();
    assert!(bind.status.success(), "{}", String::from_utf8_lossy(&bind.stderr));
    assert_eq!(ds, String::from_utf8(bind.stdout).unwrap());
}

#[test]
fn ds_without_a_signed_zone_says_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
    let unsigned = server_yaml("").replace("    dnssec:\n      keys: keys/\n", "");
    std::fs::write(dir.path().join("steerdns.yaml"), unsigned).unwrap();
    let (code, out, err) = steerdns(&["dnssec", "ds", "-c"], &dir.path().join("steerdns.yaml"));
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("no zone in") && err.contains("is signed"), "{err}");
}

/// Rewrites `file` in `keys` with `edit`.
fn edit(keys: &Path, file: &str, edit: impl Fn(&str) -> String) {
    let path = keys.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(&text)).unwrap();
}

/// Renames both files of `from` to base name `to`.
fn rename(keys: &Path, from: &str, to: &str) {
    for ext in ["key", "private"] {
        std::fs::rename(keys.join(format!("{from}.{ext}")), keys.join(format!("{to}.{ext}")))
            .unwrap();
    }
}

/// The `PrivateKey:` line of a `.private` text replaced by `value`.
fn with_private_key(text: &str, value: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with("PrivateKey:") {
                format!("PrivateKey: {value}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn bad_keys_are_located_errors_from_check() {
    // (what, the setup on a key directory holding one CSK `base` (algorithm 13), the file
    // the error is in, "LINE:COL", what the message says)
    type Setup = Box<dyn Fn(&Path, &str) -> Option<String>>;
    let cases: Vec<(&str, Setup, &str, &str)> = vec![
        (
            "wrong zone",
            Box::new(|keys, base| {
                let other = keygen("other.test.", Algorithm::EcdsaP256Sha256, false, keys)
                    .unwrap()
                    .remove(0);
                std::fs::remove_file(keys.join(format!("{base}.key"))).unwrap();
                std::fs::remove_file(keys.join(format!("{base}.private"))).unwrap();
                let to = other.replace("other.test.", ZONE);
                rename(keys, &other, &to);
                Some(format!("{to}.key"))
            }),
            "5:1",
            "the DNSKEY's owner is other.test., not tm.example.test. as the file name says",
        ),
        (
            "algorithm mismatch, name and .key",
            Box::new(|keys, _| {
                let ed = keygen(ZONE, Algorithm::Ed25519, false, keys).unwrap().remove(0);
                let to = ed.replace("+015+", "+013+");
                rename(keys, &ed, &to);
                Some(format!("{to}.key"))
            }),
            "5:1",
            "the DNSKEY's algorithm is 15 (ED25519), the file name says 13 (ECDSAP256SHA256)",
        ),
        (
            "algorithm mismatch, .private",
            Box::new(|keys, base| {
                edit(keys, &format!("{base}.private"), |t| {
                    t.replace("Algorithm: 13 (ECDSAP256SHA256)", "Algorithm: 15 (ED25519)")
                });
                Some(format!("{base}.private"))
            }),
            "2:1",
            "Algorithm is 15 (ED25519), the public key's is 13 (ECDSAP256SHA256)",
        ),
        (
            "tag mismatch",
            Box::new(|keys, base| {
                let to = format!("K{ZONE}+013+00001");
                rename(keys, base, &to);
                Some(format!("{to}.key"))
            }),
            "5:1",
            "the file name says 1",
        ),
        (
            "zero private key",
            Box::new(|keys, base| {
                edit(keys, &format!("{base}.private"), |t| {
                    with_private_key(t, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==")
                });
                Some(format!("{base}.private"))
            }),
            "3:1",
            "PrivateKey is zero, which is no P-256 private key",
        ),
        (
            "private key too long",
            Box::new(|keys, base| {
                edit(keys, &format!("{base}.private"), |t| {
                    with_private_key(t, "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEB")
                });
                Some(format!("{base}.private"))
            }),
            "3:1",
            "PrivateKey holds 33 bytes, more than the 32 of a P-256 private key",
        ),
        (
            "malformed private key",
            Box::new(|keys, base| {
                edit(keys, &format!("{base}.private"), |t| with_private_key(t, "not base64!"));
                Some(format!("{base}.private"))
            }),
            "3:1",
            "PrivateKey is not base64",
        ),
        (
            "another key's private key",
            Box::new(|keys, base| {
                let other =
                    keygen(ZONE, Algorithm::EcdsaP256Sha256, false, keys).unwrap().remove(0);
                std::fs::rename(
                    keys.join(format!("{other}.private")),
                    keys.join(format!("{base}.private")),
                )
                .unwrap();
                std::fs::remove_file(keys.join(format!("{other}.key"))).unwrap();
                Some(format!("{base}.private"))
            }),
            "3:1",
            "the private key does not belong to the public key in",
        ),
        (
            ".private without .key",
            Box::new(|keys, _| {
                let zsk = keygen(ZONE, Algorithm::EcdsaP256Sha256, false, keys).unwrap().remove(0);
                std::fs::remove_file(keys.join(format!("{zsk}.key"))).unwrap();
                Some(format!("{zsk}.private"))
            }),
            "1:1",
            ".key is missing",
        ),
        (
            "unsupported algorithm",
            Box::new(|keys, _| {
                if !have("dnssec-keygen") {
                    return None;
                }
                Some(format!("{}.key", bind_keygen(keys, &["-a", "RSASHA256"])))
            }),
            "5:1",
            "algorithm 8 (RSASHA256) is not supported: steerdns signs with 13 (ECDSAP256SHA256) and 15 (ED25519)",
        ),
        (
            "a key file name without algorithm and tag",
            Box::new(|keys, _| {
                std::fs::write(keys.join(format!("K{ZONE}+13x.key")), "").unwrap();
                Some(format!("K{ZONE}+13x.key"))
            }),
            "1:1",
            "a key file's name is Ktm.example.test.+<algorithm>+<tag>.key",
        ),
        (
            "no active SEP key: a ZSK alone",
            Box::new(|keys, base| {
                let made = keygen(ZONE, Algorithm::EcdsaP256Sha256, true, keys).unwrap();
                for b in [base, made[0].as_str()] {
                    std::fs::remove_file(keys.join(format!("{b}.key"))).unwrap();
                    std::fs::remove_file(keys.join(format!("{b}.private"))).unwrap();
                }
                Some("steerdns.yaml".into())
            }),
            "8:13",
            "tm.example.test. has no active SEP key of algorithm 13 (ECDSAP256SHA256)",
        ),
        (
            "no active SEP key: the CSK inactive",
            Box::new(|keys, base| {
                edit(keys, &format!("{base}.private"), |t| {
                    format!("{t}Inactive: 20000101000000\n")
                });
                Some("steerdns.yaml".into())
            }),
            "8:13",
            "inactive since 20000101000000",
        ),
        (
            "no active SEP key: an algorithm without one",
            Box::new(|keys, _| {
                let made = keygen(ZONE, Algorithm::Ed25519, true, keys).unwrap();
                std::fs::remove_file(keys.join(format!("{}.private", made[0]))).unwrap();
                Some("steerdns.yaml".into())
            }),
            "8:13",
            "no active SEP key of algorithm 15 (ED25519)",
        ),
    ];
    for (what, prepare, line_col, message) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = setup(dir.path(), "");
        let keys = dir.path().join("keys");
        let base = keygen(ZONE, Algorithm::EcdsaP256Sha256, false, &keys).unwrap().remove(0);
        let Some(file) = prepare(&keys, &base) else {
            eprintln!("{what}: skipped");
            continue;
        };
        let (code, out, _) = steerdns(&["check", "-c"], &path);
        assert_eq!(code, 1, "{what}: {out}");
        let at = if file == "steerdns.yaml" { path.clone() } else { keys.join(&file) };
        let want = format!("{}:{line_col}: ", at.display());
        assert!(
            out.lines().any(|l| l.starts_with(&want) && l.contains(message)),
            "{what}: want {want}…{message}, got:\n{out}"
        );
    }
}

#[test]
fn bad_settings_are_located() {
    let cases = [
        (
            "      signature_validity: soon\n",
            "steerdns.yaml:9:27: dnssec.signature_validity: invalid duration",
        ),
        (
            "      signature_validity: 10m\n",
            "steerdns.yaml:9:27: dnssec.signature_validity must be whole seconds between 1h and 365d",
        ),
        (
            "      inception_offset: 8d\n",
            "steerdns.yaml:9:25: dnssec.inception_offset must be whole seconds between 0s and 7d",
        ),
        (
            "      signature_validity: 1h\n",
            "steerdns.yaml:9:27: dnssec.signature_validity (3600 s) must be longer than inception_offset (3600 s)",
        ),
        ("      colour: red\n", "steerdns.yaml:9:7: unknown field `colour`"),
    ];
    for (extra, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = setup(dir.path(), extra);
        keygen(ZONE, Algorithm::EcdsaP256Sha256, false, &dir.path().join("keys")).unwrap();
        let errors = match config::load(&path, None) {
            Ok(_) => vec![],
            Err(e) => {
                e.0.iter()
                    .map(|e| format!("steerdns.yaml:{}:{}: {}", e.pos.line, e.pos.col, e.message))
                    .collect()
            }
        };
        assert!(errors.iter().any(|e| e.starts_with(want)), "want {want}, got {errors:#?}");
    }
    // A key directory that is not there.
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), "");
    std::fs::remove_dir(dir.path().join("keys")).unwrap();
    let e = config::load(&path, None).unwrap_err();
    assert!(e.0[0].message.starts_with("cannot read the key directory"), "{e}");
    assert_eq!((e.0[0].pos.line, e.0[0].pos.col), (8, 13));
}

/// Sets the timing line `name` of a `.private` file to `at`.
fn set_time(keys: &Path, base: &str, name: &str, at: u64) {
    let value = steerdns::config::keyfile::format_time(at);
    edit(keys, &format!("{base}.private"), |t| {
        let kept: Vec<&str> = t.lines().filter(|l| !l.starts_with(&format!("{name}:"))).collect();
        format!("{}\n{name}: {value}\n", kept.join("\n"))
    });
}

#[test]
fn timing_decides_the_keys_of_a_load() {
    let hour = 3_600;
    let t = now();
    // (timing lines of a second key (a ZSK), whether it is published, whether it signs)
    type Lines<'a> = &'a [(&'a str, u64)];
    let cases: &[(Lines, bool, bool)] = &[
        (&[], true, true),
        (&[("Publish", t + hour)], false, false),
        (&[("Publish", t - hour), ("Activate", t + hour)], true, false),
        (&[("Inactive", t - hour)], true, false),
        (&[("Inactive", t + hour), ("Delete", t + 2 * hour)], true, true),
        (&[("Inactive", t - 2 * hour), ("Delete", t - hour)], false, false),
    ];
    for (i, (timing, published, signs)) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let path = setup(dir.path(), "");
        let keys = dir.path().join("keys");
        let made = keygen(ZONE, Algorithm::Ed25519, true, &keys).unwrap();
        for (name, at) in *timing {
            set_time(&keys, &made[1], name, *at);
        }
        let loaded = config::load(&path, None).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let s = loaded.snapshot.zones[0].dnssec.clone().unwrap();
        let zsk = s.keys.iter().find(|k| k.flags == 256);
        assert_eq!(zsk.is_some(), *published, "case {i}");
        assert_eq!(
            zsk.is_some_and(|k| k.signer.is_some() && k.timing.active(now())),
            *signs,
            "case {i}"
        );
        // The next time a key's timing changes is known, for the server's reload.
        let next = timing.iter().map(|(_, at)| *at).filter(|at| *at > t).min();
        assert_eq!(loaded.cache.keys.next_change, next, "case {i}");
    }
}

#[test]
fn a_public_key_alone_follows_the_timing_in_its_comments() {
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), "");
    let keys = dir.path().join("keys");
    let made = keygen(ZONE, Algorithm::EcdsaP256Sha256, true, &keys).unwrap();
    std::fs::remove_file(keys.join(format!("{}.private", made[1]))).unwrap();
    assert_eq!(signing(&path).keys.len(), 2, "published only");
    let gone = steerdns::config::keyfile::format_time(now() - 60);
    edit(&keys, &format!("{}.key", made[1]), |t| format!("; Delete: {gone} (a minute ago)\n{t}"));
    assert_eq!(signing(&path).keys.len(), 1, "deleted");
}

#[test]
fn the_serial_changes_with_the_key_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), "");
    let keys = dir.path().join("keys");
    keygen(ZONE, Algorithm::EcdsaP256Sha256, false, &keys).unwrap();
    let first = config::load(&path, None).unwrap();
    let same = config::load(&path, Some(first.previous())).unwrap();
    assert_eq!(same.snapshot.zones[0].serial, first.snapshot.zones[0].serial);
    keygen(ZONE, Algorithm::EcdsaP256Sha256, false, &keys).unwrap();
    let more = config::load(&path, Some(same.previous())).unwrap();
    assert!(more.snapshot.zones[0].serial > same.snapshot.zones[0].serial);
}

/// Polls the running server until `keys` of its zone are `want`; panics after 20 s.
async fn wait_for_keys(server: &Server, want: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let snap = server.snapshot();
        let got = snap.zones[0].dnssec.as_ref().map_or(0, |s| s.keys.len());
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got} keys, want {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_reloads_for_new_key_files_and_key_timing() {
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), "");
    let keys = dir.path().join("keys");
    keygen(ZONE, Algorithm::EcdsaP256Sha256, false, &keys).unwrap();
    let server = Server::start(&path).await.unwrap();
    wait_for_keys(&server, 1, "at start").await;

    // A new key file in the key directory: the file watcher reloads.
    let zsk = keygen(ZONE, Algorithm::EcdsaP256Sha256, false, &keys).unwrap().remove(0);
    wait_for_keys(&server, 2, "after a new key file").await;

    // A key deleted in two seconds: gone without any file change or reload request.
    let serial = server.snapshot().zones[0].serial;
    let generation = server.snapshot().generation;
    set_time(&keys, &zsk, "Delete", now() + 2);
    wait_for_keys(&server, 1, "after its Delete time").await;
    let snap = server.snapshot();
    assert!(snap.generation > generation && snap.zones[0].serial > serial);

    // A broken key file: the watcher's reload fails (counted), and the running keys and
    // configuration stay; a reload asked for fails too.
    let failures = || server.control().totals.reload_failures.load(Ordering::Relaxed);
    let (before, generation) = (failures(), server.snapshot().generation);
    std::fs::write(keys.join(format!("K{ZONE}+013+00001.private")), "junk").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while failures() == before {
        assert!(Instant::now() < deadline, "the file watcher did not try to reload");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server.snapshot().generation, generation, "the running configuration stays");
    wait_for_keys(&server, 1, "after a failed reload").await;
    let e = server.reload().expect_err("the broken key file fails the load");
    assert!(e.to_string().contains("+013+00001.private"), "{e}");
    assert_eq!(server.snapshot().generation, generation);
    server.shutdown().await;
}
