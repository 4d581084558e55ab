//! What `cluster:` configures: this replica's name, the etcd cluster that holds the shared
//! truth (profiles, health views, operator overrides, pushed health) and the rule that
//! turns the health views of every replica into one status. Read once at startup; a change
//! needs a restart.

use std::path::PathBuf;
use std::time::Duration;

/// `cluster:` as loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    /// This replica's name (`cluster.node`, default the host name): the last label of its
    /// keys under `nodes/` and `health/`.
    pub node: String,
    pub etcd: EtcdSettings,
    /// How the fresh health views of the replicas decide an endpoint's status.
    pub quorum: Quorum,
    /// Time to live of the lease this replica's keys (registration, health views) live
    /// under: they vanish this long after the replica stops renewing it.
    pub lease_ttl: Duration,
    /// Profiles come from `<prefix>profiles/` instead of a directory (`profiles: etcd`).
    pub profiles_from_etcd: bool,
    /// The copy of the last applied profiles, next to the configuration file; a replica
    /// that starts while etcd is down serves from it.
    pub cache_file: PathBuf,
}

/// How to reach etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    /// `http://HOST:PORT` or `https://HOST:PORT`.
    pub endpoints: Vec<String>,
    /// Every key steerdns reads or writes starts with it; ends with `/`.
    pub prefix: String,
    pub tls: Option<EtcdTls>,
    pub auth: Option<EtcdAuth>,
}

impl EtcdSettings {
    /// `<prefix>profiles/`.
    pub fn profiles_prefix(&self) -> String {
        format!("{}profiles/", self.prefix)
    }

    /// `<prefix>nodes/`.
    pub fn nodes_prefix(&self) -> String {
        format!("{}nodes/", self.prefix)
    }

    /// `<prefix>health/`.
    pub fn health_prefix(&self) -> String {
        format!("{}health/", self.prefix)
    }

    /// `<prefix>overrides/`.
    pub fn overrides_prefix(&self) -> String {
        format!("{}overrides/", self.prefix)
    }

    /// `<prefix>health_pushed/`: health pushed through the admin API, one key per endpoint (the
    /// key `<prefix>pushed` itself is `cluster push`'s marker).
    pub fn pushed_prefix(&self) -> String {
        format!("{}health_pushed/", self.prefix)
    }

    /// `<prefix>leaders/`: one key per role led by one replica of the cluster.
    pub fn leaders_prefix(&self) -> String {
        format!("{}leaders/", self.prefix)
    }

    /// `<prefix>load/`: the load shares the leader computes and the loads pushed to any
    /// replica.
    pub fn load_prefix(&self) -> String {
        format!("{}load/", self.prefix)
    }
}

/// TLS towards etcd: the CA that signs its certificates, and an optional client
/// certificate (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert_key: Option<(PathBuf, PathBuf)>,
}

/// etcd's user authentication; the password is read from its file at startup.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdAuth {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for EtcdAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAuth").field("username", &self.username).finish_non_exhaustive()
    }
}

/// How many fresh vantage points must see an endpoint failing for it to be failed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quorum {
    /// One is enough.
    Any,
    /// More than half (the default).
    Majority,
    /// Every one.
    All,
    /// At least this percentage (1..=100).
    Percent(u8),
}

impl Quorum {
    /// Parses `any`, `majority`, `all` or `N%` (N in 1..=100).
    pub fn parse(text: &str) -> Option<Quorum> {
        match text {
            "any" => Some(Quorum::Any),
            "majority" => Some(Quorum::Majority),
            "all" => Some(Quorum::All),
            _ => {
                let n: u8 = text.strip_suffix('%')?.trim().parse().ok()?;
                (1..=100).contains(&n).then_some(Quorum::Percent(n))
            }
        }
    }

    /// Whether `failing` of `fresh` vantage points are enough to fail an endpoint over.
    /// No fresh vantage point at all fails nothing.
    pub fn fails(self, failing: usize, fresh: usize) -> bool {
        if fresh == 0 || failing == 0 {
            return false;
        }
        match self {
            Quorum::Any => true,
            Quorum::Majority => failing * 2 > fresh,
            Quorum::All => failing >= fresh,
            Quorum::Percent(n) => failing * 100 >= fresh * usize::from(n),
        }
    }
}

impl std::fmt::Display for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Quorum::Any => f.write_str("any"),
            Quorum::Majority => f.write_str("majority"),
            Quorum::All => f.write_str("all"),
            Quorum::Percent(n) => write!(f, "{n}%"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_texts() {
        let cases = [
            ("any", Some(Quorum::Any)),
            ("majority", Some(Quorum::Majority)),
            ("all", Some(Quorum::All)),
            ("50%", Some(Quorum::Percent(50))),
            ("100%", Some(Quorum::Percent(100))),
            ("1%", Some(Quorum::Percent(1))),
            ("0%", None),
            ("101%", None),
            ("50", None),
            ("most", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(Quorum::parse(text), want, "{text:?}");
            if let Some(q) = want {
                assert_eq!(q.to_string(), text);
            }
        }
    }

    #[test]
    fn quorum_rules() {
        // (rule, failing, fresh, fails over)
        let cases = [
            (Quorum::Any, 1, 3, true),
            (Quorum::Any, 0, 3, false),
            (Quorum::Majority, 1, 3, false),
            (Quorum::Majority, 2, 3, true),
            (Quorum::Majority, 1, 2, false),
            (Quorum::Majority, 2, 2, true),
            (Quorum::Majority, 1, 1, true),
            (Quorum::All, 2, 3, false),
            (Quorum::All, 3, 3, true),
            (Quorum::All, 1, 1, true),
            (Quorum::Percent(34), 1, 3, false),
            (Quorum::Percent(33), 1, 3, true),
            (Quorum::Percent(50), 1, 2, true),
            (Quorum::Percent(100), 2, 3, false),
            (Quorum::Any, 0, 0, false),
            (Quorum::All, 0, 0, false),
        ];
        for (q, failing, fresh, want) in cases {
            assert_eq!(q.fails(failing, fresh), want, "{q} {failing}/{fresh}");
        }
    }
}
