//! The load feedback loop closed over real sockets: steerdns reads each endpoint's load
//! from a real HTTP feed on loopback, and a demand driver sends real UDP queries and
//! reports to each feed the answers its endpoint got ("demand received"). The shares the
//! control loop publishes (`GET /api/v1/load`) must settle without oscillating, and a
//! loaded endpoint must spill the part of its answers its share says.
//!
//! Lockstep without timing: each feed read blocks until the driver has posted the next
//! window of answers, so control step `w` reads exactly window `w`, which was answered
//! with the shares of step `w - 1`. Every wait is bounded.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use common::*;
use serde_json::Value;
use tokio::sync::watch;

/// The feeds: the load to report for each name, and the window they belong to.
#[derive(Default)]
struct Feeds {
    loads: HashMap<String, f64>,
    /// The window each feed last reported.
    reported: HashMap<String, u64>,
}

#[derive(Clone)]
struct FeedServer {
    feeds: Arc<Mutex<Feeds>>,
    window: watch::Sender<u64>,
}

/// Answers with the feed's load of a window it has not reported yet, waiting for the
/// driver to post one (the control loop's read timeout bounds the wait).
async fn feed(State(s): State<FeedServer>, Path(name): Path<String>) -> String {
    let reported = s.feeds.lock().unwrap().reported.get(&name).copied().unwrap_or(0);
    let mut rx = s.window.subscribe();
    let window = *rx.wait_for(|w| *w > reported).await.expect("driver alive");
    let mut feeds = s.feeds.lock().unwrap();
    feeds.reported.insert(name.clone(), window);
    feeds.loads.get(&name).copied().unwrap_or(0.0).to_string()
}

impl FeedServer {
    async fn start() -> (FeedServer, SocketAddr) {
        let s = FeedServer { feeds: Arc::default(), window: watch::Sender::new(0) };
        let app = Router::new().route("/load/{name}", get(feed)).with_state(s.clone());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind feed");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(l, app).await });
        (s, addr)
    }

    /// Posts window `w`: each feed's load.
    fn post(&self, w: u64, loads: &[(&str, f64)]) {
        let mut feeds = self.feeds.lock().unwrap();
        for (name, load) in loads {
            feeds.loads.insert(name.to_string(), *load);
        }
        drop(feeds);
        self.window.send_replace(w);
    }
}

/// The rules: a read timeout (at most the interval) that the driver's window of queries
/// stays well within (where eight runs of this test shared one core, a window sent one
/// query after another took up to 4.7 s, and from `CLIENTS` sockets at once up to 3.9 s,
/// past the 3 s this test had), damping of 0.2 a step, and a deadband above the noise of a window's
/// random draws. That noise: at a share near 0.29, `first`'s 800 × 0.29 answers vary by
/// about 13, which moves the target by about 0.015 a step, 0.02 between two steps; a
/// deadband of 0.05 (under 3 of those) let one unlucky window in about fifty runs move a
/// settled share and the next move it back, and 0.08 is four.
const RULES: &str = "load:
  interval: 5s
  timeout: 5s
  stale_after: 60s
  low: 0.6
  high: 0.85
  max_step: 0.2
  deadband: 0.08
";

fn profiles(feed: SocketAddr) -> String {
    let url = |n: &str| format!("\"http://{feed}/load/{n}\"");
    format!(
        "name: wt
routing: weighted
endpoints:
  - {{ name: a, target: 192.0.2.1, weight: 1, always_serve: true, load: {{ capacity: 200, url: {} }} }}
  - {{ name: b, target: 192.0.2.2, weight: 1, always_serve: true, load: {{ capacity: 100000, url: {} }} }}
---
name: pr
routing: priority
endpoints:
  - {{ name: first, target: 192.0.2.11, priority: 1, always_serve: true, load: {{ capacity: 300, url: {} }} }}
  - {{ name: next, target: 192.0.2.12, priority: 2, always_serve: true }}
",
        url("a"),
        url("b"),
        url("first"),
    )
}

/// An endpoint's effective share and whether it is above high.
type Shares = HashMap<String, (f64, bool)>;

