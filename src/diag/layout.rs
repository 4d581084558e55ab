//! Layout mistakes in a YAML text that failed to parse: indentation that matches no
//! enclosing level, a key nested under a scalar, a tab in the indentation, `key:value`
//! without a space, `-item` without a space, a key written twice. The parser reports such
//! a mistake as whatever it met next (often a line earlier, or as a type error), so when a
//! parse fails, the text is read again line by line here to say what is wrong where it is.
//!
//! Block structure only: the insides of flow collections (`{ … }`, `[ … ]`), quoted
//! scalars spanning lines and block scalars (`|`, `>`) are skipped, never judged.

use std::collections::HashMap;

use super::Pos;

/// Every layout mistake found in `text` (whose first line is line `lines_before + 1` of
/// its file), in line order, each at the line and column of
/// the token it is about. Empty when the text's block structure looks right: the parser's
/// own error then stands.
pub fn mistakes(text: &str, lines_before: u32) -> Vec<(Pos, String)> {
    let mut scan = Scan::default();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let no = u32::try_from(i + 1).unwrap_or(u32::MAX).saturating_add(lines_before);
        scan.line(no, line);
    }
    scan.found
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Seq,
}

/// One open block collection: its column, kind, the line of its first entry, and (for a
/// mapping) the keys written so far with where.
struct Level {
    col: usize,
    kind: Kind,
    line: u32,
    keys: HashMap<String, Pos>,
}

/// What the previous entry left open for the next line.
#[derive(Clone)]
enum Open<'a> {
    /// Nothing: the next line continues the levels as they are.
    None,
    /// A key or a `-` without a value on its line: a deeper line is its value.
    Child { col: usize, after_key: bool },
    /// `key: value` or `- value` complete on its line (`shown` is how it was written).
    Value { line: u32, shown: &'a str, scalar: bool },
}

/// Text skipped over several lines.
#[derive(Clone, Copy)]
enum Skip {
    /// Block scalar content: lines indented deeper than `col`, and blank lines.
    Block { col: usize },
    /// A flow collection or a quoted scalar not closed on its line.
    Flow { depth: usize, quote: Option<char> },
}

#[derive(Default)]
struct Scan<'a> {
    levels: Vec<Level>,
    open: Option<Open<'a>>,
    skip: Option<Skip>,
    /// After a tab in the indentation, the structure is unknown until a line at column 0.
    lost: bool,
    /// The line being entered was misplaced and is read where it was likely meant: its key
    /// is not checked for duplicates, which would only repeat the mistake.
    misplaced: bool,
    found: Vec<(Pos, String)>,
}

/// The shape of one content line after its indentation.
struct Entry<'a> {
    /// Columns of the `- ` item markers at the line's start (`- - a` has two).
    dashes: Vec<usize>,
    /// Column of what follows the markers.
    col: usize,
    /// The key at `col`, if the rest is `key: …` or `key:`.
    key: Option<&'a str>,
    /// What follows the key's colon (or the whole rest without a key), comment removed.
    value: &'a str,
}

impl<'a> Scan<'a> {
    fn line(&mut self, no: u32, line: &'a str) {
        if self.skipped(line) {
            return;
        }
        let body = strip_comment(line);
        if body.trim().is_empty() {
            return;
        }
        let marker = |m: &str| {
            line.strip_prefix(m).is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
        };
        if marker("---") || marker("...") || line.starts_with('%') {
            self.levels.clear();
            self.open = None;
            self.lost = false;
            let rest = line.get(3..).unwrap_or("").trim();
            if marker("---") && !rest.is_empty() {
                self.after_value(no, rest, line.len() - rest.len(), "---");
            }
            return;
        }
        let lead = line.len() - line.trim_start_matches([' ', '\t']).len();
        if let Some(tab) = line[..lead].find('\t') {
            // One error for the lines that follow it too: they are likely tabbed alike.
            if !self.lost {
                let message = "indented with a tab; YAML indents with spaces only";
                self.at(no, tab, message.to_string());
            }
            self.lost = true;
            return;
        }
        if self.lost {
            if lead > 0 {
                return;
            }
            self.lost = false;
            self.levels.clear();
            self.open = None;
        }
        let entry = parse_entry(body, lead);
        self.place(no, line, entry);
    }

