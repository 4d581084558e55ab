//! The ASN database: a MaxMind DB in the GeoLite2-ASN layout (`autonomous_system_number`,
//! `autonomous_system_organization`), or one written by `steerdns geo build --asn`, read
//! into memory and asked, per query, which network operator a client address belongs to.
//!
//! Read whole, as the geo database is (see `db`), and for the same reasons: a file
//! replaced while it is served cannot fault the process, and one caught halfway through
//! being written fails the load instead of replacing the one in use. Every record is
//! decoded at open, so a corrupt file fails at load and a query only walks the tree and
//! reads a table; a reload that finds the file unchanged shares those records.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use maxminddb::{MaxMindDbError, Reader, WithinOptions};
use serde::Deserialize;

use super::GeoError;
use super::db::{FileKey, family_prefix, file_key, read_database};
use crate::diag::{FileError, Limit};

/// Why an ASN database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AsnError {
    #[error("{}: cannot open ASN database: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: MaxMindDbError,
    },
    /// Not a regular file, not there, over its size limit, or unreadable.
    #[error("{}: cannot open ASN database: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: FileError,
    },
    /// Written to while being read: what was read may be half old, half new.
    #[error(
        "{}: cannot open ASN database: the file changed while it was read (write a new file and rename it over the old one)",
        path.display()
    )]
    Changed { path: PathBuf },
    /// A valid MaxMind DB whose records carry no ASN: most likely a City or Country
    /// database named by mistake.
    #[error(
        "{}: not an ASN database: no record has autonomous_system_number (database type {database_type})",
        path.display()
    )]
    NoAsn { path: PathBuf, database_type: String },
}

/// What the database says of one address: the ASN (when the network has one) and the
/// prefix length of the network that decided, in the address's own family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsnHit {
    pub asn: Option<u32>,
    pub prefix: u8,
}

/// One decoded record: the ASN and the operator's name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    asn: u32,
    organization: Option<Box<str>>,
}

/// The fields of a GeoLite2-ASN record.
#[derive(Deserialize)]
struct RawRecord<'a> {
    autonomous_system_number: Option<u32>,
    #[serde(borrow)]
    autonomous_system_organization: Option<&'a str>,
}

/// An open ASN database, held in memory. `Send + Sync`; cheap to clone.
#[derive(Clone)]
pub struct AsnDb {
    inner: Arc<Opened>,
}

/// Files open in some live configuration, so that a reload with the file unchanged shares
/// its decoded records instead of decoding them again. Only loading takes this lock.
static OPEN: Mutex<Vec<(FileKey, Weak<Opened>)>> = Mutex::new(Vec::new());

struct Opened {
    reader: Reader<Vec<u8>>,
    path: PathBuf,
    /// Data offset → record (`None`: the record has no ASN, treated as no data).
    records: crate::FastMap<usize, Option<Record>>,
}

impl fmt::Debug for AsnDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsnDb")
            .field("path", &self.inner.path)
            .field("records", &self.inner.records.len())
            .finish()
    }
}

impl AsnDb {
    /// The default of `limits.asn_database`: GeoLite2-ASN is about 10 MB.
    pub const DEFAULT_LIMIT: Limit = Limit { bytes: 128 << 20, set_by: "limits.asn_database" };

