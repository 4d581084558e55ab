//! The location data layer: region hierarchy, `geo build` read back by the `maxminddb` crate
//! and by libmaxminddb's `mmdblookup`, `GeoDb` lookups (IPv4 in the IPv6 tree, prefix
//! lengths), CSV and latency-table errors with their positions, and longest-prefix latency
//! rows with their ECS scopes. Only files in the repository are read.

#[allow(dead_code)]
#[path = "common/tools.rs"]
mod tools;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

use steerdns::geo::{
    self, Code, GeoDb, LatencyTable, Location, Metric, RegionKind, Regions, RowFrom, RowMatch,
    great_circle_km,
};

/// Every ISO 3166-1 alpha-2 code (249), typed independently of `geo-data/regions.yaml`.
const ISO_3166_1: &str = "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH \
BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY \
CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP \
GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM \
KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR \
MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS \
PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD \
TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA \
ZM ZW";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn code(s: &str) -> Option<Code> {
    Code::new(s)
}

// ---------------------------------------------------------------- regions

#[test]
fn every_iso_country_is_in_exactly_one_grouping() {
    let r = Regions::builtin();
    let iso: Vec<&str> = ISO_3166_1.split_whitespace().collect();
    assert_eq!(iso.len(), 249);
    for c in &iso {
        assert_eq!(r.kind(c), Some(RegionKind::Country), "{c} is a country");
        assert!(r.grouping_of(c).is_some_and(|g| g.starts_with("GEO-")), "{c} has a grouping");
    }
    // Each country code appears once in the file, hence under one grouping only.
    let countries: Vec<&str> = r.codes(RegionKind::Country).collect();
    let mut unique = countries.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), countries.len());
    // Only Azure's user-assigned extras besides ISO.
    let extra: Vec<&str> = countries.iter().copied().filter(|c| !iso.contains(c)).collect();
    assert_eq!(extra, ["XJ", "XK", "XE", "XS"]);
    let groupings: Vec<&str> = r.codes(RegionKind::Grouping).collect();
    assert_eq!(
        groupings,
        ["GEO-EU", "GEO-ME", "GEO-NA", "GEO-AS", "GEO-AF", "GEO-AN", "GEO-SA", "GEO-AP"]
    );
}

#[test]
fn groupings_follow_azure() {
    let r = Regions::builtin();
    let cases = [
        ("AE", "GEO-ME"),
        ("SA", "GEO-ME"),
        ("IL", "GEO-ME"),
        ("TR", "GEO-ME"),
        ("IR", "GEO-ME"),
        ("AU", "GEO-AP"),
        ("NZ", "GEO-AP"),
        ("FJ", "GEO-AP"),
        ("JP", "GEO-AS"),
        ("CN", "GEO-AS"),
        ("IN", "GEO-AS"),
        ("FR", "GEO-EU"),
        ("GB", "GEO-EU"),
        ("RU", "GEO-EU"),
        ("US", "GEO-NA"),
        ("MX", "GEO-NA"),
        ("BR", "GEO-SA"),
        ("ZA", "GEO-AF"),
        ("EG", "GEO-AF"),
        ("EH", "GEO-AF"),
        ("AQ", "GEO-AN"),
        ("fr", "GEO-EU"),
    ];
    for (country, grouping) in cases {
        assert_eq!(r.grouping_of(country), Some(grouping), "{country}");
    }
    assert_eq!(r.grouping_of("GEO-EU"), None);
    assert_eq!(r.grouping_of("US-CA"), None);
    assert_eq!(r.grouping_of("ZZ"), None);
}

#[test]
fn subdivisions_and_codes() {
    let r = Regions::builtin();
    let count = |cc: &str| r.codes(RegionKind::Subdivision).filter(|s| s.starts_with(cc)).count();
    assert_eq!(count("US-"), 51, "50 states and DC");
    assert_eq!(count("CA-"), 13);
    assert_eq!(count("AU-"), 8);
    assert_eq!(count("GB-"), 4);
    for c in ["US-DC", "US-CA", "CA-QC", "AU-NSW", "GB-ENG", "GB-NIR", "GB-SCT", "GB-WLS"] {
        assert_eq!(r.kind(c), Some(RegionKind::Subdivision), "{c}");
    }
    assert_eq!(r.kind("WORLD"), Some(RegionKind::World));
    assert_eq!(r.kind("GEO-ME"), Some(RegionKind::Grouping));
    assert!(r.is_known("gb-eng") && r.is_known("world"));
    assert_eq!(r.canonical("geo-eu"), Some("GEO-EU"));
    assert!(!r.is_known("US-XX") && !r.is_known("GEO-XX") && !r.is_known("") && !r.is_known("EU"));
    assert_eq!(r.name("GB"), Some("United Kingdom"));
    assert_eq!(r.name("GEO-ME"), Some("Middle East"));
}

#[test]
fn chain_goes_from_subdivision_to_world() {
    let r = Regions::builtin();
    let chain = |c: Option<&str>, s: Option<&str>| r.chain(c, s).collect::<Vec<_>>();
    assert_eq!(chain(Some("US"), Some("CA")), ["US-CA", "US", "GEO-NA", "WORLD"]);
    assert_eq!(chain(Some("GB"), Some("ENG")), ["GB-ENG", "GB", "GEO-EU", "WORLD"]);
    assert_eq!(chain(Some("AU"), Some("NSW")), ["AU-NSW", "AU", "GEO-AP", "WORLD"]);
    assert_eq!(chain(Some("us"), Some("ca")), ["US-CA", "US", "GEO-NA", "WORLD"]);
    assert_eq!(chain(Some("US"), Some("US-CA")), ["US-CA", "US", "GEO-NA", "WORLD"]);
    // CA is a province of Canada, not of the US: no cross-country matches.
    assert_eq!(chain(Some("CA"), Some("CA")), ["CA", "GEO-NA", "WORLD"]);
    // Subdivisions the hierarchy does not list are skipped.
    assert_eq!(chain(Some("FR"), Some("IDF")), ["FR", "GEO-EU", "WORLD"]);
    assert_eq!(chain(Some("AE"), None), ["AE", "GEO-ME", "WORLD"]);
    assert_eq!(chain(Some("ZZ"), Some("CA")), ["WORLD"]);
    assert_eq!(chain(None, Some("CA")), ["WORLD"]);
    assert_eq!(chain(None, None), ["WORLD"]);
    assert_eq!(chain(Some("GEO-EU"), None), ["WORLD"]);
}

