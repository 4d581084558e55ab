//! Diagnostics for files an operator writes: positions, errors located at FILE:LINE:COL,
//! and the sink that collects every error of a load instead of stopping at the first.
//! A leaf module: the configuration and the geo data files both report through it.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_saphyr::{Location, Spanned};

/// A position in a configuration file (1-based; 0 when unknown). 32 bits, as in
/// serde-saphyr's own locations: every located raw value carries one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl Pos {
    pub fn of(s: &impl Located) -> Pos {
        s.pos()
    }
}

/// A value that knows where in its file it was written: serde-saphyr's `Spanned`, or the
/// configuration's own cheaper `raw::Loc`.
pub trait Located {
    fn pos(&self) -> Pos;
}

impl<T> Located for Spanned<T> {
    fn pos(&self) -> Pos {
        Pos::from(self.referenced)
    }
}

// Optional raw values are boxed (see `raw`).
impl<L: Located> Located for Box<L> {
    fn pos(&self) -> Pos {
        (**self).pos()
    }
}

impl From<Location> for Pos {
    fn from(l: Location) -> Pos {
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Pos { line: narrow(l.line()), col: narrow(l.column()) }
    }
}

/// One problem in the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub pos: Pos,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = self.pos.line.max(1);
        let col = self.pos.col.max(1);
        write!(f, "{}:{line}:{col}: {}", self.file.display(), self.message)
    }
}

/// Every error found while loading a configuration; never empty when returned as `Err`.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Collects errors for one file.
pub struct Sink<'a> {
    pub file: &'a Path,
    pub errors: &'a mut Vec<ConfigError>,
}

impl Sink<'_> {
    pub fn at(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.to_path_buf(),
            pos,
            message: message.into(),
        });
    }

    pub fn on(&mut self, s: &impl Located, message: impl Into<String>) {
        self.at(Pos::of(s), message);
    }
}

/// Turns a YAML parse or type error into a located error.
pub fn from_yaml(file: &Path, e: &serde_saphyr::Error) -> ConfigError {
    let pos = e.location().map(Pos::from).unwrap_or_default();
    ConfigError { file: file.to_path_buf(), pos, message: yaml_message(e) }
}

/// serde-saphyr's Display adds "error: line X column Y:" and a source snippet; keep only
/// the message, since FILE:LINE:COL already says where.
fn yaml_message(e: &serde_saphyr::Error) -> String {
    let full = e.to_string();
    let mut msg = full.lines().next().unwrap_or("invalid YAML").trim();
    msg = msg.strip_prefix("error:").unwrap_or(msg).trim_start();
    if let Some(rest) = msg.strip_prefix("line ")
        && let Some(i) = rest.find(": ")
        && rest[..i].contains(" column ")
    {
        msg = &rest[i + 2..];
    }
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// Reads a configuration file; failure is one located error.
pub fn read_file(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            pos: Pos::default(),
            message: format!("cannot read: {e}"),
        }])
    })
}
