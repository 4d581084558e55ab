//! DNS cookies over real UDP: `dig +cookie` finds the server cookie good, a replica with the
//! same secret accepts another's cookie, a rotated secret keeps the old one valid while it
//! is the previous secret, a malformed COOKIE option is FORMERR, and `/metrics` counts
//! queries by their cookie. (BIND's resolver returning our cookies: `tests/named.rs`.)

mod common;

use common::*;

/// The COOKIE option's code.
const COOKIE: u16 = 10;
const CLIENT: [u8; 8] = [0x24, 0x64, 0xc4, 0xab, 0xcf, 0x10, 0xc9, 0x57];

/// Starts a server whose `steerdns.yaml` has `cookies:` with these secret files.
async fn with_secrets(secrets: &[(&str, &str)], block: &str) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), DEFAULT_PROFILES);
    for (file, hex) in secrets {
        std::fs::write(dir.path().join(file), format!("{hex}\n")).unwrap();
    }
    let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).unwrap();
    std::fs::write(dir.path().join("steerdns.yaml"), format!("{yaml}{block}")).unwrap();
    Harness::in_dir(dir).await
}

/// The COOKIE option of a reply.
fn cookie_of(r: &Reply) -> Vec<u8> {
    let wire = Wire::parse(&r.raw).expect("a reply");
    let options = wire.opt_options();
    let found = options.iter().find(|(code, _)| *code == COOKIE);
    found.map(|(_, data)| data.clone()).unwrap_or_else(|| panic!("no COOKIE option: {r:#?}"))
}