    /// Reads the database at `path` (at most `limit` bytes) and decodes its records, or
    /// shares the copy a live configuration already read when the file has not changed.
    pub fn open_limited(path: &Path, limit: Limit) -> Result<AsnDb, AsnError> {
        let bytes = read_database(path, limit).map_err(|e| match e {
            GeoError::File { path, source } => AsnError::File { path, source },
            GeoError::Changed { path } => AsnError::Changed { path },
            GeoError::Open { path, source } => AsnError::Open { path, source },
        })?;
        let key = file_key(path, &bytes);
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, w)| w.strong_count() > 0);
        if let Some(inner) = open.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
            return Ok(AsnDb { inner });
        }
        let db = AsnDb::from_bytes(path, bytes)?;
        open.push((key, Arc::downgrade(&db.inner)));
        Ok(db)
    }

    /// Whether both were opened from the same unchanged file (and share its records).
    pub fn shares_records_with(&self, other: &AsnDb) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The database held in `bytes`; `path` names it in errors and logs.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<AsnDb, AsnError> {
        let inner = Opened::new(path, bytes)
            .map_err(|source| AsnError::Open { path: path.to_path_buf(), source })?;
        if !inner.records.values().any(Option::is_some) {
            let database_type = inner.reader.metadata().database_type.clone();
            return Err(AsnError::NoAsn { path: path.to_path_buf(), database_type });
        }
        Ok(AsnDb { inner: Arc::new(inner) })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The database type from its metadata (`GeoLite2-ASN`), for logs.
    pub fn database_type(&self) -> &str {
        &self.inner.reader.metadata().database_type
    }

    /// How many distinct records the tree points at.
    pub fn record_count(&self) -> usize {
        self.inner.records.len()
    }

    /// The ASN of `ip` and the prefix length of the database network that decided it —
    /// also when that network has no ASN, since "no ASN here" holds for the whole network.
    pub fn lookup(&self, ip: IpAddr) -> AsnHit {
        self.record(ip).0
    }

    /// The operator's name for `ip`, when the database has one (for traces).
    pub fn organization(&self, ip: IpAddr) -> Option<&str> {
        self.record(ip).1
    }

    fn record(&self, ip: IpAddr) -> (AsnHit, Option<&str>) {
        let ip = ip.to_canonical();
        let Ok(result) = self.inner.reader.lookup(ip) else {
            return (AsnHit::default(), None);
        };
        let prefix = family_prefix(ip, result.network().map(|n| (n.is_ipv4(), n.prefix())));
        // Every offset the tree holds was decoded at open.
        match result.offset().and_then(|o| self.inner.records.get(&o)) {
            Some(Some(r)) => (AsnHit { asn: Some(r.asn), prefix }, r.organization.as_deref()),
            _ => (AsnHit { asn: None, prefix }, None),
        }
    }
}

impl Opened {
    /// Parses the file and walks and decodes its whole tree: a corrupt or truncated file
    /// fails here, at load, not at some later query.
    fn new(path: &Path, bytes: Vec<u8>) -> Result<Opened, MaxMindDbError> {
        let reader = Reader::from_source(bytes)?;
        let mut records = crate::FastMap::default();
        for found in reader.networks(WithinOptions::default())? {
            let found = found?;
            let Some(offset) = found.offset() else { continue };
            if records.contains_key(&offset) {
                continue;
            }
            let record = found.decode::<RawRecord<'_>>()?.and_then(|r| {
                Some(Record {
                    asn: r.autonomous_system_number?,
                    organization: r.autonomous_system_organization.map(Box::from),
                })
            });
            records.insert(offset, record);
        }
        Ok(Opened { reader, path: path.to_path_buf(), records })
    }
}

/// For traces: "client AS64496 (Example Net), network 198.51.100.0/24".
pub struct Describe<'a> {
    pub addr: IpAddr,
    pub hit: AsnHit,
    pub organization: Option<&'a str>,
}

impl fmt::Display for Describe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let net = ipnet::IpNet::new(self.addr.to_canonical(), self.hit.prefix)
            .map(|n| n.trunc().to_string())
            .unwrap_or_else(|_| format!("/{}", self.hit.prefix));
        match (self.hit.asn, self.organization) {
            (Some(asn), Some(org)) => write!(f, "client AS{asn} ({org}), network {net}"),
            (Some(asn), None) => write!(f, "client AS{asn}, network {net}"),
            (None, _) => write!(f, "client ASN unknown, network {net}"),
        }
    }
}

/// ASN → endpoint index of a geographic profile's `AS` codes, sorted by ASN so a query
/// finds its entry by binary search.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct ByAsn(Vec<(u32, usize)>);

impl ByAsn {
    /// From (ASN, endpoint) pairs with distinct ASNs.
    pub fn new(mut entries: Vec<(u32, usize)>) -> ByAsn {
        entries.sort_unstable();
        ByAsn(entries)
    }

    pub fn get(&self, asn: u32) -> Option<usize> {
        self.0.binary_search_by_key(&asn, |e| e.0).ok().map(|i| self.0[i].1)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The ASN of an `AS64496` code in `geo:` (case-insensitive), or `None` when `code` is
/// not one. `AS` alone is American Samoa, a country.
pub fn parse_code(code: &str) -> Option<Result<u32, String>> {
    let digits = code.get(..2).filter(|p| p.eq_ignore_ascii_case("AS")).map(|_| &code[2..])?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        digits
            .parse::<u32>()
            .ok()
            .filter(|&n| n != 0)
            .ok_or_else(|| format!("{code:?}: an ASN is a number from 1 to 4294967295")),
    )
}