fn messages(e: steerdns::config::ConfigErrors) -> Vec<String> {
    e.0.iter().map(|e| format!("{}:{}: {}", e.pos.line, e.pos.col, e.message)).collect()
}

fn assert_errors(got: &[String], want: &[(&str, &str)]) {
    assert_eq!(got.len(), want.len(), "got {got:#?}");
    for (g, (at, fragment)) in got.iter().zip(want) {
        assert!(
            g.starts_with(&format!("{at}: ")) && g.contains(fragment),
            "{g:?} should be {at}: …{fragment}…"
        );
    }
}

#[test]
fn hierarchy_errors_are_located() {
    let yaml = "groupings:\n  GEO-A:\n    name: A\n    countries:\n      FR: France\n      DE: Germany\n  \
                GEO-B:\n    name: B\n    countries:\n      FR: France again\n      usa: United States\n  \
                EUROPE:\n    name: C\n    countries: {}\nsubdivisions:\n  FR-IDF: Île-de-France\n  \
                XX-YY: Nowhere\n  DE-TOOLONG: x\n";
    let e = Regions::parse(yaml, Path::new("r.yaml")).unwrap_err();
    assert_errors(
        &messages(e),
        &[
            ("10:7", "FR is listed twice (already in GEO-A)"),
            ("11:7", "\"usa\" is not a valid country"),
            ("12:3", "\"EUROPE\" is not a valid grouping"),
            ("17:3", "CC-SUB with CC a country listed above"),
            ("18:3", "\"DE-TOOLONG\" is not a valid subdivision"),
        ],
    );
    let e = Regions::parse("groupings: {}\nextra: 1\n", Path::new("r.yaml")).unwrap_err();
    assert_errors(&messages(e), &[("2:1", "unknown field `extra`")]);
}

// ---------------------------------------------------------------- geo build and GeoDb

/// Builds `geo-data/sample-city.csv` into a temporary database.
fn build_sample(dir: &Path) -> PathBuf {
    let out = dir.join("city.mmdb");
    let summary = geo::build(&repo("geo-data/sample-city.csv"), &out).expect("sample CSV builds");
    assert_eq!((summary.ipv4_networks, summary.ipv6_networks), (12, 6));
    assert_eq!(summary.bytes as u64, std::fs::metadata(&out).unwrap().len());
    out
}

fn loc(c: &str, country: &str, sub: &str, lat_lon: Option<(f64, f64)>, prefix_len: u8) -> Location {
    Location {
        continent: code(c),
        country: code(country),
        subdivision: code(sub),
        lat: lat_lon.map(|l| l.0),
        lon: lat_lon.map(|l| l.1),
        prefix_len,
    }
}

#[test]
fn geo_build_reads_back_with_geodb() {
    let dir = tempfile::tempdir().unwrap();
    let db = GeoDb::open(&build_sample(dir.path())).unwrap();
    let info = db.metadata();
    assert_eq!((info.database_type.as_str(), info.ip_version), ("GeoIP2-City", 6));
    let cases = [
        ("192.0.2.1", Some(loc("EU", "FR", "IDF", Some((48.8566, 2.3522)), 25))),
        ("192.0.2.200", Some(loc("NA", "US", "CA", Some((37.7749, -122.4194)), 25))),
        // The /24 is split by the /25 inside it: its other half is a /25 network.
        ("198.51.100.10", Some(loc("AS", "CN", "BJ", Some((39.9042, 116.4074)), 25))),
        ("198.51.100.200", Some(loc("AS", "CN", "SH", Some((31.2304, 121.4737)), 25))),
        ("203.0.113.10", Some(loc("OC", "AU", "NSW", Some((-33.8688, 151.2093)), 25))),
        ("203.0.113.150", Some(loc("OC", "AU", "NSW", Some((-33.8688, 151.2093)), 26))),
        ("203.0.113.200", Some(loc("OC", "NZ", "AUK", Some((-36.8485, 174.7633)), 26))),
        ("100.64.6.77", Some(loc("EU", "DE", "", None, 24))),
        ("2001:db8:1::1", Some(loc("EU", "GB", "ENG", Some((51.5074, -0.1278)), 48))),
        ("2001:db8:5:ffff::1", Some(loc("AS", "SA", "01", Some((24.7136, 46.6753)), 48))),
        // IPv4-mapped form of an IPv4 client: looked up (and scoped) as IPv4.
        ("::ffff:192.0.2.1", Some(loc("EU", "FR", "IDF", Some((48.8566, 2.3522)), 25))),
        ("127.0.0.1", None),
        ("2001:db8:ff::1", None),
    ];
    for (addr, want) in cases {
        assert_eq!(db.lookup(ip(addr)), want, "{addr}");
    }
}

#[test]
fn misses_report_the_empty_networks_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let db = GeoDb::open(&build_sample(dir.path())).unwrap();
    // 192.0.3.0 is next to 192.0.2.0/24: the empty network around it is 192.0.3.0/24.
    assert_eq!(db.lookup_scoped(ip("192.0.3.1")), (None, 24));
    // 2001:db8:7::/48 sits beside the sample /48s.
    let (none, p) = db.lookup_scoped(ip("2001:db8:7::1"));
    assert!(none.is_none() && (30..=48).contains(&p), "{p}");
    let (hit, p) = db.lookup_scoped(ip("192.0.2.1"));
    assert_eq!((hit.map(|l| l.prefix_len), p), (Some(25), 25));
}