/// Sends `cookie` (client cookie, then any server cookie) and returns the reply's cookie.
async fn exchange(h: &Harness, cookie: &[u8]) -> Vec<u8> {
    let r = h.udp(&Q::new(&fq("www"), T_A).edns().option(COOKIE, cookie)).await;
    assert_eq!(r.rcode(), NOERROR, "{r:#?}");
    assert!(!r.msg.answers.is_empty(), "the query is answered as usual: {r:#?}");
    let got = cookie_of(&r);
    assert_eq!(got.len(), 24, "client cookie and a 16-byte server cookie: {got:?}");
    assert_eq!(got[..8], cookie[..8], "the client cookie is echoed");
    assert_eq!(got[8..12], [1, 0, 0, 0], "version 1, reserved zero");
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dig_finds_the_server_cookie_good() {
    if !have_tool("dig", "bind9-dnsutils") {
        return;
    }
    let h = Harness::start().await;
    let port = h.addr.port().to_string();
    let dig = |extra: &[&str]| {
        let mut args =
            vec!["@127.0.0.1", "-p", &port, "+cookie", "+norecurse", "+tries=1", "+time=2"];
        args.extend_from_slice(extra);
        args.push("www.tm.example.test");
        let out = std::process::Command::new("dig").args(&args).output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // dig warns of a reply cookie that does not echo its client cookie ("Client COOKIE
        // mismatch"), and a BADCOOKIE status would show in the header.
        let lower = said.to_lowercase();
        assert!(out.status.success(), "{said}");
        assert!(!lower.contains("badcookie") && !lower.contains("mismatch"), "{said}");
        assert!(!lower.contains("warning"), "{said}");
        said
    };
    // The cookie dig shows: hexadecimal, the 8-byte client cookie, then the server's
    // 16 (version 1, reserved zero, timestamp, hash); "(good)" is dig's check that the
    // client cookie came back.
    let cookie_line = |said: &str| -> String {
        let line = said.lines().find(|l| l.starts_with("; COOKIE:"));
        let line = line.unwrap_or_else(|| panic!("dig shows no COOKIE:\n{said}"));
        assert!(line.ends_with(" (good)"), "{line}");
        let hex = line.split_whitespace().nth(2).unwrap().to_string();
        assert_eq!(hex.len(), 48, "{line}");
        assert_eq!(&hex[16..24], "01000000", "version 1, reserved zero: {line}");
        hex
    };
    let first = dig(&[]);
    assert!(first.contains("status: NOERROR"), "{first}");
    let cookie = cookie_line(&first);
    // dig sends the whole cookie back when given it: the server accepts it, and echoes
    // that client cookie.
    let again = dig(&[&format!("+cookie={cookie}")]);
    assert!(again.contains("status: NOERROR"), "{again}");
    assert_eq!(cookie_line(&again)[..16], cookie[..16], "{again}");
    // `dig +header-only` asks for a server cookie alone, without a question.
    let header_only = dig(&["+header-only"]);
    assert!(
        header_only.contains("status: NOERROR") && header_only.contains("QUERY: 0"),
        "{header_only}"
    );
    cookie_line(&header_only);
    h.stop().await;
}

/// `query` without its question: what a client sends to ask only for a server cookie.
fn without_question(query: &[u8]) -> Vec<u8> {
    let mut end = 12;
    while query[end] != 0 {
        end += 1 + usize::from(query[end]);
    }
    let mut out = query[..12].to_vec();
    out[4..6].copy_from_slice(&[0, 0]);
    out.extend_from_slice(&query[end + 5..]);
    out
}

/// Asks for a server cookie alone; returns the reply's RCODE and cookie.
async fn ask_for_cookie(h: &Harness, cookie: &[u8]) -> (u16, Vec<u8>) {
    let q = without_question(&Q::new(&fq("www"), T_A).edns().option(COOKIE, cookie).bytes());
    let r = Reply::new(h.udp_bytes(&q).await);
    (r.rcode(), cookie_of(&r))
}

/// RFC 7873 §5.4: a query with no question and a COOKIE option gets a server cookie
/// (NOERROR), or BADCOOKIE and a fresh one when its server cookie is not ours; without a
/// COOKIE option it is FORMERR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_without_a_question_asks_for_a_server_cookie() {
    let h = Harness::start().await;
    let q = without_question(&Q::new(&fq("www"), T_A).edns().option(COOKIE, &CLIENT).bytes());
    let r = Reply::new(h.udp_bytes(&q).await);
    assert_eq!((r.rcode(), r.msg.queries.len(), r.msg.answers.len()), (NOERROR, 0, 0), "{r:#?}");
    let issued = cookie_of(&r);
    assert_eq!((issued.len(), &issued[..8]), (24, &CLIENT[..]));
    let (rcode, again) = ask_for_cookie(&h, &issued).await;
    assert_eq!((rcode, again), (NOERROR, issued.clone()), "a valid cookie: as sent");
    let forged = [&CLIENT[..], &[1, 0, 0, 0], &[0; 12]].concat();
    let (rcode, fresh) = ask_for_cookie(&h, &forged).await;
    assert_eq!(rcode, BADCOOKIE);
    assert_eq!((&fresh[..12], fresh.len()), (&issued[..12], 24), "a fresh server cookie");
    assert_ne!(fresh[16..], forged[16..]);
    let r =
        Reply::new(h.udp_bytes(&without_question(&Q::new(&fq("www"), T_A).edns().bytes())).await);
    assert_eq!(r.rcode(), FORMERR, "no question and no cookie: {r:#?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_secret_and_a_rotation_keeps_the_previous_one_valid() {
    let (a, b) = ("e5e973e5a6b2a43f48e7dc849e37bfcf", "445536bcd2513298075a5d379663c962");
    let block_a = "cookies:\n  secret_file: a.key\n";
    let one = with_secrets(&[("a.key", a)], block_a).await;
    let other = with_secrets(&[("a.key", a)], block_a).await;
    let issued = exchange(&one, &CLIENT).await;
    // A valid, fresh cookie comes back as it was sent, at either replica.
    assert_eq!(exchange(&one, &issued).await, issued);
    assert_eq!(exchange(&other, &issued).await, issued, "the other replica accepts it");

    // Rotation: the new secret makes new cookies, the old one is still accepted.
    let dir = one.dir.path();
    std::fs::write(dir.join("b.key"), b).unwrap();
    let yaml = std::fs::read_to_string(dir.join("steerdns.yaml")).unwrap();
    let rotating =
        yaml.replace(block_a, "cookies:\n  secret_file: b.key\n  previous_secret_file: a.key\n");
    std::fs::write(dir.join("steerdns.yaml"), &rotating).unwrap();
    one.server().reload().expect("reload with a rotated secret");
    // Still valid (a question-less query says so: NOERROR, not BADCOOKIE), and renewed with
    // the new secret.
    let (rcode, renewed) = ask_for_cookie(&one, &issued).await;
    assert_eq!(rcode, NOERROR, "the previous secret still validates");
    assert_ne!(renewed[8..], issued[8..], "and the client is moved to the new secret");
    assert_eq!(exchange(&one, &renewed).await, renewed, "which is valid and fresh");
    let fresh = exchange(&one, &CLIENT).await;
    assert_ne!(fresh[8..], issued[8..], "new cookies are made with the new secret");

    // Rotation done: a cookie made with the old secret is replaced.
    let done = rotating.replace("  previous_secret_file: a.key\n", "");
    std::fs::write(dir.join("steerdns.yaml"), done).unwrap();
    one.server().reload().expect("reload without the previous secret");
    let (rcode, _) = ask_for_cookie(&one, &issued).await;
    assert_eq!(rcode, BADCOOKIE, "an old-secret cookie is no longer valid");
    assert_eq!(exchange(&one, &fresh).await, fresh, "the new secret's cookie is");
    one.stop().await;
    other.stop().await;
}

/// `steerdns_cookie_queries_total` by kind: absent, client_only, valid, invalid.
async fn cookie_counts(h: &Harness) -> [f64; 4] {
    let m = scrape(h.admin(), None).await;
    ["absent", "client_only", "valid", "invalid"]
        .map(|kind| m.sum("steerdns_cookie_queries_total", &[("cookie", kind)]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_are_counted_by_their_cookie() {
    let h = Harness::with_admin(DEFAULT_PROFILES, None).await;
    let before = cookie_counts(&h).await;
    h.udp(&Q::new(&fq("www"), T_A)).await;
    h.udp(&Q::new(&fq("www"), T_A).edns()).await;
    let issued = exchange(&h, &CLIENT).await;
    for _ in 0..3 {
        exchange(&h, &issued).await;
    }
    let forged = [&CLIENT[..], &[1, 0, 0, 0], &[0; 12]].concat();
    for _ in 0..4 {
        exchange(&h, &forged).await;
    }
    let after = cookie_counts(&h).await;
    let counted: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    assert_eq!(counted, [2.0, 1.0, 3.0, 4.0], "absent, client only, valid, invalid");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_cookies_and_secrets() {
    let h = Harness::start().await;
    // RFC 7873: 8 bytes, or 16 to 40; anything else is FORMERR, with a COOKIE-less OPT.
    for len in [0usize, 7, 9, 15, 41] {
        let r = h.udp(&Q::new(&fq("www"), T_A).edns().option(COOKIE, &vec![1; len])).await;
        assert_eq!(r.rcode(), FORMERR, "{len} bytes: {r:#?}");
    }
    // A server cookie we did not make: the query is answered, with a new server cookie.
    let forged = [&CLIENT[..], &[1, 0, 0, 0], &[0; 12]].concat();
    let got = exchange(&h, &forged).await;
    assert_ne!(got[8..], forged[8..]);
    // Without a COOKIE option, no cookie in the reply.
    let r = h.udp(&Q::new(&fq("www"), T_A).edns()).await;
    let wire = Wire::parse(&r.raw).unwrap();
    assert!(wire.opt_options().iter().all(|(code, _)| *code != COOKIE), "{r:#?}");
    h.stop().await;

    // A secret file that is not 32 hexadecimal digits is a located configuration error.
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    std::fs::write(dir.path().join("short.key"), "e5e973\n").unwrap();
    let path = dir.path().join("steerdns.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{yaml}cookies:\n  secret_file: short.key\n")).unwrap();
    let errors = located(&steerdns::config::load(&path, None).unwrap_err());
    assert!(
        errors.iter().any(|e| e.starts_with("steerdns.yaml:")
            && e.contains("a cookie secret is 32 hexadecimal digits")),
        "{errors:#?}"
    );
}
