//! `steerdns geo build`: compiles a CSV of networks into a MaxMind DB in the GeoIP2-City
//! layout, so operators (and our tests) can make a geo database any MMDB reader understands.
//!
//! Input: a header `network,continent,country,subdivision,latitude,longitude`, then one row a
//! network (IPv4 or IPv6 CIDR, host bits clear); subdivision and coordinates may be empty.
//! Blank lines and lines starting with `#` are skipped. Every bad row is reported with its
//! line and column, all of them in one run. Overlapping networks are fine — the more specific
//! one wins whatever the row order — but the same network twice is an error.
//!
//! Output: an IPv6 tree holding IPv4 networks in the `::/96` subtree (with the usual
//! `::ffff:0:0/96`, 6to4 and Teredo aliases), records
//! `{continent.code, country.iso_code, subdivisions[0].iso_code, location.latitude/longitude}`
//! and database_type `GeoIP2-City`. It is written to a temporary file and renamed into place,
//! because a running server may have the old file memory-mapped.

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipnet::IpNet;
use mmdb_writer::{Value, Writer};

use super::regions::{RegionKind, Regions};

/// The only accepted header.
pub const HEADER: &str = "network,continent,country,subdivision,latitude,longitude";

/// MaxMind's continent codes.
const CONTINENTS: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

/// IPv6 space that cannot hold IPv6 data in this layout: the IPv4 subtree itself and the
/// ranges aliased to it.
const RESERVED_V6: [&str; 4] = ["::/96", "::ffff:0:0/96", "2001::/32", "2002::/16"];

/// One problem with the input. `line` and `col` are 1-based; 0 when the problem is the
/// whole file (it cannot be read, it has no rows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line.max(1),
            self.col.max(1),
            self.message
        )
    }
}

/// What was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildSummary {
    pub ipv4_networks: usize,
    pub ipv6_networks: usize,
    pub bytes: usize,
}

impl fmt::Display for BuildSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} IPv4 and {} IPv6 networks, {} bytes",
            self.ipv4_networks, self.ipv6_networks, self.bytes
        )
    }
}

/// What a valid CSV row says of its network.
struct Place {
    continent: String,
    country: String,
    subdivision: Option<String>,
    coords: Option<(f64, f64)>,
}

/// The most a CSV input may hold: GeoLite2-City's networks take about 300 MB written this
/// way, and the whole text and its rows are held in memory while building.
pub const CSV_LIMIT: crate::diag::Limit =
    crate::diag::Limit { bytes: 1 << 30, set_by: "the fixed limit for geo build input" };

/// Compiles `input` (CSV) into `output` (MMDB). Nothing is written unless the whole input
/// is valid.
pub fn build(input: &Path, output: &Path) -> Result<BuildSummary, Vec<BuildError>> {
    compile_file(input, output, build_bytes)
}

/// Reads `input` (bounded), compiles it with `compile` and writes `output` atomically: the
/// shell both builders share.
pub(super) fn compile_file(
    input: &Path,
    output: &Path,
    compile: impl FnOnce(&str, &Path, SystemTime) -> Result<(Vec<u8>, BuildSummary), Vec<BuildError>>,
) -> Result<BuildSummary, Vec<BuildError>> {
    let whole = |message: String| vec![BuildError { file: input.into(), line: 0, col: 0, message }];
    let text = crate::diag::read_limited(input, CSV_LIMIT)
        .map_err(|e| whole(format!("cannot read: {e}")))?;
    let (bytes, summary) = compile(&text, input, build_time())?;
    write_atomically(output, &bytes)
        .map_err(|e| whole(format!("cannot write {}: {e}", output.display())))?;
    Ok(summary)
}

/// The parsed rows when there are some and no errors; else every error (or "no networks").
fn rows_or_errors<T>(
    rows: Vec<T>,
    file: &Path,
    mut errors: Vec<BuildError>,
) -> Result<Vec<T>, Vec<BuildError>> {
    if errors.is_empty() && rows.is_empty() {
        errors.push(BuildError {
            file: file.into(),
            line: 0,
            col: 0,
            message: "no networks".into(),
        });
    }
    if errors.is_empty() { Ok(rows) } else { Err(errors) }
}

/// Compiles CSV text into database bytes stamped with `built`; `file` only names the input
/// in errors.
pub fn build_bytes(
    text: &str,
    file: &Path,
    built: SystemTime,
) -> Result<(Vec<u8>, BuildSummary), Vec<BuildError>> {
    let mut errors = Vec::new();
    let rows = parse(text, file, &mut errors);
    let layout = Layout { database_type: "GeoIP2-City", description: "steerdns geo build" };
    write_tree(rows, errors, &layout, file, built)
}

/// One valid CSV row: where it came from, where it goes in the tree, and what it says of
/// the network (`data`, the database's record for it).
pub(super) struct Row<T> {
    pub line: usize,
    pub net: IpNet,
    pub data: T,
}

/// What a row's data is in the database.
pub(super) trait Record {
    fn record(&self) -> Value;
}

