//! The geo database: a MaxMind DB (GeoIP2/GeoLite2 City or Country layout, or one written by
//! `steerdns geo build`) read into memory and asked, per query, where a client address is.
//!
//! The file is read whole, not memory-mapped: a mapped file rewritten in place (`cp`,
//! `curl -o`) while being served would fault the process (SIGBUS) or change under a lookup.
//! A file that changes while it is read, or does not parse and walk whole, is an error, so a
//! half-written database never replaces the one in use.
//!
//! Only the fields routing needs are decoded — continent code, country (falling back to the
//! registered country), the first subdivision, coordinates — into inline `Code`s, skipping the
//! bulky `names` maps. The matched network's prefix length is reported in the client's own
//! address family: it is the ECS scope of any decision taken from the location.
//!
//! Decoding a GeoIP2-City record costs several times the tree walk, and a random client
//! population touches far more records than any small cache holds, so every record the tree
//! points at is decoded once when the file is opened: a query walks the mapped tree and
//! reads the decoded location from a table by data offset. That work is shared by every
//! configuration that opens the same unchanged file, so a reload does not repeat it.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use maxminddb::{LookupResult, MaxMindDbError, Reader, WithinOptions};
use serde::Deserialize;

use super::Code;
use super::places::{Place, Places, PlacesBuilder};
use crate::diag::{FileError, Limit};

/// Where a client address is, as far as the database knows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Location {
    /// MaxMind continent code: AF, AN, AS, EU, NA, OC, SA.
    pub continent: Option<Code>,
    /// ISO 3166-1 alpha-2.
    pub country: Option<Code>,
    /// ISO 3166-2 subdivision part without the country prefix (`CA`, `ENG`).
    pub subdivision: Option<Code>,
    pub lat: Option<f64>,
    pub lon: Option<f64>,
    /// Length of the database network that matched, in the looked-up address's family
    /// (an IPv4 client in an IPv6 database reports e.g. 24, not 120).
    pub prefix_len: u8,
}

impl Location {
    /// What geographic routing looks at.
    pub fn place(&self) -> Place {
        Place { country: self.country, subdivision: self.subdivision }
    }

    /// Latitude and longitude when the database has both.
    pub fn coords(&self) -> Option<(f64, f64)> {
        self.lat.zip(self.lon)
    }
}

/// Why a database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum GeoError {
    #[error("{}: cannot open geo database: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: MaxMindDbError,
    },
    /// Not a regular file, not there, over its size limit, or unreadable.
    #[error("{}: cannot open geo database: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: crate::diag::FileError,
    },
    /// Written to while being read: what was read may be half old, half new.
    #[error(
        "{}: cannot open geo database: the file changed while it was read (write a new file and rename it over the old one)",
        path.display()
    )]
    Changed { path: PathBuf },
}

/// A summary of the database's metadata, for the startup log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbInfo {
    pub database_type: String,
    pub build_epoch: u64,
    pub node_count: u32,
    pub ip_version: u16,
    pub record_size: u16,
}

impl fmt::Display for DbInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (built {}, IPv{} tree, {} nodes, {}-bit records)",
            self.database_type,
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.build_epoch)
            ),
            self.ip_version,
            self.node_count,
            self.record_size
        )
    }
}

/// An open geo database, held in memory. `Send + Sync`; cheap to clone.
#[derive(Clone)]
pub struct GeoDb {
    inner: Arc<Opened>,
}

/// One opened file and its decoded records, shared by every `GeoDb` of that file.
struct Opened {
    reader: Reader<Vec<u8>>,
    path: PathBuf,
    /// Data offset → location (`None`: the record does not decode, treated as no data).
    records: crate::FastMap<usize, Option<Location>>,
    /// The same networks reduced to country and subdivision, merged.
    places: Places,
}

/// What identifies an unchanged file: its path and content. By content, since a file
/// rewritten in place within one tick of the file system clock keeps its mtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FileKey {
    path: PathBuf,
    len: usize,
    hash: u64,
}

/// Files open in some live configuration. Only `GeoDb::open` (config loading) takes this
/// lock; queries never do.
static OPEN: Mutex<Vec<(FileKey, Weak<Opened>)>> = Mutex::new(Vec::new());

impl fmt::Debug for GeoDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeoDb")
            .field("path", &self.inner.path)
            .field("info", &self.metadata())
            .finish()
    }
}

