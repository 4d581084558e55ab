//! Reads the profile directory: every `*.yaml` file in name order, split into pieces of
//! whole YAML documents, each piece parsed unless the running snapshot read the same bytes
//! (its profiles are then taken over, see `reuse`). A reload after an edit parses only the
//! documents that changed, not the whole file they are in. Files are read on all cores;
//! results come back in file order, so ids and error order do not depend on thread timing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::raw::{RawProfile, with_line_base};
use super::remote::{RemoteFile, RemoteProfiles, location};
use super::reuse::{self, Piece, ProfileFile, Reuse};
use super::yaml;
use super::{Limits, par};
use crate::diag::{self, ConfigError, Limit, Pos, from_yaml};

/// One profile document and the file it came from.
pub struct Source {
    pub file: Arc<Path>,
    pub doc: Doc,
}

impl Source {
    /// Where errors about the profile as a whole point (its `name:`). Taken-over profiles
    /// have no position, but a load that reports errors never keeps them (see `reuse`).
    pub fn name_pos(&self) -> Pos {
        match &self.doc {
            Doc::Raw(raw) => Pos::of(&raw.name),
            Doc::Reused(_) => Pos::default(),
        }
    }
}

/// A document parsed now, or one taken over unchanged from the running snapshot.
pub enum Doc {
    Raw(Box<RawProfile>),
    /// The profile's id in the previous snapshot.
    Reused(usize),
}

/// Every `*.yaml` / `*.yml` file of `dir`, in name order, each split into documents, and
/// what each file held (for the next reload's `reuse`). Entries with such a name that are
/// not regular files (FIFOs, sockets, devices, dangling symbolic links, link loops) are
/// errors, not skipped: the operator meant them to hold profiles. Subdirectories are not
/// read.
pub fn read_dir(
    dir: &Path,
    reuse: Option<&Reuse<'_>>,
    limits: &Limits,
    errors: &mut Vec<ConfigError>,
) -> (Vec<Source>, Vec<ProfileFile>) {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_yaml(p) && !is_dir(p))
            .collect(),
        Err(e) => {
            errors.push(ConfigError {
                file: dir.to_path_buf(),
                pos: Pos::default(),
                message: format!("cannot read profiles directory: {e}"),
            });
            return (Vec::new(), Vec::new());
        }
    };
    files.sort();
    // Checked before reading, so an oversized directory is refused without being read;
    // each file's own read enforces its limit (and a file growing meanwhile stops there).
    let listed: u64 = files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
    if over_total(dir, listed, limits, errors) {
        return (Vec::new(), Vec::new());
    }
    let reads = read_parallel(&files, reuse, limits.profile_file);
    let read_total: u64 =
        reads.iter().filter_map(|r| r.identity.as_ref()).map(|i| i.len as u64).sum();
    if over_total(dir, read_total, limits, errors) {
        return (Vec::new(), Vec::new());
    }
    gather(files.iter().cloned().zip(reads), errors)
}

/// The documents of every file read, in order, with what each file held; the errors go
/// to `errors`.
fn gather(
    reads: impl Iterator<Item = (PathBuf, FileRead)>,
    errors: &mut Vec<ConfigError>,
) -> (Vec<Source>, Vec<ProfileFile>) {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for (path, read) in reads {
        errors.extend(read.errors);
        if let Some(Identity { len, hash, pieces }) = read.identity {
            let ids = out.len()..out.len() + read.docs.len();
            seen.push(ProfileFile { path, len, hash, ids, pieces });
        }
        out.extend(read.docs);
    }
    (out, seen)
}

fn over_total(dir: &Path, total: u64, limits: &Limits, errors: &mut Vec<ConfigError>) -> bool {
    let limit = limits.profiles_total;
    if total <= limit.bytes {
        return false;
    }
    errors.push(ConfigError {
        file: dir.to_path_buf(),
        pos: Pos::default(),
        message: format!(
            "the profile files hold {total} bytes, more than the {} bytes of {}",
            limit.bytes, limit.set_by
        ),
    });
    true
}

/// What reading one file gave: its documents, its errors, and its identity when it could
/// be read.
#[derive(Default)]
struct FileRead {
    docs: Vec<Source>,
    errors: Vec<ConfigError>,
    identity: Option<Identity>,
}

