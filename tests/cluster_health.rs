//! Health agreed across replicas, against a real etcd: three `steerdns serve` processes on
//! 127.0.0.21..23, each probing from its own address (`probe.source_address`), and HTTP
//! backends that answer 503 to some of those addresses. Each quorum rule decides whether
//! the replicas fail the endpoint over, all of them alike; a killed replica's views stop
//! counting once its lease expires; without etcd each replica goes by its own probes, and
//! agrees again when etcd is back. With two monitors per endpoint, each replica combines
//! its own monitors by the rule, and the quorum is taken over those combined views.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Longest wait for the replicas to agree on something.
const AGREE: Duration = Duration::from_secs(30);

/// The probed endpoint: `main` on the backend's address, with `backup` (never probed)
/// taking over when it fails.
const MAIN: &str = "127.0.0.8";
const BACKUP: &str = "127.0.0.9";

struct Cluster {
    etcd: Etcd,
    /// One backend per monitor of `main`, each on its own port of `MAIN`.
    backends: Vec<SourceBackend>,
    replicas: Vec<Replica>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    /// etcd, the backend and three replicas with `quorum`; `None` when etcd is missing.
    async fn start(quorum: &str) -> Option<Cluster> {
        Cluster::start_with_lease(quorum, REPLICA_LEASE).await
    }

    /// As `start`, with the replicas' leases lasting `lease`.
    async fn start_with_lease(quorum: &str, lease: &str) -> Option<Cluster> {
        let etcd = Etcd::start()?;
        let backend = SourceBackend::start(MAIN).await;
        let profile = format!(
            "name: hc\nrouting: priority\nttl: 1\n\
             monitor: {{ port: {}, path: /health, interval: 1s, timeout: 500ms, tolerated_failures: 0 }}\n\
             endpoints:\n\
             \x20 - {{ name: main, target: {MAIN} }}\n\
             \x20 - {{ name: backup, target: {BACKUP}, always_serve: true }}\n",
            backend.addr.port()
        );
        Some(Cluster::launch(etcd, vec![backend], &profile, quorum, lease).await)
    }

    /// etcd, three replicas with `quorum`, and `main` with two HTTP monitors, `m1` and
    /// `m2`, on two backends, combined by `rule`; `None` when etcd is missing.
    async fn start_two_monitors(quorum: &str, rule: &str) -> Option<Cluster> {
        let etcd = Etcd::start()?;
        let backends = vec![SourceBackend::start(MAIN).await, SourceBackend::start(MAIN).await];
        let profile = format!(
            "name: hc\nrouting: priority\nttl: 1\n\
             monitor: {{ path: /health, interval: 1s, timeout: 500ms, tolerated_failures: 0 }}\n\
             endpoints:\n\
             \x20 - name: main\n\
             \x20   target: {MAIN}\n\
             \x20   monitors:\n\
             \x20     - {{ name: m1, protocol: http, port: {} }}\n\
             \x20     - {{ name: m2, protocol: http, port: {} }}\n\
             \x20   monitor_rule: {rule}\n\
             \x20 - {{ name: backup, target: {BACKUP}, always_serve: true }}\n",
            backends[0].addr.port(),
            backends[1].addr.port()
        );
        Some(Cluster::launch(etcd, backends, &profile, quorum, REPLICA_LEASE).await)
    }

