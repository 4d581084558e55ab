//! Profiles held in etcd (`profiles: etcd`): read at startup (from the cache file when etcd
//! does not answer), then followed with a watch, so that every replica reloads the same
//! files through `Control`.
//!
//! The revision a replica reports is the largest `mod_revision` among the profile keys and
//! the push marker `<prefix>pushed`: it depends only on what is stored, never on when it
//! was read, so every replica holding the same state reports the same number whether it
//! read it whole or followed it event by event. `cluster push` writes the marker in its
//! transaction, so a push that only deletes keys still moves the revision on. A key
//! deleted by hand (`etcdctl del`) moves it only if the marker is written too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::{self, Backoff, Entry, EtcdError};
use super::follow::{self, KeyRange};
use crate::config::remote::{self, RemoteFile, RemoteProfiles};
use crate::config::{self, ConfigError, ConfigErrors, Loaded, ProfileSource};
use crate::model::cluster::{ClusterSettings, EtcdSettings};
use crate::server::control::Control;
use crate::server::reloader::{Reloader, Trigger};
use crate::server::watch::{DEBOUNCE, MAX_DELAY};

/// How long a starting replica tries to read its profiles from etcd before it falls back
/// to the cache file: long enough for etcd started alongside it, short enough that a
/// replica restarted during an outage serves again within seconds.
pub const STARTUP_WAIT: Duration = Duration::from_secs(5);

/// The key `cluster push` writes in every push transaction (see the module doc).
pub fn marker_key(etcd: &EtcdSettings) -> String {
    format!("{}pushed", etcd.prefix)
}

/// The profile keys and the push marker as this replica last read them, and the revision
/// a watch carries on from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    files: BTreeMap<String, Stored>,
    /// The marker's `mod_revision`; 0 when there is none.
    marker: i64,
    /// The first store revision not read yet.
    next: i64,
}

/// One profile key as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// `None`: the value is not UTF-8 (refused as a profile file).
    pub text: Option<Arc<str>>,
    pub mod_revision: i64,
}

impl Seen {
    /// The revision replicas report for these profiles (see the module doc).
    pub fn revision(&self) -> i64 {
        self.files.values().map(|s| s.mod_revision).fold(self.marker, i64::max)
    }

    /// The marker's `mod_revision` (0: none), which a push compares to find out whether
    /// another push came first.
    pub fn marker_revision(&self) -> i64 {
        self.marker
    }

    /// The store revision everything was read at (a watch starts after it).
    pub fn read_at(&self) -> i64 {
        self.next - 1
    }

    /// Every profile key, in key order.
    pub fn files(&self) -> impl Iterator<Item = (&str, &Stored)> {
        self.files.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The profile files to load; a value that is not UTF-8 is an error at its key.
    pub fn profiles(&self) -> Result<RemoteProfiles, ConfigErrors> {
        let mut files = Vec::with_capacity(self.files.len());
        let mut errors = Vec::new();
        for (key, stored) in &self.files {
            match &stored.text {
                Some(text) => files.push(RemoteFile { key: key.clone(), text: text.clone() }),
                None => errors.push(ConfigError {
                    file: remote::location(key),
                    pos: Default::default(),
                    message: "the value is not UTF-8 text".into(),
                }),
            }
        }
        if errors.is_empty() {
            Ok(RemoteProfiles::new(self.revision(), files))
        } else {
            Err(ConfigErrors(errors))
        }
    }

    /// The keys of `range` as read at `revision`.
    fn read(etcd: &EtcdSettings, revision: i64, entries: Vec<Entry>) -> Seen {
        let mut seen = Seen { next: revision + 1, ..Seen::default() };
        for e in entries {
            seen.record(etcd, e.key.as_bytes(), Event::Put(&e.value, e.mod_revision));
        }
        seen
    }

    /// Takes one watch event on a key of the watched range; whether it changed anything
    /// loaded (keys between the profiles and the marker are none of ours).
    fn record(&mut self, etcd: &EtcdSettings, key: &[u8], event: Event<'_>) -> bool {
        let Ok(key) = std::str::from_utf8(key) else { return false };
        if key == marker_key(etcd) {
            let before = self.marker;
            self.marker = match event {
                Event::Put(_, rev) => rev,
                Event::Delete => 0,
            };
            return before != self.marker;
        }
        if !key.starts_with(&etcd.profiles_prefix()) {
            return false;
        }
        match event {
            Event::Put(value, mod_revision) => {
                let text = std::str::from_utf8(value).ok().map(Arc::from);
                let stored = Stored { text, mod_revision };
                self.files.insert(key.to_string(), stored.clone()) != Some(stored)
            }
            Event::Delete => self.files.remove(key).is_some(),
        }
    }
}

/// A change to one key.
#[derive(Clone, Copy, Debug)]
enum Event<'a> {
    /// The new value and its `mod_revision`.
    Put(&'a [u8], i64),
    Delete,
}

/// The keys a replica follows for its profiles: the profiles prefix up to and including
/// the marker (`profiles/` sorts before `pushed`), so that one read and one watch keep both
/// in one order of events; other keys in that range are ignored.
pub fn range(etcd: &EtcdSettings) -> KeyRange {
    KeyRange::through(&etcd.profiles_prefix(), &marker_key(etcd))
}

/// Reads every profile key and the marker at one revision.
pub async fn fetch(client: &Client, etcd: &EtcdSettings) -> Result<Seen, EtcdError> {
    let range = range(etcd);
    let fetched = etcd::fetch_range(client, &range.start, &range.end).await?;
    Ok(Seen::read(etcd, fetched.revision, fetched.entries))
}

/// `fetch`, tried again with backoff until `wait` has passed.
pub async fn fetch_within(
    client: &Client,
    etcd: &EtcdSettings,
    wait: Duration,
) -> Result<Seen, EtcdError> {
    let deadline = Instant::now() + wait;
    let mut backoff = Backoff::default();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let failed = match tokio::time::timeout(left, fetch(client, etcd)).await {
            Ok(Ok(seen)) => return Ok(seen),
            Ok(Err(e)) => e,
            Err(_) => EtcdError::Timeout(wait),
        };
        let pause = backoff.next_delay();
        if Instant::now() + pause >= deadline {
            return Err(failed);
        }
        tokio::time::sleep(pause).await;
    }
}