#[test]
fn records_are_decoded_at_open_and_shared_while_the_file_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_sample(dir.path());
    let a = GeoDb::open(&path).unwrap();
    let b = GeoDb::open(&path).unwrap();
    assert!(a.shares_records_with(&b), "a reload of an unchanged file must not decode it again");
    // 18 networks, some sharing a record (the two NSW rows): every one is in the table.
    assert!((2..=18).contains(&a.record_count()), "{} records", a.record_count());

    // Replaced by rename, as `geo build` and geoipupdate do: a new file, new records.
    let csv = dir.path().join("moved.csv");
    std::fs::write(
        &csv,
        "network,continent,country,subdivision,latitude,longitude\n192.0.2.0/24,AS,JP,,,\n",
    )
    .unwrap();
    let tmp = dir.path().join("new.mmdb");
    geo::build(&csv, &tmp).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let c = GeoDb::open(&path).unwrap();
    assert!(!c.shares_records_with(&a));
    assert_eq!(c.record_count(), 1);
    assert_eq!(c.lookup(ip("192.0.2.1")).and_then(|l| l.country), code("JP"));
    // The configuration still holding the old file keeps answering from it.
    assert_eq!(a.lookup(ip("192.0.2.1")).and_then(|l| l.country), code("FR"));

    // Rewritten in place with a database of the same length and the mtime put back, as a
    // copy within one tick of the file system clock leaves it: still a new database.
    let same_len = |country: &str| {
        let csv = dir.path().join(format!("{country}.csv"));
        let text = format!(
            "network,continent,country,subdivision,latitude,longitude\n192.0.2.0/24,AS,{country},,,\n"
        );
        std::fs::write(&csv, text).unwrap();
        let out = dir.path().join(format!("{country}.mmdb"));
        geo::build(&csv, &out).unwrap();
        std::fs::read(out).unwrap()
    };
    let (jp, kr) = (same_len("JP"), same_len("KR"));
    assert_eq!(jp.len(), kr.len());
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(&path, &kr).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
    let d = GeoDb::open(&path).unwrap();
    assert!(!d.shares_records_with(&c));
    assert_eq!(d.lookup(ip("192.0.2.1")).and_then(|l| l.country), code("KR"));
    assert_eq!(c.lookup(ip("192.0.2.1")).and_then(|l| l.country), code("JP"), "an own copy");
}

#[test]
fn the_database_is_read_up_to_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_sample(dir.path());
    let len = std::fs::metadata(&path).unwrap().len();
    let limit = |bytes| steerdns::diag::Limit { bytes, set_by: "limits.geo_database" };
    assert!(GeoDb::open_limited(&path, limit(len)).is_ok());
    let e = GeoDb::open_limited(&path, limit(len - 1)).unwrap_err().to_string();
    let want = format!(
        "{}: cannot open geo database: too large: {len} bytes, more than the {} bytes of limits.geo_database",
        path.display(),
        len - 1
    );
    assert_eq!(e, want);

    // Through the configuration: the error is at `geo.database`, naming the key to raise.
    let config = geo_config(dir.path(), Some(&path), "# no profiles\n");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}limits: {{ geo_database: 1KiB }}\n")).unwrap();
    let errors = messages(steerdns::config::load(&config, None).map(|_| ()).unwrap_err());
    let message = "more than the 1024 bytes of limits.geo_database";
    assert!(errors.len() == 1 && errors[0].starts_with("4:13: "), "{errors:?}");
    assert!(errors[0].ends_with(message), "{errors:?}");

    // Not a database at all: refused with the reader's reason.
    std::fs::write(&path, b"not a database").unwrap();
    let e = GeoDb::open(&path).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: cannot open geo database: ", path.display())), "{e}");
}

#[test]
fn places_agree_with_full_lookups_and_never_narrow_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let db = GeoDb::open(&build_sample(dir.path())).unwrap();
    let mut addrs: Vec<IpAddr> = Vec::new();
    for base in ["192.0.2", "198.51.100", "203.0.113", "100.64.6", "192.0.3"] {
        addrs.extend((0..=255).step_by(3).map(|h| ip(&format!("{base}.{h}"))));
    }
    for g in 0..8u16 {
        addrs.extend([ip(&format!("2001:db8:{g:x}::1")), ip(&format!("2001:db8:{g:x}:ffff::9"))]);
    }
    for addr in addrs {
        let (full, full_len) = db.lookup_scoped(addr);
        let (place, len) = db.places().lookup(addr);
        assert_eq!(place, full.map(|l| l.place()), "{addr}");
        assert!(len <= full_len, "{addr}: place block /{len} inside the network /{full_len}");
    }
    // The two Sydney rows (203.0.113.0/25 and .128/26) are one place but not siblings;
    // 192.0.2.0/25 (FR) and .128/25 (US) differ: both keep their own block.
    assert_eq!(db.places().lookup(ip("192.0.2.1")).1, 25);
    let (places, _) = db.places().size();
    assert!((2..=18).contains(&places), "{places} places");
}

#[test]
fn the_worlds_region_chain_per_place_matches_the_full_lookup() {
    // Geographic routing reads a chain precomputed per place; it must be the chain the
    // client's full record gives, for every address, with the place's scope (which may be
    // longer than the client's prefix).
    let dir = tempfile::tempdir().unwrap();
    let db = GeoDb::open(&build_sample(dir.path())).unwrap();
    let regions = steerdns::geo::Regions::builtin();
    let world = steerdns::geo::World::new(
        Some(db.clone()),
        regions.clone(),
        None,
        Default::default(),
        Vec::new(),
    );
    let mut seen_subdivision = false;
    for base in ["192.0.2", "198.51.100", "203.0.113", "100.64.6", "192.0.3"] {
        for h in (0..=255).step_by(5) {
            let addr = ip(&format!("{base}.{h}"));
            let (full, _) = db.lookup_scoped(addr);
            let country = full.and_then(|l| l.country);
            let sub = full.and_then(|l| l.subdivision);
            let want = regions
                .chain_ids(country.as_ref().map(|c| c.as_str()), sub.as_ref().map(|c| c.as_str()));
            let client = steerdns::geo::Client::new(addr, 24);
            let (chain, scope) = client.region_chain(&world);
            assert_eq!(chain, want, "{addr}");
            assert_eq!(scope, db.places().lookup(addr).1, "{addr}");
            let codes: Vec<&str> = chain.ids().iter().map(|&i| regions.code(i)).collect();
            assert_eq!(codes.last(), Some(&"WORLD"), "{addr}");
            seen_subdivision |= codes.len() == 4;
        }
    }
    assert!(seen_subdivision, "the sample has subdivisions the hierarchy knows");
}

