//! The health file format of `file` monitors (after gdnsd's extfile): one endpoint a line,
//! `ENDPOINT STATUS [REASON]`, `#` starting a comment. ENDPOINT is `PROFILE/ENDPOINT` with
//! the profile's absolute name (the final dot optional), or a bare endpoint name meaning
//! that endpoint of every profile; STATUS is `up`, `healthy`, `down` or `unhealthy`.
//!
//! Pure: the watcher reads the bytes, this turns them into statuses, keeping every good
//! line and locating every bad one.

use std::collections::HashMap;

/// The most lines read; the rest of a longer file is ignored (and reported).
pub const MAX_LINES: usize = 100_000;
/// The longest reason kept, in bytes.
pub const MAX_REASON: usize = 256;

/// One endpoint's status as the file gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStatus {
    pub healthy: bool,
    /// The third field, if any (else empty).
    pub reason: String,
}

/// A line that could not be read: its number (from 1) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    pub line: usize,
    pub message: String,
}

/// What a health file says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthFile {
    /// By the key as written (`profile./endpoint`, `profile/endpoint` or `endpoint`); a
    /// key given twice takes its last line.
    pub entries: HashMap<String, FileStatus>,
    pub bad: Vec<BadLine>,
}

impl HealthFile {
    /// The status for an endpoint of the profile with absolute name `profile` (ending in
    /// a dot): its own line first, then its bare name's.
    pub fn lookup(&self, profile: &str, endpoint: &str) -> Option<&FileStatus> {
        let bare = profile.strip_suffix('.').unwrap_or(profile);
        let full = [format!("{profile}/{endpoint}"), format!("{bare}/{endpoint}")];
        full.iter().find_map(|k| self.entries.get(k)).or_else(|| self.entries.get(endpoint))
    }
}

/// Reads `text` (invalid UTF-8 is replaced, so a bad byte spoils one line only).
pub fn parse(text: &str) -> HealthFile {
    let mut out = HealthFile::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if line > MAX_LINES {
            let message = format!("more than {MAX_LINES} lines: the rest is ignored");
            out.bad.push(BadLine { line, message });
            break;
        }
        let content = raw.split_once('#').map_or(raw, |(before, _)| before).trim();
        if content.is_empty() {
            continue;
        }
        let (key, rest) = first_field(content);
        let (status, reason) = first_field(rest);
        let healthy = match status.to_ascii_lowercase().as_str() {
            "up" | "healthy" => true,
            "down" | "unhealthy" => false,
            "" => {
                let message = format!("{key:?} has no status (up, down, healthy or unhealthy)");
                out.bad.push(BadLine { line, message });
                continue;
            }
            other => {
                let message =
                    format!("status must be up, down, healthy or unhealthy, got {other:?}");
                out.bad.push(BadLine { line, message });
                continue;
            }
        };
        if !valid_key(key) {
            let message = format!("{key:?} is not PROFILE/ENDPOINT or ENDPOINT");
            out.bad.push(BadLine { line, message });
            continue;
        }
        let reason = truncate(reason, MAX_REASON).to_string();
        out.entries.insert(key.to_string(), FileStatus { healthy, reason });
    }
    out
}

/// The first whitespace-separated field of `s`, and the rest without leading white space.
fn first_field(s: &str) -> (&str, &str) {
    match s.split_once(char::is_whitespace) {
        Some((first, rest)) => (first, rest.trim_start()),
        None => (s, ""),
    }
}

/// `PROFILE/ENDPOINT` or `ENDPOINT`, the endpoint being a valid endpoint name.
fn valid_key(key: &str) -> bool {
    let (profile, endpoint) = key.rsplit_once('/').unwrap_or(("x", key));
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_".contains(&b))
    };
    !profile.is_empty() && !profile.contains('/') && name_ok(endpoint)
}

/// At most `max` bytes of `s`, cut at a character boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_statuses_and_bad_lines() {
        let text = "# status of the eu site\n\
                    www.tm.example.test./eu  down  disk full  # paged\n\
                    www.tm.example.test/us UP\n\
                    \n\
                    backup healthy\n\
                    api./eu maybe\n\
                    lonely\n\
                    a/b/c up\n\
                    Bad-Name down\n\
                    backup unhealthy later line wins\n";
        let f = parse(text);
        let st = |h: bool, r: &str| FileStatus { healthy: h, reason: r.into() };
        assert_eq!(f.entries.len(), 3, "{:?}", f.entries);
        assert_eq!(f.lookup("www.tm.example.test.", "eu"), Some(&st(false, "disk full")));
        assert_eq!(f.lookup("www.tm.example.test.", "us"), Some(&st(true, "")));
        // A bare name is every profile's endpoint of that name.
        assert_eq!(
            f.lookup("other.tm.example.test.", "backup"),
            Some(&st(false, "later line wins"))
        );
        assert_eq!(f.lookup("www.tm.example.test.", "asia"), None);
        let bad: Vec<usize> = f.bad.iter().map(|b| b.line).collect();
        assert_eq!(bad, vec![6, 7, 8, 9], "{:?}", f.bad);
        assert!(f.bad[0].message.contains("\"maybe\""), "{}", f.bad[0].message);
    }

    #[test]
    fn long_files_and_reasons_are_cut() {
        let text = "e up\n".repeat(MAX_LINES + 5);
        let f = parse(&text);
        assert_eq!(f.bad.len(), 1);
        assert_eq!(f.bad[0].line, MAX_LINES + 1);
        let long = format!("e down {}", "é".repeat(MAX_REASON));
        assert!(parse(&long).entries["e"].reason.len() <= MAX_REASON);
    }
}
