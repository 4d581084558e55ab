//! `steerdns cluster push|pull|status`: the profiles held in etcd, from and to a directory,
//! and the replicas registered there. A push validates the directory as `check` would
//! (with the configuration's zones and location data), then writes the difference with
//! etcd and the push marker in one transaction, so that every replica sees a push whole or
//! not at all; it is never split to fit etcd's limits.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};

use crate::config::{self, ConfigError, ConfigErrors, Loaded, ProfileSource};
use crate::model::cluster::{ClusterSettings, EtcdSettings};
use crate::server::cluster::etcd::{self, EtcdError};
use crate::server::cluster::nodes::{self, NodeRecord};
use crate::server::cluster::profiles::{self, Seen, marker_key};

/// The longest a command waits for etcd to answer one request.
const WAIT: Duration = Duration::from_secs(10);

/// etcd's defaults for the limits a push can meet, named in the errors.
const DEFAULT_MAX_TXN_OPS: usize = 128;
const DEFAULT_MAX_REQUEST_BYTES: usize = 1536 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The configuration or the profiles are invalid; nothing was written.
    #[error("{0}")]
    Invalid(#[from] ConfigErrors),
    #[error("{} has no cluster: block saying where etcd is", .0.display())]
    NoCluster(PathBuf),
    #[error("{}", source.at(endpoints))]
    Etcd { endpoints: String, source: EtcdError },
    #[error(
        "nothing was written: the profiles in etcd changed after they were read (another push, or a key edited meanwhile); look at the difference again (--dry-run) and push again"
    )]
    Conflict,
    #[error(
        "nothing was written: etcd refuses a transaction of {ops} operations; its --max-txn-ops (default {DEFAULT_MAX_TXN_OPS}) must be at least {ops}. A push is one transaction, so that every replica sees it whole"
    )]
    TooManyOps { ops: usize },
    #[error(
        "nothing was written: etcd refuses a request of about {bytes} bytes; its --max-request-bytes (default {DEFAULT_MAX_REQUEST_BYTES}) must be at least {suggest}. A push is one transaction, so that every replica sees it whole"
    )]
    TooLarge { bytes: usize, suggest: usize },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "{} is not empty: pull into an empty directory, or pass --force to replace the profile files in it",
        .0.display()
    )]
    NotEmpty(PathBuf),
    #[error("etcd key {0:?} cannot be written as a file name in one directory")]
    BadKey(String),
    #[error("{}: a profile file changed while it was being checked; nothing was written", .0.display())]
    Changed(PathBuf),
}

impl ClusterError {
    fn etcd(settings: &ClusterSettings, source: EtcdError) -> ClusterError {
        ClusterError::Etcd { endpoints: settings.etcd.endpoints.join(","), source }
    }
}

/// What a push changes: keys added, changed (bytes before and after) and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The profiles revision in etcd the difference is against.
    pub revision: i64,
    pub added: Vec<(String, usize)>,
    pub changed: Vec<(String, usize, usize)>,
    pub removed: Vec<String>,
    pub unchanged: usize,
}

impl Plan {
    /// The difference between the files of a directory (name → text) and etcd's keys.
    pub fn new(etcd: &EtcdSettings, seen: &Seen, files: &BTreeMap<String, String>) -> Plan {
        let prefix = etcd.profiles_prefix();
        let mut plan = Plan { revision: seen.revision(), ..Plan::default() };
        let stored: BTreeMap<&str, _> = seen.files().collect();
        for (name, text) in files {
            let key = format!("{prefix}{name}");
            match stored.get(key.as_str()) {
                None => plan.added.push((key, text.len())),
                Some(s) if s.text.as_deref() == Some(text.as_str()) => plan.unchanged += 1,
                Some(s) => {
                    let before = s.text.as_ref().map_or(0, |t| t.len());
                    plan.changed.push((key, before, text.len()));
                }
            }
        }
        for key in stored.keys() {
            let name = &key[prefix.len()..];
            if !files.contains_key(name) {
                plan.removed.push(key.to_string());
            }
        }
        plan
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, bytes) in &self.added {
            writeln!(f, "+ {key} ({bytes} bytes)")?;
        }
        for (key, before, after) in &self.changed {
            writeln!(f, "~ {key} ({before} -> {after} bytes)")?;
        }
        for key in &self.removed {
            writeln!(f, "- {key}")?;
        }
        write!(
            f,
            "{} added, {} changed, {} removed, {} unchanged",
            self.added.len(),
            self.changed.len(),
            self.removed.len(),
            self.unchanged,
        )
    }
}

