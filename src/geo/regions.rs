//! The region hierarchy: `WORLD` → regional groupings (`GEO-EU`, `GEO-ME`, …) → ISO 3166-1
//! countries → ISO 3166-2 subdivisions written `CC-SUB` (contract §5).
//!
//! It is data, not code: `geo-data/regions.yaml` (embedded here with `include_str!` so a
//! binary without the file still works) lists each grouping's countries and the known
//! subdivisions. Loading checks that every country sits in exactly one grouping and every
//! subdivision under a known country, so `chain` can walk up the tree without surprises.
//! Codes are compared case-insensitively and always handed out in upper case.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::Entries;
use crate::config::ConfigErrors;
use crate::config::error::{Sink, from_yaml};

/// The code of the root of the hierarchy.
pub const WORLD: &str = "WORLD";

/// The shipped hierarchy, compiled in.
const BUILTIN_YAML: &str = include_str!("../../geo-data/regions.yaml");

/// Longest code (`GEO-EU`, `AU-ACT`, …) accepted; lookups upper-case into a stack buffer of
/// this size, so matching a query never allocates.
const MAX_CODE: usize = 16;

/// What level of the hierarchy a code names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionKind {
    World,
    Grouping,
    Country,
    Subdivision,
}

#[derive(Debug)]
struct Entry {
    code: String,
    name: String,
    kind: RegionKind,
    /// Index of the enclosing region; `None` only for WORLD.
    parent: Option<usize>,
}

/// The loaded hierarchy. Cheap to share (`Arc`), immutable once built.
#[derive(Debug)]
pub struct Regions {
    /// Index 0 is WORLD; groupings, countries and subdivisions follow in file order.
    entries: Vec<Entry>,
    by_code: HashMap<String, usize, foldhash::fast::RandomState>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegions {
    groupings: Spanned<Entries<Spanned<String>, Spanned<RawGrouping>>>,
    #[serde(default)]
    subdivisions: Option<Entries<Spanned<String>, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrouping {
    name: String,
    countries: Entries<Spanned<String>, String>,
}

impl Regions {
    /// The hierarchy shipped in `geo-data/regions.yaml`, parsed once per process.
    pub fn builtin() -> Arc<Regions> {
        static BUILTIN: OnceLock<Arc<Regions>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                // The embedded file is checked by tests; failing here is a build defect.
                let r = Regions::parse(BUILTIN_YAML, Path::new("geo-data/regions.yaml"));
                Arc::new(r.expect("the embedded geo-data/regions.yaml is valid"))
            })
            .clone()
    }

    /// Reads a hierarchy file (same format as `geo-data/regions.yaml`).
    pub fn load(path: &Path) -> Result<Regions, ConfigErrors> {
        let text = crate::config::error::read_file(path)?;
        Regions::parse(&text, path)
    }

    /// Parses and validates a hierarchy; `file` only names the source in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Regions, ConfigErrors> {
        let raw: RawRegions =
            serde_saphyr::from_str(text).map_err(|e| ConfigErrors(vec![from_yaml(file, &e)]))?;
        let mut errors = Vec::new();
        let mut b = Builder::new(Sink { file, errors: &mut errors });
        if raw.groupings.value.0.is_empty() {
            b.sink.on(&raw.groupings, "at least one grouping is needed");
        }
        for (code, g) in &raw.groupings.value.0 {
            b.grouping(code, &g.value);
        }
        for (code, name) in raw.subdivisions.iter().flat_map(|s| &s.0) {
            b.subdivision(code, name);
        }
        let regions = b.regions;
        if errors.is_empty() { Ok(regions) } else { Err(ConfigErrors(errors)) }
    }

    /// Whether `code` (any case) names a region of the hierarchy.
    pub fn is_known(&self, code: &str) -> bool {
        self.index(code).is_some()
    }

    /// The upper-case form of a known code, borrowed from the hierarchy.
    pub fn canonical(&self, code: &str) -> Option<&str> {
        self.index(code).map(|i| self.entries[i].code.as_str())
    }

    pub fn kind(&self, code: &str) -> Option<RegionKind> {
        self.index(code).map(|i| self.entries[i].kind)
    }

    /// The human name ("United Kingdom", "Middle East"), for traces and docs.
    pub fn name(&self, code: &str) -> Option<&str> {
        self.index(code).map(|i| self.entries[i].name.as_str())
    }

    /// The regional grouping (`GEO-…`) a country belongs to.
    pub fn grouping_of(&self, country: &str) -> Option<&str> {
        let i = self.index(country).filter(|&i| self.entries[i].kind == RegionKind::Country)?;
        self.entries[i].parent.map(|p| self.entries[p].code.as_str())
    }

    /// The codes to try for a client, most specific first: subdivision (`US-CA`) → country
    /// (`US`) → grouping (`GEO-NA`) → `WORLD`. `subdivision` is the database's code without
    /// the country prefix (`CA`, `ENG`); an already prefixed `US-CA` is accepted too. Codes
    /// the hierarchy does not know are skipped: no profile or latency row can name them.
    pub fn chain(
        &self,
        country: Option<&str>,
        subdivision: Option<&str>,
    ) -> impl Iterator<Item = &str> + '_ {
        let country = country
            .and_then(|c| self.index(c))
            .filter(|&i| self.entries[i].kind == RegionKind::Country);
        let sub = country.zip(subdivision).and_then(|(c, s)| self.subdivision_index(c, s));
        let grouping = country.and_then(|c| self.entries[c].parent);
        [sub, country, grouping, Some(0)]
            .into_iter()
            .flatten()
            .map(|i| self.entries[i].code.as_str())
    }

    /// Every code of one kind, in file order.
    pub fn codes(&self, kind: RegionKind) -> impl Iterator<Item = &str> + '_ {
        self.entries.iter().filter(move |e| e.kind == kind).map(|e| e.code.as_str())
    }

    fn subdivision_index(&self, country: usize, sub: &str) -> Option<usize> {
        let cc = &self.entries[country].code;
        let i = match sub.get(..3) {
            // Already written `CC-SUB`.
            Some(p) if p.len() == 3 && p[..2].eq_ignore_ascii_case(cc) && p.ends_with('-') => {
                self.index(sub)
            }
            _ => self.index_parts(&[cc, "-", sub]),
        }?;
        (self.entries[i].kind == RegionKind::Subdivision && self.entries[i].parent == Some(country))
            .then_some(i)
    }

    fn index(&self, code: &str) -> Option<usize> {
        self.index_parts(&[code])
    }

    /// Looks up the upper-cased concatenation of `parts` without allocating.
    fn index_parts(&self, parts: &[&str]) -> Option<usize> {
        let mut buf = [0u8; MAX_CODE];
        let mut n = 0;
        for b in parts.iter().flat_map(|p| p.bytes()) {
            *buf.get_mut(n)? = b.to_ascii_uppercase();
            n += 1;
        }
        let key = std::str::from_utf8(&buf[..n]).ok()?;
        self.by_code.get(key).copied()
    }
}