/// The fields of a GeoIP2 City/Country record that routing uses; everything else in the
/// record (names in eight languages, postal codes, traits) is skipped, not decoded.
#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    continent: Option<Continent<'a>>,
    #[serde(borrow)]
    country: Option<Country<'a>>,
    #[serde(borrow)]
    registered_country: Option<Country<'a>>,
    #[serde(borrow)]
    subdivisions: Option<FirstSubdivision<'a>>,
    location: Option<Coordinates>,
}

#[derive(Deserialize)]
struct Continent<'a> {
    code: Option<&'a str>,
}

#[derive(Deserialize)]
struct Country<'a> {
    iso_code: Option<&'a str>,
}

#[derive(Deserialize)]
struct Coordinates {
    latitude: Option<f64>,
    longitude: Option<f64>,
}

/// The first element of `subdivisions` (the largest one, by MaxMind's convention); the
/// others are skipped.
struct FirstSubdivision<'a>(Option<&'a str>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstSubdivision<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = FirstSubdivision<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of subdivisions")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<Self::Value, A::Error> {
                let first = s.next_element::<Country<'de>>()?.and_then(|c| c.iso_code);
                while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(FirstSubdivision(first))
            }
        }
        d.deserialize_seq(Visit(std::marker::PhantomData))
    }
}

impl GeoDb {
    /// The default of `limits.geo_database`: GeoIP2 City is about 130 MB.
    pub const DEFAULT_LIMIT: Limit = Limit { bytes: 512 << 20, set_by: "limits.geo_database" };

    /// `open_limited` with the default limit.
    pub fn open(path: &Path) -> Result<GeoDb, GeoError> {
        GeoDb::open_limited(path, GeoDb::DEFAULT_LIMIT)
    }

    /// Reads the database at `path` (at most `limit` bytes) and decodes its records, or
    /// shares the copy a live configuration already read when the file has not changed since.
    ///
    /// The file may be replaced in any way while it is served, since the server holds its
    /// own copy; one caught halfway through being written is an error (see the module).
    pub fn open_limited(path: &Path, limit: Limit) -> Result<GeoDb, GeoError> {
        let err = |source| GeoError::Open { path: path.to_path_buf(), source };
        let bytes = read_database(path, limit)?;
        let key = file_key(path, &bytes);
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, w)| w.strong_count() > 0);
        if let Some(inner) = open.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
            return Ok(GeoDb { inner });
        }
        let inner = Arc::new(Opened::new(path, bytes).map_err(err)?);
        open.push((key, Arc::downgrade(&inner)));
        Ok(GeoDb { inner })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many distinct records the tree points at.
    pub fn record_count(&self) -> usize {
        self.inner.records.len()
    }

    /// The database compiled for geographic routing: each address's country and
    /// subdivision and the widest block around it at that place (see `Places`).
    pub fn places(&self) -> &Places {
        &self.inner.places
    }

    /// Whether both were opened from the same unchanged file (and share its records).
    pub fn shares_records_with(&self, other: &GeoDb) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The database's metadata, for logs.
    pub fn metadata(&self) -> DbInfo {
        let m = self.inner.reader.metadata();
        DbInfo {
            database_type: m.database_type.clone(),
            build_epoch: m.build_epoch,
            node_count: m.node_count,
            ip_version: m.ip_version,
            record_size: m.record_size,
        }
    }

    /// The location of `ip`, or `None` when the database has no data for it.
    pub fn lookup(&self, ip: IpAddr) -> Option<Location> {
        self.lookup_scoped(ip).0
    }

    /// The location of `ip` and the prefix length of the database network that decided it —
    /// also when that network has no data, since "unknown here" is a decision too (its ECS
    /// scope is the empty network's length, not 0).
    pub fn lookup_scoped(&self, ip: IpAddr) -> (Option<Location>, u8) {
        // An IPv4-mapped IPv6 address is an IPv4 client (dual-stack sockets report them so).
        let ip = ip.to_canonical();
        let Ok(result) = self.inner.reader.lookup(ip) else {
            return (None, 0);
        };
        let prefix_len = family_prefix(ip, result.network().map(|n| (n.is_ipv4(), n.prefix())));
        let Some(offset) = result.offset() else {
            return (None, prefix_len);
        };
        // Every offset the tree holds was decoded at open; decoding here is only a fallback.
        let location = match self.inner.records.get(&offset) {
            Some(l) => *l,
            None => decode(&result),
        };
        (location.map(|l| Location { prefix_len, ..l }), prefix_len)
    }
}

