//! A headless Chromium under chromedriver on a free loopback port, for the tests that check
//! what a real browser does with our pages. `None` (a skip, or a failure in CI) when either
//! program is missing; dropping the `ChromeDriver` ends chromedriver's process group, the
//! browser it started included, also when a test fails first.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{Map, Value, json};
use tokio::time::{Instant, sleep};

use super::tools::{require_any, require_tool};

/// The running chromedriver; killed with its process group on drop.
pub struct ChromeDriver(Child);

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.0.wait();
    }
}

/// Starts chromedriver and a WebDriver session of a headless Chromium with the usual
/// arguments and `extra_args`, its browser log kept, and `extra_caps` merged into the
/// capabilities. Panics when no session comes within `patience`.
pub async fn start_chromium(
    extra_args: &[&str],
    extra_caps: Value,
    patience: Duration,
) -> Option<(ChromeDriver, Client)> {
    let chromium = require_any(&["chromium", "chromium-browser", "google-chrome"], "chromium")?;
    let driver = require_tool("chromedriver", "chromium-driver")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Its own process group, with the browser it starts, so that drop can end both.
    let driver = Command::new(driver)
        .process_group(0)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = ChromeDriver(driver);
    let mut args = vec![
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
    ];
    args.extend_from_slice(extra_args);
    let mut caps: Map<String, Value> = json!({
        "browserName": "chrome",
        "goog:chromeOptions": { "binary": chromium, "args": args },
        "goog:loggingPrefs": { "browser": "ALL" },
    })
    .as_object()
    .unwrap()
    .clone();
    caps.extend(extra_caps.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
    let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
    builder.capabilities(caps);
    let url = format!("http://127.0.0.1:{port}");
    // chromedriver takes a moment to listen.
    let deadline = Instant::now() + patience;
    let client = loop {
        match builder.connect(&url).await {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("no WebDriver session from chromedriver at {url}: {e}"),
        }
    };
    Some((driver, client))
}