/// What the next reload compares a file with: its length, content hash and pieces.
struct Identity {
    len: usize,
    hash: u64,
    pieces: Arc<[Piece]>,
}

/// Reads (and parses, unless taken over) every file, spread over the cores (see `par`):
/// YAML parsing dominates a large load.
fn read_parallel(files: &[PathBuf], reuse: Option<&Reuse<'_>>, limit: Limit) -> Vec<FileRead> {
    let read =
        |part: &[PathBuf]| part.iter().map(|f| read_file(f, reuse, limit)).collect::<Vec<_>>();
    par::chunked(files, 1, read).into_iter().flatten().collect()
}

/// Every profile of one file (see `read_text`).
fn read_file(path: &Path, reuse: Option<&Reuse<'_>>, limit: Limit) -> FileRead {
    let mut read = FileRead::default();
    let text = match diag::read_file(path, limit) {
        Ok(t) => t,
        Err(e) => {
            read.errors.extend(e.0);
            return read;
        }
    };
    if text.trim().is_empty() {
        // Most likely caught halfway through a non-atomic write: refuse rather than
        // silently drop every profile the file held.
        read.errors.push(ConfigError {
            file: path.to_path_buf(),
            pos: Pos::default(),
            message: "the file is empty; delete it to remove its profiles".into(),
        });
    }
    from_text(path, &text, reuse, read)
}

fn from_text(path: &Path, text: &str, reuse: Option<&Reuse<'_>>, mut read: FileRead) -> FileRead {
    let file: Arc<Path> = Arc::from(path);
    let identity = read_text(&file, text, reuse.and_then(|r| r.file(path)), &mut read);
    read.identity = Some(identity);
    read
}

/// The profile files of `remote` (etcd keys), as `read_dir` reads a directory's: each
/// named `etcd:<key>` in errors and in what the next reload compares.
pub fn read_remote(
    remote: &RemoteProfiles,
    reuse: Option<&Reuse<'_>>,
    limits: &Limits,
    errors: &mut Vec<ConfigError>,
) -> (Vec<Source>, Vec<ProfileFile>) {
    let place = location(remote.files.first().map_or("", |f| f.key.as_str()));
    if over_total(&place, remote.total_len(), limits, errors) {
        return (Vec::new(), Vec::new());
    }
    let read = |part: &[RemoteFile]| {
        part.iter().map(|f| remote_file(f, reuse, limits.profile_file)).collect::<Vec<_>>()
    };
    let reads: Vec<FileRead> = par::chunked(&remote.files, 1, read).into_iter().flatten().collect();
    gather(remote.files.iter().map(RemoteFile::location).zip(reads), errors)
}

fn remote_file(f: &RemoteFile, reuse: Option<&Reuse<'_>>, limit: Limit) -> FileRead {
    let mut read = FileRead::default();
    let path = f.location();
    let message = if f.text.len() as u64 > limit.bytes {
        Some(format!(
            "the key holds {} bytes, more than the {} bytes of {}",
            f.text.len(),
            limit.bytes,
            limit.set_by
        ))
    } else if f.text.trim().is_empty() {
        Some("the key is empty; delete it to remove its profiles".to_string())
    } else {
        None
    };
    if let Some(message) = message {
        read.errors.push(ConfigError { file: path, pos: Pos::default(), message });
        return read;
    }
    from_text(&path, &f.text, reuse, read)
}

/// The profiles of a file's text: all taken over from `prev` (what the running snapshot
/// read from the same path) when the bytes are the same, else piece by piece.
fn read_text(
    file: &Arc<Path>,
    text: &str,
    prev: Option<&ProfileFile>,
    read: &mut FileRead,
) -> Identity {
    let hash = reuse::content_hash(text);
    if let Some(p) = prev.filter(|p| p.len == text.len() && p.hash == hash) {
        read.docs = p.ids.clone().map(|old| reused(file, old)).collect();
        return Identity { len: text.len(), hash, pieces: p.pieces.clone() };
    }
    let mut previous = prev.map(ProfileFile::pieces_by_content).unwrap_or_default();
    let mut pieces = Vec::new();
    for (piece, line) in split(text) {
        let (len, hash) = (piece.len(), reuse::content_hash(piece));
        let before = read.docs.len();
        match previous.remove(&(len, hash)) {
            Some(ids) => read.docs.extend(ids.map(|old| reused(file, old))),
            None => parse_piece(file, piece, line, read),
        }
        pieces.push(Piece { len, hash, profiles: read.docs.len() - before });
    }
    Identity { len: text.len(), hash, pieces: pieces.into() }
}