/// What a push did.
#[derive(Clone, Debug)]
pub struct Pushed {
    pub plan: Plan,
    /// The new profiles revision; `None` when nothing was written (a dry run, or no
    /// difference).
    pub revision: Option<i64>,
    pub dry_run: bool,
}

impl fmt::Display for Pushed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.plan)?;
        let before = self.plan.revision;
        match self.revision {
            Some(r) => write!(f, "pushed: profiles revision {r} (was {before})"),
            None if self.dry_run => {
                write!(f, "dry run: nothing written; the profiles in etcd are at revision {before}")
            }
            None => write!(f, "nothing to push: etcd holds these profiles at revision {before}"),
        }
    }
}

/// `steerdns cluster push DIR`: checks `dir` with the configuration at `config`, then
/// writes the difference with etcd (puts, deletes and the marker) in one transaction,
/// unless `dry_run`. The transaction applies only if no push and no edit of a profile key
/// came in between reading and writing.
pub fn push(config: &Path, dir: &Path, dry_run: bool) -> Result<Pushed, ClusterError> {
    let settings = settings(config)?;
    let before = read_profile_files(dir)?;
    config::load_from(config, None, ProfileSource::Dir(dir))?;
    let files = read_profile_files(dir)?;
    if files != before {
        return Err(ClusterError::Changed(dir.to_path_buf()));
    }
    run(async {
        let client = connect(&settings).await?;
        let seen = timed(profiles::fetch(&client, &settings.etcd)).await;
        let seen = seen.map_err(|e| ClusterError::etcd(&settings, e))?;
        let plan = Plan::new(&settings.etcd, &seen, &files);
        let revision = if dry_run || plan.is_empty() {
            None
        } else {
            Some(write(&client, &settings, &seen, &plan, &files).await?)
        };
        Ok(Pushed { plan, revision, dry_run })
    })
}

/// The push transaction.
async fn write(
    client: &Client,
    settings: &ClusterSettings,
    seen: &Seen,
    plan: &Plan,
    files: &BTreeMap<String, String>,
) -> Result<i64, ClusterError> {
    let etcd = &settings.etcd;
    let prefix = etcd.profiles_prefix();
    let marker = marker_key(etcd);
    let mut ops = Vec::new();
    let mut bytes = 0;
    let puts = plan.added.iter().map(|(k, _)| k).chain(plan.changed.iter().map(|(k, _, _)| k));
    for key in puts {
        let text = &files[&key[prefix.len()..]];
        bytes += key.len() + text.len();
        ops.push(TxnOp::put(key.as_str(), text.as_str(), None));
    }
    for key in &plan.removed {
        bytes += key.len();
        ops.push(TxnOp::delete(key.as_str(), None));
    }
    let note = serde_json::json!({
        "at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "files": files.len(),
    });
    ops.push(TxnOp::put(marker.as_str(), note.to_string(), None));
    let count = ops.len();
    // Nothing else was pushed (the marker is as read) and no profile key was written
    // after the revision read.
    let guards = [
        Compare::mod_revision(marker.as_str(), CompareOp::Equal, seen.marker_revision()),
        Compare::mod_revision(prefix.as_str(), CompareOp::Less, seen.read_at() + 1)
            .with_range(etcd::prefix_end(prefix.as_bytes())),
    ];
    let txn = Txn::new().when(guards).and_then(ops);
    let mut kv = client.kv_client();
    match tokio::time::timeout(WAIT * 6, kv.txn(txn)).await {
        Ok(Ok(resp)) if resp.succeeded() => Ok(resp.header().map_or(0, |h| h.revision())),
        Ok(Ok(_)) => Err(ClusterError::Conflict),
        Ok(Err(e)) => Err(refused(settings, e, count, bytes)),
        Err(_) => Err(ClusterError::etcd(settings, EtcdError::Timeout(WAIT * 6))),
    }
}

/// etcd's refusals of a large push, with the flag that raises the limit met.
fn refused(
    settings: &ClusterSettings,
    e: etcd_client::Error,
    ops: usize,
    bytes: usize,
) -> ClusterError {
    let text = e.to_string();
    if text.contains("too many operations in txn request") {
        ClusterError::TooManyOps { ops }
    } else if text.contains("request is too large") || text.contains("larger than max") {
        // A quarter more than the payload for etcd's own framing, in whole MiB.
        let suggest = (bytes + bytes / 4).div_ceil(1 << 20) << 20;
        ClusterError::TooLarge { bytes, suggest }
    } else {
        ClusterError::etcd(settings, e.into())
    }
}

/// What a pull wrote.
#[derive(Clone, Debug)]
pub struct Pulled {
    pub dir: PathBuf,
    pub revision: i64,
    pub written: usize,
    /// Profile files that were in the directory and are not in etcd (with `--force`).
    pub removed: Vec<String>,
    /// Keys whose names `cluster push` does not read (not `*.yaml` / `*.yml`, or hidden):
    /// a push from this directory would delete them.
    pub not_pushed: Vec<String>,
}

