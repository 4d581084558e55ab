//! The status page (`GET /`) and the calls it makes: first the JSON (`/api/v1/profiles`
//! with `q`, `status`, `offset`, `limit`, and `/api/v1/stats`) over plain HTTP, then the
//! page itself in a real headless Chromium, driven over WebDriver by fantoccini with a
//! chromedriver this test starts on a loopback port.
//!
//! Without `chromium` and `chromedriver` (Debian packages `chromium`, `chromium-driver`)
//! the browser checks are skipped, with a printed message. Browser tests run one at a time
//! (a lock), since each starts a whole browser on a small machine. Every browser test also
//! checks that the page logged no console error except the API answers it expects (404
//! for the events list while the server has none, 401 before the token is given).
//!
//! `STEERDNS_SCREENSHOT=docs/status-page.png cargo test --test status_page screenshot`
//! rewrites the README's screenshot.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

const TOKEN: &str = "status-page-t0ken";

/// Longest wait for anything the page should show within a few polls (it polls every 2 s).
const PATIENCE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// The JSON the page reads
// ---------------------------------------------------------------------------------------

async fn get_json(addr: SocketAddr, path: &str, token: Option<&str>) -> Value {
    let r = http_get(addr, path, token).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r.json()
}

fn names(list: &Value) -> Vec<String> {
    let profiles = list["profiles"].as_array().unwrap_or_else(|| panic!("no profiles: {list}"));
    profiles.iter().map(|p| p["name"].as_str().expect("name").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_without_a_token_and_the_api_still_needs_it() {
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let a = h.admin();
    for (path, kind) in
        [("/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/style.css", "text/css")]
    {
        let r = http_get(a, path, None).await;
        assert_eq!(r.status, 200, "GET {path}: {r:?}");
        assert!(r.header("content-type").unwrap_or("").starts_with(kind), "{path}: {r:?}");
        let policy = r.header("content-security-policy").unwrap_or("");
        assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        // Nothing of the configuration is in the files: the page reads it all from the API.
        assert!(!r.text().contains("tm.example.test"), "{path} holds configuration");
    }
    let page = http_get(a, "/", None).await.text();
    assert!(page.contains(r#"<script src="/ui/app.js""#), "{page}");
    for path in ["/api/v1/profiles?limit=1", "/api/v1/stats", "/api/v1/stats?q=www"] {
        assert_eq!(http_get(a, path, None).await.status, 401, "{path} without the token");
        assert_eq!(http_get(a, path, Some(TOKEN)).await.status, 200, "{path} with the token");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_profile_list_pages_and_filters_and_keeps_its_shape_without_parameters() {
    let h = Harness::with_admin(DEFAULT_PROFILES, None).await;
    let a = h.admin();
    let all = get_json(a, "/api/v1/profiles", None).await;
    let keys: BTreeSet<&str> = all.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["generation", "profiles"]), "{all}");
    let every = names(&all);
    assert!(every.len() > 6, "{every:?}");

    // Pages follow the full list's order.
    let first = get_json(a, "/api/v1/profiles?offset=0&limit=4", None).await;
    let second = get_json(a, "/api/v1/profiles?offset=4&limit=4", None).await;
    assert_eq!(names(&first), every[..4]);
    assert_eq!(names(&second), every[4..8]);
    for page in [&first, &second] {
        assert_eq!(page["total"], every.len(), "{page}");
        assert_eq!(
            page["profiles"][0],
            all["profiles"][every.iter().position(|n| *n == names(page)[0]).unwrap()]
        );
    }
    assert_eq!(first["offset"], 0);
    assert_eq!(second["limit"], 4);
    let past = get_json(a, &format!("/api/v1/profiles?offset={}", every.len()), None).await;
    assert_eq!((names(&past).len(), &past["total"]), (0, &json!(every.len())));

    // Name filter: a substring, any case.
    let eu = get_json(a, "/api/v1/profiles?q=EU", None).await;
    let want: Vec<String> = every.iter().filter(|n| n.contains("eu")).cloned().collect();
    assert!(!want.is_empty());
    assert_eq!(names(&eu), want);
    assert_eq!(eu["total"], want.len());

    // Status filter; `statuses` counts every status of the name filter's matches.
    let off = get_json(a, "/api/v1/profiles?status=disabled", None).await;
    let disabled: Vec<String> = all["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"] == "disabled")
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    assert!(disabled.contains(&"off.tm.example.test.".to_string()), "{all}");
    assert_eq!(names(&off), disabled);
    let statuses = off["statuses"].as_object().unwrap();
    let counted: u64 = statuses.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(counted, every.len() as u64, "{off}");
    assert_eq!(statuses["disabled"], disabled.len());

    for bad in ["offset=-1", "limit=many", "status=sleepy"] {
        let r = http_get(a, &format!("/api/v1/profiles?{bad}"), None).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.json()["error"].as_str().is_some_and(|e| !e.is_empty()), "{bad}");
        assert_eq!(http_get(a, &format!("/api/v1/stats?{bad}"), None).await.status, 400);
    }
    h.stop().await;
}

/// The `steerdns_answers_total` series of `profile` in `/metrics`, by endpoint.
async fn metric_answers(a: SocketAddr, profile: &str) -> Vec<(String, u64)> {
    let text = http_get(a, "/metrics", None).await.text();
    let prom = Prom::parse(&text).unwrap_or_else(|e| panic!("bad exposition ({e}):\n{text}"));
    let mut out: Vec<(String, u64)> = prom
        .select("steerdns_answers_total", &[("profile", profile)])
        .into_iter()
        .map(|s| (s.labels["endpoint"].clone(), s.value as u64))
        .collect();
    out.sort();
    out
}

fn stats_answers(stats: &Value, profile: &str) -> (u64, Vec<(String, u64)>) {
    let p = stats["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == profile)
        .unwrap_or_else(|| panic!("{profile} missing in {stats}"));
    let answers =
        p["answers"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap()));
    (p["queries"].as_u64().unwrap(), answers.filter(|(_, n)| *n > 0).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_queries_and_answers_per_endpoint_across_a_reload() {
    let h = Harness::with_admin(DEFAULT_PROFILES, None).await;
    let a = h.admin();
    const WWW: &str = "www.tm.example.test.";
    for _ in 0..7 {
        h.udp(&Q::new(&fq("www"), 1)).await;
    }
    h.udp(&Q::new(&fq("www"), 28)).await;
    h.udp(&Q::new(&fq("nope"), 1)).await;
    let stats = get_json(a, "/api/v1/stats?q=www", None).await;
    // A: `primary`; AAAA: `primary-v6`; the NXDOMAIN is no profile's.
    let want = (8, vec![("primary".to_string(), 7), ("primary-v6".to_string(), 1)]);
    assert_eq!(stats_answers(&stats, WWW), want);
    assert_eq!(metric_answers(a, WWW).await, want.1);
    assert!(stats["queries"].as_u64().unwrap() >= 9, "{stats}");
    let p = stats["profiles"].as_array().unwrap().iter().find(|p| p["name"] == WWW).unwrap();
    let endpoints: BTreeSet<&str> =
        p["answers"].as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(endpoints, BTreeSet::from(["primary", "primary-v6", "secondary"]));

    // A nested profile: its own endpoints are nested ones and are left out.
    let global = get_json(a, "/api/v1/stats?q=global.", None).await;
    assert_eq!(global["profiles"][0]["answers"], json!({}), "{global}");

    // A reload starts new counters; the totals carry on.
    let r = http_post(a, "/api/v1/reload", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(stats_answers(&get_json(a, "/api/v1/stats?q=www", None).await, WWW), want);
    h.udp(&Q::new(&fq("www"), 1)).await;
    let after = get_json(a, "/api/v1/stats?q=www", None).await;
    let want = (9, vec![("primary".to_string(), 8), ("primary-v6".to_string(), 1)]);
    assert_eq!(stats_answers(&after, WWW), want);
    assert_eq!(metric_answers(a, WWW).await, want.1);
    assert!(after["queries"].as_u64().unwrap() >= 10, "{after}");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// The browser
// ---------------------------------------------------------------------------------------

/// One browser at a time in this binary.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The `browser` log of the session (chromedriver's own command; each read returns the
/// entries logged since the previous one).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (::http::Method, Option<String>) {
        (::http::Method::POST, Some(r#"{"type":"browser"}"#.to_string()))
    }
}

struct Browser {
    _driver: ChromeDriver,
    client: Client,
    /// Every browser log entry read so far.
    log: Vec<Value>,
    _guard: tokio::sync::MutexGuard<'static, ()>,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium; `None` (and a printed reason) when
    /// either is not installed.
    async fn start() -> Option<Browser> {
        let guard = ONE_BROWSER.lock().await;
        let args = ["--window-size=1200,800", "--lang=en-US"];
        // The HTTPS test's certificate is self-signed.
        let caps = json!({ "acceptInsecureCerts": true });
        let (driver, client) = start_chromium(&args, caps, PATIENCE).await?;
        let b = Browser { _driver: driver, client, log: Vec::new(), _guard: guard };
        // The console checks read this log: make sure an error does reach it.
        b.js("console.error('steerdns: log check')").await;
        let log = b.client.issue_cmd(BrowserLog).await.expect("read the browser log");
        let seen = log.as_array().into_iter().flatten().any(|e| {
            e["level"] == "SEVERE" && e["message"].as_str().unwrap_or("").contains("log check")
        });
        assert!(seen, "console.error did not reach the browser log: {log}");
        Some(b)
    }

    async fn open(&self, addr: SocketAddr) {
        self.client.goto(&format!("http://{addr}/")).await.expect("open the page");
    }

    async fn open_https(&self, addr: SocketAddr) {
        self.client.goto(&format!("https://{addr}/")).await.expect("open the page over HTTPS");
    }

    async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// What the page shows: its state, the pager's total and offset, and each profile row
    /// (name, routing, status, queries/s, legend of the answer split, and the endpoints of
    /// an open one).
    async fn view(&self) -> Value {
        self.js(
            r##"
            const range = document.getElementById("range");
            const rows = [...document.querySelectorAll("#profiles > tbody.profile")].map((b) => {
              const c = b.rows[0].cells;
              return {
                name: b.dataset.key,
                routing: c[2].textContent,
                status: c[3].dataset.status,
                statusText: c[3].textContent,
                failover: c[3].dataset.failover === "yes",
                counts: c[4].textContent,
                qps: c[5].textContent,
                split: c[6].textContent,
                endpoints: [...b.querySelectorAll("table.endpoints > tbody > tr")].map((r) => ({
                  name: r.dataset.key,
                  status: r.cells[2].dataset.status,
                  badges: r.cells[2].textContent,
                  probe: r.cells[3].textContent,
                  change: r.cells[4].textContent,
                  button: r.cells[6].textContent,
                })),
              };
            });
            return {
              state: document.body.dataset.state,
              total: range.dataset.total === undefined ? null : Number(range.dataset.total),
              offset: range.dataset.offset === undefined ? null : Number(range.dataset.offset),
              hash: location.hash,
              tokenError: document.getElementById("token-error").hidden ? null : document.getElementById("token-error").textContent,
              eventsNote: document.getElementById("events-note").textContent,
              events: document.getElementById("events").textContent,
              notice: document.getElementById("notice").hidden ? null : document.getElementById("notice").textContent,
              protocol: location.protocol,
              readOnly: !document.getElementById("read-only").hidden,
              banner: document.getElementById("reload-banner").hidden ? null : document.getElementById("reload-banner").textContent,
              rateWindow: document.getElementById("rate-window").textContent,
              summary: document.getElementById("summary").textContent,
              conn: document.getElementById("conn").textContent,
              rows,
            };
            "##,
        )
        .await
    }

    /// Polls `view` until `done` holds; panics with the last view at the deadline.
    async fn wait_for(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let v = self.view().await;
            if done(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "the page never showed {what}; it shows:\n{v:#}");
            sleep(Duration::from_millis(100)).await;
        }
    }

    async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
        e.clear().await.expect("clear");
        if !text.is_empty() {
            e.send_keys(text).await.expect("type");
        }
    }

    /// Asserts that the page logged nothing at error level but the API's answers with one
    /// of the `allowed` statuses (401 before the token is given, 403 for a read token).
    async fn assert_no_console_error(&mut self, allowed: &[u16]) {
        let new = self.client.issue_cmd(BrowserLog).await.expect("read the browser log");
        self.log.extend(new.as_array().cloned().unwrap_or_default());
        let expected = |m: &str| {
            let failed = m.contains("Failed to load resource") && m.contains("/api/v1/");
            failed && allowed.iter().any(|s| m.contains(&format!("status of {s}")))
        };
        let errors: Vec<&Value> = self
            .log
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .filter(|e| !expected(e["message"].as_str().unwrap_or("")))
            .collect();
        assert!(errors.is_empty(), "console errors: {errors:#?}");
    }

    /// Ends the session (the browser quits); `drop` then ends chromedriver.
    async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

fn row<'a>(view: &'a Value, name: &str) -> Option<&'a Value> {
    view["rows"].as_array()?.iter().find(|r| r["name"] == name)
}

fn row_names(view: &Value) -> Vec<String> {
    view["rows"].as_array().map_or(vec![], |rows| {
        rows.iter().map(|r| r["name"].as_str().unwrap_or("").to_string()).collect()
    })
}

fn endpoint<'a>(view: &'a Value, profile: &str, ep: &str) -> Option<&'a Value> {
    row(view, profile)?["endpoints"].as_array()?.iter().find(|e| e["name"] == ep)
}

/// A profile probed on `backend` every second, failing on the first refused probe.
fn probed_profile(name: &str, backend: SocketAddr) -> String {
    format!(
        "name: {name}\nrouting: priority\n\
         monitor: {{ port: {}, interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\n\
         endpoints:\n  - {{ name: backend, target: {} }}\n",
        backend.port(),
        backend.ip()
    )
}

/// Sends A queries for `name` every 20 ms until the flag is cleared (at most 60 s).
fn traffic(h: &Harness, name: &str, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let (addr, q) = (h.addr, Q::new(&fq(name), 1).bytes());
    tokio::spawn(async move {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let _ = sock.send_to(&q, addr).await;
            let mut buf = [0u8; 1500];
            let _ = tokio::time::timeout(Duration::from_millis(20), sock.recv(&mut buf)).await;
            sleep(Duration::from_millis(20)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_every_profile_and_a_backend_going_down() {
    let Some(mut b) = Browser::start().await else { return };
    let backend = HttpBackend::start("127.0.0.1").await;
    let mut profiles: Vec<(&str, String)> =
        DEFAULT_PROFILES.iter().map(|(f, t)| (*f, t.to_string())).collect();
    profiles.push(("web.yaml", probed_profile("web", backend.addr)));
    let files: Vec<(&str, &str)> = profiles.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let h = Harness::with_admin(&files, None).await;
    let api = get_json(h.admin(), "/api/v1/profiles", None).await;
    let every = names(&api);

    b.open(h.admin()).await;
    let v = b.wait_for("every profile", |v| v["state"] == "live" && row_names(v) == every).await;
    assert_eq!(v["total"], every.len());
    for p in api["profiles"].as_array().unwrap() {
        let r = row(&v, p["name"].as_str().unwrap()).unwrap();
        assert_eq!(r["routing"], p["routing"], "{r}");
        assert!(r["status"] == p["status"] || p["name"] == "web.tm.example.test.", "{r} vs {p}");
    }
    let note = v["eventsNote"].as_str().unwrap();
    assert!(!note.contains("does not keep"), "the server keeps an event list: {v}");

    const WEB: &str = "web.tm.example.test.";
    b.wait_for("web online", |v| row(v, WEB).is_some_and(|r| r["status"] == "online")).await;
    b.click(&format!(r#"tbody[data-key="{WEB}"] button.toggle"#)).await;
    let v = b
        .wait_for("web's endpoint probed ok", |v| {
            endpoint(v, WEB, "backend").is_some_and(|e| {
                e["status"] == "online" && e["probe"].as_str().unwrap().starts_with("ok")
            })
        })
        .await;
    let ep = endpoint(&v, WEB, "backend").unwrap();
    assert!(ep["change"].as_str().unwrap().contains("checking → online"), "{ep}");
    assert_eq!(ep["button"], "Drain", "{ep}");

    backend.stop().await;
    let v = b
        .wait_for("web degraded after its backend stopped", |v| {
            row(v, WEB).is_some_and(|r| r["status"] == "degraded")
                && endpoint(v, WEB, "backend").is_some_and(|e| {
                    e["status"] == "degraded"
                        && e["probe"].as_str().unwrap().contains("connection refused")
                })
        })
        .await;
    let ep = endpoint(&v, WEB, "backend").unwrap();
    assert!(ep["change"].as_str().unwrap().contains("online → degraded"), "{ep}");
    b.wait_for("the status change in the events", |v| {
        v["events"].as_str().unwrap().contains("web.tm.example.test. / backend online → degraded")
    })
    .await;

    // Answers: www (priority) hands out `primary` only.
    let stop = Arc::new(AtomicBool::new(false));
    let load = traffic(&h, "www", stop.clone());
    const WWW: &str = "www.tm.example.test.";
    b.wait_for("www's answers split", |v| {
        row(v, WWW).is_some_and(|r| {
            r["split"].as_str().unwrap().contains("primary 100%")
                && r["qps"].as_str().unwrap().parse::<f64>().is_ok_and(|q| q > 0.0)
        })
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();

    b.assert_no_console_error(&[]).await;
    b.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtering_by_name_and_status_narrows_the_list() {
    let Some(mut b) = Browser::start().await else { return };
    let h = Harness::with_admin(DEFAULT_PROFILES, None).await;
    let all = get_json(h.admin(), "/api/v1/profiles", None).await;
    let every = names(&all);
    let disabled: Vec<String> = every
        .iter()
        .zip(all["profiles"].as_array().unwrap())
        .filter(|(_, p)| p["status"] == "disabled")
        .map(|(n, _)| n.clone())
        .collect();
    assert!(!disabled.is_empty() && disabled.len() < every.len(), "{all}");
    b.open(h.admin()).await;
    b.wait_for("every profile", |v| row_names(v) == every).await;

    let eu: Vec<String> = every.iter().filter(|n| n.contains("eu")).cloned().collect();
    assert!(eu.len() >= 2 && eu.len() < every.len(), "{eu:?}");
    b.type_into("#filter", "EU").await;
    let v = b.wait_for("only the eu profiles", |v| row_names(v) == eu).await;
    assert_eq!(v["total"], eu.len());
    assert_eq!(v["hash"], "#q=EU");

    b.type_into("#filter", "").await;
    b.wait_for("every profile again", |v| row_names(v) == every).await;
    b.client
        .find(Locator::Css("#status-filter"))
        .await
        .unwrap()
        .select_by_value("disabled")
        .await
        .unwrap();
    b.wait_for("the disabled profiles", |v| row_names(v) == disabled).await;

    // The filter lives in the address: a reload keeps it.
    b.client.refresh().await.unwrap();
    b.wait_for("the disabled profiles after a reload", |v| {
        v["state"] == "live" && row_names(v) == disabled
    })
    .await;
    b.type_into("#filter", "no-such-profile").await;
    b.wait_for("nothing", |v| v["total"] == 0 && row_names(v).is_empty()).await;

    b.assert_no_console_error(&[]).await;
    b.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_is_asked_for_and_kept_for_the_session() {
    let Some(mut b) = Browser::start().await else { return };
    let h = Harness::with_admin(DEFAULT_PROFILES, Some(TOKEN)).await;
    let every = names(&get_json(h.admin(), "/api/v1/profiles", Some(TOKEN)).await);
    b.open(h.admin()).await;
    b.wait_for("the token form", |v| v["state"] == "login").await;

    b.type_into("#token", "not-the-token").await;
    b.click("#token-submit").await;
    let v = b.wait_for("a refusal", |v| !v["tokenError"].is_null()).await;
    assert_eq!(v["state"], "login");
    assert!(v["rows"].as_array().unwrap().is_empty(), "{v}");

    b.type_into("#token", TOKEN).await;
    b.click("#token-submit").await;
    b.wait_for("every profile", |v| v["state"] == "live" && row_names(v) == every).await;

    // Kept in the tab: a reload asks for nothing.
    b.client.refresh().await.unwrap();
    b.wait_for("every profile after a reload", |v| v["state"] == "live" && row_names(v) == every)
        .await;
    b.click("#forget-token").await;
    b.wait_for("the token form again", |v| v["state"] == "login").await;

    b.assert_no_console_error(&[401]).await;
    b.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_button_drains_and_undrains_an_endpoint() {
    let Some(mut b) = Browser::start().await else { return };
    let h = Harness::with_admin(DEFAULT_PROFILES, None).await;
    const API: &str = "api.tm.example.test.";
    b.open(h.admin()).await;
    b.wait_for("api", |v| row(v, API).is_some()).await;
    b.click(&format!(r#"tbody[data-key="{API}"] button.toggle"#)).await;
    b.wait_for("a Drain button for site-a", |v| {
        endpoint(v, API, "site-a").is_some_and(|e| e["button"] == "Drain")
    })
    .await;

    let button = format!(r#"tbody[data-key="{API}"] tr[data-key="site-a"] button.drain"#);
    b.click(&button).await;
    let v = b
        .wait_for("site-a drained", |v| {
            endpoint(v, API, "site-a").is_some_and(|e| {
                e["button"] == "Undrain" && e["badges"].as_str().unwrap().contains("drained")
            })
        })
        .await;
    assert_eq!(endpoint(&v, API, "site-b").unwrap()["button"], "Drain", "{v}");
    let detail = get_json(h.admin(), "/api/v1/profiles/api", None).await;
    let site_a = detail["endpoints"].as_array().unwrap().iter().find(|e| e["name"] == "site-a");
    assert_eq!(site_a.unwrap()["drained"], true, "{detail}");
    b.wait_for("the drain in the events", |v| {
        v["events"].as_str().unwrap().contains("drained api.tm.example.test. / site-a")
    })
    .await;

    b.click(&button).await;
    b.wait_for("site-a undrained", |v| {
        endpoint(v, API, "site-a").is_some_and(|e| {
            e["button"] == "Drain" && !e["badges"].as_str().unwrap().contains("drained")
        })
    })
    .await;
    let detail = get_json(h.admin(), "/api/v1/profiles/api", None).await;
    let site_a = detail["endpoints"].as_array().unwrap().iter().find(|e| e["name"] == "site-a");
    assert_eq!(site_a.unwrap()["drained"], false, "{detail}");

    b.assert_no_console_error(&[]).await;
    b.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_time_bias_shows_in_the_row_and_on_the_endpoint() {
    let Some(mut b) = Browser::start().await else { return };
    let near = "name: near\nrouting: geoproximity\nendpoints:\n\
        \x20 - { name: dublin, target: 192.0.2.31, coordinates: { latitude: 53.35, longitude: -6.26 }, bias: 10, always_serve: true }\n\
        \x20 - { name: frankfurt, target: 192.0.2.32, coordinates: { latitude: 50.11, longitude: 8.68 }, always_serve: true }\n";
    let mut files = DEFAULT_PROFILES.to_vec();
    files.push(("near.yaml", near));
    let h = Harness::with_admin(&files, None).await;
    const NEAR: &str = "near.tm.example.test.";
    b.open(h.admin()).await;
    b.wait_for("near", |v| row(v, NEAR).is_some()).await;
    b.click(&format!(r#"tbody[data-key="{NEAR}"] button.toggle"#)).await;
    b.wait_for("dublin's row", |v| endpoint(v, NEAR, "dublin").is_some()).await;

    let path = "/api/v1/profiles/near/endpoints/dublin/bias";
    let r = http_with_body(h.admin(), "PUT", path, &[], br#"{"bias": 40}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = b
        .wait_for("near's row and dublin's badge saying bias 40", |v| {
            let counts = row(v, NEAR).map_or("", |r| r["counts"].as_str().unwrap_or(""));
            let badges =
                endpoint(v, NEAR, "dublin").map_or("", |e| e["badges"].as_str().unwrap_or(""));
            counts.contains("1 bias set (dublin → 40)")
                && badges.contains("bias 40 (configured 10)")
        })
        .await;
    let frankfurt = endpoint(&v, NEAR, "frankfurt").unwrap();
    assert!(!frankfurt["badges"].as_str().unwrap().contains("bias"), "{frankfurt}");
    b.wait_for("the bias in the events", |v| {
        v["events"].as_str().unwrap().contains("bias set near.tm.example.test. / dublin")
    })
    .await;

    b.assert_no_console_error(&[]).await;
    b.close().await;
    h.stop().await;
}

/// A `priority` profile `fo`: `primary` probed on `backend` every second, `backup`
/// always serving.
fn failover_profile(backend: SocketAddr) -> String {
    format!(
        "name: fo\nrouting: priority\n\
         monitor: {{ port: {}, interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\n\
         endpoints:\n\
         \x20 - {{ name: primary, target: 127.0.0.1 }}\n\
         \x20 - {{ name: backup, target: 192.0.2.99, always_serve: true }}\n",
        backend.port()
    )
}

fn qps(row: &Value) -> f64 {
    row["qps"].as_str().unwrap_or("").parse::<f64>().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_drains_failover_a_rejected_reload_and_smoothed_rates() {
    let Some(mut b) = Browser::start().await else { return };
    let backend = HttpBackend::start("127.0.0.1").await;
    let fo = failover_profile(backend.addr);
    let mut files = DEFAULT_PROFILES.to_vec();
    files.push(("fo.yaml", &fo));
    let h = Harness::with_admin(&files, None).await;
    const API: &str = "api.tm.example.test.";
    const FO: &str = "fo.tm.example.test.";
    const WWW: &str = "www.tm.example.test.";
    b.open(h.admin()).await;
    let v = b
        .wait_for("fo online without failover", |v| {
            row(v, FO).is_some_and(|r| r["status"] == "online" && r["failover"] == false)
        })
        .await;
    assert!(v["conn"].as_str().unwrap().ends_with(" UTC"), "{}", v["conn"]);
    assert!(!row(&v, API).unwrap()["counts"].as_str().unwrap().contains("drained"), "{v}");

    // A drain shows in the profile's row, not only in its open endpoints.
    let r = http_post(h.admin(), "/api/v1/profiles/api/endpoints/site-a/drain", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = b
        .wait_for("api's row saying site-a is drained", |v| {
            row(v, API)
                .is_some_and(|r| r["counts"].as_str().unwrap().contains("1 drained (site-a)"))
        })
        .await;
    let time = v["events"].as_str().unwrap();
    assert!(time.contains(" UTC drained api.tm.example.test. / site-a"), "{time}");

    // The primary fails: still online, and the failover badge says why.
    backend.stop().await;
    let v = b
        .wait_for("fo's failover badge", |v| row(v, FO).is_some_and(|r| r["failover"] == true))
        .await;
    let fo_row = row(&v, FO).unwrap();
    assert_eq!(fo_row["status"], "online", "{fo_row}");
    assert_eq!(fo_row["statusText"], "onlinefailoverserving backup", "{fo_row}");
    assert_eq!(row(&v, WWW).unwrap()["failover"], false);

    // Rates are averaged over a labelled window, so they outlast the traffic's last poll.
    let stop = Arc::new(AtomicBool::new(false));
    let load = traffic(&h, "www", stop.clone());
    let v = b
        .wait_for("www's rate over a labelled window", |v| {
            row(v, WWW).is_some_and(|r| qps(r) > 0.0)
                && v["rateWindow"].as_str().unwrap().starts_with("(last ")
        })
        .await;
    assert!(v["summary"].as_str().unwrap().contains("queries/s (last "), "{}", v["summary"]);
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let stopped = b.view().await["conn"].clone();
    let later = b.wait_for("a poll after the traffic", |v| v["conn"] != stopped).await;
    let later = b.wait_for("another poll", |v| v["conn"] != later["conn"]).await;
    let www = row(&later, WWW).unwrap();
    assert!(qps(www) > 0.0 && www["split"].as_str().unwrap().contains("primary 100%"), "{www}");

    // A rejected reload shows as a banner with its located error, until one applies.
    let broken = h.profile_path("broken.yaml");
    std::fs::write(&broken, "name: broken\nrouting: sideways\nendpoints: []\n").unwrap();
    let v = b.wait_for("the reload banner", |v| !v["banner"].is_null()).await;
    let banner = v["banner"].as_str().unwrap();
    assert!(banner.starts_with("Reload rejected (file change, "), "{banner}");
    assert!(banner.contains(&format!("{}:2:10: ", broken.display())), "{banner}");
    std::fs::remove_file(&broken).unwrap();
    b.wait_for("no banner once a reload applies", |v| v["banner"].is_null()).await;

    b.assert_no_console_error(&[]).await;
    b.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_works_over_https_and_offers_a_read_token_no_drain() {
    let Some(mut b) = Browser::start().await else { return };
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), DEFAULT_PROFILES);
    let pair = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    std::fs::write(dir.path().join("admin.pem"), pair.cert.pem()).unwrap();
    std::fs::write(dir.path().join("admin.key"), pair.signing_key.serialize_pem()).unwrap();
    std::fs::write(dir.path().join("viewer.token"), format!("{TOKEN}\n")).unwrap();
    let yaml = format!(
        "{}admin:\n  tls: {{ cert: admin.pem, key: admin.key }}\n  tokens:\n    \
         - {{ name: viewer, file: viewer.token, role: read }}\n",
        with_admin(&steerdns_yaml(), None)
    );
    std::fs::write(dir.path().join("steerdns.yaml"), yaml).unwrap();
    let h = Harness::in_dir(dir).await;
    const API: &str = "api.tm.example.test.";

    b.open_https(h.admin()).await;
    let v = b.wait_for("the token form", |v| v["state"] == "login").await;
    assert_eq!(v["protocol"], "https:");
    b.type_into("#token", TOKEN).await;
    b.click("#token-submit").await;
    b.wait_for("the profiles over HTTPS", |v| v["state"] == "live" && row(v, API).is_some()).await;
    b.click(&format!(r#"tbody[data-key="{API}"] button.toggle"#)).await;
    // A read token is offered no button that changes state, and the header says why.
    let v = b
        .wait_for("site-a's row, read-only", |v| {
            v["readOnly"] == true && endpoint(v, API, "site-a").is_some_and(|e| e["probe"] != "")
        })
        .await;
    let buttons: Vec<&Value> = row(&v, API).unwrap()["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["button"])
        .collect();
    assert!(buttons.iter().all(|b| *b == ""), "{v}");
    assert!(
        b.client.find(Locator::Css("button.drain")).await.is_err(),
        "a Drain button is offered"
    );

    b.assert_no_console_error(&[401]).await;
    b.close().await;
    h.stop().await;
}

/// `n` always-serving profiles `p0` … in files of 100 documents.
fn many_profiles(n: usize) -> Vec<(String, String)> {
    let doc = |i: usize| {
        format!(
            "name: p{i}\nrouting: weighted\nendpoints:\n\
             \x20 - {{ name: a, target: 10.{}.{}.1, weight: 3, always_serve: true }}\n\
             \x20 - {{ name: b, target: 10.{}.{}.2, always_serve: true }}\n",
            i >> 8 & 255,
            i & 255,
            i >> 8 & 255,
            i & 255
        )
    };
    (0..n)
        .step_by(100)
        .map(|start| {
            let docs: Vec<String> = (start..(start + 100).min(n)).map(doc).collect();
            (format!("p{start:06}.yaml"), docs.join("---\n"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_profiles_load_a_page_at_a_time() {
    const N: usize = 10_000;
    let Some(mut b) = Browser::start().await else { return };
    let files = many_profiles(N);
    let refs: Vec<(&str, &str)> = files.iter().map(|(f, t)| (f.as_str(), t.as_str())).collect();
    let h = Harness::with_admin(&refs, None).await;
    let whole = http_get(h.admin(), "/api/v1/profiles", None).await.body.len();

    b.open(h.admin()).await;
    let v = b.wait_for("the first page", |v| v["total"] == N && row_names(v).len() == 100).await;
    assert_eq!(row_names(&v)[0], "p0.tm.example.test.");
    let first_render =
        b.js("return performance.getEntriesByName('steerdns:first-render')[0].startTime").await;
    // Each poll's JSON: the newest list and stats responses.
    let per_poll = b
        .js(r#"
            const last = (p) => performance.getEntriesByType("resource").filter((e) => e.name.includes(p)).pop();
            return last("/api/v1/profiles?").encodedBodySize + last("/api/v1/stats?").encodedBodySize;
        "#)
        .await;
    let per_poll = per_poll.as_u64().expect("sizes") as usize;
    eprintln!(
        "status page at {N} profiles: first render {:.0} ms after navigation; {per_poll} bytes \
         of JSON per poll (the whole unpaged list: {whole} bytes)",
        first_render.as_f64().expect("a first-render mark")
    );
    assert!(per_poll < 64 * 1024, "{per_poll} bytes per poll");
    assert!(whole > 10 * per_poll, "a page is not smaller than the whole list: {whole}");

    b.click("#next").await;
    let v = b
        .wait_for("the second page", |v| {
            v["offset"] == 100 && row_names(v).first().is_some_and(|n| n == "p100.tm.example.test.")
        })
        .await;
    assert_eq!(row_names(&v).len(), 100);
    b.type_into("#filter", "p9876.").await;
    b.wait_for("one profile", |v| row_names(v) == ["p9876.tm.example.test."]).await;

    b.assert_no_console_error(&[]).await;
    b.close().await;
    h.stop().await;
}

/// The README's picture: a few profiles with traffic, one endpoint down and open (its
/// profile failed over), one drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshot() {
    let Some(mut b) = Browser::start().await else { return };
    let up = HttpBackend::start("127.0.0.1").await;
    let down = HttpBackend::start("127.0.0.1").await;
    let shop = format!(
        "name: shop\nrouting: priority\n\
         monitor: {{ interval: 1s, timeout: 300ms, tolerated_failures: 0 }}\n\
         endpoints:\n\
         \x20 - {{ name: eu-west, target: 127.0.0.1, priority: 1, monitor: {{ port: {} }} }}\n\
         \x20 - {{ name: us-east, target: 127.0.0.1, priority: 2, monitor: {{ port: {} }} }}\n",
        down.addr.port(),
        up.addr.port()
    );
    let mut profiles: Vec<(&str, String)> =
        DEFAULT_PROFILES.iter().map(|(f, t)| (*f, t.to_string())).collect();
    // First in the list (files are read in name order), so it shows open at the top.
    profiles.push(("0-shop.yaml", shop));
    let files: Vec<(&str, &str)> = profiles.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let h = Harness::with_admin(&files, None).await;
    const SHOP: &str = "shop.tm.example.test.";
    b.open(h.admin()).await;
    b.wait_for("shop online", |v| row(v, SHOP).is_some_and(|r| r["status"] == "online")).await;
    down.stop().await;
    // Traffic once eu-west failed, so that the minute's shares are all us-east's.
    b.wait_for("shop failed over", |v| row(v, SHOP).is_some_and(|r| r["failover"] == true)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let loads = ["api", "www", "shop", "pool"].map(|n| traffic(&h, n, stop.clone()));
    let r = http_post(h.admin(), "/api/v1/profiles/pool/endpoints/d/drain", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    b.click(&format!(r#"tbody[data-key="{SHOP}"] button.toggle"#)).await;
    b.wait_for("shop's split and failed endpoint", |v| {
        endpoint(v, SHOP, "eu-west").is_some_and(|e| e["status"] == "degraded")
            && row(v, SHOP).is_some_and(|r| r["split"].as_str().unwrap().contains("us-east 100%"))
            && row(v, SHOP).is_some_and(|r| r["failover"] == true)
            && row(v, "pool.tm.example.test.").is_some_and(|r| {
                r["split"].as_str().unwrap().contains('%')
                    && r["counts"].as_str().unwrap().contains("1 drained (d)")
            })
    })
    .await;
    b.client.set_window_size(1200, 900).await.expect("window size");
    let png = b.client.screenshot().await.expect("screenshot");
    stop.store(true, Ordering::Relaxed);
    for l in loads {
        l.await.unwrap();
    }
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert!((1000..=1300).contains(&width), "screenshot {width} px wide");
    if let Some(path) = std::env::var_os("STEERDNS_SCREENSHOT") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        std::fs::write(&path, &png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("wrote {} ({} bytes, {width} px wide)", path.display(), png.len());
    }
    b.assert_no_console_error(&[]).await;
    b.close().await;
    up.stop().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_endpoint_shows_its_share_load_and_utilisation() {
    let Some(mut b) = Browser::start().await else { return };
    let profile = "name: shed\nrouting: weighted\nendpoints:\n  \
        - { name: p, target: 192.0.2.21, always_serve: true, load: { capacity: 100, pushed: true } }\n  \
        - { name: q, target: 192.0.2.22, always_serve: true }\n";
    let rules = "load:\n  interval: 1s\n  max_step: 1\n";
    let h = Harness::with_admin_and_keys(&[("shed.yaml", profile)], rules).await;
    let json = [("Content-Type", "application/json")];
    let path = "/api/v1/profiles/shed/endpoints/p/load";
    let r = http_with_body(h.admin(), "PUT", path, &json, br#"{"load": 95, "ttl": "1h"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    const SHED: &str = "shed.tm.example.test.";
    b.open(h.admin()).await;
    b.wait_for("shed", |v| row(v, SHED).is_some()).await;
    b.click(&format!(r#"tbody[data-key="{SHED}"] button.toggle"#)).await;
    // Utilisation 0.95 is above high (0.9): the first step sheds it.
    let v = b
        .wait_for("p's load badge", |v| {
            endpoint(v, SHED, "p").is_some_and(|e| {
                e["badges"].as_str().unwrap().contains("load 95/100 (95%) · above high")
            })
        })
        .await;
    let badges = endpoint(&v, SHED, "p").unwrap()["badges"].as_str().unwrap().to_string();
    assert!(badges.contains("share 0."), "{badges}");
    let q = endpoint(&v, SHED, "q").unwrap()["badges"].as_str().unwrap().to_string();
    assert!(!q.contains("share"), "q has no feed: {q}");
    b.assert_no_console_error(&[]).await;
    b.close().await;
    h.stop().await;
}
