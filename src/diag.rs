//! Diagnostics for files an operator writes: positions, errors located at FILE:LINE:COL,
//! and the sink that collects every error of a load instead of stopping at the first.
//! A leaf module: the configuration and the geo data files both report through it.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_saphyr::{Location, Spanned};

mod duplicate;
mod layout;

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

/// Every error of a YAML text that failed to parse with `e`. A layout mistake (see
/// `layout`) makes the parser stumble somewhere after it, often with a message about
/// something else, so when the text has any, they are the errors, each where it is;
/// otherwise the parser's error stands, in plain words.
/// `lines_before` is the number of lines of the file before `text` (a part of it).
pub fn yaml_errors(
    file: &Path,
    text: &str,
    lines_before: u32,
    e: &serde_saphyr::Error,
) -> Vec<ConfigError> {
    let mistakes = layout::mistakes(text, lines_before);
    if mistakes.is_empty() {
        let mut error = from_yaml(file, e);
        if let serde_saphyr::Error::DuplicateMappingKey { key: Some(key), .. } = e.without_snippet()
            && let Some(first) = duplicate::first_of(text, key, error.pos)
        {
            let first = Pos { line: first.line + lines_before, ..first };
            error.message =
                format!("duplicate key `{key}` (first at {}:{})", first.line, first.col);
        }
        if error.pos.line > 0 {
            error.pos.line += lines_before;
        }
        return vec![error];
    }
    let at = |(pos, message)| ConfigError { file: file.to_path_buf(), pos, message };
    mistakes.into_iter().map(at).collect()
}

/// Turns a YAML parse or type error into a located error.
pub fn from_yaml(file: &Path, e: &serde_saphyr::Error) -> ConfigError {
    let pos = e.location().map(Pos::from).unwrap_or_default();
    ConfigError { file: file.to_path_buf(), pos, message: yaml_message(e) }
}

/// The message of a YAML parse or type error, in the words of a YAML file rather than of
/// the libraries reading it (no Rust types, no deserializer options).
fn yaml_message(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error as E;
    match e.without_snippet() {
        E::DuplicateMappingKey { key: Some(key), .. } => format!("duplicate key `{key}`"),
        E::DuplicateMappingKey { key: None, .. } => "duplicate key".to_string(),
        E::SerdeInvalidType { unexpected, expected, .. }
        | E::SerdeInvalidValue { unexpected, expected, .. } => {
            format!("expected {}, got {}", plain_expected(expected), plain_unexpected(unexpected))
        }
        E::Unexpected { expected, .. } => format!("expected {}", plain_expected(expected)),
        E::NullIntoString { .. } => "a value is needed here, not an empty value or null".into(),
        E::InvalidBooleanStrict { .. } => "expected true or false".to_string(),
        E::InvalidScalar { ty: "boolean", .. } => "expected true or false".to_string(),
        E::Eof { .. } => "unexpected end of file".to_string(),
        E::Budget { .. } => "the document is too large or too deeply nested".to_string(),
        _ => plain_text(&rendered(e)),
    }
}

/// What a value should have been, as a YAML file shows it.
fn plain_expected(expected: &str) -> String {
    let plain = match expected {
        "mapping start" | "a map" | "map" => "a mapping (`key: value` lines, or `{ key: value }`)",
        "sequence start" | "a sequence" | "sequence" => "a list (`- item` lines, or `[a, b]`)",
        "string scalar" | "a string" => "a string",
        "a boolean" => "true or false",
        e if e.starts_with("struct ") => "a mapping (`key: value` lines, or `{ key: value }`)",
        e if e.starts_with("a sequence") => "a list (`- item` lines, or `[a, b]`)",
        e => e,
    };
    plain.to_string()
}

/// What a value was, from serde's description of it.
fn plain_unexpected(unexpected: &str) -> String {
    match unexpected {
        "sequence" => "a list".to_string(),
        "map" => "a mapping".to_string(),
        "unit value" => "an empty value".to_string(),
        u => u.replace("string ", "").replace("integer `", "`").replace("boolean `", "`"),
    }
}