impl fmt::Display for Pulled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for name in &self.removed {
            writeln!(f, "- {name} (not in etcd)")?;
        }
        for name in &self.not_pushed {
            writeln!(
                f,
                "warning: {name} is not a *.yaml or *.yml name: check and push do not read it, and a push from this directory deletes its key"
            )?;
        }
        write!(
            f,
            "pulled {} files of profiles revision {} into {}",
            self.written,
            self.revision,
            self.dir.display()
        )
    }
}

/// `steerdns cluster pull DIR`: writes every profile key as a file of `dir`. A non-empty
/// `dir` is refused unless `force`; then its profile files not in etcd are removed, so
/// that the directory holds what etcd holds and pushing it back changes nothing.
pub fn pull(config: &Path, dir: &Path, force: bool) -> Result<Pulled, ClusterError> {
    let settings = settings(config)?;
    let seen = run(async {
        let client = connect(&settings).await?;
        let seen = timed(profiles::fetch(&client, &settings.etcd)).await;
        seen.map_err(|e| ClusterError::etcd(&settings, e))
    })?;
    let remote = seen.profiles()?;
    let prefix = settings.etcd.profiles_prefix();
    let mut files = BTreeMap::new();
    for f in &remote.files {
        let name = &f.key[prefix.len()..];
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(ClusterError::BadKey(f.key.clone()));
        }
        files.insert(name.to_string(), f.text.clone());
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ClusterError::Io { path, source }
    };
    let existing = match std::fs::read_dir(dir) {
        Ok(rd) => rd.collect::<Result<Vec<_>, _>>().map_err(io(dir))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io(dir)(e)),
    };
    if !existing.is_empty() && !force {
        return Err(ClusterError::NotEmpty(dir.to_path_buf()));
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut removed = Vec::new();
    for entry in existing {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if is_profile_file(&path) && !files.contains_key(&name) {
            std::fs::remove_file(&path).map_err(io(&path))?;
            removed.push(name);
        }
    }
    for (name, text) in &files {
        let path = dir.join(name);
        // Written whole (temporary file, then rename): a server watching the directory
        // never reads half a file.
        let tmp = dir.join(format!(".{name}.pull"));
        std::fs::write(&tmp, text.as_bytes()).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
    }
    let not_pushed = files.keys().filter(|n| !is_profile_name(n)).cloned().collect();
    Ok(Pulled {
        dir: dir.to_path_buf(),
        revision: remote.revision,
        written: files.len(),
        removed,
        not_pushed,
    })
}

/// The replicas registered and the profiles revision in etcd.
#[derive(Clone, Debug)]
pub struct Status {
    /// The profiles revision in etcd.
    pub revision: i64,
    pub nodes: Vec<NodeRecord>,
    /// Registrations that could not be read, with why.
    pub unreadable: Vec<(String, String)>,
}

impl Status {
    /// Whether at least one replica is registered and all serve the same revision.
    pub fn agreed(&self) -> bool {
        let mut revisions = self.nodes.iter().map(|n| n.revision);
        revisions.next().is_some_and(|first| revisions.all(|r| r == first))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: Vec<[String; 7]> = self
            .nodes
            .iter()
            .map(|n| {
                let current = match n.revision {
                    0 => "files",
                    r if r == self.revision => "yes",
                    _ => "no",
                };
                [
                    n.node.clone(),
                    n.revision.to_string(),
                    current.to_string(),
                    n.generation.to_string(),
                    n.version.clone(),
                    n.started.clone(),
                    n.dns.join(","),
                ]
            })
            .collect();
        let head = ["NODE", "REVISION", "CURRENT", "GENERATION", "VERSION", "STARTED", "DNS"];
        let mut widths = head.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, cells: [&str; 7]| {
            let text: Vec<String> =
                cells.iter().zip(widths).map(|(c, w)| format!("{c:w$}")).collect();
            writeln!(f, "{}", text.join("  ").trim_end())
        };
        line(f, head)?;
        for row in &rows {
            line(f, row.each_ref().map(String::as_str))?;
        }
        for (key, why) in &self.unreadable {
            writeln!(f, "unreadable registration {key}: {why}")?;
        }
        writeln!(f, "profiles in etcd: revision {}", self.revision)?;
        let mut by_revision: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
        for n in &self.nodes {
            by_revision.entry(n.revision).or_default().push(&n.node);
        }
        match by_revision.len() {
            0 => write!(f, "no replica is registered"),
            1 if self.nodes.len() == 1 => {
                write!(f, "the only replica serves revision {}", self.nodes[0].revision)
            }
            1 => write!(
                f,
                "all {} replicas serve revision {}",
                self.nodes.len(),
                self.nodes[0].revision
            ),
            _ => {
                let groups: Vec<String> = by_revision
                    .iter()
                    .map(|(r, nodes)| format!("{r} ({})", nodes.join(", ")))
                    .collect();
                write!(f, "replicas disagree: revision {}", groups.join(", revision "))
            }
        }
    }
}

