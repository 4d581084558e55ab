//! Monitors whose results come from outside rather than from a probe: `pushed` (set
//! through the admin API) and `file` (read from a watched file), and what they count as
//! while they have no data.

use std::path::PathBuf;
use std::time::Duration;

/// What a monitor without data counts as: no live push, or no line for the endpoint in
/// its file (`docs/probing.md`, "Missing data").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MissingData {
    Healthy,
    Unhealthy,
    /// The last result the monitor had; `checking` if it never had one.
    LastKnown,
}

impl MissingData {
    pub fn as_str(self) -> &'static str {
        match self {
            MissingData::Healthy => "healthy",
            MissingData::Unhealthy => "unhealthy",
            MissingData::LastKnown => "last_known",
        }
    }

    pub fn parse(text: &str) -> Option<MissingData> {
        [MissingData::Healthy, MissingData::Unhealthy, MissingData::LastKnown]
            .into_iter()
            .find(|m| m.as_str() == text)
    }
}

/// The settings of a `pushed` or `file` monitor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExternalMonitor {
    pub missing: MissingData,
    /// `file` monitors: the file read.
    pub file: Option<PathBuf>,
    /// `file` monitors: data in a file not modified for longer than this counts as missing.
    pub max_age: Option<Duration>,
}
