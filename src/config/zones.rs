//! Builds `Zone`s from `zones:` entries: SOA, NS, inline static records and the optional
//! RFC 1035 master file (parsed with hickory-proto's zone-file parser).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use hickory_proto::rr::{Name, RecordSet, RecordType, RrKey};
use hickory_proto::serialize::binary::{BinDecoder, BinEncodable, BinEncoder, Restrict};
use hickory_proto::serialize::txt::{ParseResult, Parser};

use super::check::int_or;
use super::dnssec::{self, KeyWatch};
use super::raw::{Loc, RawZone};
use crate::FastMap;
use crate::diag::{self, Limit, Pos, Sink};
use crate::model::zone::{Node, RrSet, Soa, Zone};
use crate::wire::Rtype;
use crate::wire::name::WireName;

const MAX_TTL: i64 = 2_147_483_647;

/// A zone being built; the serial and fingerprint are set once profiles are attached. A
/// signed zone's keys are those published at `now`; `keys` learns their directory and
/// when their timing changes next.
pub fn build(
    sink: &mut Sink<'_>,
    raw: &Loc<RawZone>,
    base: &Path,
    limit: Limit,
    now: u64,
    keys: &mut KeyWatch,
) -> Option<Zone> {
    let z = &raw.value;
    let origin = parse_name(sink, &z.origin, None)?;
    let origin_name = origin.to_name();
    let ttl = int_or(sink, z.ttl.as_ref(), 0, MAX_TTL, "ttl", 3600u32);
    let ns: Vec<WireName> =
        z.ns.value.iter().filter_map(|n| parse_name(sink, n, Some(&origin_name))).collect();
    if z.ns.value.is_empty() {
        sink.on(&z.ns, "a zone needs at least one ns");
    }
    let soa = soa(sink, z, ns.first().cloned().unwrap_or_else(|| origin.clone()), &origin_name)?;
    let mut nodes: FastMap<WireName, Node> = FastMap::default();
    let ns_rdata = ns.iter().map(|n| Box::<[u8]>::from(n.as_bytes())).collect();
    let apex = nodes.entry(origin.clone()).or_default();
    apex.rrsets.push(RrSet { rtype: Rtype::NS, ttl, rdata: ns_rdata });
    for rec in &z.records {
        let text = format!("$ORIGIN {origin}\n$TTL {ttl}\n{}\n", rec.value);
        add_records(
            sink,
            &mut nodes,
            &origin,
            Parser::new(text, None, Some(origin_name.clone())).parse(),
            Pos::of(rec),
        );
    }
    if let Some(file) = &z.file {
        let path = base.join(&file.value);
        match diag::read_limited(&path, limit) {
            Ok(text) => zone_file(sink, &mut nodes, &origin, &path, &text, ttl),
            Err(e) => sink.on(file, format!("cannot read zone file {}: {e}", path.display())),
        }
    }
    add_ancestors(&mut nodes, &origin);
    let dnssec = z.dnssec.as_ref().and_then(|d| dnssec::build(sink, d, &origin, base, now, keys));
    let soa_rdata = soa.rdata(0);
    let nodes = Arc::new(nodes);
    Some(Zone { origin, soa, serial: 0, ttl, soa_rdata, nodes, fingerprint: 0, dnssec })
}

fn soa(sink: &mut Sink<'_>, z: &RawZone, first_ns: WireName, origin: &Name) -> Option<Soa> {
    let s = &z.soa.value;
    let mname = match &s.mname {
        Some(m) => parse_name(sink, m, Some(origin))?,
        None => first_ns,
    };
    let rname = parse_name(sink, &s.rname, Some(origin))?;
    Some(Soa {
        mname,
        rname,
        // Zonemaster's recommended ranges; `minimum` (with the zone TTL) is also how long
        // resolvers cache NXDOMAIN for a name an operator is about to add.
        refresh: int_or(sink, s.refresh.as_ref(), 0, MAX_TTL, "refresh", 14_400),
        retry: int_or(sink, s.retry.as_ref(), 0, MAX_TTL, "retry", 3600),
        expire: int_or(sink, s.expire.as_ref(), 0, MAX_TTL, "expire", 1_209_600),
        minimum: int_or(sink, s.minimum.as_ref(), 0, MAX_TTL, "minimum", 300),
    })
}

/// Parses a domain name, relative names taken relative to `origin` (or as absolute).
pub fn parse_name(sink: &mut Sink<'_>, v: &Loc<String>, origin: Option<&Name>) -> Option<WireName> {
    match Name::parse(v.value.trim(), origin) {
        Ok(n) if !v.value.trim().is_empty() => Some(WireName::from_name(&n)),
        Ok(_) => {
            sink.on(v, "empty domain name");
            None
        }
        Err(e) => {
            sink.on(v, format!("invalid domain name {:?}: {e}", v.value));
            None
        }
    }
}

