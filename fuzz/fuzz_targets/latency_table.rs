//! Arbitrary text as the latency table (`latency.table`), parsed by
//! `steerdns::geo::LatencyTable::parse` (what `LatencyTable::load` runs on the file's text).
//! A table that loads is asked for the row of a few clients: a CIDR match must contain the
//! client and be the longest CIDR row that does, with an ECS scope at least its prefix
//! length; `ranked` must order every region exactly once.
#![no_main]

use std::net::IpAddr;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use steerdns::geo::{Code, LatencyTable, Location, Regions, RowFrom, RowMatch};
use steerdns_fuzz::SOURCES;

fn located(continent: &str, country: &str, sub: Option<&str>, lat: f64, lon: f64) -> Location {
    Location {
        continent: Code::new(continent),
        country: Code::new(country),
        subdivision: sub.and_then(Code::new),
        lat: Some(lat),
        lon: Some(lon),
        prefix_len: 24,
    }
}

fn check(table: &LatencyTable, client: IpAddr, loc: Option<&Location>) {
    let m = table.row_for(client, loc);
    let canonical = client.to_canonical();
    let longest = table
        .rows()
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match &r.from {
            RowFrom::Cidr(net) if net.contains(&canonical) => Some((net.prefix_len(), i)),
            _ => None,
        })
        .max();
    let max_len = if canonical.is_ipv4() { 32 } else { 128 };
    assert!(m.scope() <= max_len, "scope /{} for {client}", m.scope());
    match (m, longest) {
        (RowMatch::Cidr { row, prefix_len, scope }, Some((len, _))) => {
            assert_eq!(prefix_len, len, "row {row} is not the longest CIDR row for {client}");
            assert!(scope >= prefix_len, "scope /{scope} inside the /{prefix_len} row");
        }
        (RowMatch::Cidr { row, .. }, None) => panic!("row {row} does not hold {client}"),
        (_, Some((len, i))) => panic!("{client} is in row {i} (/{len}) but got {m:?}"),
        (_, None) => {}
    }
    let ranked = table.ranked(&m, loc);
    let mut ids: Vec<usize> = ranked.iter().map(|(r, _)| *r).collect();
    ids.sort_unstable();
    assert!(ids.iter().copied().eq(0..table.regions().len()), "ranked: {ranked:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(table) = LatencyTable::parse(text, Path::new("latency.yaml"), Regions::builtin()) else {
        return;
    };
    let places = [
        located("EU", "FR", None, 48.86, 2.35),
        located("NA", "US", Some("CA"), 37.77, -122.42),
        located("AS", "CN", Some("SH"), 31.23, 121.47),
    ];
    for (i, client) in SOURCES.iter().enumerate() {
        check(&table, *client, None);
        check(&table, *client, Some(&places[i % places.len()]));
    }
});
