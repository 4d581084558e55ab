//! Reloads take over the profiles of files that did not change. A profile file with the
//! bytes the running snapshot was built from, read in the same context (zone origins,
//! latency-table regions, topology zones, region hierarchy), validates to the same
//! profiles; so they are cloned from the running snapshot instead of being parsed again,
//! which is most of a reload's cost. Only nested children are renumbered, by name, since
//! other files may have moved them.
//!
//! Taken-over profiles carry no source positions. A load that took any over and then found
//! an error is redone from the files alone, so its errors are exactly a fresh load's.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dns::name::WireName;
use crate::location::World;
use crate::model::{Profile, Target};
use crate::snapshot::Snapshot;
use crate::zone::Zone;

/// One profile file of a loaded snapshot: its content's identity and the ids of the
/// profiles it produced.
#[derive(Clone, Debug)]
pub struct ProfileFile {
    pub path: PathBuf,
    pub len: usize,
    pub hash: u64,
    pub ids: Range<usize>,
}

/// The files of the running snapshot a load may take over, by path.
pub struct Reuse<'a> {
    files: HashMap<&'a Path, &'a ProfileFile>,
}

impl<'a> Reuse<'a> {
    /// `None` when anything a profile's validation reads besides its own file changed.
    pub fn new(prev: &'a Snapshot, zones: &[Zone], world: &World) -> Option<Reuse<'a>> {
        same_context(prev, zones, world).then(|| Reuse {
            files: prev.profile_files.iter().map(|f| (f.path.as_path(), f)).collect(),
        })
    }

    /// The previous snapshot's ids of `path`'s profiles, when its content is unchanged.
    pub fn unchanged(&self, path: &Path, len: usize, hash: u64) -> Option<Range<usize>> {
        let f = self.files.get(path)?;
        (f.len == len && f.hash == hash).then(|| f.ids.clone())
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
        && prev.world.zone_names == world.zone_names
        && same_latency_regions
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
    prev: &[Profile],
    old: usize,
    ids: &HashMap<WireName, usize>,
) -> Result<Profile, String> {
    let mut p = prev[old].clone();
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
    use crate::config::profiles::{Doc, read_dir};

    /// The reload tests in tests/config.rs show a reload equals a fresh load; this one shows
    /// that the unchanged file really was taken over and the edited one parsed again.
    #[test]
    fn unchanged_files_are_taken_over_and_edited_ones_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let profiles = dir.path().join("profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        let server = "listen:\n  dns: [\"127.0.0.1:0\"]\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: { rname: hostmaster.example.test. }\n";
        std::fs::write(dir.path().join("steerdns.yaml"), server).unwrap();
        let doc = |n: &str| format!("name: {n}\nrouting: priority\nendpoints: []\n");
        std::fs::write(profiles.join("a.yaml"), doc("a")).unwrap();
        std::fs::write(profiles.join("b.yaml"), doc("b")).unwrap();
        let snap = crate::config::load(&dir.path().join("steerdns.yaml"), None).unwrap();
        std::fs::write(profiles.join("b.yaml"), doc("b") + "# edited\n").unwrap();
        let reuse = Reuse::new(&snap, &snap.zones, &snap.world).expect("same context");
        let mut errors = Vec::new();
        let (sources, _) = read_dir(&profiles, Some(&reuse), &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let kinds: Vec<(&str, bool)> = sources
            .iter()
            .map(|s| {
                let file = s.file.file_name().unwrap().to_str().unwrap();
                (file, matches!(s.doc, Doc::Reused(_)))
            })
            .collect();
        assert_eq!(kinds, [("a.yaml", true), ("b.yaml", false)]);
    }
}
