//! The geo database may be rewritten in place (`cp new.mmdb city.mmdb`, `curl -o`) while a
//! server answers from it: the server reads it into memory, so a truncated or half-written
//! file can neither crash it nor replace the database in use, and the finished file takes
//! effect at the next reload. A real server on 127.0.0.1 under UDP query load.

mod common;

use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use tokio::net::UdpSocket;

const PROFILE: &str = "\
name: geo
routing: geographic
endpoints:
  - { name: fr, target: 192.0.2.61, geo: [FR], always_serve: true }
  - { name: us, target: 198.51.100.61, geo: [US], always_serve: true }
  - { name: rest, target: 203.0.113.62, geo: [WORLD], always_serve: true }
";

const FR: &str = "A 192.0.2.61";
const US: &str = "A 198.51.100.61";

/// A database placing 192.0.2.0/24 in `country` (`FR` or `US`), padded with a few thousand
/// other networks so that it spans many pages.
fn database(dir: &Path, country: &str) -> Vec<u8> {
    let place = match country {
        "FR" => "EU,FR,IDF,48.8566,2.3522",
        _ => "NA,US,CA,37.7749,-122.4194",
    };
    let mut csv =
        format!("network,continent,country,subdivision,latitude,longitude\n192.0.2.0/24,{place}\n");
    for n in 0..4000u32 {
        let sub = ["BJ", "SH", "GD"][(n % 3) as usize];
        csv += &format!(
            "10.{}.{}.0/24,AS,CN,{sub},{}.5,{}.5\n",
            n / 256,
            n % 256,
            20 + n % 30,
            100 + n % 20
        );
    }
    let (input, out) = (dir.join(format!("{country}.csv")), dir.join(format!("{country}.mmdb")));
    std::fs::write(&input, csv).unwrap();
    steerdns::geo::build(&input, &out).unwrap_or_else(|e| panic!("geo build: {e:?}"));
    std::fs::read(out).unwrap()
}

/// Rewrites `path` in place (same inode): truncated, then written in two halves, or only
/// the first half when `whole` is false.
fn rewrite(path: &Path, bytes: &[u8], whole: bool) {
    let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(path).unwrap();
    let half = bytes.len() / 2;
    f.write_all(&bytes[..half]).unwrap();
    std::thread::yield_now();
    if whole {
        f.write_all(&bytes[half..]).unwrap();
    }
}

/// The answer for a client in 192.0.2.0/24.
fn question() -> Vec<u8> {
    let client: IpAddr = "192.0.2.7".parse().unwrap();
    Q::new(&fq("geo"), T_A).ecs(client, 24).bytes()
}

async fn answer(h: &Harness) -> String {
    Reply::new(h.udp_bytes(&question()).await).single()
}

fn reload(h: &Harness) -> Result<u64, String> {
    tokio::task::block_in_place(|| h.server().reload()).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewriting_the_database_in_place_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let build = tempfile::tempdir().unwrap();
    write_config(dir.path(), &[("geo.yaml", PROFILE)]);
    let yaml = dir.path().join("steerdns.yaml");
    let config = std::fs::read_to_string(&yaml).unwrap();
    std::fs::write(&yaml, format!("{config}geo:\n  database: data/city.mmdb\n")).unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let db = dir.path().join("data/city.mmdb");
    let (fr, us) = (database(build.path(), "FR"), database(build.path(), "US"));
    assert!(fr.len() > 4 * 4096, "{} bytes: several pages", fr.len());
    std::fs::write(&db, &fr).unwrap();
    let inode = std::fs::metadata(&db).unwrap().ino();
    let h = Harness::in_dir(dir).await;
    assert_eq!(answer(&h).await, FR);

    // Clients ask all along; every query is answered from one whole database or the other.
    let done = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (done, addr) = (done.clone(), h.addr);
        clients.push(tokio::spawn(async move {
            let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            sock.connect(addr).await.unwrap();
            let q = question();
            let mut answered = 0u64;
            while !done.load(Ordering::Relaxed) {
                let reply = udp_exchange(&sock, &q).await.expect("the server answers");
                let got = Reply::new(reply).single();
                assert!(got == FR || got == US, "answer {got}");
                answered += 1;
            }
            answered
        }));
    }
    let writer = {
        let (db, fr, us) = (db.clone(), fr.clone(), us.clone());
        std::thread::spawn(move || {
            for i in 0..300 {
                rewrite(&db, if i % 2 == 0 { &us } else { &fr }, true);
            }
        })
    };
    // Reloads meanwhile take whichever whole file they read, or fail on a half-written one.
    let (mut loaded, mut refused) = (0, 0);
    while !writer.is_finished() {
        match reload(&h) {
            Ok(_) => loaded += 1,
            Err(e) => {
                assert!(e.contains("data/city.mmdb"), "the error names the file: {e}");
                refused += 1;
            }
        }
    }
    writer.join().unwrap();
    done.store(true, Ordering::Relaxed);
    for c in clients {
        let answered = c.await.unwrap();
        assert!(answered > 0, "a client was answered throughout");
    }
    eprintln!("reloads during the rewrites: {loaded} loaded, {refused} refused");
    assert_eq!(std::fs::metadata(&db).unwrap().ino(), inode, "rewritten in place");

    // A whole file takes effect at reload; a half-written one is refused and changes nothing.
    rewrite(&db, &fr, true);
    reload(&h).expect("the whole FR database loads");
    assert_eq!(answer(&h).await, FR);
    rewrite(&db, &us, false);
    let e = reload(&h).expect_err("a half-written database is refused");
    assert!(e.contains("data/city.mmdb") && e.contains("cannot open geo database"), "{e}");
    assert_eq!(answer(&h).await, FR, "the database in use stays");
    rewrite(&db, &us, true);
    reload(&h).expect("the finished US database loads");
    assert_eq!(answer(&h).await, US, "the final database takes effect");
    assert_eq!(std::fs::metadata(&db).unwrap().ino(), inode);
    h.stop().await;
}
