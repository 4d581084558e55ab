//! Watching the files of `file` monitors: one task per file, which reads it at start and
//! again on every change (notify, on its directory, so that a file replaced by a rename is
//! seen), stores what it says in `External::files` and has the endpoints reading it
//! evaluated again. A file is read up to `MAX_BYTES`; a bad line is logged with its
//! FILE:LINE and the rest still applies.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{Event, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::external::{External, LoadedFile};
use crate::model::health_file;

/// The most bytes of a health file read; a longer file is read up to here (and reported).
pub const MAX_BYTES: u64 = 1 << 20;

/// Quiet time after a change before reading: an editor's write-rename is one change.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// How often the endpoints are evaluated again without a change, so that `max_age` takes
/// effect on a file nobody touches.
const AGE_CHECK: Duration = Duration::from_secs(1);

/// Reads `path` now: what it says, or why it could not be read.
pub fn read(path: &Path) -> LoadedFile {
    let opened = std::fs::File::open(path).and_then(|f| {
        let modified = f.metadata()?.modified().ok();
        let mut bytes = Vec::new();
        f.take(MAX_BYTES + 1).read_to_end(&mut bytes)?;
        Ok((bytes, modified))
    });
    match opened {
        Ok((mut bytes, modified)) => {
            let cut = bytes.len() as u64 > MAX_BYTES;
            bytes.truncate(MAX_BYTES as usize);
            let mut file = health_file::parse(&String::from_utf8_lossy(&bytes));
            if cut {
                let line = file.bad.last().map_or(0, |b| b.line) + 1;
                let message =
                    format!("the file is larger than {MAX_BYTES} bytes: the rest is ignored");
                file.bad.push(health_file::BadLine { line, message });
            }
            LoadedFile { file, modified, error: None }
        }
        Err(e) => LoadedFile { error: Some(e.to_string()), ..LoadedFile::default() },
    }
}

/// Reads `path` into `external` and logs what is wrong with it.
fn load(path: &Path, external: &External) {
    let loaded = read(path);
    if let Some(e) = &loaded.error {
        tracing::warn!(file = %path.display(), error = %e, "cannot read the health file; its endpoints count as missing");
    }
    for bad in &loaded.file.bad {
        tracing::warn!("{}:{}: {}", path.display(), bad.line, bad.message);
    }
    tracing::debug!(file = %path.display(), entries = loaded.file.entries.len(), "health file read");
    external.files.set(path, loaded);
}

/// Watches `path` until `cancel`, calling `changed` after each read and every `AGE_CHECK`.
pub async fn watch(
    path: PathBuf,
    external: Arc<External>,
    changed: impl Fn() + Send + 'static,
    cancel: CancellationToken,
) {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    // Keeps the channel open when the watcher cannot be made.
    let _open = tx.clone();
    let name = path.file_name().map(ToOwned::to_owned);
    let watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
        if let Ok(ev) = res
            && ev.paths.iter().any(|p| p.file_name() == name.as_deref())
        {
            // Full: a read is already due, which will see this change too.
            let _ = tx.try_send(());
        }
    });
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let _watcher = match watcher
        .and_then(|mut w| w.watch(dir, RecursiveMode::NonRecursive).map(|()| w))
    {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot watch the health file; it is read again every second");
            None
        }
    };
    load(&path, &external);
    changed();
    let mut tick = tokio::time::interval(AGE_CHECK);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            got = rx.recv() => {
                if got.is_none() {
                    return;
                }
                tokio::time::sleep(DEBOUNCE).await;
                while rx.try_recv().is_ok() {}
                load(&path, &external);
            }
            _ = tick.tick() => {
                if _watcher.is_none() {
                    load(&path, &external);
                }
            }
        }
        changed();
    }
}