    /// Whether `line` belongs to a block scalar, flow collection or quoted scalar begun
    /// earlier (updating that state).
    fn skipped(&mut self, line: &str) -> bool {
        match self.skip {
            None => false,
            Some(Skip::Block { col }) => {
                let indent = line.len() - line.trim_start_matches(' ').len();
                if line.trim().is_empty() || indent > col {
                    return true;
                }
                self.skip = None;
                false
            }
            Some(Skip::Flow { depth, quote }) => {
                match flow_state(line, depth, quote) {
                    (0, None) => self.skip = None,
                    (depth, quote) => self.skip = Some(Skip::Flow { depth, quote }),
                }
                true
            }
        }
    }

    fn at(&mut self, line: u32, col: usize, message: String) {
        self.misplaced = true;
        let col = u32::try_from(col + 1).unwrap_or(u32::MAX);
        self.found.push((Pos { line, col }, message));
    }

    /// Fits one content line into the open levels, reporting where it does not fit.
    fn place(&mut self, no: u32, line: &'a str, mut e: Entry<'a>) {
        self.misplaced = false;
        // `-name: a`: a key starting with a dash, surely meant as a list item, and read as
        // one from here on.
        if e.dashes.is_empty()
            && let Some(rest) = e.key.unwrap_or(e.value).strip_prefix('-')
            && rest.starts_with(|ch: char| ch.is_ascii_alphabetic() || ch == '{' || ch == '[')
        {
            let c = e.col;
            let (was, fixed) = (written(line, c), written(line, c + 1));
            let message =
                format!("`{was}` needs a space after the dash to be a list item (`- {fixed}`)");
            self.at(no, c, message);
            self.misplaced = false;
            e = match e.key {
                Some(key) => Entry { dashes: vec![c], col: c + 1, key: Some(&key[1..]), ..e },
                None => Entry { dashes: vec![c], col: c + 1, value: &e.value[1..], ..e },
            };
        }
        let c = e.dashes.first().copied().unwrap_or(e.col);
        let is_item = !e.dashes.is_empty();
        let shown = Shown { key: e.key, text: &line[c..] };
        // `name:www`: one plain scalar, where a key was surely meant.
        if e.key.is_none()
            && let Some((k, v)) = glued_key(e.value)
        {
            let message = format!("`{k}:{v}` needs a space after the colon (`{k}: {v}`)");
            self.at(no, e.col, message);
        }
        let open = self.open.take().unwrap_or(Open::None);
        let top_col = self.levels.last().map(|l| l.col);
        match open {
            Open::Child { col, after_key } if c > col || (c == col && after_key && is_item) => {
                let kind = if is_item { Kind::Seq } else { Kind::Map };
                self.levels.push(Level { col: c, kind, line: no, keys: HashMap::new() });
                return self.enter(no, line, &e);
            }
            Open::Value { line: at, shown: prev, scalar } if top_col.is_some_and(|t| c > t) => {
                if scalar && !is_item && e.key.is_none() {
                    // The next line of a plain scalar written over several lines.
                    self.open = Some(Open::Value { line: at, shown: prev, scalar });
                    return;
                }
                if let Some(list) = self.levels.last().filter(|l| is_item && l.kind == Kind::Seq) {
                    let message = format!(
                        "`{shown}` is indented {} but the list items at line {} are at {}",
                        spaces(c),
                        list.line,
                        list.col
                    );
                    self.at(no, c, message);
                    return self.enter(no, line, &e);
                }
                let what = if scalar { "a scalar value" } else { "a value complete on its line" };
                let thing = if is_item { "a list item" } else { "a key" };
                self.at(
                    no,
                    c,
                    format!(
                        "`{prev}` (line {at}) then an indented `{shown}` — {thing} cannot be \
                         nested under {what}; did you mean to dedent it?"
                    ),
                );
                // Read on as if it were dedented to its siblings.
                return self.enter(no, line, &e);
            }
            _ => {}
        }
        let mut popped = None;
        while self.levels.last().is_some_and(|l| l.col > c) {
            popped = self.levels.pop();
        }
        let Some(top) = self.levels.last() else {
            if let Some(p) = popped.filter(|_| no > 1) {
                let message = format!(
                    "`{shown}` is indented {}, less than the document's first line \
                     (line {}, at {})",
                    spaces(c),
                    p.line,
                    p.col
                );
                self.at(no, c, message);
            }
            let kind = if is_item { Kind::Seq } else { Kind::Map };
            self.levels.push(Level { col: c, kind, line: no, keys: HashMap::new() });
            return self.enter(no, line, &e);
        };
        let (top_col, top_kind, top_line) = (top.col, top.kind, top.line);
        if top_col < c {
            // Between two levels: it belongs to neither.
            let message = match &popped {
                Some(p) => format!(
                    "`{shown}` is indented {}, which matches no enclosing level: its \
                     siblings at line {} are at {}, the {} at line {top_line} at {top_col}",
                    spaces(c),
                    p.line,
                    p.col,
                    if top_kind == Kind::Seq { "list" } else { "keys" },
                ),
                None => format!("`{shown}` is indented deeper than the line before it"),
            };
            self.at(no, c, message);
            if let Some(p) = popped {
                self.levels.push(p);
            }
            return self.enter(no, line, &e);
        }
        match (top_kind, is_item) {
            (Kind::Seq, false) => {
                // A compact list (`key:` then `- a` at the key's column) ends here.
                let below = self.levels.len().checked_sub(2).map(|i| &self.levels[i]);
                if below.is_some_and(|b| b.col == c && b.kind == Kind::Map) {
                    self.levels.pop();
                    return self.enter(no, line, &e);
                }
                let message = match &popped {
                    Some(p) if p.kind == Kind::Map => format!(
                        "`{shown}` is indented {} but its siblings at line {} are at {}",
                        spaces(c),
                        p.line,
                        p.col
                    ),
                    _ => format!(
                        "`{shown}` is indented {}, as the list items at line {top_line}, \
                         but is not a list item (`- `)",
                        spaces(c)
                    ),
                };
                self.at(no, c, message);
                if let Some(p) = popped.filter(|p| p.kind == Kind::Map) {
                    self.levels.push(p);
                }
                self.enter(no, line, &e)
            }
            (Kind::Map, true) => {
                let message = format!(
                    "list item `{shown}` is indented {}, as the keys at line {top_line}; \
                     a list goes under a key with no value of its own (`key:`)",
                    spaces(c)
                );
                self.at(no, c, message);
                self.levels.push(Level { col: c, kind: Kind::Seq, line: no, keys: HashMap::new() });
                self.enter(no, line, &e)
            }
            (Kind::Map, false) if e.key.is_none() && glued_key(e.value).is_none() => {
                // Among keys, a line that is no `key: value`: most often a lost colon.
                let keys = self.levels.last().is_some_and(|l| !l.keys.is_empty());
                if !keys {
                    return self.enter(no, line, &e);
                }
                let (key, value) = match e.value.split_once(' ') {
                    Some((first, rest)) => (first, rest.trim_start()),
                    None => (e.value, ""),
                };
                let fixed = format!("{key}: {value}");
                let message = format!(
                    "`{shown}` is not a `key: value` like the lines around it; is a colon \
                     missing (`{}`)?",
                    fixed.trim_end()
                );
                self.at(no, c, message);
                // Read on as if the colon were there.
                self.enter(no, line, &Entry { key: Some(key), value, dashes: Vec::new(), col: c })
            }
            _ => self.enter(no, line, &e),
        }
    }

