//! The cluster against a real etcd: a replica's session (lease, connected state), profiles
//! pushed to etcd and served alike by three replicas (child processes on 127.0.0.21-23),
//! refused pushes and edits, `cluster push|pull|status`, registration, `/api/v1/cluster`,
//! etcd outages and starting from the cache file.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use serde_json::Value;
use steerdns::model::cluster::EtcdSettings;
use steerdns::server::cluster::profiles::{self, Seen};

#[tokio::test]
async fn a_replica_reports_whether_it_reaches_etcd() {
    let Some(mut etcd) = Etcd::start() else { return };
    let keys = format!(
        "cluster:\n  node: one\n  lease: 10s\n  etcd:\n    endpoints: [\"{}\"]\n    prefix: /t/\n",
        etcd.url
    );
    let h = Harness::with_admin_and_keys(DEFAULT_PROFILES, &keys).await;
    let connected = async || scrape(h.admin(), None).await.sum("steerdns_cluster_connected", &[]);
    eventually(SPREAD, "connected", async || connected().await == 1.0).await;
    etcd.stop();
    eventually(SPREAD, "disconnected", async || connected().await == 0.0).await;
    // Queries are still answered.
    assert_eq!(h.udp(&Q::new("www.tm.example.test.", T_A)).await.rcode(), 0);
    etcd.start_again();
    eventually(SPREAD, "connected again", async || connected().await == 1.0).await;
    h.stop().await;
}

#[tokio::test]
async fn three_replicas_start_and_connect() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(etcd) = Etcd::start() else { return };
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut replicas = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let (yaml, dns, admin) = replica_yaml(i, &etcd.url, "/three/", "");
        for (name, text) in DEFAULT_PROFILES {
            std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
            std::fs::write(dir.path().join("profiles").join(name), text).unwrap();
        }
        replicas.push(Replica::start(dir.path(), i, &yaml, dns, admin).await);
    }
    for r in &replicas {
        let connected = async || scrape(r.admin, None).await.sum("steerdns_cluster_connected", &[]);
        eventually(SPREAD, "connected", async || connected().await == 1.0).await;
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(r.addr).await.unwrap();
        let raw = udp_exchange(&sock, &Q::new("www.tm.example.test.", T_A).bytes()).await.unwrap();
        assert_eq!(Reply::new(raw).rcode(), 0, "{}", r.node);
    }
    // Profiles from files: registered with revision 0.
    for r in &replicas {
        let info = async || {
            let nodes = cluster_info(r.admin).await["nodes"].clone();
            nodes.as_array().is_some_and(|n| n.len() == 3 && n.iter().all(|n| n["revision"] == 0))
        };
        eventually(SPREAD, "three nodes at revision 0", info).await;
    }
}

/// Longest wait for a change to reach every replica.
const SPREAD: Duration = Duration::from_secs(30);

/// Every profile the cluster tests push: the default ones and the location fixtures.
fn all_profiles() -> BTreeMap<String, String> {
    let defaults = DEFAULT_PROFILES.iter().map(|(n, t)| (n.to_string(), t.to_string()));
    defaults.chain(location_profiles()).collect()
}

/// Profiles whose answer depends only on the query and the client: every replica must give
/// the same one.
const DETERMINISTIC: &[&str] = &[
    "www",
    "prio2",
    "alias",
    "off",
    "app",
    "global2",
    "us",
    "us2",
    "geo",
    "geo-nw",
    "fr-child",
    "fast",
    "fast-noeu",
    "fast-pair",
    "office",
    "office-nofb",
    "office-fb",
];

/// Profiles with random picks (weighted, multivalue rotation, traffic dials, zones):
/// compared by rcode and the number of records only.
const RANDOM: &[&str] = &["api", "pool", "global", "eu", "geo-nest", "ga-50-100", "svc"];

