//! `cookies:`: the secrets of DNS server cookies, read from files of 32 hexadecimal digits
//! (16 bytes) so that replicas can share them. Without the block, each process makes a
//! random secret at start.

use std::path::Path;

use super::raw::{Loc, RawCookies};
use crate::diag::{self, Limit, Sink};
use crate::wire::cookie::Secrets;

pub fn build(sink: &mut Sink<'_>, raw: Option<&RawCookies>, base: &Path) -> Secrets {
    let Some(raw) = raw else { return Secrets::of_this_process() };
    let current = secret(sink, &raw.secret_file, base);
    let previous = raw.previous_secret_file.as_ref().and_then(|f| secret(sink, f, base));
    match current {
        Some(current) => Secrets { current, previous },
        None => Secrets::of_this_process(),
    }
}

/// Longest secret file read: the secret and some white space.
const SECRET_FILE_LIMIT: Limit =
    Limit { bytes: 4096, set_by: "the fixed limit for cookie secret files" };

fn secret(sink: &mut Sink<'_>, file: &Loc<String>, base: &Path) -> Option<[u8; 16]> {
    let path = base.join(&file.value);
    let text = match diag::read_limited(&path, SECRET_FILE_LIMIT) {
        Ok(t) => t,
        Err(e) => {
            sink.on(file, format!("cannot read the cookie secret {}: {e}", path.display()));
            return None;
        }
    };
    let parsed = parse_hex16(text.trim());
    if parsed.is_none() {
        sink.on(file, format!("{}: a cookie secret is 32 hexadecimal digits", path.display()));
    }
    parsed
}

fn parse_hex16(text: &str) -> Option<[u8; 16]> {
    if text.len() != 32 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_secrets() {
        let want = [
            0xe5, 0xe9, 0x73, 0xe5, 0xa6, 0xb2, 0xa4, 0x3f, 0x48, 0xe7, 0xdc, 0x84, 0x9e, 0x37,
            0xbf, 0xcf,
        ];
        assert_eq!(parse_hex16("e5e973e5a6b2a43f48e7dc849e37bfcf"), Some(want));
        assert_eq!(parse_hex16("E5E973E5A6B2A43F48E7DC849E37BFCF"), Some(want));
        for bad in
            ["", "e5e973", "e5e973e5a6b2a43f48e7dc849e37bfcf00", "g5e973e5a6b2a43f48e7dc849e37bfcf"]
        {
            assert_eq!(parse_hex16(bad), None, "{bad:?}");
        }
    }
}
