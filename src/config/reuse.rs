//! Reloads take over the profiles of files, and of pieces of files, that did not change.
//! A profile document with the bytes the running snapshot was built from, read in the
//! same context (zone origins, latency-table regions, topology zones, region hierarchy),
//! validates to the same profiles; so they are cloned from the running snapshot instead of
//! being parsed again, which is most of a reload's cost. Only nested children are
//! renumbered, by name, since other files or other documents of the same file may have
//! moved them.
//!
//! Taken-over profiles carry no source positions. A load that took any over and then found
//! an error is redone from the files alone, so its errors are exactly a fresh load's.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Previous;
use crate::geo::World;
use crate::model::load::LoadRules;
use crate::model::snapshot::Snapshot;
use crate::model::zone::Zone;
use crate::model::{Profile, Target};
use crate::wire::name::WireName;

/// One profile file of a loaded snapshot: its content's identity and the ids of the
/// profiles it produced.
#[derive(Clone, Debug)]
pub struct ProfileFile {
    pub path: PathBuf,
    pub len: usize,
    pub hash: u64,
    pub ids: Range<usize>,
    /// The file's pieces of whole documents (see `files`), in order: a reload of an edited
    /// file takes over the profiles of every piece whose bytes did not change.
    pub pieces: Arc<[Piece]>,
}

/// A piece of a profile file: its content's identity and how many profiles it produced.
#[derive(Clone, Copy, Debug)]
pub struct Piece {
    pub len: usize,
    pub hash: u64,
    pub profiles: usize,
}

impl ProfileFile {
    /// The ids each piece produced, by the piece's length and content hash. Two pieces with
    /// the same bytes cannot both have produced profiles (their names would clash, and the
    /// snapshot would not exist), so a key standing for two pieces has no ids to lose.
    pub fn pieces_by_content(&self) -> HashMap<(usize, u64), Range<usize>> {
        let mut next = self.ids.start;
        let mut by_content = HashMap::with_capacity(self.pieces.len());
        for p in self.pieces.iter() {
            by_content.insert((p.len, p.hash), next..next + p.profiles);
            next += p.profiles;
        }
        by_content
    }
}

/// The files of the running snapshot a load may take over, by path.
pub struct Reuse<'a> {
    files: HashMap<&'a Path, &'a ProfileFile>,
}

impl<'a> Reuse<'a> {
    /// `None` when anything a profile's validation reads besides its own file changed.
    pub fn new(
        prev: Previous<'a>,
        zones: &[Zone],
        world: &World,
        load_rules: &LoadRules,
    ) -> Option<Reuse<'a>> {
        let same =
            same_context(prev.snapshot, zones, world) && same_watermarks(prev.snapshot, load_rules);
        same.then(|| Reuse {
            files: prev.cache.files.iter().map(|f| (f.path.as_path(), f)).collect(),
        })
    }

    /// What the running snapshot read from `path`.
    pub fn file(&self, path: &Path) -> Option<&'a ProfileFile> {
        self.files.get(path).copied()
    }
}

/// What `Builder` reads outside the profile itself: zone origins (name resolution and the
/// zone index), latency-table regions and topology zones (indices in rules), and the
/// region hierarchy (geographic codes). Mtimes are not trusted: content is compared.
fn same_context(prev: &Snapshot, zones: &[Zone], world: &World) -> bool {
    let same_latency_regions = match (&prev.world.latency, &world.latency) {
        (Some(a), Some(b)) => {
            a.regions().iter().map(|r| &r.name).eq(b.regions().iter().map(|r| &r.name))
        }
        (a, b) => a.is_none() && b.is_none(),
    };
    prev.zones.len() == zones.len()
        && prev.zones.iter().zip(zones).all(|(a, b)| a.origin == b.origin)
        && Arc::ptr_eq(&prev.world.regions, &world.regions)
        && prev.world.az_names == world.az_names
        && same_latency_regions
}

/// An endpoint's watermarks default to the top-level ones: a profile with a load feed
/// validates differently when they change. Without any feed in the running snapshot, no
/// profile taken over has one.
fn same_watermarks(prev: &Snapshot, rules: &LoadRules) -> bool {
    prev.load_rules.as_ref().is_none_or(|r| (r.low, r.high) == (rules.low, rules.high))
}

/// A file's content identity; with the length, a change that keeps the hash is
/// vanishingly unlikely (64 bits).
pub fn content_hash(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.as_bytes().hash(&mut h);
    h.finish()
}

/// Clones profile `old` of the previous snapshot with its nested children renumbered to
/// `ids`; `Err` names a child that no longer exists.
pub fn take_over(
    prev: &[Arc<Profile>],
    old: usize,
    ids: &HashMap<WireName, usize>,
) -> Result<Profile, String> {
    let mut p = Profile::clone(&prev[old]);
    for ep in &mut p.endpoints {
        if let Target::Nested(n) = &mut ep.target {
            let wire = &prev[n.child].wire;
            n.child =
                *ids.get(wire).ok_or_else(|| format!("nested profile {wire} does not exist"))?;
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;
    use crate::config::files::{Doc, read_dir};

    /// The reload tests in tests/config.rs show a reload equals a fresh load; this one shows
    /// what was really taken over: the unchanged file, and the unchanged documents of an
    /// edited one (each as the same profile), while edited documents are parsed again.
    #[test]
    fn unchanged_files_and_documents_are_taken_over_and_edited_ones_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let profiles = dir.path().join("profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        let server = "listen:\n  dns: [\"127.0.0.1:0\"]\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: { rname: hostmaster.example.test. }\n";
        std::fs::write(dir.path().join("steerdns.yaml"), server).unwrap();
        let doc = |n: &str, r: &str| format!("name: {n}\nrouting: {r}\nendpoints: []\n");
        let b = |b2: &str, tail: &str| {
            let last = doc("b4", "priority") + tail;
            [doc("b1", "priority"), doc("b2", b2), doc("b3", "priority"), last].join("---\n")
        };
        std::fs::write(profiles.join("a.yaml"), doc("a", "priority")).unwrap();
        std::fs::write(profiles.join("b.yaml"), b("priority", "")).unwrap();
        let loaded = crate::config::load(&dir.path().join("steerdns.yaml"), None).unwrap();
        let snap = &loaded.snapshot;
        std::fs::write(profiles.join("b.yaml"), b("weighted", "# edited\n")).unwrap();
        let rules = crate::model::load::LoadRules::default();
        let reuse =
            Reuse::new(loaded.previous(), &snap.zones, &snap.world, &rules).expect("same context");
        let mut errors = Vec::new();
        let (sources, _) = read_dir(&profiles, Some(&reuse), &Limits::default(), &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let kinds: Vec<String> = sources
            .iter()
            .map(|s| match &s.doc {
                Doc::Reused(old) => format!("taken over {}", snap.profiles[*old].name),
                Doc::Raw(raw) => format!("parsed {}", raw.name.value),
            })
            .collect();
        let want = [
            "taken over a.tm.example.test.",
            "taken over b1.tm.example.test.",
            "parsed b2",
            "taken over b3.tm.example.test.",
            "parsed b4",
        ];
        assert_eq!(kinds, want);
    }
}