/// What a replica whose profiles come from etcd starts with.
pub struct Startup {
    pub loaded: Loaded,
    /// The profiles it serves: from etcd, or from the cache file.
    pub applied: Arc<RemoteProfiles>,
    /// The profiles last read from etcd (refused ones too), which reloads load; `applied`
    /// when etcd did not answer.
    pub latest: Arc<RemoteProfiles>,
    /// What etcd held (`None`: it did not answer); the watch carries on from there.
    pub seen: Option<Seen>,
}

/// Why a replica cannot start with profiles from etcd.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "cannot read the profiles from etcd at {endpoints} within {waited:?} ({error}), and there is no cache file {} to start from: start etcd, or copy the cache file of another replica there",
        cache.display()
    )]
    Unreachable { endpoints: String, waited: Duration, error: String, cache: PathBuf },
    #[error(
        "cannot read the profiles from etcd at {endpoints} within {waited:?} ({error}), and the cache file cannot be used:\n{errors}"
    )]
    UnreachableBadCache { endpoints: String, waited: Duration, error: String, errors: ConfigErrors },
    #[error(
        "the profiles in etcd are invalid, and there is no usable cache file {} to start from:\n{errors}",
        cache.display()
    )]
    Refused { cache: PathBuf, errors: ConfigErrors },
}

/// Reads the profiles from etcd (waiting up to `STARTUP_WAIT`) and loads the configuration
/// with them. When etcd does not answer, or holds profiles that do not load, the cache
/// file's profiles are served instead (with a warning; the watch catches up later). A
/// replica with no usable cache then cannot start.
pub async fn start(config: &Path, session: &Session) -> Result<Startup, StartError> {
    let settings = session.settings.clone();
    let fetched = fetch_within(&session.client, &settings.etcd, STARTUP_WAIT).await;
    let cache = settings.cache_file.clone();
    let endpoints = settings.etcd.endpoints.join(",");
    match fetched {
        Ok(seen) => {
            let revision = seen.revision();
            let mut refused = None;
            let errors = match seen.profiles() {
                Ok(profiles) => {
                    let profiles = Arc::new(profiles);
                    match load(config, &profiles).await {
                        Ok(loaded) => {
                            let (s, p) = (settings.clone(), profiles.clone());
                            crate::server::blocking(move || save_cache(&s, &p)).await;
                            tracing::info!(
                                revision,
                                files = profiles.files.len(),
                                "profiles read from etcd"
                            );
                            let latest = profiles.clone();
                            let seen = Some(seen);
                            return Ok(Startup { loaded, applied: profiles, latest, seen });
                        }
                        Err(errors) => {
                            refused = Some(profiles);
                            errors
                        }
                    }
                }
                Err(errors) => errors,
            };
            for e in &errors.0 {
                tracing::error!(revision, error = %e, "the profiles in etcd are refused");
            }
            match from_cache(config, &settings).await {
                Ok(Some((loaded, applied))) => {
                    tracing::warn!(
                        cache = %cache.display(),
                        revision = applied.revision,
                        refused = revision,
                        "serving the profiles of the cache file until etcd holds profiles that load"
                    );
                    let latest = refused.unwrap_or_else(|| applied.clone());
                    Ok(Startup { loaded, applied, latest, seen: Some(seen) })
                }
                Ok(None) => Err(StartError::Refused { cache, errors }),
                Err(more) => {
                    let all = errors.0.into_iter().chain(more.0).collect();
                    Err(StartError::Refused { cache, errors: ConfigErrors(all) })
                }
            }
        }
        Err(e) => match from_cache(config, &settings).await {
            Ok(Some((loaded, applied))) => {
                tracing::warn!(
                    %endpoints,
                    error = %e,
                    cache = %cache.display(),
                    revision = applied.revision,
                    "etcd does not answer: serving the profiles of the cache file, and catching up once etcd answers"
                );
                let latest = applied.clone();
                Ok(Startup { loaded, applied, latest, seen: None })
            }
            Ok(None) => Err(StartError::Unreachable {
                endpoints,
                waited: STARTUP_WAIT,
                error: e.to_string(),
                cache,
            }),
            Err(errors) => Err(StartError::UnreachableBadCache {
                endpoints,
                waited: STARTUP_WAIT,
                error: e.to_string(),
                errors,
            }),
        },
    }
}