fn reused(file: &Arc<Path>, old: usize) -> Source {
    Source { file: file.clone(), doc: Doc::Reused(old) }
}

/// Splits a file's text before every line that starts a document (`---` followed by a
/// blank or the line's end). YAML reserves such a line at column 0 for that marker: it
/// ends any block or plain scalar, and inside a quoted scalar or a flow collection it is an
/// error either way, so the pieces of a valid file parse to exactly its documents. Each
/// piece comes with the number of lines before it. A file stays one piece when it has a
/// directive line (`%YAML`, `%TAG`: it belongs to the document after it), or a carriage
/// return that does not end a line (the parser counts it as a line break; `lines` here
/// would not).
fn split(text: &str) -> Vec<(&str, u32)> {
    let mut pieces = Vec::new();
    let (mut start, mut start_line, mut at, mut line) = (0, 0, 0, 0);
    for l in text.split_inclusive('\n') {
        let body = l.strip_suffix('\n').map_or(l, |b| b.strip_suffix('\r').unwrap_or(b));
        if l.trim_start_matches('\u{FEFF}').starts_with('%') || body.contains('\r') {
            return vec![(text, 0)];
        }
        if at > start && starts_document(l) {
            pieces.push((&text[start..at], start_line));
            (start, start_line) = (at, line);
        }
        at += l.len();
        line += 1;
    }
    pieces.push((&text[start..], start_line));
    pieces
}

