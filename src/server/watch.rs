//! Hot reload on file changes: the profiles directory and `steerdns.yaml` are watched
//! (notify), and a burst of events — an editor's write-rename dance, a `git checkout` —
//! is debounced into one reload, at most `MAX_DELAY` after the burst's first event.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::control::Control;

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
    let config = absolute(&control.config_path);
    let profiles = absolute(&control.profiles_dir());
    let (tx, rx) = mpsc::unbounded_channel();
    let (cfg, dir) = (config.clone(), profiles.clone());
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
        if let Ok(ev) = res
            && relevant(&ev, &cfg, &dir)
        {
            let _ = tx.send(());
        }
    })?;
    watcher.watch(&profiles, RecursiveMode::NonRecursive)?;
    if let Some(parent) = config.parent() {
        watcher.watch(parent, RecursiveMode::NonRecursive)?;
    }
    tokio::spawn(debounce_loop(rx, control, cancel));
    Ok(watcher)
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A change to the config file, or to a YAML file in the profiles directory.
fn relevant(ev: &Event, config: &Path, profiles: &Path) -> bool {
    if matches!(ev.kind, EventKind::Access(_)) {
        return false;
    }
    ev.paths.iter().any(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let yaml = (name.ends_with(".yaml") || name.ends_with(".yml")) && !name.starts_with('.');
        p == config || (p.parent() == Some(profiles) && yaml)
    })
}

async fn debounce_loop(
    mut rx: mpsc::UnboundedReceiver<()>,
    control: Arc<Control>,
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
        let c = control.clone();
        let reload = tokio::task::spawn_blocking(move || c.reload("file change"));
        // Shutdown does not wait for a reload (see `server::serve`).
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = reload => {}
        }
    }
}