#[test]
fn ipv4_lives_in_the_ipv6_trees_96_subtree() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_sample(dir.path());
    let reader = maxminddb::Reader::open_readfile(&path).unwrap();
    assert_eq!(reader.metadata().ip_version, 6);
    // ::192.0.2.1 is the IPv4 client's position in the IPv6 tree; as IPv6 it is a /121.
    let r = reader.lookup(ip("::c000:201")).unwrap();
    let cc: Option<String> = r.decode_path(&maxminddb::path!["country", "iso_code"]).unwrap();
    assert_eq!(cc.as_deref(), Some("FR"));
    assert_eq!(r.network().unwrap().prefix(), 121);
    // The IPv4-mapped alias reaches the same data.
    let r = reader.lookup(ip("::ffff:198.51.100.200")).unwrap();
    let sub: Option<String> =
        r.decode_path(&maxminddb::path!["subdivisions", 0, "iso_code"]).unwrap();
    assert_eq!(sub.as_deref(), Some("SH"));
    // And the IPv4 lookup reports the IPv4 prefix.
    let r = reader.lookup(ip("192.0.2.1")).unwrap();
    assert_eq!(r.network().unwrap().to_string(), "192.0.2.0/25");
}

#[test]
fn geo_build_reads_back_with_maxminddb_geoip2_city() {
    let dir = tempfile::tempdir().unwrap();
    let reader = maxminddb::Reader::open_readfile(build_sample(dir.path())).unwrap();
    let r = reader.lookup(ip("2001:db8:2::99")).unwrap();
    let city: maxminddb::geoip2::City = r.decode().unwrap().unwrap();
    assert_eq!(city.continent.code, Some("NA"));
    assert_eq!(city.country.iso_code, Some("US"));
    assert_eq!(city.subdivisions.first().and_then(|s| s.iso_code), Some("WA"));
    assert_eq!((city.location.latitude, city.location.longitude), (Some(47.6062), Some(-122.3321)));
    assert!(reader.verify().is_ok());
}

/// `mmdblookup --file DB --ip IP PATH...`; `None` when libmaxminddb's tool is missing.
fn mmdblookup(db: &Path, addr: &str, path: &[&str]) -> Option<String> {
    let out = Command::new("mmdblookup")
        .arg("--file")
        .arg(db)
        .args(["--ip", addr])
        .args(path)
        .output()
        .ok()?;
    assert!(out.status.success(), "mmdblookup {addr}: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn geo_build_reads_back_with_mmdblookup() {
    let dir = tempfile::tempdir().unwrap();
    let db = build_sample(dir.path());
    let cases = [
        ("192.0.2.1", &["country", "iso_code"][..], "\"FR\""),
        ("192.0.2.200", &["subdivisions", "0", "iso_code"], "\"CA\""),
        ("198.51.100.200", &["location", "latitude"], "31.230400"),
        ("203.0.113.200", &["continent", "code"], "\"OC\""),
        ("2001:db8:1::1", &["subdivisions", "0", "iso_code"], "\"ENG\""),
        ("::ffff:100.64.1.9", &["country", "iso_code"], "\"AE\""),
    ];
    if !tools::have_tool("mmdblookup", "mmdb-bin") {
        return;
    }
    for (addr, path, want) in cases {
        let out = mmdblookup(&db, addr, path).expect("mmdblookup runs");
        assert!(out.contains(want), "{addr} {path:?}: {out}");
    }
    let out = Command::new("mmdblookup")
        .arg("--file")
        .arg(&db)
        .args(["--ip", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("Could not find an entry"));
}

#[test]
fn csv_errors_name_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.mmdb");
    let errors = geo::build(&repo("tests/fixtures/geo/bad.csv"), &out).unwrap_err();
    let got: Vec<String> =
        errors.iter().map(|e| format!("{}:{}: {}", e.line, e.col, e.message)).collect();
    assert_eq!(
        errors[0].to_string().split(": ").next().unwrap(),
        format!("{}:3:1", repo("tests/fixtures/geo/bad.csv").display())
    );
    assert_errors(
        &got,
        &[
            ("3:1", "host bits set in 192.0.2.1/24 (the network is 192.0.2.0/24)"),
            ("4:14", "continent \"XX\""),
            ("5:17", "country \"ZZ\""),
            ("6:1", "\"not-a-network\" is not a network"),
            ("7:21", "latitude \"91\""),
            ("8:27", "longitude is empty but latitude is set"),
            ("9:1", "expected 6 fields"),
            ("10:1", "inside ::ffff:0:0/96, which holds IPv4 data"),
            ("11:20", "subdivision \"TOOLONG\""),
            ("13:1", "network 198.51.100.0/24 is already on line 12"),
            ("14:1", "add /32 or /128"),
        ],
    );
    assert!(!out.exists(), "nothing is written when the input has errors");
}

#[test]
fn csv_header_and_empty_input() {
    let f = Path::new("in.csv");
    let t = UNIX_EPOCH;
    let e = geo::build::build_bytes("net,cc\n192.0.2.0/24,EU,FR,,,\n", f, t).unwrap_err();
    assert_eq!((e[0].line, e.len()), (1, 1), "{e:?}");
    let e = geo::build::build_bytes(
        "# nothing\nnetwork,continent,country,subdivision,latitude,longitude\n",
        f,
        t,
    )
    .unwrap_err();
    assert_eq!(e[0].message, "no networks");
    // Quotes, blanks, CRLF, a BOM and a prefixed subdivision are all fine.
    let text = "\u{feff}network, continent,country,subdivision,latitude,longitude\r\n\"192.0.2.0/24\", eu ,fr,FR-IDF, 48.8 ,2.3\r\n";
    let (bytes, s) = geo::build::build_bytes(text, f, t).unwrap();
    assert_eq!(s.ipv4_networks, 1);
    let reader = maxminddb::Reader::from_source(bytes).unwrap();
    let r = reader.lookup(ip("192.0.2.9")).unwrap();
    let sub: Option<String> =
        r.decode_path(&maxminddb::path!["subdivisions", 0, "iso_code"]).unwrap();
    assert_eq!(sub.as_deref(), Some("IDF"));
    assert_eq!(reader.metadata().build_epoch, 0);
}

/// Every network of the CSV, as (network, first address, last address).
fn csv_networks(csv: &str) -> Vec<(ipnet::IpNet, IpAddr, IpAddr)> {
    csv.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("network") && !l.trim().is_empty())
        .map(|l| {
            let net: ipnet::IpNet = l.split(',').next().unwrap().parse().unwrap();
            (net, net.network(), net.broadcast())
        })
        .collect()
}