/// What kind of database a builder writes.
pub(super) struct Layout {
    pub database_type: &'static str,
    pub description: &'static str,
}

/// Writes the valid rows of a parse into a database of `layout` stamped with `built`
/// when the parse found no `errors` (else returns them): the part both builders share once
/// their CSV is parsed. `file` only names the input in errors.
pub(super) fn write_tree<T: Record>(
    rows: Vec<Row<T>>,
    errors: Vec<BuildError>,
    layout: &Layout,
    file: &Path,
    built: SystemTime,
) -> Result<(Vec<u8>, BuildSummary), Vec<BuildError>> {
    let mut rows = rows_or_errors(rows, file, errors)?;
    // Less specific first: mmdb-writer lets later inserts win, and a /24 must beat the /16
    // around it wherever it appears in the file.
    rows.sort_by_key(|r| tree_len(&r.net));
    let mut writer = Writer::builder(layout.database_type)
        .description(&[("en", layout.description)])
        .build_epoch(built)
        .build();
    let mut errors = Vec::new();
    for r in &rows {
        if let Err(e) = writer.insert_value(r.net, r.data.record()) {
            errors.push(BuildError {
                file: file.into(),
                line: r.line,
                col: 1,
                message: e.to_string(),
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let bytes = writer.to_bytes().map_err(|e| {
        vec![BuildError { file: file.into(), line: 0, col: 0, message: e.to_string() }]
    })?;
    let ipv4_networks = rows.iter().filter(|r| r.net.addr().is_ipv4()).count();
    let summary = BuildSummary {
        ipv4_networks,
        ipv6_networks: rows.len() - ipv4_networks,
        bytes: bytes.len(),
    };
    Ok((bytes, summary))
}

/// Position of a network in the IPv6 tree (IPv4 sits under `::/96`).
fn tree_len(net: &IpNet) -> u8 {
    match net {
        IpNet::V4(n) => 96 + n.prefix_len(),
        IpNet::V6(n) => n.prefix_len(),
    }
}

/// `SOURCE_DATE_EPOCH` when set (reproducible builds), else now.
pub(super) fn build_time() -> SystemTime {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or_else(SystemTime::now, |s| UNIX_EPOCH + Duration::from_secs(s))
}

impl Record for Place {
    fn record(&self) -> Value {
        let mut fields = vec![
            ("continent", Value::map([("code", Value::from(self.continent.as_str()))])),
            ("country", Value::map([("iso_code", Value::from(self.country.as_str()))])),
        ];
        if let Some(s) = &self.subdivision {
            fields.push((
                "subdivisions",
                Value::array([Value::map([("iso_code", Value::from(s.as_str()))])]),
            ));
        }
        if let Some((lat, lon)) = self.coords {
            fields.push((
                "location",
                Value::map([("latitude", Value::from(lat)), ("longitude", Value::from(lon))]),
            ));
        }
        Value::map(fields)
    }
}

/// Writes to a temporary file beside `path` and renames it over `path`, so a reader that
/// has the old file mapped keeps a consistent copy.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("geo.mmdb");
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The lines of a CSV text that hold a header or a row, each with its number (1-based):
/// without a byte order mark or a line's `\r`, and past blank lines and lines starting
/// with `#`.
pub(super) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let numbered = text.lines().enumerate().map(|(i, raw)| (i + 1, raw.trim_end_matches('\r')));
    numbered.filter(|(_, c)| !(c.trim().is_empty() || c.trim_start().starts_with('#')))
}

/// Reads every row, collecting errors; returns the valid rows.
fn parse(text: &str, file: &Path, errors: &mut Vec<BuildError>) -> Vec<Row<Place>> {
    let regions = Regions::builtin();
    let mut ctx = Ctx { file, errors, regions: &regions, seen: HashMap::new() };
    let mut rows = Vec::new();
    let mut header_seen = false;
    for (line, content) in lines(text) {
        if !header_seen {
            header_seen = true;
            if !content.trim().replace(' ', "").eq_ignore_ascii_case(HEADER) {
                ctx.err(line, 1, format!("the first line must be the header {HEADER:?}"));
            }
            continue;
        }
        if let Some(row) = ctx.row(line, content) {
            rows.push(row);
        }
    }
    rows
}

/// Per-file parsing state.
struct Ctx<'a> {
    file: &'a Path,
    errors: &'a mut Vec<BuildError>,
    regions: &'a Regions,
    /// Network → line where it first appeared.
    seen: HashMap<IpNet, usize>,
}

/// One cell: its text (trimmed, unquoted) and 1-based column.
struct Cell<'t> {
    text: &'t str,
    col: usize,
}

impl Ctx<'_> {
    fn err(&mut self, line: usize, col: usize, message: String) {
        self.errors.push(BuildError { file: self.file.into(), line, col, message });
    }

    fn row(&mut self, line: usize, content: &str) -> Option<Row<Place>> {
        let cells = split(content);
        if cells.len() != 6 {
            self.err(line, 1, format!("expected 6 fields ({HEADER}), found {}", cells.len()));
            return None;
        }
        let before = self.errors.len();
        let net = self.network(line, &cells[0]);
        let continent = self.continent(line, &cells[1]);
        let country = self.country(line, &cells[2]);
        let subdivision = self.subdivision(line, &cells[3], country.as_deref());
        let coords = self.coords(line, &cells[4], &cells[5]);
        if self.errors.len() != before {
            return None;
        }
        let place = Place { continent: continent?, country: country?, subdivision, coords };
        Some(Row { line, net: net?, data: place })
    }

    fn network(&mut self, line: usize, c: &Cell<'_>) -> Option<IpNet> {
        let net = match network(c.text) {
            Ok(net) => net,
            Err(message) => {
                self.err(line, c.col, message);
                return None;
            }
        };
        if let Some(first) = self.seen.insert(net, line) {
            self.seen.insert(net, first);
            self.err(line, c.col, format!("network {net} is already on line {first}"));
            return None;
        }
        Some(net)
    }

    fn continent(&mut self, line: usize, c: &Cell<'_>) -> Option<String> {
        let up = c.text.to_ascii_uppercase();
        if CONTINENTS.contains(&up.as_str()) {
            return Some(up);
        }
        self.err(
            line,
            c.col,
            format!("continent {:?} must be one of {}", c.text, CONTINENTS.join(", ")),
        );
        None
    }

    fn country(&mut self, line: usize, c: &Cell<'_>) -> Option<String> {
        if self.regions.kind(c.text) == Some(RegionKind::Country) {
            return Some(c.text.to_ascii_uppercase());
        }
        self.err(line, c.col, format!("country {:?} is not an ISO 3166-1 alpha-2 code", c.text));
        None
    }

    /// The subdivision part without its country prefix, as MaxMind stores it (`CA`, `ENG`);
    /// `US-CA` is accepted and stripped.
    fn subdivision(&mut self, line: usize, c: &Cell<'_>, country: Option<&str>) -> Option<String> {
        if c.text.is_empty() {
            return None;
        }
        let up = c.text.to_ascii_uppercase();
        let part = match (up.split_once('-'), country) {
            (Some((cc, rest)), Some(country)) if cc == country => rest.to_string(),
            _ => up,
        };
        if (1..=3).contains(&part.len()) && part.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Some(part);
        }
        self.err(
            line,
            c.col,
            format!("subdivision {:?} must be an ISO 3166-2 code like CA or US-CA", c.text),
        );
        None
    }

    fn coords(&mut self, line: usize, lat: &Cell<'_>, lon: &Cell<'_>) -> Option<(f64, f64)> {
        match (lat.text.is_empty(), lon.text.is_empty()) {
            (true, true) => return None,
            (true, false) => {
                self.err(line, lat.col, "latitude is empty but longitude is set".into())
            }
            (false, true) => {
                self.err(line, lon.col, "longitude is empty but latitude is set".into())
            }
            (false, false) => {}
        }
        let la = self.degrees(line, lat, "latitude", 90.0);
        let lo = self.degrees(line, lon, "longitude", 180.0);
        la.zip(lo)
    }

    fn degrees(&mut self, line: usize, c: &Cell<'_>, what: &str, max: f64) -> Option<f64> {
        if c.text.is_empty() {
            return None;
        }
        match c.text.parse::<f64>() {
            Ok(v) if v.is_finite() && v.abs() <= max => Some(v),
            _ => {
                self.err(
                    line,
                    c.col,
                    format!("{what} {:?} must be a number from -{max} to {max}", c.text),
                );
                None
            }
        }
    }
}

