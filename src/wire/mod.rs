//! The DNS wire format, and nothing else: names, record types and response codes, reading
//! a query and writing a response. No routing, no configuration: everything above builds
//! on it.

pub mod cookie;
pub mod dnssec;
pub mod name;
pub mod request;
pub mod response;
pub mod types;

pub use types::{Rcode, Rtype};

/// Bytes from hexadecimal digits (white space ignored), as RFCs print test vectors.
#[cfg(test)]
pub(crate) fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}