/// Records of an RFC 1035 master file; errors name the zone file (and, for a syntax error,
/// the line of the entry that broke the parse).
fn zone_file(
    sink: &mut Sink<'_>,
    nodes: &mut FastMap<WireName, Node>,
    origin: &WireName,
    path: &Path,
    text: &str,
    ttl: u32,
) {
    let mut file_sink = Sink { file: path, errors: sink.errors };
    let origin_name = origin.to_name();
    let parse = |upto: &str| {
        Parser::new(
            format!("$TTL {ttl}\n{upto}"),
            Some(path.to_path_buf()),
            Some(origin_name.clone()),
        )
        .parse()
    };
    match parse(text) {
        Ok(parsed) => add_records(&mut file_sink, nodes, origin, Ok(parsed), Pos::default()),
        Err(e) => {
            let line = failing_line(text, |prefix| parse(prefix).is_ok());
            file_sink.at(Pos { line, col: 1 }, format!("invalid record: {e}"));
        }
    }
}

/// hickory's parser does not say where it failed: find the first entry (a line, or lines
/// joined by parentheses) whose inclusion makes the parse fail. Only run on error.
fn failing_line(text: &str, parses: impl Fn(&str) -> bool) -> u32 {
    let mut depth = 0i32;
    let mut entry_start = 1u32;
    let mut end = 0usize;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if depth == 0 {
            entry_start = u32::try_from(i + 1).unwrap_or(u32::MAX);
        }
        let code = line.split(';').next().unwrap_or("");
        depth += code.matches('(').count() as i32 - code.matches(')').count() as i32;
        end += line.len();
        if depth <= 0 {
            depth = 0;
            if !parses(&text[..end]) {
                return entry_start;
            }
        }
    }
    entry_start
}

fn add_records(
    sink: &mut Sink<'_>,
    nodes: &mut FastMap<WireName, Node>,
    origin: &WireName,
    parsed: ParseResult<(Name, BTreeMap<RrKey, RecordSet>)>,
    at: Pos,
) {
    let sets = match parsed {
        Ok((_, sets)) => sets,
        Err(e) => return sink.at(at, format!("invalid record: {e}")),
    };
    for set in sets.values() {
        let owner = WireName::from_name(set.name());
        if !owner.is_within(origin) {
            sink.at(at, format!("record {owner} is outside the zone {origin}"));
            continue;
        }
        let rtype = set.record_type();
        match rtype {
            RecordType::SOA => sink.at(at, "SOA records are made from soa:, not given as records"),
            RecordType::NS if owner == *origin => sink.at(at, "apex NS records come from ns:"),
            RecordType::NS => {
                sink.at(at, format!("delegation of {owner} (NS below the apex) is not supported"))
            }
            _ => add_set(sink, nodes, owner, set, at),
        }
    }
}

fn add_set(
    sink: &mut Sink<'_>,
    nodes: &mut FastMap<WireName, Node>,
    owner: WireName,
    set: &hickory_proto::rr::RecordSet,
    at: Pos,
) {
    let rtype = Rtype(u16::from(set.record_type()));
    let ttl = set.ttl();
    let mut rdata = Vec::new();
    for rec in set.records_without_rrsigs() {
        let mut buf = Vec::new();
        let mut enc = BinEncoder::new(&mut buf);
        // Canonical form: names in RDATA uncompressed, since the bytes are reused verbatim.
        enc.set_canonical_form(true);
        match rec.data.emit(&mut enc) {
            Ok(()) => match decodes(&buf, set.record_type()) {
                Ok(()) => rdata.push(buf.into_boxed_slice()),
                // The text parser accepts some data its own wire decoder (and so resolvers)
                // would refuse, e.g. a CAA tag that is not alphanumeric.
                Err(e) => sink.at(at, format!("record at {owner} cannot be answered: {e}")),
            },
            Err(e) => sink.at(at, format!("cannot encode record at {owner}: {e}")),
        }
    }
    let node = nodes.entry(owner.clone()).or_default();
    let has_cname = node.rrset(Rtype::CNAME).is_some();
    if (rtype == Rtype::CNAME && !node.rrsets.is_empty()) || has_cname {
        sink.at(at, format!("{owner}: a CNAME cannot share its name with other records"));
    }
    match node.rrsets.iter_mut().find(|r| r.rtype == rtype) {
        Some(existing) => existing.rdata.extend(rdata),
        None => node.rrsets.push(RrSet { rtype, ttl, rdata }),
    }
    debug_assert_ne!(rtype, Rtype::SOA);
}

/// Whether `rdata` of type `rtype` reads back from the wire as a resolver would read it.
fn decodes(rdata: &[u8], rtype: RecordType) -> Result<(), String> {
    // Empty RDATA (a TXT without strings) means "delete" in dynamic updates, and readers
    // refuse it in answers.
    if rdata.is_empty() {
        return Err("it has no data".to_string());
    }
    let len =
        u16::try_from(rdata.len()).map_err(|_| "RDATA longer than 65535 bytes".to_string())?;
    let mut decoder = BinDecoder::new(rdata);
    match hickory_proto::rr::RData::read(&mut decoder, rtype, Restrict::new(len)) {
        Ok(_) if decoder.is_empty() => Ok(()),
        Ok(_) => Err("its RDATA does not read back whole".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Adds an empty node for every name between a record's owner and the apex.
pub fn add_ancestors(nodes: &mut FastMap<WireName, Node>, origin: &WireName) {
    let names: Vec<WireName> = nodes.keys().cloned().collect();
    for name in names {
        for anc in name.ancestors_below(origin) {
            nodes.entry(anc).or_default();
        }
    }
}
