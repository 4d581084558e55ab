//! The samples across restarts (`rum.state_file`, layout in `geo::rum::saved`): read once at
//! start, before the listeners open; written every `rum.save_interval` and at shutdown, off
//! the query path (encoded under the aggregate's mutex, written outside it), whole: a
//! temporary file, fsync, rename, so that a crash leaves the old copy or the new one.
//!
//! A file that cannot be used (too large for `rum.max_networks` networks of the targets,
//! damaged, or not a steerdns samples file) is reported and ignored: the start goes on
//! with no samples, and the next save replaces it.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::Rum;
use crate::diag::{FileError, open_regular};
use crate::geo::rum::MeasuredLatency;
use crate::geo::rum::saved::{self, Restored};

/// Why the state file was not read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read it: {0}")]
    Read(#[from] FileError),
    #[error(
        "{size} bytes, more than {limit} bytes that rum.max_networks networks of the targets can fill"
    )]
    TooLarge { size: u64, limit: u64 },
    #[error("{0}")]
    Decode(#[from] crate::geo::rum::codec::DecodeError),
}

/// Seconds since the Unix epoch now.
fn unix_now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Reads `path` into `rum`'s aggregate; returns what was restored and a table of the
/// preferences saved with it, for the first table to start from. `Ok(None)` when there is
/// no file yet.
pub fn load(rum: &Rum, path: &Path) -> Result<Option<(Restored, MeasuredLatency)>, LoadError> {
    let regions = rum.regions();
    let limit = saved::max_bytes(rum.settings.aggregation.max_networks, &regions);
    let (file, meta) = match open_regular(path) {
        Ok(f) => f,
        Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if meta.len() > limit {
        return Err(LoadError::TooLarge { size: meta.len(), limit });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(FileError::from)?;
    if bytes.len() as u64 > limit {
        return Err(LoadError::TooLarge { size: bytes.len() as u64, limit });
    }
    let saved = saved::decode(&bytes)?;
    let elapsed = unix_now().saturating_sub(saved.saved_at);
    let restored = rum.with_aggregate(|a, now| saved::restore(a, &saved, &regions, now, elapsed));
    let seed = saved::preferences(&saved, &rum.settings.aggregation, rum.columns());
    Ok(Some((restored, seed)))
}

/// `load`, saying what happened in the log; never fails the start. The preferences saved,
/// if any.
pub fn load_logged(rum: &Rum, path: &Path) -> Option<MeasuredLatency> {
    match load(rum, path) {
        Ok(None) => None,
        Ok(Some((r, seed))) => {
            tracing::info!(
                state_file = %path.display(),
                networks = r.networks,
                samples = r.samples,
                dropped = r.dropped,
                "real user measurements restored"
            );
            Some(seed)
        }
        Err(e) => {
            tracing::warn!(
                state_file = %path.display(),
                error = %e,
                "real user measurements state file ignored; starting with no samples"
            );
            None
        }
    }
}

/// Writes `rum`'s samples to `path` whole; the bytes written.
pub fn save(rum: &Rum, path: &Path) -> std::io::Result<usize> {
    let regions = rum.regions();
    let published = rum.table();
    let bytes =
        rum.with_aggregate(|a, now| saved::encode(a, &published, &regions, now, unix_now()));
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename itself is durable once the directory is synced.
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(bytes.len())
}

/// `save` off the runtime's workers, logging a failure (once until a save succeeds again).
async fn save_logged(rum: &Arc<Rum>, path: &Path, failing: &mut bool) {
    let (r, p) = (rum.clone(), path.to_path_buf());
    let saved = tokio::task::spawn_blocking(move || save(&r, &p)).await;
    match saved {
        Ok(Ok(bytes)) => {
            *failing = false;
            tracing::debug!(state_file = %path.display(), bytes, "real user measurements saved");
        }
        Ok(Err(e)) if !*failing => {
            *failing = true;
            tracing::warn!(state_file = %path.display(), error = %e, "cannot save the real user measurements");
        }
        _ => {}
    }
}

/// Saves every `rum.save_interval` until `cancel`, then once more.
pub async fn save_every(rum: Arc<Rum>, path: std::path::PathBuf, cancel: CancellationToken) {
    let every: Duration = rum.settings.save_interval;
    let mut failing = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
        save_logged(&rum, &path, &mut failing).await;
    }
    save_logged(&rum, &path, &mut failing).await;
}
