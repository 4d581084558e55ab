//! Run-time overrides of endpoints — drained, or given another weight — as operators set
//! them through the admin API. They are an input of every load: `apply` puts them on the
//! built profiles before anything is derived from `enabled` and `weight`, so routing sees
//! a drained endpoint exactly as a disabled one. They live in the state file
//! (`state_file:`), read at every load and rewritten whole on every change; in a cluster,
//! in etcd, with the state file as the local copy a start reads while etcd is unreachable.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::profiles::weight_range;
use crate::diag::{ConfigError, Limit, Pos};
use crate::model::events::{Event, Kind};
use crate::model::{Endpoint, Profile, ProfileId, Snapshot};
use crate::wire::name::WireName;

/// A state file holds a few lines per override; a larger one is a mistake.
pub const STATE_FILE_LIMIT: Limit =
    Limit { bytes: 16 << 20, set_by: "the fixed limit for the state file" };

/// The format version the state file is written in.
const VERSION: u32 = 1;

/// The overrides of one endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Override {
    pub drained: bool,
    pub weight: Option<u32>,
    /// `routing: geoproximity`: the endpoint's bias.
    pub bias: Option<i8>,
}

impl Override {
    pub fn is_empty(self) -> bool {
        !self.drained && self.weight.is_none() && self.bias.is_none()
    }
}

/// Every override, by absolute profile name (as `Profile::name`) and endpoint name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides(BTreeMap<(String, String), Override>);

impl Overrides {
    pub fn get(&self, profile: &str, endpoint: &str) -> Override {
        self.0.get(&(profile.to_string(), endpoint.to_string())).copied().unwrap_or_default()
    }

    /// Sets one endpoint's overrides; an empty one removes the entry.
    pub fn set(&mut self, profile: &str, endpoint: &str, o: Override) {
        let key = (profile.to_string(), endpoint.to_string());
        if o.is_empty() {
            self.0.remove(&key);
        } else {
            self.0.insert(key, o);
        }
    }

    /// (profile, endpoint, overrides), by profile then endpoint name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, Override)> {
        self.0.iter().map(|((p, e), o)| (p.as_str(), e.as_str(), *o))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Part of an override that a load could not apply: its profile or endpoint is gone, or
/// the profile's routing method no longer takes that weight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dropped {
    pub profile: String,
    pub endpoint: String,
    /// What was dropped (the rest of the endpoint's overrides stays).
    pub dropped: Override,
    pub reason: String,
}

/// Puts `overrides` on `profiles`. Every endpoint starts again from its configured
/// `enabled` and `weight` (profiles taken over from the previous load still carry its
/// overrides), then gets its override. Returns the overrides that applied, and the parts
/// that did not.
pub fn apply(profiles: &mut [Profile], overrides: &Overrides) -> (Overrides, Vec<Dropped>) {
    profiles.iter_mut().for_each(reset);
    let mut kept = Overrides::default();
    let mut dropped = Vec::new();
    if overrides.is_empty() {
        return (kept, dropped);
    }
    // Few profiles have overrides: find those in one pass rather than index every name.
    let mut ids: HashMap<String, usize> =
        overrides.iter().map(|(p, _, _)| (p.to_string(), usize::MAX)).collect();
    for (i, p) in profiles.iter().enumerate() {
        if let Some(id) = ids.get_mut(p.name.as_str()) {
            *id = i;
        }
    }
    for (profile, endpoint, o) in overrides.iter() {
        let id = ids.get(profile).copied().filter(|&id| id != usize::MAX);
        let p = id.map(|id| &mut profiles[id]);
        if let Some((at, o)) = fit(p.as_deref(), profile, endpoint, o, &mut dropped) {
            if let Some(p) = p {
                set(&mut p.endpoints[at], o);
            }
            kept.set(profile, endpoint, o);
        }
    }
    (kept, dropped)
}