/// A network cell: a CIDR with its host bits clear, outside the IPv6 space that aliases
/// IPv4 in this layout.
pub(super) fn network(text: &str) -> Result<IpNet, String> {
    let Ok(net) = text.parse::<IpNet>() else {
        let hint =
            if text.parse::<IpAddr>().is_ok() { " (write a CIDR: add /32 or /128)" } else { "" };
        return Err(format!("{text:?} is not a network (CIDR){hint}"));
    };
    if net.trunc() != net {
        return Err(format!("host bits set in {net} (the network is {})", net.trunc()));
    }
    if let IpNet::V6(_) = net
        && let Some(r) =
            RESERVED_V6.iter().find(|r| r.parse::<IpNet>().is_ok_and(|r| r.contains(&net)))
    {
        return Err(format!(
            "{net} is inside {r}, which holds IPv4 data; write the IPv4 network instead"
        ));
    }
    Ok(net)
}

/// Splits a CSV line on commas (no field here can contain one), trimming blanks and one
/// pair of surrounding double quotes as spreadsheets write them.
fn split(line: &str) -> Vec<Cell<'_>> {
    let mut cells = Vec::new();
    let mut start = 0;
    for part in line.split(',') {
        let lead = part.len() - part.trim_start().len();
        let t = part.trim();
        let t = t.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(t);
        cells.push(Cell { text: t.trim(), col: line[..start + lead].chars().count() + 1 });
        start += part.len() + 1;
    }
    cells
}
