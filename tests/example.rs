//! The shipped example configuration, served as README.md tells a new user to: `failover`
//! starts on its backup (the primary's port is closed: degraded, "connection refused"), moves
//! to the primary once a web server answers there, and back when it stops. The example's
//! files are copied as they are; only its fixed ports are swapped for free ones.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The example's files, copied into `dest`.
fn copy_example(dest: &Path) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(repo.join("steerdns.yaml"), dest.join("steerdns.yaml")).unwrap();
    for dir in ["profiles", "zones", "geo-data"] {
        std::fs::create_dir_all(dest.join(dir)).unwrap();
        for entry in std::fs::read_dir(repo.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, dest.join(dir).join(path.file_name().unwrap())).unwrap();
            }
        }
    }
}

/// Replaces `from` by `to` in a file, which must hold it.
fn replace_in(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} no longer holds {from:?}", path.display());
    std::fs::write(path, text.replace(from, to)).unwrap();
}

/// A port free on `ip` a moment ago.
fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap().port()
}

/// A web server answering 200 to every request, as `python3 -m http.server` would.
async fn web_server(addr: SocketAddr) -> JoinHandle<()> {
    let listener = TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let reply = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    })
}

/// Waits until `failover` answers `want` with its endpoints in the `(name, status)` listed,
/// and returns the endpoints as the API shows them then.
async fn wait_for(h: &Harness, want: &str, statuses: &[(&str, &str)]) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = h.udp(&Q::new(&fq("failover"), T_A)).await;
        let v = http_get(h.admin(), "/api/v1/profiles/failover", None).await.json();
        let endpoints = &v["endpoints"];
        if r.single() == format!("A {want}")
            && statuses.iter().all(|(name, status)| endpoint(endpoints, name)["status"] == *status)
        {
            return endpoints.clone();
        }
        assert!(Instant::now() < deadline, "never {want} with {statuses:?}: {r:#?}\n{v:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn endpoint<'a>(endpoints: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    let list = endpoints.as_array().unwrap();
    list.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no {name}: {endpoints:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_fails_over_when_its_primary_web_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    copy_example(dir.path());
    let (admin_port, web_port) = (free_port("127.0.0.1"), free_port("127.0.0.2"));
    let config = dir.path().join("steerdns.yaml");
    replace_in(&config, r#"["127.0.0.1:5353", "[::1]:5353"]"#, r#"["127.0.0.1:0"]"#);
    replace_in(&config, "127.0.0.1:8053", &format!("127.0.0.1:{admin_port}"));
    let failover = dir.path().join("profiles/failover.yaml");
    replace_in(&failover, "port: 8053", &format!("port: {admin_port}"));
    replace_in(&failover, "port: 8000", &format!("port: {web_port}"));
    let h = Harness::in_dir(dir).await;

    // Nothing listens on the primary's port: the backup (the admin listener) answers.
    let endpoints =
        wait_for(&h, "127.0.0.1", &[("primary", "degraded"), ("backup", "online")]).await;
    let primary = endpoint(&endpoints, "primary");
    assert_eq!(primary["last_probe"]["reason"], "connection refused", "{endpoints:#}");

    // Start the primary's web server: the answer moves to it.
    let web = web_server(SocketAddr::from(([127, 0, 0, 2], web_port))).await;
    wait_for(&h, "127.0.0.2", &[("primary", "online")]).await;

    // Stop it: back to the backup.
    web.abort();
    let _ = web.await;
    wait_for(&h, "127.0.0.1", &[("primary", "degraded")]).await;
    h.stop().await;
}