/// `apply` for the profiles of `snapshot`, which carry `applied` already: only the
/// profiles where `applied` and `overrides` differ are copied and set again, so the cost
/// grows with the overrides, not with the configuration. Returns those profiles by id (for
/// `Snapshot::patched`), and what `apply` returns.
pub fn patch(
    snapshot: &Snapshot,
    applied: &Overrides,
    overrides: &Overrides,
) -> (Vec<(ProfileId, Profile)>, Overrides, Vec<Dropped>) {
    // `apply` matches names exactly; the snapshot's index ignores case.
    let id_of = |name: &str| {
        let id = snapshot.profile_by_name(&WireName::parse(name).ok()?)?;
        (snapshot.profiles[id].name == name).then_some(id)
    };
    let changed: BTreeSet<&str> = (applied.iter().chain(overrides.iter()))
        .filter(|&(p, e, _)| applied.get(p, e) != overrides.get(p, e))
        .map(|(p, _, _)| p)
        .collect();
    let mut copies: BTreeMap<&str, (ProfileId, Profile)> = BTreeMap::new();
    for name in changed {
        if let Some(id) = id_of(name) {
            let mut p = Profile::clone(&snapshot.profiles[id]);
            reset(&mut p);
            copies.insert(name, (id, p));
        }
    }
    let mut kept = Overrides::default();
    let mut dropped = Vec::new();
    for (profile, endpoint, o) in overrides.iter() {
        let fitted = match copies.get_mut(profile) {
            Some((_, p)) => {
                let fitted = fit(Some(p), profile, endpoint, o, &mut dropped);
                if let Some((at, o)) = fitted {
                    set(&mut p.endpoints[at], o);
                }
                fitted
            }
            None => {
                let p = id_of(profile).map(|id| &*snapshot.profiles[id]);
                fit(p, profile, endpoint, o, &mut dropped)
            }
        };
        if let Some((_, o)) = fitted {
            kept.set(profile, endpoint, o);
        }
    }
    (copies.into_values().collect(), kept, dropped)
}

/// Undoes every override of `p`: its endpoints as the configuration says.
fn reset(p: &mut Profile) {
    for ep in &mut p.endpoints {
        ep.enabled = ep.configured_enabled;
        ep.weight = ep.configured_weight;
        ep.drained = false;
        ep.weight_override = None;
        ep.bias = ep.configured_bias;
        ep.bias_override = None;
    }
}

/// What of override `o` of `endpoint` in `profile` (`p`, when the configuration has it)
/// applies: the endpoint's index and the override without the parts that cannot apply,
/// which go to `dropped` with the reason.
fn fit(
    p: Option<&Profile>,
    profile: &str,
    endpoint: &str,
    mut o: Override,
    dropped: &mut Vec<Dropped>,
) -> Option<(usize, Override)> {
    let mut drop = |what: Override, reason: String| {
        let (profile, endpoint) = (profile.to_string(), endpoint.to_string());
        dropped.push(Dropped { profile, endpoint, dropped: what, reason });
    };
    let Some(p) = p else {
        drop(o, "the profile is no longer in the configuration".into());
        return None;
    };
    let Some(at) = p.endpoints.iter().position(|e| e.name == endpoint) else {
        drop(o, "the endpoint is no longer in the profile".into());
        return None;
    };
    if let Some(w) = o.weight
        && let Err(reason) = check_weight(p.method, w)
    {
        drop(Override { weight: Some(w), ..Override::default() }, reason);
        o.weight = None;
    }
    if let Some(b) = o.bias
        && let Err(reason) = check_bias(p.method, b)
    {
        drop(Override { bias: Some(b), ..Override::default() }, reason);
        o.bias = None;
    }
    Some((at, o))
}

/// Puts the (fitting) override `o` on `ep`.
fn set(ep: &mut Endpoint, o: Override) {
    ep.drained = o.drained;
    ep.enabled = ep.configured_enabled && !o.drained;
    ep.weight_override = o.weight;
    ep.weight = o.weight.unwrap_or(ep.configured_weight);
    ep.bias_override = o.bias;
    ep.bias = o.bias.unwrap_or(ep.configured_bias);
}

/// Whether a profile routed by `method` takes `bias` as an endpoint's bias; `Err` says why
/// not.
pub fn check_bias(method: crate::model::Method, bias: i8) -> Result<(), String> {
    if method != crate::model::Method::Geoproximity {
        return Err(format!("routing: {} has no biases", method.as_str()));
    }
    if !(-99..=99).contains(&bias) {
        return Err(format!("bias {bias} is outside -99..99 (routing: geoproximity)"));
    }
    Ok(())
}