    /// Records the entry in the innermost level (its key, for duplicates), opens the levels
    /// its own line starts (`- key: v` opens a mapping inside a list item), and notes what
    /// it leaves open for the next line.
    fn enter(&mut self, no: u32, line: &'a str, e: &Entry<'a>) {
        let misplaced = std::mem::take(&mut self.misplaced);
        for &dash in e.dashes.iter().skip(1) {
            self.levels.push(Level { col: dash, kind: Kind::Seq, line: no, keys: HashMap::new() });
        }
        let Some(key) = e.key else {
            let is_item = !e.dashes.is_empty();
            if is_item && strip_properties(e.value).is_empty() {
                let col = *e.dashes.last().expect("an item");
                self.open = Some(Open::Child { col, after_key: false });
            } else {
                let start = e.dashes.first().copied().unwrap_or(e.col);
                self.after_value(no, e.value, start, line[start..].trim_end());
            }
            return;
        };
        if !e.dashes.is_empty() {
            self.levels.push(Level { col: e.col, kind: Kind::Map, line: no, keys: HashMap::new() });
        }
        let name = unquote(key).to_string();
        let pos = Pos { line: no, col: u32::try_from(e.col + 1).unwrap_or(u32::MAX) };
        if let Some(level) = self.levels.last_mut().filter(|l| l.kind == Kind::Map && !misplaced) {
            if let Some(first) = level.keys.get(&name) {
                let message =
                    format!("duplicate key `{name}` (first at {}:{})", first.line, first.col);
                self.found.push((pos, message));
            } else {
                level.keys.insert(name, pos);
            }
        }
        if strip_properties(e.value).is_empty() {
            self.open = Some(Open::Child { col: e.col, after_key: true });
        } else {
            self.after_value(no, e.value, e.col, line[e.col..].trim_end());
        }
    }