/// Loads the configuration with `profiles`, off the runtime's threads.
async fn load(config: &Path, profiles: &Arc<RemoteProfiles>) -> Result<Loaded, ConfigErrors> {
    let (path, p) = (config.to_path_buf(), profiles.clone());
    crate::server::blocking(move || config::load_from(&path, None, ProfileSource::Remote(&p))).await
}

/// The configuration loaded with the cache file's profiles; `Ok(None)` without a cache
/// file.
async fn from_cache(
    config: &Path,
    settings: &ClusterSettings,
) -> Result<Option<(Loaded, Arc<RemoteProfiles>)>, ConfigErrors> {
    let (path, prefix) = (settings.cache_file.clone(), settings.etcd.prefix.clone());
    let Some(cached) = crate::server::blocking(move || remote::read_cache(&path, &prefix)).await?
    else {
        return Ok(None);
    };
    let cached = Arc::new(cached);
    Ok(Some((load(config, &cached).await?, cached)))
}

/// Writes the cache file; a failure is logged (the replica serves on, but could not start
/// from the cache while etcd is down).
pub fn save_cache(settings: &ClusterSettings, profiles: &RemoteProfiles) {
    let path = &settings.cache_file;
    if let Err(e) = remote::write_cache(path, &settings.etcd.prefix, profiles) {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the cluster cache file");
    }
}

/// Follows the profile keys and the marker from where `seen` left off (from a full read
/// when `None`) until `cancel`, and hands each changed set to `Control::offer_remote` and
/// the `Reloader` (`Trigger::Cluster`).
pub async fn watch(
    control: Arc<Control>,
    session: Arc<Session>,
    seen: Option<Seen>,
    cancel: CancellationToken,
) {
    let offered = seen.as_ref().and_then(|s| s.profiles().ok());
    let etcd = session.settings.etcd.clone();
    let after = seen.as_ref().map(Seen::read_at);
    let events = follow::spawn(session, range(&etcd), after, cancel.clone());
    let mut w = Watcher { control, etcd, seen, offered, refused: None };
    w.run(events, cancel).await
}

struct Watcher {
    control: Arc<Control>,
    etcd: EtcdSettings,
    /// What etcd holds as far as read; `None` until read whole.
    seen: Option<Seen>,
    /// The set last handed to `Control` (applied or refused): the same set is never
    /// loaded twice, so a refused set is not retried at every reconnect.
    offered: Option<RemoteProfiles>,
    /// The errors of a set that could not even be made (a value not UTF-8), last reported.
    refused: Option<ConfigErrors>,
}

