//! Where `pushed` and `file` monitors read their results: the pushed statuses and the
//! health files as last read. Shared by every endpoint, written by the admin API and the
//! file watcher, read when an endpoint's status is evaluated.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use super::pushed::PushedHealths;
use crate::model::health_file::HealthFile;

/// A health file as last read.
#[derive(Clone, Debug, Default)]
pub struct LoadedFile {
    pub file: HealthFile,
    /// Its modification time when read.
    pub modified: Option<SystemTime>,
    /// Why it could not be read (it then counts as empty).
    pub error: Option<String>,
}

impl LoadedFile {
    /// Whether its data is older than `max_age` at `now`.
    pub fn is_stale(&self, max_age: Option<Duration>, now: SystemTime) -> bool {
        match (max_age, self.modified) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(max), Some(m)) => now.duration_since(m).is_ok_and(|age| age > max),
        }
    }
}

/// The health files, by path.
#[derive(Debug, Default)]
pub struct HealthFiles {
    map: Mutex<HashMap<PathBuf, Arc<LoadedFile>>>,
}

impl HealthFiles {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<LoadedFile>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set(&self, path: &Path, file: LoadedFile) {
        self.lock().insert(path.to_path_buf(), Arc::new(file));
    }

    pub fn get(&self, path: &Path) -> Option<Arc<LoadedFile>> {
        self.lock().get(path).cloned()
    }

    /// Forgets the files no monitor reads any more.
    pub fn retain(&self, mut keep: impl FnMut(&Path) -> bool) {
        self.lock().retain(|p, _| keep(p));
    }
}

/// Every source of external results.
#[derive(Debug, Default)]
pub struct External {
    pub pushed: PushedHealths,
    pub files: HealthFiles,
}
