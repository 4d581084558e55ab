//! Profile files held in etcd rather than in a directory: the keys under
//! `<prefix>profiles/` as of one etcd revision, and the cache file a replica keeps of the
//! last set it applied so that it can start while etcd is down.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::diag::{self, ConfigError, ConfigErrors, Limit, Pos};

/// The profile files of one etcd revision, in key order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteProfiles {
    /// The revision of the latest change to them (the largest `mod_revision` of their keys
    /// and of the push marker): replicas holding the same files report the same revision.
    pub revision: i64,
    pub files: Vec<RemoteFile>,
}

/// One key: what a profile file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteFile {
    /// The whole etcd key, `<prefix>profiles/<file name>`.
    pub key: String,
    pub text: Arc<str>,
}

impl RemoteFile {
    /// The name errors are located by: `etcd:<key>`.
    pub fn location(&self) -> PathBuf {
        location(&self.key)
    }
}

/// How errors name a key: `etcd:<key>`, so that they read `etcd:<key>:LINE:COL`.
pub fn location(key: &str) -> PathBuf {
    PathBuf::from(format!("etcd:{key}"))
}

impl RemoteProfiles {
    /// A set from any order of keys (sorted here).
    pub fn new(revision: i64, mut files: Vec<RemoteFile>) -> RemoteProfiles {
        files.sort_by(|a, b| a.key.cmp(&b.key));
        RemoteProfiles { revision, files }
    }

    /// Whether `other` holds the same keys with the same texts (revisions aside).
    pub fn same_files(&self, other: &RemoteProfiles) -> bool {
        self.files == other.files
    }

    /// Bytes of text in all.
    pub fn total_len(&self) -> u64 {
        self.files.iter().map(|f| f.text.len() as u64).sum()
    }
}

/// The cache file is read before `limits:` is known. JSON escaping makes it larger than
/// the texts it holds: room for the largest total of profile files a load accepts by
/// default (256 MiB) written out twice over. `write_cache` refuses to write a larger one,
/// which could not be read back.
const CACHE_FILE_LIMIT: Limit =
    Limit { bytes: 512 << 20, set_by: "the fixed limit for the cluster cache file" };

/// The cache file as written: `prefix` guards against a file left by another cluster
/// configuration.
#[derive(Serialize, Deserialize)]
struct CacheFile {
    prefix: String,
    #[serde(flatten)]
    profiles: RemoteProfiles,
}

/// Reads the cache file; `Ok(None)` when there is none. A cache written for another
/// prefix is an error.
pub fn read_cache(path: &Path, prefix: &str) -> Result<Option<RemoteProfiles>, ConfigErrors> {
    if !path.exists() {
        return Ok(None);
    }
    let text = diag::read_file(path, CACHE_FILE_LIMIT)?;
    let at = |message: String, pos: Pos| {
        ConfigErrors(vec![ConfigError { file: path.into(), pos, message }])
    };
    let cache: CacheFile = serde_json::from_str(&text).map_err(|e| {
        let pos = Pos { line: e.line() as u32, col: e.column() as u32 };
        at(format!("not a cluster cache file: {e}"), pos)
    })?;
    if cache.prefix != prefix {
        let message = format!(
            "the cache file holds the profiles of prefix {:?}, not {prefix:?}",
            cache.prefix
        );
        return Err(at(message, Pos::default()));
    }
    Ok(Some(cache.profiles))
}

/// Writes the cache file whole: temporary file, fsync, rename, so that a crash leaves the
/// old copy or the new one.
pub fn write_cache(path: &Path, prefix: &str, profiles: &RemoteProfiles) -> std::io::Result<()> {
    let cache = CacheFile { prefix: prefix.to_string(), profiles: profiles.clone() };
    let mut json = serde_json::to_vec(&cache)?;
    json.push(b'\n');
    if json.len() as u64 > CACHE_FILE_LIMIT.bytes {
        let message = format!(
            "the cache would hold {} bytes, more than the {} bytes a start can read back",
            json.len(),
            CACHE_FILE_LIMIT.bytes
        );
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, message));
    }
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&json)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename itself is durable once the directory is synced.
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RemoteProfiles {
        let file = |k: &str, t: &str| RemoteFile { key: k.into(), text: Arc::from(t) };
        RemoteProfiles::new(
            42,
            vec![file("/s/profiles/b.yaml", "name: b\n"), file("/s/profiles/a.yaml", "name: a\n")],
        )
    }

    #[test]
    fn cache_round_trips_and_checks_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster-cache.json");
        assert_eq!(read_cache(&path, "/s/").unwrap(), None);
        let p = sample();
        assert_eq!(p.files[0].key, "/s/profiles/a.yaml");
        write_cache(&path, "/s/", &p).unwrap();
        assert_eq!(read_cache(&path, "/s/").unwrap(), Some(p));
        let e = read_cache(&path, "/other/").unwrap_err().to_string();
        assert!(e.contains("not \"/other/\""), "{e}");
        std::fs::write(&path, "{\"prefix\": 3}").unwrap();
        let e = read_cache(&path, "/s/").unwrap_err().to_string();
        assert!(e.contains("cluster-cache.json:1:"), "{e}");
    }
}