impl Opened {
    /// Parses the file and walks and decodes its whole tree: a corrupt or truncated file
    /// fails here, at load, not at some later query.
    fn new(path: &Path, bytes: Vec<u8>) -> Result<Opened, MaxMindDbError> {
        let reader = Reader::from_source(bytes)?;
        let mut records = HashMap::default();
        let mut places = PlacesBuilder::default();
        for found in reader.networks(WithinOptions::default())? {
            let found = found?;
            let Some(offset) = found.offset() else { continue };
            let location = *records.entry(offset).or_insert_with(|| decode(&found));
            let net = found.network()?;
            places.insert(net.ip(), net.prefix(), location.map(|l| l.place()));
        }
        let places = places.finish();
        Ok(Opened { reader, path: path.to_path_buf(), records, places })
    }
}

/// The routing fields of the record a lookup found. A record that fails to decode is treated
/// as no data: one corrupt entry must not fail a query.
fn decode(result: &LookupResult<'_, Vec<u8>>) -> Option<Location> {
    match result.decode::<Record<'_>>() {
        Ok(Some(r)) => Some(to_location(&r)),
        _ => None,
    }
}

/// Reads the database file at `path` whole (at most `limit` bytes), or fails when it is
/// not a regular file, too large, or written to while it was read.
pub(super) fn read_database(path: &Path, limit: Limit) -> Result<Vec<u8>, GeoError> {
    let file_err = |source| GeoError::File { path: path.to_path_buf(), source };
    let (file, meta) = crate::diag::open_regular(path).map_err(file_err)?;
    if meta.len() > limit.bytes {
        return Err(file_err(FileError::TooLarge { size: meta.len(), limit }));
    }
    read_unchanged(path, file, &meta, limit)
}

/// Reads the whole of `file`, whose metadata before reading is `before`: an error when
/// it is over `limit` or was written meanwhile (its size or mtime moved, or the bytes read
/// are not its size).
fn read_unchanged(
    path: &Path,
    file: std::fs::File,
    before: &std::fs::Metadata,
    limit: Limit,
) -> Result<Vec<u8>, GeoError> {
    use std::io::Read;
    let file_err = |source| GeoError::File { path: path.to_path_buf(), source };
    let mut bytes = Vec::with_capacity(usize::try_from(before.len()).unwrap_or(0));
    (&file)
        .take(limit.bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| file_err(FileError::Io(e)))?;
    if bytes.len() as u64 > limit.bytes {
        return Err(file_err(FileError::TooLarge { size: bytes.len() as u64, limit }));
    }
    let after = file.metadata().map_err(|e| file_err(FileError::Io(e)))?;
    let same = |m: &std::fs::Metadata| (m.len(), m.modified().ok());
    if same(&after) != same(before) || bytes.len() as u64 != after.len() {
        return Err(GeoError::Changed { path: path.to_path_buf() });
    }
    Ok(bytes)
}

/// The key of the file read from `path` as `bytes` (a fast hash: hashing is a small part
/// of reading and decoding a database).
pub(super) fn file_key(path: &Path, bytes: &[u8]) -> FileKey {
    use std::hash::BuildHasher;
    let hash = foldhash::quality::FixedState::with_seed(0).hash_one(bytes);
    FileKey { path: path.to_path_buf(), len: bytes.len(), hash }
}

/// The matched network's length in `ip`'s family. maxminddb already converts IPv4 lookups in
/// IPv6 trees to IPv4 networks; an IPv6 network for an IPv4 lookup matched above the `::/96`
/// IPv4 subtree (it covers all of IPv4), so no IPv4 bit was looked at: 0.
pub(super) fn family_prefix(ip: IpAddr, network: Result<(bool, u8), MaxMindDbError>) -> u8 {
    match network {
        Ok((v4, p)) if v4 == ip.is_ipv4() => p,
        _ => 0,
    }
}

fn to_location(r: &Record<'_>) -> Location {
    let code = |s: Option<&str>| s.and_then(Code::new);
    let country = code(r.country.as_ref().and_then(|c| c.iso_code))
        // Networks MaxMind cannot place (anycast, satellite) carry only the registered
        // country; routing by it beats falling straight to WORLD.
        .or_else(|| code(r.registered_country.as_ref().and_then(|c| c.iso_code)));
    let (lat, lon) = r.location.as_ref().map_or((None, None), |l| (l.latitude, l.longitude));
    Location {
        continent: code(r.continent.as_ref().and_then(|c| c.code)),
        country,
        subdivision: code(r.subdivisions.as_ref().and_then(|s| s.0)),
        lat,
        lon,
        prefix_len: 0,
    }
}
