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
