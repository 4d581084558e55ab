//! Test harness for steerdns integration tests: writes a configuration into a temporary
//! directory, starts a real `Server` on 127.0.0.1, and talks to it over real UDP and TCP
//! sockets and to its admin API over HTTP.

// Each test binary uses only part of the harness.
#![allow(dead_code)]

pub mod browser;
pub mod config_errors;
pub mod daemon;
pub mod dns;
pub mod etcd;
pub mod fixtures;
pub mod frames;
pub mod http;
pub mod knot;
pub mod named;
pub mod netns;
pub mod prometheus;
pub mod replicas;
pub mod reply;
pub mod resolver;
pub mod running;
pub mod serve;
pub mod server;
pub mod tools;
pub mod wire_cases;

// Everything at `common::`, for `use common::*;` (each binary uses only part of it).
#[allow(unused_imports)]
pub use self::{
    browser::*, config_errors::*, daemon::*, dns::*, etcd::*, fixtures::*, http::*, knot::*,
    named::*, prometheus::*, replicas::*, reply::*, resolver::*, running::*, serve::*, server::*,
    tools::*,
};
