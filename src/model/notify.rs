//! `notify:` as loaded: the webhooks that endpoint and profile status changes are posted
//! to (`docs/notifications.md`). Secrets are read at load, so a reload picks up a rotated
//! token; they never show in `Debug` output or logs.

use std::fmt;
use std::time::Duration;

/// Every webhook and the bound of each one's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifySettings {
    pub webhooks: Vec<Webhook>,
    /// How many messages each webhook's queue holds.
    pub queue: usize,
    /// Names this server in messages: `cluster.node`, else the host name.
    pub server: String,
}

/// One receiver of status changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    pub name: String,
    /// Where requests go (for Alertmanager, with `/api/v2/alerts` added).
    pub url: http::Uri,
    pub format: Format,
    /// The longest one attempt may take.
    pub timeout: Duration,
    /// Extra headers, checked to be valid names and ASCII values.
    pub headers: Vec<(String, String)>,
    /// Sent as `Authorization: Bearer <token>`.
    pub secret: Option<Secret>,
    /// Attempts after the first.
    pub retries: u32,
    /// Alertmanager: how often the alerts still open are sent again (unused by the other
    /// formats).
    pub refresh: Duration,
}

/// The shape of the request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Generic,
    Slack,
    Alertmanager,
}

impl Format {
    pub fn parse(text: &str) -> Option<Format> {
        match text {
            "generic" => Some(Format::Generic),
            "slack" => Some(Format::Slack),
            "alertmanager" => Some(Format::Alertmanager),
            _ => None,
        }
    }
}

/// A token read from a file; `Debug` shows only that there is one.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}