/// Whether a profile routed by `method` has weights to change at all.
pub fn takes_weights(method: crate::model::Method) -> bool {
    weight_range(method).is_some()
}

/// Whether a profile routed by `method` takes `weight` as an endpoint's weight; `Err` says
/// why not.
pub fn check_weight(method: crate::model::Method, weight: u32) -> Result<(), String> {
    let name = method.as_str();
    match weight_range(method) {
        None => Err(format!("routing: {name} has no weights")),
        Some(r) if !r.contains(&weight) => {
            Err(format!("weight {weight} is outside {}..{} (routing: {name})", r.start(), r.end()))
        }
        Some(_) => Ok(()),
    }
}

/// The state file as written: a version and a list, so that it diffs and reads well;
/// then the recent events, so that the status page can explain the overrides after a
/// restart.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    version: u32,
    overrides: Vec<Entry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    events: Vec<SavedEvent>,
}

/// One event as the state file keeps it (`GET /api/v1/events` shows it the same way).
#[derive(Serialize, Deserialize)]
struct SavedEvent {
    seq: u64,
    /// RFC 3339, UTC, whole seconds.
    time: String,
    kind: String,
    profile: String,
    endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    by: Option<String>,
}

impl SavedEvent {
    fn of(e: &Event) -> SavedEvent {
        SavedEvent {
            seq: e.seq,
            time: humantime::format_rfc3339_seconds(e.time).to_string(),
            kind: e.kind.as_str().to_string(),
            profile: e.profile.clone(),
            endpoint: e.endpoint.clone(),
            from: e.from.clone(),
            to: e.to.clone(),
            reason: e.reason.clone(),
            by: e.by.clone(),
        }
    }