#[test]
fn shipped_sample_database_matches_its_csv() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = GeoDb::open(&build_sample(dir.path())).unwrap();
    let shipped = GeoDb::open(&repo("geo-data/sample-city.mmdb"))
        .expect("geo-data/sample-city.mmdb is committed");
    assert_eq!(shipped.metadata().database_type, "GeoIP2-City");
    let csv = std::fs::read_to_string(repo("geo-data/sample-city.csv")).unwrap();
    let nets = csv_networks(&csv);
    assert_eq!(nets.len(), 18);
    for (net, first, last) in nets {
        for a in [first, last] {
            assert_eq!(
                shipped.lookup_scoped(a),
                fresh.lookup_scoped(a),
                "{net} at {a}: rebuild geo-data/sample-city.mmdb (see regenerate_sample_database)"
            );
            assert!(fresh.lookup(a).is_some(), "{a}");
        }
    }
}

/// Rewrites `geo-data/sample-city.mmdb` from the CSV (fixed build time, so the bytes only
/// change with the CSV): `cargo test --test geo -- --ignored regenerate_sample_database`.
#[test]
#[ignore]
fn regenerate_sample_database() {
    let csv = repo("geo-data/sample-city.csv");
    let text = std::fs::read_to_string(&csv).unwrap();
    let built = UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
    let (bytes, summary) = geo::build::build_bytes(&text, &csv, built).unwrap();
    std::fs::write(repo("geo-data/sample-city.mmdb"), bytes).unwrap();
    println!("wrote geo-data/sample-city.mmdb: {summary}");
}

// ---------------------------------------------------------------- latency table

fn sample_table() -> LatencyTable {
    LatencyTable::load(&repo("geo-data/latency.yaml"), Regions::builtin())
        .expect("sample latency table loads")
}

fn from_of(t: &LatencyTable, m: RowMatch) -> String {
    match m.row().map(|r| &t.rows()[r].from) {
        Some(RowFrom::Cidr(n)) => n.to_string(),
        Some(RowFrom::Region(c)) => c.clone(),
        None => "-".into(),
    }
}

#[test]
fn sample_table_rows_by_specificity() {
    let t = sample_table();
    let names: Vec<&str> = t.regions().iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["eu-west", "us-east", "us-west", "ap-southeast", "cn-beijing", "cn-shanghai"]
    );
    let l = |country: &str, sub: &str, prefix_len: u8| {
        loc("", country, sub, Some((0.0, 0.0)), prefix_len)
    };
    let cases: Vec<(&str, Option<Location>, &str, RowMatch)> = vec![
        // Longest prefix: the /25 inside the /24.
        (
            "198.51.100.200",
            None,
            "198.51.100.128/25",
            RowMatch::Cidr { row: 0, prefix_len: 25, scope: 25 },
        ),
        // The /24's other half: scope 25, because the /24 answer does not hold for the /25.
        (
            "198.51.100.10",
            Some(l("CN", "BJ", 25)),
            "198.51.100.0/24",
            RowMatch::Cidr { row: 1, prefix_len: 24, scope: 25 },
        ),
        (
            "2001:db8:1:2::1",
            None,
            "2001:db8:1::/48",
            RowMatch::Cidr { row: 2, prefix_len: 48, scope: 48 },
        ),
        ("192.0.2.200", Some(l("US", "CA", 25)), "US-CA", RowMatch::Region { row: 3, scope: 25 }),
        ("2001:db8:2::1", Some(l("US", "WA", 48)), "US", RowMatch::Region { row: 6, scope: 48 }),
        ("192.0.2.1", Some(l("FR", "IDF", 25)), "FR", RowMatch::Region { row: 5, scope: 25 }),
        ("2001:db8:6::1", Some(l("CN", "SH", 48)), "CN", RowMatch::Region { row: 4, scope: 48 }),
        (
            "203.0.113.200",
            Some(l("NZ", "AUK", 26)),
            "GEO-AP",
            RowMatch::Region { row: 7, scope: 26 },
        ),
        ("100.64.4.1", Some(l("GB", "SCT", 24)), "WORLD", RowMatch::Region { row: 8, scope: 24 }),
        // Not in the geo database: WORLD still applies; CIDR rows are far, so scope 1.
        ("127.0.0.1", None, "WORLD", RowMatch::Region { row: 8, scope: 1 }),
    ];
    for (addr, location, from, want) in cases {
        let got = t.row_for(ip(addr), location.as_ref());
        assert_eq!((from_of(&t, got).as_str(), got), (from, want), "{addr}");
    }
}

#[test]
fn regions_order_by_rtt_then_distance() {
    let t = sample_table();
    let m = t.row_for(ip("198.51.100.200"), None);
    let order: Vec<&str> =
        t.ranked(&m, None).iter().map(|(r, _)| t.regions()[*r].name.as_str()).collect();
    assert_eq!(
        order,
        ["cn-shanghai", "cn-beijing", "ap-southeast", "us-west", "us-east", "eu-west"]
    );
    // WORLD ties us-east and eu-west at 120: file order decides.
    let m = t.row_for(ip("127.0.0.1"), None);
    let ranked = t.ranked(&m, None);
    assert_eq!(
        (t.regions()[ranked[0].0].name.as_str(), ranked[0].1),
        ("eu-west", Metric::RttMs(120.0))
    );
    assert_eq!(t.regions()[ranked[1].0].name.as_str(), "us-east");

    // Without a row, distance; a region the row does not list comes after the listed ones.
    let yaml = "regions:\n  paris: { lat: 48.86, lon: 2.35 }\n  tokyo: { lat: 35.68, lon: 139.69 }\n  \
                paris-2: { lat: 48.86, lon: 2.35 }\n  sydney: { lat: -33.87, lon: 151.21 }\n\
                rtt:\n  - from: JP\n    to: { sydney: 100 }\n";
    let t = LatencyTable::parse(yaml, Path::new("l.yaml"), Regions::builtin()).unwrap();
    let names = |m: &RowMatch, l: Option<&Location>| -> Vec<String> {
        t.ranked(m, l).iter().map(|(r, _)| t.regions()[*r].name.clone()).collect()
    };
    let london = loc("EU", "GB", "ENG", Some((51.5, -0.13)), 48);
    let m = t.row_for(ip("2001:db8:1::1"), Some(&london));
    assert_eq!(m, RowMatch::None { scope: 48 });
    assert_eq!(names(&m, Some(&london)), ["paris", "paris-2", "tokyo", "sydney"]);
    let osaka = loc("AS", "JP", "27", Some((34.69, 135.50)), 24);
    let m = t.row_for(ip("192.0.2.1"), Some(&osaka));
    assert_eq!(names(&m, Some(&osaka)), ["sydney", "tokyo", "paris", "paris-2"]);
    assert!(
        matches!(t.metric(&m, Some(&osaka), 1), Metric::Km(km) if (390.0..410.0).contains(&km))
    );
    // Nothing known: file order.
    let m = t.row_for(ip("192.0.2.1"), None);
    assert_eq!(names(&m, None), ["paris", "tokyo", "paris-2", "sydney"]);
    assert_eq!(t.metric(&m, None, 0), Metric::Unknown);
}