/// Parser messages (libyaml's wording, which granit-parser keeps) said plainly.
fn plain_text(msg: &str) -> String {
    const PLAIN: &[(&str, &str)] = &[
        (
            "mapping values are not allowed in this context",
            "a `key: value` cannot start here; check this line's indentation against the line before",
        ),
        (
            "did not find expected '-' indicator",
            "expected a list item (`- `) at this indentation, as the lines above",
        ),
        ("did not find expected key", "expected a `key:` at this indentation, as the lines above"),
        (
            "tabs disallowed within this context",
            "a tab in the indentation; YAML indents with spaces only",
        ),
        (
            "data did not match any variant of untagged enum StatusSpec",
            "expected a status code (`200`) or a range of them (`200-299`)",
        ),
    ];
    let msg = msg.strip_prefix("while parsing a block mapping, ").unwrap_or(msg);
    let msg = msg.strip_prefix("while parsing a block collection, ").unwrap_or(msg);
    match PLAIN.iter().find(|(theirs, _)| msg.starts_with(theirs)) {
        Some((_, ours)) => ours.to_string(),
        None => msg.to_string(),
    }
}

/// serde-saphyr's Display adds "error: line X column Y:" and a source snippet; keep only
/// the message, since FILE:LINE:COL already says where.
fn rendered(e: &serde_saphyr::Error) -> String {
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

/// Reads a configuration file of at most `limit`; failure is one error naming the file.
pub fn read_file(path: &Path, limit: Limit) -> Result<String, ConfigErrors> {
    read_limited(path, limit).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            pos: Pos::default(),
            message: format!("cannot read: {e}"),
        }])
    })
}

/// The most a file read may hold, and what sets it (named in the error, so an operator
/// knows what to raise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    /// The configuration key that sets the limit, or what a fixed limit is for.
    pub set_by: &'static str,
}

/// Why a file could not be read (callers say which file, and that it could not be read).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("a dangling symbolic link")]
    Dangling,
    #[error("a symbolic link loop")]
    Loop,
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    #[error("too large: {size} bytes, more than the {} bytes of {}", limit.bytes, limit.set_by)]
    TooLarge { size: u64, limit: Limit },
    #[error("not valid UTF-8")]
    NotUtf8,
}

/// Opens a file for reading that must be a regular file. Opened non-blocking, so that a
/// FIFO with no writer cannot hang the open, then checked on the opened descriptor (no
/// window between check and use): FIFOs, sockets and devices would block a reader forever
/// or never end.
pub fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), FileError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    let meta = file.metadata()?;
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Ok((file, meta));
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_dir() {
        "a directory"
    } else {
        "an unknown kind of file"
    };
    Err(FileError::NotRegular(kind))
}

fn open_error(path: &Path, e: std::io::Error) -> FileError {
    match e.raw_os_error() {
        Some(libc::ELOOP) => FileError::Loop,
        Some(libc::ENOENT)
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) =>
        {
            FileError::Dangling
        }
        _ => FileError::Io(e),
    }
}

/// Reads a regular file (see `open_regular`) of at most `limit` bytes as text. The size
/// is checked before reading and the read stops past the limit, so a file that grows
/// meanwhile cannot exhaust memory either.
pub fn read_limited(path: &Path, limit: Limit) -> Result<String, FileError> {
    use std::io::Read;
    let (file, meta) = open_regular(path)?;
    if meta.len() > limit.bytes {
        return Err(FileError::TooLarge { size: meta.len(), limit });
    }
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).saturating_add(1));
    file.take(limit.bytes.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit.bytes {
        return Err(FileError::TooLarge { size: buf.len() as u64, limit });
    }
    String::from_utf8(buf).map_err(|_| FileError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: Limit = Limit { bytes: 1 << 20, set_by: "a test" };

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "abcd").unwrap();
        assert_eq!(read_limited(&file, BIG).unwrap(), "abcd");
        assert_eq!(read_limited(&file, Limit { bytes: 4, ..BIG }).unwrap(), "abcd");
        let small = Limit { bytes: 3, set_by: "limits.test" };
        let e = read_limited(&file, small).unwrap_err().to_string();
        assert_eq!(e, "too large: 4 bytes, more than the 3 bytes of limits.test");

        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(
            read_limited(&fifo, BIG).unwrap_err().to_string(),
            "not a regular file (a FIFO)"
        );
        let e = read_limited(Path::new("/dev/zero"), BIG).unwrap_err().to_string();
        assert_eq!(e, "not a regular file (a character device)");
        let e = read_limited(dir.path(), BIG).unwrap_err().to_string();
        assert_eq!(e, "not a regular file (a directory)");

        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert_eq!(
            read_limited(&dangling, BIG).unwrap_err().to_string(),
            "a dangling symbolic link"
        );
        let looped = dir.path().join("loop");
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        assert_eq!(read_limited(&looped, BIG).unwrap_err().to_string(), "a symbolic link loop");
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert_eq!(read_limited(&file, BIG).unwrap_err().to_string(), "not valid UTF-8");
    }
}