/// ECS clients across the location fixtures: Paris, San Francisco, Beijing, Shanghai,
/// Sydney, New York, Frankfurt, the topology zones, the subnets, nowhere, IPv6.
const CLIENTS: &[&str] = &[
    "192.0.2.10",
    "192.0.2.200",
    "198.51.100.5",
    "198.51.100.200",
    "203.0.113.9",
    "100.64.10.5",
    "100.64.6.7",
    "10.1.2.3",
    "10.2.3.4",
    "172.16.1.1",
    "8.8.8.8",
    "2001:db8:a::150",
    "2001:db8:20::1",
];

/// One line per query of `DETERMINISTIC` and `RANDOM` (A and AAAA, without ECS and from
/// every client of `CLIENTS`), saying what `addr` answered.
async fn answers(addr: SocketAddr) -> Vec<String> {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    let mut out = Vec::new();
    let clients = std::iter::once(None).chain(CLIENTS.iter().map(Some));
    for client in clients {
        for (names, exact) in [(DETERMINISTIC, true), (RANDOM, false)] {
            for name in names {
                for qtype in [T_A, T_AAAA] {
                    let mut q = Q::new(&fq(name), qtype);
                    if let Some(c) = client {
                        q = q.edns().ecs(ip(c), if ip(c).is_ipv4() { 24 } else { 56 });
                    }
                    let raw = udp_exchange(&sock, &q.bytes()).await;
                    let r = Reply::new(raw.unwrap_or_else(|| panic!("{addr}: no answer")));
                    let what = if exact {
                        let mut rrs = r.answer_strings();
                        rrs.sort();
                        format!("{rrs:?} ecs {:?}", r.ecs())
                    } else {
                        format!("{} records", r.answer_strings().len())
                    };
                    out.push(format!("{name} {qtype} {client:?}: rcode {} {what}", r.rcode()));
                }
            }
        }
    }
    out
}

/// `/api/v1/cluster`'s `cluster` object.
async fn cluster_info(admin: SocketAddr) -> Value {
    let r = http_get(admin, "/api/v1/cluster", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["cluster"].clone()
}

async fn metric(admin: SocketAddr, name: &str) -> f64 {
    scrape(admin, None).await.sum(name, &[])
}

/// Waits until every replica serves `revision` and lists all of `replicas` as serving it.
async fn wait_revision(replicas: &[Replica], revision: i64) {
    for r in replicas {
        let serves = async || {
            let info = cluster_info(r.admin).await;
            let nodes = info["nodes"].as_array().cloned().unwrap_or_default();
            info["revision"] == revision
                && nodes.len() == replicas.len()
                && nodes.iter().all(|n| n["revision"] == revision && n["same_revision"] == true)
        };
        eventually(SPREAD, &format!("{} serves revision {revision}", r.node), serves).await;
    }
}

/// A cluster of replica directories using `profiles: etcd` with the location data, the
/// first one's configuration doubling as the operator's for `steerdns cluster`.
struct Cluster {
    etcd: Etcd,
    prefix: String,
    dirs: Vec<tempfile::TempDir>,
    yamls: Vec<(String, SocketAddr, SocketAddr)>,
}

impl Cluster {
    fn new(etcd: Etcd, prefix: &str, size: usize) -> Cluster {
        let mut c = Cluster { etcd, prefix: prefix.into(), dirs: Vec::new(), yamls: Vec::new() };
        for i in 0..size {
            let dir = tempfile::tempdir().unwrap();
            let (yaml, dns, admin) = replica_yaml_etcd(i, &c.etcd.url, prefix, LOCATION_KEYS);
            write_replica_dir(dir.path(), &yaml);
            std::fs::create_dir_all(dir.path().join("data")).unwrap();
            steerdns::geo::build(&location_fixture("city.csv"), &dir.path().join("data/city.mmdb"))
                .unwrap();
            std::fs::copy(location_fixture("latency.yaml"), dir.path().join("data/latency.yaml"))
                .unwrap();
            c.dirs.push(dir);
            c.yamls.push((yaml, dns, admin));
        }
        c
    }

    fn config(&self) -> PathBuf {
        self.dirs[0].path().join("steerdns.yaml")
    }

    fn spawn(&self, i: usize) -> Replica {
        let (yaml, dns, admin) = &self.yamls[i];
        Replica::spawn(self.dirs[i].path(), i, yaml, *dns, *admin)
    }

    async fn start(&self, i: usize) -> Replica {
        let (yaml, dns, admin) = &self.yamls[i];
        Replica::start(self.dirs[i].path(), i, yaml, *dns, *admin).await
    }

    /// `steerdns cluster ARGS -c <first replica's steerdns.yaml>`.
    async fn command(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let mut all: Vec<std::ffi::OsString> = vec!["cluster".into()];
        all.extend(args.iter().map(Into::into));
        all.extend(["-c".into(), self.config().into_os_string()]);
        run_steerdns(&all).await
    }

    /// Pushes `dir`; returns the new revision (panics unless the push succeeds).
    async fn push(&self, dir: &Path) -> i64 {
        let (code, out, err) = self.command(&["push", dir.to_str().unwrap()]).await;
        assert_eq!(code, Some(0), "push failed:\n{out}\n{err}");
        pushed_revision(&out)
    }

    fn settings(&self) -> EtcdSettings {
        EtcdSettings {
            endpoints: vec![self.etcd.url.clone()],
            prefix: self.prefix.clone(),
            tls: None,
            auth: None,
        }
    }

    /// What etcd holds under the profiles prefix, read directly.
    async fn stored(&self) -> Seen {
        let client = etcd_client::Client::connect([&self.etcd.url], None).await.unwrap();
        profiles::fetch(&client, &self.settings()).await.unwrap()
    }

    async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([&self.etcd.url], None).await.unwrap()
    }

    /// Rewrites the push marker alone, as a push that changes no file does: the revision
    /// moves, the profiles do not. Returns the new revision.
    async fn touch_marker(&self) -> i64 {
        let mut client = self.client().await;
        let key = format!("{}pushed", self.prefix);
        let put = client.put(key, "{\"files\": 0}", None).await.unwrap();
        put.header().unwrap().revision()
    }
}