    /// `None` for a kind or time this version does not know: an event is worth less than
    /// a start.
    fn event(self) -> Option<Event> {
        let kind = Kind::parse(&self.kind)?;
        let time = humantime::parse_rfc3339(&self.time).ok()?;
        Some(Event {
            seq: self.seq,
            time,
            kind,
            profile: self.profile,
            endpoint: self.endpoint,
            from: self.from,
            to: self.to,
            reason: self.reason,
            by: self.by,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    profile: String,
    endpoint: String,
    #[serde(default)]
    drained: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weight: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bias: Option<i8>,
}

/// Reads the state file at `path`; `None` when it does not exist (yet).
pub fn read(path: &Path) -> Result<Option<Overrides>, ConfigError> {
    let error = |pos: Pos, message: String| ConfigError { file: path.to_path_buf(), pos, message };
    match crate::diag::read_limited(path, STATE_FILE_LIMIT) {
        Ok(text) => parse(&text).map(Some).map_err(|(pos, m)| error(pos, m)),
        Err(crate::diag::FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(error(Pos::default(), format!("cannot read the state file: {e}"))),
    }
}

/// The events kept in the state file at `path`, oldest first; none when it is missing or
/// unreadable (a load reports an unreadable one).
pub fn read_events(path: &Path) -> Vec<Event> {
    let Ok(text) = crate::diag::read_limited(path, STATE_FILE_LIMIT) else { return Vec::new() };
    let Ok(file) = serde_json::from_str::<StateFile>(&text) else { return Vec::new() };
    let mut events: Vec<Event> = file.events.into_iter().filter_map(SavedEvent::event).collect();
    events.sort_by_key(|e| e.seq);
    events
}

/// The overrides in a state file's text; `Err` has the position and the message.
pub fn parse(text: &str) -> Result<Overrides, (Pos, String)> {
    let file: StateFile = serde_json::from_str(text).map_err(|e| {
        let pos = Pos { line: e.line() as u32, col: e.column() as u32 };
        (pos, format!("the state file is not valid: {e}"))
    })?;
    let whole = |m: String| (Pos::default(), m);
    if file.version != VERSION {
        return Err(whole(format!(
            "the state file has version {}; this steerdns reads version {VERSION}",
            file.version
        )));
    }
    let mut out = Overrides::default();
    let mut seen = std::collections::HashSet::new();
    for e in file.overrides {
        if !e.profile.ends_with('.') {
            return Err(whole(format!("profile {:?} must be absolute (end in '.')", e.profile)));
        }
        let profile = WireName::parse(&e.profile).map_err(whole)?.to_string();
        let key = (profile, e.endpoint);
        if !seen.insert(key.clone()) {
            let (p, ep) = key;
            return Err(whole(format!("endpoint {ep} of {p} is listed twice")));
        }
        let o = Override { drained: e.drained, weight: e.weight, bias: e.bias };
        if !o.is_empty() {
            out.0.insert(key, o);
        }
    }
    Ok(out)
}

/// The state file's text for `overrides` and `events`.
pub fn to_text(overrides: &Overrides, events: &[Event]) -> String {
    let entries = overrides.iter().map(|(p, e, o)| Entry {
        profile: p.to_string(),
        endpoint: e.to_string(),
        drained: o.drained,
        weight: o.weight,
        bias: o.bias,
    });
    let events = events.iter().map(SavedEvent::of).collect();
    let file = StateFile { version: VERSION, overrides: entries.collect(), events };
    let mut text = serde_json::to_string_pretty(&file).expect("the state serializes");
    text.push('\n');
    text
}

/// Writes `overrides` and `events` to `path` so that a crash at any point leaves either
/// the old file or the new one whole: a temporary file beside it, flushed to disk, renamed
/// over it, and the directory flushed so the rename itself survives a power loss.
pub fn save(path: &Path, overrides: &Overrides, events: &[Event]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the state file has no file name")
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(to_text(overrides, events).as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Method;

    /// Profiles loaded from `(name, routing, endpoint names)`, every endpoint an address.
    fn profiles(list: &[(&str, &str, &[&str])]) -> Vec<Profile> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
        let server = "listen: { dns: [\"127.0.0.1:0\"] }\nzones:\n  - origin: tm.example.test.\n    ns: [ns1.tm.example.test.]\n    soa: { rname: h.example.test. }\n";
        std::fs::write(dir.path().join("steerdns.yaml"), server).unwrap();
        let docs: Vec<String> = list
            .iter()
            .map(|(name, routing, eps)| {
                let eps: Vec<String> = eps
                    .iter()
                    .enumerate()
                    .map(|(i, e)| format!("  - {{ name: {e}, target: 192.0.2.{} }}\n", i + 1))
                    .collect();
                format!("name: {name}\nrouting: {routing}\nendpoints:\n{}", eps.concat())
            })
            .collect();
        std::fs::write(dir.path().join("profiles/p.yaml"), docs.join("---\n")).unwrap();
        let loaded = crate::config::load(&dir.path().join("steerdns.yaml"), None).unwrap();
        loaded.snapshot.profiles.iter().map(|p| Profile::clone(p)).collect()
    }

    fn set(list: &[(&str, &str, bool, Option<u32>)]) -> Overrides {
        let mut o = Overrides::default();
        for (p, e, drained, weight) in list {
            o.set(p, e, Override { drained: *drained, weight: *weight, bias: None });
        }
        o
    }

    #[test]
    fn apply_starts_from_the_configuration_and_drops_what_no_longer_fits() {
        let mut profiles = profiles(&[("w", "weighted", &["a", "b"]), ("p", "priority", &["x"])]);
        let w = "w.tm.example.test.";
        let p = "p.tm.example.test.";
        // A first load drains a and weighs b.
        let first = set(&[(w, "a", true, None), (w, "b", false, Some(7))]);
        let (kept, dropped) = apply(&mut profiles, &first);
        assert_eq!((kept, dropped), (first.clone(), vec![]));
        let [a, b] = &profiles[0].endpoints[..] else { panic!() };
        assert_eq!((a.enabled, a.drained, a.weight), (false, true, 1));
        assert_eq!((b.enabled, b.weight, b.weight_override), (true, 7, Some(7)));

        // The next load has none of those, and some that cannot apply.
        let next = set(&[
            (p, "x", true, Some(3)),
            (p, "gone", true, None),
            ("nope.tm.example.test.", "a", true, None),
            (w, "a", false, Some(1001)),
        ]);
        let (kept, dropped) = apply(&mut profiles, &next);
        assert_eq!(kept, set(&[(p, "x", true, None)]));
        let why: Vec<(String, String, Override, String)> =
            dropped.into_iter().map(|d| (d.profile, d.endpoint, d.dropped, d.reason)).collect();
        let o = |drained, weight| Override { drained, weight, bias: None };
        let want = vec![
            (
                "nope.tm.example.test.".into(),
                "a".into(),
                o(true, None),
                "the profile is no longer in the configuration".into(),
            ),
            (
                p.into(),
                "gone".into(),
                o(true, None),
                "the endpoint is no longer in the profile".into(),
            ),
            (p.into(), "x".into(), o(false, Some(3)), "routing: priority has no weights".into()),
            (
                w.into(),
                "a".into(),
                o(false, Some(1001)),
                "weight 1001 is outside 0..1000 (routing: weighted)".into(),
            ),
        ];
        assert_eq!(why, want);
        let [a, b] = &profiles[0].endpoints[..] else { panic!() };
        assert_eq!((a.enabled, a.drained, a.weight, a.weight_override), (true, false, 1, None));
        assert_eq!((b.enabled, b.weight, b.weight_override), (true, 1, None));
        let x = &profiles[1].endpoints[0];
        assert_eq!((x.enabled, x.drained), (false, true));
    }

    #[test]
    fn a_configured_disabled_endpoint_stays_disabled_when_undrained() {
        let mut profiles = profiles(&[("w", "weighted", &["a"])]);
        profiles[0].endpoints[0].configured_enabled = false;
        let w = "w.tm.example.test.";
        apply(&mut profiles, &set(&[(w, "a", true, None)]));
        apply(&mut profiles, &Overrides::default());
        let a = &profiles[0].endpoints[0];
        assert_eq!((a.enabled, a.drained), (false, false));
    }

    #[test]
    fn weights_are_checked_against_the_method() {
        let cases = [
            (Method::Weighted, 0, Ok(())),
            (Method::Weighted, 1000, Ok(())),
            (Method::Weighted, 1001, Err("weight 1001 is outside 0..1000 (routing: weighted)")),
            (Method::Groups, 255, Ok(())),
            (Method::Groups, 256, Err("weight 256 is outside 0..255 (routing: groups)")),
            (Method::Priority, 1, Err("routing: priority has no weights")),
            (Method::Geographic, 1, Err("routing: geographic has no weights")),
        ];
        for (method, weight, want) in cases {
            assert_eq!(
                check_weight(method, weight),
                want.map_err(String::from),
                "{method:?} {weight}"
            );
        }
    }

    #[test]
    fn biases_are_checked_against_the_method() {
        let cases = [
            (Method::Geoproximity, -99, Ok(())),
            (Method::Geoproximity, 99, Ok(())),
            (Method::Geoproximity, 100, Err("bias 100 is outside -99..99 (routing: geoproximity)")),
            (
                Method::Geoproximity,
                -100,
                Err("bias -100 is outside -99..99 (routing: geoproximity)"),
            ),
            (Method::Weighted, 5, Err("routing: weighted has no biases")),
        ];
        for (method, bias, want) in cases {
            assert_eq!(check_bias(method, bias), want.map_err(String::from), "{method:?} {bias}");
        }
    }

    #[test]
    fn a_bias_is_dropped_where_the_method_has_none() {
        let mut profiles = profiles(&[("w", "weighted", &["a"])]);
        let w = "w.tm.example.test.";
        let mut o = Overrides::default();
        o.set(w, "a", Override { drained: true, weight: None, bias: Some(20) });
        let (kept, dropped) = apply(&mut profiles, &o);
        assert_eq!(kept, set(&[(w, "a", true, None)]));
        let d = &dropped[..];
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].dropped.bias, d[0].reason.as_str()),
            (Some(20), "routing: weighted has no biases")
        );
        assert_eq!(profiles[0].endpoints[0].bias, 0);
    }

    #[test]
    fn the_state_file_round_trips_and_names_its_mistakes() {
        let mut o = set(&[
            ("www.tm.example.test.", "a", true, None),
            ("api.tm.example.test.", "b", false, Some(5)),
        ]);
        o.set("near.tm.example.test.", "c", Override { bias: Some(-7), ..Override::default() });
        let text = to_text(&o, &[]);
        assert!(text.contains("\"bias\": -7"), "{text}");
        assert_eq!(parse(&text), Ok(o));
        let upper = r#"{"version":1,"overrides":[{"profile":"WWW.tm.example.test.","endpoint":"a","drained":true}]}"#;
        assert_eq!(parse(upper), Ok(set(&[("www.tm.example.test.", "a", true, None)])));
        let bad = [
            ("", "the state file is not valid: EOF while parsing a value at line 1 column 0"),
            (
                "{\"version\":1,\n \"overrides\": [}",
                "the state file is not valid: expected value at line 2 column 16",
            ),
            (
                r#"{"version":2,"overrides":[]}"#,
                "the state file has version 2; this steerdns reads version 1",
            ),
            (
                r#"{"version":1,"overrides":[],"x":1}"#,
                "the state file is not valid: unknown field `x`, expected one of `version`, `overrides`, `events` at line 1 column 31",
            ),
            (
                r#"{"version":1,"overrides":[{"profile":"www","endpoint":"a"}]}"#,
                "profile \"www\" must be absolute (end in '.')",
            ),
            (
                r#"{"version":1,"overrides":[{"profile":"w.t.","endpoint":"a"},{"profile":"W.t.","endpoint":"a"}]}"#,
                "endpoint a of w.t. is listed twice",
            ),
        ];
        for (text, want) in bad {
            assert_eq!(parse(text).map_err(|(_, m)| m), Err(want.to_string()), "{text:?}");
        }
        let (pos, _) = parse("{\"version\":1,\n \"overrides\": [}").unwrap_err();
        assert_eq!((pos.line, pos.col), (2, 16));
    }

    #[test]
    fn save_replaces_the_file_whole_and_read_tells_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(read(&path), Ok(None));
        let o = set(&[("www.tm.example.test.", "a", true, Some(2))]);
        save(&path, &o, &[]).unwrap();
        assert_eq!(read(&path), Ok(Some(o)));
        save(&path, &Overrides::default(), &[]).unwrap();
        assert_eq!(read(&path), Ok(Some(Overrides::default())));
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["state.json"], "no temporary file is left behind");
        std::fs::write(&path, "{").unwrap();
        let e = read(&path).unwrap_err();
        assert_eq!(e.file, path);
        assert!(e.message.starts_with("the state file is not valid"), "{e}");
    }

    #[test]
    fn events_round_trip_beside_the_overrides_and_unknown_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert!(read_events(&path).is_empty(), "a missing file holds no events");
        let at = humantime::parse_rfc3339("2026-12-01T18:00:00Z").unwrap();
        let mut drain = Event::new(Kind::Drain, "www.tm.example.test.", "a").by("alice");
        (drain.seq, drain.time) = (7, at);
        let mut status = Event::new(Kind::Status, "www.tm.example.test.", "b")
            .change("online", "degraded")
            .reason("connection refused");
        (status.seq, status.time) = (8, at);
        let o = set(&[("www.tm.example.test.", "a", true, None)]);
        save(&path, &o, &[drain.clone(), status.clone()]).unwrap();
        assert_eq!(read(&path), Ok(Some(o)));
        assert_eq!(read_events(&path), [drain, status]);
        // A newer steerdns's kind, and a file of an older one without events.
        let text = r#"{"version":1,"overrides":[],"events":[
            {"seq":3,"time":"2026-12-01T18:00:00Z","kind":"teleport","profile":"p.","endpoint":"e"},
            {"seq":2,"time":"2026-12-01T17:00:00Z","kind":"undrain","profile":"p.","endpoint":"e","by":"bob"}]}"#;
        std::fs::write(&path, text).unwrap();
        let kept: Vec<(u64, Kind)> = read_events(&path).iter().map(|e| (e.seq, e.kind)).collect();
        assert_eq!(kept, [(2, Kind::Undrain)]);
        std::fs::write(&path, r#"{"version":1,"overrides":[]}"#).unwrap();
        assert!(read_events(&path).is_empty());
    }
}