#[test]
fn longest_prefix_and_scope_among_nested_rows() {
    let yaml = "regions:\n  a: { lat: 0, lon: 0 }\nrtt:\n\
                - { from: \"10.0.0.0/8\", to: { a: 8 } }\n\
                - { from: \"10.1.0.0/16\", to: { a: 16 } }\n\
                - { from: \"10.1.2.0/24\", to: { a: 24 } }\n\
                - { from: \"10.1.2.128/32\", to: { a: 32 } }\n\
                - { from: \"10.255.255.255/32\", to: { a: 33 } }\n\
                - { from: \"0.0.0.0/0\", to: { a: 0 } }\n\
                - { from: \"2001:db8::/32\", to: { a: 32 } }\n\
                - { from: \"2001:db8::/127\", to: { a: 127 } }\n\
                - { from: \"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128\", to: { a: 128 } }\n";
    let t = LatencyTable::parse(yaml, Path::new("l.yaml"), Regions::builtin()).unwrap();
    let rtt = |addr: &str| {
        let m = t.row_for(ip(addr), None);
        let ms = match t.metric(&m, None, 0) {
            Metric::RttMs(ms) => ms as i64,
            _ => -1,
        };
        (ms, m.scope())
    };
    assert_eq!(rtt("10.1.2.128"), (32, 32));
    assert_eq!(rtt("10.1.2.129"), (24, 32), "next to a /32 row");
    assert_eq!(rtt("10.1.2.1"), (24, 25), "the /25 away from the /32");
    assert_eq!(rtt("10.1.3.1"), (16, 24));
    assert_eq!(rtt("10.1.128.1"), (16, 17));
    assert_eq!(rtt("10.2.0.1"), (8, 15), "10.0.0.0/15 holds 10.1/16");
    assert_eq!(rtt("10.200.0.1"), (8, 11), "10.192.0.0/10 holds 10.255.255.255");
    assert_eq!(rtt("10.100.0.1"), (8, 10), "10.0.0.0/9 holds 10.1/16");
    assert_eq!(rtt("10.255.255.254"), (8, 32));
    assert_eq!(rtt("10.255.255.255"), (33, 32));
    assert_eq!(rtt("11.0.0.1"), (0, 8));
    assert_eq!(rtt("200.0.0.1"), (0, 1));
    assert_eq!(rtt("2001:db8::1"), (127, 127));
    assert_eq!(rtt("2001:db8::2"), (32, 127));
    assert_eq!(rtt("2001:db8:8000::"), (32, 33));
    assert_eq!(rtt("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), (128, 128));
    assert_eq!(rtt("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), (-1, 128));
    assert_eq!(rtt("::1"), (-1, 3));
}

/// A tiny deterministic generator (xorshift64*), to compare against brute force.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn hundred_thousand_rows_match_brute_force() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut nets: Vec<ipnet::Ipv4Net> = Vec::new();
    let mut yaml = String::from("regions:\n  a: { lat: 0, lon: 0 }\nrtt:\n");
    let mut seen = std::collections::HashSet::new();
    while nets.len() < 100_000 {
        let len = [8u8, 12, 16, 20, 22, 24, 24, 24, 28, 32][(rng.next() % 10) as usize];
        let net =
            ipnet::Ipv4Net::new(std::net::Ipv4Addr::from(rng.next() as u32), len).unwrap().trunc();
        if seen.insert(net) {
            yaml.push_str(&format!("  - {{ from: \"{net}\", to: {{ a: {} }} }}\n", nets.len()));
            nets.push(net);
        }
    }
    let t = LatencyTable::parse(&yaml, Path::new("big.yaml"), Regions::builtin()).unwrap();
    // The oracle: every prefix length probed in a hash map, longest first.
    let by_net: std::collections::HashMap<ipnet::Ipv4Net, usize> =
        nets.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    for _ in 0..20_000 {
        // Half the probes inside a row, half anywhere.
        let r = rng.next();
        let addr = if r.is_multiple_of(2) {
            let n = nets[(r >> 1) as usize % nets.len()];
            std::net::Ipv4Addr::from(
                u32::from(n.network()) | (rng.next() as u32 & !u32::from(n.netmask())),
            )
        } else {
            std::net::Ipv4Addr::from(rng.next() as u32)
        };
        let best = (0..=32u8).rev().find_map(|len| {
            let net = ipnet::Ipv4Net::new(addr, len).unwrap().trunc();
            by_net.get(&net).map(|&i| (i, net))
        });
        let m = t.row_for(IpAddr::V4(addr), None);
        match (best, m) {
            (Some((i, n)), RowMatch::Cidr { row, prefix_len, scope }) => {
                assert_eq!((row, prefix_len), (i, n.prefix_len()), "{addr}");
                // Every address in the scope block gets the same row.
                let block = ipnet::Ipv4Net::new(addr, scope).unwrap().trunc();
                for probe in [block.network(), block.broadcast()] {
                    assert_eq!(
                        t.row_for(IpAddr::V4(probe), None).row(),
                        Some(row),
                        "{addr} scope {scope}"
                    );
                }
            }
            (None, RowMatch::Region { .. } | RowMatch::None { .. }) => {}
            (b, m) => panic!("{addr}: brute force {b:?}, table {m:?}"),
        }
    }
}

#[test]
fn latency_errors_are_located() {
    let path = repo("tests/fixtures/geo/latency-bad.yaml");
    let e = LatencyTable::load(&path, Regions::builtin()).unwrap_err();
    assert!(e.0.iter().all(|e| e.file == path));
    assert_errors(
        &messages(e),
        &[
            ("3:31", "lon -200 must be between -180 and 180"),
            ("6:11", "host bits set in 203.0.113.1/24"),
            ("8:11", "from \"ZZ\" is neither a CIDR nor a known region code"),
            ("11:24", "\"mars-1\" is not a region"),
            ("13:20", "rtt -5 must be a number of ms >= 0"),
            ("14:11", "a row from \"FR\" is already in the table"),
        ],
    );
    let bad = |yaml: &str| {
        messages(LatencyTable::parse(yaml, Path::new("l.yaml"), Regions::builtin()).unwrap_err())
    };
    assert_errors(&bad("regions: {}\n"), &[("1:10", "at least one region")]);
    assert_errors(
        &bad(
            "regions:\n  a: { lat: 1, lon: 2 }\nrtt:\n  - { from: \"::ffff:10.0.0.0/104\", to: { a: 1 } }\n",
        ),
        &[("4:13", "IPv4-mapped; write the IPv4 network")],
    );
    assert_errors(
        &bad("regions:\n  a: { lat: 1, lon: 2, alt: 3 }\n"),
        &[("2:24", "unknown field `alt`")],
    );
    assert_errors(
        &bad("regions:\n  a: { lat: 1, lon: 2 }\nrtt:\n  - { from: WORLD, to: {} }\n"),
        &[("4:24", "lists no region")],
    );
    assert_errors(
        &bad("regions:\n  a: { lat: 1, lon: 2 }\nrtt:\n  - { from: WORLD, to: { a: fast } }\n"),
        &[("4:29", "")],
    );
    assert_errors(
        &bad("regions:\n  a: { lat: 95, lon: 2 }\n"),
        &[("2:13", "lat 95 must be between -90 and 90")],
    );
    assert_errors(
        &bad("regions:\n  a: { lat: 1, lon: 2 }\n  a: { lat: 1, lon: 2 }\n"),
        &[("3:3", "duplicate")],
    );
}

#[test]
fn great_circle_distances() {
    let paris = (48.8566, 2.3522);
    let london = (51.5074, -0.1278);
    assert!((great_circle_km(paris, london) - 343.5).abs() < 2.0);
    assert_eq!(great_circle_km(paris, paris), 0.0);
    assert!((great_circle_km((0.0, 0.0), (0.0, 180.0)) - 20_015.1).abs() < 1.0);
    assert!((great_circle_km((90.0, 0.0), (-90.0, 0.0)) - 20_015.1).abs() < 1.0);
    assert_eq!(great_circle_km(paris, london), great_circle_km(london, paris));
}

// ---------------------------------------------------------------- measurements

/// ns per `GeoDb::lookup` on the shipped sample database, and per latency-row lookup:
/// `cargo test --release --test geo -- --ignored --nocapture lookup_speed`.
#[test]
#[ignore]
fn lookup_speed() {
    let dbs = [repo("geo-data/sample-city.mmdb")];
    let mut rng = Rng(42);
    let addrs: Vec<IpAddr> = (0..100_000)
        .map(|i| match i % 4 {
            0 => IpAddr::V4(std::net::Ipv4Addr::from(0xc000_0200 | (rng.next() as u32 & 0xff))),
            1 => IpAddr::V4(std::net::Ipv4Addr::from(rng.next() as u32)),
            2 => IpAddr::V6(std::net::Ipv6Addr::from(
                (0x2001_0db8_0001u128 << 80) | u128::from(rng.next()),
            )),
            _ => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(rng.next()) << 64)),
        })
        .collect();
    for path in dbs {
        let db = GeoDb::open(&path).unwrap();
        let started = std::time::Instant::now();
        let mut found = 0usize;
        for _ in 0..10 {
            for a in &addrs {
                found += usize::from(std::hint::black_box(db.lookup(*a)).is_some());
            }
        }
        let ns = started.elapsed().as_nanos() as f64 / (10 * addrs.len()) as f64;
        println!("{}: {ns:.0} ns/lookup ({found} hits of {})", path.display(), 10 * addrs.len());
    }
    let t = sample_table();
    let l = loc("NA", "US", "CA", Some((37.0, -122.0)), 25);
    let started = std::time::Instant::now();
    for a in &addrs {
        std::hint::black_box(t.ranked(&t.row_for(*a, Some(&l)), Some(&l)));
    }
    let ns = started.elapsed().as_nanos() as f64 / addrs.len() as f64;
    println!("latency row_for + ranked (6 regions): {ns:.0} ns");
}

#[test]
fn codes_are_small_upper_case_values() {
    assert_eq!(Code::new("eng").unwrap().as_str(), "ENG");
    assert_eq!(Code::new("US").unwrap(), "US");
    assert_eq!(Code::new("1234567").map(|c| c.to_string()), Some("1234567".into()));
    assert_eq!(Code::new("12345678"), None);
    assert_eq!(Code::new(""), None);
    assert_eq!(Code::new("U-S"), None);
    assert_eq!(Code::new("É"), None);
}

#[test]
fn many_ipv6_rows_match_brute_force() {
    let mut rng = Rng(7);
    let mut nets: Vec<ipnet::Ipv6Net> = Vec::new();
    let mut yaml = String::from("regions:\n  a: { lat: 0, lon: 0 }\nrtt:\n");
    let mut seen = std::collections::HashSet::new();
    while nets.len() < 6000 {
        // Clustered like real allocations: a few /16s, then /32, /48 and /64 inside them.
        let top = [0x2001u128, 0x2a02, 0x2600, 0xfd00][(rng.next() % 4) as usize] << 112;
        let addr = top | (u128::from(rng.next()) << 48) | u128::from(rng.next() as u16);
        let len = [32u8, 40, 48, 48, 56, 64][(rng.next() % 6) as usize];
        let net = ipnet::Ipv6Net::new(std::net::Ipv6Addr::from(addr), len).unwrap().trunc();
        if seen.insert(net) {
            yaml.push_str(&format!("  - {{ from: \"{net}\", to: {{ a: 1 }} }}\n"));
            nets.push(net);
        }
    }
    let t = LatencyTable::parse(&yaml, Path::new("v6.yaml"), Regions::builtin()).unwrap();
    let by_net: std::collections::HashMap<ipnet::Ipv6Net, usize> =
        nets.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    for _ in 0..5000 {
        let n = nets[rng.next() as usize % nets.len()];
        let addr = std::net::Ipv6Addr::from(
            u128::from(n.network())
                | ((u128::from(rng.next()) << 64 | u128::from(rng.next()))
                    & !u128::from(n.netmask())),
        );
        let best = (0..=128u8)
            .rev()
            .find_map(|len| by_net.get(&ipnet::Ipv6Net::new(addr, len).unwrap().trunc()).copied());
        let m = t.row_for(IpAddr::V6(addr), None);
        assert_eq!(m.row(), best, "{addr}");
        let block = ipnet::Ipv6Net::new(addr, m.scope()).unwrap().trunc();
        for probe in [block.network(), block.broadcast()] {
            assert_eq!(
                t.row_for(IpAddr::V6(probe), None).row(),
                best,
                "{addr} scope {}",
                m.scope()
            );
        }
    }
}

/// A configuration directory: one zone, the geo database `db` if given, and `profiles` as
/// `profiles/p.yaml`. Returns the path of `steerdns.yaml`.
fn geo_config(dir: &Path, db: Option<&Path>, profiles: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("profiles/p.yaml"), profiles).unwrap();
    let geo = db.map_or(String::new(), |db| format!("geo:\n  database: {}\n", db.display()));
    let zone = "zones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: { rname: hostmaster.example.test. }\n    records: [\"ns1 A 192.0.2.53\"]\n";
    let path = dir.join("steerdns.yaml");
    std::fs::write(&path, format!("listen:\n  dns: [\"127.0.0.1:0\"]\n{geo}{zone}")).unwrap();
    path
}