/// Writes `files` as the only files of `dir`.
fn write_profiles(dir: &Path, files: &BTreeMap<String, String>) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn read_profiles(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect()
}

/// The keys and texts of what etcd holds, without revisions.
fn texts(seen: &Seen) -> Vec<(String, Option<String>)> {
    seen.files().map(|(k, s)| (k.to_string(), s.text.as_deref().map(String::from))).collect()
}

#[tokio::test]
async fn pushed_profiles_are_served_alike_and_bad_ones_are_refused() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(etcd) = Etcd::start() else { return };
    let cluster = Cluster::new(etcd, "/push/", 3);
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("profiles");
    write_profiles(&src, &all_profiles());

    // A dry run prints the difference and writes nothing.
    let (code, out, err) = cluster.command(&["push", "--dry-run", src.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("+ /push/profiles/priority.yaml ("), "{out}");
    assert!(out.contains("\n10 added, 0 changed, 0 removed, 0 unchanged\n"), "{out}");
    let last = out.trim_end().lines().last().unwrap_or_default();
    assert_eq!(last, "dry run: nothing written; the profiles in etcd are at revision 0");
    assert_eq!(cluster.stored().await.files().count(), 0);

    // The push says the revision it made, once, as etcd reads it back.
    let (code, out, err) = cluster.command(&["push", src.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    let first = cluster.stored().await.revision();
    assert!(first > 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[lines.len() - 2..],
        [
            "10 added, 0 changed, 0 removed, 0 unchanged".to_string(),
            format!("pushed: profiles revision {first} (was 0)")
        ],
        "{out}"
    );
    assert_eq!(out.matches("revision").count(), 1, "{out}");
    let config = cluster.config();
    let (code, out, err) =
        run_steerdns(&["check".as_ref(), "-c".as_ref(), config.as_os_str()]).await;
    assert_eq!((code, out.trim()), (Some(0), "ok: 40 profiles, 127 endpoints"), "{err}");
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(cluster.start(i).await);
    }
    wait_revision(&replicas, first).await;

    // The same answers everywhere, for every routing method.
    let base = answers(replicas[0].addr).await;
    assert!(
        base.iter().any(|l| l == "www 1 None: rcode 0 [\"A 192.0.2.10\"] ecs None"),
        "{base:#?}"
    );
    for r in &replicas[1..] {
        assert_eq!(answers(r.addr).await, base, "{} answers differently", r.node);
    }

    // Registration and the API: this node, the etcd it uses, every node with its revision.
    let info = cluster_info(replicas[1].admin).await;
    assert_eq!(info["node"], "node-1");
    assert_eq!(info["connected"], true);
    assert_eq!(info["profiles"], "etcd");
    assert_eq!(info["etcd"]["prefix"], "/push/");
    assert_eq!(info["etcd"]["endpoints"][0], cluster.etcd.url.as_str());
    let nodes = info["nodes"].as_array().unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(names, ["node-0", "node-1", "node-2"]);
    assert_eq!(nodes[2]["dns"][0], replicas[2].addr.to_string().as_str());
    assert_eq!(nodes[2]["admin"], replicas[2].admin.to_string().as_str());
    assert_eq!(nodes[2]["version"], env!("CARGO_PKG_VERSION"));
    assert!(nodes[2]["started"].as_str().unwrap().ends_with('Z'), "{nodes:?}");

    let (code, out, err) = cluster.command(&["status"]).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains(&format!("all 3 replicas serve revision {first}")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("node-2") && l.contains(" yes ")), "{out}");

    // A push that does not check writes nothing: a syntax error and a semantic one, both
    // located in their files.
    let mut bad = all_profiles();
    bad.insert("broken.yaml".into(), "name: broken\nrouting: [priority\n".into());
    bad.insert(
        "semantic.yaml".into(),
        "name: semantic\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1, priority: 5000 }\n"
            .into(),
    );
    let bad_dir = work.path().join("bad");
    write_profiles(&bad_dir, &bad);
    let before = cluster.stored().await;
    let (code, out, err) = cluster.command(&["push", bad_dir.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{out}\n{err}");
    let broken = format!("{}:2:", bad_dir.join("broken.yaml").display());
    let semantic = format!("{}:4:", bad_dir.join("semantic.yaml").display());
    assert!(out.contains(&broken) && out.contains(&semantic), "{out}");
    let after = cluster.stored().await;
    assert_eq!((texts(&after), after.revision()), (texts(&before), before.revision()));

    // A bad key written straight into etcd is refused by every replica, located at the key;
    // the answers stay.
    let mut client = cluster.client().await;
    let key = "/push/profiles/zz-bad.yaml";
    let text = "name: zz\nrouting: weighted\nendpoints:\n  - { name: a, target: 192.0.2.1, weight: 5000 }\n";
    client.put(key, text, None).await.unwrap();
    for r in &replicas {
        r.wait_line("the etcd:KEY:LINE:COL error", |l| {
            l.contains("reload rejected") && l.contains(&format!("etcd:{key}:4:"))
        })
        .await;
        let failures = async || metric(r.admin, "steerdns_reload_failures_total").await == 1.0;
        eventually(SPREAD, "one reload failure", failures).await;
        assert_eq!(cluster_info(r.admin).await["revision"], first);
        assert_eq!(metric(r.admin, "steerdns_reloads_total").await, 0.0);
    }
    assert_eq!(answers(replicas[2].addr).await, base);
    client.delete(key, None).await.unwrap();

    // Pull writes the files back; pushing them again changes nothing.
    let pulled = work.path().join("pulled");
    let (code, out, err) = cluster.command(&["pull", pulled.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains(&format!("pulled 10 files of profiles revision {first}")), "{out}");
    assert_eq!(read_profiles(&pulled), all_profiles());
    let (code, out, _) = cluster.command(&["push", pulled.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{out}");
    let nothing = format!("nothing to push: etcd holds these profiles at revision {first}");
    assert_eq!(out.trim_end().lines().last(), Some(nothing.as_str()), "{out}");
    let (code, _, err) = cluster.command(&["pull", pulled.to_str().unwrap()]).await;
    assert_eq!(code, Some(2));
    assert!(err.contains("is not empty"), "{err}");

    // A change reaches every replica, once each (no reload storm); a push that only
    // deletes still moves the revision on.
    let mut changed = all_profiles();
    let www = changed["priority.yaml"].replace("192.0.2.10", "192.0.2.110");
    changed.insert("priority.yaml".into(), www);
    changed.remove("multivalue.yaml");
    write_profiles(&src, &changed);
    let second = cluster.push(&src).await;
    assert!(second > first);
    wait_revision(&replicas, second).await;
    changed.remove("nested.yaml");
    write_profiles(&src, &changed);
    let (code, out, _) = cluster.command(&["push", src.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("- /push/profiles/nested.yaml"), "{out}");
    let third = cluster.stored().await.revision();
    assert!(third > second);
    wait_revision(&replicas, third).await;
    for r in &replicas {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(r.addr).await.unwrap();
        let ask = async |name: &str| {
            Reply::new(udp_exchange(&sock, &Q::new(&fq(name), T_A).bytes()).await.unwrap())
        };
        assert_eq!(ask("www").await.single(), "A 192.0.2.110", "{}", r.node);
        assert_eq!(ask("pool").await.rcode(), NXDOMAIN, "{}", r.node);
        assert_eq!(ask("global").await.rcode(), NXDOMAIN, "{}", r.node);
        assert_eq!(metric(r.admin, "steerdns_reloads_total").await, 2.0, "{}", r.node);
        assert_eq!(metric(r.admin, "steerdns_cluster_profiles_revision").await, third as f64);
    }
}

/// Sends `www A` to every replica in turn until `stop`, over UDP with one send and a
/// generous wait (a lost query is not retried, so it shows); counts rounds and misses.
async fn query_load(
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicUsize>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut id = 0u16;
    while !stop.load(Ordering::Relaxed) {
        for addr in &addrs {
            id = id.wrapping_add(1);
            let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            sock.connect(addr).await.unwrap();
            let q = Q::new(&fq("www"), T_A).id(id).bytes();
            sock.send(&q).await.unwrap();
            let mut buf = vec![0u8; 4096];
            match tokio::time::timeout(Duration::from_secs(5), sock.recv(&mut buf)).await {
                Ok(Ok(n)) => {
                    buf.truncate(n);
                    let answer = Reply::new(buf).answer_strings();
                    if answer != ["A 192.0.2.10"] {
                        problems.push(format!("{addr}: {answer:?}"));
                    }
                }
                _ => problems.push(format!("{addr}: no answer to query {id}")),
            }
        }
        rounds.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    problems
}

#[tokio::test]
async fn replicas_ride_out_an_etcd_outage_without_losing_a_query() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(etcd) = Etcd::start() else { return };
    let mut cluster = Cluster::new(etcd, "/outage/", 3);
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("profiles");
    write_profiles(&src, &all_profiles());
    let first = cluster.push(&src).await;
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(cluster.start(i).await);
    }
    wait_revision(&replicas, first).await;
    let mut generations = Vec::new();
    for r in &replicas {
        generations.push(cluster_info(r.admin).await["generation"].clone());
    }

    let (stop, rounds) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let addrs = replicas.iter().map(|r| r.addr).collect();
    let load = tokio::spawn(query_load(addrs, stop.clone(), rounds.clone()));
    let more_rounds = async |n: usize| {
        let from = rounds.load(Ordering::Relaxed);
        eventually(SPREAD, "query rounds", async || rounds.load(Ordering::Relaxed) >= from + n)
            .await;
    };
    more_rounds(10).await;
    cluster.etcd.stop();
    for r in &replicas {
        let down = async || metric(r.admin, "steerdns_cluster_connected").await == 0.0;
        eventually(SPREAD, "disconnected", down).await;
    }
    more_rounds(30).await;
    cluster.etcd.start_again();
    for r in &replicas {
        let up = async || metric(r.admin, "steerdns_cluster_connected").await == 1.0;
        eventually(SPREAD, "connected again", up).await;
    }
    // A revision that moves without a change of the profiles reaches every replica: their
    // watches follow etcd again.
    let moved = cluster.touch_marker().await;
    wait_revision(&replicas, moved).await;
    more_rounds(10).await;
    stop.store(true, Ordering::Relaxed);
    let problems = load.await.unwrap();
    assert!(problems.is_empty(), "{problems:#?}");

    // Nothing changed, so nothing was reloaded.
    for (r, generation) in replicas.iter().zip(&generations) {
        assert_eq!(&cluster_info(r.admin).await["generation"], generation, "{}", r.node);
        assert_eq!(metric(r.admin, "steerdns_reloads_total").await, 0.0, "{}", r.node);
        assert_eq!(metric(r.admin, "steerdns_reload_failures_total").await, 0.0, "{}", r.node);
    }

    // A push after the outage reaches everyone.
    let mut changed = all_profiles();
    let www = changed["priority.yaml"].replace("192.0.2.10", "192.0.2.120");
    changed.insert("priority.yaml".into(), www);
    write_profiles(&src, &changed);
    let second = cluster.push(&src).await;
    wait_revision(&replicas, second).await;
    for r in &replicas {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(r.addr).await.unwrap();
        let raw = udp_exchange(&sock, &Q::new(&fq("www"), T_A).bytes()).await.unwrap();
        assert_eq!(Reply::new(raw).single(), "A 192.0.2.120", "{}", r.node);
    }
}

#[tokio::test]
async fn a_replica_starts_from_its_cache_file_only() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(etcd) = Etcd::start() else { return };
    let mut cluster = Cluster::new(etcd, "/cache/", 3);
    // Short leases: a killed replica's registration and a twin's must expire in the test.
    for y in &mut cluster.yamls {
        y.0 = with_lease(&y.0, "3s");
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("profiles");
    write_profiles(&src, &all_profiles());
    let first = cluster.push(&src).await;
    let mut one = cluster.start(0).await;
    wait_revision(std::slice::from_ref(&one), first).await;
    let cache = cluster.dirs[0].path().join("cluster-cache.json");
    assert!(cache.exists());

    // etcd down: with its cache file the replica serves; without one, it says why and exits.
    cluster.etcd.stop();
    one.kill();
    let (code, out, err) = cluster.command(&["status"]).await;
    assert_eq!(code, Some(2), "{out}\n{err}");
    let unreachable = format!("etcd at {} is unreachable: connection refused", cluster.etcd.url);
    assert_eq!(err.trim_end(), format!("error: {unreachable}"));
    let mut one = cluster.start(0).await;
    one.wait_line("the cache warning", |l| l.contains("serving the profiles of the cache file"))
        .await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(one.addr).await.unwrap();
    let raw = udp_exchange(&sock, &Q::new(&fq("www"), T_A).bytes()).await.unwrap();
    assert_eq!(Reply::new(raw).single(), "A 192.0.2.10");
    assert_eq!(cluster_info(one.admin).await["revision"], first);
    // The API says why it lists no replica, in the same words.
    let info = cluster_info(one.admin).await;
    assert_eq!(info["nodes"], Value::Null, "{info}");
    let why = info["nodes_error"].as_str().unwrap_or_default();
    let timed_out = format!("etcd at {} timed out after 2s", cluster.etcd.url);
    assert!(why == unreachable || why == timed_out, "{info}");

    let mut two = cluster.spawn(1);
    assert_eq!(two.wait_exit().await, Some(1));
    let err = two.stderr_text();
    let missing = cluster.dirs[1].path().join("cluster-cache.json");
    assert!(
        err.contains(&format!("cannot read the profiles from etcd at {}", cluster.etcd.url)),
        "{err}"
    );
    assert!(err.contains(&format!("no cache file {}", missing.display())), "{err}");

    // etcd back: it catches up without a reload (nothing changed) and registers.
    cluster.etcd.start_again();
    let moved = cluster.touch_marker().await;
    wait_revision(std::slice::from_ref(&one), moved).await;
    assert_eq!(metric(one.admin, "steerdns_reloads_total").await, 0.0);

    // Profiles in etcd that do not load at startup: served from the cache file when there
    // is one, refused with their errors when there is none.
    let mut client = cluster.client().await;
    let key = "/cache/profiles/zz-bad.yaml";
    client.put(key, "name: zz\nrouting: nowhere\nendpoints: []\n", None).await.unwrap();
    let located = format!("etcd:{key}:2:");
    one.kill();
    let one = cluster.start(0).await;
    one.wait_line("the refusal", |l| {
        l.contains("profiles in etcd are refused") && l.contains(&located)
    })
    .await;
    one.wait_line("the cache warning", |l| l.contains("until etcd holds profiles that load")).await;
    assert_eq!(cluster_info(one.admin).await["revision"], moved);
    let mut two = cluster.spawn(1);
    assert_eq!(two.wait_exit().await, Some(1));
    let err = two.stderr_text();
    assert!(err.contains("the profiles in etcd are invalid") && err.contains(&located), "{err}");
    // Reloads load what etcd holds: refused until the key is gone.
    assert_eq!(http_post(one.admin, "/api/v1/reload", None).await.status, 422);
    client.delete(key, None).await.unwrap();
    let reloads = async || http_post(one.admin, "/api/v1/reload", None).await.status == 200;
    eventually(SPREAD, "a reload without the bad key", reloads).await;

    // A second replica under the same node name: one of the two is registered (the first,
    // unless its lease lapsed meanwhile on a loaded machine), the other says so loudly.
    let (yaml, dns, admin) = &cluster.yamls[2];
    let yaml = yaml.replace("node: node-2", "node: node-0");
    let twin = Replica::start(cluster.dirs[2].path(), 2, &yaml, *dns, *admin).await;
    let loud = |r: &Replica| {
        r.stderr_text()
            .lines()
            .any(|l| l.contains("two replicas run as the same node") && l.contains("ERROR"))
    };
    let one_registered = async || {
        let nodes = cluster_info(one.admin).await["nodes"].clone();
        let registered = nodes.as_array().map_or(0, Vec::len) == 1;
        let admin = nodes[0]["admin"].as_str().unwrap_or_default().to_string();
        (registered && admin == one.admin.to_string() && loud(&twin))
            || (registered && admin == twin.admin.to_string() && loud(&one))
    };
    eventually(SPREAD, "one node-0 registered, the other logging an error", one_registered).await;
}

#[tokio::test]
async fn a_replica_reads_everything_again_after_a_compaction() {
    let Some(etcd) = Etcd::start() else { return };
    let mut cluster = Cluster::new(etcd, "/compact/", 1);
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("profiles");
    write_profiles(&src, &all_profiles());
    let first = cluster.push(&src).await;
    // The replica reaches etcd through the proxy only.
    let proxy = Proxy::start(cluster.etcd.client).await;
    let yaml = cluster.yamls[0].0.replace(&cluster.etcd.url, &proxy.url);
    cluster.yamls[0].0 = yaml;
    let one = cluster.start(0).await;
    wait_revision(std::slice::from_ref(&one), first).await;

    proxy.cut();
    let down = async || metric(one.admin, "steerdns_cluster_connected").await == 0.0;
    eventually(SPREAD, "disconnected", down).await;
    // Meanwhile a profile changes and etcd forgets the history the replica would resume
    // from.
    let mut client = cluster.client().await;
    let www = all_profiles()["priority.yaml"].replace("192.0.2.10", "192.0.2.130");
    let put = client.put("/compact/profiles/priority.yaml", www, None).await.unwrap();
    let second = put.header().unwrap().revision();
    client
        .compact(second, Some(etcd_client::CompactionOptions::new().with_physical()))
        .await
        .unwrap();

    proxy.restore();
    wait_revision(std::slice::from_ref(&one), second).await;
    one.wait_line("the compaction notice", |l| l.contains("etcd compacted the revisions")).await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(one.addr).await.unwrap();
    let raw = udp_exchange(&sock, &Q::new(&fq("www"), T_A).bytes()).await.unwrap();
    assert_eq!(Reply::new(raw).single(), "A 192.0.2.130");
    assert_eq!(metric(one.admin, "steerdns_reloads_total").await, 1.0);
}

#[tokio::test]
async fn pushes_over_etcds_limits_name_the_flag_to_raise_and_write_nothing() {
    let Some(etcd) = Etcd::start() else { return };
    let cluster = Cluster::new(etcd, "/limits/", 1);
    let work = tempfile::tempdir().unwrap();
    let profile = |i: usize| {
        format!(
            "name: p{i}\nrouting: priority\nendpoints:\n  - {{ name: a, target: 192.0.2.1, always_serve: true }}\n"
        )
    };
    // 130 files: 131 operations with the marker, over the default 128.
    let many = work.path().join("many");
    let files = (0..130).map(|i| (format!("p{i:03}.yaml"), profile(i))).collect();
    write_profiles(&many, &files);
    let (code, out, err) = cluster.command(&["push", many.to_str().unwrap()]).await;
    assert_eq!(code, Some(2), "{out}\n{err}");
    assert!(err.contains("--max-txn-ops (default 128) must be at least 131"), "{err}");
    // One file of 2 MB, over the default 1.5 MiB a request.
    let big = work.path().join("big");
    let text: Vec<String> = (0..24_000).map(profile).collect();
    write_profiles(&big, &[("big.yaml".to_string(), text.join("---\n"))].into());
    let (code, out, err) = cluster.command(&["push", big.to_str().unwrap()]).await;
    assert_eq!(code, Some(2), "{out}\n{err}");
    assert!(err.contains("--max-request-bytes (default 1572864) must be at least"), "{err}");
    assert_eq!(cluster.stored().await.files().count(), 0);
}

#[tokio::test]
async fn the_cluster_api_without_cluster_is_null_and_needs_the_token() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some("s3cret")).await;
    let r = http_get(h.admin(), "/api/v1/cluster", None).await;
    assert_eq!(r.status, 401);
    let r = http_get(h.admin(), "/api/v1/cluster", Some("s3cret")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!({ "cluster": null }));
    h.stop().await;
}

/// Longest a replica may take to stop while etcd does not answer.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// An etcd that holds its connections and never answers, as behind a network partition
/// (frozen with SIGSTOP): stopping a replica does not wait for its calls in flight.
#[tokio::test]
async fn a_replica_stops_in_time_while_etcd_does_not_answer() {
    let Some(etcd) = Etcd::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (yaml, dns, admin) = replica_yaml(0, &etcd.url, "/silent/", "");
    std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
    for (name, text) in DEFAULT_PROFILES {
        std::fs::write(dir.path().join("profiles").join(name), text).unwrap();
    }
    let mut r = Replica::start(dir.path(), 0, &yaml, dns, admin).await;
    let connected = async || metric(r.admin, "steerdns_cluster_connected").await;
    eventually(SPREAD, "connected", async || connected().await == 1.0).await;
    etcd.pause();
    eventually(SPREAD, "disconnected", async || connected().await == 0.0).await;
    let asked = std::time::Instant::now();
    r.sigterm();
    let code = r.wait_exit().await;
    let took = asked.elapsed();
    etcd.resume();
    let log = r.stderr_text();
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains("did not stop in time"), "{log}");
    // A bound on a hang, not a speed: the shutdown gives etcd's calls a few seconds at
    // most; a loaded runner may add some.
    assert!(took < STOP_BOUND, "stopped after {took:?}:\n{log}");
}
