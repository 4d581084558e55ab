//! What the CLI subcommands do, kept out of `main.rs` so tests can call them.

use std::path::Path;

use crate::config::{self, ConfigErrors};

/// `steerdns check`: the summary line on success, or every error.
pub fn check(path: &Path) -> Result<String, ConfigErrors> {
    let snap = config::load(path, None)?;
    Ok(format!("ok: {} profiles, {} endpoints", snap.profiles.len(), snap.endpoint_count()))
}