/// Accumulates entries and their errors while parsing.
struct Builder<'a> {
    sink: Sink<'a>,
    regions: Regions,
}

impl<'a> Builder<'a> {
    fn new(sink: Sink<'a>) -> Builder<'a> {
        let world = Entry {
            code: WORLD.into(),
            name: "World".into(),
            kind: RegionKind::World,
            parent: None,
        };
        let by_code = [(WORLD.to_string(), 0)].into_iter().collect();
        Builder { sink, regions: Regions { entries: vec![world], by_code } }
    }

    fn grouping(&mut self, code: &Spanned<String>, g: &RawGrouping) {
        let Some(gi) = self.add(code, &g.name, RegionKind::Grouping, 0, is_grouping_code) else {
            return;
        };
        for (country, name) in &g.countries.0 {
            self.add(country, name, RegionKind::Country, gi, is_country_code);
        }
    }

    fn subdivision(&mut self, code: &Spanned<String>, name: &str) {
        let parent = code.value.split_once('-').and_then(|(cc, _)| {
            self.regions.index(cc).filter(|&i| self.regions.entries[i].kind == RegionKind::Country)
        });
        match parent {
            Some(p) => {
                self.add(code, name, RegionKind::Subdivision, p, is_subdivision_code);
            }
            None => self.sink.on(
                code,
                format!(
                    "subdivision {:?} must be CC-SUB with CC a country listed above",
                    code.value
                ),
            ),
        }
    }

    /// Adds one code under `parent`; reports bad shapes and codes listed twice (which is how
    /// a country in two groupings shows up).
    fn add(
        &mut self,
        code: &Spanned<String>,
        name: &str,
        kind: RegionKind,
        parent: usize,
        shape_ok: fn(&str) -> bool,
    ) -> Option<usize> {
        let upper = code.value.trim().to_ascii_uppercase();
        if upper.len() > MAX_CODE || !shape_ok(&upper) {
            self.sink.on(code, format!("{:?} is not a valid {} code", code.value, kind_name(kind)));
            return None;
        }
        if let Some(&prev) = self.regions.by_code.get(&upper) {
            let where_ = match self.regions.entries[prev].parent {
                Some(p) if kind == RegionKind::Country => {
                    format!(" (already in {})", self.regions.entries[p].code)
                }
                _ => String::new(),
            };
            self.sink.on(code, format!("{upper} is listed twice{where_}"));
            return None;
        }
        let i = self.regions.entries.len();
        self.regions.by_code.insert(upper.clone(), i);
        let name = name.trim().to_string();
        self.regions.entries.push(Entry { code: upper, name, kind, parent: Some(parent) });
        Some(i)
    }
}

fn kind_name(kind: RegionKind) -> &'static str {
    match kind {
        RegionKind::World => "world",
        RegionKind::Grouping => "grouping (GEO-XX)",
        RegionKind::Country => "country (ISO 3166-1 alpha-2)",
        RegionKind::Subdivision => "subdivision (CC-SUB)",
    }
}

fn is_grouping_code(c: &str) -> bool {
    c.strip_prefix("GEO-")
        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_uppercase()))
}

fn is_country_code(c: &str) -> bool {
    c.len() == 2 && c.bytes().all(|b| b.is_ascii_uppercase())
}

fn is_subdivision_code(c: &str) -> bool {
    c.split_once('-').is_some_and(|(cc, sub)| {
        is_country_code(cc)
            && (1..=3).contains(&sub.len())
            && sub.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}