    /// Three replicas serving `profile` (as `profiles/hc.yaml`) with `quorum` and `lease`.
    async fn launch(
        etcd: Etcd,
        backends: Vec<SourceBackend>,
        profile: &str,
        quorum: &str,
        lease: &str,
    ) -> Cluster {
        let mut replicas = Vec::new();
        let mut dirs = Vec::new();
        for i in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let source = format!("probe:\n  source_address: {}\n", replica_ip(i));
            let (yaml, dns, admin) = replica_yaml(i, &etcd.url, "/hc/", &source);
            let yaml = with_cluster_keys(&yaml, &format!("  health: {{ quorum: \"{quorum}\" }}\n"));
            let yaml = with_lease(&yaml, lease);
            std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
            std::fs::write(dir.path().join("profiles/hc.yaml"), profile).unwrap();
            replicas.push(Replica::start(dir.path(), i, &yaml, dns, admin).await);
            dirs.push(dir);
        }
        Cluster { etcd, backends, replicas, _dirs: dirs }
    }

    /// 503 for the replicas at these positions, 200 for the others.
    fn fail_for(&self, replicas: &[usize]) {
        self.fail_on(0, replicas);
    }

    /// 503 from backend `backend` for the replicas at these positions, 200 for the others.
    fn fail_on(&self, backend: usize, replicas: &[usize]) {
        let ips: Vec<IpAddr> = replicas.iter().map(|&i| IpAddr::V4(replica_ip(i))).collect();
        self.backends[backend].fail_for(&ips);
    }

    /// From every monitor up, makes node-0 see `m1` failing and node-1 `m2` (node-2
    /// neither), and waits until each replica shows those results as its own.
    async fn split_failures(&self) {
        // Every monitor up first (a new endpoint is served while still checking), so that
        // each view's reason is that of the failures below.
        self.wait_views(&ALL, &UP).await;
        self.wait_answers(&ALL, MAIN).await;
        self.fail_on(0, &[0]);
        self.fail_on(1, &[1]);
        // Each replica's monitors are its own results, not agreed ones.
        self.wait_monitors(0, &[("m1", "degraded"), ("m2", "online")]).await;
        self.wait_monitors(1, &[("m1", "online"), ("m2", "degraded")]).await;
        self.wait_monitors(2, &[("m1", "online"), ("m2", "online")]).await;
    }

    /// Waits until replica `i` shows `main`'s monitors with these (name, status), in order.
    async fn wait_monitors(&self, i: usize, want: &[(&str, &str)]) {
        let r = &self.replicas[i];
        let what = format!("{} sees the monitors {want:?}", r.node);
        let seen = async || {
            let ep = endpoint(r).await;
            let list = ep["monitors"].as_array().cloned().unwrap_or_default();
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            let got: Vec<(String, String)> =
                list.iter().map(|m| (text(&m["name"]), text(&m["status"]))).collect();
            got == want_views(want)
        };
        eventually(AGREE, &what, seen).await;
    }

    /// Waits until every running replica in `which` sees the views of `nodes` with these
    /// statuses (node, status), and no others.
    async fn wait_views(&self, which: &[usize], want: &[(&str, &str)]) {
        for &i in which {
            let r = &self.replicas[i];
            let what = format!("{} sees the views {want:?}", r.node);
            eventually(AGREE, &what, async || views(r).await == want_views(want)).await;
        }
    }

    /// Waits until the verdict of every replica in `which` says the failing views are not
    /// enough: the views seen have been judged, not only read.
    async fn wait_short_of_quorum(&self, which: &[usize]) {
        for &i in which {
            let r = &self.replicas[i];
            let what = format!("{} judges the views short of quorum", r.node);
            let short = async || {
                let ep = endpoint(r).await;
                ep["verdict"]["reason"]
                    .as_str()
                    .is_some_and(|t| t.contains("not enough for quorum"))
            };
            eventually(AGREE, &what, short).await;
        }
    }

    /// Waits until every replica in `which` shows `main` so that `check` holds of it (and
    /// answers `hc` with `answer`).
    async fn wait_endpoint(
        &self,
        which: &[usize],
        what: &str,
        answer_with: &str,
        check: impl Fn(&Value) -> bool,
    ) {
        for &i in which {
            let r = &self.replicas[i];
            let what = format!("{}: {what}", r.node);
            let holds = async || answer(r).await == answer_with && check(&endpoint(r).await);
            eventually(AGREE, &what, holds).await;
        }
    }

    /// Waits until every replica in `which` answers `hc` with `want`.
    async fn wait_answers(&self, which: &[usize], want: &str) {
        for &i in which {
            let r = &self.replicas[i];
            let what = format!("{} answers {want}", r.node);
            eventually(AGREE, &what, async || answer(r).await == want).await;
        }
    }
}

fn want_views(want: &[(&str, &str)]) -> Vec<(String, String)> {
    want.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect()
}