/// Routes an A query for `client` at profile `pid`: the first endpoint's name (`None` for
/// NODATA) and the ECS scope.
fn decide(
    snap: &steerdns::model::snapshot::Snapshot,
    pid: usize,
    client: &steerdns::routing::Client,
) -> (Option<String>, u8) {
    use steerdns::routing::{Ctx, Decision, Query, route};
    let ctx = Ctx::new(&snap.profiles, &*snap.health, &snap.world);
    let q = Query { want: steerdns::model::Want::A, client };
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
    match route(ctx, pid, q, &mut rng) {
        Decision::Answer { endpoints, scope } => (Some(endpoints[0].name.clone()), scope),
        Decision::NoData { scope } => (None, scope),
    }
}

#[test]
fn compiled_geographic_mappings_answer_as_the_region_chain_does() {
    // Every address answers with the same endpoint through the compiled mapping (client
    // looked up) as through the region chain (location given), and the compiled block is
    // never narrower than the place's.
    use steerdns::geo::{Client, Located};
    let dir = tempfile::tempdir().unwrap();
    let db = build_sample(dir.path());
    let mappings: [&[&str]; 2] = [
        &["[FR]", "[GEO-EU]", "[US-CA]", "[US, GEO-NA]", "[GEO-AS]", "[WORLD]"],
        &["[GB-ENG]", "[GEO-EU]", "[CN]", "[US-WA]", "[GEO-AP]", "[GEO-SA]"],
    ];
    let mut profiles = String::new();
    for (k, codes) in mappings.iter().enumerate() {
        profiles.push_str(&format!("---\nname: g{k}\nrouting: geographic\nendpoints:\n"));
        for (i, c) in codes.iter().enumerate() {
            let ep = format!(
                "  - {{ name: e{i}, target: 192.0.2.{i}, always_serve: true, geo: {c} }}\n"
            );
            profiles.push_str(&ep);
        }
    }
    let snap = steerdns::config::load(&geo_config(dir.path(), Some(&db), &profiles), None)
        .unwrap()
        .snapshot;
    let geo = GeoDb::open(&db).unwrap();
    // Every network of the sample database, both families, and space around them.
    let mut addrs: Vec<IpAddr> = Vec::new();
    for base in ["192.0.2", "198.51.100", "203.0.113", "192.0.3"]
        .into_iter()
        .map(String::from)
        .chain((1..=6).map(|n| format!("100.64.{n}")))
    {
        addrs.extend((0..=255).step_by(7).map(|h| ip(&format!("{base}.{h}"))));
    }
    for g in 0..8u16 {
        addrs.extend([ip(&format!("2001:db8:{g:x}::1")), ip(&format!("2001:db8:{g:x}:ffff::9"))]);
    }
    let mut widened = 0;
    for pid in 0..mappings.len() {
        for &addr in &addrs {
            let compiled = decide(&snap, pid, &Client::from_addr(addr));
            let (location, prefix) = geo.lookup_scoped(addr);
            let walked = decide(&snap, pid, &Client::at(addr, Located { location, prefix }));
            assert_eq!(compiled.0, walked.0, "g{pid} {addr}");
            let place_len = geo.places().lookup(addr).1;
            assert!(compiled.1 <= place_len, "g{pid} {addr}: /{} inside /{place_len}", compiled.1);
            widened += usize::from(compiled.1 < place_len);
        }
    }
    assert!(widened > 0, "some blocks are wider than their place");
}

#[test]
fn a_reload_without_the_geo_database_drops_the_compiled_mapping() {
    // The profile file is unchanged, so the reload takes the profile over from the running
    // configuration; its compiled trie must not outlive the database it came from.
    let dir = tempfile::tempdir().unwrap();
    let db = build_sample(dir.path());
    let profiles = "name: g\nrouting: geographic\nendpoints:\n  - { name: fr, target: 192.0.2.1, always_serve: true, geo: [FR] }\n  - { name: world, target: 192.0.2.2, always_serve: true, geo: [WORLD] }\n";
    let paris = steerdns::geo::Client::new(ip("192.0.2.1"), 32);
    let path = geo_config(dir.path(), Some(&db), profiles);
    let with_db = steerdns::config::load(&path, None).unwrap();
    assert_eq!(decide(&with_db.snapshot, 0, &paris), (Some("fr".to_string()), 25));
    geo_config(dir.path(), None, profiles);
    let without = steerdns::config::load(&path, Some(with_db.previous())).unwrap();
    assert_eq!(
        decide(&without.snapshot, 0, &paris),
        (Some("world".to_string()), 0),
        "no database: client unknown"
    );
}