/// `steerdns cluster status`: every registered replica and the revision it serves.
pub fn status(config: &Path) -> Result<Status, ClusterError> {
    let settings = settings(config)?;
    run(async {
        let client = connect(&settings).await?;
        let etcd_err = |e| ClusterError::etcd(&settings, e);
        let listed = timed(nodes::list(&client, &settings.etcd)).await.map_err(etcd_err)?;
        let seen = timed(profiles::fetch(&client, &settings.etcd)).await.map_err(etcd_err)?;
        Ok(Status { revision: seen.revision(), nodes: listed.nodes, unreadable: listed.unreadable })
    })
}

/// The configuration as `check` and `explain` load it: with `profiles: etcd`, with the
/// profiles read from etcd now.
pub fn load_configured(config: &Path) -> Result<Loaded, ConfigErrors> {
    let Some(settings) = config::cluster_settings(config)?.filter(|s| s.profiles_from_etcd) else {
        return config::load(config, None);
    };
    let at_config = |message: String| {
        ConfigErrors(vec![ConfigError { file: config.into(), pos: Default::default(), message }])
    };
    let seen = run(async {
        let client = connect(&settings).await?;
        let seen = timed(profiles::fetch(&client, &settings.etcd)).await;
        seen.map_err(|e| ClusterError::etcd(&settings, e))
    })
    .map_err(|e| at_config(format!("profiles: etcd: cannot read the profiles: {e}")))?;
    let profiles = seen.profiles()?;
    config::load_from(config, None, ProfileSource::Remote(&profiles))
}

fn settings(config: &Path) -> Result<ClusterSettings, ClusterError> {
    config::cluster_settings(config)?.ok_or_else(|| ClusterError::NoCluster(config.into()))
}

async fn connect(settings: &ClusterSettings) -> Result<Client, ClusterError> {
    let connected = timed(etcd::connect(&settings.etcd)).await;
    connected.map_err(|e| ClusterError::etcd(settings, e))
}

/// `f`, or a timeout error after `WAIT`.
async fn timed<T>(f: impl Future<Output = Result<T, EtcdError>>) -> Result<T, EtcdError> {
    tokio::time::timeout(WAIT, f).await.unwrap_or(Err(EtcdError::Timeout(WAIT)))
}

/// Runs `f` on a runtime of its own (the commands are synchronous).
fn run<T>(f: impl Future<Output = Result<T, ClusterError>>) -> Result<T, ClusterError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let runtime = runtime.map_err(|source| ClusterError::Io { path: PathBuf::new(), source })?;
    runtime.block_on(f)
}

/// The profile files of `dir` as `check` reads them (name → text).
fn read_profile_files(dir: &Path) -> Result<BTreeMap<String, String>, ClusterError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ClusterError::Io { path, source }
    };
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if !is_profile_file(&path) {
            continue;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        out.insert(name, std::fs::read_to_string(&path).map_err(io(&path))?);
    }
    Ok(out)
}

/// A file the profiles directory is read for (see `config::files`): a `*.yaml` or
/// `*.yml` name, not hidden, not a directory.
fn is_profile_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    is_profile_name(name) && !std::fs::metadata(path).is_ok_and(|m| m.is_dir())
}

fn is_profile_name(name: &str) -> bool {
    !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_agrees_only_on_one_revision() {
        let node = |name: &str, revision| NodeRecord {
            node: name.into(),
            revision,
            generation: 1,
            version: "0".into(),
            started: "2026-01-01T00:00:00Z".into(),
            dns: vec![],
            admin: None,
        };
        let mut s = Status { revision: 7, nodes: vec![], unreadable: vec![] };
        assert!(!s.agreed());
        assert!(s.to_string().ends_with("no replica is registered"), "{s}");
        s.nodes = vec![node("a", 7), node("b", 7)];
        assert!(s.agreed());
        assert!(s.to_string().ends_with("all 2 replicas serve revision 7"), "{s}");
        s.nodes.push(node("c", 5));
        assert!(!s.agreed());
        assert!(
            s.to_string().ends_with("replicas disagree: revision 5 (c), revision 7 (a, b)"),
            "{s}"
        );
    }
}