fn starts_document(line: &str) -> bool {
    line.strip_prefix("---")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// All documents of one piece, positions counted from the file's start. The quick reader
/// (`yaml`) takes the common shapes; serde-saphyr reads whatever it leaves. The whole-piece
/// parse is fast; only when it fails is the piece read again document by document, so
/// that a type error in one document still lets the others load and report their own
/// errors (the streaming reader copies its buffer per document, too slow to be the rule).
fn parse_piece(file: &Arc<Path>, piece: &str, line: u32, read: &mut FileRead) {
    let source = |raw: RawProfile| Source { file: file.clone(), doc: Doc::Raw(Box::new(raw)) };
    with_line_base(line, || {
        if let Some(docs) = yaml::from_multiple::<RawProfile>(piece) {
            #[cfg(debug_assertions)]
            yaml::check_against_serde_saphyr(piece, &docs);
            read.docs.extend(docs.into_iter().map(source));
            return;
        }
        if let Ok(docs) = serde_saphyr::from_multiple::<RawProfile>(piece) {
            read.docs.extend(docs.into_iter().map(source));
            return;
        }
        let mut reader = std::io::Cursor::new(piece.as_bytes());
        let mut failed = Vec::new();
        for doc in serde_saphyr::read::<_, RawProfile>(&mut reader) {
            match doc {
                Ok(raw) => read.docs.push(source(raw)),
                Err(e) => failed.push(e),
            }
        }
        // Layout mistakes, when the piece has any, stand for the parser's errors: those are
        // where it stumbled after them (see `diag::yaml_errors`).
        match failed.first() {
            Some(first) if failed.len() == 1 => {
                read.errors.extend(diag::yaml_errors(file, piece, line, first));
            }
            _ => read.errors.extend(failed.iter().map(|e| shifted(from_yaml(file, e), line))),
        }
    });
}

/// A parse error's position in the whole file, given the lines before its piece.
fn shifted(mut e: ConfigError, lines_before: u32) -> ConfigError {
    if e.pos.line > 0 {
        e.pos.line += lines_before;
    }
    e
}

fn is_yaml(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

/// A directory, or a link to one (a link that cannot be followed is not: it is reported).
fn is_dir(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_split_before_each_document_start_line() {
        let cases: &[(&str, &[(&str, u32)])] = &[
            ("a: 1\n", &[("a: 1\n", 0)]),
            ("a: 1\n---\nb: 2\n", &[("a: 1\n", 0), ("---\nb: 2\n", 1)]),
            ("---\na: 1\n--- # two\nb: 2", &[("---\na: 1\n", 0), ("--- # two\nb: 2", 2)]),
            ("a: 1\n---\t\r\nb: 2\n---", &[("a: 1\n", 0), ("---\t\r\nb: 2\n", 1), ("---", 3)]),
            // Not markers: more dashes, indented, or inside a document's line.
            ("a: 1\n----\n  ---\nb: '---'\n", &[("a: 1\n----\n  ---\nb: '---'\n", 0)]),
            // A directive belongs to the document after it: the file stays whole.
            ("a: 1\n...\n%YAML 1.2\n---\nb: 2\n", &[("a: 1\n...\n%YAML 1.2\n---\nb: 2\n", 0)]),
            ("\u{FEFF}%YAML 1.2\n---\nb: 2\n", &[("\u{FEFF}%YAML 1.2\n---\nb: 2\n", 0)]),
            // CRLF line ends split; a lone CR (a line break to the parser) keeps it whole.
            ("a: 1\r\n---\r\nb: 2\r\n", &[("a: 1\r\n", 0), ("---\r\nb: 2\r\n", 1)]),
            ("a: 1\rc: 3\n---\nb: 2\n", &[("a: 1\rc: 3\n---\nb: 2\n", 0)]),
            ("", &[("", 0)]),
        ];
        for (text, want) in cases {
            assert_eq!(split(text), *want, "{text:?}");
        }
    }

    /// Parsing piece by piece gives the documents, and the positions, of the whole file:
    /// block and quoted scalars holding dashes, anchors, comments and a document end
    /// marker followed by a bare document.
    #[test]
    fn pieces_parse_to_the_whole_files_documents_and_positions() {
        let text = "# leading comment\nname: a\nrouting: priority\nendpoints:\n  - &e { name: x, target: 192.0.2.1 }\n---\nname: b # ---\nrouting: \"weighted\n  ---\"\nendpoints: []\n...\nname: c\nrouting: >\n  ---\n  multivalue\nendpoints: [ { name: y,\n    target: 192.0.2.2 } ]\n--- \n\n---\nname: d\nrouting: priority\n";
        let whole: Vec<RawProfile> = serde_saphyr::from_multiple(text).unwrap();
        assert_eq!(whole.len(), 4, "the empty document is no profile");
        let file: Arc<Path> = Arc::from(Path::new("p.yaml"));
        let mut read = FileRead::default();
        let pieces = split(text);
        assert_eq!(pieces.len(), 4, "{pieces:?}");
        for (piece, line) in pieces {
            parse_piece(&file, piece, line, &mut read);
        }
        assert!(read.errors.is_empty(), "{:?}", read.errors);
        let parsed: Vec<String> = read
            .docs
            .iter()
            .map(|s| match &s.doc {
                Doc::Raw(raw) => format!("{raw:?}"),
                Doc::Reused(_) => unreachable!(),
            })
            .collect();
        let want: Vec<String> = whole.iter().map(|raw| format!("{raw:?}")).collect();
        assert_eq!(parsed, want);
        assert_eq!(read.docs[3].name_pos(), Pos { line: 21, col: 7 });
    }

    #[test]
    fn a_parse_error_names_its_line_in_the_whole_file() {
        let text = "name: a\nrouting: priority\n---\nname: b\nrouting: [\n";
        let file: Arc<Path> = Arc::from(Path::new("p.yaml"));
        let mut read = FileRead::default();
        for (piece, line) in split(text) {
            parse_piece(&file, piece, line, &mut read);
        }
        assert_eq!(read.docs.len(), 1);
        let lines: Vec<u32> = read.errors.iter().map(|e| e.pos.line).collect();
        let whole = serde_saphyr::from_multiple::<RawProfile>(text).unwrap_err();
        assert_eq!(lines, [from_yaml(&file, &whole).pos.line]);
        assert!(lines[0] >= 5, "{lines:?}");
    }
}
