//! The cluster against an etcd that checks who connects: over TLS with client certificates
//! (`cluster.etcd.tls`), and with user authentication (`username`, `password_file`).
//! Replicas and `steerdns cluster` commands run as child processes, as in tests/cluster.rs.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::*;
use etcd_client::{Client, Permission};

/// Longest wait for a change to reach a replica.
const SPREAD: Duration = Duration::from_secs(30);

/// `yaml` (from `replica_yaml`) with `keys` (indented by four spaces) added to its
/// `cluster.etcd` block.
fn with_etcd_keys(yaml: &str, keys: &str) -> String {
    let at = yaml.find("    prefix: ").expect("not a replica_yaml");
    let end = at + yaml[at..].find('\n').unwrap() + 1;
    format!("{}{keys}{}", &yaml[..end], &yaml[end..])
}

async fn connected(admin: SocketAddr) -> f64 {
    scrape(admin, None).await.sum("steerdns_cluster_connected", &[])
}

/// The profiles revision `admin`'s replica serves.
async fn revision(admin: SocketAddr) -> serde_json::Value {
    let r = http_get(admin, "/api/v1/cluster", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["cluster"]["revision"].clone()
}

/// The A records `addr` answers for `name` in the test zone.
async fn resolve(addr: SocketAddr, name: &str) -> Vec<String> {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    let q = Q::new(&format!("{name}.tm.example.test."), T_A);
    let raw = udp_exchange(&sock, &q.bytes()).await.expect("an answer");
    Reply::new(raw).answer_strings()
}

/// Makes the default profiles (and `extra` as `extra.yaml`) the only files of `dir`.
fn write_default_profiles(dir: &Path, extra: Option<&str>) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in DEFAULT_PROFILES {
        std::fs::write(dir.join(name), text).unwrap();
    }
    if let Some(text) = extra {
        std::fs::write(dir.join("extra.yaml"), text).unwrap();
    }
}

/// `steerdns cluster push DIR -c CONFIG`.
async fn push(config: &Path, dir: &Path) -> (Option<i32>, String, String) {
    let args =
        ["cluster".as_ref(), "push".as_ref(), dir.as_os_str(), "-c".as_ref(), config.as_os_str()];
    run_steerdns(&args).await
}

#[tokio::test]
async fn replicas_reach_etcd_over_tls_only_with_the_right_authority() {
    let pki = TestPki::new();
    let Some(etcd) = Etcd::start_tls(&pki) else { return };
    assert!(etcd.url.starts_with("https://"), "{}", etcd.url);
    let tls = |ca: &Path| {
        format!(
            "    tls: {{ ca: \"{}\", cert: \"{}\", key: \"{}\" }}\n",
            ca.display(),
            pki.client_cert.display(),
            pki.client_key.display()
        )
    };

    // The right authority and a client certificate: a push goes through, and a replica
    // reading its profiles from etcd serves it.
    let good = tempfile::tempdir().unwrap();
    let (yaml, dns, admin) = replica_yaml_etcd(0, &etcd.url, "/tls/", "");
    let yaml = with_etcd_keys(&yaml, &tls(&pki.ca));
    write_replica_dir(good.path(), &yaml);
    let src = good.path().join("to-push");
    write_default_profiles(&src, None);
    let (code, out, err) = push(&good.path().join("steerdns.yaml"), &src).await;
    assert_eq!(code, Some(0), "push over TLS failed:\n{out}\n{err}\netcd:\n{}", etcd.log());
    let pushed = pushed_revision(&out);
    let replica = Replica::start(good.path(), 0, &yaml, dns, admin).await;
    eventually(SPREAD, "connected over TLS", async || connected(admin).await == 1.0).await;
    assert_eq!(revision(admin).await, pushed);
    assert_eq!(resolve(replica.addr, "www").await, ["A 192.0.2.10"]);

    // Another authority: etcd's certificate is not trusted. The replica (profiles from
    // files) serves, stays disconnected and says why; the push writes nothing and says why.
    let bad = tempfile::tempdir().unwrap();
    let (yaml, dns, admin) = replica_yaml(1, &etcd.url, "/tls/", "");
    let yaml = with_etcd_keys(&yaml, &tls(&pki.other_ca));
    write_default_profiles(&bad.path().join("profiles"), None);
    let untrusting = Replica::start(bad.path(), 1, &yaml, dns, admin).await;
    let why = untrusting
        .wait_line("why etcd is unreachable", |l| {
            l.contains("etcd unreachable") && l.contains("certificate")
        })
        .await;
    assert!(why.contains("UnknownIssuer") || why.contains("unknown issuer"), "{why}");
    assert_eq!(connected(admin).await, 0.0);
    assert_eq!(resolve(untrusting.addr, "www").await, ["A 192.0.2.10"]);
    let (code, out, err) = push(&bad.path().join("steerdns.yaml"), &src).await;
    assert_eq!(code, Some(2), "{out}\n{err}");
    let refused = format!("etcd at {} is unreachable: the TLS handshake failed: ", etcd.url);
    assert!(err.contains(&refused) && err.contains("certificate"), "{err}");

    // The right authority without a client certificate: etcd refuses the handshake.
    let anonymous = tempfile::tempdir().unwrap();
    let (yaml, _, _) = replica_yaml(2, &etcd.url, "/tls/", "");
    let yaml = with_etcd_keys(&yaml, &format!("    tls: {{ ca: \"{}\" }}\n", pki.ca.display()));
    write_replica_dir(anonymous.path(), &yaml);
    let (code, out, err) = push(&anonymous.path().join("steerdns.yaml"), &src).await;
    assert_eq!(code, Some(2), "{out}\n{err}");
    // etcd sends its alert (CertificateRequired) or closes first: either way, the message
    // names the handshake.
    let unreachable = format!("etcd at {} is unreachable: ", etcd.url);
    assert!(err.contains(&unreachable) && err.contains("TLS handshake"), "{err}");

    // The first replica never noticed.
    assert_eq!(connected(replica.admin).await, 1.0);
}

