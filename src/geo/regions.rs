//! The region hierarchy: `WORLD` → regional groupings (`GEO-EU`, `GEO-ME`, …) → ISO 3166-1
//! countries → ISO 3166-2 subdivisions written `CC-SUB` (`docs/routing.md`, "Region codes").
//!
//! It is data, not code: `geo-data/regions.yaml` (embedded here with `include_str!` so a
//! binary without the file still works) lists each grouping's countries and the known
//! subdivisions. Loading checks that every country sits in exactly one grouping and every
//! subdivision under a known country, so `chain` can walk up the tree without surprises.
//! Codes are compared case-insensitively and always handed out in upper case.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Entries, Place};
use crate::diag::ConfigErrors;
use crate::diag::{Pos, Sink, yaml_errors};

/// The code of the root of the hierarchy.
pub const WORLD: &str = "WORLD";

/// The shipped hierarchy, compiled in.
const BUILTIN_YAML: &str = include_str!("../../geo-data/regions.yaml");

/// Longest code (`GEO-EU`, `AU-ACT`, …) accepted; lookups upper-case into a stack buffer of
/// this size, so matching a query never allocates.
const MAX_CODE: usize = 16;

/// A region's index in its hierarchy: a two-byte key for the per-profile maps, which hold
/// one entry per mapped code. Loading refuses hierarchies with more entries than fit.
pub type RegionId = u16;

/// The region ids to try for one place, most specific first: at most subdivision, country,
/// grouping and WORLD, held inline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chain {
    ids: [RegionId; 4],
    len: u8,
}

impl Chain {
    pub fn ids(&self) -> &[RegionId] {
        &self.ids[..usize::from(self.len)]
    }
}

/// Region id → endpoint index for one profile, sorted by id: a few entries at most, so a
/// binary search beats hashing the code strings on every query.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ByRegion(Box<[(RegionId, usize)]>);

impl ByRegion {
    /// Ids must be distinct (the config check rejects a code mapped twice).
    pub fn new(mut entries: Vec<(RegionId, usize)>) -> ByRegion {
        entries.sort_unstable();
        ByRegion(entries.into_boxed_slice())
    }

    pub fn get(&self, id: RegionId) -> Option<usize> {
        self.0.binary_search_by_key(&id, |e| e.0).ok().map(|k| self.0[k].1)
    }

    /// The mapping without the codes of endpoints `keep` refuses.
    pub fn filtered(&self, keep: impl Fn(usize) -> bool) -> ByRegion {
        ByRegion(self.0.iter().copied().filter(|e| keep(e.1)).collect())
    }
}

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
    by_code: crate::FastMap<String, usize>,
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

    /// Parses and validates a hierarchy; `file` only names the source in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Regions, ConfigErrors> {
        let raw: RawRegions = serde_saphyr::from_str(text)
            .map_err(|e| ConfigErrors(yaml_errors(file, text, 0, &e)))?;
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
        let n = b.regions.entries.len();
        if n > usize::from(RegionId::MAX) {
            let max = RegionId::MAX;
            b.sink.at(Pos::default(), format!("{n} regions; at most {max} are supported"));
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
        let chain = self.chain_ids(country, subdivision);
        (0..chain.len as usize).map(move |k| self.code(chain.ids[k]))
    }

    /// `chain` as region ids, which is what routing keeps per geo database place so that a
    /// query does no code lookups at all.
    pub fn chain_ids(&self, country: Option<&str>, subdivision: Option<&str>) -> Chain {
        let country = country
            .and_then(|c| self.index(c))
            .filter(|&i| self.entries[i].kind == RegionKind::Country);
        let sub = country.zip(subdivision).and_then(|(c, s)| self.subdivision_index(c, s));
        let grouping = country.and_then(|c| self.entries[c].parent);
        let mut chain = Chain::default();
        for i in [sub, country, grouping, Some(0)].into_iter().flatten() {
            chain.ids[chain.len as usize] = i as RegionId;
            chain.len += 1;
        }
        chain
    }

    /// `chain_ids` for a database place (country and subdivision codes).
    pub fn place_chain(&self, place: Option<Place>) -> Chain {
        let country = place.as_ref().and_then(|p| p.country);
        let sub = place.as_ref().and_then(|p| p.subdivision);
        self.chain_ids(country.as_ref().map(|c| c.as_str()), sub.as_ref().map(|c| c.as_str()))
    }

    /// The id of a code (any case).
    pub fn id(&self, code: &str) -> Option<RegionId> {
        self.index(code).map(|i| i as RegionId)
    }

    /// The upper-case code of an id this hierarchy handed out.
    pub fn code(&self, id: RegionId) -> &str {
        &self.entries[usize::from(id)].code
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_ids_name_the_chain_codes() {
        let r = Regions::builtin();
        // (country, subdivision, chain)
        let cases: &[(Option<&str>, Option<&str>, &[&str])] = &[
            (Some("US"), Some("CA"), &["US-CA", "US", "GEO-NA", "WORLD"]),
            (Some("us"), Some("US-CA"), &["US-CA", "US", "GEO-NA", "WORLD"]),
            (Some("FR"), Some("ZZZ"), &["FR", "GEO-EU", "WORLD"]),
            (Some("FR"), None, &["FR", "GEO-EU", "WORLD"]),
            (Some("XX"), Some("CA"), &["WORLD"]),
            (None, None, &["WORLD"]),
        ];
        for (country, sub, want) in cases {
            let ids: Vec<&str> =
                r.chain_ids(*country, *sub).ids().iter().map(|&i| r.code(i)).collect();
            assert_eq!(ids, *want, "{country:?} {sub:?}");
            assert_eq!(r.chain(*country, *sub).collect::<Vec<_>>(), *want);
        }
    }

    #[test]
    fn by_region_finds_each_mapped_id_and_nothing_else() {
        let r = Regions::builtin();
        let id = |c| r.id(c).unwrap();
        let map = ByRegion::new(vec![(id("WORLD"), 3), (id("us-ca"), 0), (id("GEO-EU"), 1)]);
        assert_eq!(map.get(id("US-CA")), Some(0));
        assert_eq!(map.get(id("GEO-EU")), Some(1));
        assert_eq!(map.get(id("WORLD")), Some(3));
        assert_eq!(map.get(id("FR")), None);
        assert_eq!(ByRegion::default().get(id("WORLD")), None);
    }
}