    /// Notes what a value written on its line (`value`, the line's text from `col`) leaves
    /// open: a block scalar's lines, a flow collection or quoted scalar not closed yet, or
    /// nothing.
    fn after_value(&mut self, no: u32, value: &str, col: usize, written: &'a str) {
        let value = strip_properties(value);
        let shown = strip_comment(written).trim_end();
        if value.starts_with(['|', '>']) {
            self.skip = Some(Skip::Block { col });
            self.open = Some(Open::Value { line: no, shown, scalar: false });
            return;
        }
        if value.starts_with(['{', '[', '"', '\'']) {
            let (depth, quote) = flow_state(value, 0, None);
            if depth > 0 || quote.is_some() {
                self.skip = Some(Skip::Flow { depth, quote });
            }
        }
        let scalar = !value.starts_with(['{', '[']);
        self.open = Some(Open::Value { line: no, shown, scalar });
    }
}

/// Reads a content line (without its comment) indented `lead` spaces.
fn parse_entry(body: &str, lead: usize) -> Entry<'_> {
    let mut dashes = Vec::new();
    let mut col = lead;
    loop {
        let rest = &body[col..];
        if rest == "-" || rest.trim_end() == "-" {
            dashes.push(col);
            return Entry { dashes, col: body.trim_end().len(), key: None, value: "" };
        }
        if rest.starts_with("- ") || rest.starts_with("-\t") {
            dashes.push(col);
            col += 1 + (rest.len() - 1 - rest[1..].trim_start().len());
            continue;
        }
        break;
    }
    let rest = body[col..].trim_end();
    match split_key(rest) {
        Some((key, value)) => Entry { dashes, col, key: Some(key), value },
        None => Entry { dashes, col, key: None, value: rest },
    }
}

/// `key: value` or `key:` (plain or quoted key) into its key and value.
fn split_key(rest: &str) -> Option<(&str, &str)> {
    if rest.starts_with(['{', '[', '|', '>', '*', '!', '&', '?']) {
        return None;
    }
    let key_end = if let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let close = closing_quote(&rest[1..], q)?;
        let after = rest[close + 2..].trim_start();
        after.starts_with(':').then_some(rest.len() - after.len())?
    } else {
        let bytes = rest.as_bytes();
        (0..bytes.len()).find(|&i| {
            bytes[i] == b':' && bytes.get(i + 1).is_none_or(|b| *b == b' ' || *b == b'\t')
        })?
    };
    let key = rest[..key_end].trim_end();
    Some((key, rest[key_end + 1..].trim()))
}