const ROOT_PASSWORD: &str = "root secret";
const REPLICA_PASSWORD: &str = "replica secret";
const OPERATOR_PASSWORD: &str = "operator secret";

/// Enables authentication on `url`'s etcd with the users docs/cluster.md describes: `root`
/// (role root); `steerdns` for the replicas, who may read and write `prefix`; and
/// `operator` for `steerdns cluster`, who may read `prefix` and write only the profiles and
/// the push marker.
async fn enable_auth(url: &str, prefix: &str) {
    let mut c = Client::connect([url], None).await.unwrap();
    c.user_add("root", ROOT_PASSWORD, None).await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    let roles = [
        ("steerdns", REPLICA_PASSWORD, vec![Permission::read_write(prefix).with_prefix()]),
        (
            "operator",
            OPERATOR_PASSWORD,
            vec![
                Permission::read(prefix).with_prefix(),
                Permission::read_write(format!("{prefix}profiles/")).with_prefix(),
                Permission::read_write(format!("{prefix}pushed")),
            ],
        ),
    ];
    for (name, password, permissions) in roles {
        c.role_add(name).await.unwrap();
        for p in permissions {
            c.role_grant_permission(name, p).await.unwrap();
        }
        c.user_add(name, password, None).await.unwrap();
        c.user_grant_role(name, name).await.unwrap();
    }
    c.auth_enable().await.unwrap();
}

/// `yaml` logging in as `user` with `password` (written to `dir/etcd-password`).
fn with_user(dir: &Path, yaml: &str, user: &str, password: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("etcd-password"), format!("{password}\n")).unwrap();
    with_etcd_keys(yaml, &format!("    username: {user}\n    password_file: etcd-password\n"))
}

