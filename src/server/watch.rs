//! Hot reload on file changes: the profiles directory, `steerdns.yaml`, the DNSSEC key
//! directories and the geo and ASN databases are watched (notify), and a burst of events —
//! an editor's write-rename dance, a `git checkout` — is debounced into one reload, at most
//! `MAX_DELAY` after the burst's first event.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::control::Control;
use super::reloader::{Reloader, Trigger};
use crate::geo::World;

/// Quiet time after the last event before reloading.
pub const DEBOUNCE: Duration = Duration::from_millis(250);

/// The longest a change waits for quiet: a file rewritten without pause (a log written by
/// mistake into the profiles directory, a sync tool) must not hold back other changes.
pub const MAX_DELAY: Duration = Duration::from_secs(1);

/// Starts watching; the returned watcher must be kept alive as long as watching should go on.
pub fn spawn(
    control: Arc<Control>,
    cancel: CancellationToken,
) -> notify::Result<RecommendedWatcher> {
    let watched = Watched {
        config: absolute(&control.config_path),
        profiles: control.profiles_dir().map(|d| absolute(&d)),
        key_dirs: control.key_dirs().iter().map(|d| absolute(d)).collect(),
        databases: databases(&control.snapshot().world),
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let config = watched.config.clone();
    let profiles = watched.profiles.clone();
    let key_dirs = watched.key_dirs.clone();
    let databases = watched.databases.clone();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
        if let Ok(ev) = res
            && watched.relevant(&ev)
        {
            let _ = tx.send(());
        }
    })?;
    if let Some(profiles) = &profiles {
        watcher.watch(profiles, RecursiveMode::NonRecursive)?;
    }
    let parent = config.parent();
    if let Some(parent) = parent {
        watcher.watch(parent, RecursiveMode::NonRecursive)?;
    }
    for dir in
        key_dirs.iter().filter(|d| Some(d.as_path()) != parent && Some(*d) != profiles.as_ref())
    {
        // A missing key directory fails the load; a load that succeeds has it.
        if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the key directory; reload with SIGHUP or the API after key changes");
        }
    }
    let mut watched_dirs: Vec<&Path> = key_dirs.iter().map(PathBuf::as_path).collect();
    watched_dirs.extend(parent);
    watched_dirs.extend(profiles.as_deref());
    for dir in databases.iter().filter_map(|f| f.parent()) {
        if watched_dirs.contains(&dir) {
            continue;
        }
        watched_dirs.push(dir);
        if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch a database's directory; reload with SIGHUP or the API after changing it");
        }
    }
    tokio::spawn(debounce_loop(rx, Reloader::new(control), cancel));
    Ok(watcher)
}

/// The database files of `world` (`geo.database`, `asn.database`) that were opened.
fn databases(world: &World) -> Vec<PathBuf> {
    let geo = world.db.iter().map(|db| db.path());
    let asn = world.asn.iter().map(|db| db.path());
    geo.chain(asn).map(absolute_file).collect()
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A file's path through its canonical directory, not its own target: the events of a
/// file renamed over it name this path.
fn absolute_file(p: &Path) -> PathBuf {
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => {
            absolute(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }).join(name)
        }
        _ => absolute(p),
    }
}

/// What a change must touch to cause a reload (absolute paths).
struct Watched {
    config: PathBuf,
    /// `None` when the profiles come from etcd.
    profiles: Option<PathBuf>,
    key_dirs: Vec<PathBuf>,
    /// Database files a change of which reloads (the geo and ASN databases).
    databases: Vec<PathBuf>,
}

impl Watched {
    /// A change to the config file, to a YAML file in the profiles directory, to a key
    /// file in a key directory, or to a database.
    fn relevant(&self, ev: &Event) -> bool {
        if matches!(ev.kind, EventKind::Access(_)) {
            return false;
        }
        ev.paths.iter().any(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let hidden = name.starts_with('.');
            let yaml = (name.ends_with(".yaml") || name.ends_with(".yml")) && !hidden;
            let key = (name.ends_with(".key") || name.ends_with(".private")) && !hidden;
            let in_key_dir = p.parent().is_some_and(|d| self.key_dirs.iter().any(|k| k == d));
            *p == self.config
                || self.databases.contains(p)
                || (p.parent().is_some_and(|d| self.profiles.as_deref() == Some(d)) && yaml)
                || (in_key_dir && key)
        })
    }
}

async fn debounce_loop(
    mut rx: mpsc::UnboundedReceiver<()>,
    reloader: Reloader,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            got = rx.recv() => if got.is_none() { return },
        }
        // Wait for a quiet moment: every further event restarts the clock, up to MAX_DELAY
        // after the first one.
        let first = Instant::now();
        let mut due = first + DEBOUNCE;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(due) => break,
                got = rx.recv() => match got {
                    None => return,
                    Some(()) => due = (Instant::now() + DEBOUNCE).min(first + MAX_DELAY),
                },
            }
        }
        // Not waited for: a burst during the reload asks for one more after it.
        reloader.request(Trigger::FileChange);
    }
}
