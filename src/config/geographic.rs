//! The load step that compiles each geographic profile's mapping against the geo database,
//! as gdnsd compiles its maps: every network whose places map to the same endpoint merges
//! with its siblings, so a query finds its answer and the widest block with that answer in
//! one walk.

use std::collections::HashMap;
use std::sync::Arc;

use crate::geo::{ByRegion, Classes, World};
use crate::model::{Profile, Rules};

/// Distinct geographic mappings compiled per configuration. Each costs two 256 KiB jump
/// tables plus its nodes, and a few ms per load.
const MAX_COMPILED: usize = 64;

/// Compiles each geographic profile's mapping against `world`'s geo database (see
/// `Classes`). Profiles with the same mapping share one compiled trie; past `MAX_COMPILED`
/// distinct mappings the rest keep walking the region chain. The codes of drained
/// endpoints are left out, as a disabled endpoint's are, so their clients get what the
/// next less specific code maps to (the walk skips them the same way).
pub fn compile(world: &World, profiles: &mut [Profile]) {
    let mut done: HashMap<ByRegion, Arc<Classes>> = HashMap::new();
    for p in profiles {
        let serving = serving(p);
        let Rules::Geographic { by_region, fallback_on_degraded, compiled, .. } = &mut p.rules
        else {
            continue;
        };
        let by_region = serving.as_ref().unwrap_or(by_region);
        // Every profile is set, also one taken over from the previous configuration, whose
        // trie was compiled against the previous database (or one now removed).
        compiled.0 = match (&world.db, done.get(by_region)) {
            _ if *fallback_on_degraded => None,
            (None, _) => None,
            (Some(_), Some(c)) => Some(Arc::clone(c)),
            (Some(_), None) if done.len() >= MAX_COMPILED => None,
            (Some(db), None) => {
                let c = Arc::new(db.places().classify(&world.classes_of(by_region)));
                done.insert(by_region.clone(), Arc::clone(&c));
                Some(c)
            }
        };
    }
}

/// `compile` for `after`, a copy of `before` with other overrides: it keeps `before`'s
/// trie when the mapping its serving endpoints make is the same, else gets one of its own.
/// Answers are the same with or without a trie, which only shortens the walk.
pub fn recompile(world: &World, before: &Profile, after: &mut Profile) {
    let same = serving(before) == serving(after);
    let serving = serving(after);
    let Rules::Geographic { by_region, fallback_on_degraded, compiled, .. } = &mut after.rules
    else {
        return;
    };
    if same {
        return;
    }
    let by_region = serving.as_ref().unwrap_or(by_region);
    compiled.0 = match &world.db {
        Some(db) if !*fallback_on_degraded => {
            Some(Arc::new(db.places().classify(&world.classes_of(by_region))))
        }
        _ => None,
    };
}

/// The mapping of a geographic profile without the codes of its drained endpoints, when
/// it has any (`None`: the mapping as configured).
fn serving(p: &Profile) -> Option<ByRegion> {
    let Rules::Geographic { by_region, .. } = &p.rules else { return None };
    let endpoints = &p.endpoints;
    endpoints.iter().any(|e| e.drained).then(|| by_region.filtered(|i| endpoints[i].enabled))
}