/// `GET /api/v1/load`: the step, and each endpoint's share and above-high flag by
/// "profile-label/endpoint".
async fn shares(admin: SocketAddr) -> (u64, Shares) {
    let v = http_get(admin, "/api/v1/load", None).await.json();
    let step = v["step"].as_u64().expect("step");
    let mut out = HashMap::new();
    for e in v["endpoints"].as_array().expect("endpoints") {
        let profile = e["profile"].as_str().expect("profile");
        let label = profile.split('.').next().unwrap_or_default();
        let key = format!("{label}/{}", e["endpoint"].as_str().expect("endpoint"));
        assert!(e["error"].is_null(), "{key}: feed error {}", e["error"]);
        let above = e["above_high"].as_bool().expect("above_high");
        out.insert(key, (e["share"].as_f64().expect("share"), above));
    }
    (step, out)
}

/// Waits (bounded) for step `step` to be published.
async fn wait_step(admin: SocketAddr, step: u64) -> Shares {
    for _ in 0..2000 {
        let (at, s) = shares(admin).await;
        if at >= step {
            // A step whose feed reads timed out before the window came ran without it.
            assert_eq!(at, step, "a step ran without a window of its own (load.timeout passed)");
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("step {step} was not published within 20 s of polling");
}

/// Clients sending a window's queries at once, each on a socket of its own.
const CLIENTS: usize = 8;

/// `n` queries `q`: how many answers each address got. The queries go out from `CLIENTS`
/// sockets at once: one after another, a window's round trips on a busy machine took longer
/// than the feed read timeout, and a step then ran without its window.
async fn demand(h: &Harness, q: &Q, n: usize) -> HashMap<String, usize> {
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (sock, query) = (h.fresh_udp().await, q.bytes());
        let share = n / CLIENTS + usize::from(c < n % CLIENTS);
        clients.spawn(async move {
            let mut addrs = Vec::with_capacity(share);
            for _ in 0..share {
                let reply = udp_exchange(&sock, &query).await.expect("a UDP reply");
                let r = Reply::new(reply);
                addrs.push(r.addrs().first().map(ToString::to_string).expect("an address"));
            }
            addrs
        });
    }
    let mut counts = HashMap::new();
    while let Some(addrs) = clients.join_next().await {
        for addr in addrs.expect("client task") {
            *counts.entry(addr).or_insert(0) += 1;
        }
    }
    assert_eq!(counts.values().sum::<usize>(), n);
    counts
}

/// Checks a share sequence (step 0 first) whose demand rose after `calm` steps: full
/// share while calm, then shed, settled, with bounded overshoot and at most one turn.
fn assert_settles(name: &str, seq: &[f64], calm: usize) {
    assert!(seq[..=calm].iter().all(|s| *s == 1.0), "{name}: {seq:.3?}");
    let last = *seq.last().unwrap();
    assert!(last < 0.8, "{name} was never shed: {seq:.3?}");
    // Settled: the last four steps within the deadband and the noise of the draws.
    let tail = &seq[seq.len() - 4..];
    let spread = tail.iter().cloned().fold(f64::MIN, f64::max)
        - tail.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread <= 0.08, "{name} did not settle: {seq:.3?}");
    // Overshoot bounded: never more than 0.1 below where it settled.
    let lowest = seq.iter().cloned().fold(f64::MAX, f64::min);
    assert!(lowest >= last - 0.1, "{name} overshot: {seq:.3?}");
    assert!(turns(seq) <= 1, "{name} oscillates: {seq:.3?}");
}

