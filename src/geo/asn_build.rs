//! `steerdns geo build --asn`: compiles a CSV of networks and their operators into a
//! MaxMind DB in the GeoLite2-ASN layout, which `asn.database` and every MMDB reader
//! understand.
//!
//! Input: one row a network, `network,asn,organization` (IPv4 or IPv6 CIDR, host bits
//! clear; the ASN as a number, `AS` prefix allowed; the organization may be empty, and may
//! hold commas when quoted as spreadsheets write it). A first line naming the columns is
//! optional: `network,asn,organization` or MaxMind's own
//! `network,autonomous_system_number,autonomous_system_organization`, so GeoLite2-ASN's CSV
//! files build as they are. Blank lines and lines starting with `#` are skipped; every bad
//! row is reported with its line and column, all in one run; the same network twice is an
//! error, overlapping networks are fine (the more specific one wins).
//!
//! Output: an IPv6 tree with IPv4 under `::/96` (and the usual aliases), records
//! `{autonomous_system_number, autonomous_system_organization}`, database_type
//! `GeoLite2-ASN`, written to a temporary file and renamed into place.

use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

use ipnet::IpNet;
use mmdb_writer::Value;

use super::build::{
    BuildError, BuildSummary, Layout, Record, Row, compile_file, lines, network, write_tree,
};

/// The header this builder documents; MaxMind's long form is accepted too.
pub const HEADER: &str = "network,asn,organization";
const MAXMIND_HEADER: &str = "network,autonomous_system_number,autonomous_system_organization";

/// What a valid CSV row says of its network.
struct Operator {
    asn: u32,
    organization: String,
}

/// Compiles `input` (CSV) into `output` (MMDB). Nothing is written unless the whole input
/// is valid.
pub fn build_asn(input: &Path, output: &Path) -> Result<BuildSummary, Vec<BuildError>> {
    compile_file(input, output, build_asn_bytes)
}

/// Compiles CSV text into database bytes stamped with `built`; `file` only names the input
/// in errors.
pub fn build_asn_bytes(
    text: &str,
    file: &Path,
    built: SystemTime,
) -> Result<(Vec<u8>, BuildSummary), Vec<BuildError>> {
    let mut errors = Vec::new();
    let rows = parse(text, file, &mut errors);
    let layout = Layout { database_type: "GeoLite2-ASN", description: "steerdns geo build --asn" };
    write_tree(rows, errors, &layout, file, built)
}

impl Record for Operator {
    fn record(&self) -> Value {
        let mut fields = vec![("autonomous_system_number", Value::from(self.asn))];
        if !self.organization.is_empty() {
            fields
                .push(("autonomous_system_organization", Value::from(self.organization.as_str())));
        }
        Value::map(fields)
    }
}

/// Reads every row, collecting errors; returns the valid rows.
fn parse(text: &str, file: &Path, errors: &mut Vec<BuildError>) -> Vec<Row<Operator>> {
    let mut err = |line, col, message| {
        errors.push(BuildError { file: file.into(), line, col, message });
    };
    let mut seen: HashMap<IpNet, usize> = HashMap::new();
    let mut rows = Vec::new();
    let mut first = true;
    for (line, content) in lines(text) {
        if std::mem::take(&mut first) {
            let header = content.trim().replace([' ', '"'], "");
            if header.eq_ignore_ascii_case(HEADER) || header.eq_ignore_ascii_case(MAXMIND_HEADER) {
                continue;
            }
        }
        let Some(cells) = split(content) else {
            err(line, 1, format!("expected 3 fields ({HEADER}), found fewer"));
            continue;
        };
        let [net, asn, org] = cells;
        let net = match network(net.text) {
            Ok(n) => Some(n),
            Err(m) => {
                err(line, net.col, m);
                None
            }
        };
        let asn_text = asn.text;
        let number = asn_text
            .strip_prefix("AS")
            .or_else(|| asn_text.strip_prefix("as"))
            .unwrap_or(asn_text)
            .parse::<u32>()
            .ok()
            .filter(|&n| n != 0);
        if number.is_none() {
            err(
                line,
                asn.col,
                format!(
                    "ASN {asn_text:?} must be a number from 1 to 4294967295 (AS prefix allowed)"
                ),
            );
        }
        let organization = match unquote(org.text) {
            Ok(o) => Some(o),
            Err(m) => {
                err(line, org.col, m);
                None
            }
        };
        let (Some(net), Some(asn), Some(organization)) = (net, number, organization) else {
            continue;
        };
        if let Some(&first) = seen.get(&net) {
            err(line, 1, format!("network {net} is already on line {first}"));
            continue;
        }
        seen.insert(net, line);
        rows.push(Row { line, net, data: Operator { asn, organization } });
    }
    rows
}

/// One cell: its text (trimmed) and 1-based column.
struct Cell<'t> {
    text: &'t str,
    col: usize,
}

/// The three cells of a row: the first two end at a comma, the organization is the rest of
/// the line (so an unquoted name with a comma still reads whole). `None`: fewer than 3.
fn split(line: &str) -> Option<[Cell<'_>; 3]> {
    let cell = |start: usize, end: usize| {
        let part = &line[start..end];
        let lead = part.len() - part.trim_start().len();
        Cell { text: part.trim(), col: line[..start + lead].chars().count() + 1 }
    };
    let a = line.find(',')?;
    let b = a + 1 + line[a + 1..].find(',')?;
    Some([cell(0, a), cell(a + 1, b), cell(b + 1, line.len())])
}

/// The organization as written: bare, or in double quotes with `""` for a quote.
fn unquote(text: &str) -> Result<String, String> {
    let Some(inner) = text.strip_prefix('"') else {
        return Ok(text.to_string());
    };
    let Some(inner) = inner.strip_suffix('"') else {
        return Err(format!("organization {text} has no closing double quote"));
    };
    Ok(inner.replace("\"\"", "\""))
}