impl Watcher {
    /// Applies the follower's events to `seen`, and offers the result once quiet: a push
    /// is one transaction (one batch, with the marker: offered at once), but keys edited
    /// one by one arrive apart, and are debounced like file changes.
    async fn run(&mut self, mut events: mpsc::Receiver<follow::Event>, cancel: CancellationToken) {
        let mut pending: Option<(Instant, Instant)> = None;
        loop {
            let due = pending.map(|(_, due)| due);
            let event = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = sleep_until(due) => {
                    pending = None;
                    if self.offer(&cancel).await {
                        return;
                    }
                    continue;
                }
                event = events.recv() => event,
            };
            let (changed, pushed) = match event {
                None => return,
                Some(follow::Event::Snapshot { revision, entries }) => {
                    tracing::debug!(revision, "profiles read from etcd");
                    self.seen = Some(Seen::read(&self.etcd, revision, entries));
                    (true, true)
                }
                Some(follow::Event::Changes { changes, .. }) => self.apply(&changes),
                // Changes already taken are offered without waiting for etcd.
                Some(follow::Event::Lost { .. }) => (false, pending.is_some()),
                Some(follow::Event::Resumed { .. }) => (false, false),
            };
            if pushed {
                pending = None;
                if self.offer(&cancel).await {
                    return;
                }
            } else if changed {
                let now = Instant::now();
                let first = pending.map_or(now, |(first, _)| first);
                pending = Some((first, (now + DEBOUNCE).min(first + MAX_DELAY)));
            }
        }
    }

    /// Takes one batch of changes: whether it changed anything, and whether it holds a
    /// push (the marker was written).
    fn apply(&mut self, changes: &[follow::Change]) -> (bool, bool) {
        let Some(seen) = self.seen.as_mut() else { return (false, false) };
        let marker = marker_key(&self.etcd);
        let (mut changed, mut pushed) = (false, false);
        for c in changes {
            seen.next = seen.next.max(c.mod_revision + 1);
            let event = match &c.value {
                Some(value) => Event::Put(value, c.mod_revision),
                None => Event::Delete,
            };
            changed |= seen.record(&self.etcd, c.key.as_bytes(), event);
            pushed |= c.key == marker && c.value.is_some();
        }
        (changed, pushed)
    }

    /// Hands the profiles as seen to `Control`, unless they are the set last handed over.
    /// True when cancelled meanwhile.
    async fn offer(&mut self, cancel: &CancellationToken) -> bool {
        let Some(seen) = &self.seen else { return false };
        let next = match seen.profiles() {
            Ok(p) => p,
            Err(errors) => {
                if self.refused.as_ref() != Some(&errors) {
                    self.control.refused("etcd change", &errors);
                    self.refused = Some(errors);
                }
                return false;
            }
        };
        self.refused = None;
        if self.offered.as_ref() == Some(&next) {
            return false;
        }
        self.control.offer_remote(Arc::new(next.clone()));
        self.offered = Some(next);
        let reloader = Reloader::new(self.control.clone());
        let applying = reloader.reload(Trigger::Cluster);
        // Shutdown does not wait for a reload (see `server::serve`).
        tokio::select! {
            _ = cancel.cancelled() => true,
            _ = applying => false,
        }
    }
}

/// Until `due`, or forever without one.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd() -> EtcdSettings {
        EtcdSettings { endpoints: vec![], prefix: "/s/".into(), tls: None, auth: None }
    }

    #[test]
    fn the_revision_is_the_latest_change_of_what_is_stored() {
        let e = etcd();
        let mut seen = Seen { next: 10, ..Seen::default() };
        assert_eq!(seen.revision(), 0);
        assert!(seen.record(&e, b"/s/profiles/a.yaml", Event::Put(b"name: a\n", 5)));
        assert!(seen.record(&e, b"/s/profiles/b.yaml", Event::Put(b"name: b\n", 7)));
        assert_eq!(seen.revision(), 7);
        // A push that only deletes moves the revision on through the marker.
        assert!(seen.record(&e, b"/s/profiles/b.yaml", Event::Delete));
        assert_eq!(seen.revision(), 5);
        assert!(seen.record(&e, b"/s/pushed", Event::Put(b"{}", 9)));
        assert_eq!(seen.revision(), 9);
        // Keys between the profiles and the marker are not ours.
        assert!(!seen.record(&e, b"/s/probes", Event::Put(b"x", 11)));
        assert!(!seen.record(&e, b"/s/profiles/gone.yaml", Event::Delete));
        let p = seen.profiles().unwrap();
        assert_eq!(p.revision, 9);
        assert_eq!(p.files.len(), 1);
        assert_eq!(p.files[0].key, "/s/profiles/a.yaml");
        // Writing the same value again is a change of revision, not of the files.
        assert!(seen.record(&e, b"/s/profiles/a.yaml", Event::Put(b"name: a\n", 12)));
        let again = seen.profiles().unwrap();
        assert!(again.same_files(&p));
        assert_eq!(again.revision, 12);
    }

    #[test]
    fn a_value_that_is_not_text_is_an_error_at_its_key() {
        let e = etcd();
        let mut seen = Seen::default();
        seen.record(&e, b"/s/profiles/a.yaml", Event::Put(b"\xff\xfe", 3));
        let errors = seen.profiles().unwrap_err().to_string();
        assert_eq!(errors, "etcd:/s/profiles/a.yaml:1:1: the value is not UTF-8 text");
    }
}