/// How many times a sequence turns: from going down to going up or back.
fn turns(seq: &[f64]) -> usize {
    let moves: Vec<f64> = seq.windows(2).map(|w| w[1] - w[0]).filter(|d| d.abs() > 1e-9).collect();
    moves.windows(2).filter(|m| m[0].signum() != m[1].signum()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_settle_without_oscillation_and_spill_in_proportion() {
    let (feeds, feed_addr) = FeedServer::start().await;
    let text = profiles(feed_addr);
    let h = Harness::with_admin_and_keys(&[("load.yaml", text.as_str())], RULES).await;
    let admin = h.admin();
    let (step0, start) = shares(admin).await;
    assert_eq!(step0, 0, "the first step waits for the first window");
    assert!(start.values().all(|s| *s == (1.0, false)), "{start:?}");
    // Windows 1..=3 at low demand (nothing above low), then 800 queries a window: at full
    // share `a` would get 400 of capacity 200 (utilisation 2) and `first` 800 of 300.
    const WINDOWS: u64 = 16;
    let mut current = start;
    let (mut wt_a, mut pr_first) = (vec![1.0], vec![1.0]);
    let mut spill_checks = 0;
    for w in 1..=WINDOWS {
        let n = if w <= 3 { 150 } else { 800 };
        let started = std::time::Instant::now();
        let wt = demand(&h, &Q::new("wt.tm.example.test.", T_A), n).await;
        let pr = demand(&h, &Q::new("pr.tm.example.test.", T_A), n).await;
        let got = |c: &HashMap<String, usize>, a: &str| c.get(a).copied().unwrap_or(0) as f64;
        // A priority endpoint with share s keeps a fraction s of what it would get; the
        // rest goes to the next priority. Above high, it takes no new answers at all.
        let (share, above) = current["pr/first"];
        let spilled = if above { 1.0 } else { 1.0 - share };
        let to_next = got(&pr, "192.0.2.12") / n as f64;
        if n >= 800 {
            assert!(
                (to_next - spilled).abs() < 0.07,
                "window {w}: `first` has share {share:.3} (above high: {above}), but \
                 {to_next:.3} of answers went to `next`"
            );
            spill_checks += 1;
        }
        println!("window {w}: {n} queries a name in {:?}", started.elapsed());
        feeds.post(
            w,
            &[
                ("a", got(&wt, "192.0.2.1")),
                ("b", got(&wt, "192.0.2.2")),
                ("first", got(&pr, "192.0.2.11")),
            ],
        );
        current = wait_step(admin, w).await;
        wt_a.push(current["wt/a"].0);
        pr_first.push(current["pr/first"].0);
        assert_eq!(current["wt/b"], (1.0, false), "b is far below low: full share");
    }
    println!("wt/a shares by step: {wt_a:.3?}");
    println!("pr/first shares by step: {pr_first:.3?}");
    assert!(spill_checks >= 10);
    assert_settles("wt/a", &wt_a, 3);
    assert_settles("pr/first", &pr_first, 3);
    h.stop().await;
}

/// A performance profile of two regions: clients in Paris are nearest `eu-west`, whose
/// endpoint is loaded; what it spills goes to the next nearest region, in proportion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_nearest_region_spills_in_proportion() {
    let (feeds, feed_addr) = FeedServer::start().await;
    let profile = format!(
        "name: fast
routing: performance
endpoints:
  - {{ name: dublin, target: 192.0.2.41, location: eu-west, always_serve: true, load: {{ capacity: 300, url: \"http://{feed_addr}/load/dublin\" }} }}
  - {{ name: virginia, target: 192.0.2.42, location: us-east, always_serve: true }}
"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    write_location_config(dir.path(), &[("fast.yaml".to_string(), profile)]);
    let yaml = std::fs::read_to_string(dir.path().join("steerdns.yaml")).expect("read");
    let yaml = format!("{}{RULES}", with_admin(&yaml, None));
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).expect("write");
    let h = Harness::in_dir(dir).await;
    let admin = h.admin();
    // A Paris client (the geo fixture's 192.0.2.0/25).
    let q = Q::new("fast.tm.example.test.", T_A).ecs("192.0.2.10".parse().unwrap(), 32);
    let calm = demand(&h, &q, 20).await;
    assert_eq!(calm.keys().collect::<Vec<_>>(), ["192.0.2.41"], "Paris is nearest eu-west");
    let mut current = shares(admin).await.1;
    let mut dublin = vec![1.0];
    for w in 1..=12 {
        let n = if w <= 2 { 150 } else { 800 };
        let got = demand(&h, &q, n).await;
        let (share, above) = current["fast/dublin"];
        let spilled = if above { 1.0 } else { 1.0 - share };
        let to_next = got.get("192.0.2.42").copied().unwrap_or(0) as f64 / n as f64;
        if n >= 800 {
            assert!(
                (to_next - spilled).abs() < 0.07,
                "window {w}: dublin has share {share:.3} (above high: {above}), but \
                 {to_next:.3} of answers went to us-east"
            );
        }
        feeds.post(w, &[("dublin", got.get("192.0.2.41").copied().unwrap_or(0) as f64)]);
        current = wait_step(admin, w).await;
        dublin.push(current["fast/dublin"].0);
    }
    println!("fast/dublin shares by step: {dublin:.3?}");
    assert_settles("fast/dublin", &dublin, 2);
    h.stop().await;
}

/// Pushed loads through the admin API: a push sheds the endpoint and is an event by its
/// author, a reload keeps the share in the new configuration's table, a clear brings the
/// full share back, and pushes to endpoints without `pushed: true` are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_loads_shed_survive_a_reload_and_clear() {
    let profile = "name: ps
routing: weighted
endpoints:
  - { name: p, target: 192.0.2.21, always_serve: true, load: { capacity: 100, pushed: true } }
  - { name: q, target: 192.0.2.22, always_serve: true }
";
    let rules = "load:\n  interval: 1s\n  max_step: 1\n";
    let h = Harness::with_admin_and_keys(&[("ps.yaml", profile)], rules).await;
    let admin = h.admin();
    let json = [("Content-Type", "application/json")];
    let path = "/api/v1/profiles/ps/endpoints/p/load";
    let r = http_with_body(admin, "PUT", path, &json, br#"{"load": 95, "ttl": "1h"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (r.json()["utilisation"].as_f64(), r.json()["by"].as_str()),
        (Some(0.95), Some("loopback"))
    );
    let events = http_get(admin, "/api/v1/events", None).await.json();
    let pushed: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "load_pushed")
        .collect();
    assert_eq!(pushed.len(), 1, "{events}");
    assert_eq!(
        (pushed[0]["to"].as_str(), pushed[0]["by"].as_str()),
        (Some("95"), Some("loopback"))
    );
    // A second push while the first is live is no new event.
    let r = http_with_body(admin, "PUT", path, &json, br#"{"utilisation": 0.95}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Bounded wait for a step that read it: utilisation 0.95 is above high (0.9).
    let mut shed = None;
    for _ in 0..300 {
        let (_, s) = shares(admin).await;
        if s["ps/p"].0 < 1.0 {
            shed = Some(s["ps/p"]);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (share, above) = shed.expect("the pushed load was never applied");
    assert!(above, "0.95 is above high");
    // The share in the table queries read, before and after a reload, equals the map's
    // (read while no step ran in between).
    let slot_share = |h: &Harness| {
        let snap = h.server().snapshot();
        let p = snap.profiles.iter().find(|p| p.name == "ps.tm.example.test.").expect("ps");
        let slot = p.endpoints.iter().find(|e| e.name == "p").and_then(|e| e.health_slot);
        snap.load.get(slot.expect("a slot"))
    };
    for reload in [false, true] {
        let mut checked = false;
        for _ in 0..50 {
            let before = h.server().control().load.current();
            if reload {
                h.server().reload().expect("reload");
            }
            let table = slot_share(&h);
            let after = h.server().control().load.current();
            if before.step != after.step {
                continue;
            }
            let e = after.get("ps.tm.example.test.", "p").expect("entry");
            let want = steerdns::model::Share::of(e.state.share, e.state.above_high);
            assert_eq!(table, want, "reload: {reload}");
            checked = true;
            break;
        }
        assert!(checked, "steps kept running between the reads");
    }
    assert!(share < 1.0);
    // Refused pushes.
    let q = "/api/v1/profiles/ps/endpoints/q/load";
    let r = http_with_body(admin, "PUT", q, &json, br#"{"load": 1}"#).await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("pushed: true"), "{}", r.text());
    let nothere = "/api/v1/profiles/ps/endpoints/nothere/load";
    assert_eq!(http_with_body(admin, "PUT", nothere, &json, br#"{"load": 1}"#).await.status, 404);
    let r = http_with_body(admin, "PUT", path, &json, br#"{"load": -3}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    // Cleared: no load known, the full share at the next step.
    assert_eq!(http(admin, "DELETE", path, &[]).await.status, 200);
    let mut full = false;
    for _ in 0..300 {
        if shares(admin).await.1["ps/p"] == (1.0, false) {
            full = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(full, "the share did not come back after the clear");
    let events = http_get(admin, "/api/v1/events", None).await.json();
    let kinds: Vec<&str> =
        events["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| k.starts_with("load_")).collect::<Vec<_>>(),
        [&"load_pushed", &"load_cleared"]
    );
    h.stop().await;
}
