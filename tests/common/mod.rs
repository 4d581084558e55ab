//! Test harness for steerdns integration tests: writes a configuration into a temporary
//! directory, starts a real `Server` on 127.0.0.1, and talks to it over real UDP and TCP
//! sockets and to its admin API over HTTP.

// Each test binary uses only part of the harness.
#![allow(dead_code)]

pub mod dns;
pub mod fixtures;
pub mod http;
pub mod prometheus;
pub mod reply;
pub mod resolver;
pub mod server;

// Everything at `common::`, for `use common::*;` (each binary uses only part of it).
#[allow(unused_imports)]
pub use self::{dns::*, fixtures::*, http::*, prometheus::*, reply::*, resolver::*, server::*};