/// The byte offset of the quote closing a scalar opened by `q`, in the text after it.
fn closing_quote(text: &str, q: char) -> Option<usize> {
    let mut chars = text.char_indices().peekable();
    while let Some((i, ch)) = chars.next() {
        match ch {
            '\\' if q == '"' => {
                chars.next();
            }
            c if c == q => {
                if q == '\'' && chars.peek().is_some_and(|(_, n)| *n == '\'') {
                    chars.next();
                    continue;
                }
                return Some(i);
            }
            _ => {}
        }
    }
    None
}

/// `name:www`: an identifier, a colon and a value with no space between them; not a URL
/// (`http://`), an IPv6 address (`2001:db8::1`, `fe80::1`) or a time (`10:30`).
fn glued_key(text: &str) -> Option<(&str, &str)> {
    let (k, v) = text.split_once(':')?;
    let ident = !k.is_empty()
        && k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        // Hexadecimal words are IPv6 groups: `fe80:1::`.
        && !k.chars().all(|c| c.is_ascii_hexdigit());
    let value = !v.is_empty() && !v.starts_with([':', '/', ' ', '\t']);
    (ident && value).then_some((k, v))
}

/// How a line was written, for a message: `key:` for a key, else the line from its
/// first token. Formatted only when a message is.
struct Shown<'a> {
    key: Option<&'a str>,
    text: &'a str,
}

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.key {
            Some(key) => write!(f, "{key}:"),
            None => f.write_str(&written(self.text, 0)),
        }
    }
}

/// An indentation, in words.
fn spaces(n: usize) -> String {
    if n == 1 { "1 space".to_string() } else { format!("{n} spaces") }
}

/// The value without its anchor (`&a`) and tag (`!!str`).
fn strip_properties(mut value: &str) -> &str {
    while value.starts_with(['&', '!']) {
        value = value.split_once([' ', '\t']).map_or("", |(_, rest)| rest.trim_start());
    }
    value
}

fn unquote(key: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = key.strip_prefix(q).and_then(|k| k.strip_suffix(q)) {
            return inner;
        }
    }
    key
}

/// How a line was written, from column `col`, for a message: its comment removed and
/// long lines cut.
fn written(line: &str, col: usize) -> String {
    let text = strip_comment(&line[col..]).trim_end();
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// The line without a trailing comment (`#` at the start or after a blank, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, ch) in line.char_indices() {
        match quote {
            Some(q) if ch == q => quote = None,
            Some(_) => {}
            None if ch == '#' && (prev == ' ' || prev == '\t') => return &line[..i],
            None if (ch == '"' || ch == '\'') && " \t[{,:-".contains(prev) => quote = Some(ch),
            None => {}
        }
        prev = ch;
    }
    line
}