#[tokio::test]
async fn replicas_log_in_with_a_user_that_may_use_only_their_prefix() {
    let Some(mut etcd) = Etcd::start() else { return };
    enable_auth(&etcd.url, "/auth/").await;
    let anonymous = Client::connect([&etcd.url], None).await.unwrap();
    assert!(anonymous.kv_client().get("/auth/x", None).await.is_err(), "auth is not enabled");

    // The operator pushes as root; the replica logs in as `steerdns`.
    let operator = tempfile::tempdir().unwrap();
    let (yaml, _, _) = replica_yaml_etcd(9, &etcd.url, "/auth/", "");
    write_replica_dir(operator.path(), &with_user(operator.path(), &yaml, "root", ROOT_PASSWORD));
    let config = operator.path().join("steerdns.yaml");
    let src = operator.path().join("to-push");
    write_default_profiles(&src, None);
    let (code, out, err) = push(&config, &src).await;
    assert_eq!(code, Some(0), "push as root failed:\n{out}\n{err}");
    let first = pushed_revision(&out);

    let dir = tempfile::tempdir().unwrap();
    let (yaml, dns, admin) = replica_yaml_etcd(0, &etcd.url, "/auth/", "");
    let yaml = with_user(dir.path(), &yaml, "steerdns", REPLICA_PASSWORD);
    let mut replica = Replica::start(dir.path(), 0, &yaml, dns, admin).await;
    eventually(SPREAD, "connected as steerdns", async || connected(admin).await == 1.0).await;
    assert_eq!(revision(admin).await, first);
    // It registered: its role lets it write under the prefix.
    let nodes = async || {
        let r = http_get(admin, "/api/v1/cluster", None).await;
        r.json()["cluster"]["nodes"].as_array().is_some_and(|n| n.len() == 1)
    };
    eventually(SPREAD, "registered", nodes).await;

    // A wrong password: the replica does not start, the push writes nothing; both say why.
    let wrong = tempfile::tempdir().unwrap();
    let (yaml, dns2, admin2) = replica_yaml_etcd(1, &etcd.url, "/auth/", "");
    let yaml = with_user(wrong.path(), &yaml, "steerdns", "not the password");
    let mut refused = Replica::spawn(wrong.path(), 1, &yaml, dns2, admin2);
    assert_eq!(refused.wait_exit().await, Some(1));
    let text = refused.stderr_text();
    assert!(text.contains("authentication failed, invalid user ID or password"), "{text}");
    let (code, out, err) = push(&wrong.path().join("steerdns.yaml"), &src).await;
    assert_eq!(code, Some(2), "{out}\n{err}");
    assert!(err.contains("authentication failed, invalid user ID or password"), "{err}");

    // etcd restarted forgets every token: the replica logs in again and follows pushes.
    etcd.stop();
    eventually(SPREAD, "disconnected", async || connected(admin).await == 0.0).await;
    etcd.start_again();
    eventually(SPREAD, "connected again", async || connected(admin).await == 1.0).await;
    let extra = "name: extra\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.77, priority: 1, always_serve: true }\n";
    write_default_profiles(&src, Some(extra));
    let (code, out, err) = push(&config, &src).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    let second = pushed_revision(&out);
    eventually(SPREAD, "the second push served", async || revision(admin).await == second).await;

    // The operator's role is enough for every command; it cannot write elsewhere.
    let ops = tempfile::tempdir().unwrap();
    let (yaml, _, _) = replica_yaml_etcd(8, &etcd.url, "/auth/", "");
    write_replica_dir(ops.path(), &with_user(ops.path(), &yaml, "operator", OPERATOR_PASSWORD));
    let ops_config = ops.path().join("steerdns.yaml");
    write_default_profiles(&src, None);
    let (code, out, err) = push(&ops_config, &src).await;
    assert_eq!(code, Some(0), "push as operator failed:\n{out}\n{err}");
    let third = pushed_revision(&out);
    eventually(SPREAD, "the operator's push served", async || revision(admin).await == third).await;
    let pulled = ops.path().join("pulled");
    for args in [vec!["status"], vec!["pull", pulled.to_str().unwrap()]] {
        let mut all = vec!["cluster"];
        all.extend(args);
        all.extend(["-c", ops_config.to_str().unwrap()]);
        let (code, out, err) = run_steerdns(&all).await;
        assert_eq!(code, Some(0), "{all:?} as operator failed:\n{out}\n{err}");
    }
    assert!(pulled.join("priority.yaml").exists());
    let mut operator = Client::connect(
        [&etcd.url],
        Some(etcd_client::ConnectOptions::new().with_user("operator", OPERATOR_PASSWORD)),
    )
    .await
    .unwrap();
    let denied = operator.put("/auth/nodes/node-0", "x", None).await.unwrap_err();
    assert!(denied.to_string().contains("permission denied"), "{denied}");

    // Started while etcd is down, it serves its cache file and logs in once etcd is back.
    replica.kill();
    etcd.stop();
    let replica = Replica::start(dir.path(), 0, &yaml_of(dir.path()), dns, admin).await;
    replica
        .wait_line("the cache warning", |l| l.contains("serving the profiles of the cache file"))
        .await;
    assert_eq!(revision(admin).await, third);
    assert_eq!(resolve(replica.addr, "www").await, ["A 192.0.2.10"]);
    etcd.start_again();
    eventually(SPREAD, "connected after a start from the cache", async || {
        connected(admin).await == 1.0
    })
    .await;
    eventually(SPREAD, "registered again", nodes).await;
}

fn yaml_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("steerdns.yaml")).unwrap()
}
