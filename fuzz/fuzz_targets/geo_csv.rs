//! Arbitrary text as the CSV input of `steerdns geo build`, compiled by
//! `steerdns::geo::build::build_bytes` (what `steerdns::geo::build` runs on the file's
//! text). A database that builds is opened with `GeoDb` and the first address of each
//! network is looked up: it must be found, with the country of the most specific network
//! that holds it.
#![no_main]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, UNIX_EPOCH};

use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;
use steerdns::geo::GeoDb;
use steerdns::geo::build::build_bytes;
use steerdns_fuzz::scratch_dir;

fn db_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| scratch_dir("geo").join("fuzz.mmdb"))
}

/// (network, country) of every data row, read the simple way: the build accepted the text,
/// so every row is valid.
fn rows(text: &str) -> Vec<(IpNet, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .skip(1)
        .filter_map(|l| {
            let cells: Vec<&str> = l.split(',').map(|c| c.trim().trim_matches('"')).collect();
            let net = cells.first()?.parse::<IpNet>().ok()?;
            Some((net, cells.get(2)?.to_ascii_uppercase()))
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let built = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let Ok((bytes, summary)) = build_bytes(text, Path::new("fuzz.csv"), built) else { return };
    let rows = rows(text);
    assert_eq!(
        rows.len(),
        summary.ipv4_networks + summary.ipv6_networks,
        "rows read here vs the build's summary"
    );
    let path = db_path();
    std::fs::write(path, &bytes).unwrap();
    let db = GeoDb::open(path).unwrap_or_else(|e| panic!("the built database does not open: {e}"));
    for (net, _) in rows.iter().take(32) {
        let ip: IpAddr = net.network();
        let expected = rows
            .iter()
            .filter(|(n, _)| n.contains(&ip))
            .max_by_key(|(n, _)| n.prefix_len())
            .map(|(_, c)| c.as_str());
        let found = db.lookup(ip);
        let country = found.as_ref().and_then(|l| l.country).map(|c| c.as_str().to_string());
        assert_eq!(country.as_deref(), expected, "lookup of {ip}: {found:?}");
    }
});