/// The bracket depth and open quote after reading `text`, starting from `depth` and
/// `quote`. Comments end the reading of a line outside quotes.
fn flow_state(text: &str, mut depth: usize, mut quote: Option<char>) -> (usize, Option<char>) {
    let mut prev = ' ';
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        match quote {
            Some('"') if ch == '\\' => {
                chars.next();
            }
            Some(q) if ch == q => {
                if q == '\'' && chars.peek() == Some(&'\'') {
                    chars.next();
                } else {
                    quote = None;
                }
            }
            Some(_) => {}
            None => match ch {
                '#' if prev == ' ' || prev == '\t' => break,
                '"' | '\'' if " \t[{,:".contains(prev) => quote = Some(ch),
                '{' | '[' => depth += 1,
                '}' | ']' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        prev = ch;
    }
    (depth, quote)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<String> {
        mistakes(text, 0).into_iter().map(|(p, m)| format!("{}:{}: {m}", p.line, p.col)).collect()
    }

    /// Each mistake, as a new operator makes it in the shipped examples, named at its line.
    #[test]
    fn each_mistake_is_named_where_it_is() {
        let group =
            "name: accel\nrouting: groups\ngroups:\n  - name: beijing\n    location: cn-beijing\n";
        let cases: Vec<(String, &[&str])> = vec![
            (
                format!("{group}  traffic_dial: 50\n    endpoints: []\n"),
                &["6:3: `traffic_dial:` is indented 2 spaces but its siblings at line 4 are at 4"],
            ),
            (
                format!("{group}    traffic_dial: 50\n  endpoints:\n      - {{ name: a, target: 192.0.2.1 }}\n"),
                &["7:3: `endpoints:` is indented 2 spaces but its siblings at line 4 are at 4"],
            ),
            (
                format!("{group}    traffic_dial: 50\n   endpoints: []\n"),
                &["7:4: `endpoints:` is indented 3 spaces, which matches no enclosing level: \
                   its siblings at line 4 are at 4, the list at line 4 at 2"],
            ),
            (
                "name: www\nrouting: priority\nttl: 30\n  monitor:\n    port: 80\nendpoints: []\n".into(),
                &["4:3: `ttl: 30` (line 3) then an indented `monitor:` — a key cannot be nested \
                   under a scalar value; did you mean to dedent it?"],
            ),
            (
                "name: www\nrouting: priority\n endpoints: []\n".into(),
                &["3:2: `routing: priority` (line 2) then an indented `endpoints:` — a key cannot \
                   be nested under a scalar value; did you mean to dedent it?"],
            ),
            (
                "name:www\nrouting: priority\nendpoints:\n  - name: a\n    target:192.0.2.1\n".into(),
                &[
                    "1:1: `name:www` needs a space after the colon (`name: www`)",
                    "5:5: `target:192.0.2.1` needs a space after the colon (`target: 192.0.2.1`)",
                ],
            ),
            (
                "name: www\nrouting: priority\nendpoints:\n  -endpoint: a\n  -{ name: b }\n".into(),
                &[
                    "4:3: `-endpoint: a` needs a space after the dash to be a list item (`- endpoint: a`)",
                    "5:3: `-{ name: b }` needs a space after the dash to be a list item (`- { name: b }`)",
                ],
            ),
            (
                "name: www\nrouting: priority\nendpoints:\n\t- name: a\n\t  target: 192.0.2.1\nttl: x\n".into(),
                &["4:1: indented with a tab; YAML indents with spaces only"],
            ),
            (
                "name: www\nrouting: priority\nendpoints:\n  - name: a\n    target: 192.0.2.1\n    name: b\nname: x # again\n".into(),
                &["6:5: duplicate key `name` (first at 4:5)", "7:1: duplicate key `name` (first at 1:1)"],
            ),
            (
                "name: www\n\"routing\": priority\n'routing': weighted\n".into(),
                &["3:1: duplicate key `routing` (first at 2:1)"],
            ),
            (
                "name: www\nrouting: priority\n- a\n".into(),
                &["3:1: list item `- a` is indented 0 spaces, as the keys at line 1; a list goes \
                   under a key with no value of its own (`key:`)"],
            ),
            (
                "endpoints:\n  - { name: a }\n   - { name: b }\n".into(),
                &["3:4: `- { name: b }` is indented 3 spaces but the list items at line 2 are at 2"],
            ),
            (
                "endpoints:\n  - name: a\n    target: x\n  target: y\n".into(),
                &["4:3: `target:` is indented 2 spaces but its siblings at line 2 are at 4"],
            ),
            (
                "endpoints:\n  - a\n  b: 1\n".into(),
                &["3:3: `b:` is indented 2 spaces, as the list items at line 2, but is not a list item (`- `)"],
            ),
            (
                "name: www\nrouting priority\nendpoints: []\n".into(),
                &["2:1: `routing priority` is not a `key: value` like the lines around it; is a \
                   colon missing (`routing: priority`)?"],
            ),
            (
                "name: www\nrouting: priority\nendpoints\n  - { name: a }\n".into(),
                &["3:1: `endpoints` is not a `key: value` like the lines around it; is a colon \
                   missing (`endpoints:`)?"],
            ),
            (
                "a:\n  b: 1\n c: 2\n".into(),
                &["3:2: `c:` is indented 1 space, which matches no enclosing level: its siblings \
                   at line 2 are at 2, the keys at line 1 at 0"],
            ),
            // Every document is read on its own; a mistake in each is named.
            (
                "name: a\nname: b\n---\nname: c\n ttl: 1\n".into(),
                &[
                    "2:1: duplicate key `name` (first at 1:1)",
                    "5:2: `name: c` (line 4) then an indented `ttl:` — a key cannot be nested \
                     under a scalar value; did you mean to dedent it?",
                ],
            ),
        ];
        for (text, want) in &cases {
            assert_eq!(found(text), *want, "{text}");
        }
    }

    /// Whatever YAML allows is not a mistake, however it is laid out.
    #[test]
    fn valid_layouts_are_not_mistakes() {
        let texts = [
            "a: 1\nb:\n  c: 2\n  d:\n    - 1\n    - 2\ne: 3\n",
            "a:\n- 1\n- 2\nb: 3\n",
            "list:\n  - - 1\n    - 2\n  - - 3\n",
            "list:\n    - name: a\n      target: b\n    -\n      name: c\n",
            "text: |\n  line: one\n    deeper: two\n\n  - not an item\nnext: 1\n",
            "text: >-\n   folded\n  x: 1\n",
            "flow: { a: 1,\n  b: [1,\n 2] }\nnext: 2\n",
            "quoted: \"a\n  b: c\n d\"\nnext: 1\n",
            "single: 'it''s\n  x: y'\nnext: 1\n",
            "plain: one\n  two three\nnext: 1\n",
            "a: 1 # comment: here\n  # indented comment\nb: '# not a comment'\n",
            "anchor: &x\n  a: 1\nalias: *x\ntagged: !!str 5\n",
            "url: http://example.com/x\naddr: 2001:db8::1\nv6: [fe80::1, fd00:1::/64]\ntime: 10:30\n",
            "---\na: 1\n...\n---\n  b: 2\n  c: 3\n",
            "items:\n  - a: 1\n    b:\n      - x\n  - c: 2\n",
            "\"quoted key\": 1\n'other': 2\nkey with spaces: 3\n",
            "negative: -1\nlist:\n  - -2\n  - -.5\n",
            "headers:\n  Host: example.com\n  X-Token: abc\n",
        ];
        for text in texts {
            assert_eq!(found(text), Vec::<String>::new(), "{text}");
        }
    }

    /// Any text is read without a panic: every prefix of one that mixes every shape (and
    /// characters of several bytes) in every place.
    #[test]
    fn any_text_is_read() {
        let text = "\u{feff}name: \"é\\\"x\"\n -é: 'a''b\n  c'\n\t- ü\n  -{ a: [1,\n \"]\" ] }\n\
                    x:ü\n? k\n: v\n- - - é\n  | \n   é\n  >\n---\n- \u{a0}x: 1\n  \u{a0}y\n#é\n\r\n";
        let cuts = text.char_indices().map(|(i, _)| i).chain([text.len()]);
        for cut in cuts {
            mistakes(&text[..cut], 0);
            mistakes(&text[cut..], 7);
        }
    }

    /// Nothing the parser accepts is a mistake: every YAML file of the repository (the
    /// shipped configuration and profiles, test fixtures, fuzzing seeds) and every YAML
    /// example in the documentation that parses is read without one.
    #[test]
    fn nothing_the_parser_accepts_is_a_mistake() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else {
                    out.push(path);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in ["profiles", "docker", "geo-data", "fuzz/corpus", "tests/fixtures", "docs"] {
            walk(&root.join(dir), &mut files);
        }
        files.extend(["steerdns.yaml", "README.md"].map(|f| root.join(f)));
        let mut texts = Vec::new();
        for path in files {
            let name = path.to_string_lossy().to_string();
            if name.ends_with(".yaml") || name.ends_with(".yml") {
                texts.push((name, std::fs::read_to_string(&path).unwrap()));
            } else if name.ends_with(".md") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, block) in text.split("```yaml\n").skip(1).enumerate() {
                    let block = block.split("```").next().unwrap_or("");
                    texts.push((format!("{name} block {i}"), block.to_string()));
                }
            }
        }
        let mut read = 0;
        for (name, text) in &texts {
            if serde_saphyr::from_multiple::<serde_json::Value>(text).is_ok() {
                assert_eq!(found(text), Vec::<String>::new(), "{name}:\n{text}");
                read += 1;
            }
        }
        assert!(read >= 40, "only {read} of {} texts parsed", texts.len());
    }
}