/// The A answer of `hc` from replica `r`, as text (empty for NODATA).
async fn answer(r: &Replica) -> String {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(r.addr).await.unwrap();
    let Some(raw) = udp_exchange(&sock, &Q::new("hc.tm.example.test.", T_A).bytes()).await else {
        return "no answer".into();
    };
    let addrs: Vec<String> = Reply::new(raw).addrs().iter().map(ToString::to_string).collect();
    addrs.join(",")
}

/// The admin API's endpoint `main` of `hc` on `r`.
async fn endpoint(r: &Replica) -> Value {
    let resp = http_get(r.admin, "/api/v1/profiles/hc", None).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    let list = body["endpoints"].as_array().unwrap().clone();
    list.into_iter().find(|e| e["name"] == "main").expect("endpoint main")
}

/// (node, status) of every vantage point `r` shows for `main`.
async fn views(r: &Replica) -> Vec<(String, String)> {
    let ep = endpoint(r).await;
    let Some(list) = ep["vantage_points"].as_array() else { return Vec::new() };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    list.iter().map(|v| (text(&v["node"]), text(&v["status"]))).collect()
}

const ALL: [usize; 3] = [0, 1, 2];

/// Every replica's view online.
const UP: [(&str, &str); 3] = [("node-0", "online"), ("node-1", "online"), ("node-2", "online")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_one_failing_vantage_point_fails_nothing_over() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(c) = Cluster::start("majority").await else { return };
    c.wait_answers(&ALL, MAIN).await;
    c.fail_for(&[0]);
    let seen = [("node-0", "degraded"), ("node-1", "online"), ("node-2", "online")];
    c.wait_views(&ALL, &seen).await;
    c.wait_short_of_quorum(&ALL).await;
    // Every replica counts node-0's failing view and still serves the endpoint.
    let short = "1 of 3 vantage points failing, not enough for quorum majority: node-0: HTTP 503, expected 200-299";
    c.wait_endpoint(&ALL, "online, 1 of 3 failing", MAIN, |ep| {
        let points = ep["vantage_points"].as_array().cloned().unwrap_or_default();
        ep["status"] == "online"
            && ep["verdict"]["status"] == "online"
            && ep["verdict"]["reason"] == short
            && points.first().is_some_and(|p| {
                p["reason"] == "HTTP 503, expected 200-299"
                    && p["at"].as_str().is_some_and(|at| at.ends_with('Z'))
            })
    })
    .await;
    // The admin API's explain shows the same.
    let r = &c.replicas[1];
    let explained = async || {
        let resp = http_get(r.admin, "/api/v1/explain?name=hc&client=192.0.2.1", None).await;
        let body = resp.json();
        let health = &body["health"][0];
        let metrics = scrape(r.admin, None).await;
        health["endpoint"] == "main"
            && health["status"] == "online"
            && health["vantage_points"].as_array().is_some_and(|v| v.len() == 3)
            && ["node-0", "node-1", "node-2"]
                .iter()
                .all(|node| metrics.sum("steerdns_cluster_views", &[("node", node)]) == 1.0)
    };
    eventually(AGREE, "explain and the metrics show three views", explained).await;

    // Two of three failing is a majority: every replica fails it over.
    c.fail_for(&[0, 2]);
    c.wait_endpoint(&ALL, "failed over by 2 of 3", BACKUP, |ep| {
        ep["status"] == "degraded"
            && ep["verdict"]["reason"].as_str().is_some_and(|r| {
                r.starts_with("2 of 3 vantage points failing (quorum majority): node-0: ")
            })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_one_failing_vantage_point_fails_over_everywhere() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(c) = Cluster::start("any").await else { return };
    c.wait_answers(&ALL, MAIN).await;
    c.fail_for(&[1]);
    c.wait_answers(&ALL, BACKUP).await;
    c.wait_views(&ALL, &[("node-0", "online"), ("node-1", "degraded"), ("node-2", "online")]).await;
    c.fail_for(&[]);
    c.wait_answers(&ALL, MAIN).await;
}

/// `all`: failed over only when every fresh view fails. A killed replica's view stops
/// counting when its lease expires, so when it was the only healthy one, the others fail
/// the endpoint over then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_needs_every_fresh_vantage_point_failing() {
    let _heavy = one_heavy_test_at_a_time().await;
    // A short lease: the test waits for one to expire.
    let Some(mut c) = Cluster::start_with_lease("all", "3s").await else { return };
    c.wait_answers(&ALL, MAIN).await;
    c.fail_for(&[1, 2]);
    let seen = [("node-0", "online"), ("node-1", "degraded"), ("node-2", "degraded")];
    c.wait_views(&ALL, &seen).await;
    c.wait_short_of_quorum(&ALL).await;
    c.wait_answers(&ALL, MAIN).await;
    c.fail_for(&[0, 1, 2]);
    c.wait_answers(&ALL, BACKUP).await;
    c.fail_for(&[1, 2]);
    c.wait_answers(&ALL, MAIN).await;

    c.replicas[0].kill();
    c.wait_answers(&[1, 2], BACKUP).await;
    c.wait_views(&[1, 2], &[("node-1", "degraded"), ("node-2", "degraded")]).await;
    c.wait_endpoint(&[2], "failed over by 2 of 2", BACKUP, |ep| {
        ep["verdict"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("2 of 2 vantage points failing (quorum all): "))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percent_quorums_count_the_share_of_failing_vantage_points() {
    let _heavy = one_heavy_test_at_a_time().await;
    // One of three is 33%: enough for 33%.
    let Some(c) = Cluster::start("33%").await else { return };
    c.wait_answers(&ALL, MAIN).await;
    c.fail_for(&[2]);
    c.wait_answers(&ALL, BACKUP).await;
    drop(c);
    // Not enough for 50%.
    let Some(c) = Cluster::start("50%").await else { return };
    c.wait_answers(&ALL, MAIN).await;
    c.fail_for(&[2]);
    let seen = [("node-0", "online"), ("node-1", "online"), ("node-2", "degraded")];
    c.wait_views(&ALL, &seen).await;
    c.wait_short_of_quorum(&ALL).await;
    c.wait_answers(&ALL, MAIN).await;
}

/// Without etcd, each replica goes by its own probes: only the one that sees 503 fails
/// the endpoint over; with etcd back, they agree again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_etcd_each_replica_goes_by_its_own_probes() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(mut c) = Cluster::start("majority").await else { return };
    c.wait_answers(&ALL, MAIN).await;
    c.fail_for(&[0]);
    let seen = [("node-0", "degraded"), ("node-1", "online"), ("node-2", "online")];
    c.wait_views(&ALL, &seen).await;
    c.etcd.stop();
    for r in &c.replicas {
        let what = format!("{} disconnected", r.node);
        let connected = async || scrape(r.admin, None).await.sum("steerdns_cluster_connected", &[]);
        eventually(AGREE, &what, async || connected().await == 0.0).await;
    }
    c.wait_answers(&[0], BACKUP).await;
    for i in [1, 2] {
        let node = c.replicas[i].node.clone();
        c.wait_views(&[i], &[(node.as_str(), "online")]).await;
        c.wait_answers(&[i], MAIN).await;
    }
    c.wait_endpoint(&[0], "its own view only", BACKUP, |ep| {
        ep["verdict"]["reason"] == "own view only (etcd unreachable): HTTP 503, expected 200-299"
    })
    .await;

    c.etcd.start_again();
    c.wait_views(&ALL, &seen).await;
    c.wait_answers(&ALL, MAIN).await;
    for r in &c.replicas {
        let connected = async || scrape(r.admin, None).await.sum("steerdns_cluster_connected", &[]);
        eventually(AGREE, &format!("{} connected", r.node), async || connected().await == 1.0)
            .await;
    }
}

/// Rule `all`, quorum `majority`: node-0 sees `m1` failing, node-1 `m2`, node-2 neither.
/// Each monitor fails on one replica of three only, but node-0's and node-1's own views of
/// the endpoint fail (the rule is applied on each replica first): a majority, so every
/// replica fails the endpoint over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replica_combines_its_monitors_before_the_quorum() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(c) = Cluster::start_two_monitors("majority", "all").await else { return };
    c.split_failures().await;
    let seen = [("node-0", "degraded"), ("node-1", "degraded"), ("node-2", "online")];
    c.wait_views(&ALL, &seen).await;
    let failing = "2 of 3 vantage points failing (quorum majority): \
        node-0: 1 of 2 monitors failing: m1 (HTTP 503, expected 200-299); rule all; \
        node-1: 1 of 2 monitors failing: m2 (HTTP 503, expected 200-299); rule all";
    c.wait_endpoint(&ALL, "failed over by 2 of 3 combined views", BACKUP, |ep| {
        ep["status"] == "degraded"
            && ep["verdict"]["status"] == "degraded"
            && ep["verdict"]["reason"] == failing
    })
    .await;
    // The admin API's explain shows the same views and verdict.
    let r = &c.replicas[2];
    let explained = async || {
        let resp = http_get(r.admin, "/api/v1/explain?name=hc&client=192.0.2.1", None).await;
        let body = resp.json();
        let health = &body["health"][0];
        let points = health["vantage_points"].as_array().cloned().unwrap_or_default();
        let statuses: Vec<&str> = points.iter().filter_map(|p| p["status"].as_str()).collect();
        health["endpoint"] == "main"
            && health["status"] == "degraded"
            && health["reason"] == failing
            && statuses == ["degraded", "degraded", "online"]
    };
    eventually(AGREE, "explain shows the combined views", explained).await;
    // node-1 sees both monitors again: one failing view is short of a majority.
    c.fail_on(1, &[]);
    c.wait_answers(&ALL, MAIN).await;
    c.wait_short_of_quorum(&ALL).await;
}

/// Rule `any`: the same failures leave every replica's own view online (one monitor up is
/// enough there), so every replica keeps serving the endpoint; when node-0 and node-1 each
/// see both monitors failing, a majority fails it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_any_on_each_replica_keeps_one_failing_monitor_online() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(c) = Cluster::start_two_monitors("majority", "any").await else { return };
    c.split_failures().await;
    c.wait_views(&ALL, &UP).await;
    c.wait_endpoint(&ALL, "online by 3 of 3 combined views", MAIN, |ep| {
        ep["status"] == "online" && ep["verdict"]["reason"] == "3 of 3 vantage points online"
    })
    .await;

    c.fail_on(0, &[0, 1]);
    c.fail_on(1, &[0, 1]);
    let seen = [("node-0", "degraded"), ("node-1", "degraded"), ("node-2", "online")];
    c.wait_views(&ALL, &seen).await;
    c.wait_answers(&ALL, BACKUP).await;
}

/// `steerdns_cluster_views` counts the views a replica uses in its verdicts only: a
/// replica of the previous version, during a rolling upgrade, writes its views under the
/// older layout (`health/<probe id>/<node>`), which no replica of this version reads as an
/// endpoint's view. Both keys of node-3 below are written in one transaction, so that a
/// replica takes them in together: counting both would show 2, never 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_under_the_older_key_layout_are_not_counted() {
    let _heavy = one_heavy_test_at_a_time().await;
    let Some(c) = Cluster::start("majority").await else { return };
    c.wait_views(&ALL, &UP).await;
    let mut client = etcd_client::Client::connect([c.etcd.url.as_str()], None).await.unwrap();
    let prefix = "/hc/health/";
    let listed = client
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix().with_keys_only()))
        .await
        .unwrap();
    let id = listed
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok()?.strip_prefix(prefix)?.strip_suffix("/node-0"))
        .map(str::to_string)
        .next()
        .expect("node-0's view of main");
    let view = r#"{"status":"online","reason":"probe succeeded","at":"2026-01-01T00:00:00Z"}"#;
    let port = c.backends[0].addr.port();
    let old = format!("{prefix}http:{MAIN}:{port}%2Fhealth~0123456789abcdef/node-3");
    let current = format!("{prefix}{id}/node-3");
    let both = etcd_client::Txn::new().and_then([
        etcd_client::TxnOp::put(old.as_str(), view, None),
        etcd_client::TxnOp::put(current.as_str(), view, None),
    ]);
    client.txn(both).await.unwrap();
    for r in &c.replicas {
        let counted = async || {
            let metrics = scrape(r.admin, None).await;
            ["node-0", "node-1", "node-2", "node-3"]
                .iter()
                .all(|node| metrics.sum("steerdns_cluster_views", &[("node", node)]) == 1.0)
        };
        eventually(AGREE, &format!("{} counts one view of each node", r.node), counted).await;
    }
}
